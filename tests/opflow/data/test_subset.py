"""The carried subset of a dataset file (opflow/data/subset.py): only what the runs read, the same datasets."""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import pytest

from opflow.data.errors import DatasetError
from opflow.data.format import Variable, read_dataset, split_variable, validate, write_dataset
from opflow.data.provenance import provenance_attrs
from opflow.data.subset import differences, is_current, subset_source, variables_read, write_subset
from opflow.records import file_sha256, training_split_digest

#: the elasticity972 pairs: no inputs but the points, the Gauss points' stress out (config/default.yaml)
QPOINTS = {"dataset": "e", "model": "m", "task": {"inputs": [], "outputs": ["stress_qpoint"]}, "view": {"kind": "mesh"}}


def _elasticity_like(path: Path, n: int = 6, pad: int = 12) -> Path:
    """An elasticity-shaped file: ragged nodes and Gauss points (float64 coordinates, padding junk), nodal fields,
    connectivity and a void code that the Gauss-point runs never read."""
    rng = np.random.default_rng(3)
    counts = rng.integers(pad - 4, pad + 1, n).astype(np.int32)
    xy = rng.uniform(0, 1, (2, n, pad))  # full float64 mantissas, as the FEM writes them
    for i, c in enumerate(counts):
        xy[:, i, c:] = 777.0
    unit = {"units": "1"}
    v = {
        "sample_index": Variable(("sample",), np.arange(n)),
        "split": split_variable(np.array([0] * (n - 2) + [1] * 2, np.int8)),
        "node_x": Variable(("sample", "node"), rng.uniform(0, 1, (n, 5)), {"role": "coordinate", "long_name": "x", **unit}),
        "node_y": Variable(("sample", "node"), rng.uniform(0, 1, (n, 5)), {"role": "coordinate", "long_name": "y", **unit}),
        "stress": Variable(("sample", "node"), rng.uniform(1, 9, (n, 5)).astype(np.float32), {"role": "output", "long_name": "s", **unit}),
        "cell": Variable(("sample", "cell", "corner"), np.tile(np.array([[0, 1, 2, 3]], np.int32), (n, 1, 1)), {"role": "auxiliary"}),
        "qpoint_x": Variable(("sample", "qpoint"), xy[0], {"role": "auxiliary", "long_name": "x of the Gauss points", **unit}),
        "qpoint_y": Variable(("sample", "qpoint"), xy[1], {"role": "auxiliary", "long_name": "y of the Gauss points", **unit}),
        "qpoint_count": Variable(("sample",), counts, {"role": "auxiliary"}),
        "stress_qpoint": Variable(("sample", "qpoint"), (np.sin(6 * xy[0]) + xy[1]).astype(np.float32), {"role": "auxiliary", "long_name": "sq", **unit}),
        "radius_code": Variable(("sample", "code"), rng.uniform(0.2, 0.4, (n, 7)), {"role": "input", "long_name": "r", **unit}),
    }
    return write_dataset(path, v, provenance_attrs("test-elasticity", {"n": n}, 0))


def test_the_subset_keeps_what_the_runs_read_stores_float32_where_the_view_does_and_gives_the_same_datasets(tmp_path: Path) -> None:
    src = _elasticity_like(tmp_path / "all.nc")
    info = write_subset(src, tmp_path / "carried/all.nc", [QPOINTS])
    dst = tmp_path / "carried/all.nc"
    assert info["variables"] == ["sample_index", "split", "qpoint_x", "qpoint_y", "qpoint_count", "stress_qpoint"]  # the file's order
    assert info["float32"] == ["qpoint_x", "qpoint_y"] and info["bytes"] == dst.stat().st_size < src.stat().st_size
    assert differences(src, dst, [QPOINTS]) == []  # every array of both splits' datasets, bit for bit
    kept = read_dataset(dst)
    assert set(kept.variables) == {"sample", *info["variables"]}
    assert kept.variables["qpoint_x"].data.dtype == np.float32
    np.testing.assert_array_equal(kept["qpoint_x"], read_dataset(src)["qpoint_x"].astype(np.float32))
    # the task's output takes its role, so that the file passes the specification's checker
    assert kept.variables["stress_qpoint"].attrs["role"] == "output" and validate(dst) == []
    assert kept.attrs["opflow_params_hash"] == read_dataset(src).attrs["opflow_params_hash"]  # the provenance stays
    assert kept.attrs["opflow_subset_of"] == "all.nc" and subset_source(dst) == file_sha256(src) and subset_source(src) is None
    assert kept.attrs["opflow_subset_variables"] == "sample_index split qpoint_x:float32 qpoint_y:float32 qpoint_count stress_qpoint"
    assert is_current(src, dst, [QPOINTS]) and not is_current(src, tmp_path / "absent.nc", [QPOINTS])
    nodal = {"dataset": "n", "model": "m", "task": {"inputs": [], "outputs": ["stress"]}, "view": {"kind": "mesh"}}
    assert not is_current(src, dst, [QPOINTS, nodal])  # other runs read other variables: written again
    # written again from the same file for the same runs: the same data (a carried checkpoint resumes on it)
    write_subset(src, tmp_path / "again.nc", [QPOINTS])
    assert training_split_digest(tmp_path / "again.nc") == training_split_digest(dst) != training_split_digest(src)
    # cut again from the subset itself (what `opflow queue --carry` does where data/ holds the subset): the same data
    write_subset(dst, tmp_path / "of_subset.nc", [QPOINTS])
    assert training_split_digest(tmp_path / "of_subset.nc") == training_split_digest(dst)


def test_the_variables_of_every_run_are_kept(tmp_path: Path) -> None:
    src = _elasticity_like(tmp_path / "all.nc")
    nodal = {"dataset": "n", "model": "m", "task": {"inputs": ["radius_code"], "outputs": ["stress"]}, "view": {"kind": "mesh"}}
    assert variables_read(src, [nodal]) == ["sample_index", "split", "node_x", "node_y", "stress", "cell", "radius_code"]
    info = write_subset(src, tmp_path / "both.nc", [QPOINTS, nodal])
    assert set(info["variables"]) == {"sample_index", "split", "node_x", "node_y", "stress", "cell", "qpoint_x", "qpoint_y", "qpoint_count",
                                      "stress_qpoint", "radius_code"}
    assert differences(src, tmp_path / "both.nc", [QPOINTS, nodal]) == []
    with pytest.raises(DatasetError, match="at least one run"):
        write_subset(src, tmp_path / "none.nc", [])
    with pytest.raises(DatasetError, match="never written over the file it is cut from"):
        write_subset(src, src, [QPOINTS])
    assert validate(src) == [] and "radius_code" in read_dataset(src).variables  # untouched


def test_a_subset_that_does_not_give_the_same_datasets_is_named(tmp_path: Path) -> None:
    src = _elasticity_like(tmp_path / "all.nc")
    dst = tmp_path / "carried.nc"
    write_subset(src, dst, [QPOINTS])
    with netCDF4.Dataset(dst, "a") as nc:
        nc["stress_qpoint"][0, 0] = nc["stress_qpoint"][0, 0] + np.float32(1e-3)
    assert differences(src, dst, [QPOINTS]) == ["e/m train: target differs"]
    nodal = {"dataset": "n", "model": "m", "task": {"inputs": [], "outputs": ["stress"]}, "view": {"kind": "mesh"}}
    with pytest.raises(DatasetError, match=r"task outputs \[.stress.\] are not variables of the file"):  # a run it was not made for
        differences(src, dst, [nodal])
