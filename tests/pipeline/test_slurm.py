"""The SLURM profile on a real SLURM cluster: shards, merge, derive, train and evaluate as sbatch jobs.

Runs where SLURM answers (`sinfo`; with accounting: the memory checks read `sacct`), e.g.
on the single-node cluster of `scripts/slurm_local.sh up`; skipped elsewhere (CI has no SLURM).
The tiny workflow config of the pipeline tests, trained for one epoch: about a minute and a half on
a loaded 2-core machine, most of it the scheduler's round trips. A training cancelled with `scancel`
while it runs fails the run (seen within a minute, Snakemake gone within 90 s), and the rerun
resumes from its checkpoint: the profile reads the jobs' states from `squeue`
(profiles/slurm/config.yaml, slurm-status-command); about five minutes.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import signal
import subprocess
import sys
import time
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
#: the training the cancel test interrupts: long enough to be caught running after its first checkpoint
CANCEL_EPOCHS = 60


def _snakemake_cmd(tmp_path: Path, config: dict) -> list[str]:
    """The tiny target under the SLURM profile, first status poll after 2 s (not 40)."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(config))
    return [
        sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--profile", str(ROOT / "profiles/slurm"),
        "--directory", str(tmp_path), "--configfile", str(ROOT / "config/quick.yaml"), str(cfg),
        "--slurm-init-seconds-before-status-checks", "2",
        "--", TARGET,
    ]  # fmt: skip


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
    run = subprocess.run(_snakemake_cmd(tmp_path, CONFIG), capture_output=True, text=True, timeout=600)
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


def _squeue_state(jobid: str) -> str:
    run = subprocess.run(["squeue", "-h", "--states=all", "-o", "%T", "-j", jobid], capture_output=True, text=True, timeout=20)
    return run.stdout.strip()


def test_a_cancelled_training_fails_the_run_within_a_minute_and_the_rerun_resumes(tmp_path: Path) -> None:
    """`scancel` of the running training: Snakemake sees it at its next status poll and exits non-zero (with the
    plugin's default `sacct` check it waited forever: `sacct` says `CANCELLED by <uid>`); the same
    command then resumes the training from its checkpoint and completes the target."""
    config = copy.deepcopy(CONFIG)
    config["training"]["epochs"] = CANCEL_EPOCHS
    cmd = _snakemake_cmd(tmp_path, config)
    out_dir = tmp_path / "out/models/darcy_ono"
    log = tmp_path / "first-run.log"
    train_job = None
    with log.open("w") as fh:
        first = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    try:
        # the training job submitted, running, and past its first checkpoint (each wait bounded)
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and first.poll() is None:
            train_job = next((jid for jid, rule in _submitted(log.read_text()).items() if rule == "train"), None)
            if train_job and _squeue_state(train_job) == "RUNNING" and (out_dir / "checkpoint.pt").exists():
                break
            time.sleep(1)
        else:
            pytest.fail(f"the training did not run to a checkpoint within 420 s (Snakemake exit {first.poll()}):\n{log.read_text()[-3000:]}")
        subprocess.run(["scancel", train_job], check=True, timeout=20)
        cancelled_at = time.monotonic()
        failed = f"SLURM-job '{train_job}' failed"
        # seen at the plugin's next status poll; Snakemake exits once its status thread has slept
        # one more poll interval (2 s after the last finished job, 10 s longer after each poll that
        # saw none: about 30 s here; up to 180 s with the profile's 40 s and long jobs)
        while failed not in log.read_text() and time.monotonic() - cancelled_at < 60:
            time.sleep(0.5)
        seen = time.monotonic() - cancelled_at
        if failed not in log.read_text():
            pytest.fail(f"Snakemake still takes the training for running 60 s after its scancel (job {train_job}, squeue: {_squeue_state(train_job)}):\n{log.read_text()[-3000:]}")
        try:
            rc = first.wait(timeout=max(1.0, 90 - seen))
        except subprocess.TimeoutExpired:
            pytest.fail(f"Snakemake saw the cancel after {seen:.0f} s but still runs 90 s after it:\n{log.read_text()[-3000:]}")
        exited = time.monotonic() - cancelled_at
    finally:
        if first.poll() is None:  # a failed wait: Snakemake cancels its SLURM jobs on Ctrl-C
            first.send_signal(signal.SIGINT)
            try:
                first.wait(timeout=60)
            except subprocess.TimeoutExpired:
                first.kill()
                first.wait()
            if jobs := list(_submitted(log.read_text())):
                subprocess.run(["scancel", *jobs], timeout=20)
    text = log.read_text()
    assert rc != 0, text[-3000:]
    assert f"{failed}, SLURM status is: 'CANCELLED'" in text, text[-3000:]
    assert not (tmp_path / TARGET).exists()
    print(f"scancel of job {train_job}: seen after {seen:.1f} s, Snakemake exited {rc} after {exited:.1f} s")

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-5000:]
    assert sorted(_submitted(rerun.stderr).values()) == ["evaluate", "train"], rerun.stderr[-3000:]
    train_log = (out_dir / "train.log").read_text()
    assert "--- started from scratch" in train_log and re.search(r"--- resumed at epoch [1-9]\d* ", train_log), train_log[-3000:]
    assert not (out_dir / "checkpoint.pt").exists()  # removed once the training completed
    result = json.loads((tmp_path / TARGET).read_text())
    assert result["dataset"] == "darcy" and result["model"] == "ono"
