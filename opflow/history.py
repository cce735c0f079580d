"""Files kept in the repository's history and out of its tree: what a later session on a new machine needs back.

A run that goes on in a later session keeps its state in ignored files: the CPU's background training its
checkpoint in ``models/<pair>/``, a lease's unfinished pair its checkpoint in ``.lease-state/<pair>/``, and the CPU's
FEM run the data it reads (made with dolfinx, which the GPU machine has not). A session's work tree is laid anew from
git when its machine is new: what is not in git is gone. That happened on 2026-11-27, when the CPU's GNOT run lost
its checkpoint at epoch 136 (3.2 h of training) and the Darcy ONO lease checkpoint was gone from ``.lease-state/``.

Tracked in the tree, such a file would travel with every command to the GPU machine (64 MiB in all, the tree and
the wheels taking 35 MB of it) and be in every checkout. So :func:`keep` commits the files in one commit and takes
them out of the tree again in the next: ``<commit>:<path>`` names each one for good, :func:`restore` brings it back
(``git cat-file``), and the tree stays as it was. The cost is the history: every full clone downloads each blob kept
(a checkpoint is 15-29 MB), so a run keeps its checkpoint once per session, at the session's end, and a file already
kept is not kept again. A shallow clone (``--depth``) lacks the blobs; :func:`restore` says so.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from opflow.atomic import atomic_path
from opflow.data.errors import ConfigError


def _git(root: str | os.PathLike[str], *args: str, text: bool = True) -> str | bytes:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, check=True)
    except FileNotFoundError:
        raise ConfigError("git is not installed: files kept in the repository's history need it") from None
    except subprocess.CalledProcessError as e:
        raise ConfigError(f"git {' '.join(args[:2])} failed in {root}: {e.stderr.decode(errors='replace').strip()}") from None
    return out.stdout.decode().strip() if text else out.stdout


def keep(root: str | os.PathLike[str], files: Mapping[str, str | os.PathLike[str]], message: str,
         then: Callable[[str], Sequence[str]], then_message: str) -> str:
    """Commit ``files`` (each a path in the tree -> the file that holds its content now) on the current branch, in one
    commit with ``message``; then take them out of the tree in a second commit with ``then_message``, together with the
    paths that ``then(commit)`` writes and returns (the pointers that name the first commit). Returns the first
    commit's hash. The work tree's files are left as they are.

    The contents are read once, each file as it is at that moment (a checkpoint that the trainer replaces by a rename
    is read whole, old or new). Nothing else may be staged: both commits hold only these paths."""
    root = Path(root)
    _git(root, "rev-parse", "--verify", "HEAD")
    staged = _git(root, "diff", "--cached", "--name-only")
    if staged:
        raise ConfigError(f"{root}: changes are staged ({', '.join(str(staged).split()[:3])} ...); commit or unstage them first, "
                          "so that the commits that keep the files hold nothing else")
    for path, src in files.items():
        blob = _git(root, "hash-object", "-w", "--no-filters", "--", str(Path(src).resolve()))
        _git(root, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
    _git(root, "commit", "-q", "--no-verify", "-m", message)
    commit = str(_git(root, "rev-parse", "HEAD"))
    _git(root, "update-index", "--force-remove", "--", *files)
    written = list(then(commit))
    if written:
        _git(root, "add", "--", *written)
    _git(root, "commit", "-q", "--no-verify", "-m", then_message)
    return commit


def restore(root: str | os.PathLike[str], spec: str, dst: str | os.PathLike[str], sha256: str) -> None:
    """Write the blob ``spec`` (``<commit>:<path>``) of the history to ``dst`` (atomically), after checking that its
    SHA-256 is ``sha256``."""
    try:
        data = _git(root, "cat-file", "blob", spec, text=False)
    except ConfigError as e:
        raise ConfigError(f"{spec} is not in this clone's history ({e}); in a shallow clone, `git fetch --unshallow` "
                          "brings it") from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise ConfigError(f"{spec}: SHA-256 {got[:12]}..., not the {sha256[:12]}... its pointer names")
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dst) as tmp:
        Path(tmp).write_bytes(data)


__all__ = ["keep", "restore"]
