"""gmsh meshes of the Geo-FNO elasticity unit cell: the unit square with a random central void.

Geometry (``PROTOCOLS.md``, "Elasticity on a unit cell with a random void"; Li, Huang, Liu and
Anandkumar, "Fourier Neural Operator with Learned Deformations for PDEs on General Geometries",
section 4.1). The cell is ``[0, 1]^2`` minus a void centred at ``c = (1/2, 1/2)`` whose boundary is
the polar curve ``c + r(theta) (cos theta, sin theta)`` with

    r(theta)  = r_min + r_span / (1 + exp(rt(theta))),            r_min = r_span = 0.2,
    rt(theta) = scale * sum_{l=1..L} (pi^2 l^2 + tau^2)^(-1/2) (a_l cos(l theta) + b_l sin(l theta)),

``L = 5`` modes, ``tau = 3``, ``scale = 4`` and ``a_l, b_l`` i.i.d. N(0, 1): the truncated
Karhunen-Loeve series of the prior ``N(0, 4^2 (-Laplacian + 3^2)^(-1))`` the paper writes, whose
eigenvalues ``4^2 (pi^2 l^2 + 9)^(-1)`` are each shared by ``cos(l theta)`` and ``sin(l theta)``.
So ``0.2 < r < 0.4``; ``rt`` has pointwise standard deviation ``4 (sum_l (pi^2 l^2 + 9)^-1)^(1/2)``
= 1.22 (with ``scale = 1`` it would be 0.31 and the voids nearly circles). The ``pi^2 l^2`` (rather
than ``l^2``) is the eigenvalue of ``-d^2/dx^2`` for the angle rescaled to ``x = theta / pi`` in
``[0, 2)``, as the protocol states it; ``scale``, ``tau`` and ``L`` are parameters.
:meth:`VoidPrior.sample` draws the 10 coefficients in the order ``(a_1..a_5, b_1..b_5)`` as one
``rng.standard_normal(10)`` call, ``rng`` being ``opflow.data.provenance.sample_rng(seed, i)``.

Void boundary. One closed (periodic) OpenCASCADE spline interpolating the exact curve at
``spline_points`` angles ``theta_j = pi/4 + 2 pi j / spline_points`` (a multiple of 4, so the four
diagonal angles pointing at the square's corners are interpolation points). Its distance to the
exact curve falls like ``spline_points^-4`` (tested): at the default 128 points it is below 4e-6
(median 8e-7 over 20 voids), below the error of the quadratic elements' edges.

Meshes (:class:`CellMeshSpec`):

* ``topology="ogrid"`` (default): a fixed-topology structured O-grid. Four straight radial cuts
  join the square's corners to the void at the diagonal angles; each of the four patches (one per
  side) is a transfinite ``(n_theta/4) x n_radial`` grid, graded by ``radial_progression`` (element
  lengths grow by that factor away from the void). Every sample then has the same element, node
  and quadrature-point counts: the default ``36 x 3`` = 108 nine-node quadrilaterals has
  ``108 x 9 = 972`` Gauss points (3 x 3 per element) and 504 nodes, the counts of the published set.
* ``topology="unstructured"``: gmsh Frontal-Delaunay for quads (algorithm 8) with blossom
  recombination at uniform target size ``mesh_size`` (sides divided into ``ceil(1 / mesh_size)``
  segments, the void into an even number of about ``perimeter / mesh_size``); counts vary with the
  void: ``mesh_size`` 0.09 gives 97..133 quadrilaterals, 110 on average. When the recombination
  leaves triangles the mesh is regenerated with 2 more (then fewer) void segments
  (:func:`generate_cell_mesh`). Known weakness of gmsh's recombination: about 1 cell in 250 has an
  angle above 160 degrees at a boundary node (two of its edges on the boundary); the Jacobian stays
  positive at the quadrature points. ``cell_type="triangle"`` needs no recombination.

``cell_type`` ``"quadrilateral"`` (recombined) or ``"triangle"``; ``order`` 1 or 2 (2 = 9-node
quadrilaterals / 6-node triangles, complete Lagrange; curved edges follow the spline).

Physical groups: ``domain`` (2-D, tag 1) and the curves ``bottom`` (11), ``right`` (12), ``top``
(13), ``left`` (14), ``void`` (15). gmsh state is process-global: every build runs inside
:func:`meshes.domains.gmsh_session` (initialises gmsh only if nobody has, finalises only what it
initialised, removes its model, holds a lock); the options set here are restored afterwards. Files
are written under a temporary name in the target folder and renamed when complete.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from meshes.domains import atomic_msh
from opflow.data.errors import ConfigError

CENTRE = (0.5, 0.5)
DOMAIN_TAG = 1
#: physical curve groups (name -> tag)
BOUNDARY_TAGS: dict[str, int] = {"bottom": 11, "right": 12, "top": 13, "left": 14, "void": 15}

# gmsh element type ids -> (cell name, order, nodes per cell)
_GMSH_CELLS = {2: ("triangle", 1, 3), 9: ("triangle", 2, 6), 3: ("quadrilateral", 1, 4), 10: ("quadrilateral", 2, 9)}
_GMSH_LINES = {1: 2, 8: 3}
# local edges of gmsh cells as (end, end, mid-node or -1)
_EDGES = {
    ("triangle", 1): ((0, 1, -1), (1, 2, -1), (2, 0, -1)),
    ("triangle", 2): ((0, 1, 3), (1, 2, 4), (2, 0, 5)),
    ("quadrilateral", 1): ((0, 1, -1), (1, 2, -1), (2, 3, -1), (3, 0, -1)),
    ("quadrilateral", 2): ((0, 1, 4), (1, 2, 5), (2, 3, 6), (3, 0, 7)),
}
# options changed here (restored on exit)
_OPTIONS = ("Mesh.Algorithm", "Mesh.RecombineAll", "Mesh.RecombinationAlgorithm", "Mesh.ElementOrder",
            "Mesh.SecondOrderIncomplete", "Mesh.MeshSizeMax", "Mesh.MeshSizeMin", "Mesh.Smoothing",
            "Mesh.RecombineMinimumQuality")


# ------------------------------------------------------------------------------ the random void


@dataclass(frozen=True)
class VoidPrior:
    """The random void radius ``r(theta)`` (module doc): its Karhunen-Loeve prior and the map to r."""

    n_modes: int = 5
    scale: float = 4.0
    tau: float = 3.0
    r_min: float = 0.2
    r_span: float = 0.2

    def __post_init__(self) -> None:
        if self.n_modes < 1:
            raise ValueError(f"n_modes must be >= 1, got {self.n_modes}")
        if self.scale < 0 or self.tau < 0:
            raise ValueError(f"scale and tau must be >= 0, got scale={self.scale}, tau={self.tau}")
        if not (self.r_min > 0 and self.r_span >= 0 and self.r_min + self.r_span < 0.5):
            raise ValueError(
                f"need r_min > 0, r_span >= 0 and r_min + r_span < 0.5 so the void stays inside the cell, "
                f"got r_min={self.r_min}, r_span={self.r_span}"
            )

    @property
    def n_coefficients(self) -> int:
        return 2 * self.n_modes

    def amplitudes(self) -> np.ndarray:
        """``scale (pi^2 l^2 + tau^2)^(-1/2)``, l = 1..n_modes: the square roots of the KL eigenvalues."""
        ell = np.arange(1, self.n_modes + 1)
        return self.scale / np.sqrt(np.pi**2 * ell**2 + self.tau**2)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """The ``2 n_modes`` i.i.d. N(0, 1) coefficients ``(a_1..a_L, b_1..b_L)`` of one void."""
        return rng.standard_normal(self.n_coefficients)

    def _check(self, coeffs: np.ndarray) -> np.ndarray:
        coeffs = np.asarray(coeffs, dtype=np.float64)
        if coeffs.shape != (self.n_coefficients,):
            raise ConfigError(f"void coefficients must have shape ({self.n_coefficients},), got {coeffs.shape}")
        return coeffs

    def log_radius_field(self, theta: np.ndarray, coeffs: np.ndarray) -> np.ndarray:
        """``rt(theta)``, the Gaussian random function of the angle."""
        c = self._check(coeffs)
        ell = np.arange(1, self.n_modes + 1)
        lt = np.multiply.outer(np.asarray(theta, dtype=np.float64), ell)
        amp = self.amplitudes()
        return np.cos(lt) @ (amp * c[: self.n_modes]) + np.sin(lt) @ (amp * c[self.n_modes :])

    def radius(self, theta: np.ndarray, coeffs: np.ndarray) -> np.ndarray:
        """``r(theta) = r_min + r_span / (1 + exp(rt(theta)))``."""
        # 1 / (1 + e^x) written as (1 - tanh(x / 2)) / 2: no overflow for large |x|
        return self.r_min + self.r_span * 0.5 * (1.0 - np.tanh(0.5 * self.log_radius_field(theta, coeffs)))

    def code(self, coeffs: np.ndarray, n: int = 42) -> np.ndarray:
        """The shape code ``r(theta_j)``, ``theta_j = 2 pi j / (n - 1)``, j = 0..n-1 (endpoint repeated)."""
        return self.radius(np.linspace(0.0, 2.0 * np.pi, n), coeffs)

    def void_area(self, coeffs: np.ndarray, n: int = 2048) -> float:
        """``(1/2) int_0^{2 pi} r^2 dtheta`` by the trapezoidal rule (spectrally accurate: periodic)."""
        theta = 2.0 * np.pi * np.arange(n) / n
        return float(np.pi * np.mean(self.radius(theta, coeffs) ** 2))


# --------------------------------------------------------------------------------- mesh options


@dataclass(frozen=True)
class CellMeshSpec:
    """How to mesh the cell (module doc)."""

    topology: Literal["ogrid", "unstructured"] = "ogrid"
    cell_type: Literal["quadrilateral", "triangle"] = "quadrilateral"
    order: int = 2
    mesh_size: float = 0.09
    n_theta: int = 36
    n_radial: int = 3
    radial_progression: float = 1.0
    spline_points: int = 128

    def __post_init__(self) -> None:
        if self.topology not in ("ogrid", "unstructured"):
            raise ValueError(f"topology must be 'ogrid' or 'unstructured', got {self.topology!r}")
        if self.cell_type not in ("quadrilateral", "triangle"):
            raise ValueError(f"cell_type must be 'quadrilateral' or 'triangle', got {self.cell_type!r}")
        if self.order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {self.order}")
        if not 0.005 <= self.mesh_size <= 0.3:
            raise ValueError(f"mesh_size must lie in [0.005, 0.3] (the void radius is 0.2..0.4), got {self.mesh_size}")
        if self.n_theta < 4 or self.n_theta % 4:
            raise ValueError(f"n_theta must be a positive multiple of 4 (one quarter per side), got {self.n_theta}")
        if not 1 <= self.n_radial <= 200 or self.n_theta > 2000:
            raise ValueError(f"need 1 <= n_radial <= 200 and n_theta <= 2000, got {self.n_radial}, {self.n_theta}")
        if not 0.1 <= self.radial_progression <= 10:
            raise ValueError(f"radial_progression must lie in [0.1, 10], got {self.radial_progression}")
        if self.spline_points < 16 or self.spline_points % 4:
            raise ValueError(f"spline_points must be a multiple of 4 and >= 16, got {self.spline_points}")

    @property
    def nodes_per_cell(self) -> int:
        return {("triangle", 1): 3, ("triangle", 2): 6, ("quadrilateral", 1): 4, ("quadrilateral", 2): 9}[
            (self.cell_type, self.order)
        ]

    def fixed_counts(self) -> tuple[int, int] | None:
        """``(cells, nodes)`` of an O-grid mesh (the same for every void), else None."""
        if self.topology != "ogrid":
            return None
        quads = self.n_theta * self.n_radial
        m, n = self.order * self.n_theta, self.order * self.n_radial + 1  # periodic in theta
        return (quads if self.cell_type == "quadrilateral" else 2 * quads), m * n

    def max_counts(self, max_cells: int = 0, safety: float = 1.6) -> tuple[int, int]:
        """Upper bounds of ``(cells, nodes)`` for any void (exact for the O-grid).

        Unstructured: ``max_cells`` if given, else ``safety`` times the estimate: the cell area is
        at most ``1 - pi r_min^2`` < 0.88 and a uniform mesh of size h has about ``area / h^2``
        quadrilaterals (twice as many triangles). Nodes follow from Euler's formula for a domain
        with one hole (V - E + F = 0): F cells with B boundary edges have V = F + B/2
        (quadrilaterals) or (F + B)/2 (triangles) vertices and E = 2F + B/2 or (3F + B)/2 edges;
        order 2 adds a node per edge (and per quadrilateral). B is at most ``safety`` times the
        perimeter over h, the perimeter being at most 4 + 2 pi 0.4 x 1.5.
        """
        fixed = self.fixed_counts()
        if fixed is not None:
            return fixed
        h = self.mesh_size
        per_quad = 1 if self.cell_type == "quadrilateral" else 2
        f = max_cells or per_quad * (math.ceil(safety * 0.88 / h**2) + 8)
        b = math.ceil(safety * (4.0 + 3.0 * np.pi * 0.4) / h) + 8
        if self.cell_type == "quadrilateral":
            v, e = f + b // 2 + 1, 2 * f + b // 2 + 1
            nodes = v if self.order == 1 else v + e + f
        else:
            v, e = (f + b) // 2 + 1, (3 * f + b) // 2 + 1
            nodes = v if self.order == 1 else v + e
        return f, nodes


# ------------------------------------------------------------------------------------ the mesh


@dataclass
class CellMesh:
    """A mesh as numpy arrays, in gmsh order: ``nodes (N, 2)``, ``cells (C, k)`` 0-based gmsh
    connectivity (corners counter-clockwise first, then edge mid-nodes, then the centre), and per
    boundary group the ``(F, 2 or 3)`` line segments (end, end[, mid])."""

    nodes: np.ndarray
    cells: np.ndarray
    cell_type: str
    order: int
    boundary: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def n_cells(self) -> int:
        return int(self.cells.shape[0])

    def boundary_nodes(self, name: str) -> np.ndarray:
        """Sorted indices of the nodes on boundary group ``name``."""
        return np.unique(self.boundary[name])

    def cell_areas(self) -> np.ndarray:
        """Signed area of every (isoparametric) cell, exact for straight or quadratic edges.

        Green: ``area = (1/2) closed-integral (x dy - y dx)``; along a quadratic edge the integrand
        is a cubic in the edge parameter, so Simpson's rule on (end, mid, end) is exact.
        """
        x = self.nodes[self.cells]  # (C, k, 2)
        total = np.zeros(self.n_cells)
        for a, b, m in _EDGES[(self.cell_type, self.order)]:
            pa, pb = x[:, a], x[:, b]
            pm = x[:, m] if m >= 0 else 0.5 * (pa + pb)
            # P(s) = pa s(s-1)/2 + pb s(s+1)/2 + pm (1 - s^2), s in [-1, 1]
            d = {-1: -1.5 * pa - 0.5 * pb + 2 * pm, 0: 0.5 * (pb - pa), 1: 0.5 * pa + 1.5 * pb - 2 * pm}
            p = {-1: pa, 0: pm, 1: pb}
            cross = {s: p[s][:, 0] * d[s][:, 1] - p[s][:, 1] * d[s][:, 0] for s in (-1, 0, 1)}
            total += 0.5 * (cross[-1] + 4 * cross[0] + cross[1]) / 3.0
        return total


def _set_options(gmsh: Any, spec: CellMeshSpec) -> None:
    quads = spec.cell_type == "quadrilateral"
    gmsh.option.setNumber("Mesh.Algorithm", 8 if quads else 6)
    gmsh.option.setNumber("Mesh.RecombineAll", 1 if quads and spec.topology == "unstructured" else 0)
    gmsh.option.setNumber("Mesh.RecombinationAlgorithm", 1)
    gmsh.option.setNumber("Mesh.ElementOrder", spec.order)
    gmsh.option.setNumber("Mesh.SecondOrderIncomplete", 0)
    gmsh.option.setNumber("Mesh.MeshSizeMax", spec.mesh_size)
    gmsh.option.setNumber("Mesh.MeshSizeMin", 0.0)
    gmsh.option.setNumber("Mesh.Smoothing", 1)
    gmsh.option.setNumber("Mesh.RecombineMinimumQuality", 0.01)


def _angle(p: np.ndarray) -> float:
    return float(np.arctan2(p[1] - CENTRE[1], p[0] - CENTRE[0]) % (2 * np.pi))


def build_cell_geometry(gmsh: Any, coeffs: np.ndarray, prior: VoidPrior, spec: CellMeshSpec) -> tuple[int, int] | None:
    """Create the cell geometry, its mesh settings and physical groups in the current gmsh model.

    Returns ``(void curve tag, number of void segments)`` for unstructured meshes (see
    :func:`generate_cell_mesh`), None for the O-grid."""
    occ = gmsh.model.occ
    n = spec.spline_points
    theta = np.pi / 4 + 2 * np.pi * np.arange(n) / n
    r = prior.radius(theta, coeffs)
    xy = np.stack([CENTRE[0] + r * np.cos(theta), CENTRE[1] + r * np.sin(theta)], axis=1)
    pts = [occ.addPoint(x, y, 0.0) for x, y in xy]
    spline = occ.addSpline([*pts, pts[0]])  # first == last: a closed periodic spline
    corners = [occ.addPoint(x, y, 0.0) for x, y in ((0, 0), (1, 0), (1, 1), (0, 1))]
    names = ("bottom", "right", "top", "left")
    sides = {name: occ.addLine(corners[i], corners[(i + 1) % 4]) for i, name in enumerate(names)}

    if spec.topology == "unstructured":
        occ.remove([(0, p) for p in pts[1:]])
        outer = occ.addCurveLoop(list(sides.values()))
        inner = occ.addCurveLoop([spline])
        surfaces = [occ.addPlaneSurface([outer, inner])]
        occ.synchronize()
        void_curves = [spline]
        # boundary divisions of uniform size ~mesh_size, an even number on the void (and 4 equal
        # sides): with an even boundary edge count the blossom recombination gives only quadrilaterals
        fine = 2.0 * np.pi * np.arange(4096) / 4096
        rr = prior.radius(fine, coeffs)
        xy = np.stack([rr * np.cos(fine), rr * np.sin(fine)], axis=1)
        perimeter = float(np.linalg.norm(np.diff(np.vstack([xy, xy[:1]]), axis=0), axis=1).sum())
        n_side = max(2, math.ceil(1.0 / spec.mesh_size))
        n_void = 2 * max(4, math.ceil(perimeter / (2.0 * spec.mesh_size)))
        for c in sides.values():
            gmsh.model.mesh.setTransfiniteCurve(c, n_side + 1)
        gmsh.model.mesh.setTransfiniteCurve(spline, n_void + 1)
        info: tuple[int, int] | None = (spline, n_void)
    else:
        info = None
        # split the spline at the diagonal angles (points 0, n/4, n/2, 3n/4 lie on it exactly)
        diag = [pts[k * n // 4] for k in range(4)]  # angles pi/4, 3pi/4, 5pi/4, 7pi/4
        out, _ = occ.fragment([(1, spline)], [(0, p) for p in diag])
        occ.synchronize()
        arcs = [t for d, t in out if d == 1]
        occ.remove([(0, p) for p in pts if p not in diag and (0, p) in gmsh.model.getEntities(0)])
        occ.synchronize()
        # corner k of the square sits at angle pi/4 + k pi/2 as seen from the centre: (1,1), (0,1), (0,0), (1,0)
        corner_at = [corners[2], corners[3], corners[0], corners[1]]
        void_at = []
        for k in range(4):
            t = np.pi / 4 + k * np.pi / 2
            best = min(
                (p for _, p in gmsh.model.getEntities(0) if p not in corners),
                key=lambda p: abs(((_angle(gmsh.model.getValue(0, p, [])) - t + np.pi) % (2 * np.pi)) - np.pi),
            )
            void_at.append(best)
        radial = [occ.addLine(void_at[k], corner_at[k]) for k in range(4)]  # oriented void -> corner
        occ.synchronize()

        def arc_between(a: int, b: int) -> int:
            for c in arcs:
                ends = {abs(t) for _, t in gmsh.model.getBoundary([(1, c)], oriented=False)}
                if ends == {a, b}:
                    return c
            raise RuntimeError("O-grid construction: void arc not found")

        # side between diagonal k-1 and k: right (7pi/4..pi/4), top, left, bottom
        side_of = ["right", "top", "left", "bottom"]
        surfaces, void_curves = [], []
        for k in range(4):
            k0 = (k - 1) % 4
            arc = arc_between(void_at[k0], void_at[k])
            void_curves.append(arc)
            loop = occ.addCurveLoop([sides[side_of[k]], radial[k], arc, radial[k0]])
            surfaces.append(occ.addPlaneSurface([loop]))
        occ.synchronize()
        per_side = spec.n_theta // 4 + 1
        for c in [*sides.values(), *void_curves]:
            gmsh.model.mesh.setTransfiniteCurve(c, per_side)
        for c in radial:
            gmsh.model.mesh.setTransfiniteCurve(c, spec.n_radial + 1, "Progression", spec.radial_progression)
        for s in surfaces:
            gmsh.model.mesh.setTransfiniteSurface(s)
            if spec.cell_type == "quadrilateral":
                gmsh.model.mesh.setRecombine(2, s)

    gmsh.model.addPhysicalGroup(2, surfaces, DOMAIN_TAG, name="domain")
    for name, c in sides.items():
        gmsh.model.addPhysicalGroup(1, [c], BOUNDARY_TAGS[name], name=name)
    gmsh.model.addPhysicalGroup(1, void_curves, BOUNDARY_TAGS["void"], name="void")
    return info


#: unstructured quadrilaterals: how many void divisions to try (n, n+2, n-2, n+4, ...)
RECOMBINATION_ATTEMPTS = 9


def generate_cell_mesh(gmsh: Any, spec: CellMeshSpec, info: tuple[int, int] | None) -> None:
    """Mesh the current model (geometry from :func:`build_cell_geometry`).

    gmsh's blossom recombination (Frontal-Delaunay for quads, minimum quad quality 0.01) sometimes
    leaves a pair of triangles. The mesh is then regenerated with the void divided into
    ``n + 2, n - 2, n + 4, ...`` segments (always even) until only quadrilaterals remain: a
    deterministic rule, so the same void always gives the same mesh.
    """
    quads_unstructured = info is not None and spec.cell_type == "quadrilateral"
    attempts = RECOMBINATION_ATTEMPTS if quads_unstructured else 1
    for k in range(attempts):
        if k:
            spline, n_void = info  # type: ignore[misc]
            step = 2 * ((k + 1) // 2) * (1 if k % 2 else -1)
            gmsh.model.mesh.clear()
            gmsh.model.mesh.setTransfiniteCurve(spline, max(8, n_void + step) + 1)
        gmsh.model.mesh.generate(2)
        types = {int(t) for t in gmsh.model.mesh.getElements(2)[0]}
        if not quads_unstructured or types == {10 if spec.order == 2 else 3}:
            return
    raise RuntimeError(
        f"gmsh left triangles in the recombined mesh after {attempts} attempts; "
        "change mesh_size slightly or use cell_type='triangle'"
    )


def extract_mesh(gmsh: Any) -> CellMesh:
    """The current gmsh model's mesh as a :class:`CellMesh`: the cells of the 2-D physical group
    ``DOMAIN_TAG`` and the line segments of every 1-D physical group (by name)."""
    tags, xyz, _ = gmsh.model.mesh.getNodes()
    index = np.full(int(tags.max()) + 1, -1, dtype=np.int64)
    index[tags.astype(np.int64)] = np.arange(tags.size)
    nodes = xyz.reshape(-1, 3)[:, :2].copy()
    cells, kinds = [], set()
    for ent in gmsh.model.getEntitiesForPhysicalGroup(2, DOMAIN_TAG):
        etypes, _, enodes = gmsh.model.mesh.getElements(2, ent)
        for et, en in zip(etypes, enodes, strict=True):
            if int(et) not in _GMSH_CELLS:
                raise RuntimeError(f"unsupported gmsh element type {int(et)} in the cell mesh")
            kinds.add(int(et))
            cells.append(index[en.astype(np.int64)].reshape(-1, _GMSH_CELLS[int(et)][2]))
    if len(kinds) != 1:
        raise RuntimeError(
            f"the cell mesh mixes element types {sorted(kinds)} (recombination left triangles); "
            "change mesh_size or use cell_type='triangle'"
        )
    cell_type, order, _ = _GMSH_CELLS[kinds.pop()]
    boundary = {}
    for _, tag in gmsh.model.getPhysicalGroups(1):
        name = gmsh.model.getPhysicalName(1, tag) or str(tag)
        segs = []
        for ent in gmsh.model.getEntitiesForPhysicalGroup(1, tag):
            etypes, _, enodes = gmsh.model.mesh.getElements(1, ent)
            for et, en in zip(etypes, enodes, strict=True):
                segs.append(index[en.astype(np.int64)].reshape(-1, _GMSH_LINES[int(et)]))
        boundary[name] = np.concatenate(segs)
    used = np.unique(np.concatenate(cells))
    if used.size != nodes.shape[0]:  # drop nodes of non-physical entities (none expected)
        remap = np.full(nodes.shape[0], -1, dtype=np.int64)
        remap[used] = np.arange(used.size)
        nodes = nodes[used]
        cells = [remap[c] for c in cells]
        boundary = {k: remap[v] for k, v in boundary.items()}
    return CellMesh(nodes, np.concatenate(cells), cell_type, order, boundary)


@contextlib.contextmanager
def _cell_model(coeffs: np.ndarray, prior: VoidPrior, spec: CellMeshSpec) -> Any:
    from meshes.domains import gmsh_session

    with gmsh_session("elasticity-cell") as gmsh:
        saved = {k: gmsh.option.getNumber(k) for k in _OPTIONS}
        try:
            _set_options(gmsh, spec)
            info = build_cell_geometry(gmsh, coeffs, prior, spec)
            generate_cell_mesh(gmsh, spec, info)
            gmsh.model.mesh.renumberNodes()
            gmsh.model.mesh.renumberElements()
            yield gmsh
        finally:
            for k, v in saved.items():
                with contextlib.suppress(Exception):
                    gmsh.option.setNumber(k, v)


def cell_mesh(coeffs: np.ndarray, prior: VoidPrior | None = None, spec: CellMeshSpec | None = None) -> CellMesh:
    """Mesh the cell whose void has KL coefficients ``coeffs`` (see :meth:`VoidPrior.sample`)."""
    prior = prior or VoidPrior()
    spec = spec or CellMeshSpec()
    coeffs = prior._check(coeffs)
    with _cell_model(coeffs, prior, spec) as gmsh:
        return extract_mesh(gmsh)


def write_cell_msh(
    path: str | os.PathLike, coeffs: np.ndarray, prior: VoidPrior | None = None, spec: CellMeshSpec | None = None
) -> Path:
    """Write the mesh of :func:`cell_mesh` to the gmsh file ``path`` (.msh 4.1), atomically."""
    prior = prior or VoidPrior()
    spec = spec or CellMeshSpec()
    coeffs = prior._check(coeffs)
    with atomic_msh(path) as tmp, _cell_model(coeffs, prior, spec) as gmsh:
        gmsh.write(str(tmp))
    return Path(path)
