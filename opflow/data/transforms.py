"""Resolution transforms and split assignment for grid datasets.

The FNO protocol makes coarse Darcy sets by strided subsampling of the 421 x 421 solve: resolution
``s_c`` comes from ``s_f`` with stride ``r = (s_f - 1) / (s_c - 1)`` (421 -> 211, 141, 106, 85, 61, 43
for r = 2, 3, 4, 5, 7, 10), keeping the boundary nodes. :func:`derive` applies that stride and picks
the splits: the first ``n_train`` samples train, the next ``n_val`` validate, the last ``n_test`` test
(so sets with different training sizes share their test samples).

Periodic grids (coordinate attribute ``grid_type = "periodic"``, no repeated endpoint) take
``r = s_f / s_c`` instead (256 -> 64 with r = 4, as the FNO Navier-Stokes data).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .format import DatasetError, DatasetWriter, SPLITS, open_dataset, split_variable
from .provenance import canonical_json

GRID_DIMS = ("x", "y", "z")


def stride_for(fine: int, coarse: int, periodic: bool = False) -> int:
    """Stride taking a ``fine``-point grid to ``coarse`` points.

    Node grids keep both boundaries: ``r = (fine - 1) / (coarse - 1)``; periodic grids have no
    repeated endpoint: ``r = fine / coarse``.
    """
    if coarse == fine:
        return 1
    if periodic:
        if coarse < 1 or coarse > fine or fine % coarse:
            valid = [fine // r for r in range(1, fine + 1) if fine % r == 0]
            raise DatasetError(
                f"resolution {coarse} is not a strided subsample of the {fine}-point periodic grid; "
                f"choose one of {valid} or generate at a multiple of {coarse}"
            )
        return fine // coarse
    if coarse < 2 or coarse > fine or (fine - 1) % (coarse - 1):
        valid = [(fine - 1) // r + 1 for r in range(1, fine) if (fine - 1) % r == 0 and (fine - 1) // r >= 1]
        raise DatasetError(
            f"resolution {coarse} is not a strided subsample of {fine} nodes; "
            f"choose one of {sorted(set(valid), reverse=True)} or generate at a resolution r*({coarse}-1)+1"
        )
    return (fine - 1) // (coarse - 1)


def is_periodic(coord_attrs: dict) -> bool:
    return str(coord_attrs.get("grid_type", "nodes")) == "periodic"


def split_indices(n_total: int, n_train: int, n_test: int, n_val: int = 0) -> dict[str, np.ndarray]:
    """Sample indices of each split: train first, then val, test last."""
    if min(n_train, n_test, n_val) < 0:
        raise DatasetError("split sizes must be >= 0")
    if n_train + n_val + n_test > n_total:
        raise DatasetError(
            f"splits need {n_train} train + {n_val} val + {n_test} test = {n_train + n_val + n_test} samples "
            f"but the source has {n_total}; raise the source's n_samples or shrink the splits"
        )
    return {
        "train": np.arange(0, n_train),
        "val": np.arange(n_train, n_train + n_val),
        "test": np.arange(n_total - n_test, n_total),
    }


def derive(
    source: str | os.PathLike,
    out: str | os.PathLike,
    *,
    resolution: int | None = None,
    n_train: int,
    n_test: int,
    n_val: int = 0,
    name: str = "",
    block: int = 32,
) -> Path:
    """Write a subsampled, split-labelled dataset ``out`` from a generated set ``source``.

    Its size is estimated from the source's (the kept fraction of samples and grid points): a file
    system with less free space is refused before anything is written
    (:class:`~opflow.data.errors.DiskFullError`).
    """
    with open_dataset(source) as nc:
        dims = {k: len(d) for k, d in nc.dimensions.items()}
        grid = [d for d in GRID_DIMS if d in dims]
        stride = 1
        if resolution is not None:
            if not grid:
                raise DatasetError(f"{source}: no grid dimensions {GRID_DIMS} to subsample")
            sizes = {dims[d] for d in grid}
            if len(sizes) != 1:
                raise DatasetError(f"{source}: grid dims {grid} differ in size {sizes}; give a resolution per dimension")
            periodic = {is_periodic({k: nc.variables[d].getncattr(k) for k in nc.variables[d].ncattrs()}) for d in grid if d in nc.variables}
            if len(periodic) > 1:
                raise DatasetError(f"{source}: grid dims {grid} mix periodic and node grids")
            stride = stride_for(sizes.pop(), resolution, periodic=periodic.pop() if periodic else False)
        sel = split_indices(dims["sample"], n_train, n_test, n_val)
        order = np.concatenate([sel["train"], sel["val"], sel["test"]])
        codes = np.concatenate([np.full(len(sel[k]), SPLITS[k], np.int8) for k in ("train", "val", "test")])

        new_dims = dict(dims)
        new_dims["sample"] = order.size
        for d in grid:
            new_dims[d] = len(range(0, dims[d], stride))
        spec = {n: (v.dimensions, v.dtype, {k: v.getncattr(k) for k in v.ncattrs()}) for n, v in nc.variables.items()}
        sv = split_variable(codes)
        spec["split"] = (sv.dims, sv.data.dtype, sv.attrs)
        attrs = {k: nc.getncattr(k) for k in nc.ncattrs() if k != "opflow_format"}
        attrs.update(
            opflow_dataset=name,
            opflow_derived_from=Path(source).name,
            opflow_source_params_hash=nc.getncattr("opflow_params_hash"),
            opflow_stride=stride,
            opflow_resolution=new_dims[grid[0]] if grid else -1,
            opflow_split_rule=canonical_json(
                {"train": [0, n_train], "val": [n_train, n_train + n_val], "test": [dims["sample"] - n_test, dims["sample"]]}
            ),
        )

        def sub(v, data: np.ndarray) -> np.ndarray:
            key = tuple(slice(None, None, stride) if d in grid else slice(None) for d in v.dimensions)
            return data[key]

        kept = order.size / max(1, dims["sample"]) * float(np.prod([new_dims[d] / dims[d] for d in grid]))
        size = int(Path(source).stat().st_size * kept)
        with DatasetWriter(out, new_dims, spec, attrs, expected_bytes=size) as w:
            w.write("split", codes, 0)
            for n, v in nc.variables.items():
                if v.dimensions[:1] != ("sample",):
                    w.write(n, sub(v, np.asarray(v[...])))
            # contiguous runs of the selection are read in blocks
            for b in range(0, order.size, block):
                idx = order[b : b + block]
                runs = np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1)
                for n, v in nc.variables.items():
                    if v.dimensions[:1] == ("sample",) and n != "split":
                        data = np.concatenate([np.asarray(v[int(r[0]) : int(r[-1]) + 1]) for r in runs])
                        w.write(n, sub(v, data), b)
    return Path(out)
