"""Dataset views: how one dataset file becomes (input function, output function) pairs.

A *view* is chosen per dataset in the workflow config (``datasets.<name>.view``) and recorded in
the run config, so training and evaluation read a file the same way. Its *specification* (kinds,
parameters, checks) lives in :mod:`opflow.data.view_spec`; this package holds what each kind does,
behind one interface (:class:`~opflow.data.views.base.ViewKind`):

* ``dataset(path, split, task, view, purpose)``: the torch dataset (:func:`make_dataset`, the one
  factory that ``opflow.train`` and ``opflow.evaluate`` call);
* ``collate(items)``: its batches (default :func:`opflow.data.torch_data.collate`;
  :func:`opflow.data.torch_data.make_loader` uses the kind's);
* ``metrics(e2, r2, dataset)``: its own statistics in the results JSON, beside the plain relative
  L2 ones (:mod:`opflow.evaluate`);
* ``plot(samples, dataset, png, title=...)``: the results PNG (:mod:`opflow.plots`).

The evaluator asks :func:`kind_of` for the kind of the dataset it evaluated.

==========  ======================================================================================
kind        what it reads (module of the kind -> dataset class)
==========  ======================================================================================
auto        the default: ``grid`` for fields on ``(sample, x[, y[, z]])``, ``series`` / ``mesh``
            for fields on one point dimension (1-D or more coordinates); a trajectory
            ``(sample, t, x, y)`` must name its view (:mod:`.auto`)
grid        fields on a shared tensor-product grid (:mod:`.grid` ->
            :class:`opflow.data.torch_data.GridDataset`)
series      fields on one point dimension with 1-D coordinates, e.g. ``x(sample, t)`` on ``t(t)``
            or on per-sample grids ``t(sample, t)`` (:mod:`.points` ->
            :class:`opflow.data.points.PointDataset`); plotted as curves
mesh        fields on per-sample point clouds, e.g. ``stress(sample, node)`` at
            ``node_x, node_y (sample, node)`` cut to ``node_count`` (the same); ``tripcolor`` plots
window      trajectories ``f(sample, t, x, y)``: ``history`` frames as channels -> next frame,
            rollout at test, per-frame statistics (:mod:`.trajectory` -> :mod:`opflow.data.trajectory`)
one_step    trajectories: frame ``input_frame`` -> frame ``output_frame`` (the same modules)
inverse     a grid file's inputs and outputs swapped: noisy solution on the fine grid -> the
            coefficient block-averaged onto a coarse grid (:mod:`.inverse` ->
            :class:`opflow.data.inverse.InverseDataset`)
==========  ======================================================================================

Parameters (only those of the chosen kind are accepted):

* ``window``: ``history`` (k, default 10); ``frames: [first, last]``, the inclusive range of frame
  indices (positions along the file's ``t`` axis) the task uses (default: all frames);
  ``train_frames: [a, b]``, the target frames of the training pairs (default: every frame from
  ``first + k`` to ``last``). See :mod:`opflow.data.trajectory` for the index mapping of the FNO
  "10 -> 10" protocol and the ONO time-generalisation split.
* ``one_step``: ``input_frame`` (default 0) and ``output_frame`` (default 1).
* ``inverse``: ``factor`` (coarse grid ceil(n / factor) per axis, default 1), ``noise`` (eps,
  default 0) and ``noise_seed`` (default 0).
* ``mesh``: ``input_sets`` (default none): more input functions, each on its own point set
  (:class:`opflow.data.view_spec.InputSetSpec`; the batch key ``input_sets`` of
  :mod:`opflow.data.torch_data`, taken by models with ``accepts_input_sets``, e.g. GNOT).

Per-sample inputs without the point dimension (scalars such as Lorenz-63's ``y0, z0`` or vectors
such as the elasticity ``radius_code``) become the batch's ``globals (B, g)`` in every view that
has inputs on points (grid, series, mesh).

Adding a view kind
------------------

1. One module (here, or anywhere) with a subclass of :class:`ViewKind`: set ``name`` and implement
   ``dataset``; override ``collate``, ``metrics``, ``plot`` where the defaults (plain batches, no
   extra statistics, input / truth / prediction / error panels) do not fit, and ``spec`` (a
   :class:`~opflow.data.view_spec.View` subclass) when the kind takes parameters of its own. The dataset is easiest as an
   :class:`opflow.data.torch_data.ArrayDataset` (the base's docstring lists what is used).
2. One registration line: ``register(MyKind())``. The built-in kinds are registered at the end of
   this file; another module registers its kind when it is imported.

:func:`make_dataset`, :func:`parse_view` and the workflow config (``datasets.<name>.view``) then
accept ``{kind: <name>, ...}``: registering the kind registers its spec with
:func:`opflow.data.view_spec.register_spec`, the one place view parameters are checked.

Imports: kinds import :mod:`.base` and, inside their methods, their dataset modules; nothing of
:mod:`opflow.data` imports this package back (``tests/opflow/data/test_view_kinds.py`` checks the
whole ``opflow.data`` import graph for cycles). Importing this package does not import torch: the
workflow checks views when it loads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..view_spec import View, parse_view
from .auto import infer_view_kind
from .base import PURPOSES, ViewKind, training_purpose
from .grid import GridKind
from .inverse import InverseKind
from .points import MeshKind, SeriesKind
from .registry import AUTO, get_kind, kind_of, register, registered_kinds, unregister
from .trajectory import OneStepKind, WindowKind


def make_dataset(
    path: str | os.PathLike,
    split: str | None,
    task: Any = None,
    view: View | Mapping[str, Any] | str | None = None,
    *,
    purpose: str = "train",
) -> Any:
    """The torch dataset of ``split`` of ``path`` under ``view`` (the one factory; package docstring).

    ``split=None`` reads every sample (a file without a split variable, e.g. a generated source
    used as an extra evaluation set). ``purpose`` (one of :data:`~opflow.data.views.base.PURPOSES`)
    matters for ``window`` views only: ``"train"`` gives the teacher-forced pairs, ``"unroll"``
    whole training trajectories for unrolled training (``training.unroll``; :func:`training_purpose`),
    ``"rollout"`` whole trajectories for autoregressive testing. ``view: auto`` picks the kind from the file
    (:func:`infer_view_kind`). The kind is recorded on the dataset for :func:`kind_of`.
    """
    spec = parse_view(view)
    name = spec.kind
    if name == AUTO:
        name = infer_view_kind(path, task)
    kind = get_kind(name)
    if spec.kind != name:
        spec = parse_view(name)
    ds = kind.dataset(path, split, task, spec, purpose)
    try:
        ds.view_impl = kind
    except AttributeError:  # a dataset that takes no attributes: kind_of falls back to its kind
        pass
    return ds


# the built-in kinds: one line each
register(GridKind())
register(SeriesKind())
register(MeshKind())
register(WindowKind())
register(OneStepKind())
register(InverseKind())

__all__ = [
    "PURPOSES",
    "View",
    "ViewKind",
    "get_kind",
    "infer_view_kind",
    "kind_of",
    "make_dataset",
    "training_purpose",
    "parse_view",
    "register",
    "registered_kinds",
    "unregister",
]
