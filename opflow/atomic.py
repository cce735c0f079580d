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

Out of space. A write that fails because the file system (or the user's quota, or the file-size
limit of ``ulimit -f``) is full raises :class:`opflow.data.errors.DiskFullError` naming the path,
the bytes free there and the bytes being written, after the temporary file is removed (so the
message itself, and the log it goes to, have room again): :func:`no_space_error`. Where the size
is known before the work starts (merging shards, deriving a dataset), :func:`require_space`
refuses at once instead of failing at the end.

Standard library only: cheap to import from anywhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

#: errno values of a write that found no room: file system full, quota exceeded, file-size limit
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

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


# --------------------------------------------------------------------------- out of space


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (the file system a new file would land on)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged writer may still use on the file system that holds (or would hold) ``path``."""
    st = os.statvfs(_existing(Path(path)))
    return st.f_bavail * st.f_frsize


def mount_point(path: str | os.PathLike[str]) -> Path:
    """The mount point of the file system that holds (or would hold) ``path``."""
    p = _existing(Path(path))
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def file_size_limit() -> int | None:
    """The soft file-size limit of this process (``ulimit -f``) in bytes, or None when unlimited."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n} bytes ({n / scale:.1f} {unit})"
    return f"{n} bytes"


def no_space_error(
    path: str | os.PathLike[str],
    *,
    need: int | None = None,
    raw: int | None = None,
    written: int | None = None,
    before: bool = False,
    what: str = "the file needs about",
    done: str | None = None,
) -> Exception:
    """The :class:`~opflow.data.errors.DiskFullError` of a write of ``path`` that found no room.

    ``need``: the bytes the file takes (or an estimate), when known; ``raw``: else the size of its
    data uncompressed (an upper bound), when known; ``written``: how far the write
    got before it failed; ``before``: refused before writing (:func:`require_space`) rather than
    failed midway (then the partial file has been removed); ``what`` and ``done`` reword the need
    ("the file needs about") and the outcome ("nothing was written") for a refusal before other work,
    such as solving a shard's samples. The message names the file system and its free bytes, or
    the file-size limit when that is what stopped the write.
    """
    from opflow.data.errors import DiskFullError

    path = Path(path)
    limit, free, mount = file_size_limit(), free_bytes(path), mount_point(path)
    # the file system has room for all of it: what stopped the write is the file-size limit
    if limit is not None and free > max(need or 0, written or 0) + 2**20:
        where = f"the file-size limit of this process (ulimit -f) is {_size(limit)}"
        fix = "raise the limit (ulimit -f unlimited) or write smaller files"
    else:
        where = f"no space left on device: the file system {mount} has {_size(free)} free"
        fix = f"free space on {mount} or write elsewhere (the config's root: names the output folder)"
    parts = [where]
    if need is not None:
        parts.append(f"{what} {_size(need)}")
    elif raw is not None:
        parts.append(f"its data take {_size(raw)} uncompressed")
    if written is not None and not before:
        parts.append(f"{_size(written)} were written")
    done = done or ("nothing was written" if before else "the partial file was removed")
    return DiskFullError(f"{path}: {'; '.join(parts)}; {done}; {fix}")


def require_space(path: str | os.PathLike[str], need: int, *, what: str = "the file needs about", done: str | None = None) -> None:
    """Refuse (:class:`~opflow.data.errors.DiskFullError`) to start writing ``need`` bytes to ``path``
    when its file system has less free, or the file-size limit is lower (``what``, ``done``: the
    wording of :func:`no_space_error`)."""
    limit = file_size_limit()
    if need > free_bytes(path) or (limit is not None and need > limit):
        raise no_space_error(path, need=need, before=True, what=what, done=done)


def is_out_of_space(exc: BaseException, tmp: str | os.PathLike[str], *, margin: int = 2**20) -> bool:
    """Whether writing ``tmp`` failed with ``exc`` for lack of room.

    True for an :class:`OSError` with an errno of :data:`NO_SPACE_ERRNOS`; libraries that hide the
    errno (HDF5 under netCDF4 raises ``RuntimeError("NetCDF: HDF error")``) count when the file
    system has less than ``margin`` bytes free or ``tmp`` has reached the file-size limit.
    """
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in NO_SPACE_ERRNOS
    if not isinstance(exc, OSError | RuntimeError):
        return False
    try:
        if free_bytes(tmp) < margin:
            return True
        limit = file_size_limit()
        return limit is not None and Path(tmp).exists() and Path(tmp).stat().st_size + min(margin, limit // 4) >= limit
    except OSError:
        return False


def written_bytes(tmp: str | os.PathLike[str]) -> int | None:
    """Bytes of ``tmp`` so far, as allocated on disk (None when it does not exist)."""
    try:
        st = Path(tmp).stat()
        return min(st.st_size, st.st_blocks * 512) if hasattr(st, "st_blocks") else st.st_size
    except OSError:
        return None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on a normal exit rename it over ``path`` (parents created).

    Stale temporaries of ``path`` left by killed writers are removed first (see module doc). A
    write that runs out of space becomes :class:`~opflow.data.errors.DiskFullError`, the
    temporary removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = temporary_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        if not is_out_of_space(e, tmp):
            raise
        err = no_space_error(path, written=written_bytes(tmp))  # measured before the temporary goes
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise err from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (readable by everyone, like a plain ``open``)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def atomic_link(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Make ``path`` the file ``source`` is now, atomically: a hard link (no copy; a later atomic replacement of
    ``source`` leaves ``path`` as it was), or a copy where the file system has no hard links."""
    import shutil

    with atomic_path(path) as tmp:
        try:
            os.link(source, tmp)
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            shutil.copyfile(source, tmp)
