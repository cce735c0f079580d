"""Helpers shared by the benchmark scripts in ``benchmarks/``.

Package versions, the load average, median/min/max summaries, the ``machine`` block of the result
JSON, the creation time stamp, the one atomic JSON writer and the one grammar of the speed
benchmarks' ``--variants`` (:func:`parse_variant`). Several scripts pin the BLAS/OpenMP
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

__all__ = ["loadavg", "machine", "parse_variant", "summary", "timed_repeats", "utc_timestamp", "versions", "write_json_atomic"]


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
    from opflow.runtime import cpu_identity  # not at module level: it imports numpy and torch (module docstring)

    block: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "cpu": cpu_identity(),
        "loadavg_start": loadavg_start,
        "loadavg_end": loadavg(),
        **extra,
    }
    if packages is not None:
        block.update(versions(*packages))
    return block


def status_kib(key: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``); None where there is none (not Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def utc_timestamp() -> str:
    """The current UTC time, ISO 8601 to the second (the ``created`` field)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int = 2) -> None:
    """Write ``obj`` as JSON (and a final newline) to ``path``, creating its parent folders.

    Written through :func:`opflow.atomic.atomic_write_text`: readers see the old file or the whole
    new one, never a partial one.
    """
    atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")


#: every token of a speed variant: one precision (fp32, tf32 = float32 with TF32 matrix products, bf16
#: autocast), torch.compile, the training data held on the device, the step captured as a CUDA graph
VARIANT_TOKENS = ("fp32", "tf32", "bf16", "compile", "ondevice", "graphs")
PRECISION_TOKENS = ("fp32", "tf32", "bf16")


def parse_variant(name: str, tokens: Sequence[str] = VARIANT_TOKENS) -> dict[str, Any]:
    """``"bf16+compile+ondevice"`` -> ``{"precision": "bf16", "compile": True, "data_on_device": True, "cuda_graphs": False}``.

    Tokens of ``tokens`` joined by ``+``, each once, at most one precision (``fp32``, ``tf32`` or ``bf16``;
    none = fp32); ValueError naming the bad entry and the tokens otherwise. A benchmark that cannot switch
    something passes the tokens it can (``benchmarks/ono_official.py`` has no ``ondevice``).
    """
    toks = [t for t in name.strip().split("+") if t]
    bad = [t for t in toks if t not in tokens]
    if bad or not toks or len(set(toks)) != len(toks):
        raise ValueError(f"--variants: {name!r} is not a variant; join the tokens {list(tokens)} with '+', each once (e.g. bf16+compile)")
    precs = [t for t in toks if t in PRECISION_TOKENS]
    if len(precs) > 1:
        raise ValueError(f"--variants: {name!r} names two precisions; use one of {list(PRECISION_TOKENS)}")
    return {"precision": precs[0] if precs else "fp32", "compile": "compile" in toks, "data_on_device": "ondevice" in toks, "cuda_graphs": "graphs" in toks}
