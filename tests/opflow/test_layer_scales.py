"""``opflow scales``: each block's output scale on a few test samples, from a checkpoint or a model file; a dead
layer (the collapse of a run to a constant output) shows as zero dependence on the input from that layer on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from opflow.cli import main
from opflow.data.errors import ConfigError
from opflow.layer_scales import scales
from opflow.train import CHECKPOINT_NAME, train
from learning_helpers import grid_dataset, toy_run

MLP_MODULES = ["net.0", "net.1", "net.2", "net.3", "net.4", "net.5", "net"]  # PointMLP's forward order, then the whole


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(data, checkpoint after epoch 1 of 2, model file of the finished run)."""
    root = tmp_path_factory.mktemp("scales")
    data = grid_dataset(root / "toy.nc")
    run = toy_run(data, "mlp", epochs=2, lr=1e-2)
    train(run, data, root / "cut", progress=False, max_epochs_this_call=1)
    done = train(run, data, root / "full", progress=False)
    return data, root / "cut" / CHECKPOINT_NAME, done.model_path


def test_a_checkpoint_and_a_model_file_give_one_row_per_module_in_forward_order(trained: tuple[Path, Path, Path]) -> None:
    data, checkpoint, model = trained
    for path in (checkpoint, model):
        r = scales(path, data, samples=3)
        assert r["samples"] == 3 and [m["module"] for m in r["modules"]] == MLP_MODULES
        for row in r["modules"]:
            assert row["mean_abs"] > 0 and 0 < row["dependence"] == pytest.approx(row["across_samples"] / row["mean_abs"])


def test_an_attention_model_gives_finite_rows_that_depend_on_the_input(trained: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The tiny ONO of the tests (orthogonal attention, its own sub-modules returning tuples are skipped)."""
    data = trained[0]
    res = train(toy_run(data, "ono", epochs=1), data, tmp_path, progress=False)
    rows = scales(res.model_path, data, samples=3)["modules"]
    assert len(rows) >= 5 and all(math.isfinite(r["mean_abs"]) and math.isfinite(r["dependence"]) for r in rows)
    assert rows[-1]["dependence"] > 0


def test_a_dead_hidden_layer_shows_as_zero_dependence_from_there_on(trained: tuple[Path, Path, Path], tmp_path: Path) -> None:
    data, checkpoint, _ = trained
    ck = torch.load(checkpoint, weights_only=False)
    ck["model"]["net.3.bias"] = torch.full_like(ck["model"]["net.3.bias"], -1e6)  # every unit far below GELU's knee
    dead = tmp_path / CHECKPOINT_NAME
    torch.save(ck, dead)
    rows = {m["module"]: m for m in scales(dead, data)["modules"]}
    assert rows["net.2"]["dependence"] > 0.1  # the input still reaches the layer
    assert rows["net.4"]["mean_abs"] == 0 and rows["net.4"]["dependence"] == 0
    assert rows["net.5"]["dependence"] == 0 and rows["net.5"]["mean_abs"] == pytest.approx(abs(float(ck["model"]["net.5.bias"])))


def test_the_command_prints_the_table_writes_json_and_draws_it(trained: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, checkpoint, model = trained
    out, png = tmp_path / "scales.json", tmp_path / "scales.png"
    assert main(["scales", str(checkpoint), str(model), "--data", str(data), "--samples", "2", "--json", str(out),
                 "--png", str(png), "--labels", "epoch 1", "epoch 2", "--title", "toy"]) == 0
    text = capsys.readouterr().out
    assert "mean |y|" in text and "net.4" in text and str(model) in text
    written = json.loads(out.read_text())
    assert [w["file"] for w in written] == [str(checkpoint), str(model)] and written[0]["samples"] == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_refused_with_the_fix(trained: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, checkpoint, _ = trained
    with pytest.raises(ConfigError, match="at least 2"):
        scales(checkpoint, data, samples=1)
    junk = tmp_path / "junk.pt"
    junk.write_text("not torch")
    with pytest.raises(ConfigError, match=r"junk\.pt: not a torch file .*checkpoint\.pt"):
        scales(junk, data)
    assert main(["scales", str(checkpoint), "--data", str(data), "--depth", "0"]) == 2
    assert "--depth 0: at least 1" in capsys.readouterr().err
    assert main(["scales", str(checkpoint), "--data", str(data), "--labels", "a", "b"]) == 2
    assert "--labels: 2 label(s) for 1 file(s)" in capsys.readouterr().err
