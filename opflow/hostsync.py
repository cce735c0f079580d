"""Host-device synchronisation: which checks of tensor *values* may make the host wait for the GPU.

A check such as ``bool(mask.all())`` or ``float(x)`` copies a value from the GPU to the host, so
the host stops launching kernels until the GPU has done all the work queued before it. In a
training step of many small kernels (ONO on Darcy: 21 ms of GPU work per step in bf16) one such
wait per layer leaves the GPU idle most of the time; it also breaks a ``torch.compile`` graph and
makes the step impossible to capture as a CUDA graph.

Two kinds of checks, two treatments:

* **Checks of the caller's input** (a mask row with no real point, quadrature weights that sum to
  zero, query points equal to the input points): they run when :func:`checks_on` is true, i.e.
  outside :func:`deferred_checks` and outside ``torch.compile``'s tracing. The trainer runs every
  step inside :func:`deferred_checks` after the data were checked once, when the split was loaded
  (:mod:`opflow.data.torch_data` builds every mask from the samples' point counts, each >= 1).
* **Numerical faults found inside a model** (the ONO Cholesky factorisation that fails even with
  jitter, a non-finite covariance): a module counts them *on the device* in a buffer named
  ``fault_counts`` (int64, one entry per message of its ``fault_messages``), with no branch on the
  value. :func:`take_faults` reads every counter of a model with one wait, resets them, and returns
  the messages of the faults that happened; the trainer calls it once per epoch, with the epoch's
  loss, and raises for an error (naming the epoch) or logs a warning. Outside
  :func:`deferred_checks` such a module raises or warns at once, as before (eager use, tests).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import torch
from torch import nn

_deferred = 0


@contextlib.contextmanager
def deferred_checks() -> Iterator[None]:
    """Inside: no check of a tensor value waits for the device (module docstring); nestable."""
    global _deferred
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1


def checks_on() -> bool:
    """Whether value checks that wait for the device run here: not in :func:`deferred_checks`, not
    while ``torch.compile`` traces (a data-dependent branch would break the graph)."""
    return _deferred == 0 and not torch.compiler.is_compiling()


def add_fault_counters(module: nn.Module, messages: tuple[tuple[int, str], ...]) -> None:
    """Give ``module`` the device-side fault counters of :func:`take_faults`: a non-persistent
    int64 buffer ``fault_counts`` (not in the state dict, so checkpoints do not change) and
    ``fault_messages``, one ``(logging level, message)`` per counter."""
    module.fault_messages = messages
    module.register_buffer("fault_counts", torch.zeros(len(messages), dtype=torch.long), persistent=False)


def take_faults(model: nn.Module) -> list[tuple[int, str, int]]:
    """``(level, message, count)`` of every fault counted in ``model`` since the last call (counts
    summed over the modules with the same message), the counters reset to zero. One wait for the
    device, for all the counters together; no wait when the model has none."""
    mods = [m for m in model.modules() if isinstance(getattr(m, "fault_counts", None), torch.Tensor)]
    if not mods:
        return []
    counts = torch.cat([m.fault_counts for m in mods]).tolist()
    for m in mods:
        m.fault_counts.zero_()
    total: dict[tuple[int, str], int] = {}
    pos = 0
    for m in mods:
        for level, msg in m.fault_messages:
            total[(level, msg)] = total.get((level, msg), 0) + int(counts[pos])
            pos += 1
    return [(level, msg, n) for (level, msg), n in total.items() if n]


def raise_faults(faults: list[tuple[int, str, int]], where: str, warn: Callable[[str], None] | None = None) -> None:
    """Raise the first ERROR-level fault of :func:`take_faults`'s list as ``FloatingPointError``
    (prefixed by ``where``); pass the others to ``warn`` as one line each."""
    for level, msg, n in faults:
        if level >= logging.ERROR:
            raise FloatingPointError(f"{where}: {msg} ({n} time(s))")
    for _level, msg, n in faults:
        if warn is not None:
            warn(f"{where}: {msg} ({n} time(s))")


__all__ = ["add_fault_counters", "checks_on", "deferred_checks", "raise_faults", "take_faults"]
