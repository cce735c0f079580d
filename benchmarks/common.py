"""Helpers shared by the benchmark scripts in ``benchmarks/``.

Package versions, the load average, median/min/max summaries, the ``machine`` block of the result
JSON, the creation time stamp and the one atomic JSON writer. Several scripts pin the BLAS/OpenMP
thread counts in ``os.environ`` before numpy is first imported, and import this module in between:
it therefore imports only the standard library at module level (numpy is imported inside
:func:`summary`).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
from collections.abc import Callable, Sequence
from typing import Any

from opflow.atomic import atomic_write_text

__all__ = ["loadavg", "machine", "summary", "timed_repeats", "utc_timestamp", "versions", "write_json_atomic"]


def versions(*packages: str, missing: str | None = "not installed") -> dict[str, str]:
    """The Python version and the installed version of each of ``packages``.

    A package that is not installed maps to ``missing``, or is left out when ``missing`` is None.
    """
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if missing is not None:
                out[name] = missing
    return out


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages rounded to 2 decimals; None where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def timed_repeats(step: Callable[[], object], repeats: int, sync: Callable[[], None] = lambda: None) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``step``, each followed by ``sync`` (e.g. a CUDA synchronise)."""
    import time

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def summary(values: Sequence[float]) -> dict[str, float]:
    """``{"median", "min", "max"}`` of ``values`` (non-empty) as floats."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}


def machine(loadavg_start: list[float] | None, *, packages: Sequence[str] | None = None, **extra: Any) -> dict[str, Any]:
    """The ``machine`` block of a result: CPU count, processor, platform, load average at start
    (``loadavg_start``, taken by the caller) and now (``loadavg_end``), then ``extra`` and, when
    ``packages`` is given, :func:`versions` of them (with ``python``)."""
    block: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "loadavg_start": loadavg_start,
        "loadavg_end": loadavg(),
        **extra,
    }
    if packages is not None:
        block.update(versions(*packages))
    return block


def utc_timestamp() -> str:
    """The current UTC time, ISO 8601 to the second (the ``created`` field)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int = 2) -> None:
    """Write ``obj`` as JSON (and a final newline) to ``path``, creating its parent folders.

    Written through :func:`opflow.atomic.atomic_write_text`: readers see the old file or the whole
    new one, never a partial one.
    """
    atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")
