"""Evaluation: the results JSON holds every promised field, in physical units, plus zero-shot and a PNG."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from opflow.config import resolve_run
from opflow.data.errors import DatasetError
from opflow.data.torch_data import GridDataset
from opflow.data.transforms import derive
from opflow.evaluate import evaluate, plot_indices
from opflow.inference import load_model
from opflow.models.base import count_parameters
from opflow.records import RecordError, Results
from opflow.runtime import choose_device
from opflow.train import train

from learning_helpers import grid_dataset, tiny_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A model trained on a 16 x 16 set strided from a 31 x 31 one (the zero-shot file)."""
    d = tmp_path_factory.mktemp("ev")
    fine = grid_dataset(d / "r31.nc", s=31)
    coarse = derive(fine, d / "r16.nc", resolution=16, n_train=12, n_test=4, name="toy")
    cfg = tiny_config(epochs=20, lr=1e-2, output_normalizer="pointwise")  # pointwise: exercises regridding
    run = resolve_run(cfg, "toy", "mlp", str(coarse))
    train(run, coarse, d / "model", progress=False)
    return {"dir": d, "fine": fine, "coarse": coarse, "model": d / "model" / "model.pt"}


@pytest.fixture(scope="module")
def result(trained: dict) -> dict:
    d = trained["dir"]
    return evaluate(trained["model"], trained["coarse"], d / "results" / "toy_mlp.json", zero_shot=[trained["fine"]],
                    png=d / "results" / "toy_mlp.png", config={"batch_size": 3, "warmup_batches": 1, "n_plot_samples": 3}, threads=1)


def test_results_json_has_every_field_with_sane_values(trained: dict, result: dict) -> None:
    on_disk = json.loads((trained["dir"] / "results" / "toy_mlp.json").read_text())
    assert on_disk == json.loads(json.dumps(result))
    assert list(on_disk) == list(Results.keys_written()) and on_disk["format_version"] == Results.FORMAT_VERSION
    assert Results.load(trained["dir"] / "results" / "toy_mlp.json").to_dict() == on_disk
    for key in ("dataset", "model", "run", "run_hash", "data_files", "parameters", "epochs", "train_time_s", "metrics", "zero_shot",
                "inference_time_per_sample_s", "peak_memory", "device", "versions", "git_commit"):
        assert key in result, key
    assert (result["dataset"], result["model"], result["epochs"], result["n_test"]) == ("toy", "mlp", 20, 4)
    assert result["run_hash"] == result["run"]["hash"] and result["run"]["training"]["epochs"] == 20
    model, _ = load_model(trained["model"])
    assert result["parameters"] == count_parameters(model) > 0
    assert result["train_time_s"] > 0 and result["inference_time_per_sample_s"] > 0
    assert result["inference"]["timed_batches"] == 2  # 4 test samples in batches of 3
    # the run's device is auto: the GPU where there is one (the peak is then the CUDA allocator's)
    dev = choose_device("auto")
    kind = "cuda_max_allocated" if dev.type == "cuda" else "cpu_peak_rss_delta"
    assert result["peak_memory"]["kind"] == kind and result["peak_memory"]["bytes"] >= 0
    assert result["device"] == str(dev) and {"torch", "numpy"} <= set(result["versions"])
    for path in (trained["coarse"], trained["fine"]):
        assert result["data_files"][str(path)]["sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    m = result["metrics"]
    assert 0 <= m["rel_l2_median"] <= m["rel_l2_max"] and m["rel_l2_std"] >= 0 and m["rel_l2_mean"] <= m["rel_l2_max"]
    assert m["per_channel"]["sol"]["mean"] == pytest.approx(m["rel_l2_mean"])  # one channel
    # measured 0.324: a pointwise MLP learns u ~ a but cannot represent the smoothing part of u;
    # predicting the training mean gives ~1, a broken decoder or normaliser far more
    assert 0.2 < m["rel_l2_mean"] < 0.4


def test_errors_are_in_physical_units(trained: dict, result: dict) -> None:
    """Recompute ||pred - u|| / ||u|| from the raw file and the decoded model output."""
    model, rec = load_model(trained["model"])
    from opflow.data.normalize import normalizer_from_state

    xn, yn = (normalizer_from_state(rec["normalizers"][k]) for k in ("inputs", "outputs"))
    ds = GridDataset(trained["coarse"], "test")
    with torch.no_grad():
        coords = ds.coords.expand(len(ds), -1, -1)
        pred = yn.decode(model(coords, xn.encode(ds.inputs))).double().numpy()[..., 0]
    u = ds.target.double().numpy()[..., 0]
    errs = np.linalg.norm(pred - u, axis=1) / np.linalg.norm(u, axis=1)
    assert result["metrics"]["rel_l2_mean"] == pytest.approx(errs.mean(), rel=1e-6)
    assert result["metrics"]["rel_l2_max"] == pytest.approx(errs.max(), rel=1e-6)
    assert result["metrics"]["rel_l2_median"] == pytest.approx(np.median(errs), rel=1e-6)


def test_errors_in_the_output_normaliser_units_are_reported_beside(trained: dict, result: dict) -> None:
    """``rel_l2_normalised_*``: ||enc(pred) - enc(u)|| / ||enc(u)|| with the run's output normaliser
    (the continuum-attention authors' metric for Lorenz-63: per-channel unit Gaussian)."""
    model, rec = load_model(trained["model"])
    from opflow.data.normalize import normalizer_from_state

    xn, yn = (normalizer_from_state(rec["normalizers"][k]) for k in ("inputs", "outputs"))
    ds = GridDataset(trained["coarse"], "test")
    with torch.no_grad():
        coords = ds.coords.expand(len(ds), -1, -1)
        out = model(coords, xn.encode(ds.inputs)).double().numpy()[..., 0]  # already in normalised units
    u = yn.encode(ds.target).double().numpy()[..., 0]
    errs = np.linalg.norm(out - u, axis=1) / np.linalg.norm(u, axis=1)
    m = result["metrics"]
    assert m["rel_l2_normalised_mean"] == pytest.approx(errs.mean(), rel=1e-5)
    assert m["rel_l2_normalised_median"] == pytest.approx(np.median(errs), rel=1e-5)
    assert m["rel_l2_normalised_max"] == pytest.approx(errs.max(), rel=1e-5)
    assert m["rel_l2_normalised_mean"] != pytest.approx(m["rel_l2_mean"], rel=1e-3)  # another measure
    assert "rel_l2_normalised_mean" in result["zero_shot"]["31"]


def test_zero_shot_at_the_fine_resolution(trained: dict, result: dict) -> None:
    zs = result["zero_shot"]
    assert list(zs) == ["31"]
    z = zs["31"]
    assert z["n_samples"] == 4 and z["file"] == str(trained["fine"]) and np.isfinite(z["rel_l2_mean"])
    # the same smooth test fields on a finer grid: a pointwise model errs alike (measured 0.310 vs 0.324)
    assert z["rel_l2_mean"] == pytest.approx(result["metrics"]["rel_l2_mean"], rel=0.15)
    assert result["data_files"][str(trained["fine"])]["grid_shape"] == [31, 31]


def test_png_is_written(trained: dict, result: dict) -> None:
    png = trained["dir"] / "results" / "toy_mlp.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert result["plot"] == str(png)


def test_plot_indices_pick_median_then_worst() -> None:
    e = np.array([0.3, 0.1, 0.9, 0.2, 0.5])
    assert plot_indices(e, 2) == [0, 2]  # median 0.3 (index 0), worst 0.9 (index 2)
    assert plot_indices(e, 3) == [0, 4, 2]
    assert plot_indices(e, 0) == [] and plot_indices(e, 1) == [0]


def test_a_file_without_the_task_variables_is_refused(trained: dict, tmp_path: Path) -> None:
    from opflow.data.format import Variable, read_dataset, write_dataset

    ds = read_dataset(trained["coarse"])
    vars_ = {k: v for k, v in ds.variables.items() if k != "sol"}
    vars_["pressure"] = Variable(ds.variables["sol"].dims, ds["sol"], {**ds.variables["sol"].attrs})
    bad = write_dataset(tmp_path / "bad.nc", vars_, {k: v for k, v in ds.attrs.items() if k != "opflow_format"})
    with pytest.raises(DatasetError, match=r"task outputs \['sol'\] are not variables of the file"):
        evaluate(trained["model"], bad, tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()


def test_evaluation_does_not_import_training() -> None:
    """One inference path: evaluate loads and runs models through opflow.inference, never opflow.train."""
    code = "import json, sys, opflow.evaluate; print(json.dumps([m for m in sys.modules if m.startswith('opflow.')]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(out.stdout)
    assert "opflow.inference" in loaded and "opflow.records" in loaded
    assert "opflow.train" not in loaded


def test_a_damaged_or_old_model_file_is_refused_naming_it(trained: dict, tmp_path: Path) -> None:
    cut = tmp_path / "cut.pt"
    cut.write_bytes(trained["model"].read_bytes()[:1000])
    with pytest.raises(RecordError, match=rf"^{cut}: cannot be read as a model file, it is damaged or truncated"):
        evaluate(cut, trained["coarse"], tmp_path / "r.json")
    old = torch.load(trained["model"], weights_only=False)
    del old["format_version"]
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(RecordError, match=r"old\.pt: not an opflow model file of format version 2 .*found no format_version.*retrain it"):
        evaluate(tmp_path / "old.pt", trained["coarse"], tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()
