"""Dataset views: how one dataset file becomes (input function, output function) pairs.

A *view* is chosen per dataset in the workflow config (``datasets.<name>.view``) and recorded in
the run config, so training and evaluation read a file the same way. :func:`make_dataset` is the
single factory that ``opflow.train`` and ``opflow.evaluate`` call.

==========  =====================================================================================
kind        what it reads (module holding the class)
==========  =====================================================================================
auto        the default: ``grid`` for fields on ``(sample, x[, y[, z]])``, ``series`` / ``mesh``
            for fields on one point dimension (1-D or more coordinates); a trajectory
            ``(sample, t, x, y)`` must name its view
grid        fields on a shared tensor-product grid (:class:`opflow.data.torch_data.GridDataset`)
series      fields on one point dimension with 1-D coordinates, e.g. ``x(sample, t)`` on ``t(t)``
            or on per-sample grids ``t(sample, t)`` (:class:`opflow.data.points.PointDataset`)
mesh        fields on per-sample point clouds, e.g. ``stress(sample, node)`` at
            ``node_x, node_y (sample, node)`` cut to ``node_count`` (the same class)
window      trajectories ``f(sample, t, x, y)``: ``history`` frames as channels -> next frame,
            rollout at test (:mod:`opflow.data.trajectory`)
one_step    trajectories: frame ``input_frame`` -> frame ``output_frame`` (same module)
==========  =====================================================================================

Parameters (only those of the chosen kind are accepted):

* ``window``: ``history`` (k, default 10); ``frames: [first, last]``, the inclusive range of frame
  indices (positions along the file's ``t`` axis) the task uses (default: all frames);
  ``train_frames: [a, b]``, the target frames of the training pairs (default: every frame from
  ``first + k`` to ``last``). See :mod:`opflow.data.trajectory` for the index mapping of the FNO
  "10 -> 10" protocol and the ONO time-generalisation split.
* ``one_step``: ``input_frame`` (default 0) and ``output_frame`` (default 1).

Per-sample inputs without the point dimension (scalars such as Lorenz-63's ``y0, z0`` or vectors
such as the elasticity ``radius_code``) become the batch's ``globals (B, g)`` in every view that
has inputs on points (grid, series, mesh).

This module imports neither torch nor numpy at module level: the Snakefile checks views at load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .view_spec import View, parse_view


def make_dataset(
    path: str | os.PathLike,
    split: str | None,
    task: Any = None,
    view: View | Mapping[str, Any] | str | None = None,
    *,
    purpose: str = "train",
) -> Any:
    """The torch dataset of ``split`` of ``path`` under ``view`` (the one factory; module docstring).

    ``split=None`` reads every sample (a file without a split variable, e.g. a generated source
    used as an extra evaluation set). ``purpose`` matters for ``window`` views only: ``"train"``
    gives the teacher-forced pairs, ``"rollout"`` whole trajectories for autoregressive testing.
    """
    from .torch_data import GridDataset, infer_view_kind

    v = parse_view(view)
    kind = v.kind if v.kind != "auto" else infer_view_kind(path, task)
    if kind == "grid":
        return GridDataset(path, split, task)
    if kind in ("series", "mesh"):
        from .points import PointDataset

        return PointDataset(path, split, task, kind=kind)
    from .trajectory import OneStepDataset, RolloutDataset, WindowDataset

    if kind == "one_step":
        return OneStepDataset(path, split, task, v)
    if purpose == "rollout":
        return RolloutDataset(path, split, task, v)
    if purpose != "train":
        raise ValueError(f"purpose must be 'train' or 'rollout', got {purpose!r}")
    return WindowDataset(path, split, task, v)
