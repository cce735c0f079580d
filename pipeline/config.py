"""The workflow config, loaded and checked as a whole: both halves, and whether each model fits its data.

This is the workflow layer (:mod:`pipeline`): it imports ``opflow`` (the typed tree
:mod:`opflow.config`, the fit check :mod:`opflow.compat`) and ``solvers`` (the generators'
metadata), and neither imports it. The typed tree checks keys, types and ranges. This adds what
only a generator knows, from its ``Params`` and its declared dimensions and fields, without solving
anything and without importing torch:

* each source's solver exists and accepts its ``params`` (the solver's ``Params`` dataclass,
  validated by the one mechanism of :mod:`opflow.schema`), and its layout keeps the generator
  contract for those values (:func:`solvers.contract.check_instance`); ``mpi_ranks > 1`` only for
  solvers that run under MPI;
* every dataset's resolutions fit its source's grid; several that do not, on one source (a source
  regenerated at a new grid), are one line naming the grids that fit every dataset on it;
* every dataset's source exists and its split sizes fit in the source;
* its resolutions (training and zero-shot) are strided subsamples of the source grid;
* its ``task`` names variables the source writes;
* its ``view`` fits the data: trajectory views (``window``, ``one_step``) need fields on
  ``(t, x[, y])``, the other kinds must not get them, and frame indices exist in the source;
* every (dataset, model) pair the run asks for fits (:func:`check_pairs`, :mod:`opflow.compat`):
  :func:`view_shape` is the one place that tells, from the config alone, what a dataset view will
  look like (grid or points, dimension, grid after resolution, points, input sets).

:func:`load_workflow` is the one loader of the workflow config: Snakemake's (``rules/common.smk``)
and ``opflow train --config``'s (the CLI imports it inside the command), so both entry points
refuse the same configs with the same lines. :func:`workflow_schema` is ``opflow schema``'s.

:class:`SourceInfo` is what the Snakefile asks of a source (grid size, valid resolutions, the hash
of its resolved parameters); :func:`source_info` builds it once per source.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opflow.compat import DataShape, check_pair, hparams_of, pairs_of_targets
from opflow.config import BASE_CONFIG, Problems, WorkflowConfig, check_workflow, load_config_files, parse_workflow
from opflow.data.coarsening import coarse_node_count
from opflow.data.errors import ConfigError, DatasetError, MissingStackError
from opflow.data.provenance import params_hash
from opflow.data.transforms import GRID_DIMS, is_periodic, stride_for
from opflow.data.view_spec import OneStepView, WindowView
from solvers.base import FieldSpec, get_generator, params_classes
from solvers.contract import GeneratorContractError, check_instance


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
    try:  # the layout contract for these values, not only the defaults it was checked with at lookup
        check_instance(gen)
    except GeneratorContractError as e:
        raise ConfigError(f"{where}: with these parameters, {e}") from None
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
    try:
        get_generator(src.solver)
    except ConfigError as e:
        raise ConfigError(f"sources.{name}.solver: {e}") from None
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
    off_grid: dict[str, list[tuple[str, int]]] = {}
    for name, ds in wf.datasets.items():
        problems.check(_check_dataset, f"datasets.{name}", ds, wf, infos, off_grid)
    for source, misfits in off_grid.items():
        problems.add(_off_grid_line(wf, source, infos[source], misfits))
    problems.raise_any()
    return wf


def _off_grid_line(wf: WorkflowConfig, source: str, info: SourceInfo, misfits: list[tuple[str, int]]) -> str:
    """One line for the dataset resolutions (``(dotted key, resolution)``) that the grid of ``source``
    cannot be subsampled to: a single one with the resolutions the grid has; several (a source
    regenerated at a new grid breaks every dataset on it) with the grids that fit every dataset."""
    assert info.grid is not None
    if len(misfits) == 1:
        key, res = misfits[0]
        try:
            stride_for(info.grid, res, periodic=info.periodic)
        except DatasetError as e:
            return f"{key}: {e}"
    wanted = {r for ds in wf.datasets.values() if ds.source == source for r in (ds.resolution, *ds.zero_shot) if r is not None}
    step = math.lcm(*(wanted if info.periodic else {r - 1 for r in wanted}))
    offset = 0 if info.periodic else 1
    form = f"{step} r" if info.periodic else f"{step} r + 1"
    examples = ", ".join(str(step * k + offset) for k in (1, 2, 3))
    shown = "; ".join(f"{key} {res}" for key, res in misfits)
    return (
        f"sources.{source}: {len(misfits)} dataset resolutions are not strided subsamples of its {info.grid}-point"
        f"{' periodic' if info.periodic else ''} grid ({shown}); a grid of {form} points ({examples}, ...) fits every dataset on this source"
    )


def _check_dataset(where: str, ds: Any, wf: WorkflowConfig, infos: dict[str, SourceInfo], off_grid: dict[str, list[tuple[str, int]]]) -> None:
    """The generation checks of one dataset; a ConfigError holds all of its problems. Resolutions
    that its source's grid does not subsample go to ``off_grid[source]`` (one line per source)."""
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
        except DatasetError:
            off_grid.setdefault(ds.source, []).append((f"{where}.{key}", res))
        if getattr(ds.view, "inputs", None) == "coarse":  # the inverse view's coarse nodes must lie on this grid
            try:
                coarse_node_count(res, ds.view.factor)
            except DatasetError as err:
                problems.add(f"{where}.{key}: {res}: {err}")
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


def check_config(config: Mapping[str, Any], targets: Sequence[str] | None = None) -> WorkflowConfig:
    """Everything checked at load time: the typed tree, the learning cross checks, the generators,
    and the (dataset, model) pairs of ``targets`` (default: the config's own ``targets``).

    All cross checks of both halves run; the :class:`ConfigError` lists every mistake, one line each.
    The pairs are checked when the rest is sound (they read the sources' layouts)."""
    wf = parse_workflow(config)
    problems = Problems()
    problems.check(check_workflow, wf)
    problems.check(check_generation_config, wf)
    if not problems.lines:
        problems.check(check_targets, wf, wf.targets if targets is None else targets)
    problems.raise_any()
    return wf


def load_workflow(
    config: Mapping[str, Any] | Sequence[str | os.PathLike[str]], *, pairs: Sequence[tuple[str, str]] = ()
) -> WorkflowConfig:
    """The workflow config, read and checked: the one loader of both entry points.

    Snakemake (``rules/common.smk``) passes the mapping it merged from the Snakefile's
    ``configfile:`` (:data:`opflow.config.BASE_CONFIG`) and every ``--configfile``; ``opflow train``
    and ``opflow run-config`` with ``--config FILE...`` pass the files, read and deep-merged here in
    order as ``--configfile`` merges them (:func:`opflow.config.load_config_files`, which names a
    file that is not YAML or not a mapping). Both then get the same checks: :func:`check_config`
    (the typed tree, the cross checks of both halves, the profile's ``targets``), and
    :func:`check_pairs` for ``pairs`` (what Snakemake checks for a target given on its command
    line while it builds the DAG; ``opflow train`` gives its own dataset and model).

    Files alone leave the base out: when they leave a required key unset and none of them is the
    base, the error's first line says that they are an overlay and names the file to put first.
    """
    files = None if isinstance(config, Mapping) else [str(f) for f in config]
    if files is not None:
        config = load_config_files(files)
    try:
        wf = check_config(config)  # type: ignore[arg-type]
        if pairs:
            check_pairs(wf, list(pairs))
    except ConfigError as e:
        hint = _overlay_hint(files, e.problems) if files is not None else None
        raise ConfigError.collect([hint, *e.problems] if hint else e.problems) from None
    return wf


def _overlay_hint(files: Sequence[str], problems: Sequence[str]) -> str | None:
    """The line saying that ``files`` are an overlay of the base config, when a required key is
    missing and none of them is that base (None otherwise)."""
    if not any("missing required key" in p for p in problems):
        return None
    base = Path(__file__).resolve().parents[1] / BASE_CONFIG
    if any(Path(f).resolve() == base for f in files):
        return None
    shown = base if base.exists() else Path(BASE_CONFIG)
    with contextlib.suppress(ValueError):
        shown = shown.relative_to(Path.cwd())
    given = " ".join(files)
    return (
        f"{given}: a required key is missing, so {'these files are' if len(files) > 1 else 'this file is'} an overlay of the "
        f"workflow's base config {shown} (Snakemake reads it first, then every --configfile); give --config {shown} {given}"
    )


# --------------------------------------------------------------------------- what a dataset view will look like


@functools.lru_cache(maxsize=256)
def _shared_coords(solver: str, params_json: str) -> dict[str, tuple[str, ...]]:
    """Name -> dims of the coordinate variables shared by every sample (a mesh's nodes, a time axis)."""
    gen = get_generator(solver).from_config(json.loads(params_json))
    return {name: tuple(v.dims) for name, v in gen.coords().items()}


def _point_coordinates(wf: WorkflowConfig, source: str, info: SourceInfo, dim: str) -> list[str]:
    """The coordinate variables of point dimension ``dim`` (the rule of :func:`opflow.data.points.point_coordinate_names`)."""
    per_sample = {n: f.dims for n, f in info.fields.items()}
    if per_sample.get(dim) == (dim,):
        return [dim]
    by_role = sorted(n for n, f in info.fields.items() if f.dims == (dim,) and f.role == "coordinate")
    by_name = [f"{dim}_{a}" for a in "xyz" if per_sample.get(f"{dim}_{a}") == (dim,)]
    if by_role or by_name:
        return by_role or by_name
    src = wf.sources[source]
    shared = _shared_coords(src.solver, json.dumps(src.params, sort_keys=True))
    if shared.get(dim) == (dim,):
        return [dim]
    return [f"{dim}_{a}" for a in "xyz" if shared.get(f"{dim}_{a}") == (dim,)]


def view_shape(
    wf: WorkflowConfig, dataset: str, *, resolution: int | None = None, source: str | None = None, training: bool = True, label: str | None = None
) -> DataShape | None:
    """What ``datasets.<dataset>`` (its task and view) will look like to a model, from the config alone.

    ``resolution``: another grid of the same samples (a zero-shot resolution); ``source``: the
    dataset's task and view applied to another source (an extra evaluation set). Grids (fields on
    ``x[, y[, z]]``, trajectory frames, the ``inverse`` view's fine input) have ``resolution``
    points per axis (the source's grid by default); a 1-D series is a grid of its points; a mesh is
    a point cloud whose coordinate dimension is known but whose node count is only when every
    sample has the same (no ``<dim>_count``). None when it cannot be told here: a source whose
    solver is not installed, or a view kind registered by a plugin.
    """
    ds = wf.dataset(dataset)
    src = source or ds.source
    if src in _UNAVAILABLE:
        return None
    info = source_info(wf, src)
    kind = ds.view.kind
    role = {r: [n for n, f in info.fields.items() if f.role == r] for r in ("input", "output")}
    if kind == "inverse":  # the file's roles swapped (opflow.data.inverse.inverse_task)
        role = {"input": role["output"], "output": role["input"]}
    outputs = ds.task.outputs or role["output"]
    inputs = ds.task.inputs if ds.task.inputs is not None else outputs if ds.view.trajectory else role["input"]
    skip = ("t",) if ds.view.trajectory else ()  # a trajectory's points are those of one frame
    out_dims = [d for d in info.fields[outputs[0]].dims if d not in skip] if outputs and outputs[0] in info.fields else []
    point_inputs = [n for n in inputs if n in info.fields and [d for d in info.fields[n].dims if d not in skip] == out_dims]
    if label is None:
        label = f"datasets.{dataset}" + (f" (source {src})" if source else "") + (f" at resolution {resolution}" if resolution else "")
    common = {"label": label, "first_input": point_inputs[0] if point_inputs else None, "training": training}
    if out_dims and all(d in GRID_DIMS for d in out_dims):
        if kind not in ("auto", "grid", "window", "one_step", "inverse"):
            return None
        res = int(resolution or (ds.resolution if source is None else None) or info.grid or info.dims[out_dims[0]])
        on_grid = kind != "inverse" or ds.view.targets_on_input_grid
        if kind == "inverse" and ds.view.inputs == "coarse":  # the model's grid is the coarse one (opflow.data.inverse)
            try:
                res = coarse_node_count(res, ds.view.factor)
            except DatasetError as err:
                raise ConfigError(f"{label}: {err}") from None
        grid = (res,) * len(out_dims)
        view = "grid" if kind == "auto" else kind
        return DataShape(view=view, layout="grid", coord_dim=len(grid), grid=grid, n_points=res ** len(grid), targets_on_grid=on_grid, **common)
    if len(out_dims) != 1 or kind not in ("auto", "series", "mesh"):
        return None
    dim = out_dims[0]
    coords = _point_coordinates(wf, src, info, dim)
    if kind == "auto":
        kind = "series" if len(coords) <= 1 else "mesh"
    ragged = f"{dim}_count" in info.fields
    n = None if ragged else info.dims.get(dim)
    sets = tuple(_input_set_shape(wf, src, info, spec) for spec in getattr(ds.view, "input_sets", ()))
    if kind == "series" and not ragged and n:
        return DataShape(view=kind, layout="grid", coord_dim=1, grid=(n,), n_points=n, input_sets=sets, **common)
    return DataShape(view=kind, layout="points", coord_dim=max(len(coords), 2 if kind == "mesh" else 1), n_points=n, input_sets=sets, **common)


def _input_set_shape(wf: WorkflowConfig, source: str, info: SourceInfo, spec: Any) -> tuple[int, int] | None:
    """``(coordinate dim, channels)`` of one ``view.input_sets`` entry (None when not known here)."""
    if isinstance(spec.coords, list):
        d = len(spec.coords)
    elif spec.coords == "polar":
        d = 2
    elif spec.coords == "index":
        d = 1
    else:
        first = info.fields.get(spec.inputs[0])
        d = len(_point_coordinates(wf, source, info, first.dims[0])) if first is not None and len(first.dims) == 1 else 0
    return (d, len(spec.inputs)) if d else None


def pair_shapes(wf: WorkflowConfig, dataset: str) -> list[DataShape]:
    """The shapes a model of ``dataset`` meets: its training view, each zero-shot grid, each extra evaluation set."""
    shapes = [view_shape(wf, dataset)]
    shapes += [view_shape(wf, dataset, resolution=r, training=False) for r in wf.dataset(dataset).zero_shot]
    for name, (kind, target) in wf.eval_sets(dataset).items():
        label = f"datasets.{dataset}.eval_sets.{name} ({kind} {target})"
        if kind == "dataset":
            shapes.append(view_shape(wf, target, training=False, label=label))
        else:
            shapes.append(view_shape(wf, dataset, source=target, training=False, label=label))
    return [s for s in shapes if s is not None]


def check_pairs(wf: WorkflowConfig, pairs: Sequence[tuple[str, str]]) -> None:
    """Refuse the first (dataset, model) pair whose model does not fit its data (:func:`opflow.compat.check_pair`)."""
    for d, m in pairs:
        entry = wf.model(m)
        hp = hparams_of({"arch": entry.arch, **entry.hparams()}, f"models.{m}")
        check_pair(d, m, entry.arch, hp, wf.train_config(d, m), pair_shapes(wf, d))


def check_targets(wf: WorkflowConfig, targets: Sequence[str]) -> None:
    """Check the pairs that ``targets`` (paths relative to the root, or under it) ask for."""
    pairs = pairs_of_targets(targets, wf.datasets, wf.models) + pairs_of_targets(targets, wf.datasets, wf.models, wf.root)
    check_pairs(wf, list(dict.fromkeys(pairs)))


def dataset_resolution(config: Mapping[str, Any] | WorkflowConfig, name: str) -> int | None:
    """The training resolution of dataset ``name`` (its source's grid when not given)."""
    wf = config if isinstance(config, WorkflowConfig) else parse_workflow(config)
    ds = wf.dataset(name)
    if ds.resolution is not None:
        return ds.resolution
    return source_info(wf, ds.source).grid


def workflow_schema() -> dict[str, Any]:
    """The JSON schema of the workflow config with each solver's ``params`` typed by its ``Params``
    (``opflow schema``; :func:`opflow.config_schema.workflow_json_schema`)."""
    from opflow.config_schema import workflow_json_schema

    return workflow_json_schema(params_classes())
