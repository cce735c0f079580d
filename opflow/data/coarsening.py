"""The coarse grid of the inverse view, as arithmetic on node counts (pure Python: the workflow checks a config with
it when it loads, and both :mod:`opflow.data.inverse` and the view kind :mod:`opflow.data.views.inverse` use it).

Along an axis of n fine nodes and an integer factor f, the coarse grid has n_c = ceil(n / f) values
(:func:`coarse_size`; the block mean of :func:`opflow.data.inverse.block_average` defines them). Its nodes span the
fine grid's box, so coarse node I sits at fine position (n - 1) I / (n_c - 1); that is the fine node f I exactly when
n - 1 = f (n_c - 1) (:func:`coarse_node_count`), the condition of ``view.inputs: coarse``, which reads the inputs
there (141 -> 36 with f = 4 and 211 -> 71 with f = 3 meet it; the Galerkin Transformer, Example 3).
"""

from __future__ import annotations

from .errors import DatasetError

__all__ = ["coarse_node_count", "coarse_size"]


def coarse_size(n: int, factor: int) -> int:
    """n_c = ceil(n / factor): coarse values along an axis of ``n`` fine nodes."""
    if factor < 1 or n < 1:
        raise DatasetError(f"coarse_size: need n >= 1 and factor >= 1, got n = {n}, factor = {factor}")
    return -(-n // factor)


def coarse_node_count(n: int, factor: int) -> int:
    """n_c when the coarse nodes are fine nodes (n - 1 = f (n_c - 1)); otherwise a :class:`DatasetError` naming the
    nearest resolutions that would do."""
    nc = coarse_size(n, factor)
    if n - 1 != factor * (nc - 1):
        below = n - (n - 1) % factor
        fits = " or ".join(str(m) for m in (below, below + factor) if m >= 2)
        raise DatasetError(
            f"view.inputs: coarse reads the inputs at the coarse nodes, which lie on a grid of {n} nodes per axis only when "
            f"{n} - 1 is a multiple of factor {factor}; use the resolution {fits}, or inputs: fine"
        )
    return nc
