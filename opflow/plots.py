"""PNG figures of training and evaluation (matplotlib, Agg backend, written atomically).

* :func:`plot_curves`: training loss and test relative L2 against epoch (log scale) and the
  learning rate.
* :func:`plot_predictions`: for chosen test samples, one row each: input, truth, prediction and
  error ``prediction - truth`` (physical units). 2-D grids are drawn as images (``x`` to the
  right, ``y`` up), 1-D grids as lines, other point sets as scatter plots.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _figure(*args: Any, **kwargs: Any) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(*args, **kwargs)


def _save(fig: Any, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    os.replace(tmp, path)
    return path


def plot_curves(curves: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str = "") -> Path:
    """Training loss, test relative L2 (where evaluated) and learning rate per epoch."""
    fig = _figure(figsize=(10, 3.8), layout="constrained")
    ax, ax_lr = fig.subplots(1, 2)
    ep = np.array([c["epoch"] for c in curves], dtype=float)
    tr = np.array([c["train_loss"] for c in curves], dtype=float)
    te = np.array([np.nan if c.get("test_rel_l2") is None else c["test_rel_l2"] for c in curves], dtype=float)
    ax.plot(ep, tr, label="train loss")
    ok = np.isfinite(te)
    if ok.any():
        ax.plot(ep[ok], te[ok], "o-", ms=3, label="test rel. L2")
    if np.all(tr[np.isfinite(tr)] > 0) and (not ok.any() or np.all(te[ok] > 0)):
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.legend()
    ax.grid(alpha=0.3)
    ax.set_title(title or "training")
    ax_lr.plot(ep, [c["lr"] for c in curves])
    ax_lr.set_xlabel("epoch")
    ax_lr.set_ylabel("learning rate (last step of epoch)")
    ax_lr.grid(alpha=0.3)
    return _save(fig, path)


def _panel(fig: Any, ax: Any, values: np.ndarray, coords: np.ndarray, grid_shape: Sequence[int] | None, cmap: str, vlim: tuple[float, float] | None) -> None:
    vmin, vmax = vlim if vlim is not None else (float(values.min()), float(values.max()))
    if grid_shape is not None and len(grid_shape) == 2:
        g = values.reshape(grid_shape)
        c = coords.reshape(*grid_shape, -1)
        extent = (c[0, 0, 0], c[-1, 0, 0], c[0, 0, 1], c[0, -1, 1])
        im = ax.imshow(g.T, origin="lower", extent=extent, cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    elif grid_shape is not None and len(grid_shape) == 1:
        ax.plot(coords[:, 0], values)
        ax.set_ylim(vmin - 0.05 * (vmax - vmin + 1e-30), vmax + 0.05 * (vmax - vmin + 1e-30))
    else:
        sc = ax.scatter(coords[:, 0], coords[:, 1] if coords.shape[1] > 1 else np.zeros(len(coords)), c=values, s=4, cmap=cmap, vmin=vmin, vmax=vmax)
        ax.set_aspect("equal")
        fig.colorbar(sc, ax=ax, fraction=0.046, pad=0.04)


def plot_predictions(
    samples: Sequence[Mapping[str, Any]],
    path: str | os.PathLike,
    *,
    input_name: str = "input",
    output_name: str = "output",
    title: str = "",
) -> Path:
    """One row per sample: input, truth, prediction, error (first input and output channel).

    Each sample is a dict with ``coords`` (N, d), ``inputs`` (N, c_in), ``target`` and ``pred``
    (N, c_out) numpy arrays, ``grid_shape`` (or None) and a ``label`` string.
    """
    rows = max(1, len(samples))
    fig = _figure(figsize=(14, 3.2 * rows))
    axes = np.atleast_2d(fig.subplots(rows, 4))
    for r, s in enumerate(samples):
        coords = np.asarray(s["coords"])
        inp = np.asarray(s["inputs"])[:, 0]
        true = np.asarray(s["target"])[:, 0]
        pred = np.asarray(s["pred"])[:, 0]
        err = pred - true
        lim = (float(min(true.min(), pred.min())), float(max(true.max(), pred.max())))
        emax = float(np.abs(err).max()) or 1.0
        gs = s.get("grid_shape")
        _panel(fig, axes[r, 0], inp, coords, gs, "viridis", None)
        _panel(fig, axes[r, 1], true, coords, gs, "magma", lim)
        _panel(fig, axes[r, 2], pred, coords, gs, "magma", lim)
        _panel(fig, axes[r, 3], err, coords, gs, "RdBu_r", (-emax, emax))
        axes[r, 0].set_ylabel(s.get("label", ""))
        for c, name in enumerate((f"input {input_name}", f"truth {output_name}", "prediction", "error (pred - truth)")):
            axes[r, c].set_title(name, fontsize=9)
    if title:
        fig.suptitle(title)
    return _save(fig, path)
