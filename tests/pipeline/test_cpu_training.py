"""scripts/cpu_training.sh: the CPU machine's one background training, paused, resumed and stopped as one
process group (Snakemake and its job), its state in a folder of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cpu_training.sh"


def run(cmd: str, state: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), cmd], env={**os.environ, "CPU_TRAINING_STATE": str(state)}, capture_output=True, text=True, timeout=120)


def stat_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


@pytest.fixture
def group(tmp_path: Path):
    """A stand-in for the training: a process group of its own, recorded where the script keeps it."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (tmp_path / "cpu_training.pgid").write_text(f"{os.getpgid(proc.pid)}\n")
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_pause_resume_and_stop_reach_the_process_group(tmp_path: Path, group: subprocess.Popen) -> None:
    assert run("status", tmp_path).stdout.startswith("cpu_training: running")
    assert run("pause", tmp_path).returncode == 0
    time.sleep(0.2)
    assert stat_of(group.pid) == "T" and run("status", tmp_path).stdout.startswith("cpu_training: paused")
    assert run("resume", tmp_path).returncode == 0
    time.sleep(0.2)
    assert stat_of(group.pid) != "T"
    started = run("start", tmp_path)  # one training at a time
    assert started.returncode == 1 and "already running" in started.stderr
    stopped = run("stop", tmp_path)
    assert stopped.returncode == 0 and "'start' resumes it" in stopped.stdout
    assert group.wait(timeout=10) == -signal.SIGINT
    assert run("status", tmp_path).stdout.startswith("cpu_training: not running")


def test_nothing_running_and_bad_commands_are_named(tmp_path: Path) -> None:
    paused = run("pause", tmp_path)
    assert paused.returncode == 1 and "cpu_training: not running (nothing to pause)" in paused.stderr
    bad = run("restart", tmp_path)
    assert bad.returncode == 2 and "usage: scripts/cpu_training.sh start|status|pause|resume|stop" in bad.stderr
    status = run("status", tmp_path)
    assert status.returncode == 0 and status.stdout.startswith("cpu_training: not running")
