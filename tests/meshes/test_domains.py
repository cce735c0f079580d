"""gmsh Darcy domains: exact areas to mesh tolerance, physical groups, meshio-readable, reproducible;
every written mesh passes the validity check and bad mesh sizes stop before meshing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from meshes.domains import (
    BOUNDARY_TAG,
    DEFAULT_HOLES,
    DOMAIN_TAG,
    DOMAINS,
    MIN_ANGLE_DEG,
    MeshStats,
    cached_mesh,
    check_mesh,
    exact_area,
    generate_mesh,
    gmsh_session,
    mesh_stats,
    open_msh,
)
from opflow.data.errors import ConfigError


def _read(path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    import meshio

    m = meshio.read(path)
    return m.points[:, :2], m.cells_dict["triangle"], m


def _mesh_area(points: np.ndarray, tri: np.ndarray) -> float:
    a = points[tri[:, 1]] - points[tri[:, 0]]
    b = points[tri[:, 2]] - points[tri[:, 0]]
    return float(0.5 * np.abs(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]).sum())


def _n_circles(name: str) -> int:
    return {"perforated": len(DEFAULT_HOLES), "disk": 1}.get(name, 0)


@pytest.mark.parametrize("name", DOMAINS)
def test_area_equals_exact_area_to_mesh_tolerance(name: str, tmp_path: Path) -> None:
    """Polygonal domains are meshed exactly; circles are inscribed polygons whose area deficit is
    about pi h^2 / 6 per circle (chords c: deficit c^3 / (12 R) each, 2 pi R / c of them), so it
    must shrink like h^2."""
    errors = []
    for h in (0.05, 0.025):
        pts, tri, _ = _read(generate_mesh(name, tmp_path / f"{name}-{h}.msh", mesh_size=h))
        err = abs(_mesh_area(pts, tri) - exact_area(name))
        errors.append(err)
        if _n_circles(name) == 0:
            assert err < 1e-12
        else:
            assert err <= 1.5 * _n_circles(name) * math.pi * h * h / 6
    if _n_circles(name):
        assert 3.0 < errors[0] / errors[1] < 5.0  # second order in h


@pytest.mark.parametrize("name", DOMAINS)
def test_physical_groups_meshio_and_boundary(name: str, tmp_path: Path) -> None:
    path = generate_mesh(name, tmp_path / f"{name}.msh", mesh_size=0.05)
    pts, tri, m = _read(path)
    assert set(m.field_data) == {"domain", "boundary"}
    assert tuple(m.field_data["domain"]) == (DOMAIN_TAG, 2)
    assert tuple(m.field_data["boundary"]) == (BOUNDARY_TAG, 1)
    assert len(tri) > 100 and np.unique(tri).size == len(pts)  # every node is used by a triangle
    # bounding box is the unit square (the coefficient grid's box)
    assert np.allclose([pts[:, 0].min(), pts[:, 1].min()], 0, atol=1e-3)
    assert np.allclose([pts[:, 0].max(), pts[:, 1].max()], 1, atol=1e-3)
    # the boundary group holds exactly the edges that belong to one triangle
    edges = np.sort(np.concatenate([tri[:, [0, 1]], tri[:, [1, 2]], tri[:, [2, 0]]]), axis=1)
    uniq, count = np.unique(edges, axis=0, return_counts=True)
    exterior = {tuple(e) for e in uniq[count == 1]}
    lines = {tuple(e) for e in np.sort(m.cells_dict["line"], axis=1)}
    assert lines == exterior
    with open_msh(path) as gmsh:
        groups = {(d, t): gmsh.model.getPhysicalName(d, t) for d, t in gmsh.model.getPhysicalGroups()}
    assert groups == {(2, DOMAIN_TAG): "domain", (1, BOUNDARY_TAG): "boundary"}


@pytest.mark.parametrize("name", DOMAINS)
def test_mesh_stats_count_and_measure_the_written_mesh(name: str, tmp_path: Path) -> None:
    """mesh_stats (gmsh only) agrees with an independent reading (meshio): node and triangle
    counts, area, shortest angle and longest edge; the written mesh meets the validity rules."""
    h = 0.05
    stats = mesh_stats(generate_mesh(name, tmp_path / f"{name}.msh", mesh_size=h))
    pts, tri, _ = _read(tmp_path / f"{name}.msh")
    assert (stats.nodes, stats.triangles) == (len(pts), len(tri))
    assert abs(stats.area - _mesh_area(pts, tri)) < 1e-12
    v = pts[tri]
    edges = np.linalg.norm(v - np.roll(v, 1, axis=1), axis=-1)
    assert np.isclose(stats.max_edge, edges.max()) and np.isclose(stats.min_edge, edges.min())
    a, b, c = np.roll(edges, 1, axis=1).T, np.roll(edges, 2, axis=1).T, edges.T  # law of cosines
    smallest = np.degrees(np.arccos(np.clip((a * a + b * b - c * c) / (2 * a * b), -1, 1))).min()
    assert abs(stats.min_angle_deg - smallest) < 1e-6
    assert stats.min_signed_area > 0 and stats.min_angle_deg >= MIN_ANGLE_DEG and stats.max_edge <= 1.5 * h
    check_mesh(stats, name, h)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"min_signed_area": -1e-4}, "inverted"),
        ({"min_angle_deg": 5.0}, "smallest angle"),
        ({"max_edge": 0.2}, "longest edge"),
        ({"area": 0.74}, "area"),
    ],
)
def test_check_mesh_names_each_violation_and_the_mesh_size(change: dict, match: str) -> None:
    good = MeshStats(nodes=400, triangles=700, area=0.75, min_angle_deg=30.0, min_signed_area=1e-4, max_edge=0.06, min_edge=0.03)
    check_mesh(good, "l_shape", 0.05)
    with pytest.raises(ConfigError, match=rf"mesh_size 0.05 is not a valid mesh: .*{match}"):
        check_mesh(MeshStats(**{**good.__dict__, **change}), "l_shape", 0.05)


def test_square_boundary_nodes_lie_on_the_sides(tmp_path: Path) -> None:
    pts, _, m = _read(generate_mesh("square", tmp_path / "sq.msh", mesh_size=0.1))
    b = pts[np.unique(m.cells_dict["line"])]
    on_side = np.isclose(b, 0, atol=1e-12) | np.isclose(b, 1, atol=1e-12)
    assert on_side.any(axis=1).all()


def test_same_parameters_give_the_same_mesh_and_no_temp_files(tmp_path: Path) -> None:
    kw = {"mesh_size": 0.04, "holes": ((0.3, 0.3, 0.1), (0.7, 0.6, 0.15))}
    p1 = generate_mesh("perforated", tmp_path / "a" / "p.msh", **kw)
    p2 = generate_mesh("perforated", tmp_path / "b" / "p.msh", **kw)
    (x1, t1, _), (x2, t2, _) = _read(p1), _read(p2)
    assert np.array_equal(x1, x2) and np.array_equal(t1, t2)
    assert sorted(q.name for q in (tmp_path / "a").iterdir()) == ["p.msh"]
    assert abs(_mesh_area(x1, t1) - exact_area("perforated", holes=kw["holes"])) < 2 * 2 * math.pi * 0.04**2 / 6


def test_cached_mesh_reuses_the_file_and_keys_on_parameters(tmp_path: Path) -> None:
    p1 = cached_mesh("l_shape", mesh_size=0.1, cache_dir=tmp_path)
    stamp = p1.stat().st_mtime_ns
    assert cached_mesh("l_shape", mesh_size=0.1, cache_dir=tmp_path) == p1
    assert p1.stat().st_mtime_ns == stamp
    p2 = cached_mesh("l_shape", mesh_size=0.1, cache_dir=tmp_path, corner=0.4)
    p3 = cached_mesh("l_shape", mesh_size=0.05, cache_dir=tmp_path)
    assert len({p1, p2, p3}) == 3
    pts, tri, _ = _read(p2)
    assert abs(_mesh_area(pts, tri) - (1 - 0.6**2)) < 1e-12


def test_gmsh_session_leaves_an_outside_session_alone() -> None:
    import gmsh

    assert not gmsh.isInitialized()
    gmsh.initialize(readConfigFiles=False, interruptible=False)
    try:
        gmsh.model.add("outside")
        gmsh.option.setNumber("Mesh.MeshSizeMax", 0.3)
        with gmsh_session() as g:
            assert g.model.getCurrent() != "outside"
        assert gmsh.isInitialized()
        assert "outside" in gmsh.model.list()
        assert gmsh.option.getNumber("Mesh.MeshSizeMax") == 0.3
    finally:
        gmsh.finalize()
    with gmsh_session():
        assert gmsh.isInitialized()
    assert not gmsh.isInitialized()


@pytest.mark.parametrize(
    ("name", "kw", "match"),
    [
        ("circle", {"mesh_size": 0.1}, "unknown domain"),
        ("square", {"mesh_size": 0.0}, "mesh_size"),
        ("square", {"mesh_size": 0.1, "holes": ((0.5, 0.5, 0.1),)}, "takes no option"),
        ("perforated", {"mesh_size": 0.05, "holes": ((0.5, 0.5, 0.6),)}, "inside"),
        ("perforated", {"mesh_size": 0.05, "holes": ((0.3, 0.5, 0.15), (0.5, 0.5, 0.1))}, "overlap"),
        ("perforated", {"mesh_size": 0.2}, "smallest hole radius"),
        ("l_shape", {"mesh_size": 0.1, "corner": 1.2}, "corner"),
        ("l_shape", {"mesh_size": 0.3, "corner": 0.8}, "narrowest arm"),
        ("square", {"mesh_size": 0.6}, "mesh_size"),
        ("square", {"mesh_size": 5e-4}, "mesh_size >= 1e-3"),
    ],
)
def test_bad_domains_raise_config_error_before_meshing(name: str, kw: dict, match: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=match):
        generate_mesh(name, tmp_path / "x.msh", **kw)
    assert not list(tmp_path.iterdir())


def test_missing_or_foreign_mesh_file_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"), open_msh(tmp_path / "none.msh"):
        pass
    bad = tmp_path / "bad.msh"
    bad.write_text("not a mesh\n")
    with pytest.raises(ConfigError, match="cannot read"), open_msh(bad):
        pass
