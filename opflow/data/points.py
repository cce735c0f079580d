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
  the published 972-point set from a file generated with ``target: nodes``). A mesh shared by all
  samples (UGRID: ``node_x(node)``, ``node_y(node)``, ``cell(cell, corner)``; the Darcy sets on
  gmsh domains of ``darcy_fem``) is read once and serves every sample. A count variable
  ``D_count(sample)`` gives each sample's real points: the arrays are stored padded and
  :func:`opflow.data.torch_data.collate` re-pads each batch to its own maximum with a mask that
  models, normalisers and metrics honour. Cell connectivity ``cell(sample, cell, corner)`` (with
  ``cell_count``) is kept for plots when ``D = node``.

Which point set is used follows from the task's outputs: ``stress`` is on ``node``,
``stress_qpoint`` on ``qpoint``. Inputs on ``D`` are point features; inputs without ``D``
(``radius_code(sample, code)``, ``y0(sample)``) become globals. Elasticity as ONO, GNOT and
Geo-FNO's point-cloud model pose it takes *no* input features (``task.inputs: []``): the point
coordinates are the input function's discretisation and the stress is the output.

A mesh view may add input functions on their own point sets (``view.input_sets``; GNOT's
heterogeneous inputs): :func:`read_input_set` reads each into an
:class:`opflow.data.torch_data.InputSet`, e.g. the elasticity radius code as the 42 void-boundary
points ``(1/2, 1/2) + r_j (cos theta_j, sin theta_j)`` with value ``r_j`` (``coords: polar``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import DatasetError
from .format import open_dataset
from .torch_data import ArrayDataset, InputSet, Task, resolve_task, split_globals, stack_globals


def point_coordinate_names(nc: Any, dim: str) -> list[str]:
    """Coordinate variables of point dimension ``dim`` in an open file (module docstring)."""
    if dim in nc.variables and tuple(nc.variables[dim].dimensions) in ((dim,), ("sample", dim)):
        return [dim]
    for dims in (("sample", dim), (dim,)):  # per-sample points first, then a mesh shared by all samples
        by_role = sorted(n for n, v in nc.variables.items() if tuple(v.dimensions) == dims and getattr(v, "role", None) == "coordinate")
        if by_role:
            return by_role
        by_name = [f"{dim}_{a}" for a in "xyz" if f"{dim}_{a}" in nc.variables and tuple(nc.variables[f"{dim}_{a}"].dimensions) == dims]
        if by_name:
            return by_name
    raise DatasetError(
        f"no coordinates for points along {dim!r}: expected a variable {dim!r} on ({dim},) or (sample, {dim}), "
        f"variables with role 'coordinate' on (sample, {dim}) or ({dim},), or {dim}_x/{dim}_y"
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
        input_sets: Sequence[Any] = (),
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
            shared = all(tuple(nc.variables[c].dimensions) == (dim,) for c in coord_names)
            variables = set(nc.variables)
            cell_dims = tuple(nc.variables["cell"].dimensions) if "cell" in nc.variables and dim == "node" else ()
            cells = cell_dims[:1] == ("sample",) or (len(cell_dims) == 2 and "sample" not in cell_dims)
        point_inputs, glob = split_globals(dims, self.task.inputs, (dim,))
        bad = [n for n in point_inputs if dims[n] != ("sample", dim)]
        if bad:
            raise DatasetError(f"{self.path}: inputs {bad} must lie on (sample, {dim}) like the outputs; they have {[dims[n] for n in bad]}")
        if kind == "series" and len(coord_names) != 1:
            raise DatasetError(f"{self.path}: view 'series' needs 1-D coordinates but the points along {dim!r} have {coord_names}; use view 'mesh'")
        if kind == "mesh" and len(coord_names) < 2:
            raise DatasetError(f"{self.path}: view 'mesh' needs 2-D or 3-D coordinates but the points along {dim!r} have {coord_names}; use view 'series'")
        extra = [count_name] if count_name else []
        extra += ["cell", *(["cell_count"] if "cell_count" in variables else [])] if cells else []
        ds = self._read(self.path, [*self.task.inputs, *self.task.outputs, *coord_names, *extra], split)
        s = ds[self.task.outputs[0]].shape[0]
        n = ds[self.task.outputs[0]].shape[1]
        self.point_dim = dim
        self.coord_names = tuple(coord_names)
        self.global_names = tuple(glob)
        # (N, d) when shared by every sample (a time axis, a fixed mesh), else (S, N, d)
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
        self.grid_shape = (n,) if shared and len(coord_names) == 1 and self.counts is None else None
        self.cells = np.asarray(ds["cell"]) if cells else None
        self.shared_cells = cells and cell_dims[:1] != ("sample",)
        self.cell_counts = np.asarray(ds["cell_count"]) if cells and "cell_count" in ds.variables else None
        self.sample_index = np.asarray(ds["sample_index"]) if "sample_index" in ds.variables else np.arange(s)
        self.units = {v: ds.variables[v].attrs.get("units", "") for v in (*self.task.inputs, *self.task.outputs)}
        self.attrs = ds.attrs
        self.coord_attrs = ds.variables[coord_names[0]].attrs
        self.input_sets = tuple(read_input_set(self.path, spec, split, dim, s) for spec in input_sets)

    def sample_cells(self, i: int) -> np.ndarray | None:
        """Cell connectivity of sample ``i`` (``(c_i, corners)``, node indices), or None."""
        if self.cells is None:
            return None
        if self.shared_cells:
            return self.cells
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


def read_input_set(path: Any, spec: Any, split: str | None, out_dim: str, n_samples: int) -> InputSet:
    """One input function on its own point set (``view.input_sets`` entry ``spec``, an
    :class:`opflow.data.view_spec.InputSetSpec`) of ``split`` of ``path``.

    The values are the ``spec.inputs`` variables on ``(sample, D)``, ``D`` another point dimension
    than the outputs' ``out_dim``; ``D_count (sample)``, when the file has it, gives each sample's
    real points. Coordinates by ``spec.coords`` (the spec's docstring): ``auto`` / names read from
    the file, ``index`` = ``j / (n - 1)``, ``polar`` = ``centre + r_j (cos theta_j, sin theta_j)``,
    ``theta_j = 2 pi j / (n - 1)``, ``r`` the first input.
    """
    names = list(spec.inputs)
    with open_dataset(path) as nc:
        missing = [v for v in names if v not in nc.variables]
        if missing:
            raise DatasetError(f"{path}: input set {names}: {missing} are not variables of the file")
        dims = {tuple(nc.variables[v].dimensions) for v in names}
        if len(dims) != 1 or len(next(iter(dims))) != 2 or next(iter(dims))[0] != "sample":
            raise DatasetError(f"{path}: input set {names} needs its variables on one (sample, points) dimension; they have {sorted(dims)}")
        dim = next(iter(dims))[1]
        if dim == out_dim:
            raise DatasetError(f"{path}: input set {names} lies on the outputs' points {out_dim!r}; put it in task.inputs instead")
        coords = spec.coords
        if coords == "auto":
            try:
                coords = point_coordinate_names(nc, dim)
            except DatasetError as e:
                raise DatasetError(f"{path}: input set {names}: {e}; or set coords: index / polar") from None
        elif isinstance(coords, list):
            bad = [c for c in coords if c not in nc.variables or tuple(nc.variables[c].dimensions) not in ((dim,), ("sample", dim))]
            if bad:
                raise DatasetError(f"{path}: input set {names}: coords {bad} are not variables on ({dim},) or (sample, {dim})")
        count = f"{dim}_count" if f"{dim}_count" in nc.variables else None
    read = [*names, *(coords if isinstance(coords, list) else []), *([count] if count else [])]
    ds = ArrayDataset._read(Path(path), read, split)
    values = np.stack([np.asarray(ds[v], np.float32) for v in names], -1)  # (S, n, c)
    if values.shape[0] != n_samples:
        raise DatasetError(f"{path}: input set {names} has {values.shape[0]} samples, the outputs {n_samples}")
    n = values.shape[1]
    counts = torch.from_numpy(np.asarray(ds[count], np.int64)) if count else None
    if coords == "index":
        xy = (np.arange(n, dtype=np.float64) / max(n - 1, 1))[:, None]
    elif coords == "polar":
        theta = 2 * np.pi * np.arange(n) / max(n - 1, 1)
        c = spec.centre if spec.centre is not None else (0.5, 0.5)
        r = values[..., 0].astype(np.float64)
        xy = np.stack([c[0] + r * np.cos(theta), c[1] + r * np.sin(theta)], -1)
    else:
        xy = np.stack([np.asarray(ds[v], np.float64) for v in coords], -1)
    return InputSet(tuple(names), torch.from_numpy(xy.astype(np.float32)), torch.from_numpy(values), counts)
