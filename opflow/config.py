"""The learning half of the workflow config: training, models, tasks and evaluation, checked early.

Merge order of the training settings of one run (dataset ``d``, model ``m``), later wins::

    TrainConfig defaults  <  training:  <  models.m.training  <  datasets.d.training

The defaults are the ONO protocol (Xiao et al., "Improved Operator Learning by Orthogonal
Attention", section 4 "Implementation details", and the authors' released code,
github.com/xzppp/ONO: ``Darcy_example.py`` and the Darcy command line in its README):

* 500 epochs, AdamW, OneCycle learning rate with peak ``lr = 1e-3`` stepped once per batch, the
  other OneCycle settings at the PyTorch defaults (``pct_start 0.3``, ``div_factor 25``,
  ``final_div_factor 1e4``: the authors call ``OneCycleLR(optimizer, max_lr, epochs,
  steps_per_epoch)`` with nothing else);
* weight decay ``1e-5`` and gradient clipping at global norm ``0.1`` (``--weight_decay`` default and
  ``--max_grad_norm 0.1`` of the authors' Darcy command line; the paper text names neither). The
  authors backpropagate the batch *sum* of the per-sample relative errors, so their clip acts on
  the summed gradient: ``loss_reduction: sum`` (default) does the same (the mean is what is
  reported as the training loss either way);
* batch size 8: the paper explores {2, 4, 8, 16}; the authors' Darcy command uses 8;
* relative L2 loss (the paper's Equation 1), inputs and outputs normalised by one mean and standard
  deviation per channel over all training samples and points (the authors' ``UnitTransformer``),
  fitted on the training split only. The loss compares decoded predictions with the targets in
  physical units, as the paper states and the first version of the script did; the last version
  compares in normalised units (``loss_space: normalized``).

Per dataset besides the splits: ``task`` (which variables are inputs and outputs; inputs without
the point dimension become per-sample globals), ``view`` (how the file becomes pairs: grid,
series, mesh, window with rollout, one_step; :mod:`opflow.data.views`) and ``eval_sets`` (extra
evaluation sets, datasets or sources, reported by name in the results; :func:`eval_sets_of`).

``resolve_run`` merges everything a training run depends on into one JSON-serialisable dict with a
hash. The hash covers what changes the trained weights (model, training numerics, task, dataset
definition), not the operational settings in :data:`OPERATIONAL_KEYS` (device, worker and thread
counts, checkpoint and curve cadence), so a run interrupted on one machine can resume on another.

Nothing here imports torch at module level: the Snakefile calls :func:`check_learning_config` at
load time (model hyperparameters are checked against the model classes, which imports torch then).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from opflow.data.errors import ConfigError
from opflow.data.provenance import params_hash
from opflow.data.view_spec import View, parse_view

Loss = Literal["rel_l2", "rel_h1", "mse"]
NormalizerKind = Literal["unit_gaussian", "pointwise", "none"]

#: training keys that do not change the trained weights; left out of the run hash
OPERATIONAL_KEYS = frozenset({"device", "num_workers", "eval_every", "checkpoint_every", "threads", "nproc", "compile"})

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


@dataclass(frozen=True)
class TrainConfig:
    """Training settings of one run; the defaults are the ONO protocol (module docstring)."""

    #: passes over the training split
    epochs: int = 500
    #: global batch size (split evenly over DDP processes)
    batch_size: int = 8
    #: peak learning rate of the OneCycle schedule (AdamW)
    lr: float = 1e-3
    #: AdamW decoupled weight decay
    weight_decay: float = 1e-5
    #: clip the global gradient norm to this value; null disables clipping
    grad_clip: float | None = 0.1
    #: OneCycle: fraction of the steps spent increasing the learning rate
    pct_start: float = 0.3
    #: OneCycle: initial lr = lr / div_factor
    div_factor: float = 25.0
    #: OneCycle: final lr = initial lr / final_div_factor
    final_div_factor: float = 1e4
    #: rel_l2 (ONO, GNOT, Galerkin), rel_h1 (continuum-attention protocol, grids only), mse
    loss: Loss = "rel_l2"
    #: compare prediction and target in physical units (decoded) or in normalised units
    loss_space: Literal["physical", "normalized"] = "physical"
    #: backpropagate the sum over the (global) batch of the per-sample losses, as the ONO code
    #: does (``TestLoss(size_average=False)``), or their mean. With Adam(W) this only changes
    #: what ``grad_clip`` means: "sum" with clip c equals "mean" with clip c / batch_size
    loss_reduction: Literal["sum", "mean"] = "sum"
    #: unit_gaussian: per channel; pointwise: per point and channel (FNO); none
    input_normalizer: NormalizerKind = "unit_gaussian"
    output_normalizer: NormalizerKind = "unit_gaussian"
    #: seeds python, numpy, torch, the shuffling and the data-loader workers
    seed: int = 0
    #: auto (cuda > mps > cpu), cpu, mps, cuda or cuda:N
    device: str = "auto"
    #: fp32, or bf16 autocast (CUDA only; ignored with a warning elsewhere)
    precision: Literal["fp32", "bf16"] = "fp32"
    #: torch.compile the model (CUDA only; ignored with a warning elsewhere)
    compile: bool = False
    #: data-loader worker processes (0 = load in the main process)
    num_workers: int = 0
    #: evaluate the test relative L2 every k epochs for the curves (and always at the last epoch)
    eval_every: int = 1
    #: write the resumable checkpoint every k epochs (and always at the last epoch)
    checkpoint_every: int = 1
    #: CPU threads of the training process (Snakemake ``threads``)
    threads: int = 4
    #: processes (GPUs) per run: > 1 launches ``torchrun --nproc_per_node`` (DDP)
    nproc: int = 1

    def __post_init__(self) -> None:
        checks = [
            (self.epochs >= 1, "epochs", "must be >= 1"),
            (self.batch_size >= 1, "batch_size", "must be >= 1"),
            (self.lr > 0, "lr", "must be > 0"),
            (self.weight_decay >= 0, "weight_decay", "must be >= 0"),
            (self.grad_clip is None or self.grad_clip > 0, "grad_clip", "must be > 0 (null disables clipping)"),
            (0 < self.pct_start < 1, "pct_start", "must lie in (0, 1)"),
            (self.div_factor > 0, "div_factor", "must be > 0"),
            (self.final_div_factor > 0, "final_div_factor", "must be > 0"),
            (self.seed >= 0, "seed", "must be >= 0"),
            (bool(_DEVICE.match(self.device)), "device", "must be auto, cpu, mps, cuda or cuda:N"),
            (self.num_workers >= 0, "num_workers", "must be >= 0"),
            (self.eval_every >= 1, "eval_every", "must be >= 1"),
            (self.checkpoint_every >= 1, "checkpoint_every", "must be >= 1"),
            (self.threads >= 1, "threads", "must be >= 1"),
            (self.nproc >= 1, "nproc", "must be >= 1"),
        ]
        for ok, key, why in checks:
            if not ok:
                raise ConfigError(f"{key}: {getattr(self, key)!r} {why}")

    def check_world_size(self, world_size: int) -> None:
        """The global batch must split evenly over the DDP processes."""
        if self.batch_size % world_size:
            raise ConfigError(
                f"batch_size: {self.batch_size} is the global batch and must be a multiple of the number of "
                f"processes ({world_size}); each process takes batch_size / processes samples"
            )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, where: str = "training") -> TrainConfig:
        return _build(cls, values, where)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class EvalConfig:
    """Settings of ``opflow evaluate`` (config section ``evaluate:``)."""

    #: test samples drawn in the prediction PNG, at error quantiles evenly spaced from the median
    #: to the worst (2 = median and worst)
    n_plot_samples: int = 2
    #: inference batch size
    batch_size: int = 8
    #: untimed batches before inference timing starts
    warmup_batches: int = 2
    #: auto (cuda > mps > cpu), cpu, mps, cuda or cuda:N
    device: str = "auto"
    #: CPU threads of the evaluation process (Snakemake ``threads``)
    threads: int = 4

    def __post_init__(self) -> None:
        for key, lo in (("n_plot_samples", 0), ("batch_size", 1), ("warmup_batches", 0), ("threads", 1)):
            if getattr(self, key) < lo:
                raise ConfigError(f"{key}: {getattr(self, key)!r} must be >= {lo}")
        if not _DEVICE.match(self.device):
            raise ConfigError(f"device: {self.device!r} must be auto, cpu, mps, cuda or cuda:N")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, where: str = "evaluate") -> EvalConfig:
        return _build(cls, values, where)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return value in typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    return "null" if tp is type(None) else tp.__name__


def _coerce_float(value: Any, tp: Any) -> Any:
    """PyYAML reads ``1e-3`` (no dot) as a string; accept numeric strings where a float is expected."""
    accepts_float = tp is float or float in typing.get_args(tp)
    if accepts_float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _build(cls: type, values: Mapping[str, Any] | None, where: str) -> Any:
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(values).__name__}")
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    clean: dict[str, Any] = {}
    for k, v in values.items():
        v = _coerce_float(v, hints[k])
        if not _type_ok(v, hints[k]):
            raise ConfigError(f"{where}.{k}: {v!r} is not {_type_name(hints[k])}")
        accepts_float = hints[k] is float or float in typing.get_args(hints[k])
        clean[k] = float(v) if accepts_float and isinstance(v, int) and not isinstance(v, bool) else v
    try:
        return cls(**clean)
    except ConfigError as e:
        raise ConfigError(f"{where}.{e}") from None


# --------------------------------------------------------------------------- models, tasks


def model_entry(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """``models.<model>`` without its ``training`` block: ``arch`` + hyperparameters."""
    models = config.get("models") or {}
    if model not in models:
        raise ConfigError(f"models: no model {model!r}; configured: {sorted(models)}")
    entry = models[model]
    if not isinstance(entry, Mapping) or "arch" not in entry:
        raise ConfigError(f"models.{model}: needs 'arch' (a registered architecture) and its hyperparameters")
    return {k: v for k, v in entry.items() if k != "training"}


def check_model_entry(config: Mapping[str, Any], model: str) -> None:
    from opflow.models.base import check_hparams  # imports torch

    entry = model_entry(config, model)
    check_hparams(entry["arch"], {k: v for k, v in entry.items() if k != "arch"}, where=f"models.{model}")


def task_of(config: Mapping[str, Any], dataset: str) -> dict[str, list[str] | None]:
    """``datasets.<dataset>.task`` checked: ``{"inputs": [...] | None, "outputs": [...] | None}``.

    ``None`` means "the file's variables with role input (output)", resolved when the file is read
    (for trajectory views the inputs default to the outputs). ``inputs: []`` means no input
    features: the coordinates alone. Inputs without the point dimension become globals
    (:mod:`opflow.data.torch_data`).
    """
    where = f"datasets.{dataset}.task"
    task = (config.get("datasets") or {}).get(dataset, {}).get("task") or {}
    if not isinstance(task, Mapping):
        raise ConfigError(f"{where}: expected a mapping with keys 'inputs' and/or 'outputs'")
    unknown = sorted(set(task) - {"inputs", "outputs"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: ['inputs', 'outputs']")
    out: dict[str, list[str] | None] = {}
    for key in ("inputs", "outputs"):
        names = task.get(key)
        if names is None:
            out[key] = None
            continue
        if isinstance(names, str):
            names = [names]
        # inputs may be empty: the point coordinates alone are the input (elasticity point clouds)
        empty_ok = key == "inputs" and isinstance(names, list | tuple) and not names
        if not isinstance(names, list | tuple) or not (names or empty_ok) or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{where}.{key}: expected a {'' if key == 'inputs' else 'non-empty '}list of variable names, got {names!r}")
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}.{key}: variable names repeat in {list(names)}")
        out[key] = list(names)
    if out["inputs"] and out["outputs"] and set(out["inputs"]) & set(out["outputs"]):
        raise ConfigError(f"{where}: {sorted(set(out['inputs']) & set(out['outputs']))} are both inputs and outputs")
    return out


# --------------------------------------------------------------------------- runs


def train_config(config: Mapping[str, Any], dataset: str, model: str) -> TrainConfig:
    """The merged training settings of (dataset, model): defaults < training < model < dataset."""
    layers = [
        ("training", config.get("training")),
        (f"models.{model}.training", ((config.get("models") or {}).get(model) or {}).get("training")),
        (f"datasets.{dataset}.training", ((config.get("datasets") or {}).get(dataset) or {}).get("training")),
    ]
    merged: dict[str, Any] = {}
    for where, layer in layers:
        TrainConfig.from_dict(layer, where)  # name the layer a bad key came from
        merged.update(layer or {})
    where = f"training of {dataset}_{model}"
    try:
        cfg = TrainConfig.from_dict(merged, where)
        try:
            cfg.check_world_size(cfg.nproc)
        except ConfigError as e:
            raise ConfigError(f"{where}.{e}") from None
    except ConfigError as e:
        raise ConfigError(f"{e} (merged from training < models.{model}.training < datasets.{dataset}.training)") from None
    return cfg


def eval_config(config: Mapping[str, Any]) -> EvalConfig:
    return EvalConfig.from_dict(config.get("evaluate"), "evaluate")


def view_of(config: Mapping[str, Any], dataset: str) -> View:
    """``datasets.<dataset>.view`` checked (:func:`opflow.data.views.parse_view`; default ``auto``)."""
    ds = (config.get("datasets") or {}).get(dataset) or {}
    return parse_view(ds.get("view"), f"datasets.{dataset}.view")


def eval_sets_of(config: Mapping[str, Any], dataset: str) -> dict[str, tuple[str, str]]:
    """``datasets.<dataset>.eval_sets`` checked: ``{name: ("dataset" | "source", that name)}``.

    Each extra evaluation set names a dataset (its test split is evaluated) or a source (every
    sample is evaluated: a generated set such as Lorenz-63 test trajectories at another time step,
    regenerated with ``index_offset`` so that they are the main set's test trajectories).
    """
    where = f"datasets.{dataset}.eval_sets"
    sets = ((config.get("datasets") or {}).get(dataset) or {}).get("eval_sets") or {}
    if not isinstance(sets, Mapping):
        raise ConfigError(f"{where}: expected a mapping {{name: dataset or source}}")
    datasets, sources = config.get("datasets") or {}, config.get("sources") or {}
    out: dict[str, tuple[str, str]] = {}
    for name, target in sets.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
            raise ConfigError(f"{where}: set name {name!r} must be letters, digits and _ . + -")
        if target in datasets:
            out[name] = ("dataset", target)
        elif target in sources:
            out[name] = ("source", target)
        else:
            raise ConfigError(f"{where}.{name}: {target!r} is neither a dataset nor a source; datasets: {sorted(datasets)}, sources: {sorted(sources)}")
    return out


def run_identity(run: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a run config that the hash covers (operational training keys left out)."""
    ident = {k: run[k] for k in ("dataset", "model", "model_config", "task", "data")}
    if run.get("view") is not None:
        ident["view"] = run["view"]
    ident["training"] = {k: v for k, v in run["training"].items() if k not in OPERATIONAL_KEYS}
    return ident


def run_hash(run: Mapping[str, Any]) -> str:
    return params_hash(run_identity(run))


def resolve_run(config: Mapping[str, Any], dataset: str, model: str, data_file: str | None = None) -> dict[str, Any]:
    """Everything one training run depends on, merged and checked, with its hash.

    Keys: ``dataset``, ``model``, ``model_config`` (arch + hyperparameters), ``training`` (all
    :class:`TrainConfig` fields), ``task``, ``view`` (only when the dataset sets one, so that runs
    of the grid datasets keep their hashes), ``data`` (the dataset's definition: source,
    resolution, split sizes), ``paths`` (the training file, when given; not hashed) and ``hash``.
    """
    datasets = config.get("datasets") or {}
    if dataset not in datasets:
        raise ConfigError(f"datasets: no dataset {dataset!r}; configured: {sorted(datasets)}")
    ds = datasets[dataset]
    if not ds.get("train"):
        raise ConfigError(f"datasets.{dataset}: train is 0, so it has nothing to train on; it can serve as another dataset's eval_sets entry")
    run: dict[str, Any] = {
        "dataset": dataset,
        "model": model,
        "model_config": model_entry(config, model),
        "training": train_config(config, dataset, model).to_dict(),
        "task": task_of(config, dataset),
        "data": {"source": ds.get("source"), "resolution": ds.get("resolution"), "train": ds.get("train"), "val": ds.get("val") or 0, "test": ds.get("test")},
        "paths": {"train_data": str(data_file) if data_file is not None else None},
    }
    if ds.get("view") is not None:
        run["view"] = view_of(config, dataset).to_dict()
    run["hash"] = run_hash(run)
    return run


def diff_keys(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested mappings (for 'why not resumable')."""
    out: list[str] = []
    for k in sorted(set(a) | set(b), key=str):
        key = f"{prefix}{k}"
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += diff_keys(va, vb, key + ".")
        elif va != vb:
            out.append(f"{key}: {va!r} -> {vb!r}")
    return out


def check_learning_config(config: Mapping[str, Any]) -> None:
    """Check training, models, tasks, views, eval sets and evaluate; raise :class:`ConfigError` naming the key.

    Called by the Snakefile at load time, before any job runs.
    """
    TrainConfig.from_dict(config.get("training"), "training")
    eval_config(config)
    models = config.get("models") or {}
    datasets = config.get("datasets") or {}
    for m in models:
        check_model_entry(config, m)
        TrainConfig.from_dict((models[m] or {}).get("training"), f"models.{m}.training")
    for d in datasets:
        task_of(config, d)
        view_of(config, d)
        eval_sets_of(config, d)
        TrainConfig.from_dict((datasets[d] or {}).get("training"), f"datasets.{d}.training")
        for m in models:
            train_config(config, d, m)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Nested mappings merged key by key (as Snakemake merges ``--configfile``\\ s); others replaced."""
    out = dict(base)
    for k, v in override.items():
        out[k] = deep_merge(out[k], v) if isinstance(out.get(k), Mapping) and isinstance(v, Mapping) else v
    return out


def load_config_files(paths: list[str]) -> dict[str, Any]:
    """Read and deep-merge YAML config files, later files winning (like ``--configfile``)."""
    import yaml

    config: dict[str, Any] = {}
    for p in paths:
        try:
            with open(p) as fh:
                data = yaml.safe_load(fh) or {}
        except OSError as e:
            raise ConfigError(f"{p}: cannot read the config file ({e.strerror})") from None
        if not isinstance(data, Mapping):
            raise ConfigError(f"{p}: a config file must hold a mapping at top level")
        config = deep_merge(config, data)
    return config
