"""Strided subsampling, split assignment and shard merging."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opflow.data.format import DatasetError, Variable, read_dataset, write_dataset
from opflow.data.provenance import provenance_attrs, sample_rng
from opflow.data.shards import merge_shards
from opflow.data.transforms import derive, split_indices, stride_for


def source(tmp_path: Path, n: int = 12, s: int = 13, indices: np.ndarray | None = None, name: str = "src.nc", params=None) -> Path:
    idx = np.arange(n) if indices is None else indices
    x = np.linspace(0, 1, s)
    f = np.stack([sample_rng(7, i).standard_normal((s, s)) for i in idx])
    v = {
        "x": Variable(("x",), x, {"role": "coordinate", "units": "1", "long_name": "x"}),
        "y": Variable(("y",), x, {"role": "coordinate", "units": "1", "long_name": "y"}),
        "sample_index": Variable(("sample",), idx.astype(np.int64)),
        "u": Variable(("sample", "x", "y"), f, {"role": "output", "units": "1", "long_name": "u"}),
    }
    return write_dataset(tmp_path / name, v, provenance_attrs("t", params or {"s": s}, 7))


@pytest.mark.parametrize(("fine", "coarse", "stride"), [(421, 211, 2), (421, 141, 3), (421, 106, 4), (421, 85, 5), (421, 61, 7), (421, 43, 10), (421, 421, 1)])
def test_fno_strides(fine: int, coarse: int, stride: int) -> None:
    assert stride_for(fine, coarse) == stride


def test_impossible_resolution_lists_the_valid_ones() -> None:
    with pytest.raises(DatasetError, match=r"100 is not a strided subsample of 421 nodes; choose one of \[421, 211, 141, 106, 85"):
        stride_for(421, 100)


def test_splits_train_first_test_last_and_too_many_refused() -> None:
    s = split_indices(10, 4, 3, 2)
    assert s["train"].tolist() == [0, 1, 2, 3]
    assert s["val"].tolist() == [4, 5]
    assert s["test"].tolist() == [7, 8, 9]
    with pytest.raises(DatasetError, match="raise the source's n_samples"):
        split_indices(10, 8, 3)


def test_derive_subsamples_keeping_boundaries_and_labels_splits(tmp_path: Path) -> None:
    src = source(tmp_path)
    out = derive(src, tmp_path / "d.nc", resolution=5, n_train=6, n_test=4, n_val=1, name="demo")
    ds = read_dataset(out)
    full = read_dataset(src)
    assert ds["u"].shape == (11, 5, 5)
    np.testing.assert_array_equal(ds["x"], [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(ds["sample_index"], [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11])
    np.testing.assert_array_equal(ds["split"], [0] * 6 + [2] + [1] * 4)
    np.testing.assert_array_equal(ds["u"], full["u"][ds["sample_index"]][:, ::3, ::3])
    assert ds.attrs["opflow_stride"] == 3 and ds.attrs["opflow_dataset"] == "demo"


def test_merge_shards_equals_one_piece_generation(tmp_path: Path) -> None:
    whole = source(tmp_path, n=10, name="whole.nc")
    shards = [source(tmp_path, indices=np.arange(a, b), name=f"s{a}.nc") for a, b in [(4, 7), (0, 4), (7, 10)]]
    merged = merge_shards(shards, tmp_path / "merged.nc")
    a, b = read_dataset(whole), read_dataset(merged)
    np.testing.assert_array_equal(a["u"], b["u"])
    np.testing.assert_array_equal(b["sample_index"], np.arange(10))
    assert b.attrs["opflow_shards"] == 3 and "opflow_shard" not in b.attrs


def test_merge_refuses_gaps_and_mixed_parameters(tmp_path: Path) -> None:
    s1 = source(tmp_path, indices=np.arange(0, 3), name="a.nc")
    s2 = source(tmp_path, indices=np.arange(4, 6), name="b.nc")
    with pytest.raises(DatasetError, match="contiguous"):
        merge_shards([s1, s2], tmp_path / "m.nc")
    s3 = source(tmp_path, indices=np.arange(3, 6), name="c.nc", params={"s": 99})
    with pytest.raises(DatasetError, match="different parameters"):
        merge_shards([s1, s3], tmp_path / "m.nc")
    assert not (tmp_path / "m.nc").exists()


def test_periodic_grids_use_point_count_strides(tmp_path: Path) -> None:
    assert stride_for(256, 64, periodic=True) == 4
    with pytest.raises(DatasetError, match="periodic grid; choose one of"):
        stride_for(256, 60, periodic=True)
    x = np.arange(16) / 16
    f = np.arange(3 * 16 * 16, dtype=float).reshape(3, 16, 16)
    v = {
        "x": Variable(("x",), x, {"role": "coordinate", "units": "1", "long_name": "x", "grid_type": "periodic"}),
        "y": Variable(("y",), x, {"role": "coordinate", "units": "1", "long_name": "y", "grid_type": "periodic"}),
        "sample_index": Variable(("sample",), np.arange(3)),
        "w": Variable(("sample", "x", "y"), f, {"role": "output", "units": "1", "long_name": "w"}),
    }
    src = write_dataset(tmp_path / "p.nc", v, provenance_attrs("t", {}, 0))
    ds = read_dataset(derive(src, tmp_path / "q.nc", resolution=4, n_train=2, n_test=1))
    np.testing.assert_array_equal(ds["x"], [0, 0.25, 0.5, 0.75])
    np.testing.assert_array_equal(ds["w"], f[:, ::4, ::4])


@pytest.mark.parametrize("command", ["derive", "merge"])
def test_too_little_room_is_refused_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    """Before: the whole copy ran, then ``NetCDF: HDF error`` (derive blamed the source as damaged) and
    a temporary stayed. The output's size is known from the inputs, so a full disk is refused at once."""
    import opflow.atomic as atomic
    from opflow.data.errors import DiskFullError

    src = source(tmp_path, n=12, s=33)
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 1000)
    out = tmp_path / "out" / "x.nc"
    with pytest.raises(DiskFullError) as e:
        if command == "derive":
            derive(src, out, resolution=17, n_train=6, n_test=2)
        else:
            merge_shards([src], out)
    size = src.stat().st_size
    need = size if command == "merge" else int(size * 8 / 12 * (17 / 33) ** 2)
    assert str(e.value).startswith(
        f"{out}: no space left on device: the file system {atomic.mount_point(out)} has 1000 bytes free; "
        f"the file needs about {need} bytes"
    ), str(e.value)
    assert "nothing was written" in str(e.value)
    assert list((tmp_path / "out").iterdir()) == []


def test_validate_holds_a_derived_file_to_its_split_rule(tmp_path: Path) -> None:
    """Before: a derived file whose samples were all relabelled train, or whose split was gone, passed."""
    import netCDF4

    from opflow.data.format import validate

    src = source(tmp_path)
    d = derive(src, tmp_path / "d.nc", n_train=8, n_test=3, n_val=1)
    assert validate(d) == []
    with netCDF4.Dataset(d, "a") as nc:
        nc.variables["split"][:] = 0
    assert validate(d) == [
        "split has 12 train, 0 test, 0 val samples but opflow_split_rule records 8 train, 3 test, 1 val "
        "(the dataset's configured sizes); derive it again (opflow derive)"
    ]
    with netCDF4.Dataset(d, "a") as nc:
        nc.renameVariable("split", "part")
    assert validate(d) == [
        "part: a per-sample variable without 'role'; give it one of ['input', 'output', 'auxiliary', 'coordinate']",  # the split renamed
        "no 'split' variable, but it is a derived file whose opflow_split_rule records 8 train, 3 test, 1 val; derive it again (opflow derive)",
    ]
    # a file without a split rule: the split must still hold test samples
    with netCDF4.Dataset(d, "a") as nc:
        nc.renameVariable("part", "split")
        nc.delncattr("opflow_split_rule")
    assert validate(d) == ["split has no test samples (12 train, 0 test, 0 val): there is nothing to evaluate on; derive it again with --test N"]
    assert validate(src) == [], "a source (no split) is not held to a split"
