"""Where a pair that a GPU lease left unfinished waits for the next lease: its checkpoint out of the tree, a pointer in it.

A checkpoint holds the weights, AdamW's two moments, the step counts, the scheduler and the RNG: about 12 bytes per
parameter, 15 MB for ONO and 27-29 MB for the Galerkin / Fourier Transformers and FNO at their paper sizes. It is kept
out of the tracked files because every tracked file travels with every command to the GPU machine, and the tracked
files (about 10 MB) and the wheels (25 MB) leave about 31 MB of a command's 64 MiB: one such checkpoint, not two. So a
lease carries only the checkpoints of the pairs it resumes (``opflow queue --next M --carry`` names them, within that
budget).

``scripts/queue_pull.sh`` keeps an unfinished pair's checkpoint in ``.lease-state/<pair>/checkpoint.pt`` (ignored by
git, as the CPU's own training keeps its checkpoint in ``models/``), writes ``published/<pair>/checkpoint.json``
(tracked), the pointer::

    {"file": ".lease-state/<pair>/checkpoint.pt", "bytes": N, "sha256": "...", "epochs_done": E, "git": "<commit>:<path>"}

and keeps the file in git's history (below: ``git``).

beside the run's log, curves and page. The queue reads the pair as *in progress* from the pointer, and as *ready* to
resume where the file is present with that size and hash (:func:`ready`): on the GPU machine, where it was carried.
A pair whose checkpoint is not ready is not trained by that lease (it would start again from scratch); a lost file
is noticed, not silently replaced.

Data the GPU machine cannot make (the FEM sets: no dolfinx there) waits here too: ``.lease-state/data/<x>`` is the
subset of ``data/<x>`` that the queued pairs reading it need (:mod:`opflow.data.subset`; ``data/elasticity/all.nc``,
40.5 MB, becomes 11.6 MB), written by ``opflow queue --next M --carry`` (:func:`opflow.queue.carried_data`) and
copied into ``data/`` there by ``scripts/device_session.sh --queue`` (:func:`place_data`: never over a file
already there).

None of these files is in the tree, and a session's work tree is laid anew from git when its machine is new: so each
is also kept in the repository's *history* (:mod:`opflow.history`: committed once, then taken out of the tree by the
next commit). The pointer's ``git`` names where (``<commit>:<path>``), and :func:`restore` brings it back on a new
machine. The CPU's own background training (``scripts/cpu_training.sh``) keeps its checkpoint and, for a FEM pair,
the data file it reads (as it is: the run should read the subset, :func:`opflow.queue.cpu_state`) the same way, under a
pointer of its own, :data:`CPU_POINTER` (the lease pointer would mark the pair
as in progress on a GPU): ``opflow queue --save-state`` at a session's end, ``opflow queue --restore-state`` at the
next one's start (``scripts/cpu_training.sh keep`` and ``start``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opflow import history
from opflow.atomic import atomic_path, atomic_write_text
from opflow.data.errors import ConfigError
from opflow.records import file_sha256

#: the ignored folder of the checkpoints of unfinished lease pairs (one subfolder per ``<dataset>_<model>``)
STATE_DIR = ".lease-state"
#: the pointer's name in ``published/<pair>/``
POINTER = "checkpoint.json"
#: the pointer of the CPU's own run in ``published/<pair>/``: its checkpoint in ``models/<pair>/`` and the data it reads
CPU_POINTER = "cpu_checkpoint.json"
#: what one command may carry to the GPU machine (the device tool's limit)
CARRY_LIMIT = 64 * 2**20


#: where the subsets of the data files a lease carries wait (``data/<x>`` as ``.lease-state/data/<x>``;
#: :func:`opflow.queue.carried_data`); on the GPU machine ``scripts/device_session.sh --queue`` copies them into ``data/``
DATA_DIR = f"{STATE_DIR}/data"


def carried_data(root: str | os.PathLike[str], data: str) -> Path:
    """Where the carried subset of the data file ``data`` (``data/...``, relative to ``root``) is kept."""
    return Path(root) / DATA_DIR / Path(data).relative_to("data")


def state_file(root: str | os.PathLike[str], pair: str) -> Path:
    """``<root>/.lease-state/<pair>/checkpoint.pt`` (``pair`` as ``<dataset>_<model>``)."""
    return Path(root) / STATE_DIR / pair / "checkpoint.pt"


def _is_file_entry(d: Any) -> bool:
    """``{file, bytes, sha256, git?}``: a file the pointer names, with where the history keeps it."""
    return (isinstance(d, dict) and isinstance(d["file"], str) and int(d["bytes"]) > 0 and len(str(d["sha256"])) == 64
            and isinstance(d.get("git", ""), str))


def read_pointer(folder: str | os.PathLike[str], name: str = POINTER) -> dict[str, Any] | None:
    """The pointer ``name`` in a record folder ``published/<pair>/``, or None where there is none; a damaged one is an
    error that names the file. ``{file, bytes, sha256, epochs_done, git?, data?}``: ``git`` is ``<commit>:<path>``,
    where the repository's history keeps the checkpoint; ``data`` (the CPU's pointer) lists the data files the run reads
    as ``{file, bytes, sha256, git}``."""
    path = Path(folder) / name
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if not (_is_file_entry(data) and isinstance(data.get("data", []), list) and all(_is_file_entry(d) for d in data.get("data", []))):
            raise ValueError("not {file, bytes, sha256, epochs_done, git?, data?}")
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: not a checkpoint pointer ({e}); restore it from git, or remove it to train the pair from scratch") from None
    return data


def ready(root: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether the checkpoint that ``folder``'s pointer names is at ``root`` with its size and SHA-256."""
    pointer = read_pointer(folder)
    if pointer is None:
        return False
    path = Path(root) / pointer["file"]
    return path.is_file() and path.stat().st_size == int(pointer["bytes"]) and file_sha256(path) == pointer["sha256"]


def keep(root: str | os.PathLike[str], folder: str | os.PathLike[str], checkpoint: str | os.PathLike[str], epochs_done: int) -> dict[str, Any]:
    """Keep ``checkpoint`` for the next lease: copied (atomically) to :func:`state_file` of ``folder``'s pair under
    ``root``, and the pointer written into ``folder`` (``published/<pair>/``). Returns the pointer."""
    folder = Path(folder)
    dst = state_file(root, folder.name)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dst) as tmp:
        shutil.copyfile(checkpoint, tmp)
    pointer = {"file": dst.relative_to(root).as_posix(), "bytes": dst.stat().st_size, "sha256": file_sha256(dst), "epochs_done": int(epochs_done)}
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / POINTER, json.dumps(pointer, indent=1, sort_keys=True) + "\n")
    return pointer


def place_data(root: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """On the GPU machine: copy each carried subset ``.lease-state/data/<x>`` to ``data/<x>`` under ``root`` (atomically).
    A whole file already in ``data/`` is kept, never written over: on the machine that made the data it is the file the
    subset was cut from, and a run's checkpoint names the file it trained on. Only an older subset there (one an
    earlier command of the same lease left) is replaced. Returns ``(copied, kept)``, each as ``data/<x>`` paths,
    sorted."""
    from opflow.data.subset import subset_source

    root = Path(root)
    carried = root / DATA_DIR
    copied, kept = [], []
    for src in sorted(carried.rglob("*.nc")) if carried.is_dir() else []:
        rel = Path("data") / src.relative_to(carried)
        dst = root / rel
        if dst.exists() and (subset_source(dst) is None or file_sha256(dst) == file_sha256(src)):
            kept.append(rel.as_posix())
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(dst) as tmp:
            shutil.copyfile(src, tmp)
        copied.append(rel.as_posix())
    return copied, kept


def _pointers(published: str | os.PathLike[str]) -> list[tuple[Path, str, dict[str, Any]]]:
    """Every pointer in ``published/*/``: (its folder, its name, its content)."""
    out = []
    for folder in sorted(p for p in Path(published).iterdir() if p.is_dir()) if Path(published).is_dir() else []:
        for name in (POINTER, CPU_POINTER):
            pointer = read_pointer(folder, name)
            if pointer is not None:
                out.append((folder, name, pointer))
    return out


def restore(root: str | os.PathLike[str], published: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """On a new machine: bring back from the repository's history (:func:`opflow.history.restore`) each file that a
    pointer in ``published/*/`` names and that is not here: the checkpoints, and the data a CPU run reads. A file that is
    here is never written over (a newer checkpoint, the whole data file). Returns ``(restored, lost)``: the paths
    brought back, and a line for each file that is neither here nor to be had from the history (never kept there, or
    not in this clone's history: a shallow clone).

    A CPU run's checkpoint brought back also brings back its log: ``train.log`` of the run's record folder (what
    ``scripts/cpu_training.sh snapshot`` copied there before ``keep``) is put beside it where the run has none, so that
    the trainer appends the next session's epochs to the earlier ones (its ``--- resumed at epoch N`` line between
    them) and the record keeps the whole run's log."""
    restored, lost = [], []
    for folder, name, pointer in _pointers(published):
        for e in [pointer, *pointer.get("data", [])]:
            dst = Path(root) / e["file"]
            if dst.exists():
                continue
            if not e.get("git"):
                lost.append(f"{folder / name}: {e['file']} is not here and was never kept in git's history; remove the "
                            "pointer to train the pair from scratch")
                continue
            try:
                history.restore(root, e["git"], dst, e["sha256"])
            except ConfigError as err:
                lost.append(f"{folder / name}: {e['file']} is not here, and {err}")
                continue
            restored.append(e["file"])
            log, earlier = dst.parent / "train.log", folder / "train.log"
            if e is pointer and name == CPU_POINTER and earlier.is_file() and not log.exists():
                with atomic_path(log) as tmp:
                    shutil.copyfile(earlier, tmp)
                restored.append(log.relative_to(root).as_posix())
    return restored, lost


def _entry(path: str, src: Path) -> dict[str, Any]:
    return {"file": path, "bytes": src.stat().st_size, "sha256": file_sha256(src)}


def save(root: str | os.PathLike[str], published: str | os.PathLike[str],
         cpu: tuple[Path, Path, Sequence[tuple[str, Path]]] | None = None) -> list[str]:
    """Keep in the repository's history (:func:`opflow.history.keep`, two commits) what a later session on a new
    machine needs to go on: the checkpoint of each lease pointer in ``published/*/`` that is not kept there yet, and,
    with ``cpu`` = ``(folder, checkpoint, data)``, the CPU run's checkpoint (read once, now: the trainer goes on
    replacing it) under :data:`CPU_POINTER` in ``folder``, with the data files it reads (``(path in the tree, the file to
    keep for it)``, kept once for the run: a pointer that lists one already keeps it). Writes the pointers with their
    ``git``; returns the paths kept (none when everything is kept already)."""
    import tempfile

    import torch

    root = Path(root)
    files: dict[str, Path] = {}
    updates: dict[Path, dict[str, Any]] = {}
    for folder, name, pointer in _pointers(published):
        if name == POINTER and not pointer.get("git") and ready(root, folder):
            files[pointer["file"]] = root / pointer["file"]
            updates[folder / name] = pointer
    with tempfile.TemporaryDirectory() as tmp:
        if cpu is not None:
            folder, checkpoint, data = cpu
            copy = Path(tmp) / "checkpoint.pt"
            shutil.copyfile(checkpoint, copy)  # one consistent file: the trainer replaces it by a rename
            old = read_pointer(folder, CPU_POINTER) or {}
            path = Path(checkpoint).resolve().relative_to(root.resolve()).as_posix()
            pointer = _entry(path, copy)
            if not (old.get("git") and old.get("sha256") == pointer["sha256"]):
                pointer["epochs_done"] = int(torch.load(copy, map_location="cpu", weights_only=False)["epoch"])
                files[path] = copy
                kept = {d["file"]: d for d in old.get("data", []) if d.get("git")}
                pointer["data"] = []
                for rel, src in data:
                    if rel in kept:
                        pointer["data"].append(kept[rel])
                    else:
                        pointer["data"].append(_entry(rel, Path(src)))
                        files[rel] = Path(src)
                updates[Path(folder) / CPU_POINTER] = pointer
        if not files:
            return []

        def point(commit: str) -> list[str]:
            for path, pointer in updates.items():
                for e in [pointer, *pointer.get("data", [])]:
                    e.setdefault("git", f"{commit}:{e['file']}")
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, json.dumps(pointer, indent=1, sort_keys=True) + "\n")
            return [p.resolve().relative_to(root.resolve()).as_posix() for p in updates]

        what = ", ".join(f"{p.parent.name} (epoch {u['epochs_done']})" for p, u in updates.items())
        history.keep(root, files, f"state: the checkpoints of {what} kept in the history for a later session "
                     "(opflow/history.py; the next commit takes them out of the tree)",
                     point, f"state: the pointers of {what} name the commit that keeps their files; the files out of the tree")
    return sorted(files)


def drop(root: str | os.PathLike[str], folder: str | os.PathLike[str]) -> list[str]:
    """Remove a finished pair's pointers from ``folder``: the lease's, with the checkpoint it names (relative to
    ``root``), and the CPU run's (its checkpoint in ``models/`` stays with the run); what was removed. Without a pointer
    nothing is touched."""
    folder = Path(folder)
    gone = []
    if read_pointer(folder, CPU_POINTER) is not None:
        (folder / CPU_POINTER).unlink()
        gone.append(CPU_POINTER)
    pointer = read_pointer(folder)
    if pointer is None:
        return gone
    (folder / POINTER).unlink()
    gone.append(POINTER)
    path = Path(root) / pointer["file"]
    if path.is_file():
        path.unlink()
        gone.append(pointer["file"])
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # its pair's folder, when nothing else is in it
    return gone


__all__ = ["CARRY_LIMIT", "CPU_POINTER", "DATA_DIR", "POINTER", "STATE_DIR", "carried_data", "drop", "keep", "place_data", "read_pointer", "ready",
           "restore", "save", "state_file"]
