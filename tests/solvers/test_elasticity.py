"""The elasticity solver and the ``elasticity`` generator (Geo-FNO unit cell), as specifications.

Verification: a patch test on distorted meshes (uniform stress reproduced to round-off), the
Kirsch plate with a hole (exact tractions on the outer edges, so no finite-width error; observed
order of the stress error and the concentration factor 3), the homogeneous hyperelastic state under
a dead load, the approach of the hyperelastic solution to its small-strain limit linearly in the
load, MPI (2 ranks) against serial, and the error paths.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from meshes.domains import gmsh_session
from meshes.elasticity_cell import DOMAIN_TAG, CellMesh, CellMeshSpec, VoidPrior, cell_mesh, extract_mesh
from opflow.data.errors import ConfigError
from opflow.data.format import read_dataset, validate
from opflow.data.provenance import sample_rng
from solvers.base import SolverError, get_generator
from solvers.elasticity import (
    Elasticity,
    ElasticityParams,
    ElasticitySolver,
    LinearElastic,
    NewtonOptions,
    RivlinSaunders,
    on_line,
    quadrature_points_per_cell,
    solve_cell,
)
from solvers.generate import write_shard

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def linear_quad() -> ElasticitySolver:
    return ElasticitySolver(LinearElastic(1.0, 0.3), newton=NewtonOptions(rtol=1e-10, atol=1e-14))


@pytest.fixture(scope="module")
def hyper_quad() -> ElasticitySolver:
    return ElasticitySolver(RivlinSaunders(), newton=NewtonOptions(rtol=1e-10, atol=1e-12))


@pytest.fixture(scope="module")
def cell() -> CellMesh:
    return cell_mesh(VoidPrior().sample(sample_rng(7, 3)))


def distorted_square_q9(n: int, amplitude: float, seed: int = 0) -> CellMesh:
    """n x n nine-node quadrilaterals on the unit square, interior nodes (mid-nodes included)
    moved at random by up to ``amplitude`` element widths: straight-sided cells become curved."""
    m = 2 * n + 1
    g = np.linspace(0.0, 1.0, m)
    x, y = np.meshgrid(g, g, indexing="xy")
    nodes = np.stack([x.ravel(), y.ravel()], 1)
    interior = (x.ravel() > 0) & (x.ravel() < 1) & (y.ravel() > 0) & (y.ravel() < 1)
    rng = np.random.default_rng(seed)
    nodes[interior] += amplitude / n * rng.uniform(-1, 1, (interior.sum(), 2))
    idx = np.arange(m * m).reshape(m, m)  # idx[row j (y), col i (x)]
    cells = []
    for j in range(n):
        for i in range(n):
            r, c = 2 * j, 2 * i
            cells.append([idx[r, c], idx[r, c + 2], idx[r + 2, c + 2], idx[r + 2, c],  # corners (ccw)
                          idx[r, c + 1], idx[r + 1, c + 2], idx[r + 2, c + 1], idx[r + 1, c],  # edge mids
                          idx[r + 1, c + 1]])  # centre
    return CellMesh(nodes, np.array(cells), "quadrilateral", 2)


def unstructured_square_p2(h: float, amplitude: float, seed: int = 0) -> CellMesh:
    """gmsh P2 triangles on the unit square, interior nodes moved by up to ``amplitude * h``."""
    with gmsh_session("square") as g:
        s = g.model.occ.addRectangle(0, 0, 0, 1, 1)
        g.model.occ.synchronize()
        g.model.addPhysicalGroup(2, [s], DOMAIN_TAG, name="domain")
        g.option.setNumber("Mesh.MeshSizeMax", h)
        g.option.setNumber("Mesh.ElementOrder", 2)
        g.model.mesh.generate(2)
        mesh = extract_mesh(g)
    x = mesh.nodes
    interior = (x[:, 0] > 1e-12) & (x[:, 0] < 1 - 1e-12) & (x[:, 1] > 1e-12) & (x[:, 1] < 1 - 1e-12)
    x[interior] += amplitude * h * np.random.default_rng(seed).uniform(-1, 1, (interior.sum(), 2))
    return mesh


def quarter_plate(a: float, side: float, n: int) -> CellMesh:
    """Structured Q9 mesh of [0, side]^2 minus the quarter disc r < a (two transfinite patches
    split by the diagonal; n cells along each arc and each radial line)."""
    with gmsh_session("kirsch") as g:
        occ = g.model.occ
        c0 = occ.addPoint(0, 0, 0)
        pa, pb, pd = occ.addPoint(a, 0, 0), occ.addPoint(0, a, 0), occ.addPoint(a / np.sqrt(2), a / np.sqrt(2), 0)
        qx, qc, qy = occ.addPoint(side, 0, 0), occ.addPoint(side, side, 0), occ.addPoint(0, side, 0)
        arc1, arc2 = occ.addCircleArc(pa, c0, pd), occ.addCircleArc(pd, c0, pb)
        lines = [occ.addLine(a0, b0) for a0, b0 in ((pa, qx), (qx, qc), (qc, qy), (qy, pb), (pd, qc))]
        bottom, right, top, left, diag = lines
        s1 = occ.addPlaneSurface([occ.addCurveLoop([bottom, right, diag, arc1])])
        s2 = occ.addPlaneSurface([occ.addCurveLoop([diag, top, left, arc2])])
        occ.remove([(0, c0)])
        occ.synchronize()
        for cv in (arc1, arc2, *lines):
            g.model.mesh.setTransfiniteCurve(cv, n + 1)
        for s in (s1, s2):
            g.model.mesh.setTransfiniteSurface(s)
            g.model.mesh.setRecombine(2, s)
        g.model.addPhysicalGroup(2, [s1, s2], DOMAIN_TAG, name="domain")
        g.option.setNumber("Mesh.ElementOrder", 2)
        g.option.setNumber("Mesh.SecondOrderIncomplete", 0)
        g.model.mesh.generate(2)
        g.option.setNumber("Mesh.ElementOrder", 1)
        return extract_mesh(g)


def kirsch(x: np.ndarray, a: float = 1.0, s: float = 1.0) -> np.ndarray:
    """Kirsch's stress (2, 2, n) around a hole of radius a in an infinite plate under remote
    uniaxial tension s along x (plane stress or strain alike)."""
    r, t = np.hypot(x[0], x[1]), np.arctan2(x[1], x[0])
    q = (a / r) ** 2
    c2, s2 = np.cos(2 * t), np.sin(2 * t)
    srr = s / 2 * (1 - q) + s / 2 * (1 - 4 * q + 3 * q**2) * c2
    stt = s / 2 * (1 + q) - s / 2 * (1 + 3 * q**2) * c2
    srt = -s / 2 * (1 + 2 * q - 3 * q**2) * s2
    c, sn = np.cos(t), np.sin(t)
    sxx = srr * c * c + stt * sn * sn - 2 * srt * c * sn
    syy = srr * sn * sn + stt * c * c + 2 * srt * c * sn
    sxy = (srr - stt) * c * sn + srt * (c * c - sn * sn)
    return np.array([[sxx, sxy], [sxy, syy]])


def von_mises_np(s: np.ndarray) -> np.ndarray:
    return np.sqrt(s[0, 0] ** 2 - s[0, 0] * s[1, 1] + s[1, 1] ** 2 + 3 * s[0, 1] ** 2)


def rollers_and_top_traction(solver: ElasticitySolver, mesh: CellMesh, load: float):
    """u_y = 0 on y = 0, u_x = 0 on x = 0, normal traction ``load`` on y = 1 (sides free)."""
    return solver.solve(
        mesh,
        clamps=[(on_line(1, 0.0), 1), (on_line(0, 0.0), 0)],
        traction=on_line(1, 1.0),
        boundary_stress=np.array([[0.0, 0.0], [0.0, load]]),
    )


# ------------------------------------------------------------------------------ verification


@pytest.mark.parametrize("kind", ["q9-distorted", "p2-unstructured"])
def test_patch_test_uniform_traction_gives_uniform_stress_exactly(kind: str) -> None:
    """Linear plane stress, uniaxial traction S on a roller-supported square: the exact solution
    u = (-nu S x / E, S y / E), sigma = diag(0, S) lies in the isoparametric space, so every cell
    (curved ones included) must reproduce it to round-off."""
    young, nu, s = 2.0e5, 0.3, 100.0
    if kind == "q9-distorted":
        mesh, cell_type = distorted_square_q9(5, 0.1), "quadrilateral"
    else:
        mesh, cell_type = unstructured_square_p2(0.25, 0.1), "triangle"
    solver = ElasticitySolver(LinearElastic(young, nu), cell=cell_type, degree=2)
    sol = rollers_and_top_traction(solver, mesh, s)
    exact = np.stack([-nu * s / young * mesh.nodes[:, 0], s / young * mesh.nodes[:, 1]], 1)
    assert np.abs(sol.displacement - exact).max() <= 1e-10 * np.abs(exact).max()
    np.testing.assert_allclose(sol.stress_qpoints, s, rtol=1e-10)
    np.testing.assert_allclose(sol.stress_nodes, s, rtol=1e-10)
    assert sol.qweights.sum() == pytest.approx(1.0, rel=1e-12)  # the weights integrate the area


def test_kirsch_plate_with_hole_stress_converges_at_order_two_and_concentration_is_three(linear_quad) -> None:
    """Quarter plate [0, 4]^2 minus a quarter hole of radius 1, symmetry rollers, and on the outer
    edges the exact Kirsch tractions: the exact solution on this finite plate is Kirsch's (no
    finite-width correction needed). Q2 stresses converge like h^2 in L2; the von Mises stress at
    the hole's top (0, 1) tends to 3 S."""
    side, errors, kt = 4.0, [], []
    for n in (8, 16, 32):
        mesh = quarter_plate(1.0, side, n)
        sol = linear_quad.solve(
            mesh,
            clamps=[(on_line(0, 0.0), 0), (on_line(1, 0.0), 1)],
            traction=lambda x: (np.abs(x[0] - side) < 1e-9) | (np.abs(x[1] - side) < 1e-9),
            boundary_stress=kirsch,
        )
        w, q = sol.qweights.ravel(), sol.qpoints.reshape(-1, 2).T
        exact = von_mises_np(kirsch(q))
        errors.append(np.sqrt((w * (sol.stress_qpoints.ravel() - exact) ** 2).sum() / (w * exact**2).sum()))
        kt.append(sol.stress_nodes[np.argmin(np.hypot(mesh.nodes[:, 0], mesh.nodes[:, 1] - 1.0))])
    order = -np.polyfit(np.log([8, 16, 32]), np.log(errors), 1)[0]
    assert order > 1.8, f"stress L2 errors {errors}: observed order {order:.2f}, expected 2"
    assert errors[-1] < 1e-3
    kt_err = np.abs(np.array(kt) - 3.0)
    assert np.all(np.diff(kt_err) < 0), f"concentration factors {kt} do not approach 3 monotonically"
    assert kt[-1] == pytest.approx(3.0, abs=0.01)  # measured 2.996


@pytest.mark.parametrize("variant", ["energy", "nnfem"])
def test_hyperelastic_homogeneous_state_under_dead_load(variant: str, hyper_quad) -> None:
    """Roller-supported square, nominal (dead) traction S on the top: the deformation is
    homogeneous, F = diag(l1, l2), the nominal stress P = diag(0, S) and the Cauchy stress
    sigma = P F^T = diag(0, S l2), so von Mises = S (1 + u_y(top)); incompressible and uniaxial:
    l1 = l3 = l2^(-1/2). The nominal stress of an incompressible isotropic material in uniaxial
    tension is P = 2 (l - l^-2)(W1 + W2 / l) with W1 = dW/dI1, W2 = dW/dI2: W1 = C1, W2 = C2 for
    the Rivlin-Saunders energy, W1 = C1 + 2 C2 I1, W2 = -C2 for NNFEM's variant."""
    s = 2.0e5  # large: strains about 0.1
    m = RivlinSaunders(variant=variant)
    solver = hyper_quad if variant == "energy" else ElasticitySolver(m, newton=hyper_quad.newton)
    mesh = distorted_square_q9(3, 0.1)
    sol = rollers_and_top_traction(solver, mesh, s)
    l2 = 1.0 + sol.displacement[np.argmax(mesh.nodes[:, 1]), 1]
    l1 = 1.0 + sol.displacement[np.argmax(mesh.nodes[:, 0]), 0]
    assert l2 > 1.05
    np.testing.assert_allclose(sol.stress_qpoints, s * l2, rtol=1e-9)
    np.testing.assert_allclose(sol.stress_nodes, s * l2, rtol=1e-9)
    assert l1 == pytest.approx(l2**-0.5, rel=1e-9)
    i1 = l2**2 + 2 / l2
    w1, w2 = (m.c1, m.c2) if variant == "energy" else (m.c1 + 2 * m.c2 * i1, -m.c2)
    assert s == pytest.approx(2 * (l2 - l2**-2) * (w1 + w2 / l2), rel=1e-9)


def test_small_loads_approach_the_linearised_material_linearly(hyper_quad, cell) -> None:
    """Rivlin-Saunders vs plane-stress linear elasticity with E = 6 (C1 + C2), nu = 1/2 on a unit
    cell: the relative difference is first order in the load (slope 1 in log-log)."""
    lin = ElasticitySolver(RivlinSaunders().small_strain_limit(), newton=NewtonOptions(rtol=1e-10, atol=1e-14))
    assert lin.material.young == pytest.approx(6 * (1.863e5 + 9.79e3))
    loads = np.array([1e2, 1e3, 1e4])
    diffs = []
    for t in loads:
        a, b = solve_cell(hyper_quad, cell, t), solve_cell(lin, cell, t)
        diffs.append(np.linalg.norm(a.displacement - b.displacement) / np.linalg.norm(b.displacement))
    slope = np.polyfit(np.log(loads), np.log(diffs), 1)[0]
    assert slope == pytest.approx(1.0, abs=0.05), f"differences {diffs}"
    # first-order effects of size (load / shear modulus) x (stress concentration, about 4 here):
    # at the benchmark load 100 the response is linear to about 0.1 % (measured 1.0e-3)
    assert diffs[0] < 5 * loads[0] / RivlinSaunders().shear_modulus


# ------------------------------------------------------------------------------------ the cell


def test_cell_solution_is_consistent(hyper_quad, cell) -> None:
    """On the benchmark cell: the clamped edge does not move, the top moves up, the quadrature
    weights integrate the cell's area, nodal and quadrature stresses agree in range, and Newton
    converges quadratically in every load step. (The force balance on the top, 100 x 1, is not
    checked here: the solution holds von Mises stresses only, not the traction.)"""
    sol = solve_cell(hyper_quad, cell)
    bottom = cell.boundary_nodes("bottom")
    assert np.abs(sol.displacement[bottom]).max() == 0.0
    assert sol.displacement[cell.boundary_nodes("top"), 1].min() > 0
    assert sol.qweights.sum() == pytest.approx(cell.cell_areas().sum(), rel=1e-10)
    assert sol.stress_nodes.min() >= 0 and sol.stress_qpoints.min() >= 0
    assert 0.8 < sol.stress_nodes.max() / sol.stress_qpoints.max() < 1.3
    # quadratic convergence: one correction and one check per load step, at most one more where the
    # first correction lands just above rtol (load step 2 needs 3 on this machine's PETSc build since
    # 2026-11-25: [2, 3, 2, 2, 2, 2, 2, 2, 2, 2]; it was [2] * 10 before)
    its = sol.newton_iterations
    assert len(its) == 10 and max(its) <= 3 and its.count(2) >= 8, its
    assert sol.qpoints.shape == (108, 9, 2)


def test_projection_and_averaging_agree_away_from_the_boundary(cell) -> None:
    avg = solve_cell(ElasticitySolver(RivlinSaunders()), cell)
    prj = solve_cell(ElasticitySolver(RivlinSaunders(), nodal_stress="projection"), cell)
    np.testing.assert_array_equal(avg.stress_qpoints, prj.stress_qpoints)
    rel = np.abs(avg.stress_nodes - prj.stress_nodes) / avg.stress_qpoints.mean()
    assert np.median(rel) < 0.02


@pytest.mark.mpi
def test_two_mpi_ranks_give_the_serial_result(hyper_quad, cell, tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            import numpy as np
            from mpi4py import MPI
            from meshes.elasticity_cell import VoidPrior, cell_mesh
            from opflow.data.provenance import sample_rng
            from solvers.elasticity import ElasticitySolver, NewtonOptions, RivlinSaunders, solve_cell
            comm = MPI.COMM_WORLD
            mesh = cell_mesh(VoidPrior().sample(sample_rng(7, 3))) if comm.rank == 0 else None
            solver = ElasticitySolver(RivlinSaunders(), newton=NewtonOptions(rtol=1e-10, atol=1e-12), comm=comm)
            sol = solve_cell(solver, mesh)
            if comm.rank == 0:
                print("RESULT", json.dumps({"size": comm.size, "max_vm": float(sol.stress_qpoints.max()),
                      "uy": sol.displacement[:, 1].tolist(), "nodal": sol.stress_nodes.tolist()}))
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    mpiexec = Path(sys.executable).parent / "mpiexec"
    run = subprocess.run([str(mpiexec), "-n", "2", sys.executable, str(script)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.split("RESULT", 1)[1])
    assert out["size"] == 2
    serial = solve_cell(hyper_quad, cell)
    assert out["max_vm"] == pytest.approx(float(serial.stress_qpoints.max()), rel=1e-8)
    scale = np.abs(serial.displacement).max()
    np.testing.assert_allclose(out["uy"], serial.displacement[:, 1], rtol=1e-8, atol=1e-8 * scale)
    np.testing.assert_allclose(out["nodal"], serial.stress_nodes, rtol=1e-8)


# ---------------------------------------------------------------------------------- errors


def test_non_converged_newton_raises_with_index_and_seed(cell) -> None:
    solver = ElasticitySolver(RivlinSaunders(), newton=NewtonOptions(max_it=1, rtol=1e-12, atol=0.0, retries=1))
    with pytest.raises(SolverError, match=r"Newton did not converge .*20 load steps.*\(sample 5, seed 11\)"):
        solve_cell(solver, cell, index=5, seed=11)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"topology": "hex"}, r"topology: 'hex' is not one of \['ogrid', 'unstructured'\]"),
        ({"ogrid_n_theta": 30}, r"n_theta must be a positive multiple of 4"),
        ({"order": 3}, r"order must be 1 or 2"),
        ({"material": "linear", "poisson": 0.7}, r"Poisson ratio must lie in \(-1, 0.5\]"),
        ({"c1": -1.0}, r"need C1 > 0"),
        ({"load_steps": 0}, r"load_steps >= 1"),
        ({"radius_min": 0.3, "radius_span": 0.3}, r"r_min \+ r_span < 0.5"),
        ({"traction": 0.0}, r"traction must be a finite non-zero number"),
        ({"mesh_size": 1.0}, r"mesh_size must lie in"),
        ({"target": "cells"}, r"target: 'cells' is not one of \['nodes', 'gauss'\]"),
        ({"material": "neo_hookean"}, r"material: 'neo_hookean' is not one of"),
    ],
)
def test_bad_parameters_are_config_errors(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Elasticity.from_config(values, where="sources.elasticity.params")


# ------------------------------------------------------------------------------- generator


def test_generator_is_registered_and_cheap_to_construct() -> None:
    gen = get_generator("elasticity").from_config({})
    assert isinstance(gen, Elasticity) and gen._solver is None  # nothing compiled yet
    assert gen.dims() == {"node": 504, "cell": 108, "corner": 9, "qpoint": 972, "code": 42, "mode": 10}
    unstructured = Elasticity(ElasticityParams(topology="unstructured", mesh_size=0.09))
    d = unstructured.dims()
    assert d["cell"] > 150 and d["node"] > 4 * d["cell"] and d["qpoint"] == 9 * d["cell"]


def test_generator_writes_a_valid_reproducible_file(tmp_path: Path) -> None:
    gen = Elasticity(ElasticityParams(target="gauss"))
    path = write_shard(gen, 3, 0, 2, tmp_path / "e.nc", progress=False)
    again = write_shard(Elasticity(ElasticityParams(target="gauss")), 3, 1, 2, tmp_path / "f.nc", progress=False)
    assert validate(path) == []
    ds, ds1 = read_dataset(path), read_dataset(again)
    np.testing.assert_array_equal(ds["stress_qpoint"][1], ds1["stress_qpoint"][0])  # sample 1 alone
    roles = {n: ds.variables[n].attrs.get("role") for n in ds.variables}
    assert roles["qpoint_x"] == roles["qpoint_y"] == "coordinate" and roles["stress_qpoint"] == "output"
    assert roles["radius_code"] == "input" and roles["stress"] == "auxiliary"
    assert ds["stress_qpoint"].shape == (2, 972) and ds["cell"].shape == (2, 108, 9)
    assert np.all(ds["node_count"] == 504) and np.all(ds["qpoint_count"] == 972)
    # the code is the radius of the void boundary nodes' polar curve at the code angles
    prior = VoidPrior()
    coeffs = prior.sample(sample_rng(3, 1))
    np.testing.assert_allclose(ds["void_coefficients"][1], coeffs)
    np.testing.assert_allclose(ds["radius_code"][1], prior.radius(np.linspace(0, 2 * np.pi, 42), coeffs))
    assert ds["radius_code"][1][0] == ds["radius_code"][1][-1]
    assert np.all((ds["radius_code"] > 0.2) & (ds["radius_code"] < 0.4))
    # quadrature weights integrate the cell area 1 - |void|
    area = ds["qpoint_weight"].sum(axis=1)
    np.testing.assert_allclose(area, [1 - prior.void_area(prior.sample(sample_rng(3, i))) for i in (0, 1)], rtol=1e-5)


def test_unstructured_samples_are_padded_with_counts(tmp_path: Path) -> None:
    gen = Elasticity(ElasticityParams(topology="unstructured", mesh_size=0.12, target="nodes"))
    out = gen.generate(0, np.array([0, 1]))
    d = gen.dims()
    for k in range(2):
        n, c = int(out["node_count"][k]), int(out["cell_count"][k])
        assert 0 < n < d["node"] and 0 < c < d["cell"]
        assert np.all(out["cell"][k, c:] == -1) and out["cell"][k, :c].max() == n - 1
        assert np.all(out["stress"][k, n:] == 0) and np.all(out["stress"][k, :n] > 0)
        assert int(out["qpoint_count"][k]) == 9 * c
    assert out["node_count"][0] != out["node_count"][1] or out["cell_count"][0] != out["cell_count"][1]


def test_a_mesh_larger_than_the_padding_is_a_clear_error() -> None:
    gen = Elasticity(ElasticityParams(topology="unstructured", mesh_size=0.12, max_cells=20))
    with pytest.raises(SolverError, match=r"more than the padded sizes .*raise params.max_cells.*\(sample 4, seed 9\)"):
        gen.generate(9, np.array([4]))


def test_mesh_spec_counts_match_the_ogrid() -> None:
    assert CellMeshSpec().fixed_counts() == (108, 504)


@pytest.mark.parametrize("cell", ["triangle", "quadrilateral"])
def test_quadrature_point_counts_equal_basix_without_importing_it(cell: str) -> None:
    """The workflow sizes the ``qpoint`` dimension at load time, also where basix is not installed."""
    import basix

    for degree in range(41):
        pts, _ = basix.make_quadrature(basix.CellType[cell], degree)
        assert quadrature_points_per_cell(cell, degree) == pts.shape[0], (cell, degree)
