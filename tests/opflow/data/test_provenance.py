"""Provenance: the commit recorded in every file says whether the tree it came from was the commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from opflow.data.provenance import git_commit


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def a_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("/data\n")
    (repo / "solver_a.py").write_text("A = 1\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return repo


def test_a_clean_tree_records_the_bare_commit(tmp_path: Path) -> None:
    repo = a_repo(tmp_path)
    (repo / "data").mkdir()
    (repo / "data/out.nc").write_text("ignored output")
    assert git_commit(repo) == git(repo, "rev-parse", "HEAD")


def test_an_untracked_source_file_marks_the_commit_dirty(tmp_path: Path) -> None:
    """Before: ``--untracked-files=no``; data made by a new solver module that was never added named
    a clean commit that cannot regenerate them."""
    repo = a_repo(tmp_path)
    (repo / "solver_b.py").write_text("B = 2\n")
    assert git_commit(repo) == git(repo, "rev-parse", "HEAD") + "+dirty"
