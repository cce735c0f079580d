"""The workflow configuration as one tree of typed models: the single source of every key, type, default and enum.

::

    WorkflowConfig
    ├── root                      str, folder of data/, models/, results/, logs/ ("." = the default profile)
    ├── targets                   what `snakemake` alone builds (rule all), paths relative to root
    ├── sources.<name>            SourceConfig: solver, n_samples, seed, shard_size, threads, params
    │                             (params: the solver's Params dataclass, checked in pipeline.config)
    ├── datasets.<name>           DatasetConfig: source, resolution, train/val/test, zero_shot,
    │                             task (TaskConfig), view (opflow.data.view_spec), eval_sets, training
    ├── models.<name>             ModelEntry: arch + hyperparameters (opflow.models.hparams) + training;
    │                             ``extends: <other>`` starts from another entry (:func:`expand_extends`)
    ├── training                  TrainConfig (defaults: the ONO protocol, below)
    ├── runs.<dataset>/<model>    RunEntry: training overrides of one (dataset, model) pair, where a
    │                             paper's protocol sets them per pair (Galerkin Table 2(a): batch 4
    │                             at n = 8192, 8 at 512 and 2048)
    └── evaluate                  EvalConfig

Every model is a :class:`~opflow.schema.StrictModel` (pydantic v2): unknown keys, wrong types and
out-of-range values stop the workflow when it loads, before any job runs, with one line naming
the dotted key, the bad value and the allowed values (:mod:`opflow.schema`). The cross checks that
need more than one section (a dataset's source exists, eval sets name datasets or sources, merged
training settings) are in :func:`check_workflow`; those that need a solver's metadata (parameters,
grid sizes, fields, frames) in :func:`pipeline.config.check_generation_config`; whether each
(dataset, model) pair of the run's targets fits (grid or points, patches, modes, losses) in
:func:`pipeline.config.check_pairs` (:mod:`opflow.compat`). Nothing here imports torch or builds a
solver. In the direction of imports (``opflow/__init__.py``) this module is above the data views
and the models' hyperparameters, whose specifications it reads, and below :mod:`opflow.compat` and
the workflow layer :mod:`pipeline`, which read it: it imports neither of those, nor the metrics
(the loss names are :mod:`opflow.losses`).

Merge order of the training settings of one run (dataset ``d``, model ``m``), later wins::

    TrainConfig defaults  <  training:  <  models.m.training  <  datasets.d.training  <  runs["d/m"].training

The defaults are the ONO protocol (Xiao et al., "Improved Operator Learning by Orthogonal
Attention", section 4 "Implementation details", and the authors' released Darcy script and README
command):

* 500 epochs, AdamW, OneCycle learning rate with peak ``lr = 1e-3`` stepped once per batch, the
  other OneCycle settings at the PyTorch defaults (``pct_start 0.3``, ``div_factor 25``,
  ``final_div_factor 1e4``: the authors call ``OneCycleLR(optimizer, max_lr, epochs,
  steps_per_epoch)`` with nothing else);
* weight decay ``1e-5`` and gradient clipping at global norm ``0.1`` (the authors' command line;
  the paper text names neither). The authors backpropagate the batch *sum* of the per-sample
  relative errors, so their clip acts on the summed gradient: ``loss_reduction: sum`` (default)
  does the same (the mean is what is reported as the training loss either way);
* batch size 8: the paper explores {2, 4, 8, 16}; 8 is the default of the authors' Darcy script,
  whose README command uses 4 (``models.ono_official`` sets it, with the script's derivative
  regulariser ``grad_weight: 0.1``);
* relative L2 loss (the paper's Equation 1), inputs and outputs normalised by one mean and standard
  deviation per channel over all training samples and points (the authors' ``UnitTransformer``),
  fitted on the training split only. The loss compares decoded predictions with the targets in
  physical units, as the paper states; ``loss_space: normalized`` compares in normalised units.

Other recipes are per-model ``training`` blocks: FNO's (Li et al. 2021, the authors' released
scripts) is ``optimizer: adam`` (L2 weight decay 1e-4), ``scheduler: step`` (lr 1e-3 times
``gamma`` 0.5 every ``step_size`` 100 epochs), 500 epochs, batch 20, no clipping, pointwise
normalisers (``models.fno`` in config/default.yaml).

``resolve_run`` merges everything a training run depends on into one JSON-serialisable dict with a
hash. The hash covers what changes the trained weights (model, training numerics, task, dataset
definition), not the operational settings in :data:`OPERATIONAL_KEYS` (device, GPUs, worker and
thread counts, checkpoint and curve cadence, data placement), so a run interrupted on one machine can resume on
another.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from opflow.data.errors import ConfigError
from opflow.data.provenance import params_hash
from opflow.data.view_spec import AutoView, View, ViewConfig, parse_view
import opflow.data.views  # noqa: F401  registers every view kind's specification (torch-free): datasets.<name>.view accepts them
from opflow.losses import GRAD_FORMS, LOSSES, GradForm, Loss
from opflow.schema import Bool, Device, Float, NonNegFloat, NonNegInt, PosFloat, PosInt, Str, StrictModel, one_name_or_list, validate

#: unit_gaussian: per channel; pointwise: per point and channel (FNO); none
NormalizerKind = Literal["unit_gaussian", "pointwise", "none"]


def _auto_or_bool(value: Any) -> Any:
    if value == "auto" or isinstance(value, bool):
        return value
    raise PydanticCustomError("auto_bool", "{value} must be auto, true or false", {"value": repr(value)})


#: ``auto``, ``true`` or ``false`` (YAML booleans; no 0/1 or "yes")
AutoBool = Annotated[Literal["auto"] | bool, BeforeValidator(_auto_or_bool)]

#: training keys that do not change the trained weights; left out of the run hash
OPERATIONAL_KEYS = frozenset(
    {"device", "gpus", "num_workers", "eval_every", "checkpoint_every", "threads", "nproc", "compile", "data_on_device",
     "divergence_factor", "divergence_patience", "cuda_graphs"}
)


class _Settings(StrictModel):
    """Settings blocks: ``from_dict`` / ``to_dict`` and the set keys of a partial layer."""

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, where: str = "") -> Any:
        return validate(cls, values or {}, where or cls._where)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def set_values(self) -> dict[str, Any]:
        """Only the keys the user wrote (a layer of the training merge)."""
        return self.model_dump(include=set(self.model_fields_set))

    _where: ClassVar[str] = ""


def _gpus_fit(device: str, gpus: int, nproc: int = 1) -> None:
    if gpus and device in ("cpu", "mps"):
        raise ValueError(f"gpus: {gpus} but device is {device!r}; set gpus: 0 or device: auto / cuda")
    if gpus and gpus != nproc:
        raise ValueError(f"gpus: {gpus} but nproc is {nproc}; DDP uses one GPU per process, so gpus must equal nproc (or be 0)")


class TrainConfig(_Settings):
    """Training settings of one run; the defaults are the ONO protocol (module docstring)."""

    _where: ClassVar[str] = "training"

    #: passes over the training split
    epochs: PosInt = 500
    #: global batch size (split evenly over DDP processes)
    batch_size: PosInt = 8
    #: peak learning rate of the OneCycle schedule; the initial one of the step schedule
    lr: PosFloat = 1e-3
    #: decoupled weight decay (adamw), or the L2 term added to the gradient (adam)
    weight_decay: NonNegFloat = 1e-5
    #: adamw (ONO and the transformers), adam (torch.optim.Adam, FNO's recipe), or
    #: adam_complex_legacy (PyTorch <= 1.9's Adam on complex spectral weights: opflow/optim.py)
    optimizer: Literal["adamw", "adam", "adam_complex_legacy"] = "adamw"
    #: onecycle: OneCycle stepped every batch (pct_start, div_factor, final_div_factor);
    #: step: lr * gamma ** (epoch // step_size), FNO's StepLR (step_size 100, gamma 0.5)
    scheduler: Literal["onecycle", "step"] = "onecycle"
    #: step schedule: epochs between learning-rate drops
    step_size: PosInt = 100
    #: step schedule: factor of each drop
    gamma: Float = Field(0.5, gt=0, lt=1)
    #: clip the global gradient norm to this value; null disables clipping
    grad_clip: PosFloat | None = 0.1
    #: OneCycle: fraction of the steps spent increasing the learning rate
    pct_start: Float = Field(0.3, gt=0, lt=1)
    #: OneCycle: initial lr = lr / div_factor
    div_factor: PosFloat = 25.0
    #: OneCycle: final lr = initial lr / final_div_factor
    final_div_factor: PosFloat = 1e4
    #: rel_l2 (ONO, GNOT, Galerkin), rel_h1 (continuum-attention protocol, grids only), mse
    loss: Loss = "rel_l2"
    #: weight of a derivative regulariser added to the loss (0 = none), grid data only: the ONO
    #: authors' Darcy script adds 0.1 x the relative L2 errors of the x- and y-derivatives
    grad_weight: NonNegFloat = 0.0
    #: the regulariser (opflow.metrics.gradient_loss): central = the ONO Darcy script's sum over the
    #: grid axes of the relative L2 error of the central-difference derivative, the prediction's
    #: boundary ring set to zero and zeros outside the grid (homogeneous Dirichlet data);
    #: h1 / h1_coeff = the Galerkin Transformer's H1-seminorm regulariser (Cao 2021, Sec. 3 and
    #: App. C.1), h1_coeff weighted by the coefficient (the first input channel, Darcy); there
    #: grad_weight = sqrt(gamma): the paper's gamma 0.5 (Darcy) is 0.7071, 0.1 (Burgers) 0.3162
    grad_form: GradForm = "central"
    #: compare prediction and target in physical units (decoded) or in normalised units
    loss_space: Literal["physical", "normalized"] = "physical"
    #: backpropagate the sum over the (global) batch of the per-sample losses, as the ONO code
    #: does, or their mean. With Adam(W) this only changes what ``grad_clip`` means: "sum" with
    #: clip c equals "mean" with clip c / batch_size
    loss_reduction: Literal["sum", "mean"] = "sum"
    input_normalizer: NormalizerKind = "unit_gaussian"
    output_normalizer: NormalizerKind = "unit_gaussian"
    #: window views only: none = independent teacher-forced pairs (frames j-k..j-1 -> j), shuffled;
    #: truth / prediction = whole trajectories, one optimiser step per batch of them, the loss the sum
    #: of the one-step losses over the training frames predicted one by one, the next input window
    #: taking the true frame (truth: teacher forcing, the ONO release's NS_example2.py) or the
    #: model's own prediction, gradients through the unroll (prediction: the FNO code's
    #: fourier_2d_time.py). opflow.train_step.batch_loss
    unroll: Literal["none", "truth", "prediction"] = "none"
    #: seeds python, numpy, torch, the shuffling and the data-loader workers
    seed: NonNegInt = 0
    #: auto (cuda > mps > cpu), cpu, mps, cuda or cuda:N
    device: Device = "auto"
    #: GPUs the training job asks the scheduler for (Snakemake resource ``gpu``; a cluster
    #: executor sends jobs with gpu > 0 to GPU nodes). 0 on CPU-only profiles; nproc with DDP
    gpus: NonNegInt = 0
    #: fp32; tf32 = float32 storage with TF32 tensor-core matrix products (CUDA only: 10-bit
    #: mantissa products, float32 sums); or bf16 autocast (CUDA only). tf32 and bf16 are ignored
    #: with a warning elsewhere. docs/gpu.md, "Precision", has the measured effect on accuracy
    precision: Literal["fp32", "tf32", "bf16"] = "fp32"
    #: torch.compile the training loss (forward and loss in one graph, the backward compiled from it;
    #: opflow.train_step) on CUDA, and on the CPU where a C++ compiler is found (inductor builds C++
    #: kernels there; else, and on other devices, ignored with a warning). Operational: the same
    #: computation within float rounding. GNOT at elasticity972 on 2 CPU cores: 1.10x (docs/costs.md)
    compile: Bool = False
    #: capture the whole training step (forward, loss, backward, clipping, AdamW) as one CUDA graph
    #: and replay it per batch (opflow.train_step): no kernel launches from the host. CUDA only
    #: (ignored with a warning elsewhere); a model whose step cannot be captured falls back to the
    #: plain step with one warning line. Operational: the same computation
    cuda_graphs: Bool = False
    #: data-loader worker processes (0 = load in the main process)
    num_workers: NonNegInt = 0
    #: hold the training split on the device and batch it by indexing (opflow.data.device_batches;
    #: the same batches as the loader, bit for bit): true, false, or auto = on with CUDA when the
    #: split's items all have the same shapes and take < 25 % of the free GPU memory
    data_on_device: AutoBool = "auto"
    #: evaluate the test relative L2 every k epochs for the curves (and always at the last epoch)
    eval_every: PosInt = 1
    #: write the resumable checkpoint every k epochs (and always at the last epoch)
    checkpoint_every: PosInt = 1
    #: stop a diverged run with an error (opflow.train.diverged_since): when the training loss of
    #: ``divergence_patience`` epochs in a row each exceeds divergence_factor x the lowest loss of
    #: the epochs before it. Seen with the Fourier Transformer on Burgers at the 1cycle peak: train
    #: rel L2 0.022, then 648, then 1.0035 (a zero output) for every later epoch; and with the
    #: inverse-problem GT on Darcy 141: 0.0505, then 0.504 (a constant output), 9.98 x. The factor 5
    #: lies between that and the 2.6 x that no converged run's 3 epochs in a row exceed
    #: (docs/reproductions.md, "Divergence check"). null trains on.
    #: Operational: a run that does not diverge trains to the same weights either way
    divergence_factor: Annotated[Float, Field(gt=1)] | None = 5.0
    #: epochs in a row above the factor before the run is stopped (a single spike passes)
    divergence_patience: PosInt = 3
    #: CPU threads of the training process (Snakemake ``threads``), at most the CPUs it may run on
    threads: PosInt = 4
    #: processes (GPUs) per run: > 1 launches ``torchrun --nproc_per_node`` (DDP)
    nproc: PosInt = 1

    @model_validator(mode="after")
    def _grad_regulariser(self) -> TrainConfig:
        if self.grad_weight and self.grad_form == "central" and self.loss_space != "physical":
            raise ValueError(
                "grad_form central sets the prediction's boundary ring to zero (homogeneous Dirichlet data in physical "
                "units), so it needs loss_space: physical; set loss_space: physical or grad_weight: 0"
            )
        return self

    def check_world_size(self, world_size: int) -> None:
        """The global batch must split evenly over the DDP processes."""
        if self.batch_size % world_size:
            raise ConfigError(
                f"batch_size: {self.batch_size} is the global batch and must be a multiple of the number of "
                f"processes ({world_size}); each process takes batch_size / processes samples"
            )


class EvalConfig(_Settings):
    """Settings of ``opflow evaluate`` (config section ``evaluate:``)."""

    _where: ClassVar[str] = "evaluate"

    #: test samples drawn in the prediction PNG, at error quantiles evenly spaced from the median
    #: to the worst (2 = median and worst)
    n_plot_samples: NonNegInt = 2
    #: inference batch size
    batch_size: PosInt = 8
    #: untimed batches before inference timing starts
    warmup_batches: NonNegInt = 2
    #: auto (cuda > mps > cpu), cpu, mps, cuda or cuda:N
    device: Device = "auto"
    #: GPUs the evaluation job asks the scheduler for (Snakemake resource ``gpu``)
    gpus: NonNegInt = Field(0, le=1)
    #: CPU threads of the evaluation process (Snakemake ``threads``), at most the CPUs it may run on
    threads: PosInt = 4

    @model_validator(mode="after")
    def _gpus(self) -> EvalConfig:
        _gpus_fit(self.device, self.gpus)
        return self


# --------------------------------------------------------------------------- sources, datasets, models


class SourceConfig(StrictModel):
    """``sources.<name>``: one solver run, generated in shards and merged into one file."""

    #: a registered generator (``python -m solvers list``)
    solver: Str
    n_samples: PosInt
    #: sample i is seeded by (seed, i), whatever the shard size
    seed: NonNegInt
    #: samples per Snakemake job
    shard_size: PosInt = 100
    #: threads of one shard job
    threads: PosInt = 1
    #: MPI ranks of one shard job (FEM solvers; the shard is launched under mpiexec -n)
    mpi_ranks: PosInt = 1
    #: the solver's parameters, checked against its Params dataclass (pipeline.config)
    params: dict[str, Any] = Field(default_factory=dict)


class TaskConfig(StrictModel):
    """``datasets.<name>.task``: which file variables are inputs and outputs.

    ``None`` = the file's variables with role input (output), resolved when the file is read (for
    trajectory views the inputs default to the outputs); ``inputs: []`` = the coordinates alone.
    Inputs without the point dimension become per-sample globals. A single name may be written
    without a list.
    """

    inputs: list[Str] | None = Field(None, json_schema_extra=one_name_or_list)
    outputs: list[Str] | None = Field(None, min_length=1, json_schema_extra=one_name_or_list)

    @model_validator(mode="before")
    @classmethod
    def _single_names(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            data = {k: [v] if isinstance(v, str) else v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _distinct(self) -> TaskConfig:
        for key in ("inputs", "outputs"):
            names = getattr(self, key)
            if names and len(set(names)) != len(names):
                raise ValueError(f"{key}: variable names repeat in {names}")
        both = sorted(set(self.inputs or ()) & set(self.outputs or ()))
        if both:
            raise ValueError(f"{both} are both inputs and outputs")
        return self

    def as_dict(self) -> dict[str, list[str] | None]:
        return {"inputs": self.inputs, "outputs": self.outputs}


class DatasetConfig(StrictModel):
    """``datasets.<name>``: a strided subsample of a source at one resolution, with splits."""

    source: Str
    #: grid points per side (a strided subsample of the source grid); None = the source's grid
    resolution: int | None = Field(None, ge=2, strict=True)
    #: training samples (0 for a set that only serves as another dataset's eval_sets entry)
    train: NonNegInt
    val: NonNegInt = 0
    test: PosInt
    #: other resolutions of the same test samples, evaluated zero-shot
    zero_shot: list[PosInt] = Field(default_factory=list)
    task: TaskConfig = Field(default_factory=TaskConfig)
    view: ViewConfig = Field(default_factory=AutoView)
    #: extra evaluation sets {name: dataset or source}, reported by name in the results
    eval_sets: dict[Str, Str] = Field(default_factory=dict)
    #: training overrides for this dataset (after the model's; only ``runs.<d>/<m>.training`` comes later)
    training: TrainConfig | None = None


class ModelEntry(StrictModel):
    """``models.<name>``: ``arch`` and its hyperparameters (checked by :func:`opflow.models.hparams.check_hparams`)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    arch: Str
    #: training overrides for this model (between ``training:`` and ``datasets.<d>.training``)
    training: TrainConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:  # hyperparameters are checked per arch
        return data

    def hparams(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class RunEntry(StrictModel):
    """``runs.<dataset>/<model>``: what one (dataset, model) pair changes in its training, the last
    layer of the merge. For a protocol that sets a value per pair rather than per model or dataset:
    the Galerkin Transformer paper (Cao 2021, appendix C.1) trains with batch 8 at n = 512 and 2048
    and batch 4 at n = 8192."""

    training: TrainConfig | None = None


class WorkflowConfig(StrictModel):
    """The whole workflow config (config/default.yaml deep-merged with any --configfile)."""

    root: Str = "."
    #: what `snakemake` with no target builds (rule all), paths relative to root
    targets: list[Str] = Field(default_factory=list)
    sources: dict[Str, SourceConfig] = Field(default_factory=dict)
    datasets: dict[Str, DatasetConfig] = Field(default_factory=dict)
    models: dict[Str, ModelEntry] = Field(default_factory=dict)
    training: TrainConfig = Field(default_factory=TrainConfig)
    evaluate: EvalConfig = Field(default_factory=EvalConfig)
    #: training overrides of single (dataset, model) pairs, keyed "dataset/model"
    runs: dict[Str, RunEntry] = Field(default_factory=dict)

    # ---- lookups naming what exists

    def dataset(self, name: str) -> DatasetConfig:
        if name not in self.datasets:
            raise ConfigError(f"datasets: no dataset {name!r}; configured: {sorted(self.datasets)}")
        return self.datasets[name]

    def model(self, name: str) -> ModelEntry:
        if name not in self.models:
            raise ConfigError(f"models: no model {name!r}; configured: {sorted(self.models)}")
        return self.models[name]

    def train_config(self, dataset: str, model: str) -> TrainConfig:
        """The merged training settings of (dataset, model): defaults < training < model < dataset < run."""
        run = self.runs.get(f"{dataset}/{model}")
        layers = [self.training, self.model(model).training, self.dataset(dataset).training, run.training if run else None]
        merged: dict[str, Any] = {}
        for layer in layers:
            if layer is not None:
                merged.update(layer.set_values())
        where = f"training of {dataset}_{model}"
        why = f" (merged from training < models.{model}.training < datasets.{dataset}.training < runs.{dataset}/{model}.training)"
        try:
            cfg = TrainConfig.from_dict(merged, where)
            cfg.check_world_size(cfg.nproc)
            _gpus_fit(cfg.device, cfg.gpus, cfg.nproc)
        except (ConfigError, ValueError) as e:
            msg = str(e) if str(e).startswith(where) else f"{where}.{e}"
            raise ConfigError(msg + why) from None
        return cfg

    def eval_sets(self, dataset: str) -> dict[str, tuple[str, str]]:
        """``{name: ("dataset" | "source", target)}`` of the dataset's extra evaluation sets.

        Each names a dataset (its test split is evaluated) or a source (every sample is evaluated:
        a generated set such as Lorenz-63 test trajectories at another time step, regenerated with
        ``index_offset`` so that they are the main set's test trajectories).
        """
        where = f"datasets.{dataset}.eval_sets"
        out: dict[str, tuple[str, str]] = {}
        for name, target in self.dataset(dataset).eval_sets.items():
            if not name or any(not (c.isalnum() or c in "_.+-") for c in name):
                raise ConfigError(f"{where}: set name {name!r} must be letters, digits and _ . + -")
            if target in self.datasets:
                out[name] = ("dataset", target)
            elif target in self.sources:
                out[name] = ("source", target)
            else:
                raise ConfigError(
                    f"{where}.{name}: {target!r} is neither a dataset nor a source; datasets: {sorted(self.datasets)}, sources: {sorted(self.sources)}"
                )
        return out


# --------------------------------------------------------------------------- parsing and checks


def parse_workflow(config: Mapping[str, Any]) -> WorkflowConfig:
    """The typed tree of a raw config mapping (its ``models`` expanded: :func:`expand_extends`);
    :class:`ConfigError` names the first bad key."""
    raw = dict(config)
    models = raw.get("models")
    if isinstance(models, Mapping) and any(isinstance(e, Mapping) and EXTENDS in e for e in models.values()):
        raw["models"] = expand_extends(models)  # a subset from _only is expanded already: no second pass
    return validate(WorkflowConfig, raw)


def check_workflow(config: Mapping[str, Any] | WorkflowConfig) -> WorkflowConfig:
    """Parse and cross-check the learning half: models' hyperparameters, sources of datasets,
    eval sets and every merged (dataset, model) training config. Imports no torch.

    Every cross-check runs: the :class:`ConfigError` names all mistakes at once, one line each
    (:attr:`ConfigError.problems`). A key or value the typed tree refuses stops at the first one."""
    from opflow.models.hparams import check_hparams

    wf = config if isinstance(config, WorkflowConfig) else parse_workflow(config)
    problems = Problems()
    for name, entry in wf.models.items():
        problems.check(check_hparams, entry.arch, entry.hparams(), where=f"models.{name}")
    for d, ds in wf.datasets.items():
        if ds.source not in wf.sources and wf.sources:
            problems.add(f"datasets.{d}.source: no source {ds.source!r}; defined sources: {sorted(wf.sources)}")
        problems.check(wf.eval_sets, d)
        for m in wf.models:
            problems.check(wf.train_config, d, m)
    for key in wf.runs:
        problems.check(run_pair, wf, key)
    problems.raise_any()
    return wf


def run_pair(wf: WorkflowConfig, key: str) -> tuple[str, str]:
    """``(dataset, model)`` of a ``runs:`` key ``"dataset/model"``, both configured, or the error naming the fix."""
    dataset, sep, model = key.partition("/")
    where = f"runs.{key}"
    if not sep or "/" in model:
        raise ConfigError(f"{where}: a run is named 'dataset/model' (e.g. 'burgers/gt1d'), got {key!r}")
    missing = []
    if dataset not in wf.datasets:
        missing.append(f"no dataset {dataset!r} (configured: {sorted(wf.datasets)})")
    if model not in wf.models:
        missing.append(f"no model {model!r} (configured: {sorted(wf.models)})")
    if missing:
        raise ConfigError(f"{where}: " + "; ".join(missing))
    return dataset, model


class Problems:
    """Collects the :class:`ConfigError` lines of many checks, so that a config's mistakes are
    reported all at once (one line each) rather than one per run."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        self.lines.append(line)

    def check(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, its ConfigError's lines recorded instead of raised (then None)."""
        try:
            return fn(*args, **kwargs)
        except ConfigError as e:
            self.lines.extend(e.problems)
            return None

    def raise_any(self) -> None:
        """Raise one ConfigError holding every line so far (nothing when there is none)."""
        if self.lines:
            raise ConfigError.collect(self.lines)


# ---- the functional face used by rules, CLI and tests (raw config mappings in, checked values out)


def train_config(config: Mapping[str, Any], dataset: str, model: str) -> TrainConfig:
    return parse_workflow(_only(config, dataset, model)).train_config(dataset, model)


def eval_config(config: Mapping[str, Any]) -> EvalConfig:
    return EvalConfig.from_dict(config.get("evaluate"), "evaluate")


def model_entry(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """``models.<model>`` without its ``training`` block: ``arch`` + hyperparameters (``extends`` expanded)."""
    models = models_of(config)
    if model not in models:
        raise ConfigError(f"models: no model {model!r}; configured: {sorted(models)}")
    entry = validate(ModelEntry, models[model], f"models.{model}")
    return {"arch": entry.arch, **entry.hparams()}


def task_of(config: Mapping[str, Any], dataset: str) -> dict[str, list[str] | None]:
    """``datasets.<dataset>.task`` checked: ``{"inputs": [...] | None, "outputs": [...] | None}``."""
    task = ((config.get("datasets") or {}).get(dataset) or {}).get("task")
    return validate(TaskConfig, task or {}, f"datasets.{dataset}.task").as_dict()


def view_of(config: Mapping[str, Any], dataset: str) -> View:
    """``datasets.<dataset>.view`` checked (:func:`opflow.data.view_spec.parse_view`; default ``auto``)."""
    ds = (config.get("datasets") or {}).get(dataset) or {}
    return parse_view(ds.get("view"), f"datasets.{dataset}.view")


def eval_sets_of(config: Mapping[str, Any], dataset: str) -> dict[str, tuple[str, str]]:
    return parse_workflow(_only(config, dataset)).eval_sets(dataset)


def _only(config: Mapping[str, Any], dataset: str, model: str | None = None) -> dict[str, Any]:
    """The parts of ``config`` one (dataset, model) needs: parsing them alone is fast and names
    the same keys."""
    datasets, models = config.get("datasets") or {}, models_of(config)
    if dataset not in datasets:
        raise ConfigError(f"datasets: no dataset {dataset!r}; configured: {sorted(datasets)}")
    out: dict[str, Any] = {k: config[k] for k in ("training", "evaluate") if k in config}
    out["datasets"] = {d: datasets[d] for d in (dataset, *(datasets[dataset] or {}).get("eval_sets", {}).values()) if d in datasets}
    out["sources"] = config.get("sources") or {}
    if model is not None:
        if model not in models:
            raise ConfigError(f"models: no model {model!r}; configured: {sorted(models)}")
        out["models"] = {model: models[model]}
        runs = config.get("runs") or {}
        if f"{dataset}/{model}" in runs:
            out["runs"] = {f"{dataset}/{model}": runs[f"{dataset}/{model}"]}
    return out


def check_learning_config(config: Mapping[str, Any]) -> WorkflowConfig:
    """Check training, models, tasks, views, eval sets and evaluate (:func:`check_workflow`)."""
    return check_workflow(config)


# --------------------------------------------------------------------------- runs


def run_identity(run: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a run config that the hash covers (operational training keys left out)."""
    ident = {k: run[k] for k in ("dataset", "model", "model_config", "task", "data")}
    if run.get("view") is not None:
        ident["view"] = run["view"]
    ident["training"] = {k: v for k, v in run["training"].items() if k not in OPERATIONAL_KEYS}
    if not ident["training"].get("grad_weight"):  # no regulariser: runs keep the hash they had before it existed
        ident["training"].pop("grad_weight", None)
        ident["training"].pop("grad_form", None)
    if ident["training"].get("unroll", "none") == "none":  # pairs: runs keep the hash they had before unrolling existed
        ident["training"].pop("unroll", None)
    return ident


def run_hash(run: Mapping[str, Any]) -> str:
    return params_hash(run_identity(run))


def resolve_run(config: Mapping[str, Any] | WorkflowConfig, dataset: str, model: str, data_file: str | None = None) -> dict[str, Any]:
    """Everything one training run depends on, merged and checked, with its hash.

    Keys: ``dataset``, ``model``, ``model_config`` (arch + hyperparameters as written),
    ``training`` (all :class:`TrainConfig` fields), ``task``, ``view`` (only when the dataset sets
    one, so that runs of the grid datasets keep their hashes), ``data`` (the dataset's definition:
    source, resolution, split sizes), ``paths`` (the training file, when given; not hashed) and
    ``hash``.
    """
    wf = config if isinstance(config, WorkflowConfig) else parse_workflow(_only(config, dataset, model))
    ds, entry = wf.dataset(dataset), wf.model(model)
    if not ds.train:
        raise ConfigError(f"datasets.{dataset}: train is 0, so it has nothing to train on; it can serve as another dataset's eval_sets entry")
    run: dict[str, Any] = {
        "dataset": dataset,
        "model": model,
        "model_config": {"arch": entry.arch, **entry.hparams()},
        "training": wf.train_config(dataset, model).to_dict(),
        "task": ds.task.as_dict(),
        "data": {"source": ds.source, "resolution": ds.resolution, "train": ds.train, "val": ds.val, "test": ds.test},
        "paths": {"train_data": str(data_file) if data_file is not None else None},
    }
    if "view" in ds.model_fields_set:
        run["view"] = ds.view.to_dict()
    run["hash"] = run_hash(run)
    return run


#: operational training keys added after trained runs existed. A training job's params (the run
#: JSON, rules/train.smk) leave them out while they hold their defaults: Snakemake reruns a job whose
#: params changed, so adding them would otherwise have retrained every model of a working tree
LATE_OPERATIONAL_KEYS = ("divergence_factor", "divergence_patience", "cuda_graphs")


def job_run(run: Mapping[str, Any]) -> dict[str, Any]:
    """``run`` as a training job's params: :data:`LATE_OPERATIONAL_KEYS` at their defaults left out.

    The training reads the same settings from it (a missing key takes its default), and the run hash
    does not change (it leaves out every operational key).
    """
    defaults = TrainConfig().to_dict()
    training = {k: v for k, v in run["training"].items() if not (k in LATE_OPERATIONAL_KEYS and v == defaults[k])}
    return {**run, "training": training}


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


# --------------------------------------------------------------------------- files


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Nested mappings merged key by key (as Snakemake merges ``--configfile``\\ s); others replaced."""
    out = dict(base)
    for k, v in override.items():
        out[k] = deep_merge(out[k], v) if isinstance(out.get(k), Mapping) and isinstance(v, Mapping) else v
    return out


#: the key of ``models.<name>`` that names the entry it starts from (:func:`expand_extends`)
EXTENDS = "extends"


def expand_extends(models: Mapping[str, Any]) -> dict[str, Any]:
    """``models`` with every ``extends: <other>`` entry written out: the other entry (itself expanded first)
    deep-merged with this entry's own keys, which win, ``training`` key by key; ``extends`` itself is gone.

    An ablation is its paper network with one setting changed (the Galerkin paper's "GT regular Ln" is ``gt`` with
    ``norm: regular``), so its entry holds that change alone and the recipe has one place. It is expanded after
    every ``--configfile`` is merged: an overlay that changes the base (the quick profile's ``gt.width``) changes
    each entry extending it too, unless that entry sets the key itself. The expanded entry is what everything
    reads, hashes included: an entry written out in full and the same entry as ``extends`` have the same run hash.
    A base that is not configured, a value that is not a name, and a cycle are :class:`ConfigError` naming them.
    """
    out: dict[str, Any] = {}

    def expand(name: str, chain: tuple[str, ...]) -> Any:
        if name in out:
            return out[name]
        entry = models[name]
        if not isinstance(entry, Mapping) or EXTENDS not in entry:
            out[name] = entry
            return entry
        base = entry[EXTENDS]
        where = f"models.{name}.{EXTENDS}"
        if not isinstance(base, str):
            raise ConfigError(f"{where}: {base!r} is not a model name; write the name of another entry of models:")
        if base not in models:
            near = difflib.get_close_matches(base, list(models), n=3)
            hint = f" (did you mean {', '.join(map(repr, near))}?)" if near else ""
            raise ConfigError(f"{where}: no model {base!r} to extend{hint}; configured: {sorted(models)}")
        if base in (*chain, name):
            cycle = " -> ".join((*chain[chain.index(base):], name, base) if base in chain else (name, base))
            raise ConfigError(f"{where}: the entries extend each other in a cycle ({cycle}); one of them must be written out")
        own = {k: v for k, v in entry.items() if k != EXTENDS}
        merged = deep_merge(copy.deepcopy(expand(base, (*chain, name))), own)
        out[name] = merged
        return merged

    for name in models:
        expand(name, ())
    return out


def models_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config["models"]`` with its ``extends`` entries expanded (:func:`expand_extends`); ``{}`` when absent."""
    return expand_extends(config.get("models") or {})


#: the config every workflow run starts from, relative to the workflow's folder: the Snakefile's
#: ``configfile:``, which Snakemake reads before any ``--configfile`` (those are overlays of it)
BASE_CONFIG = "config/default.yaml"


def load_config_files(paths: Sequence[str | os.PathLike[str]]) -> dict[str, Any]:
    """Read and deep-merge YAML config files, later files winning (like ``--configfile``).

    A file that cannot be read, is not YAML or does not hold a mapping at top level is a
    :class:`ConfigError` naming it (Snakemake's own message for the last names no file).
    """
    import yaml

    config: dict[str, Any] = {}
    for p in paths:
        try:
            with open(p) as fh:
                data = yaml.safe_load(fh) or {}
        except OSError as e:
            raise ConfigError(f"{p}: cannot read the config file ({e.strerror})") from None
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" at line {where.line + 1} column {where.column + 1}" if where is not None else ""
            raise ConfigError(f"{p}: not a valid YAML file ({getattr(e, 'problem', None) or type(e).__name__}{at})") from None
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"{p}: a config file holds a mapping of keys at top level (root, sources, datasets, models, training, ...), "
                f"not a {type(data).__name__}"
            )
        config = deep_merge(config, data)
    return config


__all__ = [
    "BASE_CONFIG",
    "GRAD_FORMS",
    "LOSSES",
    "OPERATIONAL_KEYS",
    "DatasetConfig",
    "Problems",
    "EvalConfig",
    "ModelEntry",
    "RunEntry",
    "SourceConfig",
    "TaskConfig",
    "TrainConfig",
    "WorkflowConfig",
    "check_learning_config",
    "check_workflow",
    "deep_merge",
    "diff_keys",
    "EXTENDS",
    "eval_config",
    "expand_extends",
    "eval_sets_of",
    "load_config_files",
    "model_entry",
    "models_of",
    "parse_workflow",
    "resolve_run",
    "run_hash",
    "run_identity",
    "run_pair",
    "task_of",
    "train_config",
    "view_of",
]
