"""Per-epoch wall time of the real opflow Trainer (ONO on Darcy by default), per precision / compile / data placement.

    python -m benchmarks.train_speed [--data FILE] [--configfile config/default.yaml ...]
                                     [--dataset darcy] [--model ono] [--device auto|cpu|cuda]
                                     [--epochs 3] [--variants all] [--threads N]
                                     [--train-samples N] [--test-samples N] [--out ...] [--smoke]

What is timed. The run config of ``--dataset`` / ``--model`` resolved from the config files exactly as
``opflow train --config ... --dataset ... --model ...`` resolves it (:func:`opflow.config.resolve_run`;
default ``config/default.yaml``: the ``ono`` model, the paper's Darcy set at 85 x 85 with 1000 training
and 200 test samples, batch 8, AdamW, OneCycle, relative L2, clipping 0.1, the test error every
epoch) is trained by :class:`opflow.train.Trainer` itself: :meth:`~opflow.train.Trainer.setup`, then
:meth:`~opflow.train.Trainer.epoch` ``--epochs`` times (K, default 3; 2 on a CPU), each timed as a whole (a CUDA
synchronise before and after). The first epoch is the warm-up (and, with ``compile``, the
``torch.compile`` time) and is reported apart (``first_epoch_s``); the median of epochs 2..K is the
epoch time. An epoch is what a training run spends on it: the pass over the training split and,
when ``training.eval_every`` says so (every epoch in the paper profile), the test error; that test
evaluation is also timed alone after the epochs (``test_eval_s``, median of two) so that
``train_pass_s = epoch_s - test_eval_s`` estimates the pass alone.

``training.epochs`` is set to K, so the OneCycle schedule spans the measured epochs and the last one
computes the test error: the final training loss and test relative L2 of every variant (same seed,
same initial weights, same shuffling) show a gross accuracy break of bf16 or compile; they are no
accuracy result (K epochs, not 500).

Variants (``--variants``, comma-separated, default ``all``): ``precision`` fp32 / bf16 (autocast),
``compile`` (``torch.compile`` of the model) and ``ondevice`` (``training.data_on_device: true``,
the dataset kept on the device instead of a per-step DataLoader; without the token the variant sets
``false``). Names join the tokens with ``+``: ``fp32``, ``bf16+compile``, ``fp32+ondevice``, ...
``all`` = the eight combinations. bf16, tf32 and graphs need CUDA (the Trainer ignores them elsewhere):
on a CPU they are skipped, with the reason in ``skipped_variants``; compile runs on CUDA and on a CPU
(with a C++ compiler, else the Trainer runs the plain step: ``effective.compile`` says which). Where this opflow's
:class:`~opflow.config.TrainConfig` has no ``data_on_device`` key, the ``ondevice`` variants are
skipped with a note and the others leave the key out.

Data: ``--data FILE`` (a Darcy file made by the workflow, e.g. ``data/darcy/r85.nc``), or without it
a synthetic file in the project's format (:func:`opflow.data.format.write_dataset`) in a temporary
folder with the dataset's resolution and split sizes (``datasets.<name>`` of the config), a
piecewise-constant coefficient (3 / 12) and a smooth pressure-like output that depends on it:
right shapes and a learnable target, not a Darcy solution (timing only). On a CPU the synthetic
file has :data:`CPU_DATA` samples (``--train-samples`` / ``--test-samples`` change either; an ONO
epoch of the paper's 1000 samples would take hours there) and the default is 2 epochs: compare
samples/s there, not epoch times.

Peak memory per variant from before :meth:`setup` (data, model, optimiser, activations): on CUDA
``torch.cuda.max_memory_allocated`` (reset first), on a CPU the peak resident set growth
(:class:`benchmarks.models.PeakMemory`; the method is recorded), which leaves out memory the
allocator still held from an earlier variant (the first variant also pays for imports): on a CPU
compare it between variants with care.

``--smoke``: a tiny synthetic file (8 + 4 samples at 11 x 11), a one-layer ONO of width 16, 2 epochs,
one thread, on the CPU (``--smoke --device cuda``: every variant on the GPU, a check of the code
paths before a measurement); seconds, no claim about timings. Writes ``benchmarks/results/train_speed_<device>.json``
(``cpu`` or ``cuda``), after every variant (an interrupted run keeps the variants it finished).
"""

from __future__ import annotations

import argparse
import copy
import gc
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import VARIANT_TOKENS as TOKENS
from benchmarks.common import loadavg, machine, parse_variant, summary, utc_timestamp, versions, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = "benchmarks/results/train_speed_{device}.json"
DEFAULT_STEP_OUT = "benchmarks/results/train_step_{device}.json"

#: the issue's target for ONO on the paper's Darcy set: 500 epochs in 20 minutes
TARGET_EPOCH_S = 2.4

#: the variants of ``--variants all``, in the order they run (the fp32 DataLoader baseline first)
ALL_VARIANTS = tuple(
    "+".join([p, *(["compile"] if c else []), *(["ondevice"] if d else [])])
    for d, c, p in itertools.product((False, True), (False, True), ("fp32", "bf16"))
)

#: the synthetic split of a full run on a CPU (the paper's 1000 samples at 85 x 85 take hours per ONO epoch there)
CPU_DATA = {"train": 8, "test": 4}
#: the smoke run: a tiny file, a tiny ONO, two epochs
SMOKE_DATA = {"train": 8, "test": 4, "resolution": 11}
SMOKE_MODEL = {"width": 16, "n_layers": 1, "n_heads": 2, "ortho_dim": 4, "num_landmarks": 8}
SMOKE_TRAINING = {"batch_size": 4}


# --------------------------------------------------------------------------- variants


def variant_name(v: Mapping[str, Any]) -> str:
    """The canonical name of a parsed variant (precision first)."""
    return "+".join([
        v["precision"], *(["compile"] if v["compile"] else []), *(["ondevice"] if v["data_on_device"] else []),
        *(["graphs"] if v.get("cuda_graphs") else []),
    ])


def parse_variants(text: str) -> list[str]:
    """Canonical names of ``--variants`` (``all`` = :data:`ALL_VARIANTS`), duplicates dropped, order kept."""
    names = list(ALL_VARIANTS) if text.strip() == "all" else [variant_name(parse_variant(t)) for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError("--variants: empty; give e.g. fp32,bf16+compile or all")
    return list(dict.fromkeys(names))


def data_on_device_supported() -> bool:
    """Whether this opflow's ``TrainConfig`` has the ``training.data_on_device`` key."""
    from opflow.config import TrainConfig

    return "data_on_device" in TrainConfig.model_fields


def _on_device_value(flag: bool) -> Any:
    """The value of ``data_on_device`` that ``TrainConfig`` accepts for ``flag`` (a bool, or "true" / "false")."""
    from opflow.config import TrainConfig

    for value in (flag, str(flag).lower()):
        try:
            TrainConfig.from_dict({"data_on_device": value}, "training")
            return value
        except Exception:  # the next spelling
            continue
    raise ValueError(f"training.data_on_device accepts neither {flag!r} nor {str(flag).lower()!r}")


def skip_reason(v: Mapping[str, Any], device_type: str, has_on_device: bool, *, smoke: bool = False) -> str | None:
    """Why variant ``v`` cannot run here (None: it can)."""
    if v["data_on_device"] and not has_on_device:
        return "this opflow's TrainConfig has no data_on_device key (training.data_on_device): nothing to switch"
    if device_type != "cuda":
        need = [k for k, on in (
            ("bf16 autocast", v["precision"] == "bf16"), ("TF32 products", v["precision"] == "tf32"),
            ("torch.compile", v["compile"] and device_type != "cpu"), ("CUDA graphs", v.get("cuda_graphs")),
        ) if on]
        if need:
            return f"{' and '.join(need)} need(s) CUDA (the Trainer ignores it on {device_type})"
        if v["compile"]:
            import torch

            from opflow.runtime import compile_unsupported

            why = compile_unsupported(torch.device(device_type))
            if why is not None:
                return why
            if smoke:
                return "a smoke run on the CPU does not compile (inductor's C++ build takes longer than the toy training; tests/opflow/test_train.py compiles on the CPU)"
    return None


# --------------------------------------------------------------------------- data


def synthetic_darcy(path: Path, *, train: int, test: int, resolution: int, seed: int = 0) -> Path:
    """A Darcy-shaped file in the project's format: ``coeff`` (input) and ``pressure`` (output) on an
    ``resolution``^2 node grid of [0, 1]^2, ``train`` + ``test`` samples.

    ``coeff`` is 12 where a smooth Gaussian field (white noise filtered by ``exp(-|k|^2 / 16)``) is
    positive and 3 elsewhere (the piecewise-constant Darcy coefficient's values); ``pressure`` is
    ``sin(pi x) sin(pi y)`` times the same filter applied to ``1 / coeff``: smooth, zero on the
    boundary, a deterministic function of the input. Timing data, not a solution of the equation.
    """
    import numpy as np

    from opflow.data.format import Variable, split_codes, split_variable, write_dataset
    from opflow.data.provenance import provenance_attrs

    n, s = train + test, resolution
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(s, 1.0 / s)
    filt = np.exp(-(k[:, None] ** 2 + k[None, :] ** 2) / 16.0)
    g = np.real(np.fft.ifft2(np.fft.fft2(rng.standard_normal((n, s, s))) * filt))
    a = np.where(g > 0, 12.0, 3.0)
    x = np.linspace(0.0, 1.0, s)
    bubble = np.sin(np.pi * x)[:, None] * np.sin(np.pi * x)[None, :]
    u = bubble * np.real(np.fft.ifft2(np.fft.fft2(1.0 / a) * filt))
    variables = {
        "x": Variable(("x",), x, {"role": "coordinate", "units": "1", "long_name": "x node coordinate"}),
        "y": Variable(("y",), x.copy(), {"role": "coordinate", "units": "1", "long_name": "y node coordinate"}),
        "sample_index": Variable(("sample",), np.arange(n, dtype=np.int64)),
        "split": split_variable(split_codes(["train"] * train + ["test"] * test)),
        "coeff": Variable(("sample", "x", "y"), a.astype(np.float32), {"role": "input", "units": "1", "long_name": "permeability a(x)"}),
        "pressure": Variable(("sample", "x", "y"), u.astype(np.float32), {"role": "output", "units": "1", "long_name": "pressure-like field"}),
    }
    attrs = provenance_attrs("train_speed_synthetic", {"resolution": s, "train": train, "test": test}, seed, resolution=s)
    return write_dataset(path, variables, attrs, complevel=0)


# --------------------------------------------------------------------------- one variant


def run_config(config: Mapping[str, Any], dataset: str, model: str, data_file: str) -> dict[str, Any]:
    """The resolved run of ``opflow train --config ... --dataset D --model M --data FILE``."""
    from opflow.config import resolve_run

    return resolve_run(config, dataset, model, data_file)


def measure_variant(
    run: Mapping[str, Any],
    variant: Mapping[str, Any],
    data_file: Path,
    work_dir: Path,
    *,
    device: str,
    epochs: int,
    has_on_device: bool,
) -> dict[str, Any]:
    """Train ``run`` with ``variant``'s settings for ``epochs`` epochs; the timings (module docstring)."""
    import torch

    from benchmarks.models import PeakMemory
    from opflow.config import TrainConfig
    from opflow.inference import test_errors
    from opflow.models.base import count_parameters
    from opflow.runtime import DistInfo, choose_device
    from opflow.train import Trainer

    dev = choose_device(device)
    r = copy.deepcopy(dict(run))
    tr = r["training"]
    tr.update({"precision": variant["precision"], "compile": bool(variant["compile"]), "epochs": epochs, "device": str(dev),
               "cuda_graphs": bool(variant.get("cuda_graphs"))})
    if has_on_device:
        tr["data_on_device"] = _on_device_value(bool(variant["data_on_device"]))
    cfg = TrainConfig.from_dict(tr, "run.training")

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    if cfg.compile:  # a fresh compilation: first_epoch_s holds the whole compile time, none reused from another variant
        import torch._dynamo

        torch._dynamo.reset()
    mem = PeakMemory(str(dev))
    mem.start()
    t0 = time.perf_counter()
    trainer = Trainer(r, cfg, DistInfo(), dev, data_file, work_dir, progress=False)
    trainer.setup()
    trainer.resume(restart=True)
    sync()
    setup_s = time.perf_counter() - t0
    times, rows = [], []
    for e in range(epochs):
        sync()
        t0 = time.perf_counter()
        rows.append(trainer.epoch(e))
        sync()
        times.append(time.perf_counter() - t0)
    peak = mem.peak()
    # what the epochs iterated: the loaders, or the splits held on the device (training.data_on_device)
    train_batches = getattr(trainer, "train_batches", trainer.loader)
    test_batches = getattr(trainer, "test_batches", trainer.test_loader)
    evals = []
    for _ in range(2):
        sync()
        t0 = time.perf_counter()
        test_errors(trainer.model, test_batches, trainer.norms, dev, autocast=trainer.autocast)
        sync()
        evals.append(time.perf_counter() - t0)
    n_train = len(trainer.train_ds)
    measured = times[1:] or times
    epoch_s = statistics.median(measured)
    test_eval_s = statistics.median(evals)
    evaluated = sum(1 for row in rows[1:] if row["test_rel_l2"] is not None) if len(rows) > 1 else 1
    # the test evaluation is part of the measured epochs only where eval_every made them evaluate
    share = evaluated / max(1, len(measured))
    train_pass_s = max(epoch_s - share * test_eval_s, 1e-12)
    out = {
        **dict(variant),
        "effective": {
            "autocast_bf16": bool(trainer.autocast),
            "tf32": bool(trainer.tf32),
            "compile": bool(trainer.use_compile),
            "cuda_graph": trainer.step.graph is not None,
            "train_data_on_device": train_batches is not trainer.loader,
            "test_data_on_device": test_batches is not trainer.test_loader,
        },
        "setup_s": setup_s,
        "first_epoch_s": times[0],
        "epoch_s": summary(measured) | {"all": times},
        "test_eval_s": test_eval_s,
        "train_pass_s": train_pass_s,
        "samples_per_s": n_train / epoch_s,
        "train_samples_per_s": n_train / train_pass_s,
        "steps_per_epoch": math.ceil(n_train / cfg.batch_size),
        "train_samples": n_train,
        "test_samples": len(trainer.test_ds),
        "parameters": count_parameters(trainer.model),
        "peak_memory_bytes": peak,
        "peak_memory_kind": mem.kind,
        "train_loss": [row["train_loss"] for row in rows],
        "final_train_loss": rows[-1]["train_loss"],
        "final_test_rel_l2": rows[-1]["test_rel_l2"],
        "epoch_500_estimate_min": 500 * epoch_s / 60,
    }
    del trainer
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return out


# --------------------------------------------------------------------------- single steps: wall time against the GPU's own time

#: the pairs of ``--steps`` (default ``--pairs``): each model at its paper configuration on data of its
#: protocol's shape (a synthetic file: a grid of ``resolution`` nodes, a cloud of ``points`` points, or, with
#: ``pipeline``, the dataset's source shard of random values derived as the workflow derives it)
STEP_PAIRS: dict[str, dict[str, int]] = {
    "darcy/ono": {"resolution": 85},
    "darcy141/gt": {"resolution": 141},
    "elasticity972/gnot": {"points": 972},
    "darcy/fno": {"resolution": 85},
    "darcy_lognormal416/vitno": {"resolution": 416},
}


#: more datasets whose synthetic data's shape is known (the grid of the file the view reads): the CPU's background
#: list (config/queue.yaml, ``cpu:``), for timing its pairs plain against compiled
STEP_SHAPES: dict[str, dict[str, int]] = {
    "darcy_lognormal64": {"resolution": 64},
    "darcy43": {"resolution": 43},
    "darcy_inverse141_eps0": {"resolution": 141},
    "darcy211": {"resolution": 211},
    # Galerkin Table 3's FNO2d rows: the view reads the 141 / 211 file (inputs: coarse strides it to 36 / 71)
    "darcy_inverse141_coarse_eps0": {"resolution": 141},
    "darcy_inverse211_coarse_eps0": {"resolution": 211},
    "darcy_inverse141_fine_eps0": {"resolution": 141},
    # Burgers (Galerkin Table 2(a)): the source's synthetic shard derived to the dataset's grid, as
    # benchmarks.protocol_cost makes it (``pipeline``: the real file layout of any source)
    "burgers512": {"pipeline": 1},
    "burgers2048": {"pipeline": 1},
}


def step_shape(pair: str) -> dict[str, int] | None:
    """The synthetic data's shape for ``pair``: that of :data:`STEP_PAIRS`' pair on the same dataset, or the
    dataset's entry in :data:`STEP_SHAPES`, so any model can be timed on the datasets listed there (e.g.
    ``elasticity972/gnot_official``). None: unknown."""
    dataset = pair.split("/", 1)[0]
    return next((shape for p, shape in STEP_PAIRS.items() if p.split("/", 1)[0] == dataset), STEP_SHAPES.get(dataset))


#: the issue's bound: a step is GPU-bound when its wall time is at most this multiple of its kernel time
GPU_BOUND_RATIO = 1.3


def synthetic_cloud(path: Path, *, train: int, test: int, points: int, seed: int = 0) -> Path:
    """Point clouds of ``points`` points in [0, 1]^2 (every sample the same count), output ``u`` a
    smooth function of the points: the shapes of the elasticity sets, timing data only."""
    import numpy as np

    from opflow.data.format import Variable, split_codes, split_variable, write_dataset
    from opflow.data.provenance import provenance_attrs

    n = train + test
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 1, (n, points, 2))
    u = np.sin(3 * xy[..., 0]) * np.cos(2 * xy[..., 1]) + rng.uniform(0, 1, (n, 1))
    variables = {
        "sample_index": Variable(("sample",), np.arange(n, dtype=np.int64)),
        "split": split_variable(split_codes(["train"] * train + ["test"] * test)),
        "node_count": Variable(("sample",), np.full(n, points, np.int32), {"role": "auxiliary"}),
        "node_x": Variable(("sample", "node"), xy[..., 0], {"role": "coordinate", "units": "1", "long_name": "x"}),
        "node_y": Variable(("sample", "node"), xy[..., 1], {"role": "coordinate", "units": "1", "long_name": "y"}),
        "u": Variable(("sample", "node"), u.astype(np.float32), {"role": "output", "units": "1", "long_name": "u"}),
    }
    return write_dataset(path, variables, provenance_attrs("train_speed_cloud", {"points": points, "train": train, "test": test}, seed), complevel=0)


def step_pair_run(config: Mapping[str, Any], pair: str, shape: Mapping[str, int], tmpdir: Path, *, batches: int = 16) -> tuple[dict[str, Any], Path]:
    """The run of ``pair`` ("dataset/model") with the config's training settings and model, on a
    synthetic file of ``shape`` holding ``batches`` training batches (the dataset entry is replaced by
    one that reads that file: same source and training block, the file's own splits)."""
    dataset, model = pair.split("/")
    cfg = copy.deepcopy(dict(config))
    entry = dict(cfg["datasets"][dataset])
    run0 = run_config(config, dataset, model, None)  # the batch size and split of the pair (all merge layers)
    n_train, n_test = batches * int(run0["training"]["batch_size"]), int(run0["training"]["batch_size"])
    new = {"source": entry["source"], "train": n_train, "test": n_test, **({"training": entry["training"]} if "training" in entry else {})}
    path = tmpdir / f"{dataset}_{n_train}_{n_test}.nc"  # per split: pairs of one dataset differ in batch size
    if "points" in shape:
        new["task"] = {"inputs": [], "outputs": ["u"]}
        if not path.exists():
            synthetic_cloud(path, train=n_train, test=n_test, points=shape["points"])
    elif "pipeline" in shape:
        from benchmarks.protocol_cost import synthetic_dataset, synthetic_source
        from opflow.config import parse_workflow

        wf = parse_workflow(config)
        new.update({k: entry[k] for k in ("resolution", "task", "view") if k in entry})
        shard = tmpdir / f"{entry['source']}-{n_train + n_test}.nc"  # synthetic_source's name: one shard per size
        if not shard.exists():
            shard = synthetic_source(wf, entry["source"], n_train + n_test, tmpdir)
        path = synthetic_dataset(wf, dataset, n_train, n_test, tmpdir, {entry["source"]: shard})
    else:
        new["resolution"] = shape["resolution"]
        # the pair's task and view (e.g. the inverse problem: pressure -> coefficient, coarsened and noisy)
        new.update({k: entry[k] for k in ("task", "view") if k in entry})
        if not path.exists():
            synthetic_darcy(path, train=n_train, test=n_test, resolution=shape["resolution"])
    cfg["datasets"] = {**cfg["datasets"], dataset: new}
    run = run_config(cfg, dataset, model, str(path))
    run["paper_train"] = int(run0["data"]["train"])
    return run, path


def count_aten_ops(fn: Any, *args: Any) -> int:
    """ATen operations dispatched while ``fn(*args)`` runs (views and in-place ones included): the host's share
    of an eager training step, each costing the dispatcher (and on a GPU, for most, a kernel launch) a few
    microseconds whatever the tensor sizes. Not for compiled code (a dispatch mode changes what it traces)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            _Count.n += 1
            return func(*args, **(kwargs or {}))

    with _Count():
        fn(*args)
    return _Count.n


def kernel_seconds(prof: Any) -> float:
    """Seconds of GPU kernels (and device copies) recorded by a ``torch.profiler`` run: the sum of
    the device-side events' own times."""
    from torch.autograd import DeviceType

    evs = prof.key_averages()
    return sum(e.self_device_time_total for e in evs if getattr(e, "device_type", None) == DeviceType.CUDA) / 1e6


def top_kernels(prof: Any, steps: int, k: int = 12, device: str = "cuda") -> list[dict[str, Any]]:
    """The ``k`` operations with the most own time per step in a ``torch.profiler`` run of ``steps`` steps: on
    CUDA the kernels (device events), on the CPU the ATen operations. Each: name, milliseconds and calls per step.
    What a GPU step spends its kernel time on, for the work on the fp32 target (docs/gpu.md)."""
    from torch.autograd import DeviceType

    kind = DeviceType.CUDA if device == "cuda" else DeviceType.CPU

    def own(e: Any) -> float:
        return e.self_device_time_total if device == "cuda" else e.self_cpu_time_total

    evs = sorted((e for e in prof.key_averages() if getattr(e, "device_type", None) == kind), key=own, reverse=True)
    return [{"name": e.key[:160], "ms_per_step": own(e) / 1e3 / steps, "calls_per_step": e.count / steps} for e in evs[:k] if own(e) > 0]


def measure_steps(
    run: Mapping[str, Any], variant: Mapping[str, Any], data_file: Path, work_dir: Path, *, device: str, warmup: int, steps: int, repeats: int,
) -> dict[str, Any]:
    """Wall time of one training step (:class:`opflow.train_step.TrainStep` of the real Trainer, the
    batch fetched as the epoch fetches it) and, on CUDA, the GPU's kernel time per step from
    ``torch.profiler``: ``warmup`` steps, then ``repeats`` timings of ``steps`` steps back to back (a
    synchronise before and after each timing; the median per step), then ``steps`` profiled steps (their
    operations with the most time: :func:`top_kernels`, on a CPU the ATen operations)."""
    import torch

    from opflow.config import TrainConfig
    from opflow.hostsync import deferred_checks
    from opflow.runtime import DistInfo, choose_device
    from opflow.train import Trainer, to_device

    dev = choose_device(device)
    r = copy.deepcopy(dict(run))
    tr = r["training"]
    per_epoch = max(1, int(r["data"]["train"]) // int(tr["batch_size"]))
    total = warmup + steps * (repeats + 1)
    tr.update({"precision": variant["precision"], "compile": bool(variant["compile"]), "cuda_graphs": bool(variant.get("cuda_graphs")),
               "epochs": total // per_epoch + 2, "device": str(dev), "data_on_device": True if dev.type == "cuda" else False})
    cfg = TrainConfig.from_dict(tr, "run.training")

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    if cfg.compile:
        import torch._dynamo

        torch._dynamo.reset()
    trainer = Trainer(r, cfg, DistInfo(), dev, data_file, work_dir, progress=False)
    trainer.setup()
    trainer.resume(restart=True)
    trainer.fwd_model.train()

    def batches(source: Any):  # noqa: ANN202 - the epoch's iteration, repeated
        while True:
            yield from source

    it = batches(trainer.train_batches)
    with deferred_checks():
        t0 = time.perf_counter()
        for _ in range(warmup):
            trainer.step(to_device(next(it), dev))
        sync()
        warm_s = time.perf_counter() - t0
        walls = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                trainer.step(to_device(next(it), dev))
            sync()
            walls.append((time.perf_counter() - t0) / steps)
        from torch.profiler import ProfilerActivity, profile

        kernel = None
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if dev.type == "cuda" else [ProfilerActivity.CPU]
        with profile(activities=activities) as prof:
            for _ in range(steps):
                trainer.step(to_device(next(it), dev))
            sync()
        if dev.type == "cuda":
            kernel = kernel_seconds(prof) / steps
        # on CUDA the kernels, on a CPU the ATen operations with the most own time per step
        kernels_top = top_kernels(prof, steps, device="cuda" if dev.type == "cuda" else "cpu")
        # the host's work in an eager step: ATen operations dispatched (a captured step replays its graph: none)
        ops = None if trainer.use_compile else count_aten_ops(trainer.step, to_device(next(it), dev))
    wall = statistics.median(walls)
    out = {
        **dict(variant),
        "effective": {"autocast_bf16": bool(trainer.autocast), "tf32": bool(trainer.tf32), "compile": bool(trainer.use_compile),
                      "cuda_graph": trainer.step.graph is not None},
        "warmup_s": warm_s,
        "step_wall_s": wall,
        "step_wall_all_s": walls,
        "step_kernel_s": kernel,
        "top_kernels": kernels_top,
        "aten_ops_per_step": ops,
        "wall_over_kernel": (wall / kernel) if kernel else None,
        "gpu_idle_fraction": (1 - kernel / wall) if kernel else None,
        "gpu_bound": (wall <= GPU_BOUND_RATIO * kernel) if kernel else None,
        "batch_size": int(tr["batch_size"]),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None,
    }
    del trainer
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    return out


def _argv_without(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """``argv`` less each of ``options`` with its value (``--opt V`` or ``--opt=V``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not any(arg.startswith(o + "=") for o in options):
            out.append(arg)
    return out


def steps_in_processes(argv: Sequence[str], pairs: Sequence[str], out: Path) -> int:
    """``--steps`` with several pairs: each pair measured by a process of its own (this module with the
    same arguments and that one pair), its JSON merged into ``out`` as soon as it ends. A failed CUDA
    graph capture leaves PyTorch's GPU random numbers unusable in its process (docs/gpu.md), so a pair
    measured after it in the same process would fail for a reason that is not its own."""
    child_argv = _argv_without(argv, ("--pairs", "--out"))
    result: dict[str, Any] | None = None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryDirectory(prefix="opflow-train-step-pairs-") as tmp:
        for pair in pairs:
            part = Path(tmp) / (pair.replace("/", "_") + ".json")
            rc = subprocess.run([sys.executable, "-m", "benchmarks.train_speed", *child_argv, "--pairs", pair, "--out", str(part)],
                                cwd=ROOT, env=env).returncode
            got = json.loads(part.read_text()) if part.is_file() else None
            if result is None and got is not None:
                result = {**got, "pairs": {}, "skipped": {}, "processes": "one per pair"}
            if result is None:
                result = {"benchmark": "train_step", "created": utc_timestamp(), "pairs": {}, "skipped": {}, "processes": "one per pair"}
            if got is not None:
                result["pairs"].update(got.get("pairs", {}))
                result["skipped"].update(got.get("skipped", {}))
                result["machine"] = got.get("machine", result.get("machine"))
            if got is None:
                result["skipped"][pair] = f"failed: its process exited with status {rc} before writing a result"
            write_json_atomic(out, result)
    print(f"wrote {out}")
    return 0 if result and any(p.get("variants") for p in result["pairs"].values()) else 1


def steps_main(a: argparse.Namespace, config: Mapping[str, Any], names: Sequence[str], dev: Any, argv: Sequence[str] = ()) -> int:
    """``--steps``: every pair of ``--pairs`` x every variant (:func:`measure_steps`), to one JSON (with
    several pairs and ``argv`` given, one process per pair: :func:`steps_in_processes`)."""
    import torch

    from opflow.runtime import set_threads

    pairs = [p.strip() for p in (a.pairs or ",".join(STEP_PAIRS)).split(",") if p.strip()]
    unknown = [p for p in pairs if step_shape(p) is None or p.split("/", 1)[-1] not in config.get("models", {})]
    if unknown:
        raise SystemExit(f"--pairs: {unknown} not among {sorted(STEP_PAIRS)} (a configured model on one of their datasets or of {sorted(STEP_SHAPES)})")
    out = a.out or ROOT / DEFAULT_STEP_OUT.format(device=dev.type)
    if len(pairs) > 1 and argv and not a.one_process:
        return steps_in_processes(argv, pairs, out)
    set_threads(a.threads or 4)
    load0 = loadavg()
    result: dict[str, Any] = {
        "benchmark": "train_step",
        "created": utc_timestamp(),
        "device": dev.type,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "versions": versions("torch", "numpy") | {"cuda": torch.version.cuda},
        "measured": f"{a.warmup} warm-up steps, then the median over {a.step_repeats} timings of {a.step_count} steps back to back; "
                    f"kernel time: torch.profiler over {a.step_count} more steps (device events' own time)",
        "gpu_bound_ratio": GPU_BOUND_RATIO,
        "pairs": {},
        "skipped": {},
    }
    with tempfile.TemporaryDirectory(prefix="opflow-train-step-") as tmp:
        tmpdir = Path(tmp)
        for pair in pairs:
            whys = {name: skip_reason(parse_variant(name), dev.type, True) for name in names}
            if all(whys.values()):  # nothing to measure here: no data to make
                result["skipped"].update({f"{pair} {name}": why for name, why in whys.items()})
                write_json_atomic(out, result)
                continue
            run, path = step_pair_run(config, pair, step_shape(pair), tmpdir, batches=a.step_batches)
            steps_per_epoch = math.ceil(run["paper_train"] / int(run["training"]["batch_size"]))
            entry = result["pairs"].setdefault(pair, {"model_config": run["model_config"], "batch_size": run["training"]["batch_size"],
                                                      "shape": step_shape(pair), "paper_train": run["paper_train"],
                                                      "steps_per_paper_epoch": steps_per_epoch, "variants": {}})
            for name in names:
                v = parse_variant(name)
                why = skip_reason(v, dev.type, True)
                if why:
                    result["skipped"][f"{pair} {name}"] = why
                    continue
                try:
                    r = measure_steps(run, v, path, tmpdir / pair.replace("/", "_") / name, device=str(dev),
                                      warmup=a.warmup, steps=a.step_count, repeats=a.step_repeats)
                except Exception as e:  # recorded; the other variants and pairs still run
                    result["skipped"][f"{pair} {name}"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    print(f"{pair:26s} {name:24s} FAILED: {type(e).__name__}: {e}", flush=True)
                    continue
                r["paper_epoch_train_s_estimate"] = r["step_wall_s"] * steps_per_epoch
                entry["variants"][name] = r
                k = r["step_kernel_s"]
                print(f"{pair:26s} {name:24s} step {1e3 * r['step_wall_s']:8.2f} ms  kernels {('%8.2f ms' % (1e3 * k)) if k else '       -'}  "
                      f"wall/kernel {('%.2f' % r['wall_over_kernel']) if k else '-'}  graph {r['effective']['cuda_graph']}  "
                      f"ATen ops {r['aten_ops_per_step'] if r['aten_ops_per_step'] is not None else '-'}", flush=True)
                result["machine"] = machine(load0, torch_threads=a.threads or 4)
                write_json_atomic(out, result)
    result["machine"] = machine(load0, torch_threads=a.threads or 4)
    write_json_atomic(out, result)
    print(f"wrote {out}")
    return 0 if any(p["variants"] for p in result["pairs"].values()) else 1


# --------------------------------------------------------------------------- the run


def _ratios(variants: Mapping[str, Any], base: str = "fp32") -> dict[str, float]:
    """Speed-up of each variant over ``base`` (base epoch time / its epoch time)."""
    if base not in variants:
        return {}
    b = variants[base]["epoch_s"]["median"]
    return {k: b / v["epoch_s"]["median"] for k, v in variants.items() if k != base}


def _best(variants: Mapping[str, Any]) -> dict[str, Any] | None:
    if not variants:
        return None
    name = min(variants, key=lambda k: variants[k]["epoch_s"]["median"])
    return {"variant": name, "epoch_s": variants[name]["epoch_s"]["median"]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="dataset file (default: a synthetic file of the dataset's shape in a temporary folder)")
    ap.add_argument("--configfile", action="append", default=None, help="config files, later ones winning (default: config/default.yaml)")
    ap.add_argument("--dataset", default="darcy")
    ap.add_argument("--model", default="ono")
    ap.add_argument("--device", default=None, help="auto (cuda > mps > cpu; the default), cpu, cuda, cuda:N (--smoke: cpu unless given)")
    ap.add_argument("--epochs", type=int, default=None, help="epochs per variant (>= 2: the first is the warm-up; default 3, on a CPU 2)")
    ap.add_argument("--train-samples", type=int, default=None, help="synthetic file: training samples (default: the dataset's; on a CPU %d)" % CPU_DATA["train"])
    ap.add_argument("--test-samples", type=int, default=None, help="synthetic file: test samples (default: the dataset's; on a CPU %d)" % CPU_DATA["test"])
    ap.add_argument("--variants", default="all", help=f"comma-separated variants, tokens {'+'.join(TOKENS)} (default all: {','.join(ALL_VARIANTS)})")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: the run's training.threads)")
    ap.add_argument("--out", type=Path, default=None, help=f"result JSON (default {DEFAULT_OUT})")
    ap.add_argument("--smoke", action="store_true", help="tiny synthetic data and model, 2 epochs, on the CPU unless --device says otherwise (seconds; no claim about timings)")
    ap.add_argument("--steps", action="store_true", help="time single training steps (wall and GPU kernel time) of --pairs instead of epochs")
    ap.add_argument("--pairs", default=None, help=f"--steps: comma-separated dataset/model pairs (default: {','.join(STEP_PAIRS)})")
    ap.add_argument("--step-count", type=int, default=10, help="--steps: steps per timing (default 10)")
    ap.add_argument("--step-repeats", type=int, default=5, help="--steps: timings per variant, the median reported (default 5)")
    ap.add_argument("--warmup", type=int, default=3, help="--steps: untimed steps first (default 3; compile happens here)")
    ap.add_argument("--one-process", action="store_true", help="--steps: measure every pair in this process (default: a process per pair when there are several)")
    ap.add_argument("--step-batches", type=int, default=16, help="--steps: training batches in the synthetic file (default 16)")
    a = ap.parse_args(argv)
    if a.epochs is not None and a.epochs < 1:
        ap.error("--epochs must be at least 1 (2 or more: the first epoch is the warm-up)")
    for opt, n in (("--train-samples", a.train_samples), ("--test-samples", a.test_samples)):
        if n is not None and n < 1:
            ap.error(f"{opt} must be at least 1")
    try:
        names = parse_variants(a.variants)
    except ValueError as e:
        ap.error(str(e))
    if a.smoke:
        a.epochs, a.device = 2, a.device or "cpu"
        a.threads = a.threads or 1
    a.device = a.device or "auto"

    import torch

    from opflow.config import load_config_files
    from opflow.runtime import choose_device, set_threads

    files = a.configfile or ["config/default.yaml"]
    config = load_config_files([f if os.path.isabs(f) else str(ROOT / f) for f in files])
    dev = choose_device(a.device)
    if a.epochs is None:
        a.epochs = 3 if dev.type == "cuda" else 2
    if a.steps:
        for opt, n in (("--step-count", a.step_count), ("--step-repeats", a.step_repeats), ("--step-batches", a.step_batches)):
            if n < 1:
                ap.error(f"{opt} must be at least 1")
        return steps_main(a, config, names, dev, list(sys.argv[1:] if argv is None else argv))
    out = a.out or ROOT / DEFAULT_OUT.format(device=dev.type)
    has_on_device = data_on_device_supported()
    load0 = loadavg()
    notes = []
    if not has_on_device:
        notes.append("TrainConfig has no data_on_device key here: the ondevice variants are skipped and the others leave the key out (the DataLoader path)")

    with tempfile.TemporaryDirectory(prefix="opflow-train-speed-") as tmp:
        tmpdir = Path(tmp)
        if a.data is not None:
            data_file = a.data.resolve()
            data_info: dict[str, Any] = {"synthetic": False, "file": a.data.name}
        else:
            ds = config["datasets"][a.dataset]
            shape = dict(SMOKE_DATA) if a.smoke else {"train": int(ds["train"]), "test": int(ds.get("test") or 0), "resolution": int(ds["resolution"])}
            if not a.smoke and dev.type != "cuda":  # the paper's split would take hours per epoch on a CPU
                shape |= {k: v for k, v in CPU_DATA.items() if v < shape[k]}
                notes.append(f"{dev.type}: a synthetic file of {shape['train']} training / {shape['test']} test samples, not the dataset's "
                             f"{ds['train']} / {ds.get('test')} (--train-samples, --test-samples): compare samples/s, not epoch times")
            shape |= {k: v for k, v in (("train", a.train_samples), ("test", a.test_samples)) if v is not None}
            t0 = time.perf_counter()
            data_file = synthetic_darcy(tmpdir / "synthetic.nc", **shape)
            data_info = {"synthetic": True, **shape, "write_s": time.perf_counter() - t0,
                         "what": "piecewise 3/12 coefficient -> smooth pressure-like field (benchmarks.train_speed.synthetic_darcy): timing data"}
        run = run_config(config, a.dataset, a.model, str(data_file))
        overrides: dict[str, Any] = {"training": {"epochs": a.epochs}}
        if a.smoke:
            run["model_config"].update(SMOKE_MODEL)
            run["training"].update(SMOKE_TRAINING)
            overrides["model"], overrides["training"] = dict(SMOKE_MODEL), {**overrides["training"], **SMOKE_TRAINING}
        threads = a.threads or int(run["training"]["threads"])
        set_threads(threads)
        run["training"]["threads"] = threads
        result: dict[str, Any] = {
            "benchmark": "train_speed",
            "smoke": a.smoke,
            "created": utc_timestamp(),
            "device": dev.type,
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
            "versions": versions("torch", "numpy") | {"cuda": torch.version.cuda},
            "torch_threads": threads,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "configfiles": files,
            "run": {k: run[k] for k in ("dataset", "model", "model_config", "training", "data", "hash")},
            "overrides": overrides,
            "data": data_info,
            "epochs": a.epochs,
            "measured": "median of epochs 2..K (the first, warm-up and compile, is first_epoch_s)" if a.epochs > 1 else "the single epoch (no warm-up dropped)",
            "data_on_device_supported": has_on_device,
            "target_epoch_s": TARGET_EPOCH_S,
            "notes": notes,
            "variants": {},
            "skipped_variants": {},
        }
        for name in names:
            v = parse_variant(name)
            why = skip_reason(v, dev.type, has_on_device, smoke=a.smoke)
            if why:
                result["skipped_variants"][name] = why
                print(f"{name:22s} skipped: {why}", flush=True)
                continue
            try:
                r = measure_variant(run, v, data_file, tmpdir / name, device=str(dev), epochs=a.epochs, has_on_device=has_on_device)
            except Exception as e:  # recorded, and the other variants still run
                result["skipped_variants"][name] = f"failed: {type(e).__name__}: {e}"
                print(f"{name:22s} FAILED: {type(e).__name__}: {e}", flush=True)
                continue
            result["variants"][name] = r
            print(
                f"{name:22s} epoch {r['epoch_s']['median']:8.3f} s (first {r['first_epoch_s']:.2f} s, test eval {r['test_eval_s']:.2f} s)  "
                f"{r['samples_per_s']:8.1f} samples/s  peak {r['peak_memory_bytes'] / 2**20:8.1f} MiB  "
                f"train loss {r['final_train_loss']:.4g}  test rel L2 {_g(r['final_test_rel_l2'])}",
                flush=True,
            )
            result["speedup_over_fp32"] = _ratios(result["variants"])
            result["best"] = _best(result["variants"])
            result["machine"] = machine(load0, torch_threads=threads)
            write_json_atomic(out, result)
    result["speedup_over_fp32"] = _ratios(result["variants"])
    result["best"] = _best(result["variants"])
    result["machine"] = machine(load0, torch_threads=threads)
    write_json_atomic(out, result)
    print(f"wrote {out}")
    return 0 if result["variants"] else 1


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


STEP_TABLE_HEAD = ["| pair | variant | step wall | GPU kernels | wall / kernel | captured | paper epoch (est.) |",
                   "| --- | --- | ---: | ---: | ---: | --- | ---: |"]


def _step_rows(result: Mapping[str, Any]) -> list[str]:
    rows = []
    for pair, entry in result.get("pairs", {}).items():
        for name, v in entry.get("variants", {}).items():
            k = v.get("step_kernel_s")
            ratio = "-" if k is None else f"{v['wall_over_kernel']:.2f}"
            rows.append(
                f"| {pair} | {name} | {1e3 * v['step_wall_s']:.1f} ms | {'-' if k is None else f'{1e3 * k:.1f} ms'} | "
                f"{ratio} | {'yes' if v['effective'].get('cuda_graph') else 'failed (plain step)' if v.get('cuda_graphs') else 'no'} | "
                f"{v.get('paper_epoch_train_s_estimate', float('nan')):.1f} s |"
            )
    return rows


def steps_table(results: Sequence[Mapping[str, Any]]) -> str:
    """One Markdown table of several ``--steps`` results (docs and README: ``opflow docs``), each row's
    device in a line under it."""
    rows = [r for res in results for r in _step_rows(res)]
    devices = sorted({f"{res.get('device_name')} (torch {res.get('versions', {}).get('torch')}, {str(res.get('created', ''))[:10]})" for res in results})
    return "\n".join([*STEP_TABLE_HEAD, *rows, "", f"Measured on {', '.join(devices)}; `captured`: the step ran as one CUDA graph."])


def summarize_steps(result: Mapping[str, Any]) -> list[str]:
    """``SUMMARY.md`` lines of a ``--steps`` result: per pair and variant, the step's wall and kernel time."""
    lines = [f"- single training steps on {result.get('device_name') or result.get('device')} (torch {result.get('versions', {}).get('torch')}); "
             f"GPU-bound = wall <= {result.get('gpu_bound_ratio')} x kernel time",
             "", *STEP_TABLE_HEAD, *_step_rows(result)]
    lines += [f"- {k}: {why}" for k, why in result.get("skipped", {}).items()]
    return lines


def summarize(result: Mapping[str, Any]) -> list[str]:
    """``SUMMARY.md`` lines: epoch time, samples/s, peak memory and final losses per variant."""
    if result.get("benchmark") == "train_step":
        return summarize_steps(result)
    lines = [f"- {result.get('run', {}).get('model')} on {result.get('run', {}).get('dataset')}, {result.get('device')} "
             f"({result.get('device_name') or '-'}), {result.get('epochs')} epochs per variant; target {result.get('target_epoch_s')} s/epoch"]
    for name, v in result.get("variants", {}).items():
        lines.append(
            f"- {name}: {v['epoch_s']['median']:.3g} s/epoch ({v['samples_per_s']:.4g} samples/s), peak {v['peak_memory_bytes'] / 2**20:.0f} MiB, "
            f"final train loss {v['final_train_loss']:.4g}, test rel L2 {_g(v['final_test_rel_l2'])}"
        )
    for name, why in result.get("skipped_variants", {}).items():
        lines.append(f"- {name}: skipped ({why})")
    return lines


#: run once more on the GPU when one is present (opflow bench): all variants there
BENCH_GPU_ARGS = ["--device", "cuda"]


if __name__ == "__main__":
    sys.exit(main())
