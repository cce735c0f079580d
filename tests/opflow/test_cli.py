"""The learning commands of the ``opflow`` console script, end to end in a temporary folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from opflow.cli import main

from learning_helpers import grid_dataset, tiny_config


@pytest.fixture()
def project(tmp_path: Path) -> dict:
    data = grid_dataset(tmp_path / "data" / "toy" / "r16.nc")
    cfg = tiny_config(epochs=3)
    cfg["evaluate"] = {"batch_size": 2, "n_plot_samples": 2}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    return {"root": tmp_path, "data": data, "cfg": tmp_path / "cfg.yaml"}


def test_run_config_prints_the_resolved_run(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run-config", "--config", str(project["cfg"]), "--dataset", "toy", "--model", "mlp"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["training"]["epochs"] == 3 and run["training"]["grad_clip"] == 0.1 and len(run["hash"]) == 16


def test_train_evaluate_show_end_to_end(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    root, cfg = project["root"], str(project["cfg"])
    model = root / "models" / "toy_mlp" / "model.pt"
    args = ["train", "--config", cfg, "--dataset", "toy", "--model", "mlp", "--data", str(project["data"]), "--output", str(model), "--no-progress"]
    assert main([*args, "--max-epochs-this-call", "2"]) == 0
    assert "stopped after epoch 2" in capsys.readouterr().err
    assert (root / "models" / "toy_mlp" / "checkpoint.pt").exists() and not model.exists()
    assert main(args) == 0  # resumes
    assert model.exists() and not (root / "models" / "toy_mlp" / "checkpoint.pt").exists()
    assert len((root / "models" / "toy_mlp" / "curves.csv").read_text().splitlines()) == 4

    out = root / "results" / "toy_mlp.json"
    ev = ["evaluate", str(model), "--data", str(project["data"]), "--out", str(out), "--config", cfg, "--threads", "1"]
    assert main([*ev, "--eval-set", f"again={project['data']}"]) == 0
    res = json.loads(out.read_text())
    assert res["epochs"] == 3 and res["inference"]["batch_size"] == 2  # evaluate: section read
    # an extra evaluation set with a split is scored on its test split: here the same samples
    assert res["eval_sets"]["again"]["split"] == "test"
    assert res["eval_sets"]["again"]["rel_l2_mean"] == pytest.approx(res["metrics"]["rel_l2_mean"], rel=1e-6)
    assert out.with_suffix(".png").exists()
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "rel_l2_mean" in shown and "parameters" in shown and "eval set again: rel L2 mean" in shown


def test_train_from_a_run_json_file_and_refusing_a_changed_run(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    root = project["root"]
    assert main(["run-config", "--config", str(project["cfg"]), "--dataset", "toy", "--model", "mlp"]) == 0
    run = json.loads(capsys.readouterr().out)
    (root / "run.json").write_text(json.dumps(run))
    base = ["train", "--data", str(project["data"]), "--out-dir", str(root / "m"), "--no-progress"]
    assert main([*base, "--run-json", f"@{root / 'run.json'}", "--max-epochs-this-call", "1"]) == 0
    run["training"]["batch_size"] = 2
    (root / "run2.json").write_text(json.dumps(run))
    capsys.readouterr()
    assert main([*base, "--run-json", f"@{root / 'run2.json'}"]) == 2
    err = capsys.readouterr().err
    assert "training.batch_size: 4 -> 2" in err and "--restart" in err
    assert main([*base, "--run-json", f"@{root / 'run2.json'}", "--restart-if-changed"]) == 0
    assert (root / "m" / "model.pt").exists()


def test_config_mistakes_exit_2_with_the_key_named(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = yaml.safe_load(project["cfg"].read_text())
    cfg["training"]["epoch"] = 3
    bad = project["root"] / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    assert main(["train", "--config", str(bad), "--dataset", "toy", "--model", "mlp", "--data", str(project["data"])]) == 2
    assert "training: unknown key(s) ['epoch']" in capsys.readouterr().err
    assert main(["train", "--data", str(project["data"])]) == 2
    assert "give either --run-json RUN or --config" in capsys.readouterr().err
    assert main(["evaluate", str(project["root"] / "none.pt"), "--data", str(project["data"]), "--out", str(project["root"] / "r.json")]) == 2
    assert "no such model file" in capsys.readouterr().err
    ev = ["evaluate", str(project["root"] / "none.pt"), "--data", str(project["data"]), "--out", str(project["root"] / "r.json")]
    assert main([*ev, "--eval-set", "a=x.nc", "--eval-set", "a=y.nc"]) == 2
    assert "--eval-set names repeat: ['a', 'a']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*ev, "--eval-set", "no-equals-sign"])
    assert "expected NAME=FILE" in capsys.readouterr().err
