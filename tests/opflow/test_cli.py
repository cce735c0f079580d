"""The learning commands of the ``opflow`` console script, end to end in a temporary folder."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from opflow.cli import build_parser, main

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


def test_train_into_a_folder_with_the_finished_model_does_nothing_unless_restart(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    root = project["root"]
    out = root / "models" / "toy_mlp"
    args = ["train", "--config", str(project["cfg"]), "--dataset", "toy", "--model", "mlp", "--data", str(project["data"]),
            "--out-dir", str(out), "--no-progress", "--threads", "1"]  # fmt: skip
    assert main(args) == 0
    model = out / "model.pt"
    before = model.read_bytes()
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"opflow: {out}: already trained: {model} holds this run, finished (3 of 3 epochs")
    assert err[0].endswith("nothing to do. To train it again from scratch, rerun with --restart")
    assert model.read_bytes() == before
    # a changed config is refused (exit 2), naming the key
    cfg = yaml.safe_load(project["cfg"].read_text())
    cfg["training"]["epochs"] = 4
    (root / "cfg4.yaml").write_text(yaml.safe_dump(cfg))
    changed = [a if a != str(project["cfg"]) else str(root / "cfg4.yaml") for a in args]
    assert main(changed) == 2
    err = capsys.readouterr().err
    assert f"opflow: {model} is a finished model of another run; differing: training.epochs: 3 -> 4." in err and "--restart" in err
    assert model.read_bytes() == before
    assert main([*changed, "--restart"]) == 0
    assert "already trained" not in capsys.readouterr().err and model.read_bytes() != before


def test_a_config_file_that_is_not_a_yaml_mapping_is_named(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """Snakemake says 'Config file must be given as JSON or YAML with keys at top level' without the
    file's name, before the Snakefile runs (nothing of the workflow can check first); the CLI names it.
    Before (issue 39) a file that is not YAML at all ended ``opflow train --config`` in a traceback."""
    listed, broken = project["root"] / "list.yaml", project["root"] / "broken.yaml"
    listed.write_text("- a\n- b\n")
    broken.write_text("training: {epochs: 3\n")
    args = ["run-config", "--dataset", "toy", "--model", "mlp", "--config", str(project["cfg"])]
    assert main([*args, str(listed)]) == 2
    assert capsys.readouterr().err == f"opflow: {listed}: a config file holds a mapping of keys at top level (root, sources, datasets, models, training, ...), not a list\n"
    assert main([*args, str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"opflow: {broken}: not a valid YAML file (") and err.count("\n") == 1 and "Traceback" not in err, err


def test_an_interrupted_restart_prints_the_command_that_resumes_it_and_keeps_the_folder_consistent(
    project: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before (issue 39): ``resume with the same command``, which discarded the checkpoint again, and
    curves.* of the 2 new epochs beside the kept model.pt of the old run."""
    import shlex

    from opflow.records import ModelRecord

    out = project["root"] / "models" / "toy_mlp"
    args = ["train", "--config", str(project["cfg"]), "--dataset", "toy", "--model", "mlp", "--data", str(project["data"]),
            "--out-dir", str(out), "--no-progress", "--threads", "1"]  # fmt: skip
    assert main(args) == 0
    model = out / "model.pt"
    kept = {f: (out / f).read_bytes() for f in ("model.pt", "curves.csv", "curves.json", "curves.png")}
    capsys.readouterr()

    restart = [*args, "--restart", "--max-epochs-this-call", "2"]
    assert main(restart) == 0
    resume = shlex.join(["opflow", *args, "--max-epochs-this-call", "2"])
    assert f"stopped after epoch 2; resume without --restart: {resume} ({out / 'checkpoint.pt'})" in capsys.readouterr().err.splitlines()
    assert {f: (out / f).read_bytes() for f in kept} == kept, "model.pt and the curves that describe it are kept as they were"
    assert [c["epoch"] for c in json.loads((out / "checkpoint-curves.json").read_text())] == [1, 2]
    assert (out / "checkpoint-curves.csv").exists() and (out / "checkpoint-curves.png").exists()

    assert main(shlex.split(resume)[1:]) == 0  # the printed command resumes: epoch 3 of 3, and the run completes
    assert "--- resumed at epoch 2 (" in (out / "train.log").read_text()
    assert ModelRecord.load(model).epochs == 3 and model.read_bytes() != kept["model.pt"]
    assert [c["epoch"] for c in json.loads((out / "curves.json").read_text())] == [1, 2, 3]
    assert json.loads((out / "curves.json").read_text()) == ModelRecord.load(model).curves
    assert sorted(p.name for p in out.iterdir()) == ["curves.csv", "curves.json", "curves.png", "model.pt", "train.log"]


def test_config_mistakes_exit_2_with_the_key_named(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = yaml.safe_load(project["cfg"].read_text())
    cfg["training"]["epoch"] = 3
    bad = project["root"] / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    assert main(["train", "--config", str(bad), "--dataset", "toy", "--model", "mlp", "--data", str(project["data"])]) == 2
    assert "training: unknown key 'epoch'; allowed: " in capsys.readouterr().err
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


ROOT = Path(__file__).resolve().parents[2]


def test_a_profile_overlay_alone_is_named_as_one_with_the_base_to_put_first(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``sources.darcy_piecewise: missing required key 'solver'`` and nothing more (issue 39).
    Snakemake reads config/default.yaml first; ``--config`` merges exactly the files given."""
    quick = str(ROOT / "config" / "quick.yaml")
    args = ["run-config", "--dataset", "darcy", "--model", "ono"]
    assert main([*args, "--config", quick]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"opflow: {quick}: a required key is missing, so this file is an overlay of the workflow's base config "), err
    assert err[0].endswith(f"config/default.yaml {quick}") and "give --config " in err[0], err
    assert "sources.darcy_piecewise: missing required key 'solver'" in err[1]
    assert main([*args, "--config", str(ROOT / "config" / "default.yaml"), quick]) == 0  # what the line says to do
    assert json.loads(capsys.readouterr().out)["data"]["resolution"] == 43  # the quick size


def opflow_subprocess(*args: str) -> subprocess.CompletedProcess:
    """The console script as a user runs it: a traceback would show in its stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "opflow.cli", *args], capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)


def test_show_refuses_truncated_foreign_and_missing_files_in_one_line_each(project: dict) -> None:
    root = project["root"]
    (root / "cut.json").write_text('{"format": "opflow-results/2", "dataset": "to')
    (root / "foreign.json").write_text('{"a": 1}')
    (root / "list.json").write_text("[1, 2]")
    files = [root / "cut.json", root / "foreign.json", root / "list.json", root / "none.json"]
    out = opflow_subprocess("show", *map(str, files))
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 4 and "Traceback" not in out.stderr, out.stderr
    for f, line in zip(files, lines, strict=True):
        assert line.startswith(f"opflow: {f}: "), line
    assert "not valid JSON, truncated or damaged" in lines[0]
    assert "not an opflow results file" in lines[1] and "unknown keys [a]" in lines[1]
    assert "it holds a list" in lines[2] and "No such file" in lines[3]


def test_evaluate_refuses_a_damaged_model_file_in_one_line(project: dict) -> None:
    root = project["root"]
    bad = root / "model.pt"
    bad.write_bytes(b"PK\x03\x04 not really a torch file")
    out = opflow_subprocess("evaluate", str(bad), "--data", str(project["data"]), "--out", str(root / "r.json"), "--no-png")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"opflow: {bad}: cannot be read as a model file"), lines
    assert not (root / "r.json").exists()


def test_evaluate_names_a_truncated_eval_config_file(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    root = project["root"]
    (root / "ev.json").write_text('{"batch_size": ')
    ev = ["evaluate", str(root / "none.pt"), "--data", str(project["data"]), "--out", str(root / "r.json"), "--eval-config", f"@{root / 'ev.json'}"]
    assert main(ev) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"opflow: {root / 'ev.json'}: not valid JSON, truncated or damaged") and err.count("\n") == 1


def test_train_into_a_folder_another_training_holds_fails_at_once(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = project["root"] / "m"
    out_dir.mkdir()
    args = ["train", "--config", str(project["cfg"]), "--dataset", "toy", "--model", "mlp", "--data", str(project["data"]),
            "--out-dir", str(out_dir), "--no-progress"]
    with open(out_dir / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"opflow: {out_dir}: another training holds this folder (lock {out_dir / '.lock'})") and err.count("\n") == 1
        assert sorted(p.name for p in out_dir.iterdir()) == [".lock"]
    assert main(args) == 0 and (out_dir / "model.pt").exists()


def test_every_positional_argument_has_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {"inspect", "validate", "merge", "derive", "show", "run-config", "train", "evaluate"} <= set(sub.choices)
    for name, parser in sub.choices.items():
        positionals = [a for a in parser._actions if not a.option_strings]
        with pytest.raises(SystemExit):
            main([name, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "positional arguments:" in text or not positionals, name
        for a in positionals:
            assert a.help and len(a.help) > 10, (name, a.dest)
            assert f"{a.metavar or a.dest} {' '.join(a.help.split())}" in text, (name, a.dest, text)


def test_schema_prints_the_json_schema_of_the_typed_config(capsys) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "WorkflowConfig" and "TrainConfig" in schema["$defs"]


def test_train_refuses_a_model_that_does_not_fit_the_data_with_exit_2(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """The check the workflow runs at load (opflow.compat), on the data the trainer loaded: one line, exit 2, before any epoch."""
    from learning_helpers import cloud_dataset

    cfg = yaml.safe_load(project["cfg"].read_text())
    cfg["models"]["fno"] = {"arch": "fno", "modes": 4, "width": 4}
    cfg["models"]["vitno"] = {"arch": "vitno", "patches_per_side": 5, "width": 8, "n_heads": 2, "smoothing_modes": 0}
    path = project["root"] / "fit.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cloud = cloud_dataset(project["root"] / "cloud.nc", [20, 20, 20, 20], code=True)
    base = ["train", "--config", str(path), "--dataset", "toy", "--out-dir", str(project["root"] / "m")]
    assert main([*base, "--model", "fno", "--data", str(cloud)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"opflow: toy_fno: models.fno (fno) on datasets.toy (file {cloud}): fno needs a regular grid, but it is a 2-D point cloud (view mesh)")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main([*base, "--model", "vitno", "--data", str(project["data"])]) == 2
    assert "patches_per_side 5 does not divide the 16 points of grid axis 0" in capsys.readouterr().err
    assert not (project["root"] / "m" / "checkpoint.pt").exists()


def test_train_refuses_non_finite_training_data_with_exit_2(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    from netCDF4 import Dataset as NC

    with NC(project["data"], "a") as nc:
        sol = nc.variables["sol"][:]
        sol[5, 3, 3] = float("nan")
        nc.variables["sol"][:] = sol
    args = ["train", "--config", str(project["cfg"]), "--dataset", "toy", "--model", "mlp", "--data", str(project["data"]), "--out-dir", str(project["root"] / "m")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"opflow: {project['data']}: variable 'sol' has 1 non-finite value(s) in 1 of 12 samples of the train split, the first at position 5" in err


def test_show_names_a_null_metrics_section_and_files_of_other_kinds(project: dict) -> None:
    """Before: ``metrics: null`` and a binary file crashed ``opflow show`` with a traceback."""
    root = project["root"]
    good = json.loads((ROOT / "published" / "burgers512_fno1d" / "result.json").read_text())
    (root / "null.json").write_text(json.dumps({**good, "metrics": None}))
    (root / "blob.bin").write_bytes(bytes(range(256)) * 8)
    files = [root / "null.json", project["data"], root / "blob.bin"]
    out = opflow_subprocess("show", *map(str, files))
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert lines == [
        f"opflow: {root / 'null.json'}: 'metrics' is null, not a mapping of metric values: the file is damaged or was edited; "
        "re-evaluate (delete it and rerun opflow evaluate, or its snakemake target)",
        f"opflow: {project['data']}: not an opflow results JSON but a NetCDF dataset file; summarise it with "
        f"`opflow inspect {project['data']}`, check it with `opflow validate {project['data']}`",
        f"opflow: {root / 'blob.bin'}: not an opflow results JSON but a binary file of unknown format",
    ], lines


def test_show_prints_string_metrics_and_names_those_it_does_not_print(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a string metric (a note) was dropped silently."""
    good = json.loads((ROOT / "published" / "burgers512_fno1d" / "result.json").read_text())
    good["metrics"]["note"] = "diverged at epoch 36"
    (project["root"] / "r.json").write_text(json.dumps(good))
    assert main(["show", str(project["root"] / "r.json")]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert "  note: diverged at epoch 36" in shown and "  (in the file, not shown: metrics per_channel)" in shown, shown


@pytest.mark.parametrize(
    ("where", "value", "named"),
    [
        (("metrics", "rel_l2_mean"), "abc", 'metrics.rel_l2_mean is "abc" (a string), not a number'),
        (("metrics", "n_samples"), None, "metrics.n_samples is null, not a number"),
        (("metrics", "rel_l2_max"), True, "metrics.rel_l2_max is true (a boolean), not a number"),
    ],
)
def test_show_refuses_a_statistic_that_is_not_a_number(project: dict, capsys: pytest.CaptureFixture[str], where: tuple, value: object, named: str) -> None:
    """Before (issue 39): ``rel_l2_mean: "abc"`` was printed with exit 0, where ``metrics: null`` was
    refused. A statistic (rel_l2_*, n_samples) is a number; other string entries are notes, printed."""
    good = json.loads((ROOT / "published" / "burgers512_fno1d" / "result.json").read_text())
    good[where[0]][where[1]] = value
    path = project["root"] / "r.json"
    path.write_text(json.dumps(good))
    assert main(["show", str(path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.splitlines() == [
        f"opflow: {path}: {named}: the file is damaged or was edited; re-evaluate (delete it and rerun opflow evaluate, or its snakemake target)"
    ]


def test_show_into_a_pipe_closed_by_its_reader_ends_quietly() -> None:
    """Before (issue 39): ``opflow show FILE | head -5`` could end in a BrokenPipeError traceback. The
    reader here closes the pipe before anything is written; the status is a shell's for ``cat | head``."""
    from opflow.cli import EX_PIPE_CLOSED

    files = sorted(str(p) for p in (ROOT / "published").glob("*/result.json"))
    proc = subprocess.Popen([sys.executable, "-m", "opflow.cli", "show", *files], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == EX_PIPE_CLOSED == 141 and err == "", err


def test_inspect_and_validate_name_a_json_file_and_a_directory_without_advising_deletion(project: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: both said 'not a readable NetCDF-4 file ...: delete it and regenerate it with snakemake'."""
    res = ROOT / "published" / "burgers512_fno1d" / "result.json"
    assert main(["inspect", str(res)]) == 2
    err = capsys.readouterr().err
    assert err == (f"opflow: {res}: not a readable NetCDF-4 file but an opflow results JSON (written by `opflow evaluate`); "
                   f"print it with `opflow show {res}`\n"), err
    folder = project["data"].parent
    assert main(["validate", str(folder)]) == 1
    out = capsys.readouterr().out
    assert out == f"{folder}: INVALID: not a readable NetCDF-4 file but a directory; give the files in it, e.g. `opflow validate {folder}/*.nc`\n", out
    assert "delete" not in err + out


def test_validate_checks_a_derived_file_against_its_generators_variables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a derived file with ``y`` renamed ``v`` passed ``opflow validate`` (and training trained on ``v``)."""
    import shutil

    import netCDF4

    from opflow.data.transforms import derive
    from solvers.base import get_generator
    from solvers.generate import write_shard

    src = write_shard(get_generator("lorenz63").from_config({}), 0, 0, 6, tmp_path / "src.nc", progress=False)
    good = derive(src, tmp_path / "good.nc", n_train=4, n_test=2)
    bad = tmp_path / "renamed.nc"
    shutil.copy(good, bad)
    with netCDF4.Dataset(bad, "a") as nc:
        nc.renameVariable("y", "v")
    assert main(["validate", str(src), str(good), str(bad)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{src}: ok",
        f"{good}: ok",
        f"{bad}: INVALID: variables differ from what generator 'lorenz63' writes ([x, y, y0, z, z0]): missing [y]; not written by it [v] "
        "(renamed after generation?); make the file again from its source (snakemake, or `opflow regenerate FILE --out NEW`)",
    ]


def test_curves_draws_several_runs_and_refuses_what_is_not_a_curves_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(seed: int, blow_up: int | None) -> Path:
        curves = [
            {"epoch": e, "train_loss": (700.0 if e == blow_up else 1.0 / e), "test_rel_l2": 0.5 / e if e % 2 else None, "lr": 1e-3 * e / 10}
            for e in range(1, 11)
        ]
        path = tmp_path / f"seed{seed}.json"
        path.write_text(json.dumps(curves))
        return path

    out = tmp_path / "figs" / "seeds.png"
    out.parent.mkdir()
    assert main(["curves", f"n=64 seed0={run(0, 6)}", f"seed1={run(1, None)}", "--out", str(out), "--title", "FT n = 2048"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.parent.glob("*.tmp*"))  # written atomically
    capsys.readouterr()

    (tmp_path / "result.json").write_text(json.dumps({"metrics": {"rel_l2_mean": 0.1}}))
    for args, says in (
        ([str(run(0, None))], "is not LABEL=FILE"),
        ([f"a={run(0, None)}", f"a={run(1, None)}"], "given twice"),
        ([f"a={tmp_path / 'missing.json'}"], "cannot read it as JSON"),
        ([f"a={tmp_path / 'result.json'}"], "not a training curves file"),
    ):
        assert main(["curves", *args, "--out", str(tmp_path / "x.png")]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_a_diverged_training_exits_1_with_the_message_in_one_line(
    project: dict, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import opflow.train
    import opflow.train_step

    real, steps = opflow.train_step.training_loss, []

    def blown_up(*a, **k):
        steps.append(1)
        return real(*a, **k) * (1e4 if len(steps) > 3 else 1.0)  # 12 samples, batch 4: from epoch 2 on

    monkeypatch.setattr(opflow.train_step, "training_loss", blown_up)
    cfg = yaml.safe_load(project["cfg"].read_text())
    cfg["training"]["epochs"] = 8
    (project["root"] / "cfg8.yaml").write_text(yaml.safe_dump(cfg))
    args = ["train", "--config", str(project["root"] / "cfg8.yaml"), "--dataset", "toy", "--model", "mlp", "--data", str(project["data"]),
            "--out-dir", str(project["root"] / "diverged"), "--no-progress"]
    assert main(args) == 1
    last = capsys.readouterr().err.splitlines()[-1]  # after the log lines: the message once more, the last word
    assert last.startswith("opflow: toy_mlp: the run diverged: ") and last.endswith("training.divergence_factor: null to train on")
    assert "in epochs 2-4)" in last and len(steps) == 12
    assert "ERROR toy_mlp: the run diverged" in (project["root"] / "diverged" / "train.log").read_text()
