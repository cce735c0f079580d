"""Checks of the generation half of the workflow config that need a solver's metadata, run when the workflow loads.

The typed tree (:mod:`opflow.config`) checks keys, types and ranges. This adds what only a
generator knows, from its ``Params`` and its declared dimensions and fields, without solving
anything and without importing torch:

* each source's solver exists and accepts its ``params`` (the solver's ``Params`` dataclass,
  validated by the one mechanism of :mod:`opflow.schema`); ``mpi_ranks > 1`` only for solvers that
  run under MPI;
* every dataset's source exists and its split sizes fit in the source;
* its resolutions (training and zero-shot) are strided subsamples of the source grid;
* its ``task`` names variables the source writes;
* its ``view`` fits the data: trajectory views (``window``, ``one_step``) need fields on
  ``(t, x[, y])``, the other kinds must not get them, and frame indices exist in the source.

:class:`SourceInfo` is what the Snakefile asks of a source (grid size, valid resolutions, the hash
of its resolved parameters); :func:`source_info` builds it once per source.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opflow.config import Problems, WorkflowConfig, check_workflow, parse_workflow
from opflow.data.errors import ConfigError, DatasetError, MissingStackError
from opflow.data.provenance import params_hash
from opflow.data.transforms import GRID_DIMS, is_periodic, stride_for
from opflow.data.view_spec import OneStepView, WindowView
from solvers.base import FieldSpec, get_generator


@dataclass(frozen=True)
class SourceInfo:
    """What the workflow needs to know of one source, from its generator's metadata."""

    solver: str
    #: every parameter of the solver, defaults filled in (what the shard job receives)
    params: dict[str, Any]
    #: hash of ``params``: the shard rule reruns when, and only when, this changes
    params_hash: str
    #: points per side of a square grid; None for meshes and series
    grid: int | None
    periodic: bool
    #: per-sample dimensions, e.g. {"t": 21, "x": 64, "y": 64}
    dims: dict[str, int]
    fields: dict[str, FieldSpec]
    coords: tuple[str, ...]
    mpi: bool

    def resolutions(self) -> list[int]:
        """Every resolution a dataset of this source can be derived at (strided subsamples)."""
        if self.grid is None:
            return []
        out = []
        for r in range(2, self.grid + 1):
            try:
                stride_for(self.grid, r, periodic=self.periodic)
            except DatasetError:
                continue
            out.append(r)
        return out

    @property
    def frames(self) -> int | None:
        return self.dims.get("t")


@functools.lru_cache(maxsize=256)
def _info(solver: str, params_json: str, where: str) -> SourceInfo:
    gen = get_generator(solver).from_config(json.loads(params_json), where=where)
    try:
        dims = gen.dims()
    except ModuleNotFoundError as e:  # e.g. a mesh from gmsh on a machine without the FEM stack
        raise MissingStackError(
            f"{where}: solver {solver!r} needs the module {e.name!r} to size its data, and it is not installed here; "
            "make this source on a machine with the FEM stack (make setup installs it)"
        ) from None
    sizes = {dims[d] for d in GRID_DIMS if d in dims}
    grid = sizes.pop() if len(sizes) == 1 else None
    coords = gen.coords() if grid is not None else {}
    periodic = any(is_periodic(coords[d].attrs) for d in GRID_DIMS if d in coords)
    resolved = dataclasses.asdict(gen.params)
    return SourceInfo(
        solver=solver,
        params=resolved,
        params_hash=params_hash({"solver": solver, "params": resolved}),
        grid=grid,
        periodic=periodic,
        dims=dict(dims),
        fields=dict(gen.fields()),
        coords=tuple(coords),
        mpi=bool(getattr(gen, "supports_mpi", False)),
    )


def source_info(wf: WorkflowConfig, name: str) -> SourceInfo:
    """The generator metadata of ``sources.<name>`` (cached: cheap to ask per job)."""
    if name not in wf.sources:
        raise ConfigError(f"sources: no source {name!r}; defined sources: {sorted(wf.sources)}")
    src = wf.sources[name]
    return _info(src.solver, json.dumps(src.params, sort_keys=True), f"sources.{name}.params")


#: sources whose generator cannot be asked for its layout on this machine (name -> why), set by
#: :func:`check_generation_config`
_UNAVAILABLE: dict[str, str] = {}


def unavailable_sources() -> dict[str, str]:
    """The sources the last :func:`check_generation_config` could not check here, with the reason: their
    solver needs a package this machine lacks (gmsh on the GPU machines). Their datasets are checked
    for split sizes only; a job that needs one stops with the reason when Snakemake builds the DAG."""
    return dict(_UNAVAILABLE)


def check_generation_config(config: Mapping[str, Any] | WorkflowConfig) -> WorkflowConfig:
    """Check sources and datasets against the generators (module docstring); return the typed tree.

    A source whose solver needs a package that is not installed here (:class:`MissingStackError`: the
    FEM stack on the GPU machines) is left out of the checks and listed by :func:`unavailable_sources`,
    so the workflow still loads there for the other targets.
    """
    wf = config if isinstance(config, WorkflowConfig) else parse_workflow(config)
    infos: dict[str, SourceInfo] = {}
    problems = Problems()
    _UNAVAILABLE.clear()
    for name in wf.sources:
        try:
            infos[name] = source_info(wf, name)
        except MissingStackError as e:
            _UNAVAILABLE[name] = str(e)
        except ConfigError as e:
            problems.lines.extend(e.problems)
    for name, src in wf.sources.items():
        if name in infos and src.mpi_ranks > 1 and not infos[name].mpi:
            problems.add(f"sources.{name}.mpi_ranks: {src.mpi_ranks} but solver {src.solver!r} does not run under MPI; set mpi_ranks: 1")
    for name, ds in wf.datasets.items():
        problems.check(_check_dataset, f"datasets.{name}", ds, wf, infos)
    problems.raise_any()
    return wf


def _check_dataset(where: str, ds: Any, wf: WorkflowConfig, infos: dict[str, SourceInfo]) -> None:
    """The generation checks of one dataset; a ConfigError holds all of its problems."""
    if ds.source not in wf.sources:
        raise ConfigError(f"{where}.source: no source {ds.source!r}; defined sources: {sorted(wf.sources)}")
    problems = Problems()
    have = wf.sources[ds.source].n_samples
    need = ds.train + ds.val + ds.test
    if need > have:
        problems.add(f"{where}: train + val + test = {need} samples but sources.{ds.source}.n_samples is {have}; raise n_samples or shrink the splits")
    if ds.source in _UNAVAILABLE or ds.source not in infos:  # checked where its solver stack is installed / its source is wrong
        problems.raise_any()
        return
    info = infos[ds.source]
    resolutions = [("resolution", ds.resolution)] + [(f"zero_shot[{i}]", r) for i, r in enumerate(ds.zero_shot)]
    for key, res in resolutions:
        if res is None:
            continue
        if info.grid is None:
            problems.add(f"{where}.{key}: {res} given but source {ds.source!r} has no square grid to subsample")
            continue
        try:
            stride_for(info.grid, res, periodic=info.periodic)
        except DatasetError as e:
            problems.add(f"{where}.{key}: {e}")
    problems.check(_check_task_and_view, where, ds, info)
    problems.raise_any()


def _check_task_and_view(where: str, ds: Any, info: SourceInfo) -> None:
    variables = {*info.fields, *info.coords}
    for key in ("inputs", "outputs"):
        names = getattr(ds.task, key) or []
        missing = [n for n in names if n not in variables]
        if missing:
            raise ConfigError(f"{where}.task.{key}: {missing} are not variables of source {ds.source!r}; it writes {sorted(info.fields)}")
    for i, spec in enumerate(getattr(ds.view, "input_sets", None) or ()):
        key = f"{where}.view.input_sets.{i}"
        missing = [n for n in [*spec.inputs, *(spec.coords if isinstance(spec.coords, list) else [])] if n not in variables]
        if missing:
            raise ConfigError(f"{key}: {missing} are not variables of source {ds.source!r}; it writes {sorted(info.fields)}")
        set_dims = {info.fields[n].dims for n in spec.inputs if n in info.fields}
        if len(set_dims) != 1 or len(next(iter(set_dims))) != 1:
            raise ConfigError(f"{key}.inputs: {spec.inputs} must lie on one point dimension (sample, D); they have {sorted(set_dims)}")
    outputs = ds.task.outputs or [n for n, f in info.fields.items() if f.role == "output"]
    trajectory = any(info.fields[n].dims[:1] == ("t",) and len(info.fields[n].dims) > 1 for n in outputs if n in info.fields)
    view = ds.view
    if view.trajectory and not trajectory:
        raise ConfigError(
            f"{where}.view.kind: {view.kind!r} reads trajectories (sample, t, x[, y]) but source {ds.source!r} writes "
            f"{ {n: ('sample', *info.fields[n].dims) for n in outputs if n in info.fields} }; use kind auto"
        )
    if trajectory and view.kind not in ("window", "one_step"):
        raise ConfigError(f"{where}.view.kind: the outputs of source {ds.source!r} are trajectories; choose 'window' or 'one_step'")
    n_t = info.frames
    if n_t is None:
        return
    last = n_t - 1
    if isinstance(view, WindowView):
        for key in ("frames", "train_frames"):
            rng = getattr(view, key)
            if rng is not None and rng[1] > last:
                raise ConfigError(f"{where}.view.{key}: {list(rng)} but source {ds.source!r} has {n_t} frames (0 .. {last})")
        if view.frames is None and last < view.history:
            raise ConfigError(f"{where}.view.history: {view.history} but source {ds.source!r} has only {n_t} frames")
    if isinstance(view, OneStepView):
        for key in ("input_frame", "output_frame"):
            if getattr(view, key) > last:
                raise ConfigError(f"{where}.view.{key}: {getattr(view, key)} but source {ds.source!r} has {n_t} frames (0 .. {last})")


def check_config(config: Mapping[str, Any]) -> WorkflowConfig:
    """Everything checked at load time: the typed tree, the learning cross checks, the generators.

    All cross checks of both halves run; the :class:`ConfigError` lists every mistake, one line each."""
    wf = parse_workflow(config)
    problems = Problems()
    problems.check(check_workflow, wf)
    problems.check(check_generation_config, wf)
    problems.raise_any()
    return wf


def dataset_resolution(config: Mapping[str, Any] | WorkflowConfig, name: str) -> int | None:
    """The training resolution of dataset ``name`` (its source's grid when not given)."""
    wf = config if isinstance(config, WorkflowConfig) else parse_workflow(config)
    ds = wf.dataset(name)
    if ds.resolution is not None:
        return ds.resolution
    return source_info(wf, ds.source).grid
