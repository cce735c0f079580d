"""PNG figures of training and evaluation (matplotlib, Agg backend, written atomically).

* :func:`plot_curves`: training loss and test relative L2 against epoch (log scale) and the
  learning rate.
* :func:`plot_runs`: the same for several runs on shared axes (a seed study, a recipe beside
  another), one colour per run.
* :func:`plot_predictions`: for chosen test samples, one row each: input, truth, prediction and
  error ``prediction - truth`` (physical units). 2-D grids are drawn as images (``x`` to the
  right, ``y`` up), 1-D grids as lines, other point sets as scatter plots.
* :func:`plot_rollout`: autoregressive predictions of trajectories: for each chosen sample three
  rows (truth, prediction, error) at a few predicted frames.
* :func:`plot_series`: 1-D series: truth and prediction against the coordinate (time), one panel
  per output channel, plus the error.
* :func:`plot_scales`: each module's mean output magnitude on a few test samples, in forward order, for
  several checkpoints (:mod:`opflow.layer_scales`: where a collapsed run lost its input).
* :func:`plot_mesh`: fields on meshes / point clouds with ``tripcolor``: truth, prediction and
  error. The triangles come from the cells when given (:func:`cell_triangles`: Q9 / Q4
  quadrilaterals and P2 / P1 triangles split into linear triangles through their nodes) or
  otherwise from a Delaunay triangulation of the points whose over-long triangles (spanning a
  hole such as the elasticity void) are masked (:func:`delaunay_triangles`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from opflow.atomic import atomic_path


def figure(*args: Any, **kwargs: Any) -> Any:
    """A matplotlib ``Figure`` on the Agg backend (no display, no pyplot state)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(*args, **kwargs)


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save ``fig`` as a PNG at ``path`` atomically (:mod:`opflow.atomic`)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    return Path(path)


def _draw_run(ax: Any, ax_lr: Any, curves: Sequence[Mapping[str, Any]], label: str = "", colour: str | None = None) -> None:
    """One run on the loss axes (training loss as a line, test relative L2 as dots where evaluated)
    and on the learning-rate axes."""
    prefix = f"{label}: " if label else ""
    ep = np.array([c["epoch"] for c in curves], dtype=float)
    tr = np.array([c["train_loss"] for c in curves], dtype=float)
    te = np.array([np.nan if c.get("test_rel_l2") is None else c["test_rel_l2"] for c in curves], dtype=float)
    ax.plot(ep, tr, color=colour, lw=1.2, label=f"{prefix}train loss")
    ok = np.isfinite(te)
    if ok.any():
        ax.plot(ep[ok], te[ok], "o-" if not label else "o", color=colour, ms=3 if not label else 2.5, label=f"{prefix}test rel. L2")
    ax_lr.plot(ep, [c["lr"] for c in curves], color=colour, label=label or None)


def _finish(fig: Any, ax: Any, ax_lr: Any, title: str, path: str | os.PathLike, legend_size: float | None = None) -> Path:
    ax.set_yscale("log")  # non-positive values are left out by matplotlib
    ax.set_xlabel("epoch")
    ax.legend(fontsize=legend_size)
    ax.grid(alpha=0.3)
    ax.set_title(title or "training")
    ax_lr.set_xlabel("epoch")
    ax_lr.set_ylabel("learning rate (last step of epoch)")
    ax_lr.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_curves(curves: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str = "") -> Path:
    """Training loss, test relative L2 (where evaluated) and learning rate per epoch."""
    fig = figure(figsize=(10, 3.8), layout="constrained")
    ax, ax_lr = fig.subplots(1, 2)
    _draw_run(ax, ax_lr, curves)
    return _finish(fig, ax, ax_lr, title, path)


def plot_runs(runs: Mapping[str, Sequence[Mapping[str, Any]]], path: str | os.PathLike, title: str = "") -> Path:
    """Several runs' curves on shared axes: training loss (solid) and test relative L2 (dots) per
    epoch on a log scale, and the learning rate; one colour per run, labelled with its key."""
    if not runs:
        raise ValueError("plot_runs: no runs given")
    fig = figure(figsize=(11, 4.2), layout="constrained")
    ax, ax_lr = fig.subplots(1, 2, width_ratios=(2.2, 1))
    for i, (label, curves) in enumerate(runs.items()):
        _draw_run(ax, ax_lr, curves, label or f"run {i + 1}", f"C{i % 10}")
    return _finish(fig, ax, ax_lr, title, path, legend_size=8)


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
    fig = figure(figsize=(14, 3.2 * rows), layout="constrained")
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
    return save_figure(fig, path)


# --------------------------------------------------------------------------- trajectories, series, meshes


def _sample_rows(n: int) -> int:
    return max(1, n)


def plot_rollout(
    samples: Sequence[Mapping[str, Any]],
    path: str | os.PathLike,
    *,
    frames: Sequence[int],
    frame_labels: Sequence[str],
    title: str = "",
) -> Path:
    """Truth, prediction and error of rolled-out trajectories at some predicted frames.

    Each sample is a dict with ``coords`` (N, 2), ``target`` and ``pred`` (N, steps) numpy arrays
    (one field; step-major channels), ``grid_shape`` and a ``label``. ``frames`` are the step
    indices (columns) to draw, ``frame_labels`` their titles.
    """
    rows = 3 * _sample_rows(len(samples))
    cols = max(1, len(frames))
    fig = figure(figsize=(3.6 * cols, 3.0 * rows), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, cols)).reshape(rows, cols)
    for r, s in enumerate(samples):
        true, pred = np.asarray(s["target"]), np.asarray(s["pred"])
        coords, gs = np.asarray(s["coords"]), s.get("grid_shape")
        lim = (float(true[:, frames].min()), float(true[:, frames].max()))
        emax = float(np.abs(pred[:, frames] - true[:, frames]).max()) or 1.0
        for c, (k, lab) in enumerate(zip(frames, frame_labels, strict=True)):
            _panel(fig, axes[3 * r, c], true[:, k], coords, gs, "RdBu_r", lim)
            _panel(fig, axes[3 * r + 1, c], pred[:, k], coords, gs, "RdBu_r", lim)
            _panel(fig, axes[3 * r + 2, c], pred[:, k] - true[:, k], coords, gs, "PuOr_r", (-emax, emax))
            axes[3 * r, c].set_title(f"truth {lab}", fontsize=9)
            axes[3 * r + 1, c].set_title(f"prediction {lab}", fontsize=9)
            axes[3 * r + 2, c].set_title(f"error {lab}", fontsize=9)
        axes[3 * r, 0].set_ylabel(s.get("label", ""), fontsize=9)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def plot_series(
    samples: Sequence[Mapping[str, Any]],
    path: str | os.PathLike,
    *,
    output_names: Sequence[str],
    input_names: Sequence[str] = (),
    coord_name: str = "t",
    title: str = "",
) -> Path:
    """One row per sample: the input functions, each output channel's truth and prediction against
    the coordinate, then the errors.

    Each sample is a dict with ``coords`` (N, 1), ``inputs`` (N, c_in; drawn when ``input_names``
    is given), ``target`` and ``pred`` (N, C) and a ``label``.
    """
    rows = _sample_rows(len(samples))
    n_in = 1 if input_names else 0
    cols = n_in + len(output_names) + 1
    fig = figure(figsize=(4.2 * cols, 2.8 * rows), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, cols)).reshape(rows, cols)
    for r, s in enumerate(samples):
        t = np.asarray(s["coords"])[:, 0]
        order = np.argsort(t, kind="stable")
        t = t[order]
        true, pred = np.asarray(s["target"])[order], np.asarray(s["pred"])[order]
        if n_in:
            inp = np.asarray(s["inputs"])[order]
            for c, name in enumerate(input_names):
                axes[r, 0].plot(t, inp[:, c], lw=1.2, label=name)
            axes[r, 0].set_title("input", fontsize=9)
            axes[r, 0].grid(alpha=0.3)
            axes[r, 0].legend(fontsize=7)
            axes[r, 0].set_ylabel(s.get("label", ""), fontsize=8)
        for c, name in enumerate(output_names):
            ax = axes[r, n_in + c]
            ax.plot(t, true[:, c], "k-", lw=1.2, label="truth")
            ax.plot(t, pred[:, c], "C1--", lw=1.2, label="prediction")
            ax.set_title(name, fontsize=9)
            ax.grid(alpha=0.3)
            if c == 0 and not n_in:
                ax.set_ylabel(s.get("label", ""), fontsize=8)
        ax = axes[r, -1]
        for c, name in enumerate(output_names):
            ax.plot(t, pred[:, c] - true[:, c], lw=1.0, label=name)
        ax.set_title("error (pred - truth)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        axes[r, n_in].legend(fontsize=7)
    for c in range(cols):
        axes[-1, c].set_xlabel(coord_name)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


#: linear sub-triangles of higher-order cells, by corner count (gmsh / dolfinx node order:
#: corners counter-clockwise, then edge mid-nodes in edge order, then the centre)
_SPLITS: dict[int, list[tuple[int, int, int]]] = {
    3: [(0, 1, 2)],
    4: [(0, 1, 2), (0, 2, 3)],
    6: [(0, 3, 5), (3, 1, 4), (5, 4, 2), (3, 4, 5)],
    9: [(8, a, b) for a, b in zip((0, 4, 1, 5, 2, 6, 3, 7), (4, 1, 5, 2, 6, 3, 7, 0), strict=True)],
}


def cell_triangles(cells: np.ndarray) -> np.ndarray:
    """Linear triangles ``(T, 3)`` covering cells ``(C, k)`` with k = 3, 4, 6 or 9 nodes (see ``_SPLITS``)."""
    cells = np.asarray(cells)
    k = cells.shape[1]
    if k not in _SPLITS:
        raise ValueError(f"cannot split cells with {k} nodes into triangles; known: {sorted(_SPLITS)}")
    return np.concatenate([cells[:, list(t)] for t in _SPLITS[k]], axis=0)


def delaunay_triangles(points: np.ndarray, max_edge_factor: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """Delaunay triangles of ``points (N, 2)`` and a mask of those with an edge longer than
    ``max_edge_factor`` times the median edge (they bridge holes or concave boundaries)."""
    from matplotlib.tri import Triangulation

    tri = Triangulation(points[:, 0], points[:, 1])
    t = tri.triangles
    p = points[t]  # (T, 3, 2)
    edges = np.linalg.norm(p - np.roll(p, 1, axis=1), axis=-1).max(axis=1)
    return t, edges > max_edge_factor * np.median(edges)


def plot_mesh(
    samples: Sequence[Mapping[str, Any]], path: str | os.PathLike, *, output_name: str = "output", input_name: str | None = None, title: str = ""
) -> Path:
    """One row per sample: truth, prediction and error of the first output channel with ``tripcolor``,
    after the first input channel (``inputs`` (N, C_in)) when ``input_name`` is given, as the grid plots.

    Each sample is a dict with ``coords`` (N, 2) and ``target`` / ``pred`` (N, C) of its real
    points, optionally ``cells`` (node indices; only for node-based fields) and a ``label``.
    """
    from matplotlib.tri import Triangulation

    rows = _sample_rows(len(samples))
    first = 1 if input_name is not None else 0
    fig = figure(figsize=(13 + 4.3 * first, 3.6 * rows), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, 3 + first)).reshape(rows, 3 + first)
    for r, s in enumerate(samples):
        xy = np.asarray(s["coords"])[:, :2]
        cells = s.get("cells")
        if cells is not None and len(cells):
            tri = Triangulation(xy[:, 0], xy[:, 1], cell_triangles(cells))
        else:
            t, bad = delaunay_triangles(xy)
            tri = Triangulation(xy[:, 0], xy[:, 1], t, mask=bad)
        true, pred = np.asarray(s["target"])[:, 0], np.asarray(s["pred"])[:, 0]
        lim = (float(min(true.min(), pred.min())), float(max(true.max(), pred.max())))
        emax = float(np.abs(pred - true).max()) or 1.0
        panels = [(true, "viridis", lim, f"truth {output_name}"), (pred, "viridis", lim, "prediction"), (pred - true, "RdBu_r", (-emax, emax), "error (pred - truth)")]
        if first:
            inp = np.asarray(s["inputs"])[:, 0]
            panels.insert(0, (inp, "cividis", (float(inp.min()), float(inp.max())), f"input {input_name}"))
        for c, (vals, cmap, vl, name) in enumerate(panels):
            ax = axes[r, c]
            im = ax.tripcolor(tri, vals, shading="gouraud", cmap=cmap, vmin=vl[0], vmax=vl[1])
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
            ax.set_aspect("equal")
            ax.set_title(name, fontsize=9)
        axes[r, 0].set_ylabel(s.get("label", ""), fontsize=9)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def plot_scales(results: Sequence[Mapping[str, Any]], path: str | os.PathLike, labels: Sequence[str] | None = None, title: str = "") -> Path:
    """:func:`opflow.layer_scales.scales` results on one log axis: mean |output| per module (forward order), one line
    per file; a hollow marker where the output does not depend on the input (``dependence`` 0). An output of zero
    is drawn on the axis' floor, a decade below the smallest nonzero value."""
    fig = figure(figsize=(max(6.0, 0.32 * max(len(r["modules"]) for r in results) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    nonzero = [m["mean_abs"] for r in results for m in r["modules"] if m["mean_abs"] > 0]
    floor = min(nonzero, default=1.0) / 10
    for i, r in enumerate(results):
        rows = r["modules"]
        x = np.arange(len(rows))
        y = np.array([m["mean_abs"] if m["mean_abs"] > 0 else floor for m in rows])
        label = labels[i] if labels else Path(r["file"]).name
        (line,) = ax.plot(x, y, "o-", ms=3.5, lw=1.2, label=label)
        dead = np.array([m["dependence"] == 0 for m in rows])
        if dead.any():
            ax.plot(x[dead], y[dead], "o", ms=9, mfc="none", color=line.get_color())
    names = [m["module"] for m in results[0]["modules"]]
    ax.set_xticks(np.arange(len(names)), names, rotation=70, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.axhline(floor, color="0.5", lw=0.8, ls=":")
    ax.set_ylabel(f"mean |output| ({results[0]['samples']} test samples; dotted: 0)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="hollow: same output for every input", title_fontsize=7)
    ax.set_title(title or "output scale per module")
    return save_figure(fig, path)

