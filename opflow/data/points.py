"""Point-set views: 1-D time series and meshes / point clouds (views ``series`` and ``mesh``).

Both read fields on a single point dimension ``D`` (``f(sample, D)``) and differ only in their
coordinates, so one class serves both:

* **series** (``D = t``; Lorenz-63, the controlled ODE): coordinates ``t`` as ``(N, 1)``, either
  the shared coordinate variable ``t(t)`` or a per-sample one ``t(sample, t)`` (role
  ``coordinate``; the ``random`` grids of :mod:`solvers.lorenz`). A set at another time step has
  another ``N``; continuum models evaluate it as it is (the discretisation tests of Calvello et
  al. 2024, Sec. 6.1).
* **mesh** (``D = node`` or ``qpoint``; the elasticity unit cell): coordinates from the
  variables with role ``coordinate`` on ``(sample, D)`` (``node_x, node_y``), or, when the file
  gives that role to another point set, from ``D_x, D_y[, D_z]`` (so ``qpoint_x, qpoint_y`` serve
  the published 972-point set from a file generated with ``target: nodes``). A count variable
  ``D_count(sample)`` gives each sample's real points: the arrays are stored padded and
  :func:`opflow.data.torch_data.collate` re-pads each batch to its own maximum with a mask that
  models, normalisers and metrics honour. Cell connectivity ``cell(sample, cell, corner)`` (with
  ``cell_count``) is kept for plots when ``D = node``.

Which point set is used follows from the task's outputs: ``stress`` is on ``node``,
``stress_qpoint`` on ``qpoint``. Inputs on ``D`` are point features; inputs without ``D``
(``radius_code(sample, code)``, ``y0(sample)``) become globals. Elasticity as ONO, GNOT and
Geo-FNO's point-cloud model pose it takes *no* input features (``task.inputs: []``): the point
coordinates are the input function's discretisation and the stress is the output.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .errors import DatasetError
from .format import open_dataset
from .torch_data import ArrayDataset, Task, resolve_task, split_globals, stack_globals


def point_coordinate_names(nc: Any, dim: str) -> list[str]:
    """Coordinate variables of point dimension ``dim`` in an open file (module docstring)."""
    if dim in nc.variables and tuple(nc.variables[dim].dimensions) in ((dim,), ("sample", dim)):
        return [dim]
    by_role = sorted(
        n for n, v in nc.variables.items() if tuple(v.dimensions) == ("sample", dim) and getattr(v, "role", None) == "coordinate"
    )
    if by_role:
        return by_role
    by_name = [f"{dim}_{a}" for a in "xyz" if f"{dim}_{a}" in nc.variables and tuple(nc.variables[f"{dim}_{a}"].dimensions) == ("sample", dim)]
    if by_name:
        return by_name
    raise DatasetError(
        f"no coordinates for points along {dim!r}: expected a variable {dim!r} on ({dim},) or (sample, {dim}), "
        f"variables with role 'coordinate' on (sample, {dim}), or {dim}_x/{dim}_y"
    )


class PointDataset(ArrayDataset):
    """One split of a series or mesh dataset, in memory (module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike,
        split: str | None = "train",
        task: Task | Mapping[str, Any] | None = None,
        *,
        kind: str = "mesh",
    ) -> None:
        self._init_common(path, split)
        self.kind = kind
        self.task = resolve_task(self.path, task)
        with open_dataset(self.path) as nc:
            dims = {n: tuple(nc.variables[n].dimensions) for n in (*self.task.inputs, *self.task.outputs)}
            out_dims = {dims[n] for n in self.task.outputs}
            if len(out_dims) != 1 or len(next(iter(out_dims))) != 2 or next(iter(out_dims))[0] != "sample":
                raise DatasetError(
                    f"{self.path}: a {kind} view needs every output on (sample, points); {list(self.task.outputs)} have dims {sorted(out_dims)}"
                )
            dim = next(iter(out_dims))[1]
            try:
                coord_names = point_coordinate_names(nc, dim)
            except DatasetError as e:
                raise DatasetError(f"{self.path}: {e}") from None
            count_name = f"{dim}_count" if f"{dim}_count" in nc.variables else None
            shared = coord_names == [dim] and tuple(nc.variables[dim].dimensions) == (dim,)
            cells = "cell" in nc.variables and dim == "node" and tuple(nc.variables["cell"].dimensions)[:1] == ("sample",)
        point_inputs, glob = split_globals(dims, self.task.inputs, (dim,))
        bad = [n for n in point_inputs if dims[n] != ("sample", dim)]
        if bad:
            raise DatasetError(f"{self.path}: inputs {bad} must lie on (sample, {dim}) like the outputs; they have {[dims[n] for n in bad]}")
        if kind == "series" and len(coord_names) != 1:
            raise DatasetError(f"{self.path}: view 'series' needs 1-D coordinates but the points along {dim!r} have {coord_names}; use view 'mesh'")
        if kind == "mesh" and len(coord_names) < 2:
            raise DatasetError(f"{self.path}: view 'mesh' needs 2-D or 3-D coordinates but the points along {dim!r} have {coord_names}; use view 'series'")
        extra = [count_name] if count_name else []
        extra += ["cell", "cell_count"] if cells else []
        ds = self._read(self.path, [*self.task.inputs, *self.task.outputs, *coord_names, *extra], split)
        s = ds[self.task.outputs[0]].shape[0]
        n = ds[self.task.outputs[0]].shape[1]
        self.point_dim = dim
        self.coord_names = tuple(coord_names)
        self.global_names = tuple(glob)
        if shared:
            self.coords = torch.from_numpy(np.asarray(ds[dim], np.float32)[:, None])
        else:
            self.coords = torch.from_numpy(np.stack([np.asarray(ds[c], np.float32) for c in coord_names], -1))
        if count_name:
            counts = np.asarray(ds[count_name], dtype=np.int64)
            if counts.shape != (s,) or np.any(counts < 1) or np.any(counts > n):
                raise DatasetError(f"{self.path}: {count_name} must hold one count in 1..{n} per sample")
            self.counts = torch.from_numpy(counts)
        self.inputs = (
            torch.from_numpy(np.stack([np.asarray(ds[v], np.float32) for v in point_inputs], -1)) if point_inputs else torch.zeros(s, n, 0)
        )
        self.target = torch.from_numpy(np.stack([np.asarray(ds[v], np.float32) for v in self.task.outputs], -1))
        self.globals = stack_globals(ds, glob)
        # a shared, sorted 1-D axis is a grid (lets rel_h1 and the pointwise normaliser work)
        self.grid_shape = (n,) if shared and self.counts is None else None
        self.cells = np.asarray(ds["cell"]) if cells else None
        self.cell_counts = np.asarray(ds["cell_count"]) if cells and "cell_count" in ds.variables else None
        self.sample_index = np.asarray(ds["sample_index"]) if "sample_index" in ds.variables else np.arange(s)
        self.units = {v: ds.variables[v].attrs.get("units", "") for v in (*self.task.inputs, *self.task.outputs)}
        self.attrs = ds.attrs
        self.coord_attrs = ds.variables[coord_names[0]].attrs

    def sample_cells(self, i: int) -> np.ndarray | None:
        """Cell connectivity of sample ``i`` (``(c_i, corners)``, node indices), or None."""
        if self.cells is None:
            return None
        c = self.cells[i]
        if self.cell_counts is not None:
            c = c[: int(self.cell_counts[i])]
        return c[(c >= 0).all(axis=1)]

    def grid_label(self) -> str:
        """A short description of the discretisation (for results keys and plot titles)."""
        n = int(self.counts.max()) if self.counts is not None else self.inputs.shape[1]
        a = self.coord_attrs
        if self.kind == "series" and "grid" in a:
            g = str(a["grid"])
            return f"{g} dt={float(a['dt']):g} ({n} points)" if "dt" in a else f"{g} ({n} points)"
        return f"{n} points"
