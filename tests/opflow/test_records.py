"""Typed records of model.pt and the results JSON: same keys as before plus a version, strict reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from opflow.data.errors import DatasetError
from opflow.records import ModelRecord, RecordError, Results

# the keys model.pt and the results JSON held before the records were typed: readers index them
MODEL_KEYS_BEFORE = {
    "format", "dataset", "model", "model_config", "model_build", "arch", "state_dict", "normalizers", "task", "view", "run",
    "run_hash", "data_fingerprint", "train_time_s", "epochs", "device", "device_name", "world_size", "parameters", "curves",
    "final_train_loss", "final_test_rel_l2", "created",
}
RESULTS_KEYS_BEFORE = {
    "format", "dataset", "model", "arch", "view", "run", "run_hash", "data_files", "training_data_fingerprint", "parameters",
    "epochs", "train_time_s", "train_device", "train_device_name", "train_world_size", "final_train_loss", "n_test", "resolution",
    "metrics", "zero_shot", "eval_sets", "inference_time_per_sample_s", "inference", "peak_memory", "device", "device_name",
    "threads", "versions", "git_commit", "created", "plot", "model_file",
}


def model_record() -> ModelRecord:
    return ModelRecord(
        dataset="toy", model="mlp", arch="mlp", model_config={"arch": "mlp", "width": 4},
        model_build={"in_channels": 1, "out_channels": 1, "coord_dim": 2},
        state_dict={"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(2)},
        normalizers={"inputs": {"kind": "unit_gaussian", "mean": torch.ones(1)}},
        task={"inputs": ["coeff"], "outputs": ["sol"], "in_channels": 1}, view=None,
        run={"dataset": "toy", "hash": "abc"}, run_hash="abc", data_fingerprint={"params_hash": "p"},
        train_time_s=1.5, epochs=2, device="cpu", device_name="cpu", world_size=1, parameters=8,
        curves=[{"epoch": 1, "train_loss": 0.5, "test_rel_l2": None}], final_train_loss=0.5, final_test_rel_l2=None,
        created="2025-01-01T00:00:00+00:00",
    )


def results() -> Results:
    return Results(
        dataset="toy", model="mlp", arch="mlp", view={"kind": "grid"}, run={"hash": "abc"}, run_hash="abc",
        data_files={"d.nc": {"sha256": "0" * 64, "role": "test"}}, training_data_fingerprint=None, parameters=8, epochs=2,
        train_time_s=1.5, train_device="cpu", train_device_name="cpu", train_world_size=1, final_train_loss=0.5, n_test=4,
        resolution="16", metrics={"rel_l2_mean": 0.1, "per_channel": {"sol": {"mean": 0.1}}}, zero_shot={}, eval_sets={},
        inference_time_per_sample_s=1e-3, inference={"batch_size": 2}, peak_memory={"bytes": 0}, device="cpu", device_name="cpu",
        threads=1, versions={"torch": "x"}, git_commit=None, created="2025-01-01T00:00:00+00:00", plot=None, model_file="m.pt",
    )


def test_keys_are_those_of_before_plus_format_version() -> None:
    assert set(ModelRecord.keys_written()) == MODEL_KEYS_BEFORE | {"format_version"}
    assert set(Results.keys_written()) == RESULTS_KEYS_BEFORE | {"format_version"}
    assert isinstance(ModelRecord.FORMAT_VERSION, int) and isinstance(Results.FORMAT_VERSION, int)
    d = results().to_dict()
    assert list(d)[:2] == ["format", "format_version"] and d["format"] == f"opflow-results/{Results.FORMAT_VERSION}"


def test_model_record_round_trip_through_the_file(tmp_path: Path) -> None:
    rec = model_record()
    path = rec.save(tmp_path / "m" / "model.pt")
    assert [p.name for p in path.parent.iterdir()] == ["model.pt"]  # no temporary left
    raw = torch.load(path, weights_only=False)
    assert isinstance(raw, dict) and set(raw) == MODEL_KEYS_BEFORE | {"format_version"}
    assert raw["format_version"] == ModelRecord.FORMAT_VERSION
    back = ModelRecord.load(path)
    for name in ModelRecord.field_names():
        if name != "state_dict" and name != "normalizers":
            assert getattr(back, name) == getattr(rec, name), name
    assert back.state_dict.keys() == rec.state_dict.keys() and all(torch.equal(back.state_dict[k], v) for k, v in rec.state_dict.items())
    assert torch.equal(back.normalizers["inputs"]["mean"], torch.ones(1))
    # it still reads like the dict model.pt used to be
    assert back["task"] is back.task and "epochs" in back and "nope" not in back and back.get("view", 1) is None
    assert set(back) == MODEL_KEYS_BEFORE | {"format_version"} and len(back) == len(MODEL_KEYS_BEFORE) + 1
    with pytest.raises(KeyError):
        back["nope"]


def test_the_view_to_read_data_with_is_the_recorded_one_else_the_kind_the_task_names() -> None:
    """Evaluation and ``opflow scales`` read the data through the same view as the training (one rule, here)."""
    import dataclasses

    rec = model_record()
    assert rec.trained_view() is None  # neither recorded: the dataset's default view
    old = dataclasses.replace(rec, task={**rec.task, "view_kind": "window"})
    assert old.trained_view() == {"kind": "window"}  # a file from before views were recorded
    assert dataclasses.replace(old, view={"kind": "grid"}).trained_view() == {"kind": "grid"}  # the recorded one wins


def test_results_round_trip_through_json(tmp_path: Path) -> None:
    r = results()
    path = r.save(tmp_path / "r.json")
    on_disk = json.loads(path.read_text())
    assert on_disk == r.to_dict() and on_disk["format_version"] == Results.FORMAT_VERSION
    assert Results.load(path).to_dict() == r.to_dict()
    assert Results.from_dict(on_disk).to_dict() == on_disk


@pytest.mark.parametrize("version", [None, 1, 3])
def test_an_old_model_file_gets_one_clear_line(tmp_path: Path, version: int | None) -> None:
    d = model_record().to_dict()
    if version is None:  # what model.pt looked like before the records were versioned
        del d["format_version"]
        d["format"] = "opflow-model/1"
    else:
        d["format_version"] = version
    torch.save(d, tmp_path / "model.pt")
    with pytest.raises(RecordError) as e:
        ModelRecord.load(tmp_path / "model.pt")
    msg = str(e.value)
    assert isinstance(e.value, DatasetError) and "\n" not in msg
    assert msg.startswith(f"{tmp_path / 'model.pt'}: not an opflow model file of format version {ModelRecord.FORMAT_VERSION}")
    if version is None:
        assert "found no format_version (format 'opflow-model/1': written by an older opflow)" in msg
        assert "missing keys [format_version]" in msg
    else:
        assert f"found format_version {version}" in msg and "missing keys" not in msg
    assert "retrain it" in msg


def test_a_foreign_results_json_gets_one_clear_line(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_text('{"a": 1}')
    with pytest.raises(RecordError) as e:
        Results.load(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: not an opflow results file of format version {Results.FORMAT_VERSION} (opflow-results/2): found no format_version;")
    assert "unknown keys [a]" in msg and "missing keys [arch, created, data_files, dataset, device, device_name] (+27 more)" in msg
    assert "\n" not in msg and "re-evaluate" in msg
    # a results file with one key too many or too few is refused too, naming the key
    d = results().to_dict()
    with pytest.raises(RecordError, match=r"r\.json: .*found format_version 2; unknown keys \[extra\]"):
        Results.from_dict({**d, "extra": 0}, f)
    del d["metrics"]
    with pytest.raises(RecordError, match=r"found format_version 2; missing keys \[metrics\];"):
        Results.from_dict(d, f)
    with pytest.raises(RecordError, match=r"r\.json: not an opflow results file \(it holds a list"):
        Results.from_dict([1, 2], f)


def test_damaged_files_get_one_clear_line(tmp_path: Path) -> None:
    good = results().save(tmp_path / "good.json").read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(good[: len(good) // 2])
    with pytest.raises(RecordError, match=r"^.*cut\.json: not valid JSON, truncated or damaged \(.* at line \d+ column \d+\); re-evaluate"):
        Results.load(cut)
    with pytest.raises(RecordError, match=r"none\.json: cannot read it \(No such file or directory\)"):
        Results.load(tmp_path / "none.json")
    model_record().save(tmp_path / "model.pt")
    pt = tmp_path / "cut.pt"
    pt.write_bytes((tmp_path / "model.pt").read_bytes()[:200])
    with pytest.raises(RecordError) as e:
        ModelRecord.load(pt)
    assert str(e.value).startswith(f"{pt}: cannot be read as a model file, it is damaged or truncated (") and "\n" not in str(e.value)
    with pytest.raises(RecordError, match="no such model file; train it first"):
        ModelRecord.load(tmp_path / "none.pt")
