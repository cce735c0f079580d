"""Rebuild a dataset file from its own provenance attributes and compare it with the original.

``opflow regenerate FILE [--out NEW]`` (the command lives in :mod:`opflow.cli`, which imports this
module inside the command). Rebuilding runs a generator of ``solvers`` and the derivation of
``opflow.data``, so it belongs to the workflow layer above both halves (:mod:`pipeline`): the
console script reaches ``solvers`` only through here. :func:`declared_variables` is what
``opflow validate`` checks a file's variables against.

What is rebuilt, from the global attributes alone (``docs/format.md``, "Provenance"):

* a *source* file (written by :func:`solvers.generate.write_shard`, or merged from such shards by
  :func:`opflow.data.shards.merge_shards`): the generator ``opflow_generator`` with parameters
  ``opflow_params`` and base seed ``opflow_seed`` computes the samples of the file's ``sample``
  coordinate (a contiguous range ``a:b``), written by :func:`~solvers.generate.write_shard` as one
  shard. Because sample ``i`` is seeded from ``(seed, i)`` alone, one shard equals any sharding.
* a *derived* file (written by :func:`opflow.data.transforms.derive`; it has
  ``opflow_derived_from``): the source range it was cut from is rebuilt as above (``N`` samples,
  ``N`` read from ``opflow_split_rule``, starting at the global index of its first sample) under
  the source's file name, and :func:`~opflow.data.transforms.derive` is applied with the recorded
  resolution (``opflow_resolution``), split sizes (``opflow_split_rule``) and name
  (``opflow_dataset``). A derived file therefore costs its whole source range to regenerate.

The comparison is per variable: dimensions, dtype, attributes and the bytes of the values (bit for
bit; a difference is reported with the number of differing samples and the largest absolute
difference). Global attributes are compared too, except those that record *when, where and how* a
file was written rather than what it holds: :data:`VOLATILE_ATTRS` (creation time, ``history``,
commit, package versions, shard layout). The rebuilt file is therefore never byte-identical to the
original; its variables and its remaining attributes are, when the generation is reproducible.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from opflow.data.errors import DatasetError
from opflow.data.format import open_dataset
from solvers.base import SolverError  # noqa: F401  what a failed rebuild raises besides ConfigError (the CLI imports it from here)

#: global attributes that legitimately differ between a file and its regeneration
VOLATILE_ATTRS = (
    "history",
    "opflow_created",
    "opflow_git_commit",
    "opflow_packages",
    "opflow_shard",
    "opflow_shards",
)


@dataclass
class VariableComparison:
    """One variable of the original against the rebuilt file."""

    name: str
    identical: bool
    detail: str = "identical"


@dataclass
class RegenerationReport:
    """The outcome of :func:`regenerate`: per-variable comparisons and differing global attributes."""

    original: Path
    rebuilt: Path | None
    kind: str  # "source" or "derived"
    description: str
    variables: list[VariableComparison] = field(default_factory=list)
    attribute_differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """True when every variable and every non-volatile global attribute is identical."""
        return all(v.identical for v in self.variables) and not self.attribute_differences

    def summary_line(self) -> str:
        """One line: all identical, or which variables (and attributes) differ."""
        n = len(self.variables)
        if self.identical:
            return f"{self.original}: regenerated identically ({n} of {n} variables; history, creation time, commit, versions, shards not compared)"
        bad = [v.name for v in self.variables if not v.identical]
        parts = []
        if bad:
            parts.append(f"{len(bad)} of {n} variables differ ({', '.join(bad)})")
        if self.attribute_differences:
            names = [d.split(":", 1)[0] for d in self.attribute_differences]
            parts.append(f"{len(names)} global attribute(s) differ ({', '.join(names)})")
        return f"{self.original}: NOT identical to its regeneration: " + "; ".join(parts)

    def lines(self) -> list[str]:
        """The full report: a header, one line per variable, the global attributes, the summary."""
        out = [f"{self.original}: {self.kind} file, {self.description}" + (f"; rebuilt file {self.rebuilt}" if self.rebuilt else "")]
        width = max((len(v.name) for v in self.variables), default=0)
        for v in self.variables:
            out.append(f"  {v.name:<{width}}  {'identical' if v.identical else 'DIFFERS: ' + v.detail}")
        if self.attribute_differences:
            out.append("  global attributes differ:")
            out.extend(f"    {d}" for d in self.attribute_differences)
        else:
            out.append(f"  global attributes: identical except {', '.join(VOLATILE_ATTRS)} (not compared)")
        out.append(self.summary_line())
        return out


# ------------------------------------------------------------------------------------------------
# rebuilding


def _attr(attrs: dict[str, Any], key: str, path: Path) -> Any:
    if key not in attrs:
        raise DatasetError(
            f"{path}: no provenance attribute {key!r}: it was not written by an opflow generator "
            "(or by derive from one), so it cannot be regenerated"
        )
    return attrs[key]


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _read_header(path: Path) -> tuple[dict[str, Any], np.ndarray]:
    """Global attributes and global sample indices (``sample``, or ``sample_index`` in format 1)."""
    with open_dataset(path) as nc:
        attrs = {k: _plain(nc.getncattr(k)) for k in nc.ncattrs()}
        name = "sample" if "sample" in nc.variables else "sample_index"
        if name not in nc.variables:
            raise DatasetError(f"{path}: no 'sample' (or 'sample_index') variable: the global sample indices are unknown")
        try:
            index = np.asarray(nc.variables[name][:], dtype=np.int64)
        except (OSError, RuntimeError) as e:
            raise DatasetError(f"{path}: reading {name!r} failed ({e}): the file is damaged") from None
    return attrs, index


def _generator(attrs: dict[str, Any], path: Path) -> tuple[Any, int]:
    from solvers.base import get_generator

    name = str(_attr(attrs, "opflow_generator", path))
    try:
        params = json.loads(str(_attr(attrs, "opflow_params", path)))
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: attribute opflow_params is not JSON ({e})") from None
    seed = int(_attr(attrs, "opflow_seed", path))
    cls = get_generator(name)
    if isinstance(params, dict):  # a file older than a parameter: the value that made it
        params = {**cls.legacy_params, **params}
    gen = cls.from_config(params, where=f"{path.name}: opflow_params")
    return gen, seed


def declared_variables(attrs: dict[str, Any], path: str | os.PathLike = "the file") -> Any:
    """The variables the generator recorded in ``attrs`` writes with the recorded parameters
    (:class:`opflow.data.contract.Declared`; ``opflow validate`` checks files against it), or None
    when no generator of that name is registered (a test's, another version's). Coordinates that
    cannot be built here (a mesh without gmsh) are left unchecked."""
    from opflow.data.contract import Declared
    from solvers.base import available_generators

    if str(attrs.get("opflow_generator")) not in available_generators():
        return None

    gen, _ = _generator(attrs, Path(path))
    try:
        coords: frozenset[str] | None = frozenset(gen.coords())
    except Exception:  # noqa: BLE001 - e.g. ModuleNotFoundError for gmsh: the fields are still checked
        coords = None
    return Declared(gen.name, frozenset(gen.fields()), coords)


def _contiguous(index: np.ndarray, path: Path) -> tuple[int, int]:
    if index.size == 0:
        raise DatasetError(f"{path}: has no samples; nothing to regenerate")
    start = int(index[0])
    if not np.array_equal(index, np.arange(start, start + index.size)):
        raise DatasetError(
            f"{path}: its sample indices are not one contiguous range and it has no opflow_derived_from "
            "attribute; only generated (sharded or merged) files and derived files can be regenerated"
        )
    return start, start + index.size


def rebuild(path: str | os.PathLike, out: str | os.PathLike, *, progress: bool = False) -> tuple[Path, str, str]:
    """Write the regeneration of dataset ``path`` to ``out`` (atomically, see module doc).

    Returns ``(out, kind, description)``; ``kind`` is ``"source"`` or ``"derived"``. Raises
    :class:`~opflow.data.errors.DatasetError` when the attributes do not allow a rebuild, and the
    generator's :class:`~solvers.base.SolverError` or
    :class:`~opflow.data.errors.ConfigError` when the recorded parameters fail today.
    """
    from solvers.generate import write_shard

    path, out = Path(path), Path(out)
    attrs, index = _read_header(path)
    gen, seed = _generator(attrs, path)
    if "opflow_derived_from" not in attrs:
        start, stop = _contiguous(index, path)
        write_shard(gen, seed, start, stop, out, progress=progress)
        return out, "source", f"generator {gen.name}, seed {seed}, samples {start}:{stop}"

    from opflow.data.transforms import derive

    try:
        rule = json.loads(str(_attr(attrs, "opflow_split_rule", path)))
        ranges = {k: (int(rule[k][0]), int(rule[k][1])) for k in ("train", "val", "test")}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise DatasetError(f"{path}: attribute opflow_split_rule is not a train/val/test rule ({e})") from None
    n_source = ranges["test"][1]
    sizes = {k: b - a for k, (a, b) in ranges.items()}
    first = next((a for k, (a, b) in ranges.items() if b > a), None)
    if first is None or index.size == 0:
        raise DatasetError(f"{path}: has no samples; nothing to regenerate")
    offset = int(index[0]) - first
    resolution = int(attrs.get("opflow_resolution", -1))
    source_name = str(attrs["opflow_derived_from"]) or "source.nc"
    with tempfile.TemporaryDirectory(prefix="opflow-regenerate-") as tmp:
        source = write_shard(gen, seed, offset, offset + n_source, Path(tmp) / source_name, progress=progress)
        derive(
            source,
            out,
            resolution=resolution if resolution > 0 else None,
            n_train=sizes["train"],
            n_val=sizes["val"],
            n_test=sizes["test"],
            name=str(attrs.get("opflow_dataset", "")),
        )
    desc = (
        f"generator {gen.name}, seed {seed}, source samples {offset}:{offset + n_source} "
        f"-> derive (resolution {resolution if resolution > 0 else 'as source'}, "
        f"train {sizes['train']}, val {sizes['val']}, test {sizes['test']})"
    )
    return out, "derived", desc


# ------------------------------------------------------------------------------------------------
# comparing


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.asarray(a).shape == np.asarray(b).shape and bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return bool(_plain(a) == _plain(b))


def _short(value: Any, limit: int = 60) -> str:
    text = repr(_plain(value.tolist() if isinstance(value, np.ndarray) else value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _compare_variable(name: str, a: Any, b: Any, block: int = 64) -> VariableComparison:
    if tuple(a.dimensions) != tuple(b.dimensions) or a.shape != b.shape:
        return VariableComparison(name, False, f"shape {a.dimensions}{a.shape} in the original, {b.dimensions}{b.shape} rebuilt")
    if a.dtype != b.dtype:
        return VariableComparison(name, False, f"dtype {a.dtype} in the original, {b.dtype} rebuilt")
    attrs_a = {k: a.getncattr(k) for k in a.ncattrs()}
    attrs_b = {k: b.getncattr(k) for k in b.ncattrs()}
    changed = [
        f"{k} {_short(attrs_a.get(k, '<none>'))} -> {_short(attrs_b.get(k, '<none>'))}"
        for k in sorted(set(attrs_a) | set(attrs_b))
        if k not in attrs_a or k not in attrs_b or not _same(attrs_a[k], attrs_b[k])
    ]
    per_sample = a.dimensions[:1] == ("sample",)
    n = a.shape[0] if per_sample else 1
    step = block if per_sample else 1
    bad: list[int] = []
    max_diff = 0.0
    for i in range(0, n, step):
        sel = slice(i, min(i + step, n)) if per_sample else Ellipsis
        try:
            x = np.ascontiguousarray(a[sel])
        except (OSError, RuntimeError) as e:
            return VariableComparison(name, False, f"unreadable in the original ({e}): the original file is damaged")
        y = np.ascontiguousarray(b[sel])
        if x.tobytes() == y.tobytes():
            continue
        xs = x.reshape(x.shape[0], -1) if per_sample else x.reshape(1, -1)
        ys = y.reshape(xs.shape)
        rows = [r for r in range(xs.shape[0]) if xs[r].tobytes() != ys[r].tobytes()]
        bad.extend(i + r for r in rows)
        if np.issubdtype(x.dtype, np.number):
            with np.errstate(invalid="ignore", over="ignore"):
                d = np.abs(xs[rows].astype(np.float64) - ys[rows].astype(np.float64))
            if d.size and np.isfinite(d).any():
                max_diff = max(max_diff, float(np.nanmax(d)))
    details = []
    if bad:
        where = ", ".join(str(s) for s in bad[:10]) + (", ..." if len(bad) > 10 else "")
        if per_sample:
            details.append(f"values differ in {len(bad)} of {n} samples (positions {where}), max |difference| {max_diff:.3g}")
        else:
            details.append(f"values differ, max |difference| {max_diff:.3g}")
    if changed:
        details.append("attributes differ: " + "; ".join(changed))
    return VariableComparison(name, not details, "; ".join(details) or "identical")


def compare(original: str | os.PathLike, rebuilt: str | os.PathLike) -> tuple[list[VariableComparison], list[str]]:
    """Compare two dataset files variable by variable (bit for bit) and by global attributes.

    Returns the per-variable comparisons (variables of the original first, then those only in
    the rebuilt file) and the differing global attributes other than :data:`VOLATILE_ATTRS`.
    """
    original, rebuilt = Path(original), Path(rebuilt)
    results: list[VariableComparison] = []
    with open_dataset(original) as a, open_dataset(rebuilt) as b:
        for name in [*a.variables, *(n for n in b.variables if n not in a.variables)]:
            if name not in b.variables:
                results.append(VariableComparison(name, False, "only in the original (the rebuilt file has no such variable)"))
            elif name not in a.variables:
                results.append(VariableComparison(name, False, "missing in the original (the rebuilt file has it)"))
            else:
                results.append(_compare_variable(name, a.variables[name], b.variables[name]))
        ga = {k: a.getncattr(k) for k in a.ncattrs() if k not in VOLATILE_ATTRS}
        gb = {k: b.getncattr(k) for k in b.ncattrs() if k not in VOLATILE_ATTRS}
        attrs = [
            f"{k}: {_short(ga.get(k, '<none>'))} in the original, {_short(gb.get(k, '<none>'))} rebuilt"
            for k in sorted(set(ga) | set(gb))
            if k not in ga or k not in gb or not _same(ga[k], gb[k])
        ]
    return results, attrs


def regenerate(path: str | os.PathLike, out: str | os.PathLike | None = None, *, progress: bool = False) -> RegenerationReport:
    """Rebuild ``path`` from its attributes and compare; keep the rebuilt file at ``out`` if given.

    ``out`` must not exist (and must not be ``path``): regenerate never overwrites a file. Without
    ``out`` the rebuilt file lives in a temporary folder (``$TMPDIR``) and is deleted afterwards.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset file")
    if out is not None:
        out = Path(out)
        if out.exists():
            raise DatasetError(f"{out}: exists; regenerate never overwrites a file: remove it or choose another --out")
    with tempfile.TemporaryDirectory(prefix="opflow-regenerate-") as tmp:
        target = out if out is not None else Path(tmp) / path.name
        rebuilt, kind, desc = rebuild(path, target, progress=progress)
        variables, attrs = compare(path, rebuilt)
    return RegenerationReport(path, out, kind, desc, variables, attrs)
