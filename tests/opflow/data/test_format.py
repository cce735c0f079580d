"""The dataset file format: round trip, xarray compatibility, atomic writes, clear errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from opflow.data.format import (
    FORMAT,
    DatasetError,
    DatasetWriter,
    Variable,
    read_dataset,
    split_codes,
    split_variable,
    summary,
    validate,
    write_dataset,
)
from opflow.data.provenance import provenance_attrs


def grid_variables(n: int = 6, s: int = 9, seed: int = 0) -> dict[str, Variable]:
    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 1.0, s)
    return {
        "x": Variable(("x",), x, {"role": "coordinate", "units": "1"}),
        "y": Variable(("y",), x, {"role": "coordinate", "units": "1"}),
        "sample_index": Variable(("sample",), np.arange(n, dtype=np.int64)),
        "coeff": Variable(("sample", "x", "y"), rng.random((n, s, s)).astype(np.float32), {"units": "1", "long_name": "a", "role": "input"}),
        "pressure": Variable(("sample", "x", "y"), rng.random((n, s, s)), {"units": "1", "long_name": "u", "role": "output"}),
        "split": split_variable(split_codes(["train"] * (n - 2) + ["test"] * 2)),
    }


@pytest.fixture
def dataset_file(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "d.nc", grid_variables(), provenance_attrs("unit-test", {"s": 9}, seed=3))


def test_round_trip_preserves_arrays_dtypes_and_attributes(dataset_file: Path) -> None:
    ref = grid_variables()
    ds = read_dataset(dataset_file)
    for name, v in ref.items():
        np.testing.assert_array_equal(ds[name], v.data)
        assert ds[name].dtype == v.data.dtype
        assert ds.variables[name].dims == v.dims
    assert ds.variables["coeff"].attrs["role"] == "input"
    assert ds.attrs["opflow_generator"] == "unit-test"
    assert ds.attrs["opflow_format"] == FORMAT
    assert ds.names_with_role("output") == ["pressure"]


def test_split_and_sample_selection(dataset_file: Path) -> None:
    test = read_dataset(dataset_file, ["pressure"], split="test")
    np.testing.assert_array_equal(test["sample_index"], [4, 5])
    np.testing.assert_array_equal(test["pressure"], grid_variables()["pressure"].data[4:])
    some = read_dataset(dataset_file, ["coeff"], samples=np.array([0, 2, 3]))
    np.testing.assert_array_equal(some["coeff"], grid_variables()["coeff"].data[[0, 2, 3]])


def test_xarray_opens_the_file(dataset_file: Path) -> None:
    xr = pytest.importorskip("xarray")
    with xr.open_dataset(dataset_file) as ds:
        assert ds["pressure"].dims == ("sample", "x", "y")
        assert ds.attrs["opflow_generator"] == "unit-test"
        np.testing.assert_allclose(ds["pressure"].values, grid_variables()["pressure"].data)


def test_file_is_chunked_per_sample_and_compressed(dataset_file: Path) -> None:
    import netCDF4

    with netCDF4.Dataset(dataset_file) as nc:
        v = nc.variables["pressure"]
        assert v.chunking() == [1, 9, 9]
        assert v.filters()["zlib"] is True


def test_validate_accepts_good_file_and_names_problems(tmp_path: Path, dataset_file: Path) -> None:
    assert validate(dataset_file) == []
    v = grid_variables()
    del v["pressure"].attrs["units"]
    bad = write_dataset(tmp_path / "bad.nc", v, {"opflow_generator": "x"})
    problems = validate(bad)
    assert any("pressure: missing attribute 'units'" in p for p in problems)
    assert any("opflow_params" in p for p in problems)


def test_missing_truncated_and_foreign_files_give_clear_errors(tmp_path: Path, dataset_file: Path) -> None:
    with pytest.raises(DatasetError, match="no such dataset file"):
        read_dataset(tmp_path / "nope.nc")
    truncated = tmp_path / "truncated.nc"
    truncated.write_bytes(dataset_file.read_bytes()[: dataset_file.stat().st_size // 3])
    with pytest.raises(DatasetError, match="truncated or foreign|damaged"):
        read_dataset(truncated)
    foreign = tmp_path / "foreign.nc"
    foreign.write_text("not a netcdf file")
    with pytest.raises(DatasetError, match="not a readable NetCDF-4 file"):
        read_dataset(foreign)
    import netCDF4

    with netCDF4.Dataset(tmp_path / "other.nc", "w") as nc:
        nc.createDimension("t", 3)
    with pytest.raises(DatasetError, match="opflow_format"):
        read_dataset(tmp_path / "other.nc")


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "x.nc"
    spec = {"u": (("sample", "x"), np.float64, {"role": "output", "units": "1", "long_name": "u"})}
    with pytest.raises(RuntimeError):
        with DatasetWriter(out, {"sample": 4, "x": 3}, spec, {}) as w:
            w.write("u", np.zeros((2, 3)), 0)
            raise RuntimeError("solver died")
    assert list(tmp_path.iterdir()) == []


def test_incomplete_write_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "x.nc"
    spec = {"u": (("sample", "x"), np.float64, {"role": "output", "units": "1", "long_name": "u"})}
    with pytest.raises(DatasetError, match="never written"):
        with DatasetWriter(out, {"sample": 4, "x": 3}, spec, {}) as w:
            w.write("u", np.zeros((2, 3)), 0)
    assert not out.exists()


def test_non_finite_field_values_are_rejected(tmp_path: Path) -> None:
    spec = {"u": (("sample", "x"), np.float64, {"role": "output", "units": "1", "long_name": "u"})}
    with pytest.raises(DatasetError, match="non-finite"):
        with DatasetWriter(tmp_path / "x.nc", {"sample": 1, "x": 2}, spec, {}) as w:
            w.write("u", np.array([[1.0, np.nan]]), 0)
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_leaves_no_finished_looking_file(tmp_path: Path) -> None:
    out = tmp_path / "killed.nc"
    script = textwrap.dedent(
        f"""
        import time, numpy as np
        from opflow.data.format import DatasetWriter
        spec = {{"u": (("sample", "x"), np.float64, {{"role": "output", "units": "1", "long_name": "u"}})}}
        with DatasetWriter({str(out)!r}, {{"sample": 1000, "x": 64}}, spec, {{}}) as w:
            for i in range(1000):
                w.write("u", np.ones((1, 64)), i)
                if i == 10:
                    print("started", flush=True)
                time.sleep(0.01)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    leftovers = list(tmp_path.iterdir())
    assert all(p.name.startswith(".killed.nc.tmp-") for p in leftovers)
    for p in leftovers:  # even a stray temp file is rejected by the reader
        with pytest.raises(DatasetError):
            read_dataset(p)


def test_summary_lists_variables_splits_and_provenance(dataset_file: Path) -> None:
    text = summary(dataset_file)
    assert "splits: train=4, test=2" in text
    assert "pressure('sample', 'x', 'y') float64 [output] u (1)" in text
    assert "generator: unit-test" in text
    assert "seed_rule:" in text


def test_variable_shape_mismatch_is_reported() -> None:
    with pytest.raises(DatasetError, match="one dimension name per array axis"):
        Variable(("sample",), np.zeros((2, 2)))
