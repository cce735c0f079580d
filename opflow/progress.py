"""How long a training takes: a time span as a person reads it, and the time left at a run's pace.

One place for the estimates that the trainer's epoch line (:mod:`opflow.train`), the lease queue's table
(:mod:`opflow.queue`) and the page of a run in progress (:mod:`opflow.doc_tables`) print. Torch-free; imports
nothing of opflow.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PACE_WINDOW", "duration", "epoch_times", "time_left"]

#: the last epochs whose median is a run's pace (its settings and machine change over a long run)
PACE_WINDOW = 20


def duration(s: float) -> str:
    """``45 s``, ``12 min`` or ``3.2 h``: a time span as a person reads it."""
    if s < 90:
        return f"{max(1, round(s))} s"
    return f"{max(1, round(s / 60))} min" if s < 5400 else f"{s / 3600:.1f} h"


def epoch_times(curves: Sequence[Mapping[str, Any]]) -> list[float]:
    """The wall seconds of every epoch of the curves but the run's first (``epoch`` 1 holds the warm-up)."""
    return [float(r["epoch_time_s"]) for r in curves if int(r["epoch"]) > 1]


def time_left(curves: Sequence[Mapping[str, Any]], epochs: int, window: int = PACE_WINDOW) -> str:
    """``"~3.2 h left"``: the epochs still to run of ``epochs`` times the median time of the last ``window``
    epochs (:func:`epoch_times`); ``""`` before two epochs or after the last."""
    left = epochs - int(curves[-1]["epoch"]) if curves else 0
    times = epoch_times(curves)[-window:]
    if left <= 0 or not times:
        return ""
    return f"~{duration(left * statistics.median(times))} left"
