"""Provenance of generated data and trained models: parameters, seeds, versions, commit.

A dataset's global attributes hold everything needed to regenerate it bit for bit: the generator
name, its full parameters (canonical JSON) and their hash, the base seed and the per-sample seed
rule, package versions and the git commit of the code that wrote it.

Per-sample seed rule: sample ``i`` of a set with base seed ``s`` draws from
``numpy.random.default_rng(numpy.random.SeedSequence(s, spawn_key=(i,)))``. It depends on nothing
else (not on shard size, block size or worker count), which is what makes sharded generation exact.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import subprocess
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
    out = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def git_commit(path: str | Path | None = None) -> str:
    """The commit of the code (with '+dirty' when the tree has changes), or 'unknown'."""
    cwd = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance_attrs(generator: str, params: dict[str, Any], seed: int, **extra: Any) -> dict[str, Any]:
    """Global attributes for a generated dataset (see module doc)."""
    attrs: dict[str, Any] = {
        "opflow_generator": generator,
        "opflow_params": canonical_json(params),
        "opflow_params_hash": params_hash({"generator": generator, "params": params, "seed": int(seed)}),
        "opflow_seed": int(seed),
        "opflow_seed_rule": SEED_RULE,
        "opflow_created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "opflow_packages": canonical_json(package_versions()),
        "opflow_git_commit": git_commit(),
    }
    for k, v in extra.items():
        attrs[f"opflow_{k}"] = canonical_json(v) if isinstance(v, dict | list) else v
    return attrs
