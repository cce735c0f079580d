"""A small git repository for the tests of what opflow commits and restores (opflow/history.py, opflow/lease_state.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def new_repo(path: Path, ignored: str, files: dict[str, str]) -> Path:
    """A repository at ``path`` with ``files`` (path -> text) and the ``.gitignore`` ``ignored``, in one commit."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "test")
    git(path, "config", "user.email", "test@example.invalid")
    (path / ".gitignore").write_text(ignored)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "start")
    return path
