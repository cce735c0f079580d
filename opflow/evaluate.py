"""Evaluation of a trained model: test errors, zero-shot resolutions, speed, memory, provenance.

``evaluate(model.pt, data file, results.json, zero_shot=[files...], png=...)`` writes one JSON
record (atomically) with:

* the dataset and model names, the full run config and its hash, and the SHA-256 of every data
  file read (test file and zero-shot files);
* parameter count, epochs, training time and training device (from ``model.pt``);
* relative L2 errors on the test split in physical units (the normalisers are inverted first):
  mean, median, population standard deviation and maximum over test samples of the per-sample
  error over all output channels, and the same per channel (:mod:`opflow.metrics`);
* the same statistics on the test split of every zero-shot file (same samples at another
  resolution: the workflow passes ``data/<dataset>/r<res>.nc`` for each ``zero_shot`` entry),
  keyed by resolution;
* inference time per sample: normalise + forward + decode of one batch already on the device,
  divided by the batch size; the median over the test batches after ``warmup_batches`` untimed
  batches (CUDA synchronised around each batch);
* peak memory of that pass: ``cuda_max_allocated`` on a GPU, ``cpu_peak_rss_delta`` on the CPU
  (the ``kind`` field says which; see :class:`opflow.runtime.PeakMemory`);
* device, package versions and git commit.

Beside it a PNG shows, for the test samples at the median and the worst error (more quantiles
with ``n_plot_samples`` > 2), input, truth, prediction and error.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from opflow.config import EvalConfig
from opflow.data.errors import DatasetError
from opflow.data.normalize import Normalizer, normalizer_from_state
from opflow.data.provenance import git_commit, package_versions
from opflow.data.torch_data import GridDataset, Task, collate, output_mask, to_device
from opflow.metrics import relative_l2, relative_l2_joint, summary
from opflow.runtime import PeakMemory, choose_device, set_threads
from opflow.train import atomic_write_text, file_sha256, forward, load_model

log = logging.getLogger("opflow.evaluate")

RESULTS_FORMAT = "opflow-results/1"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _stats(joint: np.ndarray, per_channel: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    s = summary(joint)
    out: dict[str, Any] = {f"rel_l2_{k}": v for k, v in s.items() if k != "n"}
    out["n_samples"] = s["n"]
    out["per_channel"] = {n: {k: v for k, v in summary(per_channel[:, c]).items() if k != "n"} for c, n in enumerate(names)}
    return out


@torch.no_grad()
def _run_split(
    model: torch.nn.Module,
    ds: GridDataset,
    x_norm: Normalizer,
    y_norm: Normalizer,
    device: torch.device,
    batch_size: int,
    warmup: int,
) -> dict[str, Any]:
    """Per-sample errors, per-batch inference times and peak memory over one test split."""
    loader = DataLoader(ds, batch_size=batch_size, shuffle=False, collate_fn=collate)
    model.eval()
    for i, batch in enumerate(loader):  # warm-up (kernels, allocator, lazy init), untimed
        if i >= warmup:
            break
        forward(model, to_device(batch, device), x_norm, y_norm)
    _sync(device)
    joint, per, times = [], [], []
    with PeakMemory(device) as mem:
        for batch in loader:
            b = to_device(batch, device)
            _sync(device)
            t0 = time.perf_counter()
            pred = y_norm.decode(forward(model, b, x_norm, y_norm), b.get("grid_shape"))
            _sync(device)
            times.append((time.perf_counter() - t0) / b["inputs"].shape[0])
            m = output_mask(b)
            joint.append(relative_l2_joint(pred.double(), b["target"].double(), m).cpu())
            per.append(relative_l2(pred.double(), b["target"].double(), m).cpu())
    return {
        "joint": torch.cat(joint).numpy(),
        "per_channel": torch.cat(per).numpy(),
        "times": np.asarray(times),
        "memory": mem.as_dict(),
    }


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


def _resolution_key(ds: GridDataset) -> str:
    gs = ds.grid_shape
    return str(gs[0]) if len(set(gs)) == 1 else "x".join(map(str, gs))


def evaluate(
    model_path: str | os.PathLike,
    data_file: str | os.PathLike,
    out_json: str | os.PathLike,
    *,
    zero_shot: Sequence[str | os.PathLike] = (),
    png: str | os.PathLike | None = None,
    config: EvalConfig | Mapping[str, Any] | None = None,
    device: str | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Evaluate ``model_path`` on the test split of ``data_file`` (and zero-shot files); see module doc."""
    cfg = config if isinstance(config, EvalConfig) else EvalConfig.from_dict(config)
    set_threads(threads if threads is not None else cfg.threads)
    dev = choose_device(device or cfg.device)
    model, rec = load_model(model_path, dev)
    x_norm = normalizer_from_state(rec["normalizers"]["inputs"]).to(dev)
    y_norm = normalizer_from_state(rec["normalizers"]["outputs"]).to(dev)
    t = rec["task"]
    task = Task(tuple(t["inputs"]), tuple(t["outputs"]))
    name = f"{rec['dataset']}_{rec['model']}"

    files: dict[str, dict[str, Any]] = {}

    def load(path: str | os.PathLike, role: str) -> GridDataset:
        ds = GridDataset(path, "test", task)
        if len(ds) == 0:
            raise DatasetError(f"{path}: the test split is empty; nothing to evaluate")
        if ds.coord_dim != t["coord_dim"]:
            raise DatasetError(f"{path}: {ds.coord_dim}-D points but {model_path} was trained on {t['coord_dim']}-D points")
        files[str(path)] = {"sha256": file_sha256(path), "role": role, "grid_shape": list(ds.grid_shape), "n_test": len(ds)}
        return ds

    test_ds = load(data_file, "test")
    log.info("%s: evaluating on %d test samples of %s (%s)", name, len(test_ds), data_file, dev)
    main = _run_split(model, test_ds, x_norm, y_norm, dev, cfg.batch_size, cfg.warmup_batches)
    metrics = _stats(main["joint"], main["per_channel"], task.outputs)

    zs: dict[str, Any] = {}
    for f in zero_shot:
        ds = load(f, "zero_shot")
        r = _run_split(model, ds, x_norm, y_norm, dev, cfg.batch_size, min(cfg.warmup_batches, 1))
        key = _resolution_key(ds)
        zs[key] = {**_stats(r["joint"], r["per_channel"], task.outputs), "file": str(f), "peak_memory": r["memory"], "inference_time_per_sample_s": float(np.median(r["times"]))}
        log.info("%s: zero-shot at %s: rel L2 mean %.5g", name, key, zs[key]["rel_l2_mean"])

    result: dict[str, Any] = {
        "format": RESULTS_FORMAT,
        "dataset": rec["dataset"],
        "model": rec["model"],
        "arch": rec["arch"],
        "run": rec["run"],
        "run_hash": rec["run_hash"],
        "data_files": files,
        "training_data_fingerprint": rec.get("data_fingerprint"),
        "parameters": int(rec["parameters"]),
        "epochs": int(rec["epochs"]),
        "train_time_s": float(rec["train_time_s"]),
        "train_device": rec.get("device"),
        "train_device_name": rec.get("device_name"),
        "train_world_size": rec.get("world_size", 1),
        "final_train_loss": rec.get("final_train_loss"),
        "n_test": len(test_ds),
        "resolution": _resolution_key(test_ds),
        "metrics": metrics,
        "zero_shot": zs,
        "inference_time_per_sample_s": float(np.median(main["times"])),
        "inference": {
            "statistic": "median over test batches of batch time / batch size (normalise + forward + decode, data on device)",
            "batch_size": cfg.batch_size,
            "warmup_batches": cfg.warmup_batches,
            "timed_batches": int(main["times"].size),
        },
        "peak_memory": main["memory"],
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type,
        "threads": torch.get_num_threads(),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "plot": str(png) if png is not None else None,
        "model_file": str(model_path),
    }
    if png is not None:
        _plot(model, test_ds, main["joint"], x_norm, y_norm, dev, cfg.n_plot_samples, png, title=f"{name}  test rel. L2 mean {metrics['rel_l2_mean']:.4g}")
    out = Path(out_json)
    atomic_write_text(out, json.dumps(result, indent=1, default=_json_default))
    log.info("%s: rel L2 mean %.5g median %.5g max %.5g -> %s", name, metrics["rel_l2_mean"], metrics["rel_l2_median"], metrics["rel_l2_max"], out)
    return result


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot serialise {type(o).__name__}")


@torch.no_grad()
def _plot(
    model: torch.nn.Module,
    ds: GridDataset,
    errors: np.ndarray,
    x_norm: Normalizer,
    y_norm: Normalizer,
    device: torch.device,
    n: int,
    png: str | os.PathLike,
    title: str,
) -> None:
    from opflow.plots import plot_predictions

    idx = plot_indices(errors, n)
    order = np.argsort(errors, kind="stable")
    rank = {int(i): r for r, i in enumerate(order)}
    samples = []
    if idx:
        b = to_device(collate([ds[i] for i in idx]), device)
        pred = y_norm.decode(forward(model, b, x_norm, y_norm), b.get("grid_shape")).cpu().numpy()
        for j, i in enumerate(idx):
            q = rank[i] / max(1, errors.size - 1)
            what = "worst" if rank[i] == errors.size - 1 else ("median" if rank[i] == int(round(0.5 * (errors.size - 1))) else f"{100 * q:.0f}th pct")
            samples.append(
                {
                    "coords": ds.coords.numpy(),
                    "inputs": ds.inputs[i].numpy(),
                    "target": ds.target[i].numpy(),
                    "pred": pred[j],
                    "grid_shape": ds.grid_shape,
                    "label": f"sample {int(ds.sample_index[i])}: {what}, rel L2 {errors[i]:.3g}",
                }
            )
    plot_predictions(samples, png, input_name=ds.task.inputs[0], output_name=ds.task.outputs[0], title=title)
