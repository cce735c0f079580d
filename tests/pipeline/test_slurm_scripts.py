"""scripts/slurm_local.sh and scripts/slurm_quick_timing.sh: their faces, without starting anything.

Bringing a cluster up (`slurm_local.sh up`, root, apt-get) and timing the quick target are not run
here; `tests/pipeline/test_slurm.py` runs the workflow on the cluster `up` makes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from workflow_helpers import ROOT

LOCAL = ROOT / "scripts" / "slurm_local.sh"
TIMING = ROOT / "scripts" / "slurm_quick_timing.sh"
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=60, env=env)


def test_both_scripts_are_valid_bash() -> None:
    for script in (LOCAL, TIMING):
        assert _run("-n", str(script)).returncode == 0, script
        assert os.access(script, os.X_OK), f"{script} is not executable"


def test_the_local_cluster_script_takes_up_down_or_status() -> None:
    run = _run(str(LOCAL), "restart")
    assert run.returncode == 2 and "up|down|status" in run.stderr


def test_status_names_every_daemon_and_says_whether_it_runs() -> None:
    run = _run(str(LOCAL), "status")
    assert run.returncode in (0, 3), run.stderr  # 3: something is stopped
    lines = run.stdout.splitlines()
    for daemon in DAEMONS:
        assert any(ln.startswith(f"{daemon} running (pid ") or ln == f"{daemon} stopped" for ln in lines), run.stdout


def test_the_timing_script_refuses_bad_arguments_before_running_anything(tmp_path: Path) -> None:
    run = _run(str(TIMING), "--frobnicate")
    assert run.returncode == 2 and "unknown argument --frobnicate" in run.stderr
    run = _run(str(TIMING), "--extra-config", str(tmp_path / "missing.yaml"), env={**os.environ, "PYTHON": sys.executable})
    assert run.returncode == 2 and "missing.yaml does not exist" in run.stderr


def test_the_timing_script_says_how_to_get_a_cluster_where_none_answers(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "cut", "dirname", "realpath", "mktemp", "sed"):  # what it needs before asking sinfo
        path = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        (bin_dir / tool).symlink_to(path)
    run = _run(str(TIMING), env={"PATH": str(bin_dir), "PYTHON": "/bin/sh"})
    assert run.returncode == 2 and "no SLURM cluster answers" in run.stderr and "slurm_local.sh up" in run.stderr
    assert not (tmp_path / "out.json").exists()
