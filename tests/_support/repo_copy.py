"""A copy of the repository for the tests of scripts that write into their own tree (published/, .device-state)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def repository_copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """``(repo, env)``: a shallow clone of this repository with this working tree's scripts/, opflow/ and config/
    (committed or not), and an environment whose ``python3`` is this interpreter and where no ``opflow`` command
    is on the path. The scripts then run ``python3 -m opflow.cli`` in the copy, so the copy's opflow writes the
    copy's pages (the installed command would import this tree's and write here)."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(repo)], check=True)
    for d in ("scripts", "opflow", "config"):
        shutil.copytree(ROOT / d, repo / d, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # a symlink would lose the venv
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@example.invalid",
           "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@example.invalid"}  # the scripts that commit (opflow/history.py)
    env.pop("PYTHONPATH", None)
    return repo, env
