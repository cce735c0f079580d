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


def run(cmd: str, state: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), cmd], env={**os.environ, "CPU_TRAINING_STATE": str(state), **env}, capture_output=True, text=True, timeout=120)


def stat_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


@pytest.fixture
def group(tmp_path: Path):
    """A stand-in for the training: a process group of its own, recorded where the script keeps it (SIGINT at its
    default whatever this process does with it, as `start` makes it)."""
    proc = subprocess.Popen(["env", "--default-signal=INT", "sleep", "60"], start_new_session=True)
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
    assert bad.returncode == 2 and "usage: scripts/cpu_training.sh start|status|pause|resume|stop|snapshot" in bad.stderr
    status = run("status", tmp_path)
    assert status.returncode == 0 and status.stdout.startswith("cpu_training: not running")


def test_start_runs_it_in_a_group_of_its_own_that_stop_ends(tmp_path: Path) -> None:
    """Found running the real training: a background command of a bash script starts with SIGINT ignored, so
    Snakemake and the trainer ignored `stop`. `start` gives them SIGINT back."""
    started = run("start", tmp_path, CPU_TRAINING_COMMAND="sleep 60")
    try:
        assert started.returncode == 0 and "cpu_training: training 'sleep 60' in the background (process group" in started.stdout, started.stderr
        pgid = int((tmp_path / "cpu_training.pgid").read_text())
        members = [int(p) for p in subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()]
        assert members and pgid != os.getpgid(0)
        for pid in members:  # the SigIgn mask of each: SIGINT (bit 1) not ignored
            ignored = int(next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("SigIgn:")).split()[1], 16)
            assert not ignored & (1 << (signal.SIGINT - 1)), f"process {pid} ignores SIGINT"
        assert run("stop", tmp_path).returncode == 0
        deadline = time.monotonic() + 10
        while run("status", tmp_path).stdout.startswith("cpu_training: running") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert run("status", tmp_path).stdout.startswith("cpu_training: not running")
    finally:
        pgid_file = tmp_path / "cpu_training.pgid"
        if pgid_file.exists():
            try:
                os.killpg(int(pgid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
