"""Training of a neural operator on one dataset file: plain PyTorch, resumable, optionally DDP.

One run = one resolved run config (:func:`opflow.config.resolve_run`) + one dataset file. Per step:

1. encode the inputs (and the per-sample ``globals``) with their normalisers, fitted on the
   training split only (:meth:`opflow.data.torch_data.ArrayDataset.fit_normalizers`);
2. forward ``model(coords, inputs, query, mask, grid_shape)`` (bf16 autocast on CUDA if asked);
   a model with ``accepts_globals = True`` also gets ``globals=`` (B, g) and, when its
   constructor takes ``global_channels``, is built with ``global_channels = g`` of the data (a
   configured value must agree); any other model gets the normalised globals broadcast to every
   point as extra input channels (:func:`model_inputs`);
3. loss (``rel_l2`` by default, see :mod:`opflow.metrics`) between the decoded prediction and the
   target in physical units (``loss_space: physical``), or between the raw prediction and the
   encoded target (``normalized``: what the ONO authors' released Darcy script does);
4. backward of the batch sum (``loss_reduction: sum``, the ONO code) or mean of the per-sample
   losses, clipping of the global gradient norm at ``grad_clip``, AdamW step, then one OneCycle
   scheduler step (the schedule spans ``epochs x batches per epoch`` steps). The curves report
   the mean per-sample loss either way.

The data come from :func:`opflow.data.views.make_dataset` with the run's ``task`` and ``view``:
the training split as the view's training items (teacher-forced pairs for ``window`` views), the
test split for the curves as the view's test items (whole trajectories rolled out autoregressively
for ``window`` views: :func:`predict_batch`).

Every ``checkpoint_every`` epochs (default 1) ``checkpoint.pt`` in the output folder is replaced
atomically (temporary file + rename). It holds the model, optimizer and scheduler states, the RNG
states of every process, the normalisers, the curves, the run config with its hash and the data
file's fingerprint. A new call with the same run hash and data resumes from it and, on the CPU
with fixed seeds, ends with weights equal bit for bit to those of an uninterrupted run; another
hash or data file is refused with the differing keys named (``restart=True`` discards the old
checkpoint; ``restart_if_changed=True`` discards it only when it does not match, as the workflow
does: Snakemake reruns a training job only when its config, code or data changed). When training
completes, ``model.pt`` (everything evaluation needs) is written atomically and the checkpoint is
removed, so a later rerun trains from scratch.

Distributed data parallel: launched by ``torchrun --nproc_per_node P``, each process takes
``batch_size / P`` samples of every global batch (see :mod:`opflow.data.torch_data`), gradients
are averaged by DDP, and only rank 0 evaluates the curves and writes files.

Curves: ``curves.csv`` / ``curves.json`` (epoch, train loss, test relative L2 every
``eval_every`` epochs, learning rate of the epoch's last step, epoch time, elapsed training time)
and ``curves.png`` beside the model.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from opflow.atomic import atomic_path, atomic_write_text
from opflow.config import TrainConfig, diff_keys, run_hash, run_identity
from opflow.data.errors import ConfigError
from opflow.data.format import open_dataset
from opflow.data.torch_data import ArrayDataset, Normalizers, make_loader, output_mask, to_device
from opflow.data.trajectory import rollout
from opflow.data.views import make_dataset
from opflow.metrics import relative_l2, relative_l2_joint, training_loss
from opflow.runtime import (
    DistInfo,
    barrier,
    init_distributed,
    rng_state,
    seed_everything,
    set_rng_state,
    set_threads,
    shutdown_distributed,
    warn_ignored,
)

log = logging.getLogger("opflow.train")

CHECKPOINT_FORMAT = "opflow-checkpoint/1"
MODEL_FORMAT = "opflow-model/1"
CHECKPOINT_NAME = "checkpoint.pt"


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


# --------------------------------------------------------------------------- files


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def data_fingerprint(path: str | os.PathLike) -> dict[str, Any]:
    """What identifies a dataset file's content cheaply: its provenance attributes.

    Derived files carry the source's parameter hash, the stride/resolution and the split rule; a
    file without them is identified by its SHA-256.
    """
    keys = ("opflow_params_hash", "opflow_source_params_hash", "opflow_stride", "opflow_resolution", "opflow_split_rule", "opflow_dataset")
    with open_dataset(path) as nc:
        attrs = {k[7:]: _plain(nc.getncattr(k)) for k in keys if k in nc.ncattrs()}
    if "params_hash" not in attrs:
        attrs = {"sha256": file_sha256(path)}
    return attrs


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary name (:mod:`opflow.atomic`): never a partial file."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def write_curves(curves: list[dict[str, Any]], folder: Path, png: bool = False, title: str = "") -> None:
    """``curves.json`` and ``curves.csv`` (and ``curves.png``) in ``folder``."""
    atomic_write_text(folder / "curves.json", json.dumps(curves, indent=1))
    fields = ["epoch", "train_loss", "test_rel_l2", "lr", "epoch_time_s", "elapsed_s"]
    with atomic_path(folder / "curves.csv") as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for c in curves:
            w.writerow({k: ("" if c.get(k) is None else c.get(k)) for k in fields})
    if png and curves:
        from opflow.plots import plot_curves

        plot_curves(curves, folder / "curves.png", title=title)


# --------------------------------------------------------------------------- forward


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP / torch.compile wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module):
            return model
        model = inner


def accepts_globals(model: torch.nn.Module) -> bool:
    return bool(getattr(_unwrap(model), "accepts_globals", False))


def model_inputs(model: torch.nn.Module, batch: Mapping[str, Any], norms: Normalizers) -> tuple[torch.Tensor, dict[str, Any]]:
    """Encoded input features and extra forward keywords: the globals, passed or broadcast."""
    gs = batch.get("grid_shape")
    x = norms.inputs.encode(batch["inputs"], gs)
    g = batch.get("globals")
    if g is None:
        return x, {}
    g = norms.globals.encode(g[:, None, :])[:, 0]
    if accepts_globals(model):
        return x, {"globals": g}
    return torch.cat([x, g[:, None, :].expand(-1, x.shape[1], -1).to(x.dtype)], -1), {}


def forward(model: torch.nn.Module, batch: Mapping[str, Any], norms: Normalizers, *, autocast: bool = False) -> torch.Tensor:
    """Model output in normalised units for a batch already on the model's device."""
    x, extra = model_inputs(model, batch, norms)
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:
        out = model(batch["coords"], x, query=batch.get("query"), mask=batch.get("mask"), grid_shape=batch.get("grid_shape"), **extra)
    return out.float()


def predict_batch(model: torch.nn.Module, batch: Mapping[str, Any], norms: Normalizers, *, autocast: bool = False) -> torch.Tensor:
    """Prediction in physical units: one forward pass, or a rollout when the batch asks for one."""
    gs = batch.get("grid_shape")

    def step(b: Mapping[str, Any]) -> torch.Tensor:
        return norms.outputs.decode(forward(model, b, norms, autocast=autocast), gs)

    steps = int(batch.get("rollout_steps") or 0)
    if not steps:
        return step(batch)
    n_fields = batch["target"].shape[-1] // steps
    return rollout(step, batch, steps, n_fields)


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    loader: Any,
    norms: Normalizers,
    device: torch.device,
    *,
    autocast: bool = False,
) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
    """Yield ``(batch on device, prediction in physical units)`` over a loader, model in eval mode."""
    was_training = model.training
    model.eval()
    try:
        for batch in loader:
            b = to_device(batch, device)
            yield b, predict_batch(model, b, norms, autocast=autocast)
    finally:
        model.train(was_training)


def test_errors(model: torch.nn.Module, loader: Any, norms: Normalizers, device: torch.device, *, autocast: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample relative L2 over all channels (S,) and per channel (S, C), physical units.

    For rollouts the channels are the predicted steps: per-step errors, and the joint error is the
    full-trajectory error.
    """
    joint, per = [], []
    for b, pred in predict(model, loader, norms, device, autocast=autocast):
        m = output_mask(b)
        joint.append(relative_l2_joint(pred.double(), b["target"].double(), m).cpu())
        per.append(relative_l2(pred.double(), b["target"].double(), m).cpu())
    return torch.cat(joint), torch.cat(per)


def build_for_data(model_config: Mapping[str, Any], ds: ArrayDataset, where: str) -> tuple[Any, dict[str, Any], dict[str, int]]:
    """Build the model for dataset ``ds``: ``(model, effective model config, build shape)``.

    Globals (module docstring): a model accepting them gets ``global_channels`` set from the data
    when its constructor has that hyperparameter; otherwise they widen its input channels.
    """
    import inspect

    from opflow.models.base import build_model, model_class

    cfg = dict(model_config)
    cls = model_class(cfg["arch"])
    g = ds.global_channels
    takes = getattr(cls, "accepts_globals", False)
    if takes and "global_channels" in inspect.signature(cls.__init__).parameters:
        if "global_channels" in cfg and int(cfg["global_channels"]) != g:
            raise ConfigError(
                f"{where}.global_channels: {cfg['global_channels']} but the data have {g} global input channel(s) "
                f"({list(ds.global_names)}); remove global_channels from the model config (it is set from the data)"
            )
        cfg["global_channels"] = g
    shape = {"in_channels": ds.in_channels + (0 if takes else g), "out_channels": ds.out_channels, "coord_dim": ds.coord_dim}
    return build_model(cfg, shape["in_channels"], shape["out_channels"], shape["coord_dim"], where=where), cfg, shape


# --------------------------------------------------------------------------- training


def _load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a foreign or damaged file: say so, do not guess
        raise RunMismatchError(f"{path}: cannot read the checkpoint ({e}); delete it or rerun with --restart") from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        raise RunMismatchError(f"{path}: not an opflow checkpoint ({CHECKPOINT_FORMAT}); delete it or rerun with --restart")
    return ck


def _mismatch(ck: Mapping[str, Any], run: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> list[str]:
    problems = []
    if ck.get("run_hash") != run_hash(run):
        problems += diff_keys(run_identity(ck["run"]), run_identity(run)) or [f"run hash {ck.get('run_hash')} -> {run_hash(run)}"]
    if dict(ck.get("data_fingerprint", {})) != dict(fingerprint):
        problems += [f"data file {k}" for k in diff_keys(ck.get("data_fingerprint", {}), fingerprint)]
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


def _progress_default(info: DistInfo) -> bool:
    return info.is_main and sys.stderr.isatty()


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
    threads: int | None = None,
    device: str | None = None,
) -> TrainResult:
    """Train (or resume) the run ``run`` on ``data_file``; files go to ``out_dir`` (module doc).

    ``output`` is the final model file (default ``out_dir/model.pt``). ``max_epochs_this_call``
    stops after that many epochs of this call, leaving a checkpoint to resume from. ``device``
    overrides ``training.device``; ``threads`` overrides ``training.threads``.
    """
    cfg = TrainConfig.from_dict(run["training"], "run.training")
    if device is not None:
        cfg = dataclasses.replace(cfg, device=device)
    set_threads(threads if threads is not None else cfg.threads)
    info, dev = init_distributed(cfg.device)
    try:
        return _train(run, cfg, info, dev, Path(data_file), Path(out_dir), output, restart, restart_if_changed, progress, max_epochs_this_call)
    finally:
        shutdown_distributed(info)


def _train(
    run: Mapping[str, Any],
    cfg: TrainConfig,
    info: DistInfo,
    dev: torch.device,
    data_file: Path,
    out_dir: Path,
    output: str | os.PathLike | None,
    restart: bool,
    restart_if_changed: bool,
    progress: bool | None,
    max_epochs_this_call: int | None,
) -> TrainResult:
    from tqdm.auto import tqdm

    from opflow.models.base import count_parameters

    cfg.check_world_size(info.world_size)
    local_batch = cfg.batch_size // info.world_size
    autocast = cfg.precision == "bf16"
    if autocast and dev.type != "cuda":
        warn_ignored("precision bf16 (autocast)", dev)
        autocast = False
    use_compile = cfg.compile
    if use_compile and dev.type != "cuda":
        warn_ignored("compile (torch.compile)", dev)
        use_compile = False
    progress = _progress_default(info) if progress is None else (progress and info.is_main)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / CHECKPOINT_NAME
    model_path = Path(output) if output is not None else out_dir / "model.pt"
    run = dict(run)
    run["hash"] = run_hash(run)
    fingerprint = data_fingerprint(data_file)
    name = f"{run['dataset']}_{run['model']}"

    # data and normalisers (training split only)
    view = run.get("view")
    train_ds = make_dataset(data_file, "train", run.get("task"), view, purpose="train")
    test_ds = make_dataset(data_file, "test", train_ds.task, view, purpose="rollout")
    norms = train_ds.fit_normalizers(cfg.input_normalizer, cfg.output_normalizer)

    # model, optimiser, schedule (seeded: identical initial weights on every process)
    seed_everything(cfg.seed)
    model, model_config, build_shape = build_for_data(run["model_config"], train_ds, where=f"models.{run['model']}")
    model.to(dev)
    loader, sampler, loader_gen = make_loader(
        train_ds, local_batch, shuffle=True, seed=cfg.seed, rank=info.rank, world_size=info.world_size,
        num_workers=cfg.num_workers, pin_memory=dev.type == "cuda",
    )
    test_loader, _, _ = make_loader(test_ds, local_batch, shuffle=False, num_workers=0)
    steps_per_epoch = len(loader)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=cfg.lr, total_steps=cfg.epochs * steps_per_epoch,
        pct_start=cfg.pct_start, div_factor=cfg.div_factor, final_div_factor=cfg.final_div_factor,
    )
    if info.distributed and info.rank:  # different dropout streams per process, same initial weights
        torch.manual_seed(cfg.seed + 1_000_003 * info.rank)

    # resume
    start_epoch, curves, train_time = 0, [], 0.0
    if ckpt_path.exists():
        if restart:
            log.info("%s: --restart: discarding %s", name, ckpt_path)
            ck = None
        else:
            ck = _load_checkpoint(ckpt_path)
            problems = _mismatch(ck, run, fingerprint)
            if problems:
                if not restart_if_changed:
                    raise RunMismatchError(
                        f"{ckpt_path} belongs to another run; differing: {'; '.join(problems)}. "
                        "Rerun with --restart to discard it and train from scratch"
                    )
                log.warning("%s: checkpoint does not match this run (%s); training from scratch", name, "; ".join(problems))
                ck = None
        barrier(info)
        if ck is None:
            if info.is_main:
                ckpt_path.unlink(missing_ok=True)
        else:
            model.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            scheduler.load_state_dict(ck["scheduler"])
            norms = Normalizers.from_state(ck["normalizers"])
            rngs = ck["rng"]
            if len(rngs) == info.world_size:
                set_rng_state(rngs[info.rank])
            else:
                log.warning("%s: checkpoint written by %d process(es), resuming on %d: RNG streams restart", name, len(rngs), info.world_size)
                if info.rank == 0:
                    set_rng_state(rngs[0])
                else:
                    torch.manual_seed(cfg.seed + 1_000_003 * info.rank)
            loader_gen.set_state(ck["loader_generator"])
            start_epoch, curves, train_time = int(ck["epoch"]), list(ck["curves"]), float(ck["train_time_s"])
            log.info("%s: resuming after epoch %d of %d from %s", name, start_epoch, cfg.epochs, ckpt_path)
        barrier(info)
    norms.to(dev)

    fwd_model: torch.nn.Module = model
    if info.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        fwd_model = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    if use_compile:
        fwd_model = torch.compile(fwd_model)  # type: ignore[assignment]

    def save_checkpoint(epochs_done: int) -> None:
        rngs = _gather_rng(info)
        if not info.is_main:
            return
        atomic_torch_save(
            {
                "format": CHECKPOINT_FORMAT,
                "epoch": epochs_done,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rngs,
                "loader_generator": loader_gen.get_state(),
                "normalizers": norms.state_dict(),
                "curves": curves,
                "run": run,
                "run_hash": run["hash"],
                "data_fingerprint": fingerprint,
                "train_time_s": train_time,
                "world_size": info.world_size,
            },
            ckpt_path,
        )

    resumed_from = start_epoch
    stop_at = cfg.epochs if max_epochs_this_call is None else min(cfg.epochs, start_epoch + max(0, max_epochs_this_call))
    if info.is_main:
        log.info(
            "%s: %d parameters, %d train / %d test samples, %s on %s x %d, epochs %d..%d of %d",
            name, count_parameters(model), len(train_ds), len(test_ds), cfg.loss, dev, info.world_size, start_epoch + 1, stop_at, cfg.epochs,
        )
    for epoch in range(start_epoch, stop_at):
        t0 = time.perf_counter()
        sampler.set_epoch(epoch)
        fwd_model.train()
        acc = torch.zeros(2, dtype=torch.float64, device=dev)  # (sum of per-sample losses, samples)
        lr_used = optimizer.param_groups[0]["lr"]
        bar = tqdm(loader, desc=f"{name} epoch {epoch + 1}/{cfg.epochs}", leave=False, disable=not progress, unit="batch")
        for batch in bar:
            b = to_device(batch, dev)
            gs = b.get("grid_shape")
            out = forward(fwd_model, b, norms, autocast=autocast)
            if cfg.loss_space == "physical":
                pred, target = norms.outputs.decode(out, gs), b["target"]
            else:
                pred, target = out, norms.outputs.encode(b["target"], gs)
            loss = training_loss(cfg.loss, pred, target, mask=output_mask(b), coords=b.get("query", b["coords"]), grid_shape=gs)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"{name}: loss became {loss.item()} in epoch {epoch + 1}; lower training.lr or check the data")
            n = b["inputs"].shape[0]
            optimizer.zero_grad(set_to_none=True)
            # "sum": gradient of the global batch sum of per-sample losses (DDP averages over ranks)
            (loss * (n * info.world_size) if cfg.loss_reduction == "sum" else loss).backward()
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            lr_used = optimizer.param_groups[0]["lr"]
            scheduler.step()
            acc += torch.stack([loss.detach().double() * n, torch.tensor(float(n), dtype=torch.float64, device=dev)])
            if progress:
                bar.set_postfix(loss=f"{loss.item():.4g}", refresh=False)
        acc = _all_sum(acc, info)
        train_loss = float(acc[0] / acc[1])
        test_rel = None
        last = epoch + 1 == cfg.epochs
        if info.is_main and ((epoch + 1) % cfg.eval_every == 0 or last):
            test_rel = float(test_errors(model, test_loader, norms, dev, autocast=autocast)[0].mean())
        dt = time.perf_counter() - t0
        train_time += dt
        curves.append(
            {"epoch": epoch + 1, "train_loss": train_loss, "test_rel_l2": test_rel, "lr": float(lr_used), "epoch_time_s": dt, "elapsed_s": train_time}
        )
        if info.is_main:
            log.info(
                "%s epoch %d/%d  train %s %.5g  test rel L2 %s  lr %.3g  %.1fs",
                name, epoch + 1, cfg.epochs, cfg.loss, train_loss, "-" if test_rel is None else f"{test_rel:.5g}", curves[-1]["lr"], dt,
            )
        if (epoch + 1) % cfg.checkpoint_every == 0 or epoch + 1 == stop_at:
            save_checkpoint(epoch + 1)
            if info.is_main:
                write_curves(curves, out_dir)
        barrier(info)

    epochs_done = stop_at
    complete = epochs_done >= cfg.epochs
    if info.is_main:
        write_curves(curves, out_dir, png=True, title=name)
        if complete:
            atomic_torch_save(
                {
                    "format": MODEL_FORMAT,
                    "dataset": run["dataset"],
                    "model": run["model"],
                    "model_config": model_config,
                    "model_build": build_shape,
                    "arch": run["model_config"]["arch"],
                    "state_dict": model.state_dict(),
                    "normalizers": norms.state_dict(),
                    "task": train_ds.info(),
                    "view": view,
                    "run": run,
                    "run_hash": run["hash"],
                    "data_fingerprint": fingerprint,
                    "train_time_s": train_time,
                    "epochs": epochs_done,
                    "device": str(dev),
                    "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type,
                    "world_size": info.world_size,
                    "parameters": count_parameters(model),
                    "curves": curves,
                    "final_train_loss": curves[-1]["train_loss"] if curves else math.nan,
                    "final_test_rel_l2": curves[-1]["test_rel_l2"] if curves else math.nan,
                    "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                },
                model_path,
            )
            ckpt_path.unlink(missing_ok=True)
            log.info("%s: wrote %s (%.1f s of training)", name, model_path, train_time)
    barrier(info)
    return TrainResult(complete, epochs_done, model_path if complete else None, ckpt_path, curves, train_time, resumed_from)


def load_model(path: str | os.PathLike, device: torch.device | str = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild a trained model from ``model.pt``: ``(model in eval mode, the saved record)``."""
    from opflow.data.errors import DatasetError
    from opflow.models.base import build_model

    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such model file; train it first (snakemake {path})")
    rec = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(rec, dict) or rec.get("format") != MODEL_FORMAT:
        raise DatasetError(f"{path}: not an opflow model file ({MODEL_FORMAT}); retrain it")
    t = rec.get("model_build") or rec["task"]
    model = build_model(rec["model_config"], t["in_channels"], t["out_channels"], t["coord_dim"], where=f"models.{rec['model']}")
    model.load_state_dict(rec["state_dict"])
    model.to(device).eval()
    return model, rec
