"""The one place that imports MPI, dolfinx and petsc4py, in the order they need.

``mpi4py.MPI`` must be imported before dolfinx or petsc4py so that MPI is initialised by mpi4py
(dolfinx and PETSc then share it). Every module that uses dolfinx calls :func:`dolfinx_modules`
inside its functions, which keeps ``import solvers.<module>`` cheap (the generator registry imports
every solver module) and guarantees the import order.

The helpers below wrap the few collective operations the solvers need, so solver code reads the
same in serial and under ``mpiexec -n N``.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import numpy as np


@functools.cache
def dolfinx_modules() -> SimpleNamespace:
    """Import and return ``MPI``, ``PETSc``, ``dolfinx`` (with ``fem``, ``fem.petsc``, ``mesh``,
    ``geometry``, ``io.gmsh``), ``ufl`` and ``basix`` as attributes of one namespace."""
    from mpi4py import MPI  # first: initialises MPI for dolfinx and PETSc

    import basix
    import dolfinx
    import dolfinx.fem
    import dolfinx.fem.petsc
    import dolfinx.geometry
    import dolfinx.io.gmsh
    import dolfinx.mesh
    import ufl
    from petsc4py import PETSc

    return SimpleNamespace(
        MPI=MPI,
        PETSc=PETSc,
        dolfinx=dolfinx,
        fem=dolfinx.fem,
        fem_petsc=dolfinx.fem.petsc,
        mesh=dolfinx.mesh,
        geometry=dolfinx.geometry,
        gmshio=dolfinx.io.gmsh,
        ufl=ufl,
        basix=basix,
    )


def comm_world() -> Any:
    """``MPI.COMM_WORLD`` (imports mpi4py on first use)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


def gather_rows(
    comm: Any, rows: np.ndarray, values: np.ndarray, total: int, *, root: int = 0, allow_missing: bool = False
) -> np.ndarray | None:
    """Assemble a global array of ``total`` rows from the rows each rank holds.

    ``rows`` are global row numbers of ``values`` (leading axis) on this rank. Rows held by several
    ranks take the value of the lowest rank; rows held by none are zero when ``allow_missing``
    (else an error). Returns the array on ``root`` and ``None`` elsewhere.
    """
    parts = comm.gather((np.asarray(rows), np.asarray(values)), root=root)
    if comm.rank != root:
        return None
    first = parts[0][1]
    out = np.zeros((total, *first.shape[1:]), dtype=first.dtype)
    seen = np.zeros(total, dtype=bool)
    for r, v in parts:  # rank order: the lowest rank wins for shared rows
        new = ~seen[r]
        out[r[new]] = v[new]
        seen[r[new]] = True
    if not allow_missing and not seen.all():
        raise RuntimeError(f"gather_rows: {int((~seen).sum())} of {total} rows were held by no rank")
    return out


def bcast_array(comm: Any, array: np.ndarray | None, *, root: int = 0) -> np.ndarray:
    """Broadcast a numpy array from ``root`` to every rank (a no-op copy in serial)."""
    if comm.size == 1:
        assert array is not None
        return array
    return comm.bcast(array, root=root)
