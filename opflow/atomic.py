"""Atomic file writes: the one way opflow, its solvers, meshes and benchmarks write a finished file.

A file is written under a temporary name in its own folder and renamed over the final name with
``os.replace`` only when the writer returns. Readers therefore see the old file or the whole new
one, never a partial one; on an error the temporary file is removed. The temporary name is

    .<name>.tmp-<host>-<pid>-<random><suffix>        e.g.  .shard-0-100.nc.tmp-node7-4711-1a2b3c4d.nc

(``<suffix>`` kept so that writers that infer the format from it, such as gmsh, still work). The
NetCDF dataset writer, :class:`opflow.data.format.DatasetWriter`, keeps a file open over many calls
but takes its temporary name from :func:`temporary_name` too.

Stale temporaries. A process killed by SIGKILL (or a power cut, an out-of-memory kill, a cluster
job hitting its time limit) cannot remove its temporary file. Every atomic write therefore first
calls :func:`remove_stale_temporaries` on its target, so a rerun cleans up what the killed run
left. The rule that decides what is stale never touches a file that a live writer may still be
writing:

* a temporary of *this* host (the host name embedded in it) is stale when its embedded process id
  is not a running process (``os.kill(pid, 0)`` raises ``ProcessLookupError``). A live writer's
  pid is running by definition, so its file is kept; when a dead writer's pid has been reused by
  an unrelated process the file is kept too (the safe side), and goes at a later rerun. (Containers
  normally get their own host name, so a pid from another pid namespace is not looked up here);
* a temporary of *another* host (a shared file system under a cluster executor, where a pid of
  this machine means nothing) is stale only when it has not been modified for
  :data:`FOREIGN_STALE_AFTER_S` (7 days): a live writer modifies its file far more often;
* temporaries in the older ``.<name>.tmp-<pid>-<random>`` and ``.<stem>.tmp-<pid>-<random><suffix>``
  forms (no host; written by earlier versions) count as this host's.

Only the temporaries of the same target are considered (the name must match the pattern above
exactly), never other files of the folder.

Standard library only: cheap to import from anywhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

#: a temporary file of another host is removed only when unmodified for this long (seconds)
FOREIGN_STALE_AFTER_S = 7 * 24 * 3600


def _host() -> str:
    """This machine's name as embedded in temporary names (no path separators, at most 64 chars)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname() or "localhost")
    return name[:64] or "localhost"


def temporary_name(path: Path) -> Path:
    """The temporary sibling of ``path`` that an atomic write goes through (see module doc)."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}{path.suffix}")


def _temporary_pattern(path: Path) -> re.Pattern[str]:
    """Names of the temporaries of ``path``: the current form and the two older ones."""
    name, stem, suffix = (re.escape(s) for s in (path.name, path.stem, path.suffix))
    tail = r"(?P<pid>\d+)-[0-9a-f]{8}"
    return re.compile(
        rf"^\.(?:{name}\.tmp-(?:(?P<host>.+)-)?{tail}(?:{suffix})?|{stem}\.tmp-(?P<pid2>\d+)-[0-9a-f]{{8}}{suffix})$"
    )


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a real writer pid: never treat as dead
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists but belongs to someone else (or cannot tell): keep its file
    return True


def remove_stale_temporaries(path: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporaries of ``path`` left by killed writers; return the removed paths.

    See the module docstring for the rule: this host's temporaries whose writer process is gone,
    other hosts' temporaries unmodified for :data:`FOREIGN_STALE_AFTER_S`. Never raises for a file
    that vanished or cannot be removed meanwhile (another rerun may be cleaning up too).
    """
    path = Path(path)
    if not path.parent.is_dir():
        return []
    pattern = _temporary_pattern(path)
    here, now, removed = _host(), time.time(), []
    with os.scandir(path.parent) as entries:
        candidates = [e for e in entries if e.name.startswith(".") and ".tmp-" in e.name]
    for entry in candidates:
        m = pattern.match(entry.name)
        if m is None:
            continue
        pid = int(m.group("pid") or m.group("pid2"))
        host = m.group("host")
        try:
            if host is None or host == here:
                stale = not _pid_alive(pid)
            else:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > FOREIGN_STALE_AFTER_S
            if stale:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on a normal exit rename it over ``path`` (parents created).

    Stale temporaries of ``path`` left by killed writers are removed first (see module doc).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
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
