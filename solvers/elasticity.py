"""Hyperelastic unit cell with a random void (the Geo-FNO elasticity benchmark), by dolfinx.

Problem (``PROTOCOLS.md`` "Elasticity on a unit cell with a random void"; Li et al., "Fourier
Neural Operator with Learned Deformations for PDEs on General Geometries", section 4.1). The cell
``Omega`` of :mod:`meshes.elasticity_cell` (unit square minus a random void) is clamped on its
bottom edge (``u = 0``), pulled on its top edge by a normal traction of 100 and free elsewhere
(sides and void). Static equilibrium, no body force: find the displacement ``u`` minimising

    Pi(u) = int_Omega W(F) dX - lambda int_top (S_b N) . u ds,        F = I + grad u,

over ``u = 0`` on the bottom, with ``S_b = [[0, 0], [0, 100]]`` so that ``S_b N = (0, 100)`` on the
top edge (``N`` the outward reference normal). The load is **dead**: a fixed nominal (first
Piola-Kirchhoff) traction per unit *reference* length, whatever the deformation. ``lambda`` runs
through ``k / n_steps``, k = 1..n_steps (10 load steps by default).

Material: plane-stress incompressible Rivlin-Saunders (two-term Mooney-Rivlin), the 3-D energy
``W = C1 (I1 - 3) + C2 (I2 - 3)`` with ``C1 = 1.863e5``, ``C2 = 9.79e3``. Plane stress and
incompressibility make ``F = diag(F2, lambda3)`` with ``lambda3^2 = 1 / det(C2)``, ``C2 = F2^T F2``
the in-plane right Cauchy-Green tensor, so the invariants are

    I1 = tr C2 + 1 / det C2,        I2 = det C2 + tr C2 / det C2,

and the reduced energy ``W(C2)`` of these is what is minimised. Its derivative is the in-plane
second Piola-Kirchhoff stress with the plane-stress condition built in: ``S = 2 dW/dC2`` equals
``2 dW/dC - p C^-1`` with the pressure ``p`` fixed by ``S33 = 0``. The Cauchy stress is
``sigma = F2 S F2^T`` (``J = det F = 1``) and the von Mises stress (plane stress, sigma33 = 0)

    sigma_vm = sqrt(s11^2 - s11 s22 + s22^2 + 3 s12^2).

Small-strain limit: expanding ``W`` to second order in the strain gives plane-stress linear
elasticity with shear modulus ``mu = 2 (C1 + C2)``, Young's modulus ``E = 3 mu = 6 (C1 + C2)``
(1.174e6) and Poisson ratio ``nu = 1/2`` (incompressible: ``eps33 = -(eps11 + eps22)``); plane
stress has no locking at ``nu = 1/2``: ``sigma = 2 mu (eps + tr(eps) I)``.
:meth:`RivlinSaunders.small_strain_limit` returns it; the tests check that the hyperelastic
solution approaches it linearly in the load. Under the benchmark's load (100 against a shear
modulus of 3.9e5) strains are of order 1e-4 to 1e-3 and the displacement differs from the
linearised one by about 0.1 %; Newton converges in two iterations per step (three at load step 2 with
some PETSc builds: tests/solvers/test_elasticity.py). Consequence worth
knowing: with traction and clamped boundaries the linear stress field depends on ``nu`` only, not
on ``E``, so the benchmark's stresses depend on ``C1, C2`` only through that 0.1 % nonlinearity.
``material="linear"`` solves plane-stress small-strain elasticity with ``E, nu`` instead:
``W = sigma(eps) : eps / 2``, ``sigma = E / (1 - nu^2) ((1 - nu) eps + nu tr(eps) I)``.

Note on the original generator: NNFEM.jl (the Julia package of the Geo-FNO authors; we read
``src/materials/PlaneStressIncompressibleRivlinSaunders.jl`` at commit 68ce01c) computes the stress
as ``S = 2 C1 I + 2 C2 (C + I1 I) - p C^-1``, whereas the derivative of ``C2 (I2 - 3)`` is
``2 C2 (I1 I - C)``. Its stress derives from ``W = C1 (I1 - 3) + C2 (I1^2 - I2 - 6)`` (shear
modulus ``2 (C1 + 5 C2)``, 20 % stiffer); ``material="rivlin_saunders_nnfem"`` uses that energy, to
reproduce the implementation rather than the stated law. By the remark above both give the same
stresses to about 0.1 %. We default to the energy as written.

Discretisation: isoparametric Lagrange elements of the mesh's order (default: 9-node quadrilaterals
Q2 for geometry and displacement), quadrature degree 5 on quadrilaterals (3 x 3 Gauss points, the
published set's points) and 4 on triangles (6 points). Newton: PETSc SNES (``newtonls`` with a
full step, ``basic`` line search), LU (MUMPS) for each linear system; a load step converges when
the residual norm ``||R||_2 <= max(newton_atol, newton_rtol ||R_0||_2)``, ``R_0`` the residual at
the start of the step (the load increment), and the step-size test is off. A step that does not
converge in ``newton_max_it`` iterations (or produces non-finite values) restarts the whole solve
from ``u = 0`` with twice the load steps, ``retries`` times, then raises
:class:`~solvers.base.SolverError` with the sample index and seed.

Compilation: all forms are compiled once per (cell type, degree, material kind, quadrature degree)
on an abstract UFL mesh with :func:`dolfinx.fem.compile_form` and bound to each sample's mesh with
:func:`dolfinx.fem.create_form` (JIT happens once per process, not per mesh).

Output (:class:`Solution`, in the mesh's input order: gmsh node and cell order):

* displacement at the mesh nodes (the Lagrange degrees of freedom sit on the geometry nodes),
* von Mises stress at the nodes, ``nodal_stress="average"`` (default): the Cauchy stress tensor of
  each cell evaluated at the node, averaged over the cells sharing the node, then its von Mises
  value (non-negative by construction); ``"projection"``: the L2 projection of the von Mises
  stress onto the continuous Lagrange space (``argmin ||p - sigma_vm||_L2``, which can undershoot
  below 0 near corners),
* von Mises stress at the quadrature points, their physical coordinates and weights ``w |det J|``
  (cell by cell in input cell order, points in basix order: for quadrilaterals the 3 x 3 Gauss
  points with the second reference coordinate running fastest); these are point evaluations of the
  discrete stress, computed as ``int sigma_vm q dx / int q dx`` for the basis functions ``q`` of a
  quadrature space (one per point) so that they too come from precompiled forms; nodal values use
  the same device with a quadrature rule whose points are the element's nodes.

The generator adds the shape code ``r(theta_j)`` at 42 angles over ``[0, 2 pi]`` (endpoint
repeated), as the published set.

MPI: the mesh is built on rank 0 and distributed by dolfinx; results are gathered to rank 0 and
broadcast, so every rank returns the same arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from opflow.data.format import Variable
from opflow.data.provenance import sample_rng
from solvers.base import FieldSpec, Generator, SolverError, register
from solvers.mpi import comm_world, dolfinx_modules, gather_rows

#: default quadrature degree per cell type: 3 x 3 Gauss points on quadrilaterals, 6 on triangles
DEFAULT_QUADRATURE = {"quadrilateral": 5, "triangle": 4}
_TRACTION_ID = 1
_PREFIX = itertools.count()


# ------------------------------------------------------------------------------------ materials


@dataclass(frozen=True)
class LinearElastic:
    """Plane-stress small-strain isotropic elasticity (``nu = 1/2`` is allowed in plane stress)."""

    young: float
    poisson: float

    def __post_init__(self) -> None:
        if not self.young > 0:
            raise ValueError(f"Young's modulus must be > 0, got {self.young}")
        if not -1.0 < self.poisson <= 0.5:
            raise ValueError(f"Poisson ratio must lie in (-1, 0.5], got {self.poisson}")

    @property
    def kind(self) -> str:
        return "linear"

    def values(self) -> np.ndarray:
        return np.array([self.young, self.poisson])


@dataclass(frozen=True)
class RivlinSaunders:
    """Plane-stress incompressible Rivlin-Saunders (Mooney-Rivlin): ``W = C1 (I1-3) + C2 (I2-3)``.

    ``variant="nnfem"`` replaces the energy by ``W = C1 (I1 - 3) + C2 (I1^2 - I2 - 6)``, whose stress
    ``2 C1 I + 2 C2 (C + I1 I) - p C^-1`` is the one NNFEM implements (module doc); its shear
    modulus is ``2 (C1 + 5 C2)`` instead of ``2 (C1 + C2)``.
    """

    c1: float = 1.863e5
    c2: float = 9.79e3
    variant: Literal["energy", "nnfem"] = "energy"

    def __post_init__(self) -> None:
        if not (self.c1 > 0 and self.c2 >= 0):
            raise ValueError(f"need C1 > 0 and C2 >= 0, got C1={self.c1}, C2={self.c2}")
        if self.variant not in ("energy", "nnfem"):
            raise ValueError(f"variant must be 'energy' or 'nnfem', got {self.variant!r}")

    @property
    def kind(self) -> str:
        return "rivlin_saunders" if self.variant == "energy" else "rivlin_saunders_nnfem"

    @property
    def shear_modulus(self) -> float:
        """Small-strain shear modulus ``2 (dW/dI1 + dW/dI2)`` at ``C = I``."""
        return 2.0 * (self.c1 + self.c2) if self.variant == "energy" else 2.0 * (self.c1 + 5.0 * self.c2)

    def small_strain_limit(self) -> LinearElastic:
        """The linearised material: ``E = 3 mu``, ``nu = 1/2`` (module doc)."""
        return LinearElastic(young=3.0 * self.shear_modulus, poisson=0.5)

    def values(self) -> np.ndarray:
        return np.array([self.c1, self.c2])


Material = LinearElastic | RivlinSaunders


@dataclass(frozen=True)
class NewtonOptions:
    """Load stepping and Newton settings (module doc)."""

    load_steps: int = 10
    rtol: float = 1e-6
    atol: float = 1e-10
    max_it: int = 25
    retries: int = 1

    def __post_init__(self) -> None:
        if self.load_steps < 1 or self.max_it < 1 or self.retries < 0:
            raise ValueError(f"need load_steps >= 1, max_it >= 1, retries >= 0, got {self}")
        if not (0 < self.rtol < 1 and self.atol >= 0):
            raise ValueError(f"need 0 < rtol < 1 and atol >= 0, got rtol={self.rtol}, atol={self.atol}")


# ---------------------------------------------------------------------------- compiled forms


def von_mises(sigma: Any) -> Any:
    """Plane-stress von Mises stress of a 2 x 2 UFL tensor (``sigma33 = 0``)."""
    import ufl

    s11, s22, s12 = sigma[0, 0], sigma[1, 1], 0.5 * (sigma[0, 1] + sigma[1, 0])
    return ufl.sqrt(s11**2 - s11 * s22 + s22**2 + 3.0 * s12**2)


def _constitutive(kind: str, u: Any, mat: Any) -> tuple[Any, Any]:
    """Energy density ``W`` (reference configuration) and Cauchy stress of displacement ``u``."""
    import ufl

    eye = ufl.Identity(2)
    if kind == "linear":
        young, nu = mat[0], mat[1]
        eps = ufl.sym(ufl.grad(u))
        sigma = young / (1.0 - nu**2) * ((1.0 - nu) * eps + nu * ufl.tr(eps) * eye)
        return 0.5 * ufl.inner(sigma, eps), sigma
    c1, c2 = mat[0], mat[1]
    f = eye + ufl.grad(u)
    c = ufl.variable(f.T * f)
    det_c = ufl.det(c)
    i1 = ufl.tr(c) + 1.0 / det_c
    i2 = det_c + ufl.tr(c) / det_c
    if kind == "rivlin_saunders":
        w = c1 * (i1 - 3.0) + c2 * (i2 - 3.0)
    elif kind == "rivlin_saunders_nnfem":
        w = c1 * (i1 - 3.0) + c2 * (i1**2 - i2 - 6.0)
    else:
        raise ValueError(f"unknown material kind {kind!r}")
    s = 2.0 * ufl.diff(w, c)
    return w, f * s * f.T


@dataclass
class _Compiled:
    cell: str
    degree: int
    kind: str
    quadrature_degree: int
    elements: dict[str, Any]
    symbols: dict[str, Any]
    forms: dict[str, Any]  # name -> CompiledForm


_COMPILED: dict[tuple, _Compiled] = {}


def compiled_forms(cell: str, degree: int, kind: str, quadrature_degree: int, comm: Any) -> _Compiled:
    """The compiled forms for one discretisation (cached per process; module doc)."""
    key = (cell, degree, kind, quadrature_degree, comm.py2f())
    if key in _COMPILED:
        return _COMPILED[key]
    dx_ = dolfinx_modules()
    ufl, basix, fem = dx_.ufl, dx_.basix, dx_.fem
    import basix.ufl as bu

    el = {
        "coord": bu.element("Lagrange", cell, degree, lagrange_variant=basix.LagrangeVariant.equispaced, shape=(2,)),
        "V": bu.element("Lagrange", cell, degree, shape=(2,)),
        "T": bu.element("Lagrange", cell, degree, shape=(2, 2)),
        "S": bu.element("Lagrange", cell, degree),
        "Q": bu.quadrature_element(cell, value_shape=(), degree=quadrature_degree),
    }
    # a "quadrature" element whose points are the cell's Lagrange nodes: evaluates at the nodes
    nodal_points = basix.create_element(
        basix.ElementFamily.P, basix.CellType[cell], degree, basix.LagrangeVariant.equispaced
    ).points
    nodal_weights = np.ones(nodal_points.shape[0])
    el["N"] = bu.quadrature_element(cell, value_shape=(), points=nodal_points, weights=nodal_weights)
    domain = ufl.Mesh(el["coord"])
    sp = {k: ufl.FunctionSpace(domain, e) for k, e in el.items() if k != "coord"}
    u = ufl.Coefficient(sp["V"])
    sb = ufl.Coefficient(sp["T"])
    load = ufl.Constant(domain)
    mat = ufl.Constant(domain, shape=(2,))
    md = {"quadrature_degree": quadrature_degree}
    dx = ufl.Measure("dx", domain=domain, metadata=md)
    ds = ufl.Measure("ds", domain=domain, metadata=md)
    w, sigma = _constitutive(kind, u, mat)
    vm = von_mises(sigma)
    energy = w * dx - load * ufl.dot(ufl.dot(sb, ufl.FacetNormal(domain)), u) * ds(_TRACTION_ID)
    residual = ufl.derivative(energy, u, ufl.TestFunction(sp["V"]))
    jacobian = ufl.derivative(residual, u, ufl.TrialFunction(sp["V"]))
    p, q = ufl.TrialFunction(sp["S"]), ufl.TestFunction(sp["S"])
    wq = ufl.TestFunction(sp["Q"])
    wn = ufl.TestFunction(sp["N"])
    x = ufl.SpatialCoordinate(domain)
    # int f wn / det J dx with the nodal rule (weights 1) is f at the nodes, cell by cell
    dn = ufl.Measure(
        "dx",
        domain=domain,
        metadata={"quadrature_rule": "custom", "quadrature_points": nodal_points, "quadrature_weights": nodal_weights},
    )
    inv_det = 1.0 / abs(ufl.JacobianDeterminant(domain))
    sym = 0.5 * (sigma[0, 1] + sigma[1, 0])
    ufl_forms = {
        "residual": residual,
        "jacobian": jacobian,
        "mass": p * q * dx,
        "project": vm * q * dx,
        "qp_vm": vm * wq * dx,
        "qp_w": wq * dx,
        "qp_x": x[0] * wq * dx,
        "qp_y": x[1] * wq * dx,
        "nd_xx": sigma[0, 0] * inv_det * wn * dn,
        "nd_yy": sigma[1, 1] * inv_det * wn * dn,
        "nd_xy": sym * inv_det * wn * dn,
    }
    opts = {"scalar_type": np.float64}
    forms = {k: fem.compile_form(comm, f, form_compiler_options=dict(opts)) for k, f in ufl_forms.items()}
    out = _Compiled(cell, degree, kind, quadrature_degree, el, {"u": u, "sb": sb, "load": load, "mat": mat}, forms)
    _COMPILED[key] = out
    return out


# ------------------------------------------------------------------------------------- meshes


def dolfinx_mesh(cell_mesh: Any, comm: Any, cell: str | None = None, degree: int | None = None) -> Any:
    """A distributed dolfinx mesh of a :class:`meshes.elasticity_cell.CellMesh` given on rank 0
    (``None`` on the other ranks; then give ``cell`` and ``degree``)."""
    dx_ = dolfinx_modules()
    import basix.ufl as bu

    meta = (cell_mesh.cell_type, cell_mesh.order) if comm.rank == 0 else None
    meta = comm.bcast(meta, root=0) if comm.size > 1 else meta
    cell, degree = meta
    k = {("triangle", 1): 3, ("triangle", 2): 6, ("quadrilateral", 1): 4, ("quadrilateral", 2): 9}[(cell, degree)]
    perm = dx_.gmshio.cell_perm_array(dx_.mesh.CellType[cell], k)
    if comm.rank == 0:
        cells = np.ascontiguousarray(cell_mesh.cells[:, perm], dtype=np.int64)
        x = np.ascontiguousarray(cell_mesh.nodes, dtype=np.float64)
    else:
        cells, x = np.empty((0, k), dtype=np.int64), np.empty((0, 2), dtype=np.float64)
    coord = bu.element("Lagrange", cell, degree, lagrange_variant=dx_.basix.LagrangeVariant.equispaced, shape=(2,))
    return dx_.mesh.create_mesh(comm, cells, dx_.ufl.Mesh(coord), x)


Marker = Callable[[np.ndarray], np.ndarray]


def on_line(axis: int, value: float, tol: float = 1e-10) -> Marker:
    """Marker of the points with ``x[axis] == value`` (to ``tol``)."""
    return lambda x: np.abs(x[axis] - value) < tol


# ------------------------------------------------------------------------------------- solver


@dataclass
class Solution:
    """A solved problem on rank 0's arrays (see the module doc for orders)."""

    displacement: np.ndarray  # (N, 2) at the mesh nodes
    stress_nodes: np.ndarray  # (N,) nodal von Mises (averaged or projected)
    qpoints: np.ndarray  # (C, nq, 2)
    stress_qpoints: np.ndarray  # (C, nq)
    qweights: np.ndarray  # (C, nq)  w |det J|
    newton_iterations: list[int]
    load_steps: int


class ElasticitySolver:
    """Static plane elasticity (Rivlin-Saunders or linear) on meshes of one cell type and order.

    Forms are compiled at construction (once per process and discretisation); :meth:`solve` binds
    them to a mesh, applies Dirichlet conditions and a dead traction ``S_b N`` and steps the load.
    """

    def __init__(
        self,
        material: Material,
        *,
        cell: Literal["quadrilateral", "triangle"] = "quadrilateral",
        degree: int = 2,
        quadrature_degree: int | None = None,
        newton: NewtonOptions | None = None,
        nodal_stress: Literal["average", "projection"] = "average",
        comm: Any = None,
    ) -> None:
        self.material = material
        self.cell, self.degree = cell, degree
        self.quadrature_degree = quadrature_degree or DEFAULT_QUADRATURE[cell]
        self.newton = newton or NewtonOptions()
        if nodal_stress not in ("average", "projection"):
            raise ValueError(f"nodal_stress must be 'average' or 'projection', got {nodal_stress!r}")
        self.nodal_stress = nodal_stress
        self.comm = comm if comm is not None else comm_world()
        self.compiled = compiled_forms(cell, degree, material.kind, self.quadrature_degree, self.comm)
        dx_ = dolfinx_modules()
        self._lu = "mumps" if dx_.PETSc.Sys.hasExternalPackage("mumps") else "petsc"

    # -- binding -------------------------------------------------------------------------------
    def _bind(self, mesh: Any, traction_facets: np.ndarray) -> dict[str, Any]:
        dx_ = dolfinx_modules()
        fem = dx_.fem
        cp = self.compiled
        spaces = {k: fem.functionspace(mesh, cp.elements[k]) for k in ("V", "T", "S", "Q", "N")}
        u = fem.Function(spaces["V"], name="u")
        sb = fem.Function(spaces["T"], name="boundary_stress")
        load = fem.Constant(mesh, np.float64(0.0))
        mat = fem.Constant(mesh, self.material.values().astype(np.float64))
        tdim = mesh.topology.dim
        mesh.topology.create_connectivity(tdim - 1, tdim)
        ext = fem.IntegralType.exterior_facet
        facet_domain = fem.compute_integration_domains(ext, mesh.topology, traction_facets.astype(np.int32))
        coeffs = {cp.symbols["u"]: u, cp.symbols["sb"]: sb}
        consts = {cp.symbols["load"]: load, cp.symbols["mat"]: mat}

        def make(name: str, test: str, trial: str | None = None, facets: bool = False) -> Any:
            V = [spaces[test]] + ([spaces[trial]] if trial else [])
            sub = {ext: [(_TRACTION_ID, facet_domain)]} if facets else {}
            return fem.create_form(cp.forms[name], V, mesh, sub, coeffs, consts)

        forms = {
            "residual": make("residual", "V", facets=True),
            "jacobian": make("jacobian", "V", "V", facets=True),
            "mass": make("mass", "S", "S"),
            "project": make("project", "S"),
            **{k: make(k, "Q") for k in ("qp_vm", "qp_w", "qp_x", "qp_y")},
            **{k: make(k, "N") for k in ("nd_xx", "nd_yy", "nd_xy")},
        }
        return {"spaces": spaces, "u": u, "sb": sb, "load": load, "forms": forms}

    def _lu_options(self) -> dict[str, Any]:
        return {"ksp_type": "preonly", "pc_type": "lu", "pc_factor_mat_solver_type": self._lu}

    # -- solving -------------------------------------------------------------------------------
    def solve(
        self,
        cell_mesh: Any,
        *,
        clamps: Sequence[tuple[Marker, int | None]],
        traction: Marker,
        boundary_stress: np.ndarray | Callable[[np.ndarray], np.ndarray],
        index: int | None = None,
        seed: int | None = None,
    ) -> Solution:
        """Solve on ``cell_mesh`` (a :class:`~meshes.elasticity_cell.CellMesh` on rank 0).

        ``clamps``: ``(marker, component)`` pairs; boundary facets whose points all satisfy the
        marker get ``u_component = 0`` (``component=None``: both). ``traction``: marker of the
        loaded facets, loaded by ``S_b N`` with ``boundary_stress`` ``S_b`` a constant 2 x 2 array or
        a function of the points ``x (3, n)`` returning ``(2, 2, n)``. Returns the gathered
        :class:`Solution` on every rank.
        """
        dx_ = dolfinx_modules()
        fem, dmesh = dx_.fem, dx_.mesh
        mesh = dolfinx_mesh(cell_mesh, self.comm)
        fdim = mesh.topology.dim - 1
        top = dmesh.locate_entities_boundary(mesh, fdim, traction)
        b = self._bind(mesh, top)
        V = b["spaces"]["V"]
        if callable(boundary_stress):
            b["sb"].interpolate(lambda x: np.asarray(boundary_stress(x), dtype=np.float64).reshape(4, -1))
        else:
            s = np.asarray(boundary_stress, dtype=np.float64).reshape(4)
            b["sb"].interpolate(lambda x: np.tile(s[:, None], (1, x.shape[1])))
        bcs = []
        for marker, comp in clamps:
            facets = dmesh.locate_entities_boundary(mesh, fdim, marker)
            if comp is None:
                dofs = fem.locate_dofs_topological(V, fdim, facets)
                bcs.append(fem.dirichletbc(np.zeros(2, dtype=np.float64), dofs, V))
            else:
                dofs = fem.locate_dofs_topological(V.sub(comp), fdim, facets)
                bcs.append(fem.dirichletbc(np.float64(0.0), dofs, V.sub(comp)))

        steps = self.newton.load_steps if self.material.kind != "linear" else 1
        for attempt in range(self.newton.retries + 1):
            ok, its, why = self._newton(b, bcs, steps)
            if ok:
                break
            if attempt < self.newton.retries:
                steps *= 2
        else:
            raise SolverError(
                f"Newton did not converge ({why}) with {steps} load steps after {self.newton.retries} "
                "restart(s) with doubled load steps; raise newton_max_it, load_steps or retries",
                index=index,
                seed=seed,
            )
        return self._gather(mesh, cell_mesh, b, its, steps)

    def _newton(self, b: dict[str, Any], bcs: list[Any], steps: int) -> tuple[bool, list[int], str]:
        dx_ = dolfinx_modules()
        u = b["u"]
        u.x.array[:] = 0.0
        opts = {
            "snes_type": "newtonls",
            "snes_linesearch_type": "basic",
            "snes_rtol": self.newton.rtol,
            "snes_atol": self.newton.atol,
            "snes_stol": 0.0,
            "snes_max_it": self.newton.max_it,
            **self._lu_options(),
        }
        problem = dx_.fem_petsc.NonlinearProblem(
            b["forms"]["residual"],
            u,
            J=b["forms"]["jacobian"],
            bcs=bcs,
            petsc_options_prefix=f"opflow_elasticity_{next(_PREFIX)}_",
            petsc_options=opts,
        )
        its: list[int] = []
        try:
            for k in range(1, steps + 1):
                b["load"].value = k / steps
                problem.solve()
                snes = problem.solver
                reason, n = snes.getConvergedReason(), snes.getIterationNumber()
                its.append(int(n))
                finite = bool(np.all(np.isfinite(u.x.array)))
                finite = self.comm.allreduce(finite, op=dx_.MPI.LAND)
                if reason <= 0 or not finite:
                    return False, its, f"load step {k}/{steps}: SNES reason {reason} after {n} iterations" + (
                        "" if finite else ", non-finite displacement"
                    )
        finally:
            del problem
        return True, its, ""

    def _project(self, forms: dict[str, Any], spaces: dict[str, Any]) -> Any:
        """L2 projection of the von Mises stress onto the nodal Lagrange space (LU solve)."""
        dx_ = dolfinx_modules()
        fem, PETSc = dx_.fem, dx_.PETSc
        A = dx_.fem_petsc.assemble_matrix(forms["mass"])
        A.assemble()
        rhs = dx_.fem_petsc.assemble_vector(forms["project"])
        rhs.ghostUpdate(addv=PETSc.InsertMode.ADD, mode=PETSc.ScatterMode.REVERSE)
        ksp = PETSc.KSP().create(self.comm)
        ksp.setOperators(A)
        ksp.setType("preonly")
        ksp.getPC().setType("lu")
        ksp.getPC().setFactorSolverType(self._lu)
        p = fem.Function(spaces["S"])
        ksp.solve(rhs, p.x.petsc_vec)
        p.x.scatter_forward()
        for obj in (ksp, A, rhs):
            obj.destroy()
        return p

    def _gather(self, mesh: Any, cell_mesh: Any, b: dict[str, Any], its: list[int], steps: int) -> Solution:
        dx_ = dolfinx_modules()
        fem = dx_.fem
        comm = self.comm
        forms, spaces = b["forms"], b["spaces"]
        n_nodes, n_cells = (cell_mesh.n_nodes, cell_mesh.n_cells) if comm.rank == 0 else (None, None)
        if comm.size > 1:
            n_nodes, n_cells = comm.bcast((n_nodes, n_cells), root=0)
        n_own = mesh.topology.index_map(mesh.topology.dim).size_local
        geo = mesh.geometry.dofmaps[0]
        rows = np.asarray(mesh.geometry.input_global_indices, dtype=np.int64)  # geometry node -> input node
        cells = np.asarray(mesh.topology.original_cell_index[:n_own], dtype=np.int64)

        # displacement at the geometry nodes (the Lagrange dofs of the same element sit there)
        u_loc = np.zeros((rows.size, 2))
        u_loc[geo.ravel()] = b["u"].x.array.reshape(-1, 2)[spaces["V"].dofmap.list.ravel()]
        disp = gather_rows(comm, rows, u_loc, n_nodes)

        if self.nodal_stress == "projection":
            p = self._project(forms, spaces)
            p_loc = np.zeros(rows.size)
            p_loc[geo.ravel()] = p.x.array[spaces["S"].dofmap.list.ravel()]
            s_nodes = gather_rows(comm, rows, p_loc, n_nodes)
        else:
            # stress tensor at each node of each owned cell, averaged over the cells sharing the node
            nd = spaces["N"].dofmap.list[:n_own]
            comps = np.stack([fem.assemble_vector(forms[k]).array[nd] for k in ("nd_xx", "nd_yy", "nd_xy")], -1)
            parts = comm.gather((cells, comps), root=0)
            s_nodes = None
            if comm.rank == 0:
                total = np.zeros((n_nodes, 3))
                count = np.zeros(n_nodes)
                for c, v in parts:
                    conn = cell_mesh.cells[c]  # gmsh node numbers of these cells, in gmsh local order
                    gm = _gmsh_to_basix(cell_mesh.cell_type, cell_mesh.order)
                    np.add.at(total, conn[:, gm].ravel(), v.reshape(-1, 3))
                    np.add.at(count, conn[:, gm].ravel(), 1.0)
                sxx, syy, sxy = (total / count[:, None]).T
                s_nodes = np.sqrt(np.maximum(sxx**2 - sxx * syy + syy**2 + 3.0 * sxy**2, 0.0))

        # quadrature-point values: int f q dx / int q dx for the quadrature-space basis q
        vec = {k: fem.assemble_vector(forms[k]).array for k in ("qp_vm", "qp_w", "qp_x", "qp_y")}
        qd = spaces["Q"].dofmap.list[:n_own]
        w = vec["qp_w"][qd]
        local = np.stack([vec["qp_vm"][qd] / w, vec["qp_x"][qd] / w, vec["qp_y"][qd] / w, w], axis=-1)
        qall = gather_rows(comm, cells, local, n_cells)
        arrays = (disp, s_nodes, qall)
        if comm.size > 1:
            arrays = comm.bcast(arrays if comm.rank == 0 else None, root=0)
        disp, s_nodes, qall = arrays
        return Solution(
            displacement=disp,
            stress_nodes=s_nodes,
            qpoints=qall[..., 1:3].copy(),
            stress_qpoints=qall[..., 0].copy(),
            qweights=qall[..., 3].copy(),
            newton_iterations=its,
            load_steps=steps,
        )


def _gmsh_to_basix(cell: str, order: int) -> np.ndarray:
    """``g`` with ``basix_local[j] = gmsh_local[g[j]]`` (the inverse view of dolfinx's permutation)."""
    dx_ = dolfinx_modules()
    k = {("triangle", 1): 3, ("triangle", 2): 6, ("quadrilateral", 1): 4, ("quadrilateral", 2): 9}[(cell, order)]
    return np.asarray(dx_.gmshio.cell_perm_array(dx_.mesh.CellType[cell], k), dtype=np.int64)


# ----------------------------------------------------------------------------- the unit cell


def solve_cell(
    solver: ElasticitySolver,
    cell_mesh: Any,
    traction: float = 100.0,
    *,
    index: int | None = None,
    seed: int | None = None,
) -> Solution:
    """The benchmark problem on a cell mesh: bottom clamped, dead normal traction on the top."""
    return solver.solve(
        cell_mesh,
        clamps=[(on_line(1, 0.0), None)],
        traction=on_line(1, 1.0),
        boundary_stress=np.array([[0.0, 0.0], [0.0, traction]]),
        index=index,
        seed=seed,
    )


@dataclass(frozen=True)
class ElasticityParams:
    """Parameters of the ``elasticity`` generator (module docs of this module and of
    :mod:`meshes.elasticity_cell`).

    Geometry: ``radius_*`` set the void prior (defaults: the protocol), ``code_points`` the length
    of the shape code. Mesh: ``topology`` (``ogrid``: fixed ``ogrid_n_theta x ogrid_n_radial``
    quadrilaterals, default 36 x 3 = 108; ``unstructured``: gmsh at ``mesh_size``), ``cell_type``,
    ``order`` (2: 9-node quadrilaterals / 6-node triangles), ``spline_points``. Physics:
    ``material`` (``rivlin_saunders`` with ``c1, c2``; ``rivlin_saunders_nnfem``, NNFEM's variant;
    ``linear`` with ``young, poisson``), ``traction``, Newton and load-step settings. Output:
    ``target`` chooses which point set carries the learning roles (``nodes``: mesh nodes with the
    nodal stress, computed as ``nodal_stress`` says; ``gauss``: quadrature points, as the published
    972-point set); ``max_cells`` bounds the padded size of unstructured meshes (0: automatic from
    ``mesh_size``).
    """

    topology: Literal["ogrid", "unstructured"] = "ogrid"
    cell_type: Literal["quadrilateral", "triangle"] = "quadrilateral"
    order: int = 2
    mesh_size: float = 0.09
    ogrid_n_theta: int = 36
    ogrid_n_radial: int = 3
    ogrid_progression: float = 1.0
    spline_points: int = 128
    radius_modes: int = 5
    radius_scale: float = 4.0
    radius_tau: float = 3.0
    radius_min: float = 0.2
    radius_span: float = 0.2
    code_points: int = 42
    material: Literal["rivlin_saunders", "rivlin_saunders_nnfem", "linear"] = "rivlin_saunders"
    c1: float = 1.863e5
    c2: float = 9.79e3
    young: float = 1.17432e6
    poisson: float = 0.5
    traction: float = 100.0
    load_steps: int = 10
    newton_rtol: float = 1e-6
    newton_atol: float = 1e-10
    newton_max_it: int = 25
    retries: int = 1
    quadrature_degree: int = 0
    target: Literal["nodes", "gauss"] = "nodes"
    nodal_stress: Literal["average", "projection"] = "average"
    max_cells: int = 0

    def __post_init__(self) -> None:
        # constructing the parts checks their ranges and names the offending value
        self.prior()
        self.mesh_spec()
        LinearElastic(self.young, self.poisson)
        RivlinSaunders(self.c1, self.c2)
        self.newton_options()
        if self.code_points < 2:
            raise ValueError(f"code_points must be >= 2, got {self.code_points}")
        if not (math.isfinite(self.traction) and self.traction != 0):
            raise ValueError(f"traction must be a finite non-zero number, got {self.traction}")
        if self.quadrature_degree < 0 or self.quadrature_degree > 12:
            raise ValueError(f"quadrature_degree must be 0 (automatic) or 1..12, got {self.quadrature_degree}")
        if self.max_cells < 0:
            raise ValueError(f"max_cells must be >= 0 (0: automatic), got {self.max_cells}")

    def prior(self) -> Any:
        from meshes.elasticity_cell import VoidPrior

        return VoidPrior(self.radius_modes, self.radius_scale, self.radius_tau, self.radius_min, self.radius_span)

    def mesh_spec(self) -> Any:
        from meshes.elasticity_cell import CellMeshSpec

        return CellMeshSpec(
            topology=self.topology,
            cell_type=self.cell_type,
            order=self.order,
            mesh_size=self.mesh_size,
            n_theta=self.ogrid_n_theta,
            n_radial=self.ogrid_n_radial,
            radial_progression=self.ogrid_progression,
            spline_points=self.spline_points,
        )

    def material_model(self) -> Material:
        if self.material == "linear":
            return LinearElastic(self.young, self.poisson)
        return RivlinSaunders(self.c1, self.c2, "nnfem" if self.material == "rivlin_saunders_nnfem" else "energy")

    def newton_options(self) -> NewtonOptions:
        return NewtonOptions(self.load_steps, self.newton_rtol, self.newton_atol, self.newton_max_it, self.retries)

    def quadrature(self) -> int:
        return self.quadrature_degree or DEFAULT_QUADRATURE[self.cell_type]


#: points of basix's default triangle quadrature (Xiao-Gimbutas) of degree 0..30
_XG_TRIANGLE_POINTS = (1, 1, 3, 6, 6, 7, 12, 15, 16, 19, 25, 28, 33, 37, 42, 49, 55, 60, 67, 73, 79, 87, 96, 103, 112, 120, 130, 141, 150, 159, 171)


def quadrature_points_per_cell(cell: str, degree: int) -> int:
    """Number of points of basix's default quadrature of ``degree`` on ``cell``, without importing basix.

    The workflow asks for it when it loads (the file's ``qpoint`` dimension), also on machines without
    the FEM stack (the GPU machines). basix's default rule is Gauss-Jacobi with ``m = degree // 2 + 1``
    points per direction on the quadrilateral (``m^2``), Xiao-Gimbutas on the triangle up to degree 30
    (tabulated) and collapsed Gauss-Jacobi above (``m^2``); tests compare it with basix for degrees 0..40.
    """
    if degree < 0:
        raise ValueError(f"quadrature degree must be >= 0, got {degree}")
    if cell == "triangle" and degree < len(_XG_TRIANGLE_POINTS):
        return _XG_TRIANGLE_POINTS[degree]
    if cell in ("triangle", "quadrilateral"):
        return (degree // 2 + 1) ** 2
    raise ValueError(f"cell_type must be triangle or quadrilateral, got {cell!r}")


@register
class Elasticity(Generator):
    """The Geo-FNO elasticity unit cell: random void -> von Mises stress (module doc).

    File layout (dims ``node``, ``cell``, ``corner``, ``qpoint``, ``code``, ``mode``; meshes differ
    per sample, so arrays are padded to the maxima in :meth:`dims`):

    * ``node_x, node_y (sample, node)`` float64, ``node_count (sample)``; values beyond the count 0.
    * ``cell (sample, cell, corner)`` int32, 0-based gmsh node order (corners counter-clockwise,
      then edge mid-nodes, then the centre), padded with -1; ``cell_count (sample)``.
    * ``stress (sample, node)``: nodal von Mises stress (``nodal_stress``); ``displacement_x/_y``.
    * ``qpoint_x, qpoint_y, stress_qpoint, qpoint_weight (sample, qpoint)``, ``qpoint_count``:
      quadrature points cell by cell (input cell order), the von Mises stress there and ``w |det J|``.
    * ``radius_code (sample, code)``: ``r(theta_j)`` at ``code_points`` angles over [0, 2 pi]
      (endpoint repeated): the input. ``void_coefficients (sample, mode)``: the KL coefficients.

    Roles: ``target="nodes"``: ``node_x/node_y`` coordinate, ``stress`` output; ``target="gauss"``:
    ``qpoint_x/qpoint_y`` coordinate, ``stress_qpoint`` output (the published protocol). The other
    set is auxiliary. With the default O-grid every count is the same for all samples (no padding).
    """

    name = "elasticity"
    Params = ElasticityParams
    block_size = 1

    def __init__(self, params: ElasticityParams) -> None:
        super().__init__(params)
        self._solver: ElasticitySolver | None = None
        self._dims: dict[str, int] | None = None

    def dims(self) -> dict[str, int]:
        if self._dims is None:
            p = self.params
            spec = p.mesh_spec()
            cells, nodes = spec.max_counts(p.max_cells)
            nq = quadrature_points_per_cell(p.cell_type, p.quadrature())
            self._dims = {
                "node": nodes,
                "cell": cells,
                "corner": spec.nodes_per_cell,
                "qpoint": cells * nq,
                "code": p.code_points,
                "mode": 2 * p.radius_modes,
            }
        return self._dims

    def coords(self) -> dict[str, Variable]:
        # every coordinate differs per sample (node_x, qpoint_x ... are fields); the code angles are
        # theta_j = 2 pi j / (code_points - 1), stated in radius_code's long_name
        return {}

    def fields(self) -> dict[str, FieldSpec]:
        gauss = self.params.target == "gauss"
        node_role, q_role = ("auxiliary", "coordinate") if gauss else ("coordinate", "auxiliary")
        return {
            "node_x": FieldSpec(("node",), "1", "x of the mesh nodes (reference configuration)", node_role, "float64"),
            "node_y": FieldSpec(("node",), "1", "y of the mesh nodes (reference configuration)", node_role, "float64"),
            "node_count": FieldSpec((), "1", "number of valid entries along node", "auxiliary", "int32"),
            "cell": FieldSpec(
                ("cell", "corner"), "1", "cell-node connectivity, 0-based gmsh order, -1 padded", "auxiliary", "int32"
            ),
            "cell_count": FieldSpec((), "1", "number of valid entries along cell", "auxiliary", "int32"),
            "stress": FieldSpec(
                ("node",), "1", f"von Mises stress (Cauchy) at the nodes ({self.params.nodal_stress})",
                "auxiliary" if gauss else "output",
            ),
            "displacement_x": FieldSpec(("node",), "1", "x displacement at the nodes", "auxiliary"),
            "displacement_y": FieldSpec(("node",), "1", "y displacement at the nodes", "auxiliary"),
            "qpoint_x": FieldSpec(("qpoint",), "1", "x of the quadrature points", q_role, "float64"),
            "qpoint_y": FieldSpec(("qpoint",), "1", "y of the quadrature points", q_role, "float64"),
            "qpoint_count": FieldSpec((), "1", "number of valid entries along qpoint", "auxiliary", "int32"),
            "stress_qpoint": FieldSpec(
                ("qpoint",), "1", "von Mises stress (Cauchy) at the quadrature points", "output" if gauss else "auxiliary"
            ),
            "qpoint_weight": FieldSpec(("qpoint",), "1", "quadrature weight times |det J| (0 in padding)", "auxiliary"),
            "radius_code": FieldSpec(
                ("code",), "1", "void radius r(theta_j), theta_j = 2 pi j / (code - 1)", "input", "float64"
            ),
            "void_coefficients": FieldSpec(
                ("mode",), "1", "KL coefficients (a_1..a_L, b_1..b_L) of the void", "auxiliary", "float64"
            ),
        }

    def solver(self) -> ElasticitySolver:
        if self._solver is None:
            p = self.params
            self._solver = ElasticitySolver(
                p.material_model(),
                cell=p.cell_type,
                degree=p.order,
                quadrature_degree=p.quadrature(),
                newton=p.newton_options(),
                nodal_stress=p.nodal_stress,
            )
        return self._solver

    def sample(self, seed: int, index: int) -> dict[str, np.ndarray]:
        """Mesh, solve and pad sample ``index`` of base seed ``seed``."""
        from meshes.elasticity_cell import cell_mesh

        p = self.params
        prior, spec = p.prior(), p.mesh_spec()
        dims = self.dims()
        coeffs = prior.sample(sample_rng(seed, index))
        comm = self.solver().comm
        mesh, err = None, None
        if comm.rank == 0:
            try:
                mesh = cell_mesh(coeffs, prior, spec)
            except RuntimeError as e:
                err = f"meshing failed: {e}"
            if mesh is not None and (mesh.n_cells > dims["cell"] or mesh.n_nodes > dims["node"]):
                err = (
                    f"mesh has {mesh.n_cells} cells / {mesh.n_nodes} nodes, more than the padded sizes "
                    f"{dims['cell']} / {dims['node']}; raise params.max_cells (now {p.max_cells or 'automatic'})"
                )
        if comm.size > 1:
            err = comm.bcast(err, root=0)
        if err:
            raise SolverError(err, index=index, seed=seed)
        sol = solve_cell(self.solver(), mesh, p.traction, index=index, seed=seed)
        if comm.size > 1:
            mesh = comm.bcast(mesh, root=0)
        n, c = mesh.n_nodes, mesh.n_cells
        nq = sol.stress_qpoints.shape[1]

        def pad(a: np.ndarray, size: int, fill: float = 0.0) -> np.ndarray:
            out = np.full((size, *a.shape[1:]), fill, dtype=a.dtype)
            out[: a.shape[0]] = a
            return out

        return {
            "node_x": pad(mesh.nodes[:, 0], dims["node"]),
            "node_y": pad(mesh.nodes[:, 1], dims["node"]),
            "node_count": np.int32(n),
            "cell": pad(mesh.cells.astype(np.int32), dims["cell"], -1),
            "cell_count": np.int32(c),
            "stress": pad(sol.stress_nodes, dims["node"]),
            "displacement_x": pad(sol.displacement[:, 0], dims["node"]),
            "displacement_y": pad(sol.displacement[:, 1], dims["node"]),
            "qpoint_x": pad(sol.qpoints[..., 0].ravel(), dims["qpoint"]),
            "qpoint_y": pad(sol.qpoints[..., 1].ravel(), dims["qpoint"]),
            "qpoint_count": np.int32(c * nq),
            "stress_qpoint": pad(sol.stress_qpoints.ravel(), dims["qpoint"]),
            "qpoint_weight": pad(sol.qweights.ravel(), dims["qpoint"]),
            "radius_code": prior.code(coeffs, p.code_points),
            "void_coefficients": coeffs,
        }

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        rows = [self.sample(seed, int(i)) for i in np.asarray(indices)]
        return {k: np.stack([r[k] for r in rows]) for k in self.fields()}


__all__ = [
    "DEFAULT_QUADRATURE",
    "Elasticity",
    "ElasticityParams",
    "ElasticitySolver",
    "LinearElastic",
    "NewtonOptions",
    "RivlinSaunders",
    "Solution",
    "dolfinx_mesh",
    "on_line",
    "solve_cell",
    "von_mises",
]
