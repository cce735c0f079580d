"""Evaluation of a trained model: test errors, zero-shot and extra evaluation sets, speed, memory, provenance.

``evaluate(model.pt, data file, results.json, zero_shot=[files...], eval_sets={name: file}, png=...)``
writes one JSON record (atomically; the fields are those of :class:`opflow.records.Results`,
versioned) with:

* the dataset and model names, the view, the full run config and its hash, and the SHA-256 of
  every data file read (test file, zero-shot files, evaluation sets);
* parameter count, epochs, training time and training device (from ``model.pt``);
* relative L2 errors on the test split in physical units (the normalisers are inverted first):
  mean, median, population standard deviation and maximum over test samples of the per-sample
  error over all output channels, and the same per output variable (:mod:`opflow.metrics`);
* view-specific errors. Trajectories under a ``window`` view are rolled out autoregressively
  (:mod:`opflow.data.trajectory`): ``metrics`` is then the full-trajectory error over all
  predicted frames, ``per_step`` the error of each predicted frame, ``frame_groups`` the ONO
  "seen" / "unseen" frames when training used only some of them, and ``teacher_forced`` the
  one-step errors with true input frames (the training task) for every predicted frame;
* the same statistics on the test split of every zero-shot file (same samples at another
  resolution: the workflow passes ``data/<dataset>/r<res>.nc`` for each ``zero_shot`` entry),
  keyed by resolution;
* ``eval_sets``: the same statistics on each extra evaluation set of the dataset
  (``datasets.<name>.eval_sets``), keyed by its name: the test split of a derived dataset, or
  every sample of a generated source without splits (e.g. the Lorenz-63 test trajectories at
  other time steps and on the non-uniform grid, Calvello et al. 2024 Sec. 6.1, whose median and
  worst errors are the published statistics);
* inference time per sample: normalise + forward + decode of one batch already on the device
  (the whole rollout for trajectories), divided by the batch size; the median over the test
  batches after ``warmup_batches`` untimed batches (CUDA synchronised around each batch);
* peak memory of that pass: ``cuda_max_allocated`` on a GPU, ``cpu_peak_rss_delta`` on the CPU
  (the ``kind`` field says which; see :class:`opflow.runtime.PeakMemory`);
* device, package versions and git commit.

Beside it a PNG shows the test samples at the median and the worst error (more quantiles with
``n_plot_samples`` > 2): input, truth, prediction and error on grids; truth / prediction / error
at a few predicted frames for rollouts; time series for series; ``tripcolor`` on meshes
(:mod:`opflow.plots`).

The model is loaded, and its predictions and errors computed, through :mod:`opflow.inference`:
the same code that computes the test curves during training. This module does not import
:mod:`opflow.train`.

Command line (what ``rules/evaluate.smk`` runs)::

    opflow evaluate MODEL --data FILE --out JSON [--png PNG] [--zero-shot FILE...]
        [--eval-set NAME=FILE ...] [--eval-config JSON] [--threads N] [--device D]
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from opflow.config import EvalConfig
from opflow.data.errors import DatasetError
from opflow.data.format import open_dataset
from opflow.data.provenance import git_commit, json_default, package_versions
from opflow.data.torch_data import ArrayDataset, Normalizers, Task, collate, to_device
from opflow.data.views import kind_of, make_dataset
from opflow.inference import batch_squared_sums, load_model, load_normalizers, predict_batch
from opflow.metrics import relative_l2_groups, summary
from opflow.records import Results, file_sha256
from opflow.runtime import PeakMemory, choose_device, flush_cpu_denormals, keep_cpu_heap, set_threads

log = logging.getLogger("opflow.evaluate")

RESULTS_FORMAT = Results.format()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _summ(errors: np.ndarray) -> dict[str, float]:
    return {k: v for k, v in summary(errors).items() if k != "n"}


def _stats(e2: np.ndarray, r2: np.ndarray, ds: ArrayDataset, normalised: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """Statistics over samples of the joint error and of each output variable's error; with
    ``normalised`` (the squared sums in the output normaliser's units) also ``rel_l2_normalised_*``."""
    s = summary(relative_l2_groups(e2, r2))
    out: dict[str, Any] = {f"rel_l2_{k}": v for k, v in s.items() if k != "n"}
    out["n_samples"] = s["n"]
    if normalised is not None:
        out.update({f"rel_l2_normalised_{k}": v for k, v in _summ(relative_l2_groups(*normalised)).items()})
    names = list(ds.task.outputs)
    n_out = len(names)
    # output variable c is every n_out-th channel (rollout targets are step-major)
    out["per_channel"] = {n: _summ(relative_l2_groups(e2, r2, range(c, e2.shape[1], n_out))) for c, n in enumerate(names)}
    return out


@torch.no_grad()
def _run_split(model: torch.nn.Module, ds: ArrayDataset, norms: Normalizers, device: torch.device, batch_size: int, warmup: int) -> dict[str, Any]:
    """Per-sample, per-channel squared sums, per-batch inference times and peak memory over one set."""
    loader = DataLoader(ds, batch_size=batch_size, shuffle=False, collate_fn=collate)
    model.eval()
    for i, batch in enumerate(loader):  # warm-up (kernels, allocator, lazy init), untimed
        if i >= warmup:
            break
        predict_batch(model, to_device(batch, device), norms)
    _sync(device)
    e2s, r2s, n2s, times = [], [], [], []
    encoded = not ds.rollout_steps  # a rollout's channels are steps, not the normaliser's variables
    with PeakMemory(device) as mem:
        for batch in loader:
            b = to_device(batch, device)
            _sync(device)
            t0 = time.perf_counter()
            pred = predict_batch(model, b, norms)
            _sync(device)
            times.append((time.perf_counter() - t0) / b["inputs"].shape[0])
            e2, r2 = batch_squared_sums(pred, b)
            e2s.append(e2.cpu())
            r2s.append(r2.cpu())
            if encoded:  # the same error in the units of the run's output normaliser
                enc = norms.outputs.encode
                n2s.append(tuple(t.cpu() for t in batch_squared_sums(enc(pred, b.get("grid_shape")), {**b, "target": enc(b["target"], b.get("grid_shape"))})))
    e2, r2 = torch.cat(e2s).numpy(), torch.cat(r2s).numpy()
    normalised = (torch.cat([a for a, _ in n2s]).numpy(), torch.cat([c for _, c in n2s]).numpy()) if encoded else None
    return {"e2": e2, "r2": r2, "normalised": normalised, "joint": relative_l2_groups(e2, r2), "times": np.asarray(times), "memory": mem.as_dict()}


def plot_indices(errors: np.ndarray, n: int) -> list[int]:
    """Test samples to draw: error quantiles from the median (0.5) to the worst (1.0), ``n`` of them."""
    if n <= 0 or errors.size == 0:
        return []
    order = np.argsort(errors, kind="stable")
    qs = np.linspace(0.5, 1.0, n) if n >= 2 else [0.5]
    picked: list[int] = []
    for q in qs:
        i = int(order[int(round(q * (errors.size - 1)))])
        if i not in picked:
            picked.append(i)
    return picked


def _resolution_key(ds: ArrayDataset) -> str:
    gs = ds.grid_shape
    if ds.kind in ("series", "mesh"):
        return ds.grid_label()  # type: ignore[attr-defined]
    if gs is None:
        return "points"
    return str(gs[0]) if len(set(gs)) == 1 else "x".join(map(str, gs))


def _has_split(path: str | os.PathLike) -> bool:
    with open_dataset(path) as nc:
        return "split" in nc.variables


def evaluate(
    model_path: str | os.PathLike,
    data_file: str | os.PathLike,
    out_json: str | os.PathLike,
    *,
    zero_shot: Sequence[str | os.PathLike] = (),
    eval_sets: Mapping[str, str | os.PathLike] | None = None,
    png: str | os.PathLike | None = None,
    config: EvalConfig | Mapping[str, Any] | None = None,
    device: str | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Evaluate ``model_path`` on the test split of ``data_file`` (zero-shot files, eval sets); see module doc."""
    cfg = config if isinstance(config, EvalConfig) else EvalConfig.from_dict(config)
    set_threads(threads if threads is not None else cfg.threads)
    dev = choose_device(device or cfg.device)
    if dev.type == "cpu":
        keep_cpu_heap()
        flush_cpu_denormals()
    model, rec = load_model(model_path, dev)
    norms = load_normalizers(rec, dev)
    t = rec.task
    task = Task(tuple(t["inputs"]), tuple(t["outputs"]))
    view = rec.trained_view()
    name = f"{rec.dataset}_{rec.model}"

    files: dict[str, dict[str, Any]] = {}

    def load(path: str | os.PathLike, role: str, split: str | None = "test") -> ArrayDataset:
        ds = make_dataset(path, split, task, view, purpose="rollout")
        if len(ds) == 0:
            raise DatasetError(f"{path}: the {split or 'whole'} set is empty; nothing to evaluate")
        if ds.coord_dim != t["coord_dim"]:
            raise DatasetError(f"{path}: {ds.coord_dim}-D points but {model_path} was trained on {t['coord_dim']}-D points")
        if ds.global_channels != t.get("global_channels", 0):
            raise DatasetError(f"{path}: {ds.global_channels} global input channel(s) but {model_path} was trained with {t.get('global_channels', 0)}")
        sets = [list(s.shape) for s in getattr(ds, "input_sets", ())]
        if sets != [list(x) for x in t.get("input_sets", [])]:
            raise DatasetError(f"{path}: input sets {sets} ([coordinate dim, channels]) but {model_path} was trained with {t.get('input_sets', [])}")
        files[str(path)] = {
            "sha256": file_sha256(path),
            "role": role,
            "grid_shape": list(ds.grid_shape) if ds.grid_shape is not None else None,
            "n_test": len(ds),
            "split": split or "all",
        }
        return ds

    test_ds = load(data_file, "test")
    log.info("%s: evaluating on %d test samples of %s (%s)", name, len(test_ds), data_file, dev)
    main = _run_split(model, test_ds, norms, dev, cfg.batch_size, cfg.warmup_batches)
    metrics = _stats(main["e2"], main["r2"], test_ds, main["normalised"])
    metrics.update(kind_of(test_ds).metrics(main["e2"], main["r2"], test_ds))  # the view kind's own statistics
    if test_ds.rollout_steps:
        # teacher-forced one-step pairs for every predicted frame (also those left out of training)
        tf = make_dataset(data_file, "test", task, {**(view or {}), "train_frames": None}, purpose="train")
        r = _run_split(model, tf, norms, dev, cfg.batch_size, 0)
        metrics["teacher_forced"] = {**{f"rel_l2_{k}": v for k, v in _summ(r["joint"]).items()}, "n_pairs": len(tf)}

    def extra(path: str | os.PathLike, role: str, split: str | None) -> dict[str, Any]:
        ds = load(path, role, split)
        r = _run_split(model, ds, norms, dev, cfg.batch_size, min(cfg.warmup_batches, 1))
        res = {**_stats(r["e2"], r["r2"], ds, r["normalised"]), "file": str(path), "split": split or "all", "discretisation": _resolution_key(ds)}
        res.update(kind_of(ds).metrics(r["e2"], r["r2"], ds))
        return {**res, "peak_memory": r["memory"], "inference_time_per_sample_s": float(np.median(r["times"]))}

    zs: dict[str, Any] = {}
    for f in zero_shot:
        res = extra(f, "zero_shot", "test")
        zs[res["discretisation"]] = res
        log.info("%s: zero-shot at %s: rel L2 mean %.5g", name, res["discretisation"], res["rel_l2_mean"])
    es: dict[str, Any] = {}
    for set_name, f in (eval_sets or {}).items():
        es[set_name] = extra(f, f"eval_set:{set_name}", "test" if _has_split(f) else None)
        log.info("%s: eval set %s (%s): rel L2 median %.5g max %.5g", name, set_name, es[set_name]["discretisation"], es[set_name]["rel_l2_median"], es[set_name]["rel_l2_max"])

    results = Results(
        dataset=rec.dataset,
        model=rec.model,
        arch=rec.arch,
        view=view if view is not None else {"kind": "grid"},
        run=rec.run,
        run_hash=rec.run_hash,
        data_files=files,
        training_data_fingerprint=rec.data_fingerprint,
        parameters=int(rec.parameters),
        epochs=int(rec.epochs),
        train_time_s=float(rec.train_time_s),
        train_device=rec.device,
        train_device_name=rec.device_name,
        train_world_size=rec.world_size,
        final_train_loss=rec.final_train_loss,
        n_test=len(test_ds),
        resolution=_resolution_key(test_ds),
        metrics=metrics,
        zero_shot=zs,
        eval_sets=es,
        inference_time_per_sample_s=float(np.median(main["times"])),
        inference={
            "statistic": "median over test batches of batch time / batch size (normalise + forward + decode, data on device"
            + ("; the whole autoregressive rollout)" if test_ds.rollout_steps else ")"),
            "batch_size": cfg.batch_size,
            "warmup_batches": cfg.warmup_batches,
            "timed_batches": int(main["times"].size),
        },
        peak_memory=main["memory"],
        device=str(dev),
        device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type,
        threads=torch.get_num_threads(),
        versions=package_versions(),
        git_commit=git_commit(),
        created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        plot=str(png) if png is not None else None,
        model_file=str(model_path),
    )
    if png is not None:
        what = "full-trajectory rel. L2" if test_ds.rollout_steps else "test rel. L2"
        _plot(model, test_ds, main["joint"], norms, dev, cfg.n_plot_samples, png, title=f"{name}  {what} mean {metrics['rel_l2_mean']:.4g}")
    out = results.save(out_json, default=json_default)
    log.info("%s: rel L2 mean %.5g median %.5g max %.5g -> %s", name, metrics["rel_l2_mean"], metrics["rel_l2_median"], metrics["rel_l2_max"], out)
    return results.to_dict()


@torch.no_grad()
def _plot(
    model: torch.nn.Module,
    ds: ArrayDataset,
    errors: np.ndarray,
    norms: Normalizers,
    device: torch.device,
    n: int,
    png: str | os.PathLike,
    title: str,
) -> None:
    """Predict the samples :func:`plot_indices` picks and let the dataset's view kind draw them."""
    kind = kind_of(ds)
    idx = plot_indices(errors, n)
    order = np.argsort(errors, kind="stable")
    rank = {int(i): r for r, i in enumerate(order)}
    samples = []
    model.eval()
    for i in idx:
        item = ds[i]
        b = to_device(kind.collate([item]), device)
        pred = predict_batch(model, b, norms)[0].cpu().numpy()
        q = rank[i] / max(1, errors.size - 1)
        what = "worst" if rank[i] == errors.size - 1 else ("median" if rank[i] == int(round(0.5 * (errors.size - 1))) else f"{100 * q:.0f}th pct")
        samples.append({
            "coords": item["coords"].numpy(),
            "inputs": item["inputs"].numpy(),
            "target": item["target"].numpy(),
            "pred": pred,
            "grid_shape": ds.grid_shape,
            "label": f"sample {int(ds.sample_index[i])}: {what}, rel L2 {errors[i]:.3g}",
            "index": i,
        })
    kind.plot(samples, ds, png, title=title)
