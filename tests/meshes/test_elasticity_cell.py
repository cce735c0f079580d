"""The Geo-FNO unit cell with a random void: the void prior, the gmsh geometry and its meshes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from meshes.elasticity_cell import BOUNDARY_TAGS, CellMeshSpec, VoidPrior, cell_mesh, write_cell_msh
from opflow.data.errors import ConfigError
from opflow.data.provenance import sample_rng

PRIOR = VoidPrior()


def coeffs(i: int, seed: int = 1) -> np.ndarray:
    return PRIOR.sample(sample_rng(seed, i))


def polar(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = points - 0.5
    return np.hypot(p[:, 0], p[:, 1]), np.arctan2(p[:, 1], p[:, 0])


# ------------------------------------------------------------------------------------ the prior


def test_prior_covariance_matches_the_karhunen_loeve_series() -> None:
    """rt(theta) = 4 sum_l (pi^2 l^2 + 9)^(-1/2) (a_l cos l theta + b_l sin l theta) is stationary
    with covariance k(d) = 16 sum_l cos(l d) / (pi^2 l^2 + 9): the sample covariance of 4000 draws
    matches it within 4 standard errors."""
    n = 4000
    rng = np.random.default_rng(0)
    theta = np.array([0.0, 0.4, 1.3, 3.0])
    rt = np.stack([PRIOR.log_radius_field(theta, PRIOR.sample(rng)) for _ in range(n)])
    ell = np.arange(1, 6)
    d = theta[:, None] - theta[None, :]
    exact = 16 * (np.cos(np.multiply.outer(d, ell)) / (np.pi**2 * ell**2 + 9)).sum(-1)
    sample = rt.T @ rt / n
    stderr = np.sqrt((exact**2 + np.outer(np.diag(exact), np.diag(exact))) / n)
    assert np.all(np.abs(sample - exact) < 4 * stderr)
    assert exact[0, 0] == pytest.approx(1.500, abs=1e-3)  # pointwise std 1.22
    assert np.abs(rt.mean(0)).max() < 4 * np.sqrt(exact[0, 0] / n)


def test_radius_code_and_range() -> None:
    c = coeffs(0)
    code = PRIOR.code(c, 42)
    assert code.shape == (42,) and code[0] == code[-1]
    np.testing.assert_allclose(code, PRIOR.radius(np.linspace(0, 2 * np.pi, 42), c))
    r = np.concatenate([PRIOR.radius(np.linspace(0, 2 * np.pi, 200), coeffs(i)) for i in range(50)])
    assert r.min() > 0.2 and r.max() < 0.4 and r.max() - r.min() > 0.1  # the voids are far from circles
    assert PRIOR.void_area(np.zeros(10)) == pytest.approx(np.pi * 0.3**2, rel=1e-14)


def test_same_seed_same_coefficients_and_bad_shapes_rejected() -> None:
    np.testing.assert_array_equal(coeffs(3, 5), coeffs(3, 5))
    assert not np.array_equal(coeffs(3, 5), coeffs(4, 5))
    with pytest.raises(ConfigError, match=r"shape \(10,\)"):
        PRIOR.radius(np.zeros(3), np.zeros(9))


# ---------------------------------------------------------------------------------- the mesh


@pytest.mark.parametrize("topology", ["ogrid", "unstructured"])
@pytest.mark.parametrize("cell_type", ["quadrilateral", "triangle"])
def test_void_boundary_nodes_lie_on_r_theta_and_area_is_exact(topology: str, cell_type: str) -> None:
    """Every node of the void boundary (mid-nodes included) is at radius r(theta) up to the spline
    fit (< 1e-5; about 1e-6 at 128 spline points), and the cells, all positively oriented, fill
    exactly 1 - |void| up to the quadratic boundary approximation (< 5e-5)."""
    for i in range(3):
        c = coeffs(i)
        mesh = cell_mesh(c, spec=CellMeshSpec(topology=topology, cell_type=cell_type))
        rho, theta = polar(mesh.nodes[mesh.boundary_nodes("void")])
        assert np.abs(rho - PRIOR.radius(theta, c)).max() < 1e-5
        areas = mesh.cell_areas()
        assert areas.min() > 0
        assert abs(areas.sum() - (1 - PRIOR.void_area(c))) < 5e-5


def test_spline_fit_converges_with_the_number_of_points() -> None:
    c = coeffs(1, seed=0)  # a void with sharp features
    errors = []
    counts = (32, 64, 128, 256)
    for n in counts:
        mesh = cell_mesh(c, spec=CellMeshSpec(spline_points=n))
        rho, theta = polar(mesh.nodes[mesh.boundary_nodes("void")])
        errors.append(np.abs(rho - PRIOR.radius(theta, c)).max())
    order = -np.polyfit(np.log(counts), np.log(errors), 1)[0]
    assert order > 3.5, f"spline errors {errors}: observed order {order:.2f} (cubic interpolation: 4)"


def test_area_error_falls_at_fourth_order_with_quadratic_elements() -> None:
    """With the spline fit made negligible (512 points), the area error of the Q9 mesh comes from
    the quadratic boundary edges and falls like n_theta^-4."""
    c = coeffs(2)
    exact = 1 - PRIOR.void_area(c)
    counts = (16, 32, 64)
    errors = [
        abs(cell_mesh(c, spec=CellMeshSpec(n_theta=n, spline_points=512)).cell_areas().sum() - exact) for n in counts
    ]
    order = -np.polyfit(np.log(counts), np.log(errors), 1)[0]
    assert order > 3.5, f"area errors {errors}: observed order {order:.2f}"


def test_boundary_groups_lie_on_their_edges() -> None:
    mesh = cell_mesh(coeffs(0))
    x = mesh.nodes
    assert set(mesh.boundary) == set(BOUNDARY_TAGS)
    np.testing.assert_array_equal(x[mesh.boundary_nodes("bottom"), 1], 0.0)
    np.testing.assert_array_equal(x[mesh.boundary_nodes("top"), 1], 1.0)
    np.testing.assert_array_equal(x[mesh.boundary_nodes("left"), 0], 0.0)
    np.testing.assert_array_equal(x[mesh.boundary_nodes("right"), 0], 1.0)
    # each square side is covered once: its segments' lengths add up to 1
    for name, axis in (("bottom", 0), ("top", 0), ("left", 1), ("right", 1)):
        seg = x[mesh.boundary[name][:, :2], axis]
        assert np.abs(seg[:, 1] - seg[:, 0]).sum() == pytest.approx(1.0, abs=1e-12)


def test_ogrid_counts_are_fixed_and_match_the_published_set() -> None:
    for i in range(3):
        mesh = cell_mesh(coeffs(i))
        assert (mesh.n_cells, mesh.n_nodes, mesh.cells.shape[1]) == (108, 504, 9)  # 108 x 9 = 972 Gauss points
    tri = cell_mesh(coeffs(0), spec=CellMeshSpec(cell_type="triangle", order=1))
    assert (tri.n_cells, tri.n_nodes) == (216, 36 * 4) == CellMeshSpec(cell_type="triangle", order=1).fixed_counts()


def test_unstructured_counts_are_plausible_and_within_the_padding_bound() -> None:
    for h in (0.09, 0.05):
        spec = CellMeshSpec(topology="unstructured", mesh_size=h)
        cap_cells, cap_nodes = spec.max_counts()
        for i in range(3):
            c = coeffs(i)
            mesh = cell_mesh(c, spec=spec)
            per_area = mesh.n_cells * h**2 / (1 - PRIOR.void_area(c))
            assert 0.7 < per_area < 1.6, f"h={h}: {mesh.n_cells} cells"
            assert mesh.n_cells <= cap_cells and mesh.n_nodes <= cap_nodes
            assert set(np.unique(mesh.cells)) == set(range(mesh.n_nodes))


def test_same_seed_gives_an_identical_mesh() -> None:
    spec = CellMeshSpec(topology="unstructured")
    a, b = cell_mesh(coeffs(4), spec=spec), cell_mesh(coeffs(4), spec=spec)
    np.testing.assert_array_equal(a.nodes, b.nodes)
    np.testing.assert_array_equal(a.cells, b.cells)
    other = cell_mesh(coeffs(5), spec=spec)
    assert a.nodes.shape != other.nodes.shape or not np.array_equal(a.nodes, other.nodes)


# ------------------------------------------------------------------------------------ files


def test_msh_file_is_written_atomically_and_read_by_meshio(tmp_path: Path) -> None:
    import meshio

    path = write_cell_msh(tmp_path / "cell.msh", coeffs(0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell.msh"]
    m = meshio.read(path)
    assert set(m.field_data) == {"domain", *BOUNDARY_TAGS}
    assert m.field_data["domain"].tolist() == [1, 2]
    assert m.cells_dict["quad9"].shape == (108, 9)
    assert m.cells_dict["line3"].shape[0] == 4 * 9 + 36  # 9 segments per side, 36 around the void
    mesh = cell_mesh(coeffs(0))
    np.testing.assert_allclose(m.points[:, :2], mesh.nodes)
    with pytest.raises(ConfigError, match=r"must end in \.msh"):
        write_cell_msh(tmp_path / "cell.vtk", coeffs(0))


def test_gmsh_state_is_left_as_found() -> None:
    import gmsh

    assert not gmsh.isInitialized()
    cell_mesh(coeffs(0))
    assert not gmsh.isInitialized()  # finalised what it initialised
    gmsh.initialize(readConfigFiles=False, interruptible=False)
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.model.add("mine")
        gmsh.option.setNumber("Mesh.ElementOrder", 1)
        cell_mesh(coeffs(0))
        assert gmsh.isInitialized() and "mine" in gmsh.model.list()
        assert not [m for m in gmsh.model.list() if m.startswith("elasticity-cell")]  # its model is removed
        assert gmsh.option.getNumber("Mesh.ElementOrder") == 1
    finally:
        gmsh.finalize()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_theta": 30}, "multiple of 4"),
        ({"order": 3}, "order must be 1 or 2"),
        ({"spline_points": 50}, "spline_points must be a multiple of 4"),
        ({"mesh_size": 0.001}, "mesh_size must lie in"),
        ({"topology": "hex"}, "topology must be"),
    ],
)
def test_bad_mesh_options_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CellMeshSpec(**kwargs)
