"""Atomic file writes: the one way opflow, its solvers, meshes and benchmarks write a finished file.

A file is written under a temporary name in its own folder (``.<stem>.tmp-<pid>-<random><suffix>``,
the suffix kept so that writers that infer the format from it, such as gmsh, still work) and renamed
over the final name with ``os.replace`` only when the writer returns. Readers therefore see the old
file or the whole new one, never a partial one; on an error or a kill no finished-looking file
appears, and the temporary file is removed where the process survives to do so.

(The NetCDF dataset writer, :class:`opflow.data.format.DatasetWriter`, keeps a file open over many
calls and manages its own temporary name with the same rule.)

Standard library only: cheap to import from anywhere.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """The temporary sibling of ``path`` that an atomic write goes through."""
    return path.with_name(f".{path.stem}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{path.suffix}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on a normal exit rename it over ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (readable by everyone, like a plain ``open``)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
