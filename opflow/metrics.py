"""Error measures of predicted functions, mask-aware, per sample and per channel.

For a sample with prediction ``p`` and truth ``u`` at points ``x_1 .. x_N`` (real points only: a
``mask`` drops padding) and channel ``c``:

* relative L2 (ONO Eq. 1, FNO, GNOT, Galerkin; PROTOCOLS "rel L2")::

      e_c = ||p_c - u_c||_2 / ||u_c||_2 ,  ||v||_2^2 = sum_n v(x_n)^2

  and over all channels jointly ``e = ||p - u||_2 / ||u||_2`` with the sum over points and channels.
  On a uniform grid the point sums are the L2(D) integrals up to the cell area, which cancels.
* the training loss ``rel_l2`` = mean over the batch of the per-sample mean over channels of
  ``e_c``: each output channel counts equally, whatever its magnitude (with one output channel,
  as in Darcy, this is exactly ONO's loss);
* relative H1 on grids (continuum-attention protocol's training loss)::

      h_c = ||p_c - u_c||_H1 / ||u_c||_H1 ,  ||v||_H1^2 = sum_n v^2 + sum_n |grad v|^2

  with the gradient by second-order central differences inside the grid and first-order one-sided
  differences at its edges (``torch.gradient`` with the grid's own coordinates as spacing);
* ``mse``: mean squared error over real points and channels.

Grouped errors. :func:`squared_sums` keeps, per sample and channel, ``sum_n (p - u)^2`` and
``sum_n u^2``; :func:`relative_l2_groups` turns them into the relative L2 error over any set of
channels jointly (``sqrt(sum_{c in G} e2_c / sum_{c in G} r2_c)``). Evaluation of a rollout uses
it: the channels of a rollout target are the predicted steps, so a group of one step gives the
per-step error, all steps the full-trajectory error, and the ONO "seen" / "unseen" frames their
own errors, from one pass over the test set.

A zero truth makes the relative errors undefined; the denominator is floored at the smallest
positive float, so a zero prediction of a zero field gives 0 and anything else a huge value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from opflow.config import LOSSES


def _weights(true: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
    if mask is None:
        return None
    if mask.shape != true.shape[:2]:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not match points {tuple(true.shape[:2])}")
    return mask.to(true.dtype).unsqueeze(-1)


def _sq_sums(pred: torch.Tensor, true: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample and channel: sum of squared error and of squared truth over real points, (B, C)."""
    if pred.shape != true.shape:
        raise ValueError(f"prediction shape {tuple(pred.shape)} differs from target shape {tuple(true.shape)}")
    w = _weights(true, mask)
    err2 = (pred - true) ** 2
    ref2 = true**2
    if w is not None:
        err2, ref2 = err2 * w, ref2 * w
    return err2.sum(dim=1), ref2.sum(dim=1)


def _ratio(num2: torch.Tensor, den2: torch.Tensor) -> torch.Tensor:
    tiny = torch.finfo(den2.dtype).tiny
    return torch.sqrt(num2) / torch.sqrt(den2.clamp_min(tiny))


def relative_l2(pred: torch.Tensor, true: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sample, per-channel relative L2 error, shape (B, C); inputs (B, N, C), mask (B, N)."""
    e2, r2 = _sq_sums(pred, true, mask)
    return _ratio(e2, r2)


def relative_l2_joint(pred: torch.Tensor, true: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sample relative L2 error over all channels jointly, shape (B,)."""
    e2, r2 = _sq_sums(pred, true, mask)
    return _ratio(e2.sum(dim=1), r2.sum(dim=1))


def squared_sums(pred: torch.Tensor, true: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample and channel ``(sum_n (p - u)^2, sum_n u^2)`` over real points, each (B, C)."""
    return _sq_sums(pred, true, mask)


def relative_l2_groups(e2: Any, r2: Any, channels: Sequence[int] | None = None) -> np.ndarray:
    """Per-sample relative L2 over the ``channels`` jointly (all by default) from :func:`squared_sums`."""
    e2, r2 = np.asarray(e2, dtype=np.float64), np.asarray(r2, dtype=np.float64)
    if channels is not None:
        idx = np.asarray(channels, dtype=np.int64)
        e2, r2 = e2[:, idx], r2[:, idx]
    den = np.maximum(r2.sum(axis=1), np.finfo(np.float64).tiny)
    return np.sqrt(e2.sum(axis=1)) / np.sqrt(den)


def rel_l2_loss(pred: torch.Tensor, true: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over the batch of the per-sample mean over channels of the relative L2 error."""
    return relative_l2(pred, true, mask).mean()


def mse_loss(pred: torch.Tensor, true: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error over real points and channels."""
    e2, _ = _sq_sums(pred, true, mask)
    n = true.shape[0] * true.shape[1] if mask is None else mask.sum()
    return e2.sum() / (n * true.shape[2])


def grid_axes(coords: torch.Tensor, grid_shape: Sequence[int]) -> list[torch.Tensor]:
    """The 1-D coordinates along each axis of a row-major grid given its points ``coords`` (N, d)."""
    d = len(grid_shape)
    g = coords.reshape(*grid_shape, coords.shape[-1])
    axes = []
    for k in range(d):
        idx: list[Any] = [0] * d
        idx[k] = slice(None)
        axes.append(g[tuple(idx)][..., k])
    return axes


def _grad_sq(v: torch.Tensor, grid_shape: Sequence[int], axes: Sequence[torch.Tensor]) -> torch.Tensor:
    """sum_n |grad v|^2 per sample and channel; ``v`` (B, N, C) on a row-major grid."""
    b, _, c = v.shape
    g = v.reshape(b, *grid_shape, c)
    dims = list(range(1, len(grid_shape) + 1))
    grads = torch.gradient(g, spacing=list(axes), dim=dims, edge_order=1)
    return sum((gk**2).flatten(1, -2).sum(dim=1) for gk in grads)


def relative_h1(
    pred: torch.Tensor, true: torch.Tensor, coords: torch.Tensor, grid_shape: Sequence[int], mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-sample, per-channel relative H1 error on a grid, shape (B, C) (module docstring).

    ``coords`` are the grid's points (N, d) or (B, N, d) (the first sample's are used: one grid
    per batch); padded batches (a mask with False entries) have no grid and are refused.
    """
    if grid_shape is None:
        raise ValueError("relative H1 needs grid data (grid_shape); use rel_l2 or mse for point clouds and meshes")
    if mask is not None and not bool(mask.all()):
        raise ValueError("relative H1 needs complete grids; the batch has padded points")
    c0 = coords[0] if coords.dim() == 3 else coords
    axes = [a.to(pred.dtype) for a in grid_axes(c0, grid_shape)]
    e2, r2 = _sq_sums(pred, true, None)
    e2 = e2 + _grad_sq(pred - true, grid_shape, axes)
    r2 = r2 + _grad_sq(true, grid_shape, axes)
    return _ratio(e2, r2)


def rel_h1_loss(pred: torch.Tensor, true: torch.Tensor, coords: torch.Tensor, grid_shape: Sequence[int], mask: torch.Tensor | None = None) -> torch.Tensor:
    return relative_h1(pred, true, coords, grid_shape, mask).mean()


def training_loss(
    name: str,
    pred: torch.Tensor,
    true: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    coords: torch.Tensor | None = None,
    grid_shape: Sequence[int] | None = None,
) -> torch.Tensor:
    """The configured loss (one of :data:`opflow.config.LOSSES`) of a batch, a scalar."""
    if name == "rel_l2":
        return rel_l2_loss(pred, true, mask)
    if name == "mse":
        return mse_loss(pred, true, mask)
    if name == "rel_h1":
        if coords is None or grid_shape is None:
            raise ValueError("loss rel_h1 needs grid data (coords and grid_shape); use rel_l2 for point clouds and meshes")
        return rel_h1_loss(pred, true, coords, grid_shape, mask)
    raise ValueError(f"unknown loss {name!r}; use one of {list(LOSSES)}")


def summary(values: Any) -> dict[str, float]:
    """``mean``, ``median``, ``std`` (population), ``max`` and ``n`` of a 1-D array of errors."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return {"mean": float("nan"), "median": float("nan"), "std": float("nan"), "max": float("nan"), "n": 0}
    return {"mean": float(v.mean()), "median": float(np.median(v)), "std": float(v.std()), "max": float(v.max()), "n": int(v.size)}
