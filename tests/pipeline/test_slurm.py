"""The SLURM profile on a real SLURM cluster: shards, merge, derive, train and evaluate as sbatch jobs.

Runs where SLURM answers (`sinfo`; with accounting, since the executor plugin polls `sacct`), e.g.
on the single-node cluster of `scripts/slurm_local.sh up`; skipped elsewhere (CI has no SLURM).
The tiny workflow config of the pipeline tests, trained for one epoch: about a minute and a half on
a loaded 2-core machine, most of it the scheduler's round trips.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from opflow import resources as res
from workflow_helpers import ROOT, TINY


def _slurm_answers() -> bool:
    if shutil.which("sinfo") is None or shutil.which("sacct") is None:
        return False
    try:
        run = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (subprocess.SubprocessError, OSError):
        return False
    return run.returncode == 0 and any(s.startswith(("idle", "mix", "alloc")) for s in run.stdout.split())


pytestmark = pytest.mark.skipif(not _slurm_answers(), reason="no SLURM cluster answers here (sinfo); scripts/slurm_local.sh up starts one")

#: the tiny config, one epoch, two shards of 12 samples
CONFIG = copy.deepcopy(TINY)
CONFIG["training"]["epochs"] = 1
CONFIG["sources"]["darcy_piecewise"]["shard_size"] = 12
TARGET = "out/results/darcy_ono.json"


def _submitted(log: str) -> dict[str, str]:
    """{SLURM job id: rule} from Snakemake's log of a run with the slurm executor."""
    jobs, rule = {}, None
    for line in log.splitlines():
        if m := re.match(r"^rule (\w+):$", line):
            rule = m[1]
        elif (m := re.search(r"submitted with SLURM jobid (\d+)", line)) and rule:
            jobs[m[1]] = rule
    return jobs


def _mb(value: str) -> float:
    """sacct's ReqMem / MaxRSS (``1792M``, ``894064K``, ``1G``) in MB."""
    if not value:
        return 0.0
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}
    return float(value[:-1]) * scale[value[-1]] if value[-1] in scale else float(value) / 2**20


def test_the_tiny_darcy_target_runs_as_sbatch_jobs_asking_what_each_needs(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    cmd = [
        sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--profile", str(ROOT / "profiles/slurm"),
        "--directory", str(tmp_path), "--configfile", str(ROOT / "config/quick.yaml"), str(cfg),
        "--slurm-init-seconds-before-status-checks", "2",  # the first sacct poll after 2 s, not 40
        "--", TARGET,
    ]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-5000:]
    result = json.loads((tmp_path / TARGET).read_text())
    assert result["dataset"] == "darcy" and result["model"] == "ono"

    jobs = _submitted(run.stderr)
    assert sorted(jobs.values()) == ["derive_dataset", "evaluate", "merge_shards", "shard", "shard", "train"], run.stderr[-3000:]
    acct = subprocess.run(
        ["sacct", "-n", "-P", "-j", ",".join(jobs), "-o", "JobID,State,ReqMem,MaxRSS"], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split("|") for line in acct.splitlines()]
    state = {jid: st for jid, st, _, _ in rows if jid in jobs}
    assert set(state.values()) == {"COMPLETED"}, acct
    asked = {jobs[jid]: _mb(req) for jid, _, req, _ in rows if jid in jobs}
    peak: dict[str, float] = {}
    for jid, _, _, rss in rows:  # a job's steps (batch, 0): the largest peak
        if "." in jid:
            rule = jobs[jid.split(".")[0]]
            peak[rule] = max(peak.get(rule, 0.0), _mb(rss))
    cap = res.sinfo_max_mem_mb()
    # the training asks its estimate (the quick ONO on 24 samples: the floor's neighbourhood, not 64 GB) ...
    assert asked["train"] <= 4096 and (cap is None or asked["train"] <= cap), asked
    # ... and it was enough: no job used more than it asked for
    for rule in ("train", "evaluate", "merge_shards", "derive_dataset"):
        assert peak.get(rule, 0.0) <= asked[rule], (rule, acct)
