"""darcy_fem: -div(a grad u) = f, u = 0 on the boundary, by dolfinx finite elements.

Specification: P1 converges at order 2 in L2 and 1 in H1, P2 at 3 and 2 (manufactured solutions on
the unit square, on the L-shape and on a perforated square); on the L-shape the exact harmonic corner
singularity r^(2/3) sin(2 theta / 3) limits P1 to orders 4/3 (L2) and 2/3 (H1); Dirichlet data are
imposed exactly for linear solutions; with coefficient_map "points" every mesh of a domain carries
the same coefficient function and index_offset shifts the samples; with a constant coefficient P1 on the
structured mesh is the 5-point FD scheme; FD and FEM agree on the same 12/3 coefficient to
discretisation error that shrinks with refinement; darcy_fem samples exactly darcy_fd's
coefficients; failures raise SolverError naming index and seed; bad parameters raise ConfigError;
results are deterministic and the same under 2 MPI ranks as in serial.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opflow.data.errors import ConfigError
from opflow.data.format import read_dataset, validate
from solvers.base import SolverError, get_generator
from solvers.darcy_fem import (
    DarcyFEMGenerator,
    DarcyFEMParams,
    evaluation_matrix,
    gmsh_mesh,
    grid_points,
    grid_to_points,
    locate_points,
)
from solvers.verification import R_HOLE, darcy_fem_study, slope, u_perforated, u_square_and_l

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def mesh_cache(tmp_path_factory: pytest.TempPathFactory):
    """Named gmsh domains are meshed into a private cache for this module."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("mesh-cache")
        mp.setenv("OPFLOW_MESH_CACHE", str(path))
        yield path


def gen(**kw) -> DarcyFEMGenerator:
    return get_generator("darcy_fem").from_config(kw)


# --------------------------------------------------------------- manufactured solutions
# problem (b) of solvers/verification.py


@pytest.mark.parametrize(("degree", "l2_order", "h1_order"), [(1, 2.0, 1.0), (2, 3.0, 2.0)])
def test_unit_square_manufactured_orders(degree: int, l2_order: float, h1_order: float) -> None:
    study = darcy_fem_study(degree, [1 / n for n in (8, 16, 32, 64)])
    assert abs(study.slopes["L2"] - l2_order) < 0.15
    assert abs(study.slopes["H1"] - h1_order) < 0.15
    assert study.errors["L2"][-1] < (1e-4 if degree == 1 else 1e-6)


@pytest.mark.parametrize(("degree", "l2_order", "h1_order"), [(1, 2.0, 1.0), (2, 3.0, 2.0)])
def test_l_shape_manufactured_orders(degree: int, l2_order: float, h1_order: float) -> None:
    """The L-shape is polygonal (meshed exactly) and the solution smooth: full orders on
    unstructured gmsh meshes."""
    study = darcy_fem_study(degree, [0.1, 0.05, 0.025, 0.0125], domain="l_shape", u_exact=u_square_and_l)
    assert abs(study.slopes["L2"] - l2_order) < 0.15
    assert abs(study.slopes["H1"] - h1_order) < 0.15


def u_corner(x):
    """r^(2/3) sin(2 phi / 3) about the re-entrant corner c = (1/2, 1/2) of the L-shape, phi in
    [0, 3 pi / 2] the angle from the notch side x = 1/2 (y > 1/2) through the domain to the notch
    side y = 1/2 (x > 1/2): harmonic, zero on both notch sides, gradient ~ r^(-1/3). The angle's
    branch cut lies at theta = pi / 4, inside the removed square, so rounding on the notch sides
    cannot jump to the other branch."""
    import math

    from solvers.mpi import dolfinx_modules

    ufl = dolfinx_modules().ufl
    dx, dy = x[0] - 0.5, x[1] - 0.5
    theta = ufl.atan2(dy, dx)
    phi = ufl.conditional(ufl.lt(theta, math.pi / 4), theta + 1.5 * math.pi, theta - 0.5 * math.pi)
    return ufl.sqrt(dx * dx + dy * dy) ** (2.0 / 3.0) * ufl.sin(2.0 * phi / 3.0)


def test_l_shape_corner_singularity_limits_p1_to_the_singular_rates() -> None:
    """-Laplace(u) = 0 with u = r^(2/3) sin(2 phi / 3) on the whole boundary (coefficient 1, the
    exact solution's own Dirichlet data, no manufactured source): u is in H^(1 + 2/3 - eps) only,
    so P1 on quasi-uniform meshes converges like h^(2/3) in H1 and h^(4/3) in L2 (measured 0.66
    and 1.36 over h = 0.1 .. 0.0125), not at the smooth orders 1 and 2 the test above asserts on
    the same meshes."""
    from meshes.domains import cached_mesh
    from solvers.darcy_fem import DarcyFEM, error_norms

    hs = [0.1, 0.05, 0.025, 0.0125]
    errors = []
    for h in hs:
        solver = DarcyFEM(gmsh_mesh(cached_mesh("l_shape", mesh_size=h)), source=0.0, dirichlet=u_corner)
        errors.append(error_norms(solver.solve(), u_corner, quadrature_degree=10))
    l2, h1 = np.array(errors).T
    assert abs(slope(hs, h1) - 2 / 3) < 0.06
    assert abs(slope(hs, l2) - 4 / 3) < 0.1
    assert h1[-1] < 0.03 and l2[-1] < 3e-4


def test_dirichlet_data_are_imposed_and_lifted_with_the_current_coefficient() -> None:
    """P1 reproduces a linear function exactly: with its boundary values as data and f = 0 the
    solution is that function at every node, for a = 1 and after the coefficient changes (the
    lifting -A g is re-assembled with the new a at each solve)."""
    from meshes.domains import cached_mesh
    from solvers.darcy_fem import DarcyFEM

    solver = DarcyFEM(gmsh_mesh(cached_mesh("perforated", mesh_size=0.05)), source=0.0, dirichlet=lambda x: 1 + 2 * x[0] - 3 * x[1])
    xy = solver.V.tabulate_dof_coordinates()[:, :2]
    exact = 1 + 2 * xy[:, 0] - 3 * xy[:, 1]
    for value in (1.0, 7.5):
        solver.set_cell_coefficient(np.full(len(solver.cell_midpoints), value))
        assert np.abs(solver.solve().x.array - exact).max() < 1e-10


def test_perforated_manufactured_order_with_curved_boundary() -> None:
    """A hole's boundary is a polygon within O(h^2) of the circle: P1 keeps order 2 in L2."""
    study = darcy_fem_study(1, [0.1, 0.05, 0.025, 0.0125], domain="perforated", u_exact=u_perforated, holes=((0.5, 0.5, R_HOLE),))
    assert abs(study.slopes["L2"] - 2.0) < 0.15
    assert abs(study.slopes["H1"] - 1.0) < 0.15


# ------------------------------------------------------------ point evaluation / transfer


@pytest.mark.parametrize("degree", [1, 2])
def test_point_evaluation_is_exact_on_the_element_space(degree: int) -> None:
    """Grid (and random) points in the L-shape: a polynomial of the element's degree is reproduced
    to rounding, which checks point location, reference coordinates and dof order."""
    from meshes.domains import cached_mesh
    from solvers.mpi import dolfinx_modules

    fem = dolfinx_modules().fem
    mesh = gmsh_mesh(cached_mesh("l_shape", mesh_size=0.1))
    V = fem.functionspace(mesh, ("Lagrange", degree))

    def poly(x):
        return 0.3 + x[0] - 2 * x[1] + (degree - 1) * (x[0] ** 2 - x[0] * x[1] + 0.5 * x[1] ** 2)

    u = fem.Function(V)
    u.interpolate(poly)
    s = 21
    pts = np.vstack([grid_points(s, (0, 1, 0, 1)), np.random.default_rng(0).random((200, 2))])
    found, cells = locate_points(mesh, pts)
    inside = ~((pts[:, 0] > 0.5 + 1e-12) & (pts[:, 1] > 0.5 + 1e-12))
    assert np.array_equal(np.sort(found), np.flatnonzero(inside))
    vals = evaluation_matrix(V, pts[found], cells) @ u.x.array
    assert np.abs(vals - poly(pts[found].T)).max() < 1e-12


def test_grid_to_points_bilinear_and_nearest() -> None:
    s = 5
    x = np.linspace(0, 1, s)
    a = (2 * x[:, None] + 3 * x[None, :] + 1).ravel()  # bilinear in (x, y): reproduced exactly
    p = np.random.default_rng(1).random((50, 2))
    assert np.allclose(grid_to_points(p, s, (0, 1, 0, 1)) @ a, 2 * p[:, 0] + 3 * p[:, 1] + 1)
    near = grid_to_points(p, s, (0, 1, 0, 1), "nearest") @ a
    idx = np.rint(p * (s - 1)) / (s - 1)
    assert np.allclose(near, 2 * idx[:, 0] + 3 * idx[:, 1] + 1)


# ---------------------------------------------------------------------------- FD vs FEM


def test_constant_coefficient_p1_is_the_five_point_scheme() -> None:
    """On the structured mesh (n = s - 1, up-right diagonals) P1 with a = const has the 5-point
    stencil and load h^2 f per node, so it equals the FD solution at the grid nodes."""
    from solvers.darcy import solve

    s = 33
    a = np.full((s, s), 2.5)
    u_fd, _ = solve(a, 1.0)
    u_fe = gen(resolution=s, dtype="float64").solve_grid_coefficient(a)["pressure"]
    assert np.abs(u_fe - u_fd).max() < 1e-9 * np.abs(u_fd).max()


def fixed_12_3_coefficient(s: int) -> np.ndarray:
    """One fixed piecewise 12/3 coefficient a(x) = 12 if g(x) >= 0 else 3, g the bilinear
    interpolant of one darcy_fd Gaussian sample on a 17-node grid, at the nodes of an s-grid."""
    from solvers.darcy import DarcyFD

    s0 = 17
    g0 = np.log(DarcyFD(DarcyFD.Params(resolution=s0, coefficient="lognormal")).coefficients(0, np.array([0]))[0])
    g = (grid_to_points(grid_points(s, (0, 1, 0, 1)), s0, (0, 1, 0, 1)) @ g0.ravel()).reshape(s, s)
    return np.where(g >= 0, 12.0, 3.0)


def test_fd_and_fem_agree_on_a_12_3_coefficient_to_discretisation_error() -> None:
    """The fixed 12/3 coefficient at s = 33, 65, 129: the FD and P1 solutions on the common grid
    differ by O(h)."""
    from solvers.darcy import solve

    sizes, diffs = [33, 65, 129], []
    for s in sizes:
        a = fixed_12_3_coefficient(s)
        u_fd, _ = solve(a, 1.0)
        u_fe = gen(resolution=s, dtype="float64").solve_grid_coefficient(a)["pressure"]
        diffs.append(np.linalg.norm(u_fe - u_fd) / np.linalg.norm(u_fd))
    assert diffs[0] > diffs[1] > diffs[2]
    assert slope([1 / (s - 1) for s in sizes], diffs) > 0.8
    assert diffs[-1] < 5e-3


def test_unstructured_gmsh_square_agrees_with_the_structured_mesh() -> None:
    """The gmsh square (unstructured, mesh size = grid spacing) and the structured unit square
    give the same grid pressure for the fixed 12/3 coefficient up to a discretisation error that
    shrinks with refinement."""
    diffs = []
    for s in (33, 65):
        a = fixed_12_3_coefficient(s)
        u_st = gen(resolution=s, dtype="float64").solve_grid_coefficient(a)["pressure"]
        g = gen(resolution=s, domain="square", dtype="float64")
        out = g.solve_grid_coefficient(a)
        assert out["inside"].all()
        diffs.append(np.linalg.norm(out["pressure"] - u_st) / np.linalg.norm(u_st))
    assert diffs[1] < diffs[0] < 0.02


def test_fem_samples_the_same_coefficients_as_fd() -> None:
    fd = get_generator("darcy_fd").from_config({"resolution": 33})
    fe = gen(resolution=33)
    idx = np.array([0, 3, 4])
    d_fd, d_fe = fd.generate(5, idx), fe.generate(5, idx)
    assert np.array_equal(d_fd["coeff"], d_fe["coeff"])
    assert set(np.unique(d_fe["coeff"])) == {3.0, 12.0}
    rel = np.linalg.norm(d_fd["pressure"] - d_fe["pressure"], axis=(1, 2)) / np.linalg.norm(d_fd["pressure"], axis=(1, 2))
    assert rel.max() < 0.03  # the two discretisations at h = 1/32


def test_lognormal_coefficients_match_fd_and_give_positive_pressure() -> None:
    kw = {"resolution": 17, "coefficient": "lognormal", "grf_convention": "kl", "sigma": 12.0, "tau": 6.0}
    d_fe = gen(**kw).generate(1, np.array([2]))
    d_fd = get_generator("darcy_fd").from_config(kw).generate(1, np.array([2]))
    assert np.array_equal(d_fe["coeff"], d_fd["coeff"])
    assert d_fe["pressure"][0, 1:-1, 1:-1].min() > 0
    assert np.linalg.norm(d_fe["pressure"] - d_fd["pressure"]) < 0.1 * np.linalg.norm(d_fd["pressure"])


# ---------------------------------------------------------------- generator behaviour


def test_p2_and_refined_meshes_converge_to_the_same_grid_pressure() -> None:
    """P1 on the refined mesh (refine=2) and P2 on the same mesh are both closer to each other
    than either is to P1 on the grid mesh: the refinements approximate one solution."""
    s = 33
    a = gen(resolution=s).coefficients(0, np.array([1]))[0]
    p1 = gen(resolution=s, dtype="float64").solve_grid_coefficient(a)["pressure"]
    p1r = gen(resolution=s, refine=2, dtype="float64").solve_grid_coefficient(a)["pressure"]
    p2r = gen(resolution=s, refine=2, degree=2, dtype="float64").solve_grid_coefficient(a)["pressure"]
    assert np.linalg.norm(p2r - p1r) < 0.5 * np.linalg.norm(p1r - p1)
    assert np.linalg.norm(p1r - p1) < 0.02 * np.linalg.norm(p1)


def test_nonconverged_solve_raises_solver_error_naming_index_and_seed() -> None:
    g = gen(resolution=33, solver="cg", maxiter=1)
    with pytest.raises(SolverError, match=r"did not converge.*sample 5, seed 7") as e:
        g.generate(7, np.array([5]))
    assert (e.value.index, e.value.seed) == (5, 7)


def test_bad_coefficient_raises_solver_error() -> None:
    g = gen(resolution=9)
    a = np.ones((9, 9))
    a[3, 3] = -1.0
    with pytest.raises(SolverError, match=r"not positive.*sample 2, seed 4"):
        g.solve_grid_coefficient(a, index=2, seed=4)


def test_determinism_and_block_independence() -> None:
    idx = np.arange(3)
    d1 = gen(resolution=17, domain="l_shape", mesh_size=0.1).generate(11, idx)
    d2 = gen(resolution=17, domain="l_shape", mesh_size=0.1).generate(11, idx[2:])
    d3 = gen(resolution=17, domain="l_shape", mesh_size=0.1).generate(12, idx[2:])
    assert np.array_equal(d1["pressure"][2:], d2["pressure"]) and np.array_equal(d1["coeff"][2:], d2["coeff"])
    assert not np.array_equal(d2["coeff"], d3["coeff"])


def test_l_shape_grid_output_masks_the_outside() -> None:
    s = 33
    g = gen(resolution=s, domain="l_shape", mesh_size=0.05)
    d = g.generate(0, np.array([0]))
    x = np.linspace(0, 1, s)
    outside = (x[:, None] > 0.5) & (x[None, :] > 0.5)
    assert np.array_equal(d["inside"][0] == 0, outside)
    assert np.all(d["pressure"][0][outside] == 0) and np.all(d["coeff"][0][outside] == 0)
    interior = ~outside
    interior[[0, -1], :] = interior[:, [0, -1]] = False
    interior[(x[:, None] >= 0.5) & (x[None, :] >= 0.5)] = False
    assert d["pressure"][0][interior].min() > 0
    assert set(g.fields()) == {"coeff", "pressure", "inside", "residual"}


def test_mesh_output_layout_matches_grid_output_and_solver_coefficient() -> None:
    s = 17
    gm = gen(resolution=s, output="mesh", dtype="float64")
    gg = gen(resolution=s, dtype="float64")
    dm, dg = gm.generate(2, np.array([0])), gg.generate(2, np.array([0]))
    c = gm.coords()
    assert gm.dims() == {"node": s * s, "cell": 2 * (s - 1) ** 2, "corner": 3}
    nx, ny, cells = c["node_x"].data, c["node_y"].data, c["cell"].data
    assert cells.dtype == np.int32 and c["cell"].attrs["cf_role"] == "face_node_connectivity"
    assert c["mesh"].attrs["cf_role"] == "mesh_topology"
    v = np.stack([nx, ny], axis=1)[cells]
    area = 0.5 * ((v[:, 1, 0] - v[:, 0, 0]) * (v[:, 2, 1] - v[:, 0, 1]) - (v[:, 1, 1] - v[:, 0, 1]) * (v[:, 2, 0] - v[:, 0, 0]))
    assert area.min() > 0 and abs(area.sum() - 1) < 1e-12  # counter-clockwise, covering the square
    ix, iy = np.rint(nx * (s - 1)).astype(int), np.rint(ny * (s - 1)).astype(int)
    assert np.allclose(dm["pressure"][0], dg["pressure"][0][ix, iy], rtol=0, atol=1e-14)
    assert np.array_equal(dm["coeff"][0], dg["coeff"][0][ix, iy])
    # coeff_cell is the DG0 coefficient the solver used, in input cell order
    solver = gm.setup().solver
    orig = gm.mesh().topology.original_cell_index
    kappa = np.empty_like(dm["coeff_cell"][0])
    kappa[orig] = solver.kappa.x.array[solver.Q.dofmap.list[:, 0]]
    assert np.allclose(dm["coeff_cell"][0], kappa, rtol=1e-14)


def test_write_shard_validates_for_mesh_and_grid_output(tmp_path: Path) -> None:
    from solvers.generate import write_shard

    for kw in ({"resolution": 17, "domain": "perforated", "mesh_size": 0.05, "output": "mesh"}, {"resolution": 17, "domain": "disk", "mesh_size": 0.1}):
        g = gen(**kw)
        out = write_shard(g, 0, 0, 2, tmp_path / f"{kw['domain']}.nc", progress=False)
        assert validate(out) == []
        ds = read_dataset(out)
        assert ds["pressure"].shape == (2, *g.dims().values())[: ds["pressure"].ndim]
    assert ds.variables["inside"].attrs["role"] == "auxiliary"
    mesh_ds = read_dataset(tmp_path / "perforated.nc")
    assert mesh_ds.variables["cell"].attrs["start_index"] == 0


def test_domain_file_reads_any_gmsh_mesh(tmp_path: Path) -> None:
    from meshes.domains import generate_mesh, gmsh_session

    path = generate_mesh("disk", tmp_path / "disk.msh", mesh_size=0.1)
    g = gen(resolution=17, domain="file", mesh_file=str(path), output="mesh")
    x0, x1, y0, y1 = g.box
    assert 0 <= x0 < 0.01 and 0.99 < x1 <= 1 and 0 <= y0 < 0.01 and 0.99 < y1 <= 1
    d = g.generate(0, np.array([0]))
    r = np.hypot(g.coords()["node_x"].data - 0.5, g.coords()["node_y"].data - 0.5)
    assert np.all(d["pressure"][0][r > 0.5 - 1e-9] == 0) and d["pressure"][0].max() > 0
    # a mesh without a 2-D physical group is refused with a clear message
    bare = tmp_path / "bare.msh"
    with gmsh_session() as gmsh:
        gmsh.model.occ.addRectangle(0, 0, 0, 1, 1)
        gmsh.model.occ.synchronize()
        gmsh.option.setNumber("Mesh.MeshSizeMax", 0.3)
        gmsh.model.mesh.generate(2)
        gmsh.write(str(bare))
    with pytest.raises(ConfigError, match="physical group"):
        gen(resolution=9, domain="file", mesh_file=str(bare), output="mesh").dims()
    with pytest.raises(ConfigError, match="does not exist"):
        gen(resolution=9, domain="file", mesh_file=str(tmp_path / "none.msh")).generate(0, np.array([0]))


# --------------------------------------------- one coefficient function on every mesh of a domain


def test_points_map_gives_one_coefficient_function_on_every_mesh() -> None:
    """coefficient_map "points": a(x) = T(I_s[g](x)) on every mesh of the domain. The node and cell
    values of a coarse and a fine L-shape mesh are the same function (coefficient_at of either
    generator at the other's points), two-valued 12 / 3, and at the grid nodes it is darcy_fd's
    coefficient; with "grid" the interpolated 12 / 3 field takes values in between."""
    kw = {"resolution": 33, "domain": "l_shape", "output": "mesh", "coefficient_map": "points", "dtype": "float64"}
    coarse, fine = gen(mesh_size=0.1, **kw), gen(mesh_size=0.05, **kw)
    idx = np.array([0, 5])
    dc, df = coarse.generate(3, idx), fine.generate(3, idx)
    nodes_c = np.column_stack([coarse.coords()["node_x"].data, coarse.coords()["node_y"].data])
    nodes_f = np.column_stack([fine.coords()["node_x"].data, fine.coords()["node_y"].data])
    assert len(nodes_f) > 3 * len(nodes_c)
    assert np.array_equal(fine.coefficient_at(nodes_c, 3, idx), dc["coeff"])
    assert np.array_equal(coarse.coefficient_at(nodes_f, 3, idx), df["coeff"])
    centroids = nodes_c[coarse.coords()["cell"].data].mean(axis=1)
    assert np.array_equal(fine.coefficient_at(centroids, 3, idx), dc["coeff_cell"])
    assert set(np.unique(df["coeff"])) == set(np.unique(dc["coeff_cell"])) == {3.0, 12.0}
    fd = get_generator("darcy_fd").from_config({"resolution": 33}).coefficients(3, idx)
    assert np.array_equal(fine.coefficient_at(grid_points(33, (0, 1, 0, 1)), 3, idx), fd.reshape(2, -1))
    smeared = gen(mesh_size=0.05, **{**kw, "coefficient_map": "grid"}).generate(3, idx)["coeff"]
    assert ((smeared > 3) & (smeared < 12)).any()


def test_index_offset_regenerates_later_samples_on_another_mesh() -> None:
    kw = {"resolution": 17, "domain": "l_shape", "output": "mesh", "coefficient_map": "points"}
    main, shifted = gen(mesh_size=0.1, **kw), gen(mesh_size=0.05, index_offset=4, **kw)
    nodes = np.column_stack([shifted.coords()["node_x"].data, shifted.coords()["node_y"].data])
    assert np.array_equal(shifted.generate(8, np.array([0, 1]))["coeff"], main.coefficient_at(nodes, 8, np.array([4, 5])))
    assert np.array_equal(gen(resolution=17, index_offset=2).coefficients(8, np.array([0])), gen(resolution=17).coefficients(8, np.array([2])))


def test_mesh_output_sizes_come_from_the_gmsh_file_without_dolfinx(mesh_cache: Path) -> None:
    """The workflow sizes a mesh data set when it loads (SourceInfo.dims): gmsh only, no dolfinx,
    PETSc or MPI; the counts are those of the dolfinx mesh the solver reads."""
    kw = {"resolution": 17, "domain": "perforated", "mesh_size": 0.05, "output": "mesh"}
    code = (
        "import json, sys, solvers.darcy_fem as m\n"
        f"g = m.DarcyFEMGenerator.from_config(json.loads({json.dumps(json.dumps(kw))}))\n"
        "print(json.dumps(g.dims())); g.fields()\n"
        "assert not [k for k in ('dolfinx', 'petsc4py', 'mpi4py') if k in sys.modules]\n"
    )
    env = {**os.environ, "OPFLOW_MESH_CACHE": str(mesh_cache)}
    proc = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60, capture_output=True, text=True, env=env)
    lay = gen(**kw).layout()
    assert json.loads(proc.stdout) == {"node": len(lay["node_x"]), "cell": len(lay["cells"]), "corner": 3}


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"resolution": 2}, "resolution"),
        ({"coefficient_map": "nodes"}, "coefficient_map"),
        ({"index_offset": -1}, "index_offset"),
        ({"domain": "l_shape", "mesh_size": 0.6}, "mesh_size"),
        ({"domain": "l_shape", "corner": 0.9, "mesh_size": 0.2}, "narrowest arm"),
        ({"degree": 3}, "degree"),
        ({"domain": "circle"}, "domain"),
        ({"nodes": 3}, "unknown parameter"),
        ({"mesh_file": "x.msh"}, "only read with domain 'file'"),
        ({"domain": "file"}, "mesh_file"),
        ({"domain": "l_shape", "refine": 2}, "refine applies"),
        ({"domain": "perforated", "holes": [[0.5, 0.5, 0.2], [0.6, 0.5, 0.2]]}, "overlap"),
        ({"domain": "perforated", "mesh_size": 0.2}, "smallest hole radius"),
        ({"domain": "perforated", "resolution": 9}, "smallest hole radius"),  # auto size 1/8 > 0.1
        ({"mesh_size": -0.1}, "mesh_size"),
        ({"solver": "hypre"}, "solver"),
        ({"maxiter": 0}, "maxiter"),
        ({"rtol": 0.1}, "rtol"),
        ({"high": -1.0}, "high"),
    ],
)
def test_bad_params_raise_config_error(kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        gen(**kw)


def test_params_defaults_are_the_fno_protocol_and_match_darcy_fd() -> None:
    from solvers.darcy import DarcyFD

    p = DarcyFEMParams()
    assert p.fd_params() == DarcyFD.Params()
    assert (p.resolution, p.domain, p.degree, p.output, p.solver) == (421, "unit_square", 1, "grid", "mumps")
    assert p.effective_mesh_size == 1 / 420 and DarcyFEMParams(mesh_size=0.05).effective_mesh_size == 0.05


def test_construction_and_dims_do_not_import_dolfinx() -> None:
    code = (
        "import sys, solvers.darcy_fem as m\n"
        "g = m.DarcyFEMGenerator.from_config({'resolution': 421, 'domain': 'l_shape'})\n"
        "assert g.dims() == {'x': 421, 'y': 421}; g.coords(); g.fields()\n"
        "assert not [k for k in ('dolfinx', 'petsc4py', 'gmsh', 'mpi4py') if k in sys.modules]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


# ------------------------------------------------------------------------------- MPI

MPI_SCRIPT = """
import json, sys
import numpy as np
from solvers.darcy_fem import DarcyFEMGenerator
out = {}
for tag, kw in json.loads(sys.argv[2]).items():
    g = DarcyFEMGenerator.from_config(kw)
    for k, v in g.generate(3, np.arange(2)).items():
        out[tag + "/" + k] = v
    for k, v in g.coords().items():
        out[tag + "/coord/" + k] = v.data
    out[tag + "/local_cells"] = np.array(g.mesh().topology.index_map(2).size_local)
np.savez(sys.argv[1] + ".rank%d.npz" % g.comm.rank, **out)
"""

MPI_CASES = {
    "square": {"resolution": 33, "dtype": "float64"},
    "lshape_mesh": {"resolution": 33, "domain": "l_shape", "mesh_size": 0.05, "output": "mesh", "dtype": "float64"},
    "perforated_cg_p2": {"resolution": 33, "domain": "perforated", "mesh_size": 0.05, "solver": "cg", "degree": 2, "dtype": "float64"},
}


@pytest.mark.mpi
def test_two_mpi_ranks_give_the_serial_result(tmp_path: Path, mesh_cache: Path) -> None:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists() and shutil.which("mpiexec") is None:
        pytest.skip("no mpiexec")
    script = tmp_path / "run.py"
    script.write_text(MPI_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPFLOW_MESH_CACHE": str(mesh_cache), "OMP_NUM_THREADS": "1"}
    cmd = [str(mpiexec if mpiexec.exists() else "mpiexec"), "-n", "2", sys.executable, str(script), str(tmp_path / "par"), json.dumps(MPI_CASES)]
    proc = subprocess.run(cmd, env=env, timeout=120, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = np.load(tmp_path / "par.rank0.npz"), np.load(tmp_path / "par.rank1.npz")
    for tag, kw in MPI_CASES.items():
        assert 0 < int(r0[f"{tag}/local_cells"]) and 0 < int(r1[f"{tag}/local_cells"])  # really distributed
        g = DarcyFEMGenerator.from_config(kw)
        serial = g.generate(3, np.arange(2))
        assert int(r0[f"{tag}/local_cells"]) + int(r1[f"{tag}/local_cells"]) == g.mesh().topology.index_map(2).size_local
        for k, v in g.coords().items():
            assert np.array_equal(r0[f"{tag}/coord/{k}"], v.data), (tag, k)
        for k, v in serial.items():
            tol = 1e-8 if k in ("pressure",) and kw.get("solver") == "cg" else 1e-12
            for r in (r0, r1):  # every rank returns the gathered arrays
                if k == "residual":
                    assert np.all(r[f"{tag}/{k}"] <= 10 * 1e-10)
                else:
                    assert np.allclose(r[f"{tag}/{k}"], v, rtol=0, atol=tol * np.abs(v).max()), (tag, k)


def test_mesh_output_files_declare_ugrid(tmp_path: Path) -> None:
    """Mesh output is UGRID-1.0: the topology variable, data variables naming mesh and location,
    and ``Conventions = "CF-1.10 UGRID-1.0"``; grid output is plain CF."""
    from solvers.generate import write_shard

    mesh = read_dataset(write_shard(gen(resolution=5, output="mesh"), 0, 0, 1, tmp_path / "m.nc", progress=False))
    assert mesh.attrs["Conventions"] == "CF-1.10 UGRID-1.0"
    assert {k: mesh.variables["pressure"].attrs[k] for k in ("mesh", "location")} == {"mesh": "mesh", "location": "node"}
    assert mesh.variables["coeff_cell"].attrs["location"] == "face"
    grid = read_dataset(write_shard(gen(resolution=5), 0, 0, 1, tmp_path / "g.nc", progress=False))
    assert grid.attrs["Conventions"] == "CF-1.10"


def test_with_the_fem_stack_every_source_of_the_profiles_is_checked() -> None:
    """tests/pipeline/test_config_without_fem.py is the other side: without gmsh the FEM sources are named, not checked."""
    from opflow.config import load_config_files
    from pipeline import config as pipeline_config
    from workflow_helpers import PROFILES

    pipeline_config._info.cache_clear()
    pipeline_config.check_config(load_config_files([str(p) for p in PROFILES["quick"]]))
    assert pipeline_config.unavailable_sources() == {}
