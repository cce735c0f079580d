"""A carried copy of a dataset file: only the variables some runs read, the same for what they read.

A command to the borrowed GPU machine carries at most 64 MiB, the tracked files and the wheels included
(docs/gpu.md). Data made on the CPU machine must travel in it: the FEM sets, since dolfinx is not on the
GPU machine. ``data/elasticity/all.nc`` is 40.5 MB, mostly variables that its pairs never read: the
nodal stress and displacements, the mesh nodes and cells, the void's coefficients, the quadrature
weights. The ``elasticity972`` pairs read the 972 Gauss points' coordinates and von Mises stress.

:func:`write_subset` writes a file with only the variables that the runs' views read, recorded while the
real views build each run's training and test splits (:func:`opflow.data.format.recorded_reads`, the same
:func:`opflow.data.views.make_dataset` calls as :meth:`opflow.train.Trainer.setup`). A float64 variable
that the views turn into float32 anyway (the point views read coordinates, inputs and outputs as float32)
is stored as float32: the same float32 values the view would make from the float64 ones. Then every
split of every run is built from both files, and the subset is refused unless each array the two
datasets hold (coordinates, inputs, targets, counts, globals, cells, sample indices, input sets) is equal
in dtype, shape and every bit. Where the float32 copy is not, the float64 variables are kept as they are.

A variable that is a run's task input or output takes that role in the subset (the elasticity source names the nodal
stress its output, and ``elasticity972`` trains on the Gauss points' stress), so that the subset passes
:func:`opflow.data.format.validate`. The subset keeps the file's global attributes (its provenance) and adds ``opflow_subset_of`` (the file's
name), ``opflow_subset_of_sha256`` and ``opflow_subset_variables`` (the variables kept, with the ones
stored as float32 marked ``:float32``). It is a different file: its SHA-256 and its training-split
digest (:func:`opflow.records.training_split_digest`) are its own, so a result or a checkpoint made on
it names it, and a checkpoint of a run trained on it resumes on the same subset only. The subset is a
function of the file and the runs (the variables are kept in the file's order), so writing it again
from the same file for the same runs gives the same data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DatasetError
from .format import Variable, open_dataset, read_dataset, recorded_reads, write_dataset

#: global attributes a subset adds to those of its file
SUBSET_ATTRS = ("opflow_subset_of", "opflow_subset_of_sha256", "opflow_subset_variables")


def _splits(path: str | os.PathLike, run: Mapping[str, Any]) -> list[Any]:
    """The datasets a training of ``run`` builds from ``path``: its training split, then its test split as the
    evaluation reads it (:meth:`opflow.train.Trainer.setup`)."""
    from opflow.data.views import make_dataset, training_purpose

    train = make_dataset(path, "train", run.get("task"), run.get("view"), purpose=training_purpose((run.get("training") or {}).get("unroll")))
    test = make_dataset(path, "test", train.task, run.get("view"), purpose="rollout")
    return [train, test]


def variables_read(path: str | os.PathLike, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The variables of ``path`` that the views of ``runs`` (run configs: ``task``, ``view``) read, in the file's
    order."""
    with recorded_reads() as names:
        for run in runs:
            _splits(path, run)
    with open_dataset(path) as nc:
        return [n for n in nc.variables if n in names]


def _arrays(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Every tensor and numpy array a dataset holds, by attribute path (tuples, lists and dataclasses walked)."""
    import torch

    out: dict[str, Any] = {}
    items = vars(obj).items() if hasattr(obj, "__dict__") else ()
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, torch.Tensor | np.ndarray):
            out[key] = v
        elif isinstance(v, tuple | list):
            for i, x in enumerate(v):
                if isinstance(x, torch.Tensor | np.ndarray):
                    out[f"{key}[{i}]"] = x
                elif hasattr(x, "__dict__"):
                    out.update(_arrays(x, f"{key}[{i}]."))
    return out


def _same(a: Any, b: Any) -> bool:
    import torch

    a, b = (torch.as_tensor(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x for x in (a, b))
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:  # bit for bit (NaN in padding included)
        a, b = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    return bool(torch.equal(a, b))


def differences(src: str | os.PathLike, dst: str | os.PathLike, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the datasets of ``runs`` built from ``dst`` hold other than those built from ``src`` (empty: the same)."""
    out = []
    for run in runs:
        for a, b in zip(_splits(src, run), _splits(dst, run), strict=True):
            x, y = _arrays(a), _arrays(b)
            where = f"{run.get('dataset', '?')}/{run.get('model', '?')} {a.split}"
            out += [f"{where}: {k} is missing" for k in sorted(set(x) - set(y))]
            out += [f"{where}: {k} differs" for k in sorted(set(x) & set(y)) if not _same(x[k], y[k])]
    return out


def _roles(runs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The role each variable has in the runs' tasks (``output`` over ``input``)."""
    roles: dict[str, str] = {}
    for run in runs:
        task = run.get("task") or {}
        roles.update({n: "input" for n in task.get("inputs", ()) if n not in roles})
        roles.update({n: "output" for n in task.get("outputs", ())})
    return roles


def _write(src: Path, dst: Path, names: Sequence[str], float32: Sequence[str], sha: str, roles: Mapping[str, str]) -> None:
    ds = read_dataset(src, names)
    variables = {
        n: Variable(v.dims, v.data.astype(np.float32) if n in float32 else v.data, {**v.attrs, **({"role": roles[n]} if n in roles else {})})
        for n, v in ds.variables.items()
        if n in names
    }
    kept = " ".join(f"{n}:float32" if n in float32 else n for n in names)
    attrs = {k: v for k, v in ds.attrs.items() if k not in SUBSET_ATTRS}
    attrs.update(opflow_subset_of=src.name, opflow_subset_of_sha256=sha, opflow_subset_variables=kept)
    write_dataset(dst, variables, attrs)


def write_subset(src: str | os.PathLike, dst: str | os.PathLike, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Write to ``dst`` the variables of ``src`` that ``runs`` read (module docstring), float64 ones as float32 where
    that leaves every dataset the same, and check that it does. Returns ``{"variables", "float32", "bytes",
    "source_bytes"}``; raises :class:`DatasetError` naming the arrays that differ."""
    from opflow.records import file_sha256

    src, dst = Path(src), Path(dst)
    if dst.exists() and dst.resolve() == src.resolve():
        raise DatasetError(f"{dst}: a subset is never written over the file it is cut from (give another destination)")
    if not runs:
        raise DatasetError(f"{src}: a subset needs at least one run to keep the variables of")
    names = variables_read(src, runs)
    with open_dataset(src) as nc:
        wide = [n for n in names if np.dtype(nc.variables[n].dtype) == np.float64]
    sha = file_sha256(src)
    for float32 in (wide, []) if wide else ([],):
        _write(src, dst, names, float32, sha, _roles(runs))
        diff = differences(src, dst, runs)
        if not diff:
            return {"variables": names, "float32": list(float32), "bytes": dst.stat().st_size, "source_bytes": src.stat().st_size}
    dst.unlink(missing_ok=True)
    raise DatasetError(f"{src}: the subset of {names} does not give the same datasets: {'; '.join(diff[:5])}")


def subset_source(path: str | os.PathLike) -> str | None:
    """The SHA-256 of the file that ``path`` is a subset of, or None when it is not a subset."""
    with open_dataset(path) as nc:
        return str(nc.getncattr("opflow_subset_of_sha256")) if "opflow_subset_of_sha256" in nc.ncattrs() else None


def is_current(src: str | os.PathLike, dst: str | os.PathLike, runs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``dst`` is the subset of ``src`` as it is now (its SHA-256) for ``runs`` (the variables they read now)."""
    from opflow.records import file_sha256

    if not Path(dst).is_file() or subset_source(dst) != file_sha256(src):
        return False
    with open_dataset(dst) as nc:
        kept = [n.split(":")[0] for n in str(nc.getncattr("opflow_subset_variables")).split()]
    return kept == variables_read(src, runs)


__all__ = ["SUBSET_ATTRS", "differences", "is_current", "subset_source", "variables_read", "write_subset"]
