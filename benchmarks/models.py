"""Cost of every configured neural operator at its paper configuration: training and inference
samples/s and peak memory at several input sizes, and the fitted exponent in the number of points.

    python -m benchmarks.models [--configfile config/default.yaml ...] [--models ono,fno,...]
                                [--threads 1] [--out benchmarks/results/models_cpu.json] [--smoke]

What is measured. Every entry of ``models:`` in the config (config/default.yaml: the paper
configurations, read through the typed config, :func:`opflow.config.parse_workflow`, and built by
the one model builder, :func:`opflow.train.build_for_data`) is run on synthetic inputs shaped like
its own dataset (:func:`natural_dataset`: the first ``targets`` entry ``results/<dataset>_<model>.json``
of the config, else :data:`NATURAL_DATASETS`, else ``darcy``), at the sizes of that dataset's family
(:data:`FAMILIES`: 2D Darcy grids 43^2 ... 211^2, 1D Burgers grids, Lorenz-63 time grids, ...). The
batch is the paper's (the merged training config of (dataset, model): ``batch_size``), and so are
the optimiser (Adam / AdamW, its weight decay), the loss with its derivative regulariser
(:func:`opflow.metrics.training_loss`), its reduction and gradient clipping. A model that cannot run
on an input is skipped with the error as the recorded reason.

* training step = forward + loss + backward + (clip) + optimiser step, on a fixed batch;
* inference = ``model.eval()`` forward under ``torch.no_grad()``;
* samples/s = batch / median step time; ``--warmup`` steps discarded, then the median of
  ``repeats`` steps (:func:`benchmarks.common.timed_repeats`), ``repeats`` chosen per phase so that
  the phase takes about ``--phase-s`` seconds, between ``--min-repeats`` and ``--max-repeats``.

Peak memory (CPU). Each (model, size) runs in a fresh subprocess (the smoke run in-process), so
allocator state and the process high-water mark are its own. Before each phase the freed heap is
handed back to the OS (``malloc_trim``) and the kernel's peak resident set size ``VmHWM`` is reset
to the current RSS (``echo 5 > /proc/self/clear_refs``, Linux >= 4.0); the phase's peak memory is
``VmHWM`` after the phase minus ``VmRSS`` before it: everything the phase made resident
(activations kept for backward, gradients, the optimiser state, which a fresh optimiser allocates in
the phase, and temporaries), not the parameters and inputs, which existed before (reported
separately as ``param_bytes``). Where ``clear_refs`` is unavailable the growth of ``ru_maxrss`` is
used (an underestimate when an earlier peak was higher; the method is recorded in the result).
(``tracemalloc`` does not see torch's allocations; ``torch.profiler``'s memory view adds overhead
to the timed steps.) On CUDA (``--device cuda``) the peak is ``torch.cuda.max_memory_allocated``
over the phase (reset at its start, minus what was allocated then), every timed step ends with a
``torch.cuda.synchronize``, the probe is preceded by one untimed step (the first CUDA step pays
for the context and the libraries), and the memory cap is half the free memory of the GPU.

Time and memory guards. A batch-1 probe step (forward and training) predicts the cost of a sample;
where the paper's batch would take more than ``--max-step-s`` per step or more than
``--max-memory-gb`` (default: half the memory available at the start), the batch is reduced to the
largest that fits and ``batch < batch_paper`` is recorded with the reason (on a CPU the cost per
sample hardly depends on the batch at these sizes). Sizes are run in increasing order; once two
are measured, the fitted exponent predicts the next: a size predicted to need more than
``--max-sample-s`` seconds per training sample, or more memory per sample than the memory cap, is
skipped with the prediction as its reason (ONO at 141^2 on two CPU cores, for example).

Exponent: least squares of ``log(seconds per sample)`` on ``log(points)`` over the measured sizes
(:func:`fit_exponent`), for training and inference, and of ``log(peak bytes per sample)`` for memory.

Threads: ``--threads`` (default 1: the benchmark shares a 2-core machine; one thread is the most
stable under contention) sets ``torch.set_num_threads`` and the BLAS/OpenMP variables of the
subprocesses. The load average before and after each (model, size) is recorded, and so is the
process's CPU time over the timed steps: ``cpu_share`` (CPU seconds per wall second, about
``--threads`` on an idle machine) and ``samples_per_cpu_s``, the figure to compare where other
processes took part of the cores (with one thread the CPU seconds are the work done, up to cache
and memory-bandwidth contention). The models are measured one after the other in one run;
``ratio_to_ono`` gives each model's samples/s over ONO's at the sizes both ran, per wall and per CPU
second. ``--update`` re-measures some models into an existing result (recorded under ``updates``).

``--smoke``: config/default.yaml + config/quick.yaml (the small models), tiny sizes, batch at most
2, one repeat, in-process; finishes in seconds and asserts nothing about timings; writes the
result only where ``--out`` says.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, status_kib, timed_repeats, utc_timestamp, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = "benchmarks/results/models_{device}.json"
#: opflow bench runs it once more on the GPU when one is present (benchmarks/results/models_cuda.json)
BENCH_GPU_ARGS = ["--device", "cuda"]


# --------------------------------------------------------------------------- input families


@dataclass(frozen=True)
class Family:
    """Synthetic inputs shaped like one kind of dataset, at ``sizes`` points per grid axis.

    ``kind``: ``grid`` (uniform tensor grid on [0, 1]^coord_dim, ``grid_shape`` passed),
    ``series`` (1D time grid on [0, t_final] passed as a point set, no ``grid_shape``) or ``cloud``
    (``size`` uniform random points in [0, 1]^coord_dim per sample, no ``grid_shape``).
    ``input_kind``: ``coefficient`` (Darcy's piecewise-constant a in {3, 12}, which the
    coefficient-weighted H1 regulariser reads), ``lognormal`` (exp of a standard normal per point)
    or ``gaussian``.
    """

    name: str
    kind: str
    coord_dim: int
    in_channels: int
    out_channels: int
    sizes: tuple[int, ...]
    smoke_sizes: tuple[int, ...]
    global_channels: int = 0
    t_final: float = 1.0
    input_kind: str = "gaussian"
    note: str = ""

    def points(self, size: int) -> int:
        return size**self.coord_dim if self.kind == "grid" else size


#: the families of the datasets the configured models train on
FAMILIES: dict[str, Family] = {
    "darcy2d": Family(
        "darcy2d", "grid", 2, 1, 1, (43, 61, 85, 141, 211), (11, 15), input_kind="coefficient",
        note="piecewise-constant coefficient (3 / 12) -> pressure on an s x s grid; 43, 61, 85, 141, 211 are strides of the 421 source grid (ONO Tables 1 and 3, Galerkin Transformer example 2)",
    ),
    "darcy_continuum2d": Family(
        "darcy_continuum2d", "grid", 2, 1, 1, (52, 104, 208, 416), (16, 32), input_kind="lognormal",
        note="lognormal or piecewise coefficient -> pressure on an s x s grid (continuum-attention protocol, Calvello et al. 2024, 64 and 416); multiples of 13, the patches per side of its ViTNO / FANO (patch 32 at 416)",
    ),
    "darcy_inverse2d": Family(
        "darcy_inverse2d", "grid", 2, 1, 1, (141, 211), (21, 31),
        note="noisy pressure on the fine s x s grid -> coefficient on the coarse grid (Galerkin Transformer example 3: 141 -> 36, 211 -> 71)",
    ),
    "burgers1d": Family(
        "burgers1d", "grid", 1, 1, 1, (1024, 2048, 8192), (64, 128),
        note="u0 -> u(., 1) on a uniform periodic grid of s points (Galerkin Transformer example 1; strides of the 8192 source grid)",
    ),
    "elasticity_cloud2d": Family(
        "elasticity_cloud2d", "cloud", 2, 0, 1, (972, 1944, 3888), (64, 128),
        note="a cloud of s points in the unit square -> the von Mises stress there, no input function (the Geo-FNO elasticity set's 972 Gauss points: elasticity972)",
    ),
    "ns2d": Family(
        "ns2d", "grid", 2, 10, 1, (64, 128, 256), (8, 16),
        note="the 10 latest vorticity frames -> the next on an s x s periodic grid (NS2d, nu 1e-5, at 64: ONO Table 1); one frame per step, as the pairs train (an unrolled step, training.unroll, makes 10 of them)",
    ),
    "lorenz63": Family(
        "lorenz63", "series", 1, 1, 2, (201, 401, 801), (11, 21), global_channels=2, t_final=2.0,
        note="task A {x(t), y(0), z(0)} -> {y(t), z(t)} on [0, 2] with s points (dt 0.01, 0.005, 0.0025)",
    ),
}


def family_of(config: Mapping[str, Any], dataset: str) -> str | None:
    """The :data:`FAMILIES` key of ``datasets.<dataset>`` (by its source's solver and its view), or None."""
    ds = (config.get("datasets") or {}).get(dataset) or {}
    solver = ((config.get("sources") or {}).get(ds.get("source")) or {}).get("solver")
    view = (ds.get("view") or {}).get("kind", "auto")
    if solver == "darcy_fd":
        params = ((config.get("sources") or {}).get(ds.get("source")) or {}).get("params") or {}
        # the continuum-attention sets: N(0, 12^2 (-Laplacian + 36 I)^-2), the FNO ones tau = 3
        plain = "darcy_continuum2d" if float(params.get("tau", 3.0)) != 3.0 else "darcy2d"
        return {"inverse": "darcy_inverse2d", "auto": plain, "grid": plain}.get(view)
    if solver == "burgers" and view in ("auto", "grid"):
        return "burgers1d"
    if solver == "navier_stokes" and view == "window" and int((ds.get("view") or {}).get("history", 0)) == 10:
        return "ns2d"
    if solver == "lorenz63" and view == "series":
        return "lorenz63"
    if solver == "elasticity" and view == "mesh" and not (ds.get("view") or {}).get("input_sets") and not (ds.get("task") or {}).get("inputs"):
        return "elasticity_cloud2d"
    return None


#: the dataset of a model that no ``targets`` entry names (config/default.yaml's comments)
NATURAL_DATASETS: dict[str, str] = {
    "ono_official": "darcy",
    "fno": "darcy",
    "fno_neuralop": "darcy_lognormal64",  # the continuum-attention paper's FNO (its published rows: log-normal Darcy, Kolmogorov)
    "deeponet": "darcy",
    "gt_inverse": "darcy_inverse141_eps0",
    "gt_inverse_regular": "darcy_inverse141_eps0",
    "ft_inverse": "darcy_inverse141_eps0",
    "ft_inverse_regular": "darcy_inverse141_eps0",
    "st_inverse": "darcy_inverse141_eps0",
    "st_inverse_regular": "darcy_inverse141_eps0",
    "lt_inverse": "darcy_inverse141_eps0",
    "lt_inverse_regular": "darcy_inverse141_eps0",
    "gt1d": "burgers",
    "ft1d": "burgers",
    "ft1d_regular": "burgers",
    "gt1d_regular": "burgers",
    "st1d_regular": "burgers",
    "lt1d_regular": "burgers",
    "st1d": "burgers",
    "lt1d": "burgers",
    "fno1d": "burgers",
    "fno1d_fnocode": "burgers",
    "fno1d_cao": "burgers",
}


def natural_dataset(config: Mapping[str, Any], model: str) -> tuple[str | None, str]:
    """``(dataset, how it was chosen)`` for ``model``: the first ``targets`` entry
    ``results/<dataset>_<model>.json`` whose dataset has a family, else :data:`NATURAL_DATASETS`,
    else ``darcy``; ``(None, why)`` when none of these has a family."""
    datasets = config.get("datasets") or {}
    pat = re.compile(rf"(?:^|/)results/(.+)_{re.escape(model)}\.json$")
    for t in config.get("targets") or []:
        m = pat.search(str(t))
        if m and m.group(1) in datasets and family_of(config, m.group(1)):
            return m.group(1), f"targets: {t}"
    for ds, how in ((NATURAL_DATASETS.get(model), "benchmarks.models.NATURAL_DATASETS"), ("darcy", "default (darcy)")):
        if ds and ds in datasets and family_of(config, ds):
            return ds, how
    return None, "no target, table entry or darcy dataset with a benchmark family"


# --------------------------------------------------------------------------- fits


def fit_exponent(points: Sequence[float], values: Sequence[float]) -> dict[str, float]:
    """Least-squares fit of ``values = c * points ** p`` in log-log: ``{"exponent": p, "prefactor": c}``.

    Needs at least two distinct positive ``points`` and positive ``values`` (ValueError otherwise).
    """
    if len(points) != len(values):
        raise ValueError(f"fit_exponent: {len(points)} points but {len(values)} values")
    if len(set(points)) < 2:
        raise ValueError("fit_exponent: needs at least two distinct sizes")
    if min(points) <= 0 or min(values) <= 0:
        raise ValueError("fit_exponent: points and values must be positive")
    x = [math.log(p) for p in points]
    y = [math.log(v) for v in values]
    mx, my = statistics.fmean(x), statistics.fmean(y)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
    return {"exponent": slope, "prefactor": math.exp(my - slope * mx)}


def predict_next(points: Sequence[float], values: Sequence[float], new_point: float) -> float:
    """``values`` extrapolated to ``new_point`` from the last measurement with the fitted exponent
    (at least 1: no model here gets cheaper per point as the grid grows; 1 with a single size)."""
    p = max(1.0, fit_exponent(points, values)["exponent"]) if len(set(points)) >= 2 else 1.0
    return values[-1] * (new_point / points[-1]) ** p


# --------------------------------------------------------------------------- memory


class PeakMemory:
    """Peak memory of a phase: see the module docstring (CUDA: max_memory_allocated)."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = device.startswith("cuda")
        self.torch = torch
        self.kind = "cuda max_memory_allocated" if self.cuda else self._cpu_kind()

    def _cpu_kind(self) -> str:
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            return "VmHWM - VmRSS (peak RSS reset by /proc/self/clear_refs, heap trimmed)"
        except OSError:
            return "ru_maxrss growth (peak RSS could not be reset: an underestimate if an earlier peak was higher)"

    def _rss(self) -> int:
        kib = status_kib("VmRSS")
        return 1024 * kib if kib is not None else 0

    def _hwm(self) -> int:
        if self.kind.startswith("VmHWM"):
            return 1024 * (status_kib("VmHWM") or 0)
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def start(self) -> None:
        gc.collect()
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()
            self.base = self.torch.cuda.memory_allocated()
            return
        from opflow.runtime import trim_cpu_heap

        trim_cpu_heap()
        if self.kind.startswith("VmHWM"):
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            self.base = self._rss()
        else:
            self.base = max(self._rss(), self._hwm())

    def peak(self) -> int:
        if self.cuda:
            self.torch.cuda.synchronize()
            return int(self.torch.cuda.max_memory_allocated() - self.base)
        return int(max(0, self._hwm() - self.base))


# --------------------------------------------------------------------------- one (model, size)


@dataclass
class Spec:
    """One measurement, passed to the child process as JSON."""

    model: str
    model_config: dict[str, Any]
    dataset: str
    family: str
    size: int
    batch_paper: int
    training: dict[str, Any]
    device: str = "cpu"
    threads: int = 1
    warmup: int = 1
    min_repeats: int = 3
    max_repeats: int = 10
    phase_s: float = 15.0
    max_step_s: float = 20.0
    max_batch: int | None = None
    memory_cap_bytes: int = 8 << 30
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _batch(fam: Family, size: int, batch: int, device: Any, gen: Any) -> dict[str, Any]:
    """Synthetic coords / inputs / globals of ``batch`` samples of family ``fam`` at ``size``."""
    import torch

    n = fam.points(size)
    if fam.kind == "grid":
        axes = [torch.linspace(0, 1, size)] * fam.coord_dim
        coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(1, n, fam.coord_dim)
        grid_shape: tuple[int, ...] | None = (size,) * fam.coord_dim
    elif fam.kind == "cloud":
        coords = torch.rand(batch, n, fam.coord_dim, generator=gen)
        grid_shape = None
    else:
        coords = torch.linspace(0, fam.t_final, size).reshape(1, n, 1)
        grid_shape = None
    coords = coords.expand(batch, n, fam.coord_dim).contiguous()
    if fam.input_kind == "coefficient":
        inputs = torch.where(torch.randn(batch, n, fam.in_channels, generator=gen) > 0, 12.0, 3.0)
    elif fam.input_kind == "lognormal":
        inputs = torch.randn(batch, n, fam.in_channels, generator=gen).exp()
    else:
        inputs = torch.randn(batch, n, fam.in_channels, generator=gen)
    g = torch.randn(batch, fam.global_channels, generator=gen) if fam.global_channels else None
    out = {"coords": coords.to(device), "inputs": inputs.to(device), "grid_shape": grid_shape, "points": n}
    out["globals"] = g.to(device) if g is not None else None
    return out


def _build(spec: Spec, fam: Family, n_points: int) -> tuple[Any, dict[str, Any]]:
    """The model for the family's data through :func:`opflow.train.build_for_data` (globals and
    DeepONet's sensor count set from the data, as a training run does)."""
    from types import SimpleNamespace

    import torch

    from opflow.train import build_for_data

    stand_in = SimpleNamespace(
        global_channels=fam.global_channels,
        global_names=[f"g{i}" for i in range(fam.global_channels)],
        inputs=torch.empty(1, n_points, fam.in_channels),
        in_channels=fam.in_channels,
        out_channels=fam.out_channels,
        coord_dim=fam.coord_dim,
    )
    model, cfg, _shape = build_for_data(spec.model_config, stand_in, where=f"models.{spec.model}")
    return model, cfg


def measure(spec: Spec) -> dict[str, Any]:
    """Train and inference throughput and peak memory of ``spec`` (see the module docstring)."""
    import torch

    from opflow.inference import accepts_globals
    from opflow.metrics import training_loss
    from opflow.models.base import count_parameters

    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    gen = torch.Generator().manual_seed(spec.seed)
    dev = torch.device(spec.device)
    fam = FAMILIES[spec.family]
    tr = spec.training
    mem = PeakMemory(spec.device)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    n = fam.points(spec.size)
    model, cfg = _build(spec, fam, n)
    model.to(dev)
    takes_globals = accepts_globals(model)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def make_opt() -> Any:
        optim = torch.optim.AdamW if tr["optimizer"] == "adamw" else torch.optim.Adam
        return optim(model.parameters(), lr=tr["lr"], weight_decay=tr["weight_decay"])

    def fns(b: dict[str, Any], opt: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
        x, extra = b["inputs"], {}
        if b["globals"] is not None:
            if takes_globals:
                extra = {"globals": b["globals"]}
            else:
                x = torch.cat([x, b["globals"][:, None, :].expand(-1, x.shape[1], -1)], -1)
        gs = b["grid_shape"]

        def fwd() -> Any:
            return model(b["coords"], x, grid_shape=gs, **extra)

        with torch.no_grad():
            target = torch.randn(fwd().shape, generator=gen).to(dev)
        same_points = target.shape[1] == b["coords"].shape[1]
        batch_n = x.shape[0]

        def train_step() -> None:
            opt.zero_grad(set_to_none=True)
            pred = fwd()
            loss = training_loss(
                tr["loss"], pred, target, coords=b["coords"] if same_points else None, grid_shape=gs if same_points else None,
                grad_weight=tr["grad_weight"] if same_points else 0.0, grad_form=tr["grad_form"], inputs=b["inputs"],
            )
            (loss * batch_n if tr["loss_reduction"] == "sum" else loss).backward()
            if tr["grad_clip"] is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"])
            opt.step()

        @torch.no_grad()
        def infer() -> None:
            fwd()

        return train_step, infer

    # probe at batch 1: cost of one sample (first calls included, so an overestimate)
    model.train()
    probe = _batch(fam, spec.size, 1, dev, gen)
    opt = make_opt()
    train1, infer1 = fns(probe, opt)
    if dev.type == "cuda":  # the first CUDA step (context, library handles, lazily loaded kernels) is no estimate of a step
        train1()
        sync()
    mem.start()
    t0 = time.perf_counter()
    train1()
    sync()
    probe_train_s = time.perf_counter() - t0
    probe_mem = mem.peak()
    batch, limits = spec.batch_paper, []
    if spec.max_batch is not None and batch > spec.max_batch:
        batch, limits = spec.max_batch, [f"--max-batch {spec.max_batch}"]
    by_time = max(1, int(spec.max_step_s // max(probe_train_s, 1e-9)))
    by_mem = max(1, int(spec.memory_cap_bytes // max(probe_mem, 1)))
    if by_time < batch:
        batch, limits = by_time, [f"a batch-1 training step took {probe_train_s:.3g} s (--max-step-s {spec.max_step_s:g})"]
    if by_mem < batch:
        batch, limits = by_mem, [f"a batch-1 training step used {probe_mem / 2**30:.3g} GiB (memory cap {spec.memory_cap_bytes / 2**30:.3g} GiB)"]
    del opt, train1, infer1, probe
    for p in model.parameters():
        p.grad = None

    b = _batch(fam, spec.size, batch, dev, gen)
    opt = make_opt()
    train_step, infer = fns(b, opt)

    def phase(step: Callable[[], Any], train: bool, warmup: int) -> dict[str, Any]:
        model.train(train)
        mem.start()
        t_first = []
        for _ in range(warmup):
            t_first += timed_repeats(step, 1, sync)
        est = t_first[-1] if t_first else probe_train_s * batch
        reps = int(min(spec.max_repeats, max(spec.min_repeats, round(spec.phase_s / max(est, 1e-9)))))
        cpu0 = time.process_time()
        times = timed_repeats(step, reps, sync)
        cpu = time.process_time() - cpu0
        peak = mem.peak()
        med = statistics.median(times)
        kernel = _kernel_s_per_step(step, min(reps, 10), sync) if dev.type == "cuda" else None
        return {
            "step_s": {"median": med, "min": min(times), "max": max(times), "all": times, "warmup": t_first},
            # the GPU's own work per step (torch.profiler's device events) and the wall over it: > 1.3 = host-bound
            "kernel_s": kernel,
            "wall_over_kernel": med / kernel if kernel else None,
            "repeats": reps,
            "s_per_sample": med / batch,
            "samples_per_s": batch / med,
            # CPU seconds of the process over wall seconds of the timed steps: about --threads on an
            # idle machine, less when other processes take the cores (then samples per CPU second,
            # reps * batch / cpu_s, is the less load-dependent figure)
            "cpu_share": cpu / sum(times),
            "samples_per_cpu_s": reps * batch / cpu if cpu > 0 else None,
            "peak_memory_bytes": peak,
            "peak_memory_per_sample_bytes": peak / batch,
        }

    load0 = loadavg()
    inference = phase(infer, False, spec.warmup)
    # at batch 1 the probe was the training warm-up (same shapes, first calls done)
    training = phase(train_step, True, 0 if batch == 1 and spec.warmup <= 1 else spec.warmup)
    return {
        "size": spec.size,
        "points": n,
        "batch": batch,
        "batch_paper": spec.batch_paper,
        "batch_limited_by": limits,
        "parameters": count_parameters(model),
        "param_bytes": param_bytes,
        "built_config": {k: v for k, v in cfg.items() if k not in spec.model_config or spec.model_config[k] != v},
        "probe_batch1": {"train_step_s": probe_train_s, "peak_memory_bytes": probe_mem},
        "train": training,
        "inference": inference,
        "peak_memory_kind": mem.kind,
        "loadavg": {"start": load0, "end": loadavg()},
    }


def _kernel_s_per_step(step: Callable[[], Any], n: int, sync: Callable[[], None]) -> float | None:
    """GPU kernel seconds per call of ``step`` over ``n`` calls (:func:`benchmarks.train_speed.kernel_seconds`)."""
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.train_speed import kernel_seconds

    if n < 1:
        return None
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        sync()
    return kernel_seconds(prof) / n


def _child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_child(spec: Spec, timeout_s: float) -> dict[str, Any]:
    """:func:`measure` in a fresh ``python -m benchmarks.models --child`` process; ``{"error": ...}`` on failure."""
    cmd = [sys.executable, "-m", "benchmarks.models", "--child", json.dumps(asdict(spec))]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, env=_child_env(spec.threads))
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within --timeout-s {timeout_s:g} s"}
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {r.returncode}: {tail}"}
    return json.loads(lines[-1])


def run_inline(spec: Spec) -> dict[str, Any]:
    try:
        return measure(spec)
    except Exception as e:  # the recorded reason of a skip
        return {"error": f"{type(e).__name__}: {e}"}


# --------------------------------------------------------------------------- the run


def plan(config: Mapping[str, Any], models: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``(entries, skipped)``: per model its dataset, family, paper batch and training settings."""
    from opflow.config import parse_workflow

    names = list(models) if models else list((config.get("models") or {}).keys())
    wf = parse_workflow(config)
    entries, skipped = [], {}
    for name in names:
        dataset, how = natural_dataset(config, name)
        if dataset is None:
            skipped[name] = how
            continue
        entry, tc = wf.model(name), wf.train_config(dataset, name)
        entries.append({
            "model": name,
            "model_config": {"arch": entry.arch, **entry.hparams()},
            "dataset": dataset,
            "dataset_from": how,
            "family": family_of(config, dataset),
            "batch_paper": tc.batch_size,
            "training": {k: getattr(tc, k) for k in ("optimizer", "lr", "weight_decay", "loss", "grad_weight", "grad_form", "loss_reduction", "grad_clip")},
        })
    return entries, skipped


def _exponents(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Fitted exponents in the number of points of the wall and CPU seconds per sample (training and
    inference) and of the training peak memory per sample."""
    pts = [r["points"] for r in rows]
    if len(set(pts)) < 2:
        return {"note": "fewer than two sizes measured"}
    out: dict[str, Any] = {"points": pts}
    for key, vals in (
        ("train_time", [r["train"]["s_per_sample"] for r in rows]),
        ("inference_time", [r["inference"]["s_per_sample"] for r in rows]),
        ("train_cpu_time", [1 / (r["train"]["samples_per_cpu_s"] or math.inf) for r in rows]),
        ("inference_cpu_time", [1 / (r["inference"]["samples_per_cpu_s"] or math.inf) for r in rows]),
        ("train_memory", [r["train"]["peak_memory_per_sample_bytes"] for r in rows]),
    ):
        if min(vals) > 0:
            out[key] = fit_exponent(pts, vals)["exponent"]
    return out


def _memory_available(device: str = "cpu") -> int | None:
    """Free memory of ``device``: ``MemAvailable`` of the host, or the free memory of the CUDA device."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configfile", action="append", default=None, help="config files, later ones winning (default: config/default.yaml)")
    ap.add_argument("--models", default=None, help="comma-separated model names (default: every models: entry)")
    ap.add_argument("--sizes", default=None, help="family=s1,s2;family=... overrides of the sizes, e.g. 'darcy2d=43,85'")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--min-repeats", type=int, default=3)
    ap.add_argument("--max-repeats", type=int, default=10)
    ap.add_argument("--phase-s", type=float, default=12.0, help="aimed seconds of timed steps per phase (sets the repeats)")
    ap.add_argument("--max-step-s", type=float, default=20.0, help="reduce the batch below the paper's when a step would take longer")
    ap.add_argument("--max-sample-s", type=float, default=40.0, help="skip a size predicted to take longer per training sample")
    ap.add_argument("--max-memory-gb", type=float, default=None, help="memory cap of a phase (default: half of MemAvailable at the start; on CUDA half of the GPU's free memory)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per (model, size) subprocess")
    ap.add_argument("--out", default=None, help=f"result JSON (default {DEFAULT_OUT}; the smoke run writes only with --out)")
    ap.add_argument("--update", action="store_true", help="merge into the existing --out file: re-measure only --models, keep the others")
    ap.add_argument("--markdown", action="store_true", help="print the README table at the end")
    ap.add_argument("--smoke", action="store_true", help="quick configs, tiny sizes, one repeat, in-process (seconds)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(measure(Spec(**json.loads(a.child)))))
        return 0

    from opflow.config import load_config_files

    files = a.configfile or ["config/default.yaml"] + (["config/quick.yaml"] if a.smoke else [])
    config = load_config_files([str(ROOT / f) if not os.path.isabs(f) else f for f in files])
    entries, skipped = plan(config, a.models.split(",") if a.models else None)
    sizes = {k: (f.smoke_sizes if a.smoke else f.sizes) for k, f in FAMILIES.items()}
    for part in filter(None, (a.sizes or "").split(";")):
        fam, _, vals = part.partition("=")
        if fam not in FAMILIES:
            ap.error(f"--sizes: unknown family {fam!r}; families: {sorted(FAMILIES)}")
        sizes[fam] = tuple(int(v) for v in vals.split(","))
    if a.smoke:
        a.warmup, a.min_repeats, a.max_repeats, a.phase_s = 1, 1, 1, 0.0

    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {a.device}: torch sees no CUDA device here; use --device cpu")
    avail = _memory_available(a.device)
    cap = int(a.max_memory_gb * 2**30) if a.max_memory_gb else int((avail or 8 << 30) // 2)

    load_start = loadavg()
    t_run = time.perf_counter()
    results: dict[str, Any] = {
        "benchmark": "models",
        "created": utc_timestamp(),
        "smoke": a.smoke,
        "configfiles": files,
        "device": a.device,
        "device_name": torch.cuda.get_device_name() if a.device.startswith("cuda") else None,
        "torch_threads": a.threads,
        "settings": {k: getattr(a, k) for k in ("warmup", "min_repeats", "max_repeats", "phase_s", "max_step_s", "max_sample_s", "timeout_s")}
        | {"memory_cap_bytes": cap, "memory_available_bytes": avail, "isolation": "in-process" if a.smoke else "one subprocess per (model, size)"},
        "families": {k: {**asdict(f), "sizes": list(sizes[k])} for k, f in FAMILIES.items()},
        "models": {},
        "skipped_models": dict(skipped),
    }
    partial_path = (Path(a.out) if os.path.isabs(a.out) else ROOT / a.out) if a.out and not a.update else None
    for e in entries:
        fam = FAMILIES[e["family"]]
        rows: list[dict[str, Any]] = []
        skipped_sizes: list[dict[str, Any]] = []
        for size in sizes[e["family"]]:
            pts = fam.points(size)
            if skipped_sizes:
                skipped_sizes.append({"size": size, "reason": "a smaller size was skipped or failed"})
                continue
            if rows:
                p_pts = [r["points"] for r in rows]
                t_pred = predict_next(p_pts, [r["train"]["s_per_sample"] for r in rows], pts)
                m_pred = predict_next(p_pts, [max(r["train"]["peak_memory_per_sample_bytes"], 1.0) for r in rows], pts)
                why = []
                if t_pred > a.max_sample_s:
                    why.append(f"predicted {t_pred:.3g} s per training sample > --max-sample-s {a.max_sample_s:g}")
                if m_pred > cap:
                    why.append(f"predicted {m_pred / 2**30:.3g} GiB per training sample > memory cap {cap / 2**30:.3g} GiB")
                if why:
                    skipped_sizes.append({"size": size, "reason": "; ".join(why)})
                    continue
            spec = Spec(
                model=e["model"], model_config=e["model_config"], dataset=e["dataset"], family=e["family"], size=size,
                batch_paper=e["batch_paper"], training=e["training"], device=a.device, threads=a.threads, warmup=a.warmup,
                min_repeats=a.min_repeats, max_repeats=a.max_repeats, phase_s=a.phase_s, max_step_s=a.max_step_s,
                max_batch=2 if a.smoke else None, memory_cap_bytes=cap,
            )
            r = run_inline(spec) if a.smoke else run_child(spec, a.timeout_s)
            if "error" in r:
                skipped_sizes.append({"size": size, "reason": r["error"]})
                print(f"{e['model']} at {size}: skipped ({r['error']})", flush=True)
                continue
            rows.append(r)
            print(
                f"{e['model']:>14} {e['family']} s={size:<5} batch {r['batch']:>2}/{r['batch_paper']:<2} "
                f"train {r['train']['samples_per_s']:9.4g}/s  infer {r['inference']['samples_per_s']:9.4g}/s  "
                f"peak {r['train']['peak_memory_bytes'] / 2**20:8.1f} MiB  load {r['loadavg']['end']}",
                flush=True,
            )
        results["models"][e["model"]] = {
            **{k: e[k] for k in ("dataset", "dataset_from", "family", "model_config", "batch_paper", "training")},
            "sizes": rows,
            "skipped_sizes": skipped_sizes,
            "exponent": _exponents(rows),
        }
        if partial_path is not None:  # after every model, so that a time-out keeps the finished ones
            write_json_atomic(partial_path, {**results, "partial": True})
    results["wall_s"] = time.perf_counter() - t_run
    results["machine"] = machine(load_start, packages=["torch", "numpy"], torch_threads=a.threads)
    out = a.out or (None if a.smoke else DEFAULT_OUT.format(device=a.device.split(":")[0]))
    path = (Path(out) if os.path.isabs(out) else ROOT / out) if out else None
    if a.update and path is not None and path.exists():
        results = merge_update(json.loads(path.read_text()), results)
    results["ratio_to_ono"] = ratios(results["models"], "ono")
    if a.markdown or a.smoke:
        print(markdown_table(results))
    if path is not None:
        write_json_atomic(path, results)
        print(f"wrote {out}")
    return 0


def merge_update(old: dict[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` with the models of the later run ``new`` replaced or added; the later run's time,
    load and settings are kept under ``updates`` (its models are measured in a different run: compare
    their ratios to the others with that in mind)."""
    merged = dict(old)
    merged["models"] = {**old.get("models", {}), **new["models"]}
    merged["skipped_models"] = {k: v for k, v in {**old.get("skipped_models", {}), **new["skipped_models"]}.items() if k not in new["models"]}
    merged["families"] = {**old.get("families", {}), **new["families"]}
    keep = ("created", "configfiles", "torch_threads", "settings", "wall_s", "machine")
    merged["updates"] = [*old.get("updates", []), {"models": sorted(new["models"]), **{k: new[k] for k in keep}}]
    return merged


def ratios(models: Mapping[str, Any], base: str) -> dict[str, Any]:
    """Per size that ``base`` was measured at: each model's train and inference samples/s over ``base``'s,
    per wall second and per CPU second of the process (the latter less sensitive to other processes'
    load: with one thread the CPU seconds are the work done); same family only, ``{}`` without ``base``."""
    if base not in models:
        return {}
    ref = {r["size"]: r for r in models[base]["sizes"]}
    out: dict[str, Any] = {}
    for name, m in models.items():
        if name == base or m["family"] != models[base]["family"]:
            continue
        for r in m["sizes"]:
            if r["size"] in ref:
                b = ref[r["size"]]
                row = {ph: r[ph]["samples_per_s"] / b[ph]["samples_per_s"] for ph in ("train", "inference")}
                for ph in ("train", "inference"):
                    if r[ph].get("samples_per_cpu_s") and b[ph].get("samples_per_cpu_s"):
                        row[f"{ph}_per_cpu_s"] = r[ph]["samples_per_cpu_s"] / b[ph]["samples_per_cpu_s"]
                out.setdefault(name, {})[str(r["size"])] = row
    return out


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB" if b >= 2**20 else f"{b / 2**10:,.0f} KiB"


def markdown_table(results: Mapping[str, Any]) -> str:
    """The README table: one row per (model, size), the exponents on the model's first row.

    Samples/s are per wall second, with per CPU second of the process in brackets (the figure to
    compare when the load differed between rows: ``cpu_share`` below the thread count)."""
    lines = [
        "| model | dataset | params | size | batch (paper) | train samples/s (per CPU s) | inference samples/s (per CPU s) | CPU share | peak train memory | exponent: train wall / train CPU / inference CPU / memory |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---|",
    ]

    def rate(ph: Mapping[str, Any]) -> str:
        cpu = ph.get("samples_per_cpu_s")
        return f"{ph['samples_per_s']:.3g}" + (f" ({cpu:.3g})" if cpu else "")

    for name, m in results["models"].items():
        ex = m["exponent"]
        ex_s = " / ".join(f"{ex[k]:.2f}" if k in ex else "-" for k in ("train_time", "train_cpu_time", "inference_cpu_time", "train_memory"))
        fam = FAMILIES.get(m["family"])
        for i, r in enumerate(m["sizes"]):
            size = f"{r['size']}^2" if fam is not None and fam.kind == "grid" and fam.coord_dim == 2 else str(r["size"])
            lines.append(
                f"| {name if i == 0 else ''} | {m['dataset'] if i == 0 else ''} | {r['parameters']:,} | {size} | {r['batch']} ({r['batch_paper']}) | "
                f"{rate(r['train'])} | {rate(r['inference'])} | {r['train'].get('cpu_share', float('nan')):.2f} | "
                f"{_mib(r['train']['peak_memory_bytes'])} | {ex_s if i == 0 else ''} |"
            )
        for s in m["skipped_sizes"]:
            lines.append(f"| {name if not m['sizes'] else ''} | | | {s['size']} | | skipped: {s['reason']} | | | | |")
    for name, why in results.get("skipped_models", {}).items():
        lines.append(f"| {name} | | | | | skipped: {why} | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
