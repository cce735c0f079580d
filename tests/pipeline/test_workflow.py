"""The Snakemake workflow end to end, in a temporary folder, at tiny size (the CI version of `make quick`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from opflow.data.format import read_dataset, validate

ROOT = Path(__file__).resolve().parents[2]

# Deep-merged over config/default.yaml, like config/quick.yaml: the real 421 x 421 FD solve, 24 samples
# in 3 shards, a tiny ONO trained for 2 epochs.
TINY = {
    "root": "out",
    "sources": {"darcy_piecewise": {"n_samples": 24, "shard_size": 8}},
    "datasets": {
        "darcy": {"resolution": 43, "train": 16, "test": 8},
        "darcy141": {"train": 16, "test": 8},
        "darcy211": {"train": 16, "test": 8},
        "darcy43": {"train": 16, "test": 8, "zero_shot": [61, 85]},
    },
    "training": {"epochs": 2, "batch_size": 4, "threads": 1},
    "models": {"ono": {"width": 16, "n_layers": 1, "n_heads": 2, "ortho_dim": 4, "attention": "linear"}},
    "evaluate": {"threads": 1},
}


def snakemake(workdir: Path, config: dict, *targets: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cfg = workdir / "test-config.yaml"
    cfg.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "--cores", "2", *extra, "--configfile", str(cfg), "--", *targets]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def workflow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    work = tmp_path_factory.mktemp("wf")
    run = snakemake(work, TINY, "out/results/darcy43_ono.json", "out/data/darcy/r43.nc")
    assert run.returncode == 0, run.stderr[-4000:]
    return work, run


def test_sharded_generation_merges_into_a_valid_dataset(workflow_run) -> None:
    work, _ = workflow_run
    src = work / "out/data/sources/darcy_piecewise.nc"
    assert validate(src) == []
    ds = read_dataset(src)
    assert ds["pressure"].shape == (24, 421, 421)
    np.testing.assert_array_equal(ds["sample_index"], np.arange(24))
    assert ds.attrs["opflow_shards"] == 3 and ds.attrs["opflow_generator"] == "darcy_fd"
    assert not list((work / "out/data/sources/darcy_piecewise").glob("shard-*.nc")), "shards are temporary"


def test_datasets_are_strided_subsamples_with_splits(workflow_run) -> None:
    work, _ = workflow_run
    src = read_dataset(work / "out/data/sources/darcy_piecewise.nc", ["pressure"])
    for res, stride in ((43, 10), (61, 7), (85, 5)):
        ds = read_dataset(work / f"out/data/darcy43/r{res}.nc")
        assert validate(work / f"out/data/darcy43/r{res}.nc") == []
        assert ds["pressure"].shape == (24, res, res)
        np.testing.assert_array_equal(ds["split"], [0] * 16 + [1] * 8)
        np.testing.assert_array_equal(ds["pressure"], src["pressure"][:, ::stride, ::stride])


def test_results_json_reports_test_and_zero_shot_errors(workflow_run) -> None:
    work, _ = workflow_run
    r = json.loads((work / "out/results/darcy43_ono.json").read_text())
    assert r["dataset"] == "darcy43" and r["model"] == "ono"
    assert 0 < r["metrics"]["rel_l2_mean"] < 10
    assert set(r["zero_shot"]) == {"61", "85"}
    assert all(np.isfinite(v["rel_l2_mean"]) for v in r["zero_shot"].values())
    assert (work / "out/results/darcy43_ono.png").stat().st_size > 0
    assert (work / "out/models/darcy43_ono/model.pt").exists()
    assert not (work / "out/models/darcy43_ono/checkpoint.pt").exists()


def test_nothing_reruns_when_nothing_changed(workflow_run) -> None:
    work, _ = workflow_run
    dry = snakemake(work, TINY, "out/results/darcy43_ono.json", extra=("-n",))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sources": {"darcy_piecewise": {"n_sample": 3}}}, "config error at sources.darcy_piecewise: unknown key 'n_sample'"),
        ({"sources": {"darcy_piecewise": {"params": {"coefficent": "lognormal"}}}}, "unknown parameter(s) ['coefficent']"),
        ({"datasets": {"darcy": {"resolution": 100}}}, "100 is not a strided subsample of 421 nodes"),
        ({"training": {"epoch": 3}}, "unknown key 'epoch'"),
        ({"models": {"ono": {"widht": 3}}}, "widht"),
    ],
)
def test_bad_config_stops_before_any_job_with_the_key_named(tmp_path: Path, change: dict, message: str) -> None:
    def merge(a: dict, b: dict) -> dict:
        out = dict(a)
        for k, v in b.items():
            out[k] = merge(a.get(k, {}), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
        return out

    run = snakemake(tmp_path, merge(TINY, change), "out/results/darcy_ono.json", extra=("-n",))
    assert run.returncode != 0
    assert message in run.stderr, run.stderr[-2000:]
    assert not (tmp_path / "out").exists()
