"""View kinds ``series`` and ``mesh``: fields on one point dimension (:class:`opflow.data.points.PointDataset`).

Both read ``f(sample, D)`` and differ in their coordinates (1-D for series, 2-D / 3-D for meshes)
and in their plots: series are drawn as curves against the coordinate
(:func:`opflow.plots.plot_series`), meshes with ``tripcolor`` over the sample's cells or a masked
Delaunay triangulation (:func:`opflow.plots.plot_mesh`). Their statistics are the plain ones.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .base import ViewKind

if TYPE_CHECKING:
    from ..points import PointDataset


class _PointKind(ViewKind):
    """The dataset of both point-set kinds (the kind's name picks the coordinates' check)."""

    def dataset(self, path: str | os.PathLike, split: str | None, task: Any, view: Any, purpose: str = "train") -> PointDataset:
        """One split of the file in memory (a mesh view's ``input_sets`` are read too; ``purpose`` changes nothing)."""
        from ..points import PointDataset

        return PointDataset(path, split, task, kind=self.name, input_sets=getattr(view, "input_sets", ()))


class SeriesKind(_PointKind):
    """``f(sample, t)`` on ``t(t)`` or ``t(sample, t)``: time series, or any 1-D point set."""

    name = "series"

    def plot(self, samples: Sequence[Mapping[str, Any]], dataset: Any, png: str | os.PathLike, *, title: str = "") -> None:
        """Truth and prediction of every output against the coordinate, the point inputs, the errors."""
        from opflow import plots

        point_inputs = [n for n in dataset.task.inputs if n not in dataset.global_names]
        plots.plot_series(samples, png, output_names=list(dataset.task.outputs), input_names=point_inputs, coord_name=dataset.coord_names[0], title=title)


class MeshKind(_PointKind):
    """``f(sample, node)`` at per-sample points ``node_x, node_y`` (ragged, padded; cells for plots)."""

    name = "mesh"

    def plot(self, samples: Sequence[Mapping[str, Any]], dataset: Any, png: str | os.PathLike, *, title: str = "") -> None:
        """(The first point input,) truth, prediction and error of the first output with ``tripcolor`` over the sample's cells."""
        from opflow import plots

        samples = [{**s, "cells": dataset.sample_cells(s["index"])} for s in samples]
        point_inputs = [n for n in dataset.task.inputs if n not in dataset.global_names]
        plots.plot_mesh(samples, png, output_name=list(dataset.task.outputs)[0], input_name=point_inputs[0] if point_inputs else None, title=title)
