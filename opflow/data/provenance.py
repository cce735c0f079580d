"""Provenance of generated data and trained models: parameters, seeds, versions, commit.

A dataset's global attributes hold everything needed to regenerate its arrays bit for bit (``opflow
regenerate FILE`` checks it): the generator name, its full parameters (canonical JSON) and their
hash, the base seed and the per-sample seed rule, package versions and the git commit of the code
that wrote it. Beside them the CF attributes ``title`` and ``history`` (one line per program that
wrote the file: UTC time and command line, see :func:`history_line`); ``Conventions`` is set by the
writer (:class:`opflow.data.format.DatasetWriter`). The creation time, the history and the package
versions and commit naturally differ between a file and its regeneration.

Per-sample seed rule: sample ``i`` of a set with base seed ``s`` draws from
``numpy.random.default_rng(numpy.random.SeedSequence(s, spawn_key=(i,)))``. It depends on nothing
else (not on shard size, block size or worker count), which is what makes sharded generation exact.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

SEED_RULE = "numpy.random.default_rng(numpy.random.SeedSequence(seed, spawn_key=(sample_index,)))"

_PACKAGES = ("opflow", "numpy", "scipy", "pyamg", "netCDF4", "torch", "dolfinx-solver-real", "fenics-basix", "gmsh", "snakemake")


def sample_rng(seed: int, index: int) -> np.random.Generator:
    """The random generator of sample ``index`` in a set with base seed ``seed`` (see module doc)."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(int(index),)))


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) used for hashing and for attributes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=json_default)


def json_default(o: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays and paths (the one JSON encoder of opflow)."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot serialise {type(o).__name__} as JSON")


def params_hash(params: Any) -> str:
    """Short SHA-256 of the canonical JSON of ``params``."""
    return hashlib.sha256(canonical_json(params).encode()).hexdigest()[:16]


def package_versions(names: tuple[str, ...] = _PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (packages that are not installed are left out)."""
    out = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def git_commit(path: str | Path | None = None) -> str:
    """The commit of the code (with '+dirty' when the tree has changes), or 'unknown'.

    Changes include untracked files that are not ignored: a new solver module that was never
    added would otherwise give data whose commit looks clean but cannot regenerate them. The
    workflow's outputs are ignored (``.gitignore``; a profile's own ``root`` gets a ``.gitignore``
    of its own when the workflow starts), so a run does not make its own tree dirty."""
    cwd = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=normal"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``2025-01-31T12:00:00+00:00``)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def command_line() -> str:
    """The command line of this process as a user would type it (``python -m solvers shard ...``,
    ``opflow derive ...``), for the ``history`` attribute."""
    argv = list(sys.argv)
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        program = ["python", "-m", spec.name.removesuffix(".__main__")]
    elif argv and argv[0] not in ("", "-c"):
        program = [Path(argv[0]).name]
    else:
        program = ["python", "-c", "..."]
    return shlex.join(program + argv[1:])


def history_line(command: str | None = None) -> str:
    """One CF ``history`` line: ``<UTC time>: <command>`` (the current command line by default)."""
    return f"{utc_now()}: {command if command is not None else command_line()}"


def append_history(history: Any, line: str) -> str:
    """``history`` (possibly empty or absent) with ``line`` appended as its last line (CF usage)."""
    old = str(history).rstrip("\n") if history not in (None, "") else ""
    return f"{old}\n{line}" if old else line


def provenance_attrs(
    generator: str, params: dict[str, Any], seed: int, *, title: str | None = None, **extra: Any
) -> dict[str, Any]:
    """Global attributes for a generated dataset (see module doc).

    ``title`` (CF) defaults to ``"<generator> samples generated by opflow"``; ``extra`` items are
    written as ``opflow_<key>`` (dicts and lists as canonical JSON).
    """
    attrs: dict[str, Any] = {
        "title": title if title is not None else f"{generator} samples generated by opflow",
        "opflow_generator": generator,
        "opflow_params": canonical_json(params),
        "opflow_params_hash": params_hash({"generator": generator, "params": params, "seed": int(seed)}),
        "opflow_seed": int(seed),
        "opflow_seed_rule": SEED_RULE,
        "opflow_created": utc_now(),
        "opflow_packages": canonical_json(package_versions()),
        "opflow_git_commit": git_commit(),
    }
    for k, v in extra.items():
        attrs[f"opflow_{k}"] = canonical_json(v) if isinstance(v, dict | list) else v
    return attrs
