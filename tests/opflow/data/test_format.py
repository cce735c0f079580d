"""The dataset file format: round trip, xarray compatibility, atomic writes, clear errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
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
        "x": Variable(("x",), x, {"role": "coordinate", "units": "1", "long_name": "x"}),
        "y": Variable(("y",), x, {"role": "coordinate", "units": "1", "long_name": "y"}),
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


def test_the_environment_sets_the_zlib_level_of_merged_and_derived_files_not_their_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OPFLOW_DATA_COMPLEVEL=0 (the GPU leases' data, scripts/device_run.sh): shards, merge and derive write
    uncompressed files holding the same values, and a run's data fingerprint does not tell them apart."""
    import netCDF4

    from opflow.data.shards import merge_shards
    from opflow.data.transforms import derive
    from opflow.records import data_fingerprint

    def pipeline(folder: Path) -> Path:
        folder.mkdir()
        shards = []
        for a, b in ((0, 4), (4, 10)):
            v = grid_variables(n=b - a)
            v["sample_index"] = Variable(("sample",), np.arange(a, b, dtype=np.int64))
            del v["split"]
            shards.append(write_dataset(folder / f"s{a}.nc", v, provenance_attrs("unit-test", {"s": 9}, seed=3)))
        src = merge_shards(shards, folder / "src.nc")
        return derive(src, folder / "d.nc", resolution=5, n_train=3, n_test=2, name="d")

    packed = pipeline(tmp_path / "zlib")
    monkeypatch.setenv("OPFLOW_DATA_COMPLEVEL", "0")
    plain = pipeline(tmp_path / "plain")
    for name in ("s0.nc", "src.nc", "d.nc"):
        with netCDF4.Dataset(tmp_path / "zlib" / name) as z, netCDF4.Dataset(tmp_path / "plain" / name) as p:
            assert z.variables["pressure"].filters()["zlib"] is True
            assert p.variables["pressure"].filters()["zlib"] is False
            assert p.variables["pressure"].chunking() == z.variables["pressure"].chunking()
    a, b = read_dataset(packed), read_dataset(plain)
    for name in ("coeff", "pressure", "sample", "split", "x"):
        np.testing.assert_array_equal(a[name], b[name])
    assert data_fingerprint(plain) == data_fingerprint(packed)
    assert validate(plain) == []
    monkeypatch.setenv("OPFLOW_DATA_COMPLEVEL", "9")
    with netCDF4.Dataset(write_dataset(tmp_path / "nine.nc", grid_variables(), {})) as nine:
        assert nine.variables["pressure"].filters()["complevel"] == 9


@pytest.mark.parametrize("value", ["fast", "10", "-1", "4.5"])
def test_a_bad_zlib_level_in_the_environment_is_refused_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OPFLOW_DATA_COMPLEVEL", value)
    with pytest.raises(DatasetError, match=r"OPFLOW_DATA_COMPLEVEL=.*whole number from 0 \(uncompressed\) to 9; unset it"):
        write_dataset(tmp_path / "d.nc", grid_variables(), {})
    assert list(tmp_path.iterdir()) == []


def test_validate_accepts_good_file_and_names_problems(tmp_path: Path, dataset_file: Path) -> None:
    assert validate(dataset_file) == []
    v = grid_variables()
    del v["pressure"].attrs["units"]
    bad = write_dataset(tmp_path / "bad.nc", v, {"opflow_generator": "x"})
    problems = validate(bad)
    assert any("pressure: missing attribute 'units'" in p for p in problems)
    assert any("opflow_params" in p for p in problems)
    assert "missing provenance attribute 'opflow_seed'" in problems  # what `opflow regenerate` needs


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


def kill_a_writer_midway(out: Path) -> None:
    """Start writing ``out`` in another process and SIGKILL it after 10 of 1000 samples."""
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


def test_killed_writer_leaves_no_finished_looking_file(tmp_path: Path) -> None:
    out = tmp_path / "killed.nc"
    kill_a_writer_midway(out)
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


# ---- validate: non-finite values, damaged files ---------------------------------------------------


def _set_value(path: Path, name: str, index: tuple, value: float) -> None:
    """Change one stored value in place, as a foreign tool or a bad disk might."""
    import netCDF4

    with netCDF4.Dataset(path, "a") as nc:
        nc.variables[name][index] = value


def test_validate_reports_one_nan_naming_the_variable_and_the_sample(tmp_path: Path, dataset_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from opflow.cli import main

    _set_value(dataset_file, "pressure", (3, 4, 4), np.nan)
    problems = validate(dataset_file)
    assert problems == ["pressure: non-finite values in 1 of 6 samples, at position(s) 3"]
    assert main(["validate", str(dataset_file)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"{dataset_file}: INVALID: pressure: non-finite values in 1 of 6 samples, at position(s) 3"]
    # a file whose samples carry other global indices (a derived file) names those too
    v = grid_variables()
    v["sample_index"] = Variable(("sample",), np.arange(100, 106, dtype=np.int64))
    f = write_dataset(tmp_path / "g.nc", v, provenance_attrs("unit-test", {"s": 9}, seed=3))
    _set_value(f, "coeff", (1, 0, 0), np.inf)
    _set_value(f, "coeff", (4, 2, 2), np.nan)
    assert validate(f) == ["coeff: non-finite values in 2 of 6 samples, at position(s) 1, 4 (global sample index 101, 104)"]


def _flip_byte_in_chunk(path: Path, name: str, sample: int) -> None:
    """Flip one byte inside the compressed chunk of ``name[sample]`` (deterministically).

    The chunk is found by the Adler-32 checksum that ends every zlib stream: it is computed over
    the uncompressed (and, with the shuffle filter, byte-shuffled) chunk, so it does not depend on
    the zlib version that compressed it. The byte 16 places before it lies in the deflate data.
    """
    import zlib

    import netCDF4

    with netCDF4.Dataset(path) as nc:
        v = nc.variables[name]
        assert v.chunking() == [1, *v.shape[1:]] and v.filters()["zlib"]
        shuffle = v.filters()["shuffle"]
        raw = np.ascontiguousarray(v[sample]).astype(v.dtype.newbyteorder("<")).tobytes()
        size = v.dtype.itemsize
    if shuffle:
        raw = np.frombuffer(raw, np.uint8).reshape(-1, size).T.tobytes()
    trailer = zlib.adler32(raw).to_bytes(4, "big")
    data = bytearray(path.read_bytes())
    assert data.count(trailer) == 1, "the chunk's checksum must occur once in the file"
    data[data.find(trailer) - 16] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damaged_chunk_gives_one_line_errors_in_inspect_and_validate(dataset_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from opflow.cli import main

    _flip_byte_in_chunk(dataset_file, "pressure", 2)
    with pytest.raises(DatasetError, match="the file is damaged"):
        summary(dataset_file)
    assert main(["inspect", str(dataset_file)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"opflow: {dataset_file}: reading ") and "damaged" in err[0]
    assert "Traceback" not in captured.err

    problems = validate(dataset_file)
    assert len(problems) == 1 and "variable 'pressure', samples 0:6" in problems[0] and "damaged" in problems[0]
    assert main(["validate", str(dataset_file)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"{dataset_file}: INVALID: reading variable 'pressure'")
    # every reader going through open_dataset (derive, merge, training) says the same, and writes nothing
    from opflow.data.transforms import derive

    with pytest.raises(DatasetError, match=f"{dataset_file}: reading its data failed .*the file is damaged"):
        derive(dataset_file, dataset_file.parent / "derived.nc", n_train=4, n_test=2)
    assert sorted(p.name for p in dataset_file.parent.iterdir()) == ["d.nc"]


# ---- stale temporaries of killed writers ----------------------------------------------------------


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_rerun_after_a_kill_removes_the_stale_temporary(tmp_path: Path) -> None:
    out = tmp_path / "killed.nc"
    kill_a_writer_midway(out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".killed.nc.tmp-")]
    write_dataset(out, grid_variables(), provenance_attrs("unit-test", {"s": 9}, seed=3))
    assert [p.name for p in tmp_path.iterdir()] == ["killed.nc"]


def test_stale_temporaries_rule_keeps_live_and_foreign_writers(tmp_path: Path) -> None:
    from opflow.atomic import FOREIGN_STALE_AFTER_S, _host, atomic_write_text, remove_stale_temporaries

    host, dead = _host(), _dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            "dead (this host)": f".d.nc.tmp-{host}-{dead}-0123abcd.nc",
            "dead (format-1 writer form)": f".d.nc.tmp-{dead}-0123abcd",
            "dead (old atomic_path form)": f".d.tmp-{dead}-0123abcd.nc",
            "live process": f".d.nc.tmp-{host}-{live.pid}-0123abcd.nc",
            "this process": f".d.nc.tmp-{host}-{os.getpid()}-0123abcd.nc",
            "other host, fresh": f".d.nc.tmp-node-17-{dead}-0123abcd.nc",
            "other host, old": f".d.nc.tmp-node-18-{dead}-0123abcd.nc",
            "another target": f".e.nc.tmp-{host}-{dead}-0123abcd.nc",
            "not a temporary": ".d.nc.tmp-notes",
        }
        for n in names.values():
            (tmp_path / n).write_text("partial")
        old = time.time() - FOREIGN_STALE_AFTER_S - 3600
        os.utime(tmp_path / names["other host, old"], (old, old))
        write_dataset(tmp_path / "d.nc", grid_variables(), provenance_attrs("unit-test", {"s": 9}, seed=3))
        left = {p.name for p in tmp_path.iterdir()}
        gone = {"dead (this host)", "dead (format-1 writer form)", "dead (old atomic_path form)", "other host, old"}
        for what, n in names.items():
            assert (n not in left) == (what in gone), what
        assert "d.nc" in left
        # atomic_path (models, meshes, JSON) applies the same rule
        stale = tmp_path / f".r.json.tmp-{host}-{dead}-0123abcd.json"
        stale.write_text("{")
        atomic_write_text(tmp_path / "r.json", "{}")
        assert not stale.exists() and (tmp_path / "r.json").read_text() == "{}"
        assert remove_stale_temporaries(tmp_path / "nowhere" / "x.nc") == []
    finally:
        live.kill()
        live.wait()


# ---- CF attributes, sample coordinate, format versions --------------------------------------------


def test_cf_attributes_history_and_sample_coordinate(dataset_file: Path) -> None:
    import re

    ds = read_dataset(dataset_file)
    assert FORMAT == "opflow-dataset/2"
    assert ds.attrs["Conventions"] == "CF-1.10"
    assert ds.attrs["title"] == "unit-test samples generated by opflow"
    from opflow.data.provenance import command_line

    (line,) = ds.attrs["history"].splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00: .+", line), line
    assert line.endswith(": " + command_line())  # this process, e.g. "python -m pytest tests/..."
    np.testing.assert_array_equal(ds["sample"], np.arange(6))
    assert ds["sample"].dtype == np.int64 and ds.variables["sample"].dims == ("sample",)
    xr = pytest.importorskip("xarray")
    with xr.open_dataset(dataset_file) as x:
        assert "sample" in x.indexes and list(x["pressure"].sel(sample=[4, 5]).shape) == [2, 9, 9]


def test_ugrid_files_say_so_in_conventions(tmp_path: Path) -> None:
    v = grid_variables()
    v["mesh"] = Variable((), np.array(0, np.int32), {"cf_role": "mesh_topology", "topology_dimension": 2})
    f = write_dataset(tmp_path / "m.nc", v, provenance_attrs("unit-test", {"s": 9}, seed=3))
    assert read_dataset(f).attrs["Conventions"] == "CF-1.10 UGRID-1.0"
    assert validate(f) == []


def test_derived_and_merged_files_keep_indices_and_append_history(tmp_path: Path) -> None:
    from opflow.data.provenance import command_line
    from opflow.data.shards import merge_shards
    from opflow.data.transforms import derive

    def shard(a: int, b: int) -> Path:
        v = grid_variables(n=b - a)
        v["sample_index"] = Variable(("sample",), np.arange(a, b, dtype=np.int64))
        del v["split"]
        attrs = provenance_attrs("unit-test", {"s": 9}, seed=3)
        attrs["history"] = f"2000-01-01T00:00:00+00:00: make shard {a}:{b}"
        return write_dataset(tmp_path / f"s{a}.nc", v, attrs)

    src = merge_shards([shard(4, 10), shard(0, 4)], tmp_path / "src.nc")
    hist = read_dataset(src).attrs["history"].splitlines()
    # the shards' lines in sample order (each shard's writer line once), then the merge's line
    made = [h for h in hist if "make shard" in h]
    assert made == ["2000-01-01T00:00:00+00:00: make shard 0:4", "2000-01-01T00:00:00+00:00: make shard 4:10"]
    assert hist[0] == made[0] and hist[-1].endswith(command_line()) and len(hist) in (4, 5)
    out = derive(src, tmp_path / "d.nc", resolution=5, n_train=3, n_test=2, name="d")
    ds = read_dataset(out)
    np.testing.assert_array_equal(ds["sample"], [0, 1, 2, 8, 9])
    np.testing.assert_array_equal(ds["sample_index"], ds["sample"])
    derived = ds.attrs["history"].splitlines()
    assert derived[:-1] == hist and derived[-1].endswith(command_line())
    assert validate(out) == []


def test_validate_requires_cf_attributes_in_the_current_format(dataset_file: Path) -> None:
    import netCDF4

    with netCDF4.Dataset(dataset_file, "a") as nc:
        nc.delncattr("Conventions")
        nc.delncattr("history")
        nc.variables["sample_index"][0] = 7
    problems = validate(dataset_file)
    assert "missing global attribute(s) ['Conventions', 'history'] (CF; required by opflow-dataset/2)" in problems
    assert "'sample' and 'sample_index' differ; they must hold the same global indices" in problems


def test_validate_checks_the_container_roles_coordinates_and_index_types_the_spec_states(tmp_path: Path, dataset_file: Path) -> None:
    """docs/format.md's rules that need no data read: NetCDF-4 without groups or unlimited dimensions, int64
    global indices, an int8 split with its CF flags, a role on every per-sample variable, units and long_name on
    every floating-point coordinate. Each broken rule is one line naming the variable."""
    import netCDF4

    v = grid_variables()
    del v["x"].attrs["long_name"]
    v["sample_index"] = Variable(("sample",), np.arange(6, dtype=np.int32))
    v["split"] = Variable(("sample",), np.zeros(6, dtype=np.int32))
    v["norm"] = Variable(("sample",), np.ones(6), {"units": "1", "long_name": "norm of u"})  # no role
    bad = write_dataset(tmp_path / "bad.nc", v, provenance_attrs("unit-test", {"s": 9}, seed=3))
    problems = validate(bad)
    for line in ("x: coordinate without 'long_name'",
                 "'sample_index' is int32; the global sample indices are int64",
                 "'split' is int32 on ('sample',); it is int8 on ('sample',)",
                 "'split' has flag_values None and flag_meanings None; CF flags [0, 1, 2] and 'train test val'",
                 "norm: a per-sample variable without 'role'; give it one of ['input', 'output', 'auxiliary', 'coordinate']"):
        assert line in problems, (line, problems)
    assert validate(dataset_file) == []
    with netCDF4.Dataset(dataset_file, "a") as nc:
        nc.createGroup("extra")
        nc.createDimension("step", None)
    problems = validate(dataset_file)
    assert "groups ['extra']: an opflow file has none, every variable is at its root" in problems
    assert "unlimited dimension(s) ['step']: every dimension of an opflow file has a fixed size" in problems


def _format1_file(path: Path) -> Path:
    """A file as opflow wrote it before format 2: no CF attributes, no 'sample' coordinate."""
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("sample", 3)
        nc.createDimension("x", 4)
        nc.createVariable("sample_index", "i8", ("sample",))[:] = np.arange(3)
        u = nc.createVariable("u", "f8", ("sample", "x"), zlib=True, chunksizes=(1, 4))
        u.setncatts({"units": "1", "long_name": "u", "role": "output"})
        u[:] = np.ones((3, 4))
        nc.setncatts({k: v for k, v in provenance_attrs("unit-test", {}, 0).items() if k != "title"})
        nc.opflow_format = "opflow-dataset/1"
    return path


def test_format_1_files_are_read_and_pass_validate_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from opflow.cli import main
    from opflow.data.format import check_file

    old = _format1_file(tmp_path / "old.nc")
    np.testing.assert_array_equal(read_dataset(old)["u"], np.ones((3, 4)))
    report = check_file(old)
    assert report.problems == []
    assert len(report.warnings) == 1 and "older than 'opflow-dataset/2'" in report.warnings[0]
    assert main(["validate", str(old)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{old}: warning: format 'opflow-dataset/1'") and out[1] == f"{old}: ok"
    import netCDF4

    with netCDF4.Dataset(old, "a") as nc:
        nc.opflow_format = "opflow-dataset/99"
    with pytest.raises(DatasetError, match=r"format 'opflow-dataset/99', this opflow reads \['opflow-dataset/1', 'opflow-dataset/2'\]"):
        read_dataset(old)


# --------------------------------------------------------------------------- out of space

_WRITE_UNDER_A_LIMIT = """
import resource, signal, sys
import numpy as np
from opflow.data.format import Variable, write_dataset
from opflow.data.errors import DiskFullError
from opflow.data.provenance import provenance_attrs

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
f = np.random.default_rng(0).standard_normal((20, 65, 65))
v = {"sample_index": Variable(("sample",), np.arange(20)), "u": Variable(("sample", "x", "y"), f, {"role": "output", "units": "1", "long_name": "u"})}
try:
    write_dataset(sys.argv[1], v, provenance_attrs("t", {}, 0))
except DiskFullError as e:
    print(e)
"""


def test_a_write_that_runs_out_of_room_names_it_and_leaves_nothing(tmp_path: Path) -> None:
    """Before: ``RuntimeError: NetCDF: HDF error`` from deep inside netCDF4, and the temporary stayed.

    The room runs out for real (a file-size limit, as a full disk would: HDF5 hides the errno)."""
    out = tmp_path / "big.nc"
    run = subprocess.run([sys.executable, "-c", _WRITE_UNDER_A_LIMIT, str(out)], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[3], env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    msg = run.stdout.strip()
    assert msg.startswith(f"{out}: the file-size limit of this process (ulimit -f) is 200000 bytes"), msg
    assert "its data take 676160 bytes (660.3 KiB) uncompressed" in msg and "the partial file was removed" in msg, msg
    assert list(tmp_path.iterdir()) == [], "no temporary file is left behind"


def test_a_full_file_system_is_named_with_free_and_written_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ENOSPC from the writer (or HDF5's errno-less error on a nearly full disk) names the file system."""
    import errno

    import opflow.atomic as atomic
    from opflow.atomic import atomic_path
    from opflow.data.errors import DiskFullError

    monkeypatch.setattr(atomic, "free_bytes", lambda path: 4096)
    out = tmp_path / "model.pt"
    with pytest.raises(DiskFullError) as e:
        with atomic_path(out) as tmp:
            tmp.write_bytes(b"x" * 10)
            raise OSError(errno.ENOSPC, "No space left on device")
    msg = str(e.value)
    assert msg.startswith(f"{out}: no space left on device: the file system ") and "has 4096 bytes (4.0 KiB) free" in msg, msg
    assert "were written; the partial file was removed; free space on" in msg, msg
    assert list(tmp_path.iterdir()) == []
    assert atomic.is_out_of_space(RuntimeError("NetCDF: HDF error"), out)  # 4096 bytes free: the disk filled up
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 2**40)
    assert not atomic.is_out_of_space(RuntimeError("NetCDF: HDF error"), out)
    assert not atomic.is_out_of_space(PermissionError(errno.EACCES, "denied"), out)
