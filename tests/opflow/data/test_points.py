"""Point-set views: 1-D series (shared and per-sample grids, globals) and ragged meshes (padding round trip)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from opflow.data.errors import DatasetError
from opflow.data.format import Variable, split_variable, write_dataset
from opflow.data.points import PointDataset
from opflow.data.provenance import provenance_attrs
from opflow.data.torch_data import collate, output_mask
from opflow.data.views import get_kind, kind_of, make_dataset


def _series_file(path: Path, n: int = 6, m: int = 11, per_sample: bool = False, split: bool = True) -> Path:
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 2, (n, m)), axis=1) if per_sample else np.linspace(0.0, 2.0, m)
    x = rng.standard_normal((n, m))
    v = {
        "sample_index": Variable(("sample",), np.arange(n)),
        "x": Variable(("sample", "t"), x, {"role": "input", "units": "1", "long_name": "x"}),
        "y0": Variable(("sample",), 10.0 + np.arange(n), {"role": "input", "units": "1", "long_name": "y(0)"}),
        "z0": Variable(("sample",), -1.0 * np.arange(n), {"role": "input", "units": "1", "long_name": "z(0)"}),
        "y": Variable(("sample", "t"), 2 * x, {"role": "output", "units": "1", "long_name": "y"}),
        "z": Variable(("sample", "t"), x**2, {"role": "output", "units": "1", "long_name": "z"}),
    }
    if per_sample:
        v["t"] = Variable(("sample", "t"), t, {"role": "coordinate", "units": "1", "long_name": "time"})
    else:
        v["t"] = Variable(("t",), t, {"role": "coordinate", "units": "1", "long_name": "time", "grid": "uniform", "dt": 0.2})
    if split:
        v["split"] = split_variable(np.array([0] * (n - 2) + [1] * 2, np.int8))
    return write_dataset(path, v, provenance_attrs("test-series", {"per_sample": per_sample}, 0))


def test_series_points_inputs_and_globals(tmp_path: Path) -> None:
    f = _series_file(tmp_path / "s.nc")
    ds = make_dataset(f, "train", None, "auto")
    assert isinstance(ds, PointDataset) and ds.kind == "series" and kind_of(ds) is get_kind("series")
    assert ds.global_names == ("y0", "z0") and ds.task.inputs == ("x", "y0", "z0")
    assert (ds.coord_dim, ds.in_channels, ds.out_channels, ds.global_channels) == (1, 1, 2, 2) and ds.grid_shape == (11,)
    item = ds[2]
    np.testing.assert_allclose(item["coords"][:, 0].numpy(), np.linspace(0, 2, 11), rtol=1e-6)
    torch.testing.assert_close(item["globals"], torch.tensor([12.0, -2.0]))
    torch.testing.assert_close(item["target"][:, 0], 2 * item["inputs"][:, 0])
    b = collate([ds[0], ds[3]])
    assert b["globals"].shape == (2, 2) and "mask" not in b
    # globals are normalised on the training split: (10, 11, 12, 13) and (0, -1, -2, -3)
    g = ds.fit_normalizers("unit_gaussian", "unit_gaussian").globals.state_dict()
    torch.testing.assert_close(g["mean"], torch.tensor([11.5, -1.5]))
    torch.testing.assert_close(g["scale"], torch.tensor([1.25**0.5, 1.25**0.5]) * (1 + 1e-5))


def test_series_on_per_sample_grids_and_files_without_splits(tmp_path: Path) -> None:
    f = _series_file(tmp_path / "r.nc", per_sample=True, split=False)
    with pytest.raises(DatasetError, match="has no 'split' variable"):
        make_dataset(f, "test", None, "series")
    ds = make_dataset(f, None, {"inputs": ["x"], "outputs": ["y"]}, "series")  # every sample: an evaluation set
    assert len(ds) == 6 and ds.per_sample_coords and ds.grid_shape is None and ds.globals is None
    from opflow.data.format import read_dataset

    raw = read_dataset(f)
    np.testing.assert_allclose(ds[4]["coords"][:, 0].numpy(), raw["t"][4], rtol=1e-6)
    assert not torch.equal(ds[4]["coords"], ds[3]["coords"])


def _mesh_file(path: Path, counts: list[int], pad: int = 9) -> tuple[Path, list[dict[str, np.ndarray]]]:
    """A ragged point-cloud file padded to ``pad`` points (padding filled with junk on purpose)."""
    rng = np.random.default_rng(1)
    n = len(counts)
    raw = []
    arrays = {k: np.full((n, pad), 777.0) for k in ("node_x", "node_y", "stress", "qpoint_x", "qpoint_y", "stress_qpoint")}
    for i, c in enumerate(counts):
        xy = rng.uniform(0, 1, (c, 2))
        s = np.sin(3 * xy[:, 0]) + xy[:, 1] ** 2
        raw.append({"xy": xy, "stress": s})
        arrays["node_x"][i, :c], arrays["node_y"][i, :c], arrays["stress"][i, :c] = xy[:, 0], xy[:, 1], s
        arrays["qpoint_x"][i, :c], arrays["qpoint_y"][i, :c], arrays["stress_qpoint"][i, :c] = xy[:, 0] + 1, xy[:, 1], -s
    v = {
        "sample_index": Variable(("sample",), np.arange(n)),
        "split": split_variable(np.array([0] * (n - 1) + [1], np.int8)),
        "node_count": Variable(("sample",), np.array(counts, np.int32), {"role": "auxiliary"}),
        "qpoint_count": Variable(("sample",), np.array(counts, np.int32), {"role": "auxiliary"}),
        "radius_code": Variable(("sample", "code"), rng.uniform(0.2, 0.4, (n, 4)), {"role": "input", "units": "1", "long_name": "r"}),
        "cell": Variable(("sample", "cell", "corner"), np.tile(np.array([[0, 1, 2], [-1, -1, -1]], np.int32), (n, 1, 1)), {"role": "auxiliary"}),
        "cell_count": Variable(("sample",), np.ones(n, np.int32), {"role": "auxiliary"}),
    }
    for k, a in arrays.items():
        role = {"node_x": "coordinate", "node_y": "coordinate", "stress": "output"}.get(k, "auxiliary")
        v[k] = Variable(("sample", "node" if not k.startswith(("qpoint", "stress_q")) else "qpoint"), a, {"role": role, "units": "1", "long_name": k})
    return write_dataset(path, v, provenance_attrs("test-mesh", {}, 0)), raw


def test_ragged_mesh_round_trip_through_padding(tmp_path: Path) -> None:
    counts = [5, 9, 7, 6]
    f, raw = _mesh_file(tmp_path / "m.nc", counts)
    ds = make_dataset(f, "train", {"inputs": [], "outputs": ["stress"]}, "auto")
    assert ds.kind == "mesh" and ds.coord_names == ("node_x", "node_y") and ds.in_channels == 0
    assert kind_of(ds) is get_kind("mesh")
    assert ds.counts.tolist() == [5, 9, 7] and ds.point_mask().sum(1).tolist() == [5, 9, 7]
    for i in range(3):  # items are cut to their counts: no padding junk
        item = ds[i]
        np.testing.assert_allclose(item["coords"].numpy(), raw[i]["xy"], rtol=1e-6)
        np.testing.assert_allclose(item["target"][:, 0].numpy(), raw[i]["stress"], rtol=1e-6)
    b = collate([ds[0], ds[2]])  # re-padded to this batch's maximum (7), zeros, with a mask
    assert b["coords"].shape == (2, 7, 2) and b["mask"].tolist() == [[True] * 5 + [False] * 2, [True] * 7]
    assert torch.all(b["target"][0, 5:] == 0) and output_mask(b) is b["mask"]
    back = [b["target"][k][b["mask"][k]][:, 0].numpy() for k in range(2)]
    np.testing.assert_allclose(back[0], raw[0]["stress"], rtol=1e-6)
    np.testing.assert_allclose(back[1], raw[2]["stress"], rtol=1e-6)
    # normalisers see real points only: the junk 777 padding would move the mean far away
    y = ds.fit_normalizers("unit_gaussian", "unit_gaussian").outputs.state_dict()
    real = np.concatenate([r["stress"] for r in raw[:3]])
    assert float(y["mean"][0]) == pytest.approx(real.mean(), rel=1e-5)
    with pytest.raises(ValueError, match="pointwise normaliser needs every sample on the same points"):
        ds.fit_normalizers("unit_gaussian", "pointwise")
    np.testing.assert_array_equal(ds.sample_cells(1), [[0, 1, 2]])  # the -1 padded cell dropped


def test_gauss_point_set_and_globals_from_vectors(tmp_path: Path) -> None:
    f, raw = _mesh_file(tmp_path / "q.nc", [5, 9, 7, 6])
    ds = make_dataset(f, "test", {"inputs": ["radius_code"], "outputs": ["stress_qpoint"]}, "mesh")
    assert ds.coord_names == ("qpoint_x", "qpoint_y") and ds.cells is None  # qpoints by name; cells are node-based
    assert ds.global_names == ("radius_code",) and ds.global_channels == 4 and ds.in_channels == 0
    np.testing.assert_allclose(ds[0]["coords"].numpy(), raw[3]["xy"] + [1, 0], rtol=1e-6)
    with pytest.raises(DatasetError, match="view 'series' needs 1-D coordinates"):
        make_dataset(f, "test", {"inputs": [], "outputs": ["stress"]}, "series")
