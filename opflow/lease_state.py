"""Where a pair that a GPU lease left unfinished waits for the next lease: its checkpoint beside git, a pointer in it.

A checkpoint holds the weights, AdamW's two moments, the step counts, the scheduler and the RNG: about 12 bytes per
parameter, 15 MB for ONO and 27-29 MB for the Galerkin / Fourier Transformers and FNO at their paper sizes. Two reasons
keep it out of the tracked files:

* every tracked file travels with every command to the GPU machine, and the tracked files (about 10 MB) and the
  wheels (25 MB) leave about 31 MB of a command's 64 MiB: one such checkpoint, not two. So a lease carries only the
  checkpoints of the pairs it resumes (``opflow queue --next M --carry`` names them, within that budget);
* in git each lease would add its checkpoint to the history for good (15-29 MB a lease), which every clone downloads.

So ``scripts/queue_pull.sh`` keeps an unfinished pair's checkpoint in ``.lease-state/<pair>/checkpoint.pt`` (ignored by
git, on the machine that pulls the leases, as the CPU's own training keeps its checkpoint in ``models/``) and writes
``published/<pair>/checkpoint.json`` (tracked), the pointer::

    {"file": ".lease-state/<pair>/checkpoint.pt", "bytes": N, "sha256": "...", "epochs_done": E}

beside the run's log, curves and page. The queue reads the pair as *in progress* from the pointer, and as *ready* to
resume where the file is present with that size and hash (:func:`ready`): on the GPU machine, where it was carried.
A pair whose checkpoint is not ready is not trained by that lease (it would start again from scratch); a lost file
is noticed, not silently replaced.

Data the GPU machine cannot make (the FEM sets: no dolfinx there) waits here too: ``.lease-state/data/<x>`` is the
subset of ``data/<x>`` that the queued pairs reading it need (:mod:`opflow.data.subset`; ``data/elasticity/all.nc``,
40.5 MB, becomes 11.6 MB), written by ``opflow queue --next M --carry`` (:func:`opflow.queue.carried_data`) and
copied into ``data/`` there by ``scripts/device_session.sh --queue`` (:func:`place_data`: never over a file
already there).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from opflow.atomic import atomic_path, atomic_write_text
from opflow.data.errors import ConfigError
from opflow.records import file_sha256

#: the ignored folder of the checkpoints of unfinished lease pairs (one subfolder per ``<dataset>_<model>``)
STATE_DIR = ".lease-state"
#: the pointer's name in ``published/<pair>/``
POINTER = "checkpoint.json"
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


def read_pointer(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The pointer in a record folder ``published/<pair>/``, or None where there is none; a damaged one is an error
    that names the file."""
    path = Path(folder) / POINTER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if not (isinstance(data, dict) and isinstance(data["file"], str) and int(data["bytes"]) > 0 and len(str(data["sha256"])) == 64):
            raise ValueError("not {file, bytes, sha256, epochs_done}")
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: not a lease checkpoint pointer ({e}); restore it from git, or remove it to train the pair from scratch") from None
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


def drop(root: str | os.PathLike[str], folder: str | os.PathLike[str]) -> list[str]:
    """Remove a finished pair's pointer from ``folder`` and the checkpoint it names (relative to ``root``); what was
    removed. Without a pointer nothing is touched."""
    folder = Path(folder)
    pointer = read_pointer(folder)
    if pointer is None:
        return []
    (folder / POINTER).unlink()
    gone = [POINTER]
    path = Path(root) / pointer["file"]
    if path.is_file():
        path.unlink()
        gone.append(pointer["file"])
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # its pair's folder, when nothing else is in it
    return gone


__all__ = ["CARRY_LIMIT", "DATA_DIR", "POINTER", "STATE_DIR", "carried_data", "drop", "keep", "place_data", "read_pointer", "ready", "state_file"]
