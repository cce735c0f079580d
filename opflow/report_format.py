"""How the reproduction report writes its numbers: one format per kind of number, on every row.

* errors (ours and the published ones): three significant digits in scientific notation with a
  short exponent, ``8.43e-3`` (:func:`sci`), so that a column reads the same whatever the size;
* ours / published: two decimals, ``0.33`` (:func:`ratio`);
* training time: hours and minutes, ``1:23`` (:func:`hmm`), the one unit of its column;
* estimated cost: hours with one decimal and thousands separators, ``1,130.6`` (:func:`hours`);
* counts: thousands separators, ``2,368,001`` (:func:`count`).

Each returns ``"-"`` for a missing or non-finite number.
"""

from __future__ import annotations

import math

NONE = "-"


def _finite(x: float | None) -> bool:
    return x is not None and isinstance(x, int | float) and math.isfinite(x)


def sci(x: float | None) -> str:
    """Three significant digits, scientific: ``0.008428`` -> ``8.43e-3``, ``0.1164`` -> ``1.16e-1``."""
    if not _finite(x):
        return NONE
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def ratio(x: float | None) -> str:
    """Ours / published with two decimals: ``0.3273`` -> ``0.33``."""
    return f"{x:.2f}" if _finite(x) else NONE


def hmm(seconds: float | None) -> str:
    """A duration as hours:minutes, rounded to the minute: ``5798`` -> ``1:37``, ``85.9`` -> ``0:01``."""
    if not _finite(seconds):
        return NONE
    minutes = round(seconds / 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def hours(h: float | None) -> str:
    """Hours with one decimal: ``1130.58`` -> ``1,130.6``, ``0.0723`` -> ``0.1``."""
    return f"{h:,.1f}" if _finite(h) else NONE


def count(n: int | None) -> str:
    """An integer with thousands separators: ``2368001`` -> ``2,368,001``."""
    return f"{n:,}" if isinstance(n, int) else NONE
