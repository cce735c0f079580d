"""Files kept in the repository's history and out of its tree (opflow/history.py): committed once, taken out of the
tree by the next commit, and brought back by their ``<commit>:<path>`` on a new machine."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from git_helpers import git
from git_helpers import new_repo as make_repo

from opflow import history
from opflow.data.errors import ConfigError


def new_repo(path: Path) -> Path:
    """A repository with one commit and the project's way of ignoring run outputs."""
    return make_repo(path, "/models\n", {"README.md": "a project\n"})


def test_a_file_is_committed_once_then_out_of_the_tree_and_comes_back_from_its_commit(tmp_path):
    repo = new_repo(tmp_path / "repo")
    ckpt = repo / "models" / "p" / "checkpoint.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"weights at epoch 3")
    snapshot = tmp_path / "snapshot.pt"  # what was read at that moment; the trainer goes on writing the real one
    snapshot.write_bytes(b"weights at epoch 3")
    ckpt.write_bytes(b"weights at epoch 4")
    seen = []

    def point(commit: str) -> list[str]:
        seen.append(commit)
        (repo / "pointer.json").write_text(f'{{"git": "{commit}:models/p/checkpoint.pt"}}\n')
        return ["pointer.json"]

    commit = history.keep(repo, {"models/p/checkpoint.pt": snapshot}, "keep it", point, "point to it")
    assert seen == [commit] and git(repo, "rev-parse", "HEAD~1") == commit
    assert git(repo, "log", "--format=%s", "-2").splitlines() == ["point to it", "keep it"]
    assert git(repo, "ls-tree", "-r", "--name-only", commit).splitlines() == [".gitignore", "README.md", "models/p/checkpoint.pt"]
    assert git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines() == [".gitignore", "README.md", "pointer.json"]  # out of the tree
    assert ckpt.read_bytes() == b"weights at epoch 4"  # the work tree's file as it was
    assert git(repo, "status", "--porcelain") == ""  # nothing left staged or untracked

    clone = tmp_path / "new-machine"  # a later session: the tree laid anew from git
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    dst = clone / "models" / "p" / "checkpoint.pt"
    assert not dst.exists()
    history.restore(clone, f"{commit}:models/p/checkpoint.pt", dst, hashlib.sha256(b"weights at epoch 3").hexdigest())
    assert dst.read_bytes() == b"weights at epoch 3"
    with pytest.raises(ConfigError, match="SHA-256 .* not the 000000000000... its pointer names"):
        history.restore(clone, f"{commit}:models/p/checkpoint.pt", tmp_path / "x.pt", "0" * 64)
    assert not (tmp_path / "x.pt").exists()


def test_nothing_else_staged_goes_into_the_commits_and_a_shallow_clone_is_named(tmp_path):
    repo = new_repo(tmp_path / "repo")
    (repo / "README.md").write_text("a change of the user's\n")
    git(repo, "add", "README.md")
    src = tmp_path / "c.pt"
    src.write_bytes(b"c")
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(ConfigError, match=r"changes are staged \(README.md ...\); commit or unstage them first"):
        history.keep(repo, {"models/c.pt": src}, "keep", lambda commit: [], "point")
    assert git(repo, "rev-parse", "HEAD") == head  # no commit made
    git(repo, "commit", "-q", "-m", "the user's change")
    commit = history.keep(repo, {"models/c.pt": src}, "keep", lambda commit: [], "point")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    with pytest.raises(ConfigError, match=r"is not in this clone's history .*git fetch --unshallow"):
        history.restore(shallow, f"{commit}:models/c.pt", shallow / "models/c.pt", hashlib.sha256(b"c").hexdigest())
