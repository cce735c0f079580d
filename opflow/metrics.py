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
* ``mse``: mean squared error over real points and channels;
* the derivative regulariser (``training.grad_weight`` > 0, grids only), added to any of them:
  ``grad_form: central`` is the ONO authors' released Darcy script's ``deriv_loss``, per sample
  and channel ``sum over axes a of ||D_a p~ - D_a u|| / ||D_a u||`` with ``D_a`` the central
  difference ``(v[i+1] - v[i-1]) / 2`` at every node, values outside the grid taken as zero, and
  ``p~`` the prediction with its boundary ring set to zero (homogeneous Dirichlet data: it needs
  the physical units); its weight there is 0.1 (:func:`gradient_loss`).

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

from opflow.losses import GRAD_FORMS, LOSSES
from opflow.hostsync import checks_on


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
    if mask is not None and checks_on() and not bool(mask.all()):
        raise ValueError("relative H1 needs complete grids; the batch has padded points")
    c0 = coords[0] if coords.dim() == 3 else coords
    axes = [a.to(pred.dtype) for a in grid_axes(c0, grid_shape)]
    e2, r2 = _sq_sums(pred, true, None)
    e2 = e2 + _grad_sq(pred - true, grid_shape, axes)
    r2 = r2 + _grad_sq(true, grid_shape, axes)
    return _ratio(e2, r2)


def rel_h1_loss(pred: torch.Tensor, true: torch.Tensor, coords: torch.Tensor, grid_shape: Sequence[int], mask: torch.Tensor | None = None) -> torch.Tensor:
    return relative_h1(pred, true, coords, grid_shape, mask).mean()


def central_differences(v: torch.Tensor, grid_shape: Sequence[int]) -> list[torch.Tensor]:
    """The derivative of the ONO authors' Darcy script along each grid axis, in grid units.

    ``v`` (B, N, C) on a row-major grid; returns, per axis, ``(v[i+1] - v[i-1]) / 2`` at every node
    (B, *grid_shape, C), the values outside the grid taken as zero (their ``central_diff``, whose
    ``1/h`` factor cancels in the relative errors).
    """
    b, _, c = v.shape
    g = v.reshape(b, *grid_shape, c)
    out = []
    for ax, n in enumerate(grid_shape, start=1):
        pad = [0, 0] * (g.dim() - 1 - ax) + [1, 1]  # F.pad lists the last axis first
        p = torch.nn.functional.pad(g, pad)
        out.append((p.narrow(ax, 2, n) - p.narrow(ax, 0, n)) / 2)
    return out


def _zero_boundary(v: torch.Tensor, grid_shape: Sequence[int]) -> torch.Tensor:
    """``v`` (B, N, C) with the outer ring of nodes of its grid set to zero."""
    inner = torch.zeros(tuple(grid_shape), dtype=torch.bool, device=v.device)
    inner[tuple(slice(1, n - 1) for n in grid_shape)] = True
    return v * inner.reshape(1, -1, 1).to(v.dtype)


def h1_regulariser(
    pred: torch.Tensor, true: torch.Tensor, coords: torch.Tensor, grid_shape: Sequence[int], weight: torch.Tensor | None = None
) -> torch.Tensor:
    """The Galerkin Transformer's H1-seminorm regulariser per sample and channel, shape (B, C).

    Cao 2021, "Choose a Transformer: Fourier or Galerkin", Section 3 (the term ``gamma ||a grad(T(a)
    - u)||^2`` of eq. 1) and Appendix C.1, as the authors' ``WeightedL2Loss2d`` / ``WeightedL2Loss``
    compute it, without ``gamma``::

        r = sqrt( h / d * sum_I sum_k (a (D_k p - D_k u))^2 / sum_I sum_k a (D_k u)^2 )

    over the interior nodes I of the grid, ``D_k`` the central difference along grid axis k
    (``(v[i+1] - v[i-1]) / 2``; the grid spacing cancels in the ratio), ``d`` the number of grid
    axes, ``h`` the mean grid spacing (from ``coords``), ``a = weight`` (B, N, 1) or 1. The
    authors' code adds ``sqrt(gamma * r^2)`` to the relative L2 loss: ``grad_weight = sqrt(gamma)``
    (their Darcy gamma 0.5, the paper's "gamma = 0.5 h"; Burgers 0.1). (Their target gradient comes
    from the 421 grid; here both derivatives are taken on the training grid.)
    """
    if grid_shape is None or any(n < 3 for n in grid_shape):
        raise ValueError(f"the H1 regulariser needs a grid of at least 3 nodes per axis (interior nodes); got grid_shape {grid_shape}")
    c0 = coords[0] if coords.dim() == 3 else coords
    h = torch.stack([(a[-1] - a[0]) / (len(a) - 1) for a in grid_axes(c0, grid_shape)]).abs().mean().to(pred.dtype)
    interior = (slice(None), *(slice(1, n - 1) for n in grid_shape))
    dp = [g[interior] for g in central_differences(pred, grid_shape)]
    du = [g[interior] for g in central_differences(true, grid_shape)]
    w = 1.0 if weight is None else weight[..., :1].reshape(weight.shape[0], *grid_shape, 1)[interior].to(pred.dtype)
    num = sum(((w * (a - b)) ** 2).flatten(1, -2).sum(1) for a, b in zip(dp, du))
    den = sum((w * b**2).flatten(1, -2).sum(1) for b in du)
    return torch.sqrt(h / len(grid_shape) * num / den.clamp_min(torch.finfo(den.dtype).tiny))


def gradient_loss(
    form: str,
    pred: torch.Tensor,
    true: torch.Tensor,
    grid_shape: Sequence[int] | None,
    mask: torch.Tensor | None = None,
    *,
    coords: torch.Tensor | None = None,
    inputs: torch.Tensor | None = None,
) -> torch.Tensor:
    """Derivative regulariser ``grad_form`` (:data:`opflow.losses.GRAD_FORMS`) of a batch, a scalar.

    ``central`` (the ONO authors' Darcy script, ``deriv_loss``): per sample and channel, the sum
    over the grid axes of the relative L2 error of :func:`central_differences`, where the
    prediction's boundary ring is first set to zero (the homogeneous Dirichlet data of Darcy) and
    the target is taken as it is; mean over channels and samples, as ``rel_l2``. The script adds
    0.1 times it to the relative L2 loss (``grad_weight: 0.1``).

    ``h1`` / ``h1_coeff``: the Galerkin Transformer's regulariser (:func:`h1_regulariser`; needs
    ``coords``), ``h1_coeff`` weighted by the coefficient ``a`` = the first channel of ``inputs``
    (physical units; Darcy), ``h1`` unweighted (Burgers); mean over channels and samples.
    """
    if grid_shape is None:
        raise ValueError("grad_weight > 0 needs grid data (grid_shape): derivatives are taken on the grid; set grad_weight: 0 for point clouds and meshes")
    if mask is not None and checks_on() and not bool(mask.all()):
        raise ValueError("the derivative regulariser needs complete grids; the batch has padded points")
    if form == "central":
        dp = central_differences(_zero_boundary(pred, grid_shape), grid_shape)
        dt = central_differences(true, grid_shape)
        per = sum(_ratio(((a - b) ** 2).flatten(1, -2).sum(1), (b**2).flatten(1, -2).sum(1)) for a, b in zip(dp, dt))
        return per.mean()
    if form in ("h1", "h1_coeff"):
        if coords is None:
            raise ValueError(f"grad_form {form} needs the grid coordinates (coords)")
        if form == "h1_coeff" and (inputs is None or inputs.shape[-1] < 1):
            raise ValueError("grad_form h1_coeff weights by the coefficient, the first input channel; the batch has no inputs (use h1)")
        return h1_regulariser(pred, true, coords, grid_shape, inputs if form == "h1_coeff" else None).mean()
    raise ValueError(f"unknown grad_form {form!r}; use one of {list(GRAD_FORMS)}")


def training_loss(
    name: str,
    pred: torch.Tensor,
    true: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    coords: torch.Tensor | None = None,
    grid_shape: Sequence[int] | None = None,
    grad_weight: float = 0.0,
    grad_form: str = "central",
    inputs: torch.Tensor | None = None,
) -> torch.Tensor:
    """The configured loss (one of :data:`opflow.losses.LOSSES`) of a batch, a scalar, plus
    ``grad_weight`` times the derivative regulariser ``grad_form`` (:func:`gradient_loss`) when > 0;
    ``inputs`` (physical units) are the coefficient of ``grad_form: h1_coeff``."""
    if name == "rel_l2":
        loss = rel_l2_loss(pred, true, mask)
    elif name == "mse":
        loss = mse_loss(pred, true, mask)
    elif name == "rel_h1":
        if coords is None or grid_shape is None:
            raise ValueError("loss rel_h1 needs grid data (coords and grid_shape); use rel_l2 for point clouds and meshes")
        loss = rel_h1_loss(pred, true, coords, grid_shape, mask)
    else:
        raise ValueError(f"unknown loss {name!r}; use one of {list(LOSSES)}")
    if grad_weight:
        loss = loss + grad_weight * gradient_loss(grad_form, pred, true, grid_shape, mask, coords=coords, inputs=inputs)
    return loss


def summary(values: Any) -> dict[str, float]:
    """``mean``, ``median``, ``std`` (population), ``max`` and ``n`` of a 1-D array of errors."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return {"mean": float("nan"), "median": float("nan"), "std": float("nan"), "max": float("nan"), "n": 0}
    return {"mean": float(v.mean()), "median": float(np.median(v)), "std": float(v.std()), "max": float(v.max()), "n": int(v.size)}
