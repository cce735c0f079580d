"""The opflow dataset file: one NetCDF-4 file per dataset, the contract between solvers and models.

The full specification is ``docs/format.md``; in short (readable by plain ``netCDF4`` and by
``xarray.open_dataset``):

* Dimension ``sample`` first, then the field's own dimensions: ``x, y`` for grids (``t`` added for
  trajectories), ``node``/``cell``/``corner`` for meshes, ``t`` for ODE trajectories.
* The CF coordinate variable ``sample(sample)``: the global index of each sample in the generated
  set (it fixes the sample's random seed, see :mod:`.provenance`), kept through merge, derive and
  split selection. ``sample_index(sample)`` holds the same values under the name that format 1
  used; the writer fills whichever of the two is not given from the other.
* Coordinate variables (``x``, ``y``, ``t``, ``node_x`` ...) and field variables named by their
  physics (``coeff``, ``pressure`` ...), each with ``units``, ``long_name`` and ``role``
  (``input``, ``output`` or ``auxiliary``) attributes.
* ``split(sample)``: int8 with CF ``flag_values``/``flag_meanings`` (0 train, 1 test, 2 val).
* Global attributes: CF ``Conventions`` (set by the writer: ``CF-1.10``, plus ``UGRID-1.0`` when a
  variable has ``cf_role = "mesh_topology"``), ``title``, ``history`` (the writer appends one line,
  UTC time and command, per file written), provenance (see :mod:`.provenance`) and
  ``opflow_format``, written last.

Files are written chunked per sample with zlib compression (level 4; the environment variable
:data:`COMPLEVEL_ENV` sets another level for every file a process writes, 0 for none: the same values,
other bytes) under a temporary name in the same folder and renamed only when complete; ``opflow_format`` is set just before closing, so a file that
was cut short (killed writer, truncated copy) is rejected by :func:`open_dataset` with a clear error.
Temporaries left by killed writers of the same file are removed when it is written again
(:func:`opflow.atomic.remove_stale_temporaries`).

Versions: :data:`FORMAT` is written; :data:`READABLE_FORMATS` are read. Format 1 files (no CF
attributes, no ``sample`` coordinate) are read as before and pass :func:`validate` with a warning.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import is_out_of_space, no_space_error, remove_stale_temporaries, require_space, temporary_name, written_bytes
from .errors import DatasetError
from .provenance import append_history, history_line

#: the format version this opflow writes (global attribute ``opflow_format``)
FORMAT = "opflow-dataset/2"
#: the versions it reads; format 1 lacks the CF attributes and the ``sample`` coordinate
READABLE_FORMATS = ("opflow-dataset/1", FORMAT)
#: the CF version the files follow (global attribute ``Conventions``)
CF_CONVENTIONS = "CF-1.10"
#: added to ``Conventions`` when the file holds a UGRID mesh topology variable
UGRID_CONVENTIONS = "UGRID-1.0"
#: global attributes every file of the current format has (checked by :func:`validate`)
REQUIRED_GLOBAL_ATTRS = ("Conventions", "title", "history")
SAMPLE_ATTRS: dict[str, Any] = {"long_name": "global sample index (sets the seed)"}
SPLITS: dict[str, int] = {"train": 0, "test": 1, "val": 2}
ROLES = ("input", "output", "auxiliary", "coordinate")
#: the zlib level of the files written when the caller does not give one
DEFAULT_COMPLEVEL = 4
#: environment variable that overrides :data:`DEFAULT_COMPLEVEL` (0-9; 0 writes uncompressed files)
COMPLEVEL_ENV = "OPFLOW_DATA_COMPLEVEL"


def default_complevel() -> int:
    """The zlib level of the files this process writes: ``$OPFLOW_DATA_COMPLEVEL`` (0-9) or 4.

    The level changes the file's bytes and size, not its values: the data fingerprint of a run
    (:func:`opflow.records.data_fingerprint`) is the same at every level. Level 0 is for data made
    and read on one machine within minutes (the GPU leases, docs/gpu.md): the Darcy source at 421
    (1224 samples) is merged in 8 s instead of 26 s, at 1.7 GiB instead of 501 MiB. A value that is
    not a whole number from 0 to 9 is refused before anything is written.
    """
    raw = os.environ.get(COMPLEVEL_ENV, "").strip()
    if not raw:
        return DEFAULT_COMPLEVEL
    if not raw.isdigit() or not 0 <= int(raw) <= 9:
        raise DatasetError(
            f"{COMPLEVEL_ENV}={raw!r}: the zlib level of the data files must be a whole number from 0 (uncompressed) "
            f"to 9; unset it for the default {DEFAULT_COMPLEVEL}"
        )
    return int(raw)


@dataclass
class Variable:
    """An array with named dimensions and attributes (one NetCDF variable)."""

    dims: tuple[str, ...]
    data: np.ndarray
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data = np.asarray(self.data)
        self.dims = tuple(self.dims)
        if self.data.ndim != len(self.dims):
            raise DatasetError(
                f"variable with dims {self.dims} got an array of shape {self.data.shape}: "
                "give one dimension name per array axis"
            )


@dataclass
class Dataset:
    """An opflow dataset read into memory (numpy arrays)."""

    variables: dict[str, Variable]
    attrs: dict[str, Any]
    path: Path | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.variables[name].data
        except KeyError:
            raise KeyError(f"{self.path or 'dataset'} has no variable {name!r}; it has {sorted(self.variables)}") from None

    @property
    def n_samples(self) -> int:
        return int(self.variables["sample_index"].data.shape[0]) if "sample_index" in self.variables else 0

    def names_with_role(self, role: str) -> list[str]:
        return [n for n, v in self.variables.items() if v.attrs.get("role") == role]

    def split_mask(self, split: str) -> np.ndarray:
        if split not in SPLITS:
            raise DatasetError(f"unknown split {split!r}; use one of {list(SPLITS)}")
        return self["split"] == SPLITS[split]


def split_codes(names: Sequence[str]) -> np.ndarray:
    """Encode split names ('train', 'test', 'val') as the int8 codes stored in ``split``."""
    try:
        return np.array([SPLITS[n] for n in names], dtype=np.int8)
    except KeyError as e:
        raise DatasetError(f"unknown split {e.args[0]!r}; use one of {list(SPLITS)}") from None


def split_variable(codes: np.ndarray) -> Variable:
    return Variable(
        ("sample",),
        np.asarray(codes, dtype=np.int8),
        {
            "long_name": "dataset split",
            "flag_values": np.array(list(SPLITS.values()), dtype=np.int8),
            "flag_meanings": " ".join(SPLITS),
        },
    )


def conventions_for(variables: Mapping[str, Mapping[str, Any]]) -> str:
    """The ``Conventions`` attribute of a file whose variables have these attributes."""
    ugrid = any(str(attrs.get("cf_role", "")) == "mesh_topology" for attrs in variables.values())
    return f"{CF_CONVENTIONS} {UGRID_CONVENTIONS}" if ugrid else CF_CONVENTIONS


def _netcdf_value(value: Any) -> Any:
    """NetCDF attributes hold strings, numbers and numeric arrays; bools become ints, None ''."""
    if isinstance(value, bool | np.bool_):
        return int(value)
    if value is None:
        return ""
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return value


class DatasetWriter:
    """Stream an opflow dataset to disk, sample blocks at a time, atomically.

    ``dims`` maps dimension names to sizes (``sample`` must be given: the total count);
    ``variables`` maps names to ``(dims, dtype, attrs)``. Use as a context manager; call
    :meth:`write` for each block. The file appears under its final name only when the ``with``
    block ends without an exception and every sample of every per-sample variable was written.

    The writer owns the parts of the format that every file has: the ``sample`` coordinate (added
    and written along with ``sample_index`` when only that is given, and the other way round), the
    ``Conventions`` attribute (computed from the variables), a default ``title`` (the file name)
    when ``attrs`` has none, and one ``history`` line ``<UTC time>: <history>`` appended to the
    ``history`` in ``attrs`` (``history`` defaults to this process's command line).

    ``complevel``: the zlib level, 0 for none (default: :func:`default_complevel`, 4 unless
    ``$OPFLOW_DATA_COMPLEVEL`` says otherwise).

    ``expected_bytes``: the file's size when the caller knows it in advance (a merge, a derive;
    at level 0 at least the data's uncompressed size); the writer then refuses to start when the file system has less free
    (:func:`opflow.atomic.require_space`). A write that runs out of space midway removes the
    temporary file and raises :class:`~opflow.data.errors.DiskFullError` naming the file, the
    bytes free and the bytes written; any other failure of the netCDF library raises
    :class:`DatasetError` naming the file being written (never the file being read).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        dims: Mapping[str, int],
        variables: Mapping[str, tuple[Sequence[str], Any, Mapping[str, Any]]],
        attrs: Mapping[str, Any],
        *,
        complevel: int | None = None,
        history: str | None = None,
        expected_bytes: int | None = None,
    ) -> None:
        import netCDF4

        if "sample" not in dims:
            raise DatasetError("an opflow dataset needs a 'sample' dimension")
        complevel = default_complevel() if complevel is None else int(complevel)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.path)
        self.expected_bytes = expected_bytes
        #: the data's size uncompressed (for messages)
        self.raw_bytes = sum(
            int(np.prod([dims[d] for d in vdims if d in dims], dtype=np.int64)) * np.dtype(dtype).itemsize for vdims, dtype, _ in variables.values()
        )
        if expected_bytes is not None and complevel == 0:  # the caller's estimate is that of compressed inputs
            expected_bytes = max(expected_bytes, self.raw_bytes)
        if expected_bytes is not None:
            require_space(self.path, expected_bytes)
        self.tmp = temporary_name(self.path)
        self.dims = dict(dims)
        self._written: dict[str, np.ndarray] = {}
        # the sample coordinate and its format-1 name hold the same values: write one, get both
        self._mirror: dict[str, str] = {}
        variables = dict(variables)
        if "sample_index" in variables and "sample" not in variables:
            variables = {"sample": (("sample",), np.int64, SAMPLE_ATTRS), **variables}
            self._mirror["sample_index"] = "sample"
        elif "sample" in variables and "sample_index" not in variables:
            variables["sample_index"] = (("sample",), np.int64, SAMPLE_ATTRS)
            self._mirror["sample"] = "sample_index"
        attrs = dict(attrs)
        glob: dict[str, Any] = {
            "Conventions": conventions_for({n: dict(a) for n, (_, _, a) in variables.items()}),
            "title": attrs.pop("title", None) or f"opflow dataset {self.path.name}",
            "history": append_history(attrs.pop("history", None), history_line(history)),
        }
        attrs.pop("Conventions", None)
        attrs.pop("opflow_format", None)
        glob.update(attrs)
        try:
            self._nc = netCDF4.Dataset(self.tmp, "w", format="NETCDF4")
        except OSError as e:
            self._nc = None
            self._fail(e)
        try:
            for name, size in self.dims.items():
                self._nc.createDimension(name, size)
            for name, (vdims, dtype, vattrs) in variables.items():
                vdims = tuple(vdims)
                unknown = [d for d in vdims if d not in self.dims]
                if unknown:
                    raise DatasetError(f"variable {name!r} uses undeclared dimensions {unknown}")
                dtype = np.dtype(dtype)
                chunks = None
                if vdims and vdims[0] == "sample":
                    chunks = [1] + [max(1, self.dims[d]) for d in vdims[1:]]
                    self._written[name] = np.zeros(self.dims["sample"], dtype=bool)
                fill = vattrs.get("_FillValue")
                var = self._nc.createVariable(
                    name,
                    dtype,
                    vdims,
                    zlib=bool(vdims) and complevel > 0,
                    complevel=complevel if complevel > 0 else DEFAULT_COMPLEVEL,
                    chunksizes=chunks,
                    fill_value=fill if fill is not None else False,
                )
                for k, v in vattrs.items():
                    if k != "_FillValue":
                        var.setncattr(k, _netcdf_value(v))
            for k, v in glob.items():
                self._nc.setncattr(k, _netcdf_value(v))
        except (OSError, RuntimeError) as e:
            self._fail(e)
        except BaseException:
            self._abort()
            raise

    def write(self, name: str, data: np.ndarray, start: int | None = None) -> None:
        """Write ``data`` into variable ``name``; per-sample variables take ``start`` (sample offset)."""
        var = self._nc.variables[name]
        data = np.asarray(data)
        if name in self._written:
            if start is None:
                raise DatasetError(f"variable {name!r} is per-sample: give the sample offset 'start'")
            stop = start + data.shape[0]
            if start < 0 or stop > self.dims["sample"]:
                raise DatasetError(f"samples {start}:{stop} of {name!r} lie outside 0:{self.dims['sample']}")
            role = var.getncattr("role") if "role" in var.ncattrs() else None
            if role in ("input", "output") and np.issubdtype(data.dtype, np.floating) and not np.all(np.isfinite(data)):
                raise DatasetError(f"non-finite values in {name!r} for samples {start}:{stop}; nothing was saved")
            self._store(var, slice(start, stop), data)
            self._written[name][start:stop] = True
            if name in self._mirror:
                self.write(self._mirror[name], data, start)
        else:
            self._store(var, Ellipsis, data)

    def _store(self, var: Any, key: Any, data: np.ndarray) -> None:
        try:
            var[key] = data
        except (OSError, RuntimeError) as e:
            self._fail(e)

    def bytes_on_disk(self) -> int:
        """Flush what was written so far to the temporary file and return its size on disk: how a
        writer whose output size is not known in advance (a shard) extrapolates from its first samples."""
        try:
            self._nc.sync()
        except (OSError, RuntimeError) as e:
            self._fail(e)
        return written_bytes(self.tmp) or 0

    def close(self) -> Path:
        missing = {n: int((~w).sum()) for n, w in self._written.items() if not w.all()}
        if missing:
            self._abort()
            raise DatasetError(f"{self.path}: samples were never written for {missing}; nothing was saved")
        try:
            self._nc.setncattr("opflow_format", FORMAT)
            self._nc.close()  # HDF5 flushes its chunk cache here: a full disk often shows only now
            os.replace(self.tmp, self.path)
        except (OSError, RuntimeError) as e:
            self._fail(e)
        return self.path

    def _fail(self, e: BaseException) -> None:
        """Remove the temporary and raise what ``e`` means for this file: out of space, or a failed write."""
        full = is_out_of_space(e, self.tmp)
        err: DatasetError = (
            no_space_error(self.path, need=self.expected_bytes, raw=self.raw_bytes, written=written_bytes(self.tmp))  # type: ignore[assignment]
            if full
            else DatasetError(f"{self.path}: writing it failed ({e}); nothing was saved")
        )
        self._abort()
        raise err from None

    def _abort(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):
                self._nc.close()
            self._nc = None
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()


def write_dataset(
    path: str | os.PathLike,
    variables: Mapping[str, Variable],
    attrs: Mapping[str, Any],
    *,
    complevel: int | None = None,
) -> Path:
    """Write a whole in-memory dataset atomically (zlib level ``complevel``, default
    :func:`default_complevel`); returns the final path."""
    dims: dict[str, int] = {}
    for name, v in variables.items():
        for d, n in zip(v.dims, v.data.shape, strict=True):
            if dims.setdefault(d, n) != n:
                raise DatasetError(f"dimension {d!r} has size {dims[d]} elsewhere but {n} in {name!r}")
    dims.setdefault("sample", 0)
    spec = {n: (v.dims, v.data.dtype, v.attrs) for n, v in variables.items()}
    with DatasetWriter(path, dims, spec, attrs, complevel=complevel) as w:
        for name, v in variables.items():
            w.write(name, v.data, 0 if v.dims[:1] == ("sample",) else None)
    return Path(path)


@contextlib.contextmanager
def open_dataset(path: str | os.PathLike) -> Iterator[Any]:
    """Open an opflow dataset with netCDF4, raising :class:`DatasetError` for anything unusable.

    A path that is not a NetCDF file at all (a directory, a results JSON, a model file) is named as
    what it is, with the command that reads it (:func:`opflow.filekind.wrong_file`); only a file
    that looks like NetCDF but does not open is called truncated, to be regenerated.

    A netCDF read error inside the ``with`` block (``RuntimeError("NetCDF: HDF error")`` from a
    chunk that does not decompress) becomes a :class:`DatasetError` naming the file as damaged, so
    every command that reads through here fails with one line rather than an HDF traceback. (With
    two files open at once, such an error is attributed to the innermost one.)
    """
    import netCDF4

    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset file; generate it with snakemake (see README)")
    from ..filekind import wrong_file

    other = wrong_file(path, "a readable NetCDF-4 file")  # a directory, a results JSON, a model: say so, advise no deletion
    if other is not None:
        raise DatasetError(other)
    try:
        nc = netCDF4.Dataset(path, "r")
    except OSError as e:
        raise DatasetError(
            f"{path}: not a readable NetCDF-4 file ({e.strerror or e}); it may be truncated or foreign: "
            "delete it and regenerate it with snakemake"
        ) from None
    try:
        fmt = getattr(nc, "opflow_format", None)
        if fmt is None:
            raise DatasetError(
                f"{path}: NetCDF file without the 'opflow_format' attribute: either not an opflow "
                "dataset or a write that never finished; regenerate it"
            )
        if fmt not in READABLE_FORMATS:
            raise DatasetError(
                f"{path}: format {fmt!r}, this opflow reads {list(READABLE_FORMATS)}; "
                "regenerate the file (or use the opflow version that wrote it)"
            )
        nc.set_auto_mask(False)
        yield nc
    except RuntimeError as e:
        if str(e).startswith("NetCDF:"):
            raise DatasetError(_damaged(path, "its data", e)) from None
        raise
    finally:
        nc.close()


def _attrs(obj: Any) -> dict[str, Any]:
    return {k: obj.getncattr(k) for k in obj.ncattrs()}


#: the name sets of the :func:`recorded_reads` blocks now open (innermost last)
_RECORDERS: list[set[str]] = []


@contextlib.contextmanager
def recorded_reads() -> Iterator[set[str]]:
    """Collect the names of every variable :func:`read_dataset` reads inside the block (the carried subsets of
    :mod:`opflow.data.subset` keep exactly those)."""
    names: set[str] = set()
    _RECORDERS.append(names)
    try:
        yield names
    finally:
        _RECORDERS.remove(names)


def read_dataset(
    path: str | os.PathLike,
    variables: Sequence[str] | None = None,
    *,
    samples: np.ndarray | slice | None = None,
    split: str | None = None,
) -> Dataset:
    """Read variables (all by default) into numpy; optionally only some samples or one split."""
    path = Path(path)
    with open_dataset(path) as nc:
        names = list(nc.variables) if variables is None else list(variables)
        missing = [n for n in names if n not in nc.variables]
        if missing:
            raise DatasetError(f"{path}: no variable(s) {missing}; it has {sorted(nc.variables)}")
        sel: Any = slice(None) if samples is None else samples
        if split is not None:
            if "split" not in nc.variables:
                raise DatasetError(f"{path}: has no 'split' variable, cannot select split {split!r}")
            mask = nc.variables["split"][:] == SPLITS[split]
            idx = np.flatnonzero(mask)
            sel = idx if samples is None else idx[samples]
            if "split" not in names:
                names.append("split")
        if "sample_index" in nc.variables and "sample_index" not in names:
            names.append("sample_index")
        for rec in _RECORDERS:
            rec.update(names)
        out: dict[str, Variable] = {}
        try:
            for n in names:
                v = nc.variables[n]
                if v.dimensions[:1] == ("sample",):
                    data = v[sel] if not isinstance(sel, np.ndarray) else _take(v, sel)
                else:
                    data = v[...]
                out[n] = Variable(v.dimensions, np.asarray(data), _attrs(v))
        except (OSError, RuntimeError, IndexError) as e:
            raise DatasetError(f"{path}: reading failed ({e}); the file is damaged, regenerate it") from None
        return Dataset(out, _attrs(nc), path)


def require_finite(ds: Dataset, names: Sequence[str], split: str | None = None) -> None:
    """Raise :class:`DatasetError` when a floating variable of ``names`` in ``ds`` holds NaN or inf.

    Cheap (one vectorised pass): each variable is summed per sample in float64, which is finite
    exactly when every value is (float32 data cannot overflow it); only the samples whose sum is
    not are looked at again to count. The message names the file, the variable, the count, the
    first sample (by position in the split, and by global index) and the fix.
    """
    index = ds.variables["sample_index"].data if "sample_index" in ds.variables else None
    for name in names:
        v = ds.variables.get(name)
        if v is None or not np.issubdtype(v.data.dtype, np.floating) or v.data.size == 0:
            continue
        per_sample = v.dims[:1] == ("sample",)
        flat = v.data.reshape(v.data.shape[0], -1) if per_sample else v.data.reshape(1, -1)
        bad_rows = np.flatnonzero(~np.isfinite(flat.sum(axis=1, dtype=np.float64)))
        if bad_rows.size == 0:
            continue
        count = int((~np.isfinite(flat[bad_rows])).sum())
        where = f"{count} non-finite value(s)"
        if per_sample:
            first = int(bad_rows[0])
            glob = f", global sample index {int(index[first])}" if index is not None and index.shape == (v.data.shape[0],) else ""
            where += f" in {bad_rows.size} of {v.data.shape[0]} samples of the {split or 'whole'} split, the first at position {first}{glob}"
        raise DatasetError(f"{ds.path}: variable {name!r} has {where}; the data are unusable: regenerate the file (`opflow validate` lists every such sample)")


def _take(var: Any, idx: np.ndarray) -> np.ndarray:
    """Fancy-index the sample axis; contiguous runs are read as slices (fast in HDF5)."""
    if idx.size == 0:
        return np.empty((0, *var.shape[1:]), dtype=var.dtype)
    if np.all(np.diff(idx) == 1):
        return var[int(idx[0]) : int(idx[-1]) + 1]
    return np.stack([var[int(i)] for i in idx])


@dataclass
class ValidationReport:
    """What :func:`check_file` found: ``problems`` make a file invalid, ``warnings`` do not."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _damaged(path: Any, what: str, e: BaseException) -> str:
    return (
        f"{path}: reading {what} failed ({e}): the file is damaged (e.g. a corrupted compressed chunk); "
        "delete it and regenerate it (`opflow regenerate FILE --out NEW` rebuilds it from its attributes)"
    )


def _list_positions(positions: list[int], limit: int = 10) -> str:
    text = ", ".join(str(i) for i in positions[:limit])
    return text + (f", ... ({len(positions) - limit} more)" if len(positions) > limit else "")


def check_file(path: str | os.PathLike, *, block: int = 64, declared: Callable[[dict[str, Any], Path], Any] | None = None) -> ValidationReport:
    """Check schema, attributes and values of a dataset file (see ``docs/format.md``).

    Problems: a missing ``sample`` dimension or coordinate, unknown split codes or roles, fields
    without ``units``/``long_name`` or not per sample, non-finite values (one line per variable,
    naming the samples by position, and by global index where that differs), no output field,
    missing provenance, and for the current format missing CF attributes; what needs no data read
    (:func:`_structure_problems`: groups or unlimited dimensions, the index and split variables' types and
    flags, a per-sample variable without role, a floating-point coordinate without units or long_name); a chunk that cannot be
    read (damaged file) is a problem naming the variable and samples, never an exception.
    A file of an older readable format (see :data:`READABLE_FORMATS`) is accepted with a warning
    that it lacks what newer formats added.

    The contract of :mod:`opflow.data.contract`: the split (a derived file has one, with the sizes
    its ``opflow_split_rule`` records; test samples, and train samples unless the rule records
    none) and, with ``declared`` ((global attributes, path) -> :class:`opflow.data.contract.Declared`, e.g.
    :func:`pipeline.regenerate.declared_variables`; None for a generator not registered here), the
    variables its generator writes. A lookup that fails (a solver stack missing here, parameters
    that no longer load) is a warning, not a problem.
    """
    report = ValidationReport()
    problems, warnings = report.problems, report.warnings
    try:
        with open_dataset(path) as nc:
            if "sample" not in nc.dimensions:
                problems.append("no 'sample' dimension")
                return report
            fmt = nc.getncattr("opflow_format")
            n = len(nc.dimensions["sample"])
            current = fmt == FORMAT
            global_index: np.ndarray | None = None
            try:
                if current:
                    missing = [a for a in REQUIRED_GLOBAL_ATTRS if not str(getattr(nc, a, "")).strip()]
                    if missing:
                        problems.append(f"missing global attribute(s) {missing} (CF; required by {FORMAT})")
                    conv = str(getattr(nc, "Conventions", ""))
                    want = conventions_for({name: {k: v.getncattr(k) for k in v.ncattrs()} for name, v in nc.variables.items()})
                    if conv and conv.split() != want.split():
                        problems.append(f"Conventions is {conv!r}, expected {want!r} for these variables")
                    if "sample" not in nc.variables:
                        problems.append("no 'sample' coordinate variable (global sample index)")
                    else:
                        sv = nc.variables["sample"]
                        if tuple(sv.dimensions) != ("sample",) or not np.issubdtype(sv.dtype, np.integer):
                            problems.append(f"'sample' must be an integer variable on ('sample',), got {sv.dtype} on {sv.dimensions}")
                        else:
                            global_index = np.asarray(sv[:])
                            if "sample_index" in nc.variables and not np.array_equal(global_index, np.asarray(nc.variables["sample_index"][:])):
                                problems.append("'sample' and 'sample_index' differ; they must hold the same global indices")
                else:
                    warnings.append(
                        f"format {fmt!r} is older than {FORMAT!r}: it has no CF attributes {list(REQUIRED_GLOBAL_ATTRS)} "
                        "or 'sample' coordinate, so those were not checked; regenerate the file to get them"
                    )
                    if "sample_index" not in nc.variables:
                        problems.append("no 'sample_index' variable")
                    else:
                        global_index = np.asarray(nc.variables["sample_index"][:])
                if "split" in nc.variables:
                    codes = np.asarray(nc.variables["split"][:])
                    bad = sorted(set(np.unique(codes).tolist()) - set(SPLITS.values()))
                    if bad:
                        problems.append(f"split has unknown codes {bad}")
            except (OSError, RuntimeError) as e:
                problems.append(_damaged(path, "the sample and split variables", e))
            problems.extend(_structure_problems(nc))
            for name, v in nc.variables.items():
                role = getattr(v, "role", None)
                if role is not None and role not in ROLES:
                    problems.append(f"{name}: role {role!r} not in {ROLES}")
                if role in ("input", "output"):
                    for a in ("units", "long_name"):
                        if a not in v.ncattrs():
                            problems.append(f"{name}: missing attribute {a!r}")
                    if v.dimensions[:1] != ("sample",):
                        problems.append(f"{name}: fields must have 'sample' as first dimension")
                if not np.issubdtype(v.dtype, np.floating):
                    continue
                if v.dimensions[:1] != ("sample",):
                    try:
                        if not np.all(np.isfinite(np.asarray(v[...]))):
                            problems.append(f"{name}: non-finite values")
                    except (OSError, RuntimeError) as e:
                        problems.append(_damaged(path, f"variable {name!r}", e))
                    continue
                bad_at: list[int] = []
                for i in range(0, n, block):
                    try:
                        data = np.asarray(v[i : i + block])
                    except (OSError, RuntimeError) as e:
                        problems.append(_damaged(path, f"variable {name!r}, samples {i}:{min(i + block, n)}", e))
                        break
                    flat = data.reshape(data.shape[0], -1)
                    bad_at.extend((i + np.flatnonzero((~np.isfinite(flat)).any(axis=1))).tolist())
                if bad_at:
                    msg = f"{name}: non-finite values in {len(bad_at)} of {n} samples, at position(s) {_list_positions(bad_at)}"
                    if global_index is not None and global_index.shape == (n,) and not np.array_equal(global_index[bad_at], bad_at):
                        msg += f" (global sample index {_list_positions(global_index[bad_at].tolist())})"
                    problems.append(msg)
            if not any(getattr(v, "role", None) == "output" for v in nc.variables.values()):
                problems.append("no variable has role 'output'")
            for a in ("opflow_generator", "opflow_params", "opflow_params_hash", "opflow_seed", "opflow_seed_rule"):  # what regenerates it
                if a not in nc.ncattrs():
                    problems.append(f"missing provenance attribute {a!r}")
            _check_contract(nc, report, declared)
    except DatasetError as e:
        problems.append(str(e))
    return report


def _structure_problems(nc: Any) -> list[str]:
    """The rules of docs/format.md that read no data: the container (NetCDF-4, no groups, no unlimited
    dimension), the index and split variables' types, a role on every per-sample variable, and units and
    long_name on every floating-point coordinate (grid axes, times, mesh nodes; a mesh topology's integer
    variables have neither)."""
    out = []
    if getattr(nc, "data_model", "NETCDF4") != "NETCDF4":
        out.append(f"stored as {nc.data_model}, not NETCDF4 (HDF5 storage); regenerate the file")
    if nc.groups:
        out.append(f"groups {sorted(nc.groups)}: an opflow file has none, every variable is at its root")
    unlimited = [d for d, dim in nc.dimensions.items() if dim.isunlimited()]
    if unlimited:
        out.append(f"unlimited dimension(s) {unlimited}: every dimension of an opflow file has a fixed size")
    if "sample_index" not in nc.variables:
        if "sample" in nc.variables:  # (format 1 without it is reported with the other format-1 rules)
            out.append("no 'sample_index' variable (the global sample indices under format 1's name, equal to 'sample')")
    for name in ("sample", "sample_index"):
        if name in nc.variables and np.issubdtype(nc.variables[name].dtype, np.integer) and nc.variables[name].dtype != np.int64:
            out.append(f"{name!r} is {nc.variables[name].dtype}; the global sample indices are int64")
    if "split" in nc.variables:
        sv = nc.variables["split"]
        flags = sv.getncattr("flag_values").tolist() if "flag_values" in sv.ncattrs() else None
        meanings = str(sv.getncattr("flag_meanings")) if "flag_meanings" in sv.ncattrs() else None
        if sv.dtype != np.int8 or tuple(sv.dimensions) != ("sample",):
            out.append(f"'split' is {sv.dtype} on {tuple(sv.dimensions)}; it is int8 on ('sample',)")
        if flags != list(SPLITS.values()) or meanings != " ".join(SPLITS):
            out.append(f"'split' has flag_values {flags} and flag_meanings {meanings!r}; CF flags {list(SPLITS.values())} and {' '.join(SPLITS)!r}")
    for name, v in nc.variables.items():
        role = getattr(v, "role", None)
        if role is None and v.dimensions[:1] == ("sample",) and name not in ("sample", "sample_index", "split"):
            out.append(f"{name}: a per-sample variable without 'role'; give it one of {list(ROLES)}")
        is_coordinate = role == "coordinate" or (tuple(v.dimensions) == (name,) and name != "sample")
        if is_coordinate and np.issubdtype(v.dtype, np.floating):
            missing = [a for a in ("units", "long_name") if not str(getattr(v, a, "")).strip()]
            if missing:
                out.append(f"{name}: coordinate without {' or '.join(repr(a) for a in missing)}")
    return out


def _check_contract(nc: Any, report: ValidationReport, declared: Callable[[dict[str, Any], Path], Any] | None) -> None:
    """The split and variable contract of :mod:`opflow.data.contract`, added to ``report``."""
    from .contract import split_problems, variable_problems

    try:
        report.problems.extend(split_problems(nc, SPLITS))
    except (OSError, RuntimeError) as e:
        report.problems.append(_damaged(nc.filepath(), "the split variable", e))
    if declared is None or "opflow_generator" not in nc.ncattrs():
        return
    attrs = _attrs(nc)
    try:
        spec = declared(attrs, Path(nc.filepath()))
    except Exception as e:  # noqa: BLE001 - the lookup runs a generator's code: any failure only means "not checked"
        report.warnings.append(f"variables not checked against generator {attrs['opflow_generator']!r}: {type(e).__name__}: {e}")
        return
    if spec is not None:  # None: a generator this installation does not have
        report.problems.extend(variable_problems(nc, spec))


def validate(path: str | os.PathLike) -> list[str]:
    """Check schema and values; return a list of problems (empty when the file is valid).

    The problems of :func:`check_file`, without its warnings.
    """
    return check_file(path).problems


def summary(path: str | os.PathLike) -> str:
    """A human-readable summary: dimensions, variables with statistics, splits, provenance.

    Raises :class:`DatasetError` (one line, naming the file) when the file cannot be opened or a
    chunk cannot be read.
    """
    with open_dataset(path) as nc:
        try:
            return _summary(path, nc)
        except (OSError, RuntimeError) as e:
            raise DatasetError(_damaged(path, "its data", e)) from None


def _summary(path: str | os.PathLike, nc: Any) -> str:
    import json

    lines: list[str] = []
    lines.append(f"{path}  ({Path(path).stat().st_size / 2**20:.1f} MiB, {nc.opflow_format})")
    for a in ("title", "Conventions"):
        if a in nc.ncattrs():
            lines.append(f"{a}: {nc.getncattr(a)}")
    lines.append("dimensions: " + ", ".join(f"{k}={len(d)}" for k, d in nc.dimensions.items()))
    if "split" in nc.variables:
        codes = np.asarray(nc.variables["split"][:])
        lines.append("splits: " + ", ".join(f"{k}={int((codes == c).sum())}" for k, c in SPLITS.items() if (codes == c).any()))
    lines.append("variables:")
    for name, v in nc.variables.items():
        desc = f"  {name}{v.dimensions} {v.dtype}"
        role = getattr(v, "role", None)
        if role:
            desc += f" [{role}]"
        if hasattr(v, "long_name"):
            desc += f" {v.long_name}"
        if hasattr(v, "units"):
            desc += f" ({v.units})"
        if np.issubdtype(v.dtype, np.floating) and v.size:
            head = np.asarray(v[: min(v.shape[0], 256)] if v.dimensions[:1] == ("sample",) else v[...], dtype=np.float64)
            desc += f"  min {head.min():.4g} mean {head.mean():.4g} max {head.max():.4g}"
            if v.dimensions[:1] == ("sample",) and v.shape[0] > 256:
                desc += " (first 256 samples)"
        lines.append(desc)
    lines.append("provenance:")
    for k in nc.ncattrs():
        if k.startswith("opflow_") and k != "opflow_format":
            val = nc.getncattr(k)
            if k in ("opflow_params", "opflow_packages"):
                with contextlib.suppress(Exception):
                    val = json.dumps(json.loads(val), sort_keys=True)
            lines.append(f"  {k[7:]}: {val}")
    if "history" in nc.ncattrs():
        lines.append("history:")
        lines.extend(f"  {h}" for h in str(nc.getncattr("history")).splitlines())
    return "\n".join(lines)
