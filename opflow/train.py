"""Training of a neural operator on one dataset file: plain PyTorch, resumable, optionally DDP.

One run = one resolved run config (:func:`opflow.config.resolve_run`) + one dataset file. Per step:

1. encode the inputs (and the per-sample ``globals``) with their normalisers, fitted on the
   training split only (:meth:`opflow.data.torch_data.ArrayDataset.fit_normalizers`);
2. forward ``model(coords, inputs, query, mask, grid_shape)`` (bf16 autocast on CUDA if asked);
   a model with ``accepts_globals = True`` also gets ``globals=`` (B, g) and, when its
   constructor takes ``global_channels``, is built with ``global_channels = g`` of the data (a
   configured value must agree); any other model gets the normalised globals broadcast to every
   point as extra input channels (:func:`opflow.inference.model_inputs`);
3. loss (``rel_l2`` by default, see :mod:`opflow.metrics`) between the decoded prediction and the
   target in physical units (``loss_space: physical``), or between the raw prediction and the
   encoded target (``normalized``; the ONO authors' released Darcy script compares decoded fields,
   as ``physical`` does), plus
   ``grad_weight`` times the derivative regulariser ``grad_form`` on grid data (the ONO Darcy
   script's 0.1 x relative L2 of the central-difference derivatives; the curves' train loss then
   includes it);
4. backward of the batch sum (``loss_reduction: sum``, the ONO code) or mean of the per-sample
   losses, clipping of the global gradient norm at ``grad_clip``, AdamW (or Adam: ``optimizer``)
   step, then one scheduler step: OneCycle spanning ``epochs x batches per epoch`` steps, or
   (``scheduler: step``, FNO's recipe) StepLR multiplying the lr by ``gamma`` every
   ``step_size`` epochs (counted in batches, so the lr is constant within an epoch). The curves report
   the mean per-sample loss either way.

The data come from :func:`opflow.data.views.make_dataset` with the run's ``task`` and ``view``:
the training split as the view's training items (teacher-forced pairs for ``window`` views), the
test split for the curves as the view's test items (whole trajectories rolled out autoregressively
for ``window`` views: :func:`opflow.inference.predict_batch`).

Every ``checkpoint_every`` epochs (default 1) ``checkpoint.pt`` in the output folder is replaced
atomically (temporary file + rename). It holds the model, optimizer and scheduler states, the RNG
states of every process, the normalisers, the curves, the run config with its hash and the data
file's fingerprint. A new call with the same run hash and data resumes from it and, on the CPU
with fixed seeds, ends with weights equal bit for bit to those of an uninterrupted run; another
hash or data file is refused with the differing keys named (``restart=True`` discards the old
checkpoint; ``restart_if_changed=True`` sets it aside only when it does not match, as the workflow
does: Snakemake reruns a training job only when its config, code or data changed; the old file
stays as ``checkpoint.discarded-<UTC time>.pt``, since only ``restart`` deletes one). When training
completes, ``model.pt`` (everything evaluation needs) is written atomically and the checkpoint is
removed. ``checkpoint.lowest-loss.pt`` beside it is the checkpoint of the epoch with the lowest
training loss so far (a hard link, no copy: :meth:`Trainer.keep_lowest`), the state before a run
went wrong; it goes, or is set aside, with the checkpoint.

A finished run is not trained again: when the model file exists, no checkpoint is there, and the
file records this run's hash and data fingerprint (hence its epochs, which the hash covers), the
call does nothing and says so (:meth:`Trainer.finished`; ``result.already_finished``). A model
file of another run (or one that cannot be read) is refused with the differing keys named, like a
foreign checkpoint, so a changed config never silently replaces a finished model; ``restart=True``
(and ``restart_if_changed=True`` for a model of another run) trains from scratch, replacing the
file only when the new run completes. The workflow is unaffected: Snakemake deletes a rule's
outputs before it runs the job.

Distributed data parallel: launched by ``torchrun --nproc_per_node P``, each process takes
``batch_size / P`` samples of every global batch (see :mod:`opflow.data.torch_data`), gradients
are averaged by DDP, and only rank 0 evaluates the curves and writes files.

Curves: ``curves.csv`` / ``curves.json`` (epoch, train loss, test relative L2 every
``eval_every`` epochs, learning rate of the epoch's last step, epoch time, elapsed training time)
and ``curves.png`` beside the model, rewritten at every checkpoint. While the folder still holds the
model file of an earlier run (``restart=True`` over a finished model, and the calls that resume such
a restart), the run's curves go beside its checkpoint instead, as ``checkpoint-curves.csv/json/png``,
until it completes: ``curves.*`` always describe the model file that is there. A call that stopped
early after ``restart=True`` is resumed without it (the same command would discard the checkpoint
again), and its stop message says so. ``train.log`` there keeps what each call logged (model size,
one line per epoch, resumes, the final file), appended to, never overwritten: every call starts
with a marker line, ``--- started from scratch (<UTC time>) ---`` or ``--- resumed at epoch N
(<UTC time>) ---``.

Time budget per call (``max_seconds_this_call``; ``opflow train --max-minutes-this-call M`` or
the environment variable ``OPFLOW_TRAIN_MAX_MINUTES``, the flag winning): for machines lent in
commands of a few minutes each. Before each epoch but the first of a call, the call stops when the
time since it started plus the longest epoch of this call so far (its training, test evaluation and
checkpoint write) times :data:`BUDGET_SAFETY` (1.25) would exceed the budget; the first epoch of a
call always runs (there is no estimate yet). A checkpoint of the last finished epoch is written at
the stop (also with ``checkpoint_every > 1``), ``train.log`` gets one line (stopped after epoch N
of M within the budget, the checkpoint's path, rerun the same command to resume) and the CLI exits
with :data:`EX_TEMPFAIL` (75; under ``torchrun`` every process exits 75 after the same epoch, the
processes agree through one all-reduce per epoch, and torchrun reports that with its own status 1);
rerunning the same command resumes, and the weights at the end equal those of an uninterrupted run. The budget is operational: it changes neither the run hash nor the
result. ``max_epochs_this_call`` can be given too (whichever stops first; that stop exits 0).

Data on the device (``training.data_on_device``, operational): ``true`` holds the training split
on the training device and cuts each batch from it by index (:class:`opflow.data.device_batches.
DeviceBatches`: the same samples in the same order as the loader, equal bit for bit, so the
weights are those of a loader run); the test split of the curves too when its items allow. Splits
whose items differ in shape (ragged point sets: padded per batch by the loader) cannot be held so:
``true`` is then refused with a :class:`~opflow.data.errors.ConfigError`, ``auto`` uses the loader
and logs why. ``auto`` is on with CUDA when the split takes less than a quarter of the free GPU
memory, off on the CPU and MPS; ``false`` always uses the loader.

A non-finite loss stops the run with a :class:`FloatingPointError` naming the epoch. It is checked
once per epoch, on the epoch's summed loss, not per step (a check per step would wait for the GPU
at every step), and before the checkpoint is written, so a diverged epoch never replaces a good
checkpoint.
A run that diverged without a non-finite loss stops too, with :class:`TrainingDiverged` (a
``FloatingPointError``): when the training loss of ``training.divergence_patience`` epochs in a row
(default 3) each exceeds ``training.divergence_factor`` (default 5) times the lowest loss of the
epochs before it (:func:`diverged_since`). The Fourier Transformer on Burgers did this at the 1cycle
peak, twice (n = 2048 and 8192, seed 0): train rel L2 0.022, then 648, then 1.0035, a zero output,
for every later epoch; the inverse-problem GT on Darcy 141 went from 0.0505 to 0.504, a constant
output (its residual stream grew 5-25x per layer and the decoder's hidden units all died). The check runs before the epoch's checkpoint, so the checkpoint holds the
epoch before the one that stopped the run (with ``checkpoint_every: 1``), and ``checkpoint.lowest-loss.pt`` the
epoch of the lowest loss, which the message names; a rerun stops again at the same epoch, and
``divergence_factor: null`` (operational, like the patience) resumes and trains on.

One training per output folder at a time: a call holds ``<out_dir>/.lock``
(:class:`opflow.runtime.FolderLock`) while it runs; a second call into the same folder fails at
once with :class:`opflow.runtime.FolderBusyError`.

Code layout: :func:`train` takes the lock and drives a :class:`Trainer` through its steps
(:meth:`Trainer.setup`, :meth:`Trainer.resume`, then :meth:`Trainer.fit`, which runs
:meth:`Trainer.epoch` and :meth:`Trainer.save_checkpoint` / :meth:`Trainer.save_model`).
Prediction and test errors come from :mod:`opflow.inference`, the same code evaluation uses; the
final file is an :class:`opflow.records.ModelRecord`.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from opflow.atomic import atomic_link, atomic_path, atomic_write_text
from opflow.config import TrainConfig, diff_keys, run_hash, run_identity
from opflow.data.errors import ConfigError
from opflow.data.device_batches import DeviceBatches, item_nbytes, uniform_reason
from opflow.data.torch_data import ArrayDataset, Normalizers, make_loader, to_device
from opflow.data.views import make_dataset, training_purpose
from opflow.inference import accepts_globals, forward, load_model, model_inputs, predict, predict_batch, test_errors
from opflow.hostsync import deferred_checks, raise_faults, take_faults
from opflow.optim import build_optimizer, portable_state_dict
from opflow.progress import duration, time_left
from opflow.records import ModelRecord, RecordError, data_fingerprint, file_sha256, fingerprint_differences
from opflow.train_step import TrainStep
from opflow.runtime import (
    DistInfo,
    barrier,
    compile_unsupported,
    flush_cpu_denormals,
    folder_lock,
    init_distributed,
    keep_cpu_heap,
    rng_state,
    seed_everything,
    set_rng_state,
    set_threads,
    shutdown_distributed,
    warn_ignored,
)

# names that lived here before opflow.inference / opflow.records held them, kept importable
__all__ = [
    "CHECKPOINT_FORMAT", "CHECKPOINT_NAME", "LOG_NAME", "CURVES_STEM", "CHECKPOINT_CURVES_STEM", "RunMismatchError", "TrainResult", "Trainer", "train", "build_for_data",
    "BUDGET_ENV", "BUDGET_SAFETY", "DEADLINE_ENV", "EX_TEMPFAIL", "budget_seconds",
    "write_curves", "atomic_torch_save", "PACE_NOTE_S",
    "accepts_globals", "forward", "load_model", "model_inputs", "predict", "predict_batch", "test_errors", "data_fingerprint", "file_sha256",
]

log = logging.getLogger("opflow.train")

CHECKPOINT_FORMAT = "opflow-checkpoint/1"
CHECKPOINT_NAME = "checkpoint.pt"
#: beside the checkpoint: the checkpoint of the epoch with the lowest training loss so far (:meth:`Trainer.keep_lowest`)
LOWEST_CHECKPOINT_NAME = "checkpoint.lowest-loss.pt"
LOG_NAME = "train.log"
#: the curves of the folder's model file (``curves.csv/json/png``)
CURVES_STEM = "curves"
#: the curves of a run under way while the folder still holds a finished model file (a --restart
#: over it): written beside the checkpoint, so that ``curves.*`` keep describing ``model.pt``
CHECKPOINT_CURVES_STEM = "checkpoint-curves"
#: the environment variable giving every ``opflow train`` call a time budget in minutes (the flag wins)
BUDGET_ENV = "OPFLOW_TRAIN_MAX_MINUTES"
#: a Unix time by which every ``opflow train`` call of this environment stops (:func:`budget_seconds`)
DEADLINE_ENV = "OPFLOW_TRAIN_DEADLINE"
#: on the CPU, the first epoch of a call that still runs after this many seconds logs its pace (:meth:`Trainer.epoch`)
PACE_NOTE_S = 60.0
#: the next epoch is estimated at the longest epoch of this call times this factor
BUDGET_SAFETY = 1.25
#: exit status of ``opflow train`` stopped by its time budget (sysexits.h EX_TEMPFAIL: rerun to go on)
EX_TEMPFAIL = 75
#: ``data_on_device: auto`` holds a split when it takes less than this part of the free device memory
AUTO_DEVICE_FRACTION = 0.25
#: device types on which ``data_on_device: auto`` holds the splits (tests add "cpu")
_AUTO_DEVICE_TYPES = frozenset({"cuda"})

#: the trainer's clock (tests replace it to make time budgets deterministic)
_now = time.perf_counter


class TrainingDiverged(FloatingPointError):
    """The training loss stayed far above its lowest value (module doc; :func:`diverged_since`)."""


def diverged_since(losses: Sequence[float], factor: float, patience: int) -> int | None:
    """The 1-based epoch where a divergence began, or None.

    ``losses`` are the training losses of epochs 1, 2, ...; epoch i is *above* when its loss
    exceeds ``factor`` (> 1, as ``training.divergence_factor`` is bounded) times the lowest loss of the
    epochs before it. The run has diverged when
    the last ``patience`` epochs are all above; the answer is the first of them.
    """
    if patience < 1 or len(losses) < patience + 1:
        return None
    start = len(losses) - patience
    lowest = min(losses[:start])  # factor > 1: an epoch above it cannot lower the minimum for the next
    return start + 1 if all(loss > factor * lowest for loss in losses[start:]) else None


class RunMismatchError(ConfigError):
    """A checkpoint in the output folder belongs to another run config or data file."""


@dataclass
class TrainResult:
    """What a :func:`train` call did: ``complete`` when ``model_path`` was written."""

    complete: bool
    epochs_done: int
    model_path: Path | None
    checkpoint_path: Path
    curves: list[dict[str, Any]]
    train_time_s: float
    resumed_from: int
    #: why the call stopped before the last epoch: "time_budget", "max_epochs", or None
    stopped_by: str | None = None
    #: the line logged at such a stop, or the "already trained" line (empty otherwise)
    message: str = ""
    #: True when the model file already held this run, finished: nothing was trained (:meth:`Trainer.finished`)
    already_finished: bool = False


# --------------------------------------------------------------------------- files


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary name (:mod:`opflow.atomic`): never a partial file."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def write_curves(curves: list[dict[str, Any]], folder: Path, png: bool = False, title: str = "", stem: str = CURVES_STEM) -> None:
    """``<stem>.json`` and ``<stem>.csv`` (and ``<stem>.png``) in ``folder`` (stem ``curves`` by default)."""
    atomic_write_text(folder / f"{stem}.json", json.dumps(curves, indent=1))
    fields = ["epoch", "train_loss", "test_rel_l2", "lr", "epoch_time_s", "elapsed_s"]
    with atomic_path(folder / f"{stem}.csv") as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for c in curves:
            w.writerow({k: ("" if c.get(k) is None else c.get(k)) for k in fields})
    if png and curves:
        from opflow.plots import plot_curves

        plot_curves(curves, folder / f"{stem}.png", title=title)


def _utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- model


def build_for_data(model_config: Mapping[str, Any], ds: ArrayDataset, where: str) -> tuple[Any, dict[str, Any], dict[str, int]]:
    """Build the model for dataset ``ds``: ``(model, effective model config, build shape)``.

    Globals (module docstring): a model accepting them gets ``global_channels`` set from the data
    when it has that hyperparameter (its ``Hparams``); otherwise they widen its input channels.
    Input sets (``view.input_sets``): the model's ``input_sets`` hyperparameter is set to their
    ``[coordinate dim, channels]``; a model without ``accepts_input_sets`` is refused.
    """
    from opflow.models.base import build_model, model_class

    cfg = dict(model_config)
    cls = model_class(cfg["arch"])
    g = ds.global_channels
    takes = getattr(cls, "accepts_globals", False)
    if takes and "global_channels" in cls.Hparams.model_fields:
        if "global_channels" in cfg and int(cfg["global_channels"]) != g:
            raise ConfigError(
                f"{where}.global_channels: {cfg['global_channels']} but the data have {g} global input channel(s) "
                f"({list(ds.global_names)}); remove global_channels from the model config (it is set from the data)"
            )
        cfg["global_channels"] = g
    if "n_points" in cls.Hparams.model_fields:  # models with fixed input points (DeepONet's sensors)
        n = int(ds.inputs.shape[1])
        if int(cfg.get("n_points") or n) != n:
            raise ConfigError(f"{where}.n_points: {cfg['n_points']} but the data have {n} input points; remove n_points from the model config (it is set from the data)")
        cfg["n_points"] = n
    sets = [list(s.shape) for s in getattr(ds, "input_sets", ())]
    if sets:  # input functions on their own point sets (opflow.data.torch_data, "Input sets")
        if not getattr(cls, "accepts_input_sets", False) or "input_sets" not in cls.Hparams.model_fields:
            raise ConfigError(
                f"{where}: arch {cfg['arch']!r} does not take input functions on their own point sets, but the dataset's view "
                f"declares {len(sets)} (view.input_sets); use a model that does (gnot) or remove view.input_sets"
            )
        if cfg.get("input_sets") not in (None, [], sets):
            raise ConfigError(f"{where}.input_sets: {cfg['input_sets']} but the data have {sets}; remove input_sets from the model config (it is set from the data)")
        cfg["input_sets"] = sets
    shape = {"in_channels": ds.in_channels + (0 if takes else g), "out_channels": ds.out_channels, "coord_dim": ds.coord_dim}
    return build_model(cfg, shape["in_channels"], shape["out_channels"], shape["coord_dim"], where=where), cfg, shape


# --------------------------------------------------------------------------- checkpoints and processes


def _load_checkpoint(path: Path, restart_if_changed: bool = False) -> dict[str, Any]:
    """The checkpoint at ``path``, or the refusal naming what to do: ``--restart`` by hand; under the
    workflow (its jobs pass ``--restart-if-changed``; ``--restart`` is no snakemake option) deleting
    the file, after which the same command trains from scratch."""
    fix = (
        f"delete it (rm {path}) and run the same command again (a snakemake job then trains from scratch)"
        if restart_if_changed
        else "delete it or rerun with --restart"
    )
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a foreign or damaged file: say so, do not guess
        raise RunMismatchError(f"{path}: cannot read the checkpoint ({e}); {fix}") from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        raise RunMismatchError(f"{path}: not an opflow checkpoint ({CHECKPOINT_FORMAT}); {fix}")
    return ck


def _mismatch(ck: Mapping[str, Any], run: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> list[str]:
    problems = []
    if ck.get("run_hash") != run_hash(run):
        problems += diff_keys(run_identity(ck["run"]), run_identity(run)) or [f"run hash {ck.get('run_hash')} -> {run_hash(run)}"]
    problems += [f"data file {k}" for k in fingerprint_differences(ck.get("data_fingerprint", {}), fingerprint)]
    return problems


def _gather_rng(info: DistInfo) -> list[dict[str, Any]]:
    state = rng_state()
    if not info.distributed:
        return [state]
    import torch.distributed as dist

    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, state)
    return out


def _all_sum(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.distributed:
        import torch.distributed as dist

        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def _free_device_memory(dev: torch.device) -> int:
    """Free bytes on ``dev`` (CUDA: ``torch.cuda.mem_get_info``)."""
    return int(torch.cuda.mem_get_info(dev)[0])


def _progress_default(info: DistInfo) -> bool:
    return info.is_main and sys.stderr.isatty()


# --------------------------------------------------------------------------- entry point


def _check_budget(value: Any, what: str, unit: str = "minutes") -> float:
    if not (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{what} must be a number of {unit} > 0 (the time budget of this call)")
    return float(value)


def budget_seconds(minutes: float | None, environ: Mapping[str, str] | None = None, *, now: float | None = None) -> float | None:
    """The time budget of an ``opflow train`` call in seconds: the flag's minutes, else
    :data:`BUDGET_ENV`'s, else None (no budget); an empty variable counts as unset. With
    :data:`DEADLINE_ENV` set (a Unix time, e.g. the end of a borrowed GPU's command), the budget is
    also at most the seconds left until then (``now``: the current Unix time, default ``time.time()``),
    so that jobs run one after the other under one command all stop in time.

    A value that is not a finite number > 0 is a :class:`ConfigError` naming the flag or the
    variable and the value; a deadline already past leaves a budget of 1 second (the first epoch of a
    call always runs, then the call stops with its checkpoint).
    """
    env = os.environ if environ is None else environ
    budget: float | None
    if minutes is not None:
        budget = 60.0 * _check_budget(minutes, f"--max-minutes-this-call: {minutes!r}")
    else:
        text = env.get(BUDGET_ENV, "").strip()
        if not text:
            budget = None
        else:
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            budget = 60.0 * _check_budget(value, f"{BUDGET_ENV}={text!r}")
    deadline = env.get(DEADLINE_ENV, "").strip()
    if deadline:
        try:
            end = float(deadline)
        except ValueError:
            end = math.nan
        _check_budget(end, f"{DEADLINE_ENV}={deadline!r} (a Unix time in seconds)", "seconds")
        left = max(1.0, end - (time.time() if now is None else now))
        budget = left if budget is None else min(budget, left)
    return budget


def train(
    run: Mapping[str, Any],
    data_file: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    output: str | os.PathLike | None = None,
    restart: bool = False,
    restart_if_changed: bool = False,
    progress: bool | None = None,
    max_epochs_this_call: int | None = None,
    max_seconds_this_call: float | None = None,
    threads: int | None = None,
    device: str | None = None,
) -> TrainResult:
    """Train (or resume) the run ``run`` on ``data_file``; files go to ``out_dir`` (module doc).

    ``output`` is the final model file (default ``out_dir/model.pt``). ``max_epochs_this_call``
    stops after that many epochs of this call, leaving a checkpoint to resume from;
    ``max_seconds_this_call`` stops before an epoch that would not end within that many seconds of
    the call (module doc, "Time budget per call"; ``result.stopped_by == "time_budget"``). ``device``
    overrides ``training.device``; ``threads`` overrides ``training.threads``. Another training
    running into ``out_dir`` makes this one fail at once (:class:`opflow.runtime.FolderBusyError`).
    A model file already holding this run, finished, makes the call a no-op
    (``result.already_finished``; :meth:`Trainer.finished`); ``restart`` trains it again.
    """
    started = _now()
    if max_seconds_this_call is not None:
        _check_budget(max_seconds_this_call, f"max_seconds_this_call: {max_seconds_this_call!r}", "seconds")
    cfg = TrainConfig.from_dict(run["training"], "run.training")
    if device is not None:
        cfg = dataclasses.replace(cfg, device=device)
    set_threads(threads if threads is not None else cfg.threads)
    info, dev = init_distributed(cfg.device)
    try:
        cfg.check_world_size(info.world_size)
        with folder_lock(out_dir, info, "training"):
            trainer = Trainer(run, cfg, info, dev, data_file, out_dir, output=output, progress=progress, started_at=started)
            done = trainer.finished(restart=restart, restart_if_changed=restart_if_changed)
            if done is not None:  # before any data is read or model built
                return done
            trainer.setup()
            trainer.resume(restart=restart, restart_if_changed=restart_if_changed)
            return trainer.fit(max_epochs_this_call, max_seconds_this_call=max_seconds_this_call)
    finally:
        shutdown_distributed(info)


# --------------------------------------------------------------------------- the trainer


class Trainer:
    """One training run of ``run`` on ``data_file`` in ``out_dir``, in steps (module doc for the maths).

    * :meth:`setup`: datasets, normalisers (training split only), the model (seeded: identical
      initial weights on every process), loaders (or the splits on the device:
      ``training.data_on_device``), AdamW and the OneCycle schedule;
    * :meth:`resume`: continue from a matching ``checkpoint.pt`` (weights, optimiser, schedule,
      normalisers, RNG and loader streams, curves), or discard it, or refuse it;
    * :meth:`fit`: :meth:`epoch` after epoch, :meth:`save_checkpoint` every ``checkpoint_every``
      epochs and at the stop (epoch limit or time budget of the call), :meth:`save_model` when
      all epochs are done.

    The steps run in this order on every process of a DDP job; the order of the random draws is
    part of the contract that a resumed run equals an uninterrupted one bit for bit.
    """

    def __init__(
        self,
        run: Mapping[str, Any],
        cfg: TrainConfig,
        info: DistInfo,
        dev: torch.device,
        data_file: str | os.PathLike,
        out_dir: str | os.PathLike,
        *,
        output: str | os.PathLike | None = None,
        progress: bool | None = None,
        started_at: float | None = None,
    ) -> None:
        self.cfg, self.info, self.dev = cfg, info, dev
        #: when this call started (the trainer's clock ``_now``): the time budget counts from here
        self.started_at = _now() if started_at is None else started_at
        self.local_batch = cfg.batch_size // info.world_size
        self.autocast = cfg.precision == "bf16"
        if cfg.precision != "fp32" and dev.type != "cuda":
            warn_ignored(f"precision {cfg.precision}", dev)
            self.autocast = False
        self.tf32 = cfg.precision == "tf32" and dev.type == "cuda"
        if dev.type == "cuda":  # process-wide: float32 matrix products in TF32 or in full float32
            torch.backends.cuda.matmul.allow_tf32 = self.tf32
        self.cuda_graphs = cfg.cuda_graphs
        if self.cuda_graphs and dev.type != "cuda":
            warn_ignored("cuda_graphs (CUDA graph capture)", dev)
            self.cuda_graphs = False
        self.use_compile = cfg.compile
        why_not = compile_unsupported(dev) if self.use_compile else None
        if why_not is not None:
            warnings.warn(f"training.compile: {why_not}; the plain step runs", RuntimeWarning, stacklevel=2)
            self.use_compile = False
        #: glibc keeps the freed memory for the next tensors (process-wide; :func:`opflow.runtime.keep_cpu_heap`)
        self.cpu_heap = dev.type == "cpu" and keep_cpu_heap()
        #: subnormal floats flushed to zero on the CPU (process-wide; :func:`opflow.runtime.flush_cpu_denormals`)
        self.cpu_denormals_flushed = dev.type == "cpu" and flush_cpu_denormals()
        self.progress = _progress_default(info) if progress is None else (progress and info.is_main)
        self.data_file = Path(data_file)
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_path = self.out_dir / CHECKPOINT_NAME
        self.lowest_path = self.out_dir / LOWEST_CHECKPOINT_NAME
        self.lowest_epoch: int | None = None  # the epoch whose checkpoint lowest_path holds
        self.log_path = self.out_dir / LOG_NAME
        self.model_path = Path(output) if output is not None else self.out_dir / "model.pt"
        self.run = dict(run)
        self.run["hash"] = run_hash(self.run)
        self.fingerprint = data_fingerprint(self.data_file)
        self.name = f"{self.run['dataset']}_{self.run['model']}"
        self.view = self.run.get("view")
        # progress of the run: set by resume(), advanced by epoch()
        self.start_epoch = 0
        self.curves: list[dict[str, Any]] = []
        self.train_time = 0.0
        self._setup_notes: list[str] = []  # logged by fit(), after resume() has written the call's marker line
        #: how a call stopped early is resumed (resume() says "without --restart" after a restart)
        self.resume_hint = "rerun the same command to resume"

    # ----------------------------------------------------------------- logging

    def _step_settings(self) -> str:
        """The operational settings in effect for the step, for the log's start line ("" when all are off)."""
        on = [name for name, flag in (
            ("bf16 autocast", self.autocast), ("TF32 products", self.tf32), ("torch.compile", self.use_compile),
            ("CUDA graphs", self.cuda_graphs), ("glibc heap kept", self.cpu_heap),
            ("denormals flushed", self.cpu_denormals_flushed),
        ) if flag]
        return f" ({', '.join(on)})" if on else ""

    def _note(self, level: int, msg: str, *args: Any) -> None:
        """Log ``msg % args`` and, on the main process, append it to ``train.log``."""
        log.log(level, msg, *args)
        if self.info.is_main:
            self._append_log(f"{_utc_now()} {logging.getLevelName(level)} {msg % args if args else msg}")

    def _append_log(self, line: str) -> None:
        with open(self.log_path, "a") as fh:
            fh.write(line + "\n")

    # ----------------------------------------------------------------- steps

    def setup(self) -> None:
        """Datasets and normalisers, then (seeded) model, loaders, optimiser and schedule."""
        cfg, info, dev = self.cfg, self.info, self.dev
        self.train_ds = make_dataset(self.data_file, "train", self.run.get("task"), self.view, purpose=training_purpose(cfg.unroll))
        self.test_ds = make_dataset(self.data_file, "test", self.train_ds.task, self.view, purpose="rollout")
        self.check_splits()
        self.check_fit()
        self.norms: Normalizers = self.train_ds.fit_normalizers(cfg.input_normalizer, cfg.output_normalizer)

        seed_everything(cfg.seed)
        self.model, self.model_config, self.build_shape = build_for_data(self.run["model_config"], self.train_ds, where=f"models.{self.run['model']}")
        self.model.to(dev)
        self.loader, self.sampler, self.loader_gen = make_loader(
            self.train_ds, self.local_batch, shuffle=True, seed=cfg.seed, rank=info.rank, world_size=info.world_size,
            num_workers=cfg.num_workers, pin_memory=dev.type == "cuda",
        )
        self.test_loader, test_sampler, _ = make_loader(self.test_ds, self.local_batch, shuffle=False, num_workers=0)
        #: what epoch() iterates and what the curves' test errors iterate: the loaders or DeviceBatches
        self.train_batches: Any = self.loader
        self.test_batches: Any = self.test_loader
        if self._data_on_device(self.train_ds, "training"):
            self.train_batches = DeviceBatches.build(self.train_ds, self.sampler, self.local_batch, dev, generator=self.loader_gen)
            held = self.train_batches.nbytes
            if info.is_main and self._data_on_device(self.test_ds, "test", quiet=True):
                self.test_batches = DeviceBatches.build(self.test_ds, test_sampler, self.local_batch, dev)
                held += self.test_batches.nbytes
            self._setup_notes.append(
                f"{self.name}: training split{' and test split' if self.test_batches is not self.test_loader else ''} held on {dev} "
                f"({held / 2**20:.1f} MiB), batched by index (training.data_on_device: {cfg.data_on_device})"
            )
        self.optimizer = build_optimizer(self.model, cfg.optimizer, cfg.lr, cfg.weight_decay)
        self.scheduler: torch.optim.lr_scheduler.LRScheduler
        if cfg.scheduler == "onecycle":
            self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
                self.optimizer, max_lr=cfg.lr, total_steps=cfg.epochs * len(self.loader),
                pct_start=cfg.pct_start, div_factor=cfg.div_factor, final_div_factor=cfg.final_div_factor,
            )
        else:  # stepped every batch like OneCycle: step_size epochs = step_size * batches, the same lr per epoch
            self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=cfg.step_size * len(self.loader), gamma=cfg.gamma)
        if info.distributed and info.rank:  # different dropout streams per process, same initial weights
            torch.manual_seed(cfg.seed + 1_000_003 * info.rank)

    def check_splits(self) -> None:
        """Refuse an empty training or test split, naming the file and the split, before anything is built
        (the test split gives the curves their test error; evaluation reads it too)."""
        from opflow.data.errors import DatasetError

        for split, ds, need in (("train", self.train_ds, "training needs samples"), ("test", self.test_ds, "the curves and the evaluation need test samples")):
            if len(ds) == 0:
                raise DatasetError(
                    f"{self.data_file}: the {split} split is empty (no sample is labelled {split!r}); {need}: check the split sizes "
                    f"of datasets.{self.run['dataset']} and make the file again (opflow validate {self.data_file} checks it)"
                )

    def check_fit(self) -> None:
        """Refuse a model that does not fit the loaded data, with the message the workflow gives at
        load (:func:`opflow.compat.check_pair`), before normalisers, model or any epoch."""
        from opflow.compat import DataShape, check_pair, hparams_of
        from opflow.data.views import kind_of

        dataset, model, entry = self.run["dataset"], self.run["model"], self.run["model_config"]
        shape = DataShape.of_dataset(self.train_ds, f"datasets.{dataset} (file {self.data_file})", kind_of(self.train_ds).name)
        check_pair(dataset, model, entry["arch"], hparams_of(entry, f"models.{model}"), self.cfg, [shape])

    def _data_on_device(self, ds: ArrayDataset, split: str, quiet: bool = False) -> bool:
        """Whether split ``ds`` is held on the device (module doc, "Data on the device").

        ``true`` with items of different shapes is a :class:`ConfigError` for the training split;
        ``auto`` falls back to the loader and notes why (unless ``quiet``).
        """
        want, dev = self.cfg.data_on_device, self.dev
        if want is False or (want == "auto" and dev.type not in _AUTO_DEVICE_TYPES):
            return False
        why = uniform_reason(ds)
        if why is not None:
            if want is True and split == "training":
                raise ConfigError(
                    f"training.data_on_device: true, but the training split cannot be held on the device: {why}; "
                    "set training.data_on_device: auto or false (the data loader then pads each batch)"
                )
            if not quiet:
                self._setup_notes.append(f"{self.name}: training.data_on_device {want}: the data loader feeds the {split} split: {why}")
            return False
        if want == "auto":
            need, free = item_nbytes(ds), _free_device_memory(dev)
            if need >= AUTO_DEVICE_FRACTION * free:
                if not quiet:
                    self._setup_notes.append(
                        f"{self.name}: training.data_on_device auto: the data loader feeds the {split} split: it takes "
                        f"{need / 2**20:.1f} MiB, not under {AUTO_DEVICE_FRACTION:.0%} of the free {free / 2**20:.0f} MiB on {dev}"
                    )
                return False
        return True

    def finished(self, *, restart: bool = False, restart_if_changed: bool = False) -> TrainResult | None:
        """The result of this run when the model file already holds it, finished; else None (train).

        Decided from what the model file records, before anything expensive: its run hash and data
        fingerprint must equal this run's (the hash covers ``epochs``, and a model file is written
        only when all of them are done). Returns None (train) when there is no model file, when
        ``restart`` is set, or when a checkpoint is in the folder (a run under way here:
        :meth:`resume` decides). A model file of another run or data, or one that cannot be read,
        raises :class:`RunMismatchError` naming the file, what differs and ``--restart``, unless
        ``restart_if_changed`` (then None: the new run trains and replaces it when it completes).
        """
        path = self.model_path
        if restart or not path.exists() or self.ckpt_path.exists():
            return None
        try:
            rec = ModelRecord.load(path)
        except RecordError as e:
            problems = [f"it cannot be read ({e})"]
        else:
            problems = _mismatch({"run": rec.run, "run_hash": rec.run_hash, "data_fingerprint": rec.data_fingerprint}, self.run, self.fingerprint)
            if not problems and rec.epochs != self.cfg.epochs:
                problems = [f"it holds {rec.epochs} epochs, the run asks for {self.cfg.epochs}"]
        if problems:
            if restart_if_changed:
                self._note(logging.WARNING, "%s: %s does not hold this run (%s); training from scratch", self.name, path, "; ".join(problems))
                return None
            raise RunMismatchError(
                f"{path} is a finished model of another run; differing: {'; '.join(problems)}. "
                "Rerun with --restart to train this run from scratch and replace it (or give another --out-dir / --output)"
            )
        message = (
            f"{self.out_dir}: already trained: {path} holds this run, finished ({rec.epochs} of {self.cfg.epochs} epochs, "
            f"run {self.run['hash'][:12]}, same data); nothing to do. To train it again from scratch, rerun with --restart"
        )
        if self.info.is_main:  # the CLI prints the message; train.log keeps it
            self._append_log(f"--- already trained, nothing done ({_utc_now()}) ---")
        return TrainResult(
            True, rec.epochs, path, self.ckpt_path, list(rec.curves), float(rec.train_time_s), rec.epochs, None, message, already_finished=True
        )

    def _matching_checkpoint(self, restart: bool, restart_if_changed: bool) -> tuple[dict[str, Any] | None, str]:
        """The checkpoint to resume from (or None) and why one there is discarded ("" if none is)."""
        if not self.ckpt_path.exists():
            return None, ""
        if restart:
            return None, f"--restart: discarding {self.ckpt_path}"
        ck = _load_checkpoint(self.ckpt_path, restart_if_changed)
        problems = _mismatch(ck, self.run, self.fingerprint)
        if not problems:
            return ck, ""
        if not restart_if_changed:
            raise RunMismatchError(
                f"{self.ckpt_path} belongs to another run; differing: {'; '.join(problems)}. "
                "Rerun with --restart to discard it and train from scratch"
            )
        return None, f"checkpoint does not match this run ({'; '.join(problems)}); training from scratch"

    def resume(self, *, restart: bool = False, restart_if_changed: bool = False) -> int:
        """Continue from ``checkpoint.pt`` when it matches; returns the epochs already done.

        ``restart`` discards any checkpoint; ``restart_if_changed`` discards one of another run
        (else it is refused with :class:`RunMismatchError`). Then wraps the model for DDP and builds
        the training step (:class:`opflow.train_step.TrainStep`: eager, ``torch.compile`` or a CUDA
        graph, as configured).
        """
        info = self.info
        had_checkpoint = self.ckpt_path.exists()
        ck, discarded = self._matching_checkpoint(restart, restart_if_changed)
        if restart:  # the same command would discard this call's checkpoint again
            self.resume_hint = "rerun the same command without --restart to resume"
        if info.is_main:  # the marker first: train.log is appended to by every call
            how = f"resumed at epoch {int(ck['epoch'])}" if ck is not None else "started from scratch"
            self._append_log(f"--- {how} ({_utc_now()}) ---")
        kept = None
        if had_checkpoint and ck is None and not restart and info.is_main:
            kept = self._keep_aside()
        if discarded:
            where = f"; the old one is kept as {kept} (rename it back to resume it where its run and data are restored)" if kept else ""
            self._note(logging.INFO if restart else logging.WARNING, "%s: %s%s", self.name, discarded, where)
        if had_checkpoint:
            barrier(info)
            if ck is None:
                if info.is_main and restart:
                    self.ckpt_path.unlink(missing_ok=True)
                    self.lowest_path.unlink(missing_ok=True)
            else:
                self._restore(ck)
                self._note(logging.INFO, "%s: resuming after epoch %d of %d from %s", self.name, self.start_epoch, self.cfg.epochs, self.ckpt_path)
            barrier(info)
        self.norms.to(self.dev)

        self.fwd_model: torch.nn.Module = self.model
        if info.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.fwd_model = DDP(self.model, device_ids=[self.dev.index] if self.dev.type == "cuda" else None)
        self.step = TrainStep(
            self.model, self.fwd_model, self.optimizer, self.scheduler, self.cfg, self.norms, world_size=info.world_size,
            autocast=self.autocast, compile=self.use_compile, cuda_graphs=self.cuda_graphs,
            note=lambda level, msg: self._note(level, "%s: %s", self.name, msg),
        )
        return self.start_epoch

    def _keep_aside(self) -> Path:
        """Rename a checkpoint of another run or data to ``checkpoint.discarded-<UTC time>.pt`` beside it.

        Only ``--restart`` deletes a checkpoint. One that the workflow's ``restart_if_changed``
        finds changed (a config edit, a regenerated data file) may hold hours of training that the
        change did not mean to throw away; it is kept, and the log line says where.
        """
        stamp = _utc_now().replace(":", "").replace("+0000", "Z")
        kept = self.ckpt_path.with_name(f"{self.ckpt_path.stem}.discarded-{stamp}{self.ckpt_path.suffix}")
        n = 1
        while kept.exists():
            n += 1
            kept = self.ckpt_path.with_name(f"{self.ckpt_path.stem}.discarded-{stamp}-{n}{self.ckpt_path.suffix}")
        os.replace(self.ckpt_path, kept)
        if self.lowest_path.exists():  # the old run's, beside it: checkpoint.lowest-loss.discarded-<time>.pt
            os.replace(self.lowest_path, self.lowest_path.with_name(kept.name.replace(self.ckpt_path.stem, self.lowest_path.stem, 1)))
        return kept

    def _restore(self, ck: Mapping[str, Any]) -> None:
        info, cfg = self.info, self.cfg
        self.model.load_state_dict(ck["model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.scheduler.load_state_dict(ck["scheduler"])
        self.norms = Normalizers.from_state(ck["normalizers"])
        rngs = ck["rng"]
        if len(rngs) == info.world_size:
            set_rng_state(rngs[info.rank])
        else:
            self._note(logging.WARNING, "%s: checkpoint written by %d process(es), resuming on %d: RNG streams restart", self.name, len(rngs), info.world_size)
            if info.rank == 0:
                set_rng_state(rngs[0])
            else:
                torch.manual_seed(cfg.seed + 1_000_003 * info.rank)
        self.loader_gen.set_state(ck["loader_generator"])
        self.start_epoch, self.curves, self.train_time = int(ck["epoch"]), list(ck["curves"]), float(ck["train_time_s"])
        self.lowest_epoch = ck.get("lowest_loss_epoch")

    def epoch(self, epoch: int) -> dict[str, Any]:
        """Train one pass over the training split (0-based ``epoch``), then the test error when due.

        Appends the epoch's curve row to :attr:`curves` and returns it. Nothing here waits for the
        device inside the loop (:mod:`opflow.hostsync`): the per-sample losses are summed on the
        device, the models' value checks are deferred and their numerical faults counted there, and
        both are read once, after the loop (:class:`FloatingPointError` naming the epoch), then the
        loss with the earlier epochs' losses for a divergence (:class:`TrainingDiverged`). The
        progress bar shows the last epoch's loss, not the running one (reading it would wait).
        """
        from tqdm.auto import tqdm

        cfg, info, dev, norms = self.cfg, self.info, self.dev, self.norms
        t0 = _now()
        self.sampler.set_epoch(epoch)
        self.fwd_model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=dev)  # sum of the per-sample losses
        samples = 0
        lr_used = self.optimizer.param_groups[0]["lr"]
        bar = tqdm(self.train_batches, desc=f"{self.name} epoch {epoch + 1}/{cfg.epochs}", leave=False, disable=not self.progress, unit="batch")
        if self.progress and self.curves:
            bar.set_postfix(last_epoch_loss=f"{self.curves[-1]['train_loss']:.4g}", refresh=False)
        # a long first epoch on the CPU says its pace once, after PACE_NOTE_S (on a GPU the clock would not
        # see the queued work without a wait, and its epochs end soon enough for the epoch line's time left)
        pace_at = t0 + PACE_NOTE_S if dev.type == "cpu" and info.is_main and epoch == self.start_epoch else None
        with deferred_checks():
            for k, batch in enumerate(bar, 1):
                loss, n = self.step(to_device(batch, dev))
                lr_used = self.step.lr_used
                loss_sum += loss.double() * n
                samples += n
                if pace_at is not None and (now := _now()) >= pace_at:
                    pace_at = None
                    self._note_pace(epoch, k, now - t0)
        acc = _all_sum(torch.stack([loss_sum, loss_sum.new_tensor(float(samples))]), info)
        train_loss = float(acc[0] / acc[1])  # the one wait for the device per epoch
        try:
            raise_faults(take_faults(self.model), f"{self.name} epoch {epoch + 1}", lambda msg: self._note(logging.WARNING, "%s", msg))
        except FloatingPointError as e:
            raise self._stop(FloatingPointError(f"{e}; the checkpoint is left as it was")) from None
        if not math.isfinite(train_loss):
            raise self._stop(FloatingPointError(
                f"{self.name}: the training loss became {train_loss} in epoch {epoch + 1} (the checkpoint is left as it was); "
                "lower training.lr or check the data"
            ))
        if cfg.divergence_factor is not None:
            losses = [float(r["train_loss"]) for r in self.curves] + [train_loss]
            since = diverged_since(losses, cfg.divergence_factor, cfg.divergence_patience)
            if since is not None:
                lowest = min(losses[: since - 1])
                raise self._stop(TrainingDiverged(
                    f"{self.name}: the run diverged: the training loss ({', '.join(f'{v:.4g}' for v in losses[since - 1:])} in epochs "
                    f"{since}-{epoch + 1}) has stayed above {cfg.divergence_factor:g} x its lowest ({lowest:.4g}, epoch "
                    f"{losses.index(lowest) + 1}) for {cfg.divergence_patience} epochs (the checkpoint is left as it was, written before epoch {epoch + 1}"
                    f"{self._lowest_note()}; `opflow scales {self._scales_files()} --data {self.data_file}` shows where its output stopped "
                    "depending on the input). Change training.seed, lower training.lr, or set training.divergence_factor: null to train on"
                ))
        test_rel = None
        last = epoch + 1 == cfg.epochs
        if info.is_main and ((epoch + 1) % cfg.eval_every == 0 or last):
            test_rel = float(test_errors(self.model, self.test_batches, norms, dev, autocast=self.autocast)[0].mean())
        dt = _now() - t0
        self.train_time += dt
        row = {"epoch": epoch + 1, "train_loss": train_loss, "test_rel_l2": test_rel, "lr": float(lr_used), "epoch_time_s": dt, "elapsed_s": self.train_time}
        self.curves.append(row)
        if info.is_main:
            self._note(
                logging.INFO, "%s epoch %d/%d  train %s %.5g  test rel L2 %s  lr %.3g  %.1fs%s",
                self.name, epoch + 1, cfg.epochs, cfg.loss, train_loss, "-" if test_rel is None else f"{test_rel:.5g}", row["lr"], dt,
                ("  " + time_left(self.curves, cfg.epochs)).rstrip(),
            )
        return row

    def _lowest_note(self) -> str:
        """Where the checkpoint of the lowest loss is, for the divergence message ("" when there is none)."""
        if self.lowest_epoch is None or not self.lowest_path.exists():
            return ""
        return f"; {self.lowest_path} holds the one of epoch {self.lowest_epoch}, the lowest loss"

    def _scales_files(self) -> str:
        return f"{self.lowest_path} {self.ckpt_path}" if self._lowest_note() else str(self.ckpt_path)

    def _note_pace(self, epoch: int, steps: int, seconds: float) -> None:
        """Log the pace of the epoch running (0-based ``epoch``) after ``steps`` steps and ``seconds``: the
        epoch's and the run's time at that pace (the test pass not counted), for a user who would otherwise
        learn only at the end of a long epoch that the run takes days."""
        total = len(self.train_batches)
        per_epoch = seconds / steps * total
        left = self.cfg.epochs - epoch
        self._note(
            logging.INFO, "%s: epoch %d: %d of %d steps in %s: about %s per epoch, %s for the %d epoch(s) left at this pace",
            self.name, epoch + 1, steps, total, duration(seconds), duration(per_epoch), duration(per_epoch * left), left,
        )

    def _out_of_time(self, epoch: int, longest: float, budget: float | None) -> bool:
        """Whether epoch ``epoch`` (0-based) would end past the call's budget (module doc); the
        processes of a DDP job agree (any one out of time stops all)."""
        if budget is None or epoch == self.start_epoch:
            return False
        late = _now() - self.started_at + BUDGET_SAFETY * longest > budget
        if self.info.distributed:
            late = bool(_all_sum(torch.tensor([float(late)], dtype=torch.float64, device=self.dev), self.info)[0] > 0)
        return late

    def fit(self, max_epochs_this_call: int | None = None, *, max_seconds_this_call: float | None = None) -> TrainResult:
        """Run the epochs left, checkpointing; the model file at the end.

        At most ``max_epochs_this_call`` epochs, and none that would end past
        ``max_seconds_this_call`` seconds after the call started (module doc, "Time budget per
        call"); the result's ``stopped_by`` says which stopped it.
        """
        from opflow.models.base import count_parameters

        cfg, info = self.cfg, self.info
        resumed_from = self.start_epoch
        stop_at = cfg.epochs if max_epochs_this_call is None else min(cfg.epochs, self.start_epoch + max(0, max_epochs_this_call))
        if info.is_main:
            self._note(
                logging.INFO, "%s: %d parameters, %d train / %d test samples, %s on %s x %d%s, epochs %d..%d of %d",
                self.name, count_parameters(self.model), len(self.train_ds), len(self.test_ds), cfg.loss, self.dev, info.world_size,
                self._step_settings(), self.start_epoch + 1, stop_at, cfg.epochs,
            )
            for line in self._setup_notes:
                self._note(logging.INFO, "%s", line)
        done, saved, longest = self.start_epoch, self.start_epoch, 0.0
        stopped_by: str | None = None
        for epoch in range(self.start_epoch, stop_at):
            if self._out_of_time(epoch, longest, max_seconds_this_call):
                stopped_by = "time_budget"
                break
            t0 = _now()
            self.epoch(epoch)
            done = epoch + 1
            if done % cfg.checkpoint_every == 0 or done == stop_at:
                saved = self._checkpoint_with_curves(done)
            barrier(info)
            longest = max(longest, _now() - t0)
        if stopped_by is not None and saved != done:  # checkpoint_every > 1: the stop still leaves one
            self._checkpoint_with_curves(done)
            barrier(info)

        stop_at = done
        complete = stop_at >= cfg.epochs
        message = ""
        if not complete:
            stopped_by = stopped_by or "max_epochs"
            if stopped_by == "time_budget":
                message = (
                    f"{self.name}: stopped after epoch {done} of {cfg.epochs} within the {(max_seconds_this_call or 0) / 60:g}-minute budget of "
                    f"this call (next epoch estimated at {BUDGET_SAFETY * longest:.1f} s), checkpoint at {self.ckpt_path}; "
                    f"{self.resume_hint}"
                )
            else:
                message = f"{self.name}: stopped after epoch {done} of {cfg.epochs} (max_epochs_this_call), checkpoint at {self.ckpt_path}"
            if info.is_main:
                self._note(logging.INFO if stopped_by == "max_epochs" else logging.WARNING, "%s", message)
        if info.is_main:
            if complete:  # the model, then its curves: curves.* describe the model file whenever one is there
                self.save_model(stop_at)
                write_curves(self.curves, self.out_dir, png=True, title=self.name)
                self.ckpt_path.unlink(missing_ok=True)
                self.lowest_path.unlink(missing_ok=True)
                for suffix in (".json", ".csv", ".png"):
                    (self.out_dir / f"{CHECKPOINT_CURVES_STEM}{suffix}").unlink(missing_ok=True)
                self._note(logging.INFO, "%s: wrote %s (%.1f s of training)", self.name, self.model_path, self.train_time)
            else:
                write_curves(self.curves, self.out_dir, png=True, title=self.name, stem=self._curves_stem())
        barrier(info)
        return TrainResult(
            complete, stop_at, self.model_path if complete else None, self.ckpt_path, self.curves, self.train_time, resumed_from, stopped_by, message
        )

    def _stop(self, error: Exception) -> Exception:
        """Log ``error`` to train.log (rank 0) and return it, to be raised."""
        if self.info.is_main:
            self._note(logging.ERROR, "%s", error)
        return error

    def _checkpoint_with_curves(self, epochs_done: int) -> int:
        """:meth:`save_checkpoint` and :meth:`keep_lowest`, then the curves so far (rank 0); returns ``epochs_done``."""
        lowest = bool(self.curves) and self.curves[-1]["epoch"] == epochs_done and float(self.curves[-1]["train_loss"]) <= min(
            float(r["train_loss"]) for r in self.curves
        )
        if lowest:
            self.lowest_epoch = epochs_done
        self.save_checkpoint(epochs_done)
        if self.info.is_main:
            if lowest:
                self.keep_lowest()
            write_curves(self.curves, self.out_dir, stem=self._curves_stem())
        return epochs_done

    def keep_lowest(self) -> None:
        """Make ``checkpoint.lowest-loss.pt`` the checkpoint just written (a hard link: no copy, and no space while
        the two are the same file), when its epoch has the lowest training loss so far.

        The checkpoint itself is replaced after every epoch, so a run stopped by the divergence check (or by hand, after
        it went wrong) would otherwise keep only a state from after the trouble began: this file is the state before
        it, to resume with other settings or to look into with ``opflow scales``. It goes with the checkpoint: removed
        when the run completes or restarts, set aside with it when the run changed. The checkpoint records its epoch
        (``lowest_loss_epoch``)."""
        atomic_link(self.ckpt_path, self.lowest_path)

    def _curves_stem(self) -> str:
        """Where the curves of this run go before it completes: ``curves.*``, or beside the checkpoint
        (:data:`CHECKPOINT_CURVES_STEM`) while the model file of an earlier run is still there
        (``--restart`` over it, or a resume of such a restart), so that the folder never pairs
        ``model.pt`` with curves of another run. The complete run writes ``curves.*``."""
        return CHECKPOINT_CURVES_STEM if self.model_path.exists() else CURVES_STEM

    def save_checkpoint(self, epochs_done: int) -> None:
        """Replace ``checkpoint.pt`` atomically (the RNG states of every process, written by rank 0)."""
        rngs = _gather_rng(self.info)
        if not self.info.is_main:
            return
        atomic_torch_save(
            {
                "format": CHECKPOINT_FORMAT,
                "epoch": epochs_done,
                "model": self.model.state_dict(),
                "optimizer": portable_state_dict(self.optimizer),
                "scheduler": self.scheduler.state_dict(),
                "rng": rngs,
                "loader_generator": self.loader_gen.get_state(),
                "normalizers": self.norms.state_dict(),
                "curves": self.curves,
                "run": self.run,
                "run_hash": self.run["hash"],
                "data_fingerprint": self.fingerprint,
                "train_time_s": self.train_time,
                "world_size": self.info.world_size,
                "lowest_loss_epoch": self.lowest_epoch,
            },
            self.ckpt_path,
        )

    def model_record(self, epochs_done: int) -> ModelRecord:
        """What ``model.pt`` holds after ``epochs_done`` epochs."""
        from opflow.models.base import count_parameters

        dev, curves = self.dev, self.curves
        return ModelRecord(
            dataset=self.run["dataset"],
            model=self.run["model"],
            arch=self.run["model_config"]["arch"],
            model_config=self.model_config,
            model_build=self.build_shape,
            state_dict=self.model.state_dict(),
            normalizers=self.norms.state_dict(),
            task=self.train_ds.info(),
            view=self.view,
            run=self.run,
            run_hash=self.run["hash"],
            data_fingerprint=self.fingerprint,
            train_time_s=self.train_time,
            epochs=epochs_done,
            device=str(dev),
            device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type,
            world_size=self.info.world_size,
            parameters=count_parameters(self.model),
            curves=curves,
            final_train_loss=curves[-1]["train_loss"] if curves else math.nan,
            final_test_rel_l2=curves[-1]["test_rel_l2"] if curves else math.nan,
            created=_utc_now(),
        )

    def save_model(self, epochs_done: int) -> Path:
        """Write ``model.pt`` (a :class:`~opflow.records.ModelRecord`) atomically."""
        return self.model_record(epochs_done).save(self.model_path)
