"""The Snakemake workflow end to end, in a temporary folder, at tiny size (the CI version of `make quick`).

One shared run (``tiny_run`` in conftest.py) makes the Darcy and Lorenz-63 results; the tests here
read its outputs, dry-run against it, and check what stops the workflow before any job.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from opflow.config import deep_merge, load_config_files
from opflow.data.errors import ConfigError
from opflow.data.format import read_dataset, validate
from pipeline.config import check_config, load_workflow
from workflow_helpers import PROFILES, ROOT, TINY, snakemake


def test_sharded_generation_merges_into_a_valid_dataset(tiny_run) -> None:
    work, _ = tiny_run
    src = work / "out/data/sources/darcy_piecewise.nc"
    assert validate(src) == []
    ds = read_dataset(src)
    assert ds["pressure"].shape == (24, 421, 421)
    np.testing.assert_array_equal(ds["sample_index"], np.arange(24))
    assert ds.attrs["opflow_shards"] == 3 and ds.attrs["opflow_generator"] == "darcy_fd"
    assert not list((work / "out/data/sources/darcy_piecewise").glob("shard-*.nc")), "shards are temporary"


def test_datasets_are_strided_subsamples_with_splits(tiny_run) -> None:
    work, _ = tiny_run
    src = read_dataset(work / "out/data/sources/darcy_piecewise.nc", ["pressure"])
    for res, stride in ((43, 10), (61, 7), (85, 5)):
        ds = read_dataset(work / f"out/data/darcy43/r{res}.nc")
        assert validate(work / f"out/data/darcy43/r{res}.nc") == []
        assert ds["pressure"].shape == (24, res, res)
        np.testing.assert_array_equal(ds["split"], [0] * 16 + [1] * 8)
        np.testing.assert_array_equal(ds["pressure"], src["pressure"][:, ::stride, ::stride])


def test_results_json_reports_test_and_zero_shot_errors(tiny_run) -> None:
    work, _ = tiny_run
    r = json.loads((work / "out/results/darcy43_ono.json").read_text())
    assert r["dataset"] == "darcy43" and r["model"] == "ono"
    # 2 epochs (8 steps) of a 1-layer ONO on 16 samples: measured 0.564; predicting zero gives 1, a
    # broken normaliser or decoder more
    assert 0.35 < r["metrics"]["rel_l2_mean"] < 0.8
    assert set(r["zero_shot"]) == {"61", "85"}
    for res, v in r["zero_shot"].items():  # the same test samples, finer grids: close to the training error
        assert v["rel_l2_mean"] == pytest.approx(r["metrics"]["rel_l2_mean"], rel=0.1), res  # measured 0.554, 0.547
    assert (work / "out/results/darcy43_ono.png").stat().st_size > 10_000
    assert (work / "out/models/darcy43_ono/model.pt").exists()
    assert not (work / "out/models/darcy43_ono/checkpoint.pt").exists()


def test_tiny_lorenz_workflow_reports_the_discretisation_sets(tiny_run) -> None:
    work, _ = tiny_run
    r = json.loads((work / "out/results/lorenz_tiny_tno.json").read_text())
    assert r["view"] == {"kind": "series"} and r["n_test"] == 8
    assert set(r["eval_sets"]) == {"dt0.0075", "dt0.01"}
    assert r["eval_sets"]["dt0.0075"]["discretisation"] == "uniform dt=0.0075 (267 points)"
    # dt = 0.01 regenerates the test split exactly
    for k in ("rel_l2_median", "rel_l2_max"):
        assert r["eval_sets"]["dt0.01"][k] == pytest.approx(r["metrics"][k], rel=1e-9)
    assert (work / "out/results/lorenz_tiny_tno.png").stat().st_size > 10_000


def test_nothing_reruns_when_nothing_changed(tiny_run) -> None:
    work, _ = tiny_run
    dry = snakemake(work, TINY, "out/results/darcy43_ono.json", extra=("-n",))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr


def test_spelling_out_a_solver_default_reruns_nothing(tiny_run) -> None:
    """Shards depend on the solver's resolved parameters, not on how the user wrote them."""
    work, _ = tiny_run
    spelled = deep_merge(TINY, {"sources": {"darcy_piecewise": {"params": {"rtol": 1.0e-10, "resolution": 421}}}})
    dry = snakemake(work, spelled, "out/results/darcy43_ono.json", extra=("-n",))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr
    changed = deep_merge(TINY, {"sources": {"darcy_piecewise": {"params": {"rtol": 1.0e-9}}}})
    dry = snakemake(work, changed, "out/results/darcy43_ono.json", extra=("-n",))
    assert "rule shard" in dry.stdout, "a changed parameter regenerates the shards"


def test_no_hidden_temporaries_are_left(tiny_run) -> None:
    work, _ = tiny_run
    assert not [p for p in work.rglob(".*") if ".snakemake" not in p.parts and p.is_file() and ".tmp" in p.name]


def test_a_plain_local_run_does_not_estimate_memory(tiny_run) -> None:
    """Nothing reads mem_mb in a local run without ``--resources mem_mb=``: the jobs carry the site's
    floor, and Snakemake's own process is spared the estimate (building the model imports torch).
    The estimate itself, seen in dry runs and on SLURM: tests/pipeline/test_slurm_profile.py."""
    _, run = tiny_run
    asked = re.findall(r"rule (train|evaluate):(?:\n    .*)*?\n    resources: [^\n]*?mem_mb=(\d+)", run.stderr)
    assert {rule for rule, _ in asked} == {"train", "evaluate"}
    from opflow import resources as res

    assert {int(mb) for _, mb in asked} == {res.load_site(ROOT / res.SITE_FILE).min_mem_mb}


# --------------------------------------------------------------------------- bad input stops early

BAD = [
    # (change over the quick profile + TINY, message)
    ({"sources": {"darcy_piecewise": {"n_sample": 3}}}, "sources.darcy_piecewise: unknown key 'n_sample'; allowed: mpi_ranks, n_samples"),
    ({"sources": {"darcy_piecewise": {"params": {"coefficent": "lognormal"}}}}, "sources.darcy_piecewise.params: unknown parameter 'coefficent'"),
    ({"datasets": {"darcy": {"resolution": 100}}}, "datasets.darcy.resolution: resolution 100 is not a strided subsample of 421 nodes"),
    # the key was "datasets.darcy43:" alone, whichever of resolution and zero_shot was wrong
    ({"datasets": {"darcy43": {"zero_shot": [61, 44]}}}, "datasets.darcy43.zero_shot[1]: resolution 44 is not a strided subsample of 421 nodes; choose one of [421, 211"),
    ({"training": {"epoch": 3}}, "training: unknown key 'epoch'"),
    ({"models": {"ono": {"widht": 3}}}, "models.ono: ono has no hyperparameter 'widht'"),
    # what a new user hit: each passed `snakemake -n` and failed in the train job, after all generation
    ({"models": {"ono": {"width": "wide"}}}, "models.ono.width: 'wide' is not of type int"),
    ({"models": {"ono": {"width": 30, "n_heads": 4}}}, "models.ono: width 30 is not a multiple of n_heads 4"),
    ({"models": {"ono": {"n_layers": -2}}}, "models.ono.n_layers: -2 must be >= 1"),
    ({"models": {"ono": {"attention": "quantum"}}}, "models.ono.attention: 'quantum' is not one of ['softmax', 'linear'"),
    ({"datasets": {"darcy": {"task": {"outputs": ["u"]}}}}, "datasets.darcy.task.outputs: ['u'] are not variables of source 'darcy_piecewise'"),
    ({"datasets": {"darcy": {"view": {"kind": "window"}}}}, "datasets.darcy.view.kind: 'window' reads trajectories"),
    ({"datasets": {"ns_v1e-5": {"view": {"frames": [1, 40]}}}}, "datasets.ns_v1e-5.view.frames: [1, 40] but source 'ns_v1e-5' has 21 frames (0 .. 20)"),
    ({"datasets": {"kolmogorov": {"view": {"output_frame": 5}}}}, "datasets.kolmogorov.view.output_frame: 5 but source 'kolmogorov' has 2 frames"),
    ({"sources": {"darcy_piecewise": {"mpi_ranks": 2}}}, "sources.darcy_piecewise.mpi_ranks: 2 but solver 'darcy_fd' does not run under MPI"),
    ({"training": {"gpus": 1, "device": "cpu"}}, "gpus: 1 but device is 'cpu'"),
    # what `opflow train --config` trained anyway before it used the workflow's loader (issue 39)
    ({"trainig": {"epochs": 5}}, "<top level>: unknown key 'trainig'; allowed: datasets, evaluate, models, root, runs, sources, targets, training"),
    ({"datasets": {"darcy": {"train": 100000}}}, "datasets.darcy: train + val + test = 100008 samples but sources.darcy_piecewise.n_samples is 24"),
]


BAD_IDS = [m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(BAD)]


@pytest.mark.parametrize(("change", "message"), BAD, ids=BAD_IDS)
def test_bad_config_is_named_at_load_time(change: dict, message: str) -> None:
    """What rules/common.smk does with the config Snakemake merged."""
    cfg = deep_merge(deep_merge(load_config_files([str(p) for p in PROFILES["quick"]]), TINY), change)
    with pytest.raises(ConfigError) as e:
        load_workflow(cfg)
    assert message in str(e.value)


@pytest.mark.parametrize(("change", "message"), BAD, ids=BAD_IDS)
def test_opflow_train_by_hand_refuses_every_config_the_workflow_refuses(change: dict, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same files through ``opflow train --config``: the same line, exit 2, before the data file
    is opened (it does not exist) and before the output folder is made. Before issue 39 the CLI
    parsed only the pair's part of the config: a top-level typo or a split larger than its source
    trained the full run."""
    from opflow.cli import main

    files = [str(p) for p in PROFILES["quick"]]
    for name, part in (("tiny.yaml", TINY), ("change.yaml", change)):
        (tmp_path / name).write_text(yaml.safe_dump(part))
        files.append(str(tmp_path / name))
    args = ["train", "--config", *files, "--dataset", "darcy", "--model", "ono", "--data", str(tmp_path / "absent.nc"), "--out-dir", str(tmp_path / "m")]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_every_mistake_of_a_config_is_reported_at_once() -> None:
    """Shrinking a source breaks every dataset on it: before, one error per run, so one edit per error."""
    cfg = deep_merge(load_config_files([str(p) for p in PROFILES["quick"]]), TINY)
    cfg = deep_merge(cfg, {"sources": {"darcy_piecewise": {"n_samples": 10}}, "datasets": {"lorenz63": {"zero_shot": [5]}}, "models": {"ono": {"n_layers": 0}}})
    with pytest.raises(ConfigError) as e:
        check_config(cfg)
    on_darcy = sorted(d for d, ds in cfg["datasets"].items() if ds["source"] == "darcy_piecewise")
    assert len(on_darcy) == 22  # darcy, darcy141 / 211, darcy43 and the 18 inverse sets
    assert e.value.problems == [
        "models.ono.n_layers: 0 must be >= 1",
        *(f"datasets.{d}: train + val + test = 24 samples but sources.darcy_piecewise.n_samples is 10; raise n_samples or shrink the splits" for d in sorted(on_darcy, key=list(cfg["datasets"]).index)),
        "datasets.lorenz63.zero_shot[0]: 5 given but source 'lorenz63' has no square grid to subsample",
    ], e.value.problems
    assert str(e.value) == "\n".join(e.value.problems)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"models": {"ono": {"n_layers": -2}}}, "models.ono.n_layers: -2 must be >= 1"), ({"trainig": {"epochs": 5}}, "<top level>: unknown key 'trainig'")],
)
def test_snakemake_stops_before_any_job_with_the_key_named(tmp_path: Path, change: dict, message: str) -> None:
    run = snakemake(tmp_path, deep_merge(TINY, change), "out/results/darcy_ono.json", extra=("-n",))
    assert run.returncode != 0
    assert f"opflow: config error at {message}" in run.stderr, run.stderr[-2000:]
    assert "Building DAG" not in run.stderr + run.stdout
    assert not (tmp_path / "out").exists()


def test_a_bad_zlib_level_in_the_environment_stops_snakemake_before_any_job(tmp_path: Path) -> None:
    run = snakemake(tmp_path, TINY, "out/results/darcy_ono.json", extra=("-n",), env={"OPFLOW_DATA_COMPLEVEL": "fast"})
    assert run.returncode != 0
    assert "opflow: OPFLOW_DATA_COMPLEVEL='fast': the zlib level of the data files must be a whole number" in run.stderr, run.stderr[-2000:]
    assert "Building DAG" not in run.stderr + run.stdout and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("results/darcy_ono.json", "results/darcy_ono.json: this profile writes everything under its root 'quick'; did you mean quick/results/darcy_ono.json?"),
        ("quick/data/darcy/r50.nc", "50 is not a strided subsample of the 421-point grid of source 'darcy_piecewise'; valid resolutions: [2, 3, 4, 5, 6, 7, 8, 11"),
        ("quick/results/darcyy_ono.json", "quick/results/darcyy_ono.json is not a target of this workflow; nearest: quick/results/darcy_ono.json, "),
        ("quick/data/darcyy/r43.nc", "quick/data/darcyy/r43.nc is not a target of this workflow; no dataset 'darcyy', nearest: darcy, "),
    ],
)
def test_targets_that_cannot_be_made_are_explained_before_any_job(tmp_path: Path, target: str, message: str) -> None:
    """One line ``opflow: <target>...`` (before: wrapped in Snakemake's InputFunctionException with traceback lines)."""
    run = snakemake(tmp_path, None, target, extra=("-n",))
    text = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"opflow: {target}" in text and message in text, text[-3000:]
    assert "rule shard" not in text
    assert "Exception" not in text and "Traceback" not in text, text[-3000:]


def test_a_model_that_does_not_fit_its_data_stops_the_dry_run_before_any_job(tmp_path: Path) -> None:
    """A target given on the command line is checked while the DAG is built (the profile's targets at load)."""
    run = snakemake(tmp_path, None, "quick/results/elasticity_fno.json", extra=("-n",))
    text = run.stdout + run.stderr
    assert run.returncode != 0
    assert "opflow: config error at elasticity_fno: models.fno (fno) on datasets.elasticity: fno needs a regular grid, but it is a 2-D point cloud" in text, text[-3000:]
    assert "Traceback" not in text and "rule shard" not in text and "Job stats" not in text


def test_a_failed_job_s_one_line_reason_is_on_the_terminal(tmp_path: Path) -> None:
    """Before (issue 39): the reason was only in the job's log; Snakemake names the log. A shard whose
    solver cannot converge (maxiter 1) fails: the Snakefile's onerror prints its log's last line."""
    bad = deep_merge(TINY, {"sources": {"darcy_piecewise": {"params": {"maxiter": 1, "amg_fallback": False}}}})
    run = snakemake(tmp_path, bad, "out/data/sources/darcy_piecewise/shard-0-8.nc")
    assert run.returncode != 0
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("opflow: rule shard failed: ")]
    assert len(lines) == 1, run.stderr[-3000:]
    assert "error: Darcy FD solve at 421x421 did not converge" in lines[0] and "(sample 0, seed 20240421)" in lines[0], lines[0]
    assert lines[0].endswith("(log: out/logs/shard/darcy_piecewise-0-8.log)")


def test_a_damaged_checkpoint_in_a_train_job_says_on_the_terminal_what_to_do_in_the_workflow(tiny_run, tmp_path: Path) -> None:
    """Before (issue 39): the refusal was only in the train log and its fix was '--restart', which is no
    snakemake option. Now the terminal names the file to delete; then the same command trains."""
    import shutil

    work = tmp_path / "wf"
    shutil.copytree(tiny_run[0], work, symlinks=True)
    folder = work / "out/models/darcy43_ono"
    (folder / "model.pt").unlink()
    (folder / "checkpoint.pt").write_bytes(b"\x80\x04truncated")
    run = snakemake(work, TINY, "out/models/darcy43_ono/model.pt")
    assert run.returncode != 0
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("opflow: rule train failed: ")]
    assert len(lines) == 1, run.stderr[-3000:]
    assert "out/models/darcy43_ono/checkpoint.pt: cannot read the checkpoint (" in lines[0], lines[0]
    assert "delete it (rm out/models/darcy43_ono/checkpoint.pt) and run the same command again (a snakemake job then trains from scratch)" in lines[0]


def test_lint_is_clean_and_rule_all_is_the_default_target(tmp_path: Path) -> None:
    lint = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--lint"], capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0 and "Congratulations, your workflow is in a good condition!" in lint.stdout + lint.stderr, lint.stdout[-3000:]
    targets = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--list-target-rules"], capture_output=True, text=True, timeout=300
    )
    # rule all (the profile's targets, the default) and rule report (the reproduction report, asked by name)
    assert sorted(targets.stdout.split()) == ["all", "report"], targets.stdout


def test_datasets_reading_the_same_samples_share_one_derived_file(tmp_path: Path) -> None:
    """The inverse-Darcy sets read darcy141's file: asking for two of their results derives one file."""
    dry = snakemake(tmp_path, TINY, "out/results/darcy_inverse141_eps0_ono.json", "out/results/darcy_inverse141_eps0.1_ono.json", "out/results/darcy141_ono.json", extra=("-n",))
    assert dry.returncode == 0, dry.stderr[-3000:]
    derived = re.findall(r"output: (out/data/(?!sources/)[^\s,]+\.nc)", dry.stdout)
    assert derived == ["out/data/darcy141/r141.nc"], derived


def test_a_changed_training_config_retrains_through_snakemake(tiny_run, tmp_path: Path) -> None:
    """``opflow train`` alone refuses to replace a finished model of another run; the workflow's train
    job still retrains, because Snakemake deletes a job's output (model.pt) before it runs the job."""
    import shutil

    from opflow.records import ModelRecord

    work = tmp_path / "wf"
    shutil.copytree(tiny_run[0], work, symlinks=True)
    model = work / "out/models/darcy43_ono/model.pt"
    before = ModelRecord.load(model).run_hash
    changed = deep_merge(TINY, {"models": {"ono": {"training": {"lr": 2.0e-3}}}})
    # a local run bounded by --resources mem_mb is one that reads the jobs' memory: the estimate is made
    run = snakemake(work, changed, "out/models/darcy43_ono/model.pt", extra=("--resources", "mem_mb=100000"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rule train" in run.stdout + run.stderr
    rec = ModelRecord.load(model)
    assert rec.run_hash != before and rec.run["training"]["lr"] == 2.0e-3
    asked = re.search(r"rule train:(?:\n    .*)*?\n    resources: [^\n]*?mem_mb=(\d+)", run.stderr)
    assert asked and int(asked[1]) > 1024, "the estimate (base 1024 MiB x 1.5 at least), not the site's floor"


def test_outputs_under_a_users_own_root_do_not_show_as_untracked(tmp_path: Path) -> None:
    """Before: ``git status`` listed ``myrun/`` and, with untracked files counted by the provenance,
    every file of the run after the first would have recorded a dirty commit."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    run = snakemake(tmp_path, deep_merge(TINY, {"root": "myrun"}), "myrun/data/sources/lorenz63_test_dt001.nc")
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "myrun/data/sources/lorenz63_test_dt001.nc").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert "myrun" not in status, status


def test_the_ignored_folders_match_symlinks_too(tmp_path: Path) -> None:
    """A worktree links ``.venv``; a user links ``quick`` or ``data`` to a scratch disk. Before:
    ``/.venv/`` and ``/quick/`` matched directories only, so the links showed as untracked."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    (tmp_path / "elsewhere").mkdir()
    for name in (".venv", "quick", "data", "results"):
        (tmp_path / name).symlink_to(tmp_path / "elsewhere")
    status = subprocess.run(["git", "status", "--porcelain", "--", ".venv", "quick", "data", "results"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert status == "", status
