"""Darcy flow by finite elements (dolfinx): on the unit square and on gmsh meshes of other domains.

Equation (the Darcy benchmark of FNO/ONO/GNOT/Galerkin, ``PROTOCOLS.md`` "Darcy flow")::

    -div(a grad u) = f   in D,        u = 0   on the boundary of D,        f = 1 by default,

in the weak form: find ``u_h`` in ``V_h`` (continuous Lagrange P1 by default, P2 as an option) with
zero boundary values such that ``(a_h grad u_h, grad v) = (f, v)`` for all ``v`` in ``V_h``.

Coefficient. ``a`` is sampled on the ``s x s`` node grid spanning the domain's bounding box (the
unit square for every built-in domain) by the same sampler, with the same per-sample RNG
``sample_rng(seed, i)``, as the finite-difference generator ``darcy_fd`` of :mod:`solvers.darcy`,
so the two data sets hold the same coefficients. The solver uses a cell-wise constant (DG0) ``a_h``
whose value on a triangle is the grid coefficient evaluated at the triangle's centroid by bilinear
interpolation of the four surrounding grid nodes (``coeff_at_cells="bilinear"``, the default) or by
the value of the nearest grid node (``"nearest"``).

Where the coefficient map is applied (``coefficient_map``). ``a = T(g)`` with ``T`` the threshold
(``high`` where ``g >= threshold``, else ``low``) or ``exp``, ``g`` the Gaussian field on the grid.

* ``"grid"`` (default): ``T`` on the grid nodes (``darcy_fd``'s coefficient), then interpolated:
  ``a_h(x) = I_s[T(g)](x)``. A 12/3 field then has ramps one grid spacing wide across its
  interfaces, with values between 3 and 12.
* ``"points"``: ``g`` interpolated, then ``T`` at each centroid and node: ``a(x) = T(I_s[g](x))``,
  truly two-valued, its interfaces the zero lines of the bilinear interpolant of ``g``.

Either way ``a(x)`` is one function of ``x`` fixed by the seed, the sample index and the grid
resolution ``s``: it does not depend on the mesh. Meshes of one domain at different ``mesh_size``
(and the same ``resolution``) therefore carry the same coefficient functions sample by sample,
which is what a zero-shot test on a finer mesh needs. The irregular-domain data sets use
``"points"`` (docs/irregular_domains.md); :meth:`DarcyFEMGenerator.coefficient_at` evaluates
``a(x)`` anywhere in the box. ``index_offset`` shifts the per-sample seeds (sample ``i`` draws from
``sample_rng(seed, index_offset + i)``), so a source of ``n`` samples regenerates, for example, the
last ``n`` (the test split) of another source on another mesh.

Accuracy (tests/solvers/test_darcy_fem.py). With a smooth coefficient, P1 converges at order 2 in
L2 and 1 in H1 (also with the DG0 centroid coefficient: the midpoint rule keeps the consistency
error O(h^2)); P2 at orders 3 and 2 when the coefficient is exact. A DG0 coefficient limits P2 to
L2 order 2 and H1 order 1 (the consistency error of the cell-wise constant; expected, not asserted by a test),
and a piecewise 12/3 coefficient limits every method to about O(h): P2
and ``refine > 1`` buy accuracy for reference data, not a higher order. On the same 12/3
coefficient the P1 and FD (``darcy_fd``) pressures differ by a relative 1.2, 0.56, 0.28, 0.14 %
at s = 33, 65, 129, 257: both converge to one solution at first order.

Meshes. ``domain="unit_square"`` is the structured mesh of ``n x n`` squares, each cut into two
triangles by its up-right diagonal, with ``n = refine * (s - 1)``: for ``refine = 1`` the mesh
vertices are exactly the ``s x s`` grid nodes of the FD solver (and P1 with a constant ``a`` is then
the 5-point FD scheme). The named domains of :mod:`meshes.domains` (``square``, ``l_shape``,
``perforated``, ``disk``) are meshed by gmsh with target size ``mesh_size`` (default: the grid
spacing, so the mesh resolves the coefficient grid) on first use and cached (``$OPFLOW_MESH_CACHE``
or ``~/.cache/opflow/meshes``; at s = 421 meshing takes ~10-25 s once); ``domain="file"`` reads any
gmsh ``.msh`` file with a 2-D physical group of linear triangles (its bounding box then carries the
coefficient grid). Curved boundaries (holes, disk) are polygons within O(h^2) of the exact curve.
Dirichlet conditions are applied on every exterior facet (the whole boundary, hole boundaries
included). ``mesh_size`` is checked when the parameters are built (range, holes, arms) and every
new mesh is checked for orientation, angles, edge lengths and area before it is written
(:func:`meshes.domains.check_mesh`), so a bad value stops before any solve. The sizes of a mesh
data set (``dims()``: nodes and triangles) are read from the gmsh file alone (no dolfinx, no
MPI), so the workflow can check a config that holds mesh sources when it loads.

On the L-shape the solution of a smooth problem has the corner singularity
``r^(2/3) sin(2 theta / 3)`` (re-entrant angle 3 pi / 2), and P1 on quasi-uniform meshes converges
at the singularity-limited orders 2/3 in H1 and 4/3 in L2: measured 0.66 and 1.36 for that exact
harmonic function with its Dirichlet data (``DarcyFEM(dirichlet=...)``), mesh sizes 0.1 .. 0.0125.

Reuse across samples: the forms are compiled once, the matrix is assembled into the same PETSc
``Mat`` for each sample, the load vector (``f`` does not depend on the sample) is assembled once, and
one ``KSP`` is kept. ``solver="mumps"`` (default) is a sparse Cholesky factorisation by MUMPS
(the matrix is symmetric: dolfinx zeros boundary rows and columns); the symbolic analysis is done
once and only the numeric factorisation per sample. ``"cg"`` is conjugate gradients with PETSc's
GAMG preconditioner, stopped when the true (unpreconditioned) residual drops below ``rtol`` times
the load norm (there is no hypre in this PETSc). At ``s = 421`` (177,241 unknowns) both solve in
about 0.32 s at best (CG + GAMG: 24 iterations) on the shared 2-core development machine, about
0.4 s per sample in all, against about 0.1 s for ``darcy_fd``; at ``s = 85`` both take about 0.01 s
(``benchmarks/darcy_fem.py``). Cholesky is the default: exact, and its cost does not depend on
the coefficient's contrast.
Every solution is accepted only when the KSP reports convergence, all values are finite and the
true relative residual ``||b - A u|| / ||b||`` is at most ``10 rtol``; otherwise
:class:`~solvers.base.SolverError` names the sample index and seed.

Output (``output``):

* ``"grid"``: ``coeff`` (the sampled grid coefficient) and ``pressure`` (the finite-element solution
  evaluated exactly at the grid nodes) on the ``s x s`` grid, dims ``(x, y)`` with ``array[i, j]`` at
  ``(x_i, y_j)``. For domains other than the unit square, grid nodes outside the mesh hold 0 in both
  fields, and an auxiliary int8 field ``inside`` (1 inside or on the mesh polygon, 0 outside)
  marks them (zeros rather than NaN: the dataset writer rejects non-finite inputs and outputs).
  ``residual`` (auxiliary, per sample) is the relative residual of the linear solve, as in
  ``darcy_fd``; for the unit square the fields are exactly those of ``darcy_fd``.
* ``"mesh"``: values at the mesh vertices, dims ``node``, ``cell``, ``corner`` (3), UGRID style:
  coordinates ``node_x``, ``node_y``, connectivity ``cell (cell, corner)`` int32, counter-clockwise,
  0-based (``cf_role = face_node_connectivity``, ``start_index = 0``) and a ``mesh`` topology variable.
  Fields: ``coeff`` at the nodes (the grid coefficient interpolated there by the same rule as for
  cells), ``pressure`` at the nodes (for P2 the vertex values of the P2 solution), and the auxiliary
  ``coeff_cell`` (cell): the DG0 coefficient the solver used. Node and cell order are the mesh's
  input order (gmsh node tags, the structured mesh's row-major order), independent of the number
  of MPI ranks.

MPI: under ``mpiexec -n N`` dolfinx distributes the mesh; every rank samples the (cheap, identical)
grid coefficient, the solve is parallel, and the output is gathered to rank 0 and broadcast, so
every rank returns the same arrays (a writer should write from rank 0 only).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp

from opflow.data.errors import MissingStackError
from opflow.data.format import Variable
from meshes.domains import DEFAULT_HOLES
from solvers.base import ConfigError, FieldSpec, Generator, SolverError, register
from solvers.darcy import CoefficientParams
from solvers.mpi import bcast_array, comm_world, dolfinx_modules, gather_rows

GMSH_DOMAINS = ("square", "l_shape", "perforated", "disk")
DOMAINS = ("unit_square", *GMSH_DOMAINS, "file")


# --------------------------------------------------------------------------------------- meshes


def unit_square_mesh(n: int, comm: Any = None) -> Any:
    """The structured triangle mesh of the unit square with ``n x n`` squares (up-right diagonals)."""
    dx = dolfinx_modules()
    comm = comm if comm is not None else comm_world()
    return dx.mesh.create_unit_square(comm, n, n, dx.mesh.CellType.triangle, diagonal=dx.mesh.DiagonalType.right)


def gmsh_mesh(path: str | Path, comm: Any = None) -> Any:
    """A dolfinx mesh of the triangles of gmsh file ``path`` (read on rank 0, then distributed).

    The file must hold a 2-D physical group covering all triangles (every file written by
    :mod:`meshes.domains` does); the mesh must be linear (3-node triangles).
    """
    from meshes.domains import open_msh

    dx = dolfinx_modules()
    comm = comm if comm is not None else comm_world()
    with contextlib.ExitStack() as stack:
        gmsh, error = None, None
        if comm.rank == 0:
            try:
                gmsh = stack.enter_context(open_msh(path))
                if 2 not in {d for d, _ in gmsh.model.getPhysicalGroups()}:
                    raise ConfigError(f"{path}: no 2-D physical group; tag the domain's surfaces in gmsh")
            except ConfigError as e:
                error = str(e)
        error = comm.bcast(error, root=0)
        if error is not None:
            raise ConfigError(error)
        mesh = dx.gmshio.model_to_mesh(gmsh.model if gmsh else None, comm, 0, gdim=2).mesh
    if mesh.topology.cell_name() != "triangle" or mesh.geometry.cmaps[0].degree != 1:
        raise ConfigError(f"{path}: need a mesh of linear triangles, got {mesh.topology.cell_name()} of degree {mesh.geometry.cmaps[0].degree}")
    return mesh


# ------------------------------------------------------------------- grid -> point transfer


def grid_axes(s: int, box: tuple[float, float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Node coordinates ``x_i``, ``y_j`` of the ``s x s`` grid spanning ``box = (x0, x1, y0, y1)``."""
    x0, x1, y0, y1 = box
    return np.linspace(x0, x1, s), np.linspace(y0, y1, s)


def grid_points(s: int, box: tuple[float, float, float, float]) -> np.ndarray:
    """The grid nodes as an ``(s * s, 2)`` array, row ``i * s + j`` = ``(x_i, y_j)``."""
    x, y = grid_axes(s, box)
    X, Y = np.meshgrid(x, y, indexing="ij")
    return np.column_stack([X.ravel(), Y.ravel()])


def grid_to_points(points: np.ndarray, s: int, box: tuple[float, float, float, float], rule: str = "bilinear") -> sp.csr_matrix:
    """Sparse ``(len(points), s * s)`` matrix evaluating a grid field (``a.ravel()`` of ``a[i, j]``)
    at ``points`` by bilinear interpolation or by the nearest node; points are clipped to the box."""
    x0, x1, y0, y1 = box
    p = np.asarray(points, dtype=np.float64)[:, :2]
    m = len(p)
    xi = np.clip((p[:, 0] - x0) / (x1 - x0) * (s - 1), 0.0, s - 1.0)
    eta = np.clip((p[:, 1] - y0) / (y1 - y0) * (s - 1), 0.0, s - 1.0)
    if rule == "nearest":
        cols = np.rint(xi).astype(np.int64) * s + np.rint(eta).astype(np.int64)
        return sp.csr_matrix((np.ones(m), (np.arange(m), cols)), shape=(m, s * s))
    if rule != "bilinear":
        raise ConfigError(f"unknown coefficient rule {rule!r}; use 'bilinear' or 'nearest'")
    i = np.minimum(np.floor(xi).astype(np.int64), s - 2)
    j = np.minimum(np.floor(eta).astype(np.int64), s - 2)
    t, u = xi - i, eta - j
    rows = np.repeat(np.arange(m), 4)
    cols = np.stack([i * s + j, (i + 1) * s + j, i * s + j + 1, (i + 1) * s + j + 1], axis=1).ravel()
    vals = np.stack([(1 - t) * (1 - u), t * (1 - u), (1 - t) * u, t * u], axis=1).ravel()
    return sp.csr_matrix((vals, (rows, cols)), shape=(m, s * s))


def _cell_vertices(mesh: Any) -> np.ndarray:
    """``(num_local_cells, 3, 2)`` vertex coordinates of all local (owned and ghost) cells."""
    return mesh.geometry.x[:, :2][mesh.geometry.dofmaps[0]]


def _reference_coords(verts: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Reference coordinates ``X`` with ``p = v0 + [v1 - v0, v2 - v0] X`` for affine triangles
    ``verts (m, 3, 2)`` and points ``(m, 2)`` (closed-form inverse of the 2 x 2 Jacobian)."""
    e1, e2 = verts[:, 1] - verts[:, 0], verts[:, 2] - verts[:, 0]
    d = np.asarray(points)[:, :2] - verts[:, 0]
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    X0 = (e2[:, 1] * d[:, 0] - e2[:, 0] * d[:, 1]) / det
    X1 = (-e1[:, 1] * d[:, 0] + e1[:, 0] * d[:, 1]) / det
    return np.stack([X0, X1], axis=1)


def evaluation_matrix(V: Any, points: np.ndarray, cells: np.ndarray) -> sp.csr_matrix:
    """Sparse ``(len(points), num_local_dofs)`` matrix evaluating functions of ``V`` (Lagrange on
    affine triangles, no dof transformations) at ``points`` lying in local ``cells``."""
    element = V.element
    if element.needs_dof_transformations:
        raise NotImplementedError("point evaluation needs an element without dof transformations (Lagrange P1/P2)")
    X = _reference_coords(_cell_vertices(V.mesh)[cells], points)
    X = np.clip(X, 0.0, 1.0)  # points found on the boundary of their cell within rounding
    over = X.sum(axis=1)
    X[over > 1] /= over[over > 1, None]
    phi = element.basix_element.tabulate(0, X)[0, :, :, 0]  # (m, dofs per cell)
    # points at nodes (mesh vertices, grid nodes on the structured mesh) take the nodal value exactly
    phi[np.abs(phi) < 1e-13] = 0.0
    phi[np.abs(phi - 1.0) < 1e-13] = 1.0
    dofs = V.dofmap.list[cells]
    n_local = V.dofmap.index_map.size_local + V.dofmap.index_map.num_ghosts
    rows = np.repeat(np.arange(len(cells)), dofs.shape[1])
    return sp.csr_matrix((phi.ravel(), (rows, dofs.ravel())), shape=(len(cells), n_local))


def locate_points(mesh: Any, points: np.ndarray, tol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """The indices of ``points`` that lie in (or on, within barycentric tolerance ``tol``) an owned
    cell of this rank, and one such cell each (bounding-box tree candidates, then a vectorised
    barycentric test)."""
    dx = dolfinx_modules()
    tdim = mesh.topology.dim
    owned = np.arange(mesh.topology.index_map(tdim).size_local, dtype=np.int32)
    pts = np.zeros((len(points), 3))
    pts[:, :2] = points[:, :2]
    tree = dx.geometry.bb_tree(mesh, tdim, entities=owned, padding=tol)
    candidates = dx.geometry.compute_collisions_points(tree, pts)
    offsets = np.asarray(candidates.offsets)
    cand = np.asarray(candidates.array, dtype=np.int32)
    pid = np.repeat(np.arange(len(points)), np.diff(offsets))
    X = _reference_coords(_cell_vertices(mesh)[cand], pts[pid])
    ok = np.minimum(np.minimum(X[:, 0], X[:, 1]), 1.0 - X[:, 0] - X[:, 1]) >= -tol
    found, first = np.unique(pid[ok], return_index=True)
    return found, cand[ok][first]


def error_norms(uh: Any, exact: Callable[[Any], Any], quadrature_degree: int | None = None) -> tuple[float, float]:
    """``(||u_h - u||_L2, |u_h - u|_H1)`` over the mesh of ``uh``; ``exact(x)`` is a UFL expression of
    the spatial coordinate ``x``. Summed over MPI ranks."""
    dx = dolfinx_modules()
    ufl = dx.ufl
    mesh = uh.function_space.mesh
    x = ufl.SpatialCoordinate(mesh)
    e = uh - exact(x)
    q = quadrature_degree or 2 * uh.function_space.element.basix_element.degree + 4
    meas = ufl.dx(metadata={"quadrature_degree": q})
    l2 = dx.fem.assemble_scalar(dx.fem.form(e * e * meas))
    h1 = dx.fem.assemble_scalar(dx.fem.form(ufl.inner(ufl.grad(e), ufl.grad(e)) * meas))
    comm = mesh.comm
    return math.sqrt(comm.allreduce(l2)), math.sqrt(comm.allreduce(h1))


# ---------------------------------------------------------------------------------- the solver


class DarcyFEM:
    """A reusable finite-element solver of ``-div(a grad u) = f``, ``u = g`` on the boundary, on one mesh.

    ``coefficient=None`` (the data-generation case) makes ``a`` a DG0 function whose cell values are
    set by :meth:`set_cell_coefficient` before each :meth:`solve`; a callable ``coefficient(x)``
    returning a UFL expression of the spatial coordinate fixes ``a`` (used for manufactured
    solutions). ``source`` is a number or such a callable. ``dirichlet`` is the boundary value
    ``g``: ``None`` (the data sets: ``g = 0``) or a callable ``g(x)`` returning a UFL expression,
    interpolated into ``V_h`` and imposed on every exterior facet by lifting (the load vector then
    depends on ``a`` and is re-assembled at each solve; used for exact solutions such as the
    L-shape's corner singularity). Forms are compiled in the constructor.
    """

    def __init__(
        self,
        mesh: Any,
        *,
        degree: int = 1,
        source: float | Callable[[Any], Any] = 1.0,
        coefficient: Callable[[Any], Any] | None = None,
        dirichlet: Callable[[Any], Any] | None = None,
        solver: str = "mumps",
        rtol: float = 1e-10,
        maxiter: int = 500,
        quadrature_degree: int | None = None,
    ) -> None:
        if solver not in ("mumps", "cg"):
            raise ConfigError(f"solver must be 'mumps' or 'cg', got {solver!r}")
        dx = self._dx = dolfinx_modules()
        fem, ufl, PETSc = dx.fem, dx.ufl, dx.PETSc
        t0 = time.perf_counter()
        self.mesh = mesh
        self.comm = mesh.comm
        self.rtol = float(rtol)
        tdim = mesh.topology.dim
        self.V = fem.functionspace(mesh, ("Lagrange", int(degree)))
        self.Q = fem.functionspace(mesh, ("DG", 0))
        x = ufl.SpatialCoordinate(mesh)
        self.kappa = fem.Function(self.Q, name="coeff_cell")
        self.kappa.x.array[:] = 1.0
        a_expr = self.kappa if coefficient is None else coefficient(x)
        f_expr = fem.Constant(mesh, float(source)) if not callable(source) else source(x)
        u, v = ufl.TrialFunction(self.V), ufl.TestFunction(self.V)
        md = {"quadrature_degree": quadrature_degree} if quadrature_degree else {}
        meas = ufl.dx(metadata=md)
        self.a_form = fem.form(a_expr * ufl.inner(ufl.grad(u), ufl.grad(v)) * meas)
        self.L_form = fem.form(f_expr * v * meas)
        mesh.topology.create_connectivity(tdim - 1, tdim)
        facets = dx.mesh.exterior_facet_indices(mesh.topology)
        boundary_dofs = fem.locate_dofs_topological(self.V, tdim - 1, facets)
        self.lifted = dirichlet is not None
        if dirichlet is None:
            self.bc = fem.dirichletbc(0.0, boundary_dofs, self.V)
        else:
            g = fem.Function(self.V, name="dirichlet")
            g.interpolate(fem.Expression(dirichlet(x), self.V.element.interpolation_points))
            self.bc = fem.dirichletbc(g, boundary_dofs)
        self.A = dx.fem_petsc.create_matrix(self.a_form)
        # symmetric positive definite for a > 0 (boundary rows and columns are zeroed, diagonal 1):
        # MUMPS then factorises LL^T without pivoting and GAMG estimates eigenvalues with CG
        self.A.setOption(PETSc.Mat.Option.SPD, True)
        self.b = dx.fem_petsc.create_vector(self.V)
        self.uh = fem.Function(self.V, name="pressure")
        self.r = self.b.duplicate()
        self._cell_dofs = self.Q.dofmap.list[:, 0]
        n_cells = mesh.topology.index_map(tdim).size_local + mesh.topology.index_map(tdim).num_ghosts
        self.cell_midpoints = dx.mesh.compute_midpoints(mesh, tdim, np.arange(n_cells, dtype=np.int32))[:, :2]

        ksp = self.ksp = PETSc.KSP().create(self.comm)
        ksp.setOptionsPrefix("opflow_darcy_fem_")  # PETSc.Options()["opflow_darcy_fem_..."] may override
        if solver == "mumps":
            ksp.setType("preonly")
            ksp.getPC().setType("cholesky")
            ksp.getPC().setFactorSolverType("mumps")
        else:
            ksp.setType("cg")
            ksp.getPC().setType("gamg")
            ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
            ksp.setTolerances(rtol=self.rtol, atol=0.0, max_it=int(maxiter))
        ksp.setFromOptions()
        ksp.setOperators(self.A)
        self.assemble_rhs()
        self.setup_seconds = time.perf_counter() - t0
        self.stats: dict[str, float] = {}

    def assemble_rhs(self) -> None:
        """(Re)assemble the load vector: once for ``g = 0`` (it does not depend on the coefficient),
        at every solve with Dirichlet data (the lifting ``-A g`` does)."""
        dx = self._dx
        with self.b.localForm() as loc:
            loc.set(0.0)
        dx.fem_petsc.assemble_vector(self.b, self.L_form)
        if self.lifted:
            dx.fem_petsc.apply_lifting(self.b, [self.a_form], bcs=[[self.bc]])
        self.b.ghostUpdate(addv=dx.PETSc.InsertMode.ADD, mode=dx.PETSc.ScatterMode.REVERSE)
        dx.fem_petsc.set_bc(self.b, [self.bc])
        self.b_norm = self.b.norm()

    def set_cell_coefficient(self, values: np.ndarray) -> None:
        """Set ``a`` on every local (owned and ghost) cell, in the order of :attr:`cell_midpoints`."""
        self.kappa.x.array[self._cell_dofs] = values

    def solve(self, *, index: int | None = None, seed: int | None = None) -> Any:
        """Assemble the matrix for the current coefficient and solve; returns ``uh`` (reused Function).

        Raises :class:`SolverError` naming ``index`` and ``seed`` if the solve fails."""
        dx = self._dx
        PETSc = dx.PETSc
        t0 = time.perf_counter()
        if self.lifted:
            self.assemble_rhs()
        self.A.zeroEntries()
        dx.fem_petsc.assemble_matrix(self.A, self.a_form, bcs=[self.bc])
        self.A.assemble()
        t1 = time.perf_counter()
        x = self.uh.x.petsc_vec
        try:
            self.ksp.solve(self.b, x)
        except PETSc.Error as e:
            raise SolverError(f"linear solve failed in PETSc (error {e.ierr})", index=index, seed=seed) from None
        reason = self.ksp.getConvergedReason()
        its = self.ksp.getIterationNumber()
        self.uh.x.scatter_forward()
        self.A.mult(x, self.r)
        self.r.axpy(-1.0, self.b)
        res = self.r.norm() / self.b_norm if self.b_norm > 0 else self.r.norm()
        t2 = time.perf_counter()
        self.stats = {"assemble_s": t1 - t0, "solve_s": t2 - t1, "iterations": float(its), "residual": float(res)}
        if reason < 0:
            raise SolverError(
                f"Krylov solver did not converge (PETSc reason {reason}) after {its} iterations, "
                f"relative residual {res:.2e}; raise maxiter or use solver='mumps'",
                index=index,
                seed=seed,
            )
        finite = self.comm.allreduce(bool(np.all(np.isfinite(self.uh.x.array))), op=dx.MPI.LAND)
        if not finite or not np.isfinite(res):
            raise SolverError("non-finite values in the solution", index=index, seed=seed)
        if res > 10 * self.rtol:
            raise SolverError(
                f"relative residual {res:.2e} exceeds 10 * rtol = {10 * self.rtol:.1e} after the solve",
                index=index,
                seed=seed,
            )
        return self.uh


# ------------------------------------------------------------------------------- the generator


@dataclass(frozen=True)
class DarcyFEMParams(CoefficientParams):
    """Parameters of ``darcy_fem`` (see the module doc).

    The coefficient fields (``coefficient`` .. ``low``) and ``forcing`` are those of ``darcy_fd``
    (:class:`solvers.darcy.CoefficientParams`), whose sampler is used, so both generators give the
    same coefficient for the same (seed, index) and parameters.
    """

    #: s: nodes per side of the coefficient grid and of the output grid
    resolution: int = 421
    #: unit_square (structured) | square | l_shape | perforated | disk (gmsh) | file (mesh_file)
    domain: Literal["unit_square", "square", "l_shape", "perforated", "disk", "file"] = "unit_square"
    #: path of a gmsh .msh file (domain = "file"); its bounding box carries the coefficient grid
    mesh_file: str = ""
    #: target triangle size of the gmsh domains; 0 = the grid spacing 1 / (resolution - 1)
    mesh_size: float = 0.0
    #: l_shape: the removed square is [corner, 1]^2
    corner: float = 0.5
    #: perforated: holes (cx, cy, r); default: a 3 x 3 array of radius 0.1 centred in the thirds
    holes: tuple[tuple[float, float, float], ...] = DEFAULT_HOLES
    #: unit_square: n = refine * (resolution - 1) cells per side
    refine: int = 1
    #: Lagrange degree of the pressure
    degree: Literal[1, 2] = 1
    #: how the DG0 coefficient is taken from the grid at cell centroids
    coeff_at_cells: Literal["bilinear", "nearest"] = "bilinear"
    #: where the map from the Gaussian field g to a (threshold or exp) is applied: "grid" (the grid
    #: coefficient of darcy_fd, then interpolated) or "points" (g interpolated, then mapped at each
    #: centroid and node: one coefficient function on every mesh of the domain; module doc)
    coefficient_map: Literal["grid", "points"] = "grid"
    #: sample i draws its Gaussian field from sample_rng(seed, index_offset + i) (another set's
    #: samples, e.g. a test split on a finer mesh)
    index_offset: int = 0
    #: grid: s x s grid fields (+ inside mask); mesh: values at the mesh nodes (UGRID layout)
    output: Literal["grid", "mesh"] = "grid"
    # -- the linear solver
    #: mumps (sparse Cholesky) | cg (CG + GAMG)
    solver: Literal["mumps", "cg"] = "mumps"
    #: cg stopping tolerance on ||b - A u|| / ||b||; every solve must reach 10 rtol
    rtol: float = 1e-10
    #: cg iteration limit
    maxiter: int = 500
    #: storage type of coeff and pressure
    dtype: Literal["float32", "float64"] = "float32"

    def __post_init__(self) -> None:
        if not 3 <= self.resolution <= 8193:
            raise ValueError(f"resolution must be in [3, 8193] (nodes per side), got {self.resolution}")
        if not 1 <= self.refine <= 64:
            raise ValueError(f"refine must be in [1, 64], got {self.refine}")
        if self.refine != 1 and self.domain != "unit_square":
            raise ValueError(f"refine applies to domain 'unit_square' only; for {self.domain!r} set mesh_size")
        if self.domain == "file":
            if not self.mesh_file.endswith(".msh"):
                raise ValueError(f"domain 'file' needs mesh_file = the path of a gmsh .msh file, got {self.mesh_file!r}")
        elif self.mesh_file:
            raise ValueError(f"mesh_file is only read with domain 'file' (domain is {self.domain!r}); remove it or set domain: file")
        if self.mesh_size < 0:
            raise ValueError(f"mesh_size must be > 0, or 0 for the grid spacing; got {self.mesh_size}")
        if not 0 < self.rtol <= 1e-4:
            raise ValueError(f"rtol must be in (0, 1e-4], got {self.rtol}")
        if self.maxiter < 1:
            raise ValueError(f"maxiter must be >= 1, got {self.maxiter}")
        if self.index_offset < 0:
            raise ValueError(f"index_offset must be >= 0, got {self.index_offset}")
        object.__setattr__(self, "holes", tuple(tuple(float(c) for c in h) for h in self.holes))
        if self.domain in GMSH_DOMAINS:
            from meshes.domains import check_domain

            try:
                check_domain(self.domain, self.effective_mesh_size, **self.domain_options())
            except ConfigError as e:
                raise ValueError(str(e)) from None
        self.fd_params()  # the coefficient and forcing checks of darcy_fd

    @property
    def effective_mesh_size(self) -> float:
        """``mesh_size``, or the grid spacing ``1 / (resolution - 1)`` when it is 0."""
        return self.mesh_size if self.mesh_size > 0 else 1.0 / (self.resolution - 1)

    def domain_options(self) -> dict[str, Any]:
        """The options of the gmsh domain (:mod:`meshes.domains`)."""
        if self.domain == "l_shape":
            return {"corner": self.corner}
        if self.domain == "perforated":
            return {"holes": self.holes}
        return {}

    def fd_params(self) -> Any:
        """The ``darcy_fd`` parameters with the same coefficient (and forcing) as these."""
        from solvers.darcy import DarcyFD

        names = ("resolution", *(f.name for f in fields(CoefficientParams)))
        return DarcyFD.Params(**{k: getattr(self, k) for k in names})


@dataclass
class _Setup:
    solver: DarcyFEM
    cell_weights: sp.csr_matrix  # grid -> local cells
    rows: np.ndarray  # output rows held by this rank
    evaluate: sp.csr_matrix  # local dofs -> those rows
    n_rows: int
    node_weights: sp.csr_matrix | None = None  # mesh output: grid -> all nodes
    cell_weights_global: sp.csr_matrix | None = None  # mesh output: grid -> all cells


@register
class DarcyFEMGenerator(Generator):
    """Darcy pressure by P1/P2 finite elements (dolfinx) on the unit square or a gmsh domain."""

    name = "darcy_fem"
    supports_mpi = True
    Params = DarcyFEMParams
    legacy_params: ClassVar[dict[str, Any]] = {"grf_draw": "grid"}
    #: coefficients are sampled for a block at once (as darcy_fd does); solves run one by one
    block_size = 4

    def __init__(self, params: DarcyFEMParams, comm: Any = None) -> None:
        super().__init__(params)
        self._comm = comm
        self._mesh_obj: Any = None
        self._layout: dict[str, Any] | None = None
        self._setup_obj: _Setup | None = None
        self._fd: Any = None
        self._counts: tuple[int, int] | None = None
        self.timings: dict[str, float] = {}

    # -- cheap descriptions
    @property
    def comm(self) -> Any:
        if self._comm is None:
            self._comm = comm_world()
        return self._comm

    @property
    def s(self) -> int:
        return self.params.resolution

    @property
    def box(self) -> tuple[float, float, float, float]:
        """The rectangle carrying the coefficient (and output) grid."""
        if self.params.domain != "file":
            return (0.0, 1.0, 0.0, 1.0)
        return self.layout()["box"]

    def dims(self) -> dict[str, int]:
        if self.params.output == "grid":
            return {"x": self.s, "y": self.s}
        nodes, cells = self.mesh_counts()
        return {"node": nodes, "cell": cells, "corner": 3}

    def mesh_counts(self) -> tuple[int, int]:
        """``(nodes, triangles)`` of the mesh, from its gmsh file: meshed (once, cached) and counted
        with gmsh alone, so the workflow can size a dataset when it loads without dolfinx or MPI."""
        if self._layout is not None:
            return len(self._layout["node_x"]), len(self._layout["cells"])
        if self._counts is None and self.params.domain == "unit_square":
            n = self.params.refine * (self.s - 1)
            self._counts = ((n + 1) ** 2, 2 * n * n)
        if self._counts is None:
            from meshes.domains import mesh_stats

            stats = mesh_stats(self._mesh_path(serial=self._comm is None))
            self._counts = (stats.nodes, stats.triangles)
        return self._counts

    def coords(self) -> dict[str, Variable]:
        if self.params.output == "grid":
            x, y = grid_axes(self.s, self.box)
            return {
                "x": Variable(("x",), x, {"units": "1", "long_name": "x coordinate"}),
                "y": Variable(("y",), y, {"units": "1", "long_name": "y coordinate"}),
            }
        lay = self.layout()
        return {
            "mesh": Variable(
                (),
                np.int32(0),
                {
                    "cf_role": "mesh_topology",
                    "long_name": "triangular mesh of the domain",
                    "topology_dimension": 2,
                    "node_coordinates": "node_x node_y",
                    "face_node_connectivity": "cell",
                },
            ),
            "node_x": Variable(("node",), lay["node_x"], {"units": "1", "long_name": "x coordinate of mesh nodes"}),
            "node_y": Variable(("node",), lay["node_y"], {"units": "1", "long_name": "y coordinate of mesh nodes"}),
            "cell": Variable(
                ("cell", "corner"),
                lay["cells"],
                {"cf_role": "face_node_connectivity", "start_index": 0, "long_name": "nodes of each triangle, counter-clockwise"},
            ),
        }

    def fields(self) -> dict[str, FieldSpec]:
        dt = self.params.dtype
        if self.params.output == "grid":
            out = {
                "coeff": FieldSpec(("x", "y"), "1", "permeability a on the grid", "input", dt),
                "pressure": FieldSpec(("x", "y"), "1", "pressure u (finite elements) at the grid nodes", "output", dt),
            }
            out["residual"] = _RESIDUAL
            if self.params.domain != "unit_square":
                out["inside"] = FieldSpec(("x", "y"), "1", "1 where the grid node lies in the mesh, else 0", "auxiliary", "int8")
            return out
        # UGRID data variables name their mesh and location (the file's Conventions add UGRID-1.0)
        on_nodes, on_cells = {"mesh": "mesh", "location": "node"}, {"mesh": "mesh", "location": "face"}
        return {
            "coeff": FieldSpec(("node",), "1", "permeability a at the mesh nodes", "input", dt, on_nodes),
            "pressure": FieldSpec(("node",), "1", "pressure u (finite elements) at the mesh nodes", "output", dt, on_nodes),
            "coeff_cell": FieldSpec(("cell",), "1", "cell-wise permeability used by the solver", "auxiliary", dt, on_cells),
            "residual": _RESIDUAL,
        }

    # -- mesh and layout (no form compilation)
    def mesh(self) -> Any:
        if self._mesh_obj is None:
            p = self.params
            if p.domain == "unit_square":
                self._mesh_obj = unit_square_mesh(p.refine * (p.resolution - 1), self.comm)
            else:
                self._mesh_obj = gmsh_mesh(self._mesh_path(), self.comm)
        return self._mesh_obj

    def _mesh_path(self, serial: bool = False) -> Path:
        """The .msh file; meshed on rank 0 while the others wait, or here alone with ``serial``."""
        p = self.params
        if p.domain == "file":
            path = Path(p.mesh_file)
            if not path.is_file():
                raise ConfigError(f"mesh_file {p.mesh_file!r} does not exist; give the path of a gmsh .msh file")
            return path
        from meshes.domains import cached_mesh

        def attempt() -> tuple[str | None, str | None, str | None]:
            """Meshing's outcome as (path, error, missing module), raised below: after the broadcast under MPI."""
            try:
                return str(cached_mesh(p.domain, mesh_size=p.effective_mesh_size, **p.domain_options())), None, None
            except ModuleNotFoundError as e:  # gmsh absent (the GPU machines): not a config error
                return None, None, e.name or "gmsh"
            except Exception as e:
                return None, f"meshing domain {p.domain!r} failed: {e}", None

        if serial:
            path, error, missing = attempt()
        else:  # mesh once on rank 0; the other ranks wait for the file (or the error)
            path, error, missing = self.comm.bcast(attempt() if self.comm.rank == 0 else None, root=0)
        if missing is not None:
            raise MissingStackError(
                f"meshing domain {p.domain!r} needs the module {missing!r}, which is not installed here; "
                "make this dataset on a machine with the FEM stack (make setup installs it) and carry the file"
            )
        if error is not None:
            raise ConfigError(error)
        return Path(path)

    def layout(self) -> dict[str, Any]:
        """Global mesh layout in input order (node coordinates, counter-clockwise cells), the
        bounding box, and this rank's owned nodes and cells with their global rows."""
        if self._layout is not None:
            return self._layout
        mesh = self.mesh()
        comm = self.comm
        tdim = mesh.topology.dim
        geo = mesh.geometry
        n_own = geo.index_map().size_local
        inp = np.asarray(geo.input_global_indices, dtype=np.int64)
        all_inp = np.sort(np.concatenate(comm.allgather(inp[:n_own])))
        node_row = np.searchsorted(all_inp, inp)  # row of every local node (owned and ghost)
        n_nodes = len(all_inp)
        x = gather_rows(comm, node_row[:n_own], geo.x[:n_own, :2], n_nodes)
        n_cells_own = mesh.topology.index_map(tdim).size_local
        orig = np.asarray(mesh.topology.original_cell_index[:n_cells_own], dtype=np.int64)
        all_orig = np.sort(np.concatenate(comm.allgather(orig)))
        cell_row = np.searchsorted(all_orig, orig)
        conn = node_row[geo.dofmaps[0][:n_cells_own]].astype(np.int32)
        cells = gather_rows(comm, cell_row, conn, len(all_orig))
        if comm.rank == 0:
            v = x[cells]
            cross = (v[:, 1, 0] - v[:, 0, 0]) * (v[:, 2, 1] - v[:, 0, 1]) - (v[:, 1, 1] - v[:, 0, 1]) * (v[:, 2, 0] - v[:, 0, 0])
            cells[cross < 0] = cells[cross < 0][:, [0, 2, 1]]
        x = bcast_array(comm, x)
        cells = bcast_array(comm, cells)
        box = (float(x[:, 0].min()), float(x[:, 0].max()), float(x[:, 1].min()), float(x[:, 1].max()))
        if self._counts is not None and self._counts != (len(x), len(cells)):
            raise RuntimeError(f"dolfinx read {len(x)} nodes and {len(cells)} cells but the gmsh file counts {self._counts}")
        self._layout = {
            "node_x": x[:, 0].copy(),
            "node_y": x[:, 1].copy(),
            "cells": cells,
            "box": box,
            "node_row": node_row,
            "n_own_nodes": n_own,
        }
        return self._layout

    # -- solver setup (compiles forms)
    def setup(self) -> _Setup:
        if self._setup_obj is not None:
            return self._setup_obj
        p = self.params
        t0 = time.perf_counter()
        mesh = self.mesh()
        t_mesh = time.perf_counter() - t0
        solver = DarcyFEM(mesh, degree=p.degree, source=p.forcing, solver=p.solver, rtol=p.rtol, maxiter=p.maxiter)
        cell_weights = grid_to_points(solver.cell_midpoints, self.s, self.box, p.coeff_at_cells)
        if p.output == "grid":
            pts = grid_points(self.s, self.box)
            rows, cells = locate_points(mesh, pts)
            evaluate = evaluation_matrix(solver.V, pts[rows], cells)
            n_rows = self.s * self.s
        else:
            lay = self.layout()
            # each owned node is evaluated in one local cell that has it as a vertex
            gdm = mesh.geometry.dofmaps[0]
            n_own = lay["n_own_nodes"]
            flat = gdm.ravel()
            pos = np.empty(mesh.geometry.x.shape[0], dtype=np.int64)
            pos[flat] = np.arange(len(flat))  # a position (cell * 3 + corner) of every local node
            cells = (pos[:n_own] // 3).astype(np.int32)
            pts = mesh.geometry.x[:n_own, :2]
            rows = lay["node_row"][:n_own]
            evaluate = evaluation_matrix(solver.V, pts, cells)
            n_rows = len(lay["node_x"])
        st = _Setup(solver, cell_weights, np.asarray(rows), evaluate, n_rows)
        if p.output == "grid":
            found = gather_rows(self.comm, st.rows, np.ones(len(rows), dtype=np.int8), n_rows, allow_missing=True)
            self._inside = bcast_array(self.comm, None if found is None else found.astype(bool))
            if p.domain == "unit_square" and not self._inside.all():
                raise RuntimeError(f"{int((~self._inside).sum())} grid nodes were not located in the unit-square mesh")
        else:  # output coefficients on all nodes and cells, computed alike on every rank
            nodes = np.column_stack([lay["node_x"], lay["node_y"]])
            st.node_weights = grid_to_points(nodes, self.s, self.box, p.coeff_at_cells)
            st.cell_weights_global = grid_to_points(nodes[lay["cells"]].mean(axis=1), self.s, self.box, p.coeff_at_cells)
        self._setup_obj = st
        self.timings = {"mesh_s": t_mesh, "setup_s": time.perf_counter() - t0}
        return self._setup_obj

    @property
    def inside(self) -> np.ndarray:
        """Grid output: ``(s, s)`` bool, True where the grid node lies in the mesh."""
        self.setup()
        return self._inside.reshape(self.s, self.s)

    # -- the coefficient (shared with darcy_fd)
    def coefficients(self, seed: int, indices: np.ndarray) -> np.ndarray:
        """The ``(len(indices), s, s)`` grid coefficients ``a[b, i, j]`` at ``(x_i, y_j)``: exactly
        those of ``darcy_fd`` with the same coefficient parameters (its sampler is called) for the
        samples ``index_offset + indices``."""
        if self._fd is None:
            from solvers.darcy import DarcyFD

            self._fd = DarcyFD(self.params.fd_params())
        return self._fd.coefficients(seed, np.asarray(indices, dtype=np.int64) + self.params.index_offset)

    def gaussian_fields(self, seed: int, indices: np.ndarray) -> np.ndarray:
        """The ``(len(indices), s, s)`` Gaussian fields ``g`` on the grid before the map to ``a``: the
        draws of ``darcy_fd``'s sampler (:func:`solvers.grf.neumann_grf` from
        ``sample_rng(seed, index_offset + i)``), so ``map_field(g)`` is :meth:`coefficients`."""
        from opflow.data.provenance import sample_rng
        from solvers.grf import neumann_grf

        p = self.params
        idx = np.asarray(indices, dtype=np.int64) + p.index_offset
        rngs = [sample_rng(seed, int(i)) for i in idx]
        return neumann_grf(rngs, self.s, alpha=p.alpha, tau=p.tau, sigma=p.sigma, convention=p.grf_convention, draw=p.grf_draw)

    def map_field(self, g: np.ndarray) -> np.ndarray:
        """``a = T(g)``: ``high`` where ``g >= threshold`` else ``low``, or ``exp(g)``, rounded to float32
        (as ``darcy_fd`` does: the stored coefficient is the one solved)."""
        from solvers.darcy import coefficient_from_grf

        p = self.params
        a = coefficient_from_grf(np.asarray(g, dtype=np.float64), p.coefficient, threshold=p.threshold, high=p.high, low=p.low)
        with np.errstate(over="ignore"):  # overflow becomes inf and is reported before the solve
            return a.astype(np.float32).astype(np.float64)

    def sample_fields(self, seed: int, indices: np.ndarray) -> np.ndarray:
        """The grid field each sample's coefficient is made from: the grid coefficient ``a``
        (``coefficient_map="grid"``) or the Gaussian field ``g`` (``"points"``)."""
        if self.params.coefficient_map == "grid":
            return self.coefficients(seed, indices)
        return self.gaussian_fields(seed, indices)

    def _coefficient_from(self, weights: sp.csr_matrix, field: np.ndarray) -> np.ndarray:
        """The coefficient at the points of ``weights`` (a grid -> points interpolation) from a grid field."""
        values = weights @ np.asarray(field, dtype=np.float64).ravel()
        return values if self.params.coefficient_map == "grid" else self.map_field(values)

    def coefficient_at(self, points: np.ndarray, seed: int, indices: np.ndarray) -> np.ndarray:
        """The coefficient function ``a(x)`` of samples ``indices`` at any ``points`` ``(N, 2)`` of the
        box, ``(len(indices), N)``: at cell centroids and mesh nodes exactly what the solver used and
        the file stores. It depends on the points only, not on the mesh they come from."""
        weights = grid_to_points(np.asarray(points, dtype=np.float64), self.s, self.box, self.params.coeff_at_cells)
        fields = self.sample_fields(seed, np.asarray(indices, dtype=np.int64))
        return np.stack([self._coefficient_from(weights, f) for f in fields]) if len(fields) else np.zeros((0, len(points)))

    def solve_grid_coefficient(self, a: np.ndarray, *, index: int | None = None, seed: int | None = None) -> dict[str, np.ndarray]:
        """Solve for one grid coefficient ``a`` (``(s, s)``, ``a[i, j]`` at ``(x_i, y_j)``) and return
        this generator's fields for it (``coeff``, ``pressure``, ...; float64, no sample axis).
        For ``coefficient_map="grid"``; with ``"points"`` pass the Gaussian field to :meth:`solve_field`."""
        if self.params.coefficient_map != "grid":
            raise ValueError("coefficient_map is 'points': the solve starts from the Gaussian field; call solve_field(g)")
        return self.solve_field(a, index=index, seed=seed)

    def solve_field(self, field: np.ndarray, *, index: int | None = None, seed: int | None = None) -> dict[str, np.ndarray]:
        """Solve for one sample given by its grid field (:meth:`sample_fields`: the grid coefficient
        or the Gaussian field, ``(s, s)``) and return this generator's fields for it (float64)."""
        st = self.setup()
        p = self.params
        f = np.asarray(field, dtype=np.float64)
        if f.shape != (self.s, self.s):
            raise ValueError(f"grid field must have shape {(self.s, self.s)}, got {f.shape}")
        f_flat = f.ravel()
        kappa = self._coefficient_from(st.cell_weights, f_flat)
        grid_a = f if p.coefficient_map == "grid" else self.map_field(f)
        for a in (grid_a, kappa):
            if not (np.all(np.isfinite(a)) and a.min() > 0):
                raise SolverError(
                    f"coefficient is not positive and finite (min {np.nanmin(a):.3g}); check the coefficient parameters",
                    index=index,
                    seed=seed,
                )
        st.solver.set_cell_coefficient(kappa)
        uh = st.solver.solve(index=index, seed=seed)
        t0 = time.perf_counter()
        u = gather_rows(self.comm, st.rows, st.evaluate @ uh.x.array, st.n_rows, allow_missing=p.output == "grid")
        u = bcast_array(self.comm, u)
        out = {"residual": np.float64(st.solver.stats["residual"])}
        if p.output == "grid":
            mask = self._inside
            out["pressure"] = np.where(mask, u, 0.0).reshape(self.s, self.s)
            out["coeff"] = grid_a if p.domain == "unit_square" else np.where(mask, grid_a.ravel(), 0.0).reshape(self.s, self.s)
            if p.domain != "unit_square":
                out["inside"] = mask.reshape(self.s, self.s).astype(np.int8)
        else:
            out["pressure"] = u
            out["coeff"] = self._coefficient_from(st.node_weights, f_flat)
            out["coeff_cell"] = self._coefficient_from(st.cell_weights_global, f_flat)
        self._output_s = time.perf_counter() - t0
        return out

    # -- samples
    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        st = self.setup()
        p = self.params
        indices = np.asarray(indices, dtype=np.int64)
        t0 = time.perf_counter()
        grid_fields = self.sample_fields(seed, indices)
        t_coef = (time.perf_counter() - t0) / max(len(indices), 1)
        out: dict[str, list[np.ndarray]] = {name: [] for name in self.fields()}
        for i, f in zip(indices, grid_fields, strict=True):
            fields = self.solve_field(f, index=int(i), seed=int(seed))
            for k, v in fields.items():
                out[k].append(v)
            self.timings.update(
                coefficient_s=t_coef,
                assemble_s=st.solver.stats["assemble_s"],
                solve_s=st.solver.stats["solve_s"],
                output_s=self._output_s,
                iterations=st.solver.stats["iterations"],
                residual=st.solver.stats["residual"],
            )
        dt = np.dtype(p.dtype)
        return {k: np.stack(v).astype(self.fields()[k].dtype if k in ("inside", "residual") else dt) for k, v in out.items()}


_RESIDUAL = FieldSpec((), "1", "relative residual ||b - A u||_2 / ||b||_2 of the linear solve", "auxiliary", "float64")


__all__ = [
    "DOMAINS",
    "DarcyFEM",
    "DarcyFEMGenerator",
    "DarcyFEMParams",
    "error_norms",
    "evaluation_matrix",
    "gmsh_mesh",
    "grid_points",
    "grid_to_points",
    "locate_points",
    "unit_square_mesh",
]
