"""Cost on this CPU of every published training protocol of the paper profile: epochs, training samples, batch, s/epoch, hours.

    python -m benchmarks.protocol_cost [--configfile config/default.yaml ...] [--pairs darcy/ono,lorenz63/tno]
                                       [--threads 2] [--out benchmarks/results/protocol_cost.json] [--smoke]

Which protocols. The (dataset, model) pairs of the config's ``targets`` (``results/<dataset>_<model>.json``,
split as the workflow's wildcards split it: the longest dataset and model names first) and of every
entry ``<dataset>/<model>/<statistic>`` of ``config/reference.yaml`` (read by
:func:`opflow.reference.load_reference`) whose dataset and model are configured: every pair the
profile trains or has a published number for (:func:`published_protocols`).

What a protocol is. Its run config resolved as the workflow resolves it (:func:`opflow.config.resolve_run`:
``training`` < ``models.<m>.training`` < ``datasets.<d>.training`` < ``runs.<d>/<m>.training``, merged by
:meth:`opflow.config.WorkflowConfig.train_config`): the epochs, batch size, optimiser, loss (and
derivative regulariser), its reduction, clipping and normalisers, the model at its paper
configuration, the dataset's task and view. The training samples are the view's training items:
``datasets.<d>.train`` samples, times the teacher-forced pairs per trajectory for ``window`` views
(NS: 1000 x 10 target frames = 10,000 pairs; ``ns_v1e-5_tgen``: 1000 x 8), or the trajectories
themselves under unrolled training (``training.unroll``: 1000, each step predicting its 10 frames).

The data: synthetic values, real shapes, the real pipeline. No solver runs. Per source, the
generator is built from the config (its ``dims()`` and ``fields()``: grid size, frames, mesh nodes,
channels, dtypes) and its ``generate`` replaced by random values of those shapes (positive floats,
counts equal to their dimension, random connectivity); :func:`solvers.generate.write_shard` writes
that shard and :func:`opflow.data.transforms.derive` subsamples it to the dataset's resolution and
splits (the workflow's own two steps), and :func:`opflow.data.views.make_dataset` reads it through
the dataset's view (grid, series with globals, mesh with input sets, window pairs and rollouts,
one_step, inverse with its coarse query grid). The synthetic file holds one protocol batch of
training items and one of test samples.

What is timed. The workflow's trainer itself (:class:`opflow.train.Trainer`: ``setup`` builds the
model through :func:`opflow.train.build_for_data`, the normalisers, the optimiser and the schedule),
one training step being one :meth:`~opflow.train.Trainer.epoch` over a list holding one collated
batch of the protocol's size: forward, loss (with its regulariser), backward, clipping, optimiser
and scheduler step, exactly the code of a training run (the test evaluation switched off by
``eval_every``; the data loader, which only cuts and collates tensors already in memory, is not
timed). ``torch.set_num_threads(--threads)`` (default 2, and the BLAS/OpenMP variables of the
child process).

* probe: one step at batch 1 (the first call, so also a warm-up); its time and peak memory
  (:class:`benchmarks.models.PeakMemory`) times the batch predict the protocol step;
  when it took at most 10 s a second, warm batch-1 step replaces it in these predictions;
* predicted step above ``--max-step-s`` (default 240 s) or memory above the cap (0.6 of
  ``MemAvailable`` at the start; the children run one at a time): not measured at the protocol
  batch, with the reason; a warm batch-1 step (the second probe, or one more step when the probe
  took at most 60 s) is recorded as ``batch1_step_s``, with ``batch1_x_batch_s`` = batch times it:
  an extrapolation, kept apart from the measured numbers. The child's address space is limited to
  the cap plus :data:`ADDRESS_SPACE_SLACK`, so a batch-1 step that does not fit fails with an
  allocation error in the child instead of waking the kernel's out-of-memory killer;
* otherwise one warm-up step at the protocol batch (four when it took under 1 s; none when the
  probe predicts over 60 s: the probe warmed the code paths), whose time sets the timed steps
  (:func:`benchmarks.common.timed_repeats`): about ``--phase-s`` seconds of them, 3 to 10; a step
  over 20 s: 2 timed steps, over 60 s: 1 (both marked ``few_steps``); the median is the step time;
* then, with ``--compare-threads N`` (default 1), one warm-up and the timed steps again with N
  threads (skipped when that warm-up step takes over ``--compare-max-step-s``): on a shared 2-core
  machine two OpenMP threads can be many times slower than one (a thread waits for the other's
  core at every parallel region), and the comparison shows how much of a 2-thread time is that.

s/epoch = ceil(train samples / batch) x the median step (``steps_per_epoch``: the loader keeps the
last, smaller batch, so ceil); hours = epochs x s/epoch / 3600. The test evaluation that a run makes
every ``eval_every`` epochs (every epoch in the paper profile; a rollout of whole trajectories for
``window`` views) is timed too on one test batch (:func:`opflow.inference.test_errors`: the median
of 2-3 calls after up to 4 warm-up calls; one call where a step or the first call takes over 20 s) and reported
apart (``eval_s_per_epoch``, ``eval_share``); the final evaluation (test split, zero-shot
resolutions, eval sets) runs once and is not counted. Pairs whose step is the same computation
(same model, training settings, view kind and item shapes: the three noise levels of an inverse
set, ``ns_v1e-5`` / ``ns_v1e-5_tgen``, the lognormal / piecewise 416 sets) are measured once and
the others carry ``measured_with``.

Each measurement runs in its own ``python -m benchmarks.protocol_cost --child`` process (its own
peak memory and a time-out, ``--timeout-s``); the load average before and after each, and the
process CPU time over the timed steps (``cpu_share``: CPU seconds per wall second, about
``--threads`` on an idle machine), are recorded: the machine is shared.

The result is written after every protocol (``"complete": false`` until the end); ``--resume``
keeps the measurements of such an interrupted file (same config files and threads) and measures the
rest.

``--smoke``: config/default.yaml + config/quick.yaml (the small models), a handful of pairs that
cover the view kinds (:data:`SMOKE_PAIRS`), batch at most 2, one step, in-process; seconds, no claim
about timings; writes the result only where ``--out`` says.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, timed_repeats, utc_timestamp, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = "benchmarks/results/protocol_cost.json"
REFERENCE = "config/reference.yaml"
#: the wall-clock budget a protocol is compared with (the "fits" column: training and its per-epoch evaluations)
FIT_HOURS = 2.5
EVALUATION_NOTE = (
    "hours = epochs x s/epoch (training steps only). The per-epoch test evaluation (eval_every; a rollout for window views) "
    "is timed apart: eval_s_per_epoch, eval_share, hours_with_eval; the one final evaluation after training is not counted. "
    "fits: hours_with_eval (hours where the evaluation was not timed) <= fit_hours."
)
#: address space a child may take beyond the memory cap (the interpreter, torch's libraries and thread
#: stacks reserve a few GiB of virtual memory that is never resident)
ADDRESS_SPACE_SLACK = 6 << 30
#: the default memory cap of a step: this part of MemAvailable at the start (the children run one at a time)
MEMORY_FRACTION = 0.6
#: one pair per view kind (grid 2D / 1D, inverse, series + globals, window, one_step, mesh + input sets)
SMOKE_PAIRS = (
    ("darcy", "ono"),
    ("burgers512", "fno1d"),
    ("darcy_inverse141_eps0", "gt_inverse"),
    ("lorenz63", "tno"),
    ("ns_v1e-5", "fno"),
    ("kolmogorov", "vitno"),
    ("elasticity_multi", "gnot"),
)
#: the training settings that change what a step computes (the dedupe key, with model, view and shapes)
STEP_KEYS = (
    "batch_size", "optimizer", "weight_decay", "loss", "grad_weight", "grad_form", "loss_space", "loss_reduction",
    "grad_clip", "input_normalizer", "output_normalizer", "scheduler", "precision",
)


def _step_training(tc: Mapping[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The training keys a protocol's step depends on (``unroll`` only when set: the stored keys of
    the pair-trained protocols stay as they were)."""
    out = {k: tc.get(k) for k in STEP_KEYS + extra}
    if tc.get("unroll", "none") != "none":
        out["unroll"] = tc["unroll"]
    return out


# --------------------------------------------------------------------------- which protocols


def published_protocols(config: Mapping[str, Any], reference: str | os.PathLike[str] | None) -> list[dict[str, Any]]:
    """The (dataset, model) pairs of ``targets`` and of the published numbers of ``reference``, in
    that order: ``{"dataset", "model", "target", "reference": [entries]}``; reference keys whose dataset
    or model this config lacks (published baselines opflow does not have) are left out."""
    from opflow.reference import load_reference

    datasets, models = config.get("datasets") or {}, config.get("models") or {}
    alt = lambda names: "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))  # noqa: E731
    pat = re.compile(rf"(?:^|/)results/({alt(datasets)})_({alt(models)})\.json$")
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for t in config.get("targets") or []:
        m = pat.search(str(t))
        if m:
            pairs.setdefault((m.group(1), m.group(2)), {"dataset": m.group(1), "model": m.group(2), "target": True, "reference": []})
    for e in load_reference(reference) if reference else []:
        if e.dataset in datasets and e.model in models:
            p = pairs.setdefault((e.dataset, e.model), {"dataset": e.dataset, "model": e.model, "target": False, "reference": []})
            p["reference"].append({"key": e.key, "paper": e.paper, "table": e.table, "value": e.value, "relation": e.relation})
    return list(pairs.values())


def reference_label(refs: Sequence[Mapping[str, Any]]) -> str:
    """``paper: table; ...`` of a pair's published numbers (each distinct table once)."""
    seen: dict[str, None] = {}
    for r in refs:
        seen.setdefault(f"{r['paper']}: {r['table']}", None)
    return "; ".join(seen) if seen else "none (target only)"


# --------------------------------------------------------------------------- synthetic data


def _fake_generate(gen: Any) -> Any:
    """``gen.generate`` replaced by random arrays of its fields' shapes and dtypes (module docstring)."""
    import numpy as np

    dims, fields = gen.dims(), gen.fields()

    def generate(seed: int, idx: Any) -> dict[str, Any]:
        rng = np.random.default_rng([seed, int(idx[0])])
        out = {}
        for name, f in fields.items():
            shape = (len(idx), *[dims[d] for d in f.dims])
            dt = np.dtype(f.dtype)
            if dt.kind in "iu":
                if name.endswith("_count") and name[: -len("_count")] in dims:  # every point / cell real
                    a = np.full(shape, dims[name[: -len("_count")]], dt)
                elif "node" in dims:  # connectivity
                    a = rng.integers(0, dims["node"], shape).astype(dt)
                else:
                    a = np.zeros(shape, dt)
            elif f.role == "coordinate":
                a = rng.random(shape).astype(dt)
            else:
                a = (1.0 + rng.random(shape)).astype(dt)  # positive, never zero: relative errors, H1 weights
            out[name] = a
        return out

    gen.generate = generate
    return gen


def synthetic_source(wf: Any, source: str, n: int, folder: Path) -> Path:
    """A shard of ``n`` synthetic samples of ``sources.<source>`` (:func:`solvers.generate.write_shard`)."""
    from solvers.base import get_generator
    from solvers.generate import write_shard

    src = wf.sources[source]
    gen = _fake_generate(get_generator(src.solver).from_config(src.params, where=f"sources.{source}.params"))
    return write_shard(gen, src.seed, 0, n, folder / f"{source}-{n}.nc", progress=False)


def synthetic_dataset(wf: Any, dataset: str, n_train: int, n_test: int, folder: Path, shards: Mapping[str, Path]) -> Path:
    """The derived file of ``dataset`` (its resolution, ``n_train`` + ``n_test`` samples) from its source's shard."""
    from opflow.data.transforms import derive

    ds = wf.datasets[dataset]
    out = folder / f"{dataset}-{n_train}-{n_test}.nc"
    if not out.exists():
        derive(shards[ds.source], out, resolution=ds.resolution, n_train=n_train, n_test=n_test, name=dataset)
    return out


def _shape(v: Any) -> Any:
    return list(v.shape) if hasattr(v, "shape") else v


def item_shapes(ds: Any) -> dict[str, Any]:
    """Shapes of a dataset's first item (the dedupe key and the record)."""
    it = ds[0]
    out = {k: _shape(v) for k, v in it.items() if k not in ("index", "input_sets")}
    if it.get("input_sets"):
        out["input_sets"] = [{k: _shape(v) for k, v in s.items()} for s in it["input_sets"]]
    return out


# --------------------------------------------------------------------------- the plan


def plan(config: Mapping[str, Any], pairs: Sequence[Mapping[str, Any]], folder: Path, *, smoke_batch: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per pair: the resolved run, the protocol's numbers, a synthetic data file and the dedupe key.

    Returns ``(entries, failed)``; an entry's ``spec`` is what the child process measures."""
    from opflow.config import parse_workflow, resolve_run
    from opflow.data.views import make_dataset, training_purpose

    wf = parse_workflow(config)
    runs, failed = [], []
    for p in pairs:
        d, m = p["dataset"], p["model"]
        try:
            run = resolve_run(wf, d, m)
        except Exception as e:  # a pair the config cannot resolve: recorded, not measured
            failed.append({**p, "error": f"resolve_run: {type(e).__name__}: {e}"})
            continue
        batch = int(run["training"]["batch_size"])
        if smoke_batch is not None:
            batch = min(batch, smoke_batch)
            run["training"]["batch_size"] = batch
        runs.append((p, run, batch))
    # one shard per source, as large as its largest (train + test) file
    need: dict[str, int] = {}
    for p, run, batch in runs:
        ds = wf.datasets[p["dataset"]]
        need[ds.source] = max(need.get(ds.source, 0), batch + min(batch, ds.test))
    shards: dict[str, Path] = {}
    for src, n in need.items():
        shards[src] = synthetic_source(wf, src, n, folder)
    entries = []
    for p, run, batch in runs:
        d, m = p["dataset"], p["model"]
        ds = wf.datasets[d]
        n_file_test = min(batch, ds.test)
        try:
            path = synthetic_dataset(wf, d, batch, n_file_test, folder, shards)
            view = run.get("view")
            tr = make_dataset(path, "train", run.get("task"), view, purpose=training_purpose(run["training"].get("unroll")))
            te = make_dataset(path, "test", tr.task, view, purpose="rollout")
        except Exception as e:
            failed.append({**p, "error": f"synthetic data: {type(e).__name__}: {e}"})
            continue
        per_sample = len(tr) / batch  # training items per sample: teacher-forced pairs of a window view (1: unrolled trajectories)
        n_train = int(round(per_sample * ds.train))
        steps = math.ceil(n_train / batch)
        tc = run["training"]
        test_item = item_shapes(te)
        shapes = {"train_item": item_shapes(tr), "test_item": test_item}
        key = json.dumps(
            {"model": m, "model_config": run["model_config"], "training": _step_training(tc),
             "view": getattr(tr, "kind", None), "shapes": shapes},
            sort_keys=True, default=str,
        )
        entries.append({
            **p,
            "epochs": int(tc["epochs"]),
            "batch": batch,
            "train_samples": n_train,
            "train_items_per_sample": per_sample,
            "dataset_train": ds.train,
            "test_samples": ds.test,
            "eval_every": int(tc["eval_every"]),
            "steps_per_epoch": steps,
            "eval_batches": math.ceil(ds.test / batch),
            "rollout_steps": int(test_item.get("rollout_steps") or 0),
            "view": getattr(tr, "kind", None),
            "shapes": shapes,
            "training": _step_training(tc, ("epochs", "lr", "scheduler")),
            "model_config": run["model_config"],
            "key": key,
            "spec": {"run": run, "data": str(path)},
        })
    return entries, failed


# --------------------------------------------------------------------------- one measurement


def measure(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Time the protocol's training step through the workflow's Trainer (module docstring)."""
    import torch

    from benchmarks.models import PeakMemory
    from opflow.config import TrainConfig
    from opflow.data.torch_data import make_loader
    from opflow.inference import test_errors
    from opflow.models.base import count_parameters
    from opflow.runtime import DistInfo
    from opflow.train import Trainer

    threads, s = int(spec["threads"]), spec["settings"]
    torch.set_num_threads(threads)
    run = json.loads(json.dumps(spec["run"]))  # a copy
    tr = run["training"]
    # OneCycle's length and the "last epoch evaluates" rule only: the timed steps never reach either
    tr.update({"epochs": max(int(tr["epochs"]), 1000), "eval_every": 10**9, "device": "cpu", "data_on_device": False, "num_workers": 0, "threads": threads})
    cfg = TrainConfig.from_dict(tr, "run.training")
    batch = cfg.batch_size
    load0 = loadavg()
    with tempfile.TemporaryDirectory(prefix="protocol_cost_", dir=spec.get("work_root")) as work:
        t0 = time.perf_counter()
        trainer = Trainer(run, cfg, DistInfo(), torch.device("cpu"), spec["data"], work, progress=False)
        trainer.setup()
        trainer.resume(restart=True)
        setup_s = time.perf_counter() - t0
        full = next(iter(trainer.loader))
        one = next(iter(make_loader(trainer.train_ds, 1, shuffle=False)[0]))
        test_batch = next(iter(trainer.test_loader))
        if full["inputs"].shape[0] != batch:
            raise RuntimeError(f"the synthetic training split gave a batch of {full['inputs'].shape[0]}, not {batch}")
        out: dict[str, Any] = {"parameters": count_parameters(trainer.model), "setup_s": setup_s, "threads": torch.get_num_threads()}

        def save() -> None:  # what is measured so far, for the parent when this process runs out of time
            if spec.get("progress"):
                Path(spec["progress"]).write_text(json.dumps(out))

        def step_with(b: Any) -> Any:
            def step() -> None:
                trainer.train_batches = [b]
                trainer.epoch(0)

            return step

        mem = PeakMemory("cpu")
        mem.start()
        probe_s = timed_repeats(step_with(one), 1)[0]
        probe_mem = mem.peak()
        out["probe_batch1"] = {"step_s": probe_s, "peak_memory_bytes": probe_mem, "note": "first call: includes the warm-up"}
        save()
        if probe_s <= 10:  # a second, warm batch-1 step: the first call's one-time costs times the batch mislead
            mem.start()
            warm_s = timed_repeats(step_with(one), 1)[0]
            out["probe_batch1_warm"] = {"step_s": warm_s, "peak_memory_bytes": mem.peak()}
            probe_s, probe_mem = warm_s, out["probe_batch1_warm"]["peak_memory_bytes"] or probe_mem
        pred_s, pred_mem = probe_s * batch, probe_mem * batch
        why = []
        if batch > 1 and pred_s > s["max_step_s"]:
            why.append(f"a batch-1 step took {probe_s:.3g} s: a step of batch {batch} would take about {pred_s:.0f} s > --max-step-s {s['max_step_s']:g}")
        if batch > 1 and pred_mem > s["memory_cap_bytes"]:
            why.append(f"a batch-1 step used {probe_mem / 2**30:.3g} GiB: batch {batch} would need about {pred_mem / 2**30:.3g} GiB > the cap {s['memory_cap_bytes'] / 2**30:.3g} GiB")
        if why:
            out["not_measured"] = "; ".join(why)
            if "probe_batch1_warm" in out or probe_s <= 60:
                b1 = out["probe_batch1_warm"]["step_s"] if "probe_batch1_warm" in out else timed_repeats(step_with(one), 1)[0]
                out["batch1_step_s"] = b1
                out["batch1_x_batch_s"] = b1 * batch
            out["loadavg"] = {"start": load0, "end": loadavg()}
            return out
        # warm-up at the protocol batch (its time is the estimate that sets the repeats); none where
        # the probe predicts over 60 s (one timed step, warmed by the probe) or the batch is 1 (the probe was it)
        est = pred_s
        warm = [] if batch == 1 or pred_s > 60 else timed_repeats(step_with(full), 1)
        if warm and warm[-1] < 1:  # cheap steps: the first few calls of a mode can be many times slower
            warm += timed_repeats(step_with(full), 3)
        est = warm[-1] if warm else est
        if est > 60:
            reps, few = 1, True
        elif est > 20:
            reps, few = 2, True
        else:
            reps, few = int(min(s["max_repeats"], max(s["min_repeats"], round(s["phase_s"] / max(est, 1e-9))))), False
        mem.start()
        load_t0 = loadavg()
        cpu0 = time.process_time()
        times = timed_repeats(step_with(full), reps)
        cpu = time.process_time() - cpu0
        out.update({
            "step_s": {"median": statistics.median(times), "min": min(times), "max": max(times), "all": times, "warmup": warm},
            "timed_steps": reps,
            "few_steps": few,
            "cpu_share": cpu / sum(times),
            "peak_memory_bytes": mem.peak(),
            "loadavg_timed": {"start": load_t0, "end": loadavg()},
        })
        save()
        # the same steps with --compare-threads (the cores are shared: one thread can beat two)
        cmp_n = s.get("compare_threads")
        if cmp_n and cmp_n != threads:
            torch.set_num_threads(int(cmp_n))
            c_warm = timed_repeats(step_with(full), 1)[0]
            if c_warm <= s["compare_max_step_s"]:
                c_reps = 2 if c_warm > 20 else int(min(s["max_repeats"], max(s["min_repeats"], round(s["phase_s"] / max(c_warm, 1e-9)))))
                cpu0 = time.process_time()
                c_times = timed_repeats(step_with(full), c_reps)
                cpu = time.process_time() - cpu0
                out["compare_threads"] = {
                    "threads": int(cmp_n), "step_s": {"median": statistics.median(c_times), "min": min(c_times), "max": max(c_times), "all": c_times, "warmup": [c_warm]},
                    "cpu_share": cpu / sum(c_times), "loadavg_end": loadavg(),
                }
            else:
                out["compare_threads_skipped"] = f"its warm-up step took {c_warm:.3g} s > --compare-max-step-s {s['compare_max_step_s']:g}"
            torch.set_num_threads(threads)
        # the test evaluation of an epoch, on one test batch (a rollout for window views)
        ev = []
        if s["eval"]:
            one_eval = lambda: test_errors(trainer.model, [test_batch], trainer.norms, trainer.dev)  # noqa: E731
            first = timed_repeats(one_eval, 1)[0]
            if first > 20 or out["step_s"]["median"] > 20:
                ev = [first]
            else:  # the first few eval-mode calls can be many times slower than the rest
                if first < 2:
                    timed_repeats(one_eval, 3)
                ev = timed_repeats(one_eval, 3 if first < 2 else 2)
            out["eval_first_s"] = first
        out["eval_batch_s"] = statistics.median(ev) if ev else None
        out["eval_batch_samples"] = int(test_batch["inputs"].shape[0])
        out["loadavg"] = {"start": load0, "end": loadavg()}
        return out


def _child_env(threads: int) -> dict[str, str]:
    from benchmarks.models import _child_env as env

    return env(threads)


def run_child(spec: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """:func:`measure` in a fresh process; ``{"error": ...}`` on failure or time-out (with what it
    had measured by then: the probe, the timed steps before the evaluation)."""
    progress = Path(tempfile.mkstemp(prefix="protocol_cost_", suffix=".json")[1])
    spec_file = progress.with_name(progress.stem + "_spec.json")
    spec_file.write_text(json.dumps({**spec, "progress": str(progress)}))
    cmd = [sys.executable, "-m", "benchmarks.protocol_cost", "--child", str(spec_file)]
    limit = int(spec["settings"]["memory_cap_bytes"]) + ADDRESS_SPACE_SLACK

    def cap_memory() -> None:  # an allocation past the cap fails in the child (an error), before the OOM killer picks a process
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        try:
            r = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, env=_child_env(int(spec["threads"])), preexec_fn=cap_memory
            )
        except subprocess.TimeoutExpired:
            partial = partial_of(progress)
            why = f"did not finish within --timeout-s {timeout_s:g} s"
            if "step_s" in partial:  # the timed steps are done; the comparison or the evaluation ran out of time
                return {**partial, "incomplete": why, "loadavg": {"start": None, "end": loadavg()}}
            return {**partial, "error": why}
        lines = r.stdout.strip().splitlines()
        if r.returncode != 0 or not lines:
            tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            if r.returncode < 0:
                tail = f"killed by signal {-r.returncode}{' (most likely out of memory)' if r.returncode == -9 else ''}; {tail}"
            return {**partial_of(progress), "error": f"exit {r.returncode}: {tail}"}
        return json.loads(lines[-1])
    finally:
        spec_file.unlink(missing_ok=True)
        progress.unlink(missing_ok=True)


def partial_of(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        return {}


def run_inline(spec: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return measure(spec)
    except Exception as e:  # the recorded reason
        return {"error": f"{type(e).__name__}: {e}"}


# --------------------------------------------------------------------------- records and tables


def record(entry: Mapping[str, Any], r: Mapping[str, Any], measured_with: str | None = None) -> dict[str, Any]:
    """One protocol's row of the result: its numbers, what was measured, s/epoch and hours."""
    rec = {k: v for k, v in entry.items() if k not in ("spec", "key")}
    rec["reference_label"] = reference_label(entry["reference"])
    rec["measured_with"] = measured_with
    rec["measurement"] = dict(r)
    med = (r.get("step_s") or {}).get("median")
    rec["step_s"] = med
    rec["parameters"] = r.get("parameters")
    rec["timed_steps"] = r.get("timed_steps", 0)
    rec["few_steps"] = r.get("few_steps", False)
    if med is None:
        rec["s_per_epoch"] = rec["hours"] = rec["fits"] = None
        rec["not_measured"] = r.get("not_measured") or r.get("error") or "not measured"
        if r.get("batch1_x_batch_s"):
            est_epoch = entry["steps_per_epoch"] * r["batch1_x_batch_s"]
            rec["extrapolated"] = {
                "from": "a warm batch-1 step times the batch (not measured at the protocol batch)",
                "s_per_epoch": est_epoch,
                "hours": entry["epochs"] * est_epoch / 3600,
            }
        return rec
    s_epoch = entry["steps_per_epoch"] * med
    rec["s_per_epoch"] = s_epoch
    rec["hours"] = entry["epochs"] * s_epoch / 3600
    c = r.get("compare_threads")
    if c:
        rec["compare_threads"] = {
            "threads": c["threads"], "step_s": c["step_s"]["median"], "s_per_epoch": entry["steps_per_epoch"] * c["step_s"]["median"],
            "hours": entry["epochs"] * entry["steps_per_epoch"] * c["step_s"]["median"] / 3600,
        }
    if r.get("eval_batch_s") is not None:
        ev = entry["eval_batches"] * r["eval_batch_s"]
        rec["eval_s_per_epoch"] = ev / entry["eval_every"]
        rec["eval_share"] = rec["eval_s_per_epoch"] / s_epoch
        rec["hours_with_eval"] = entry["epochs"] * (s_epoch + rec["eval_s_per_epoch"]) / 3600
    rec["fits"] = rec.get("hours_with_eval", rec["hours"]) <= FIT_HOURS  # the whole run: its evaluations too
    return rec


#: the fields :func:`record` derives from a protocol's measurement (the rest of a row is its entry)
DERIVED = (
    "reference_label", "measured_with", "measurement", "step_s", "parameters", "timed_steps", "few_steps", "s_per_epoch",
    "hours", "fits", "not_measured", "extrapolated", "compare_threads", "eval_s_per_epoch", "eval_share", "hours_with_eval",
)


def rederive(result: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` with every row's derived fields (s/epoch, hours, fits, ...) computed again by
    :func:`record` from its stored measurement: a stored result read with this version's rules. The
    measurements and the entries are kept as they are."""
    out = dict(result)
    rows = []
    for row in result.get("protocols", []):
        entry = {k: v for k, v in row.items() if k not in DERIVED}
        rows.append(record(entry, row["measurement"], measured_with=row.get("measured_with")))
    out["protocols"] = rows
    out["evaluation_note"] = EVALUATION_NOTE
    return out


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.3g} s" if s < 100 else f"{s / 60:.3g} min" if s < 3600 else f"{s / 3600:.3g} h"


def _samples(row: Mapping[str, Any]) -> str:
    """The training samples of a row, with the trajectories x items of a window view."""
    n = f"{row['train_samples']:,}"
    if row["train_items_per_sample"] != 1:
        n += f" ({row['dataset_train']:,} x {row['train_items_per_sample']:g})"
    return n


def markdown_table(result: Mapping[str, Any]) -> str:
    """The Markdown table of the result: one row per protocol (s/step, s/epoch, hours: ``torch_threads``
    threads; the last column: the same steps with ``--compare-threads``)."""
    n_cmp = result.get("settings", {}).get("compare_threads")
    cmp = f"s/epoch (h) with {n_cmp} thread{'s' if n_cmp != 1 else ''}" if n_cmp else "other threads"
    lines = [
        f"| protocol | published reference | epochs | train samples | batch | params | s/step (steps timed) | s/epoch | hours | fits in {FIT_HOURS:g} h | eval share | {cmp} |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in result["protocols"]:
        n = _samples(r)
        params = f"{r['parameters']:,}" if r.get("parameters") else "-"
        if r["s_per_epoch"] is None:
            why = r["not_measured"]
            if r.get("extrapolated"):
                why += f"; extrapolated, not measured: {_dur(r['extrapolated']['s_per_epoch'])}/epoch, {r['extrapolated']['hours']:.3g} h"
            step, epoch, hours, fits = "not measured", f"({why})", "-", "?"
        else:
            step = f"{r['step_s']:.3g} ({r['timed_steps']}{', few' if r['few_steps'] else ''})"
            if r.get("measured_with"):
                step += f" = {r['measured_with']}"
            epoch, hours, fits = _dur(r["s_per_epoch"]), f"{r['hours']:.3g}", "yes" if r["fits"] else "no"
        share = f"{r['eval_share']:.0%}" if r.get("eval_share") is not None else "-"
        c = r.get("compare_threads")
        other = f"{_dur(c['s_per_epoch'])} ({c['hours']:.3g} h)" if c else "-"
        lines.append(
            f"| {r['dataset']}/{r['model']} | {r['reference_label']} | {r['epochs']} | {n} | {r['batch']} | {params} | {step} | {epoch} | {hours} | {fits} | {share} | {other} |"
        )
    for f in result.get("failed", []):
        lines.append(f"| {f['dataset']}/{f['model']} | {reference_label(f['reference'])} | | | | | failed: {f['error']} | | | | | |")
    return "\n".join(lines)


def _why_not(row: Mapping[str, Any]) -> str:
    """The reason a protocol was not measured, in a few words (the whole reason is in the JSON)."""
    why = row["not_measured"]
    if "> the cap" in why:
        return f"batch {row['batch']} over the memory cap"
    if "can't allocate memory" in why or "MemoryError" in why:
        return "an allocation failed under the memory cap"
    if "ConfigError" in why:
        return "refused by the config check: " + why.split(": ")[-1].split(";")[0].replace(" (view mesh)", "")
    return why


def _compact_label(label: str) -> str:
    """``"ono: Table 2 (s = 61); ono: Table 2 (s = 85)"`` -> ``"ono: Table 2 (s = 61, 85)"``: one
    paper prefix per paper, and the parentheses of entries with the same head merged."""
    groups: list[tuple[str, list[str]]] = []
    for part in label.split("; "):
        paper, _, rest = part.partition(": ")
        if groups and groups[-1][0] == paper:
            groups[-1][1].append(rest)
        else:
            groups.append((paper, [rest]))
    out = []
    for paper, rests in groups:
        parts = [re.fullmatch(r"(.*) \((?:s = )?(.*)\)", x) for x in rests]
        if len(rests) > 1 and all(parts) and len({m.group(1) for m in parts}) == 1 and all("s = " in x for x in rests):
            rests = [f"{parts[0].group(1)} (s = {', '.join(m.group(2) for m in parts)})"]
        out.append(f"{paper}: {'; '.join(rests)}")
    return "; ".join(out)


def readme_table(result: Mapping[str, Any]) -> str:
    """The README's cost table: one row per protocol, hours of the whole run (training and its
    per-epoch evaluations), ``~`` marking an extrapolation from a batch-1 step."""
    lines = [
        f"| protocol | published | epochs | train samples | batch | s/epoch (train + eval) | hours | fits in {FIT_HOURS:g} h |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in result["protocols"]:
        n = _samples(r)
        ref = _compact_label(r["reference_label"]) if r["reference"] else "none" + (" (a target only)" if r.get("target") else "")
        if r.get("separate_run"):
            ref += " (measured in a separate run)"
        if r["s_per_epoch"] is None:
            x = r.get("extrapolated")
            epoch = f"not measured: {_why_not(r)}" + (f"; a batch-1 step x {r['batch']}: {_dur(x['s_per_epoch'])}" if x else "")
            hours, fits = (f"~{x['hours']:.3g}", "no" if x["hours"] > FIT_HOURS else "?") if x else ("-", "-")
        else:
            ev = r.get("eval_s_per_epoch")
            epoch = f"{_dur(r['s_per_epoch'])} + {_dur(ev)}" if ev is not None else _dur(r["s_per_epoch"])
            hours, fits = f"{r.get('hours_with_eval', r['hours']):.3g}", "**yes**" if r["fits"] else "no"
        lines.append(f"| {r['dataset']}/{r['model']} | {ref} | {r['epochs']} | {n} | {r['batch']} | {epoch} | {hours} | {fits} |")
    for f in result.get("failed", []):
        lines.append(f"| {f['dataset']}/{f['model']} | {reference_label(f['reference'])} | | | | failed: {f['error']} | - | - |")
    return "\n".join(lines)


def summarize(result: Mapping[str, Any]) -> list[str]:
    """The SUMMARY.md lines (opflow bench): the counts, then the table."""
    rows = result.get("protocols", [])
    measured = [r for r in rows if r["s_per_epoch"] is not None]
    fit = [r for r in measured if r["fits"]]
    m = result.get("machine", {})
    return [
        f"- {len(rows)} published protocols, {len(measured)} measured, {len(fit)} fit in {FIT_HOURS:g} h on this CPU "
        f"({m.get('cpu_model', '?')}, {result.get('torch_threads')} threads, load {m.get('loadavg_start')} -> {m.get('loadavg_end')})",
        "",
        markdown_table(result),
    ]


# --------------------------------------------------------------------------- main


def _cpu_model() -> str:
    import platform

    from opflow.runtime import cpu_identity

    return cpu_identity().get("model_name") or platform.processor() or platform.machine()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configfile", action="append", default=None, help="config files, later ones winning (default: config/default.yaml; --smoke adds config/quick.yaml)")
    ap.add_argument("--reference", default=REFERENCE, help="the published numbers (default config/reference.yaml)")
    ap.add_argument("--pairs", default=None, help="comma-separated dataset/model pairs (default: every published protocol)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads of the timed steps (default 2; --smoke: 1)")
    ap.add_argument("--compare-threads", type=int, default=1, help="also time the steps with this many threads (0: do not), for steps up to --compare-max-step-s")
    ap.add_argument("--compare-max-step-s", type=float, default=15.0, help="skip the comparison when its warm-up step takes longer")
    ap.add_argument("--min-repeats", type=int, default=3)
    ap.add_argument("--max-repeats", type=int, default=10)
    ap.add_argument("--phase-s", type=float, default=6.0, help="aimed seconds of timed steps per protocol (sets the repeats)")
    ap.add_argument("--max-step-s", type=float, default=240.0, help="do not run a protocol-batch step predicted to take longer")
    ap.add_argument("--max-memory-gb", type=float, default=None, help="memory cap of a step (default: 0.6 of MemAvailable at the start)")
    ap.add_argument("--timeout-s", type=float, default=480.0, help="per distinct step (its subprocess)")
    ap.add_argument("--no-eval", action="store_true", help="do not time the per-epoch test evaluation")
    ap.add_argument("--out", default=None, help=f"result JSON (default {DEFAULT_OUT}; the smoke run writes only with --out)")
    ap.add_argument("--resume", action="store_true", help="keep the protocols that the --out file of an interrupted run (same config files and threads) measured")
    ap.add_argument("--smoke", action="store_true", help="quick configs, a few pairs, batch <= 2, one step, in-process (seconds)")
    ap.add_argument("--table", metavar="JSON", default=None, help="measure nothing: print the README's table of a stored result (its rows derived again by this version's rules)")
    ap.add_argument("--rederive", metavar="JSON", default=None, help="measure nothing: derive the rows of a stored result again by this version's rules and rewrite it")
    ap.add_argument("--append-to", metavar="JSON", default=None, help="with --pairs: add the rows measured to this stored result (replacing those of the same pairs), each with its separate_run")
    ap.add_argument("--why", default="", help="with --append-to: why these pairs were measured apart (recorded in separate_run)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(measure(json.loads(Path(a.child).read_text()))))
        return 0
    if a.table or a.rederive:
        path = Path(a.table or a.rederive)
        try:
            stored = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            ap.error(f"{path}: not a readable protocol_cost result ({e}); make one with python -m benchmarks.protocol_cost --out {path}")
        if stored.get("benchmark") != "protocol_cost":
            ap.error(f"{path}: not a protocol_cost result (its 'benchmark' is {stored.get('benchmark')!r})")
        fresh = rederive(stored)
        if a.table:
            print(readme_table(fresh))
        else:
            write_json_atomic(path, fresh | {"rederived_at": utc_timestamp()})
            print(f"rewrote {path}: {sum(r['fits'] is True for r in fresh['protocols'])} of {len(fresh['protocols'])} fit in {FIT_HOURS:g} h")
        return 0
    if a.threads is None:
        a.threads = 1 if a.smoke else 2
    if a.threads < 1 or a.compare_threads < 0:
        ap.error("--threads must be at least 1 and --compare-threads at least 0")
    if a.append_to and not a.pairs:
        ap.error("--append-to adds the rows of --pairs: name them (--pairs dataset/model,...)")
    out = a.out or (None if a.smoke else DEFAULT_OUT)
    out_path = (Path(out) if os.path.isabs(out) else ROOT / out) if out is not None else None
    if a.append_to and out_path is not None and Path(a.append_to).resolve() == out_path.resolve():
        ap.error(f"--append-to {a.append_to} is also where this run writes its own rows (--out): give --out another file, e.g. --out /tmp/protocol_cost_pairs.json")

    from benchmarks.models import _memory_available
    from opflow.config import load_config_files

    files = a.configfile or ["config/default.yaml"] + (["config/quick.yaml"] if a.smoke else [])
    config = load_config_files([str(ROOT / f) if not os.path.isabs(f) else f for f in files])
    ref = ROOT / a.reference if not os.path.isabs(a.reference) else Path(a.reference)
    pairs = published_protocols(config, ref)
    if a.pairs or a.smoke:
        want = [tuple(p.split("/")) for p in a.pairs.split(",")] if a.pairs else list(SMOKE_PAIRS)
        have = {(p["dataset"], p["model"]): p for p in pairs}
        bad = [w for w in want if len(w) != 2 or w[0] not in (config.get("datasets") or {}) or w[1] not in (config.get("models") or {})]
        if bad:
            ap.error(f"--pairs: {['/'.join(b) for b in bad]} are not configured dataset/model pairs")
        pairs = [have.get(w) or {"dataset": w[0], "model": w[1], "target": False, "reference": []} for w in want]
    if a.smoke:
        a.min_repeats, a.max_repeats, a.phase_s = 1, 1, 0.0
    avail = _memory_available("cpu")
    cap = int(a.max_memory_gb * 2**30) if a.max_memory_gb else int(MEMORY_FRACTION * (avail or 8 << 30))
    settings = {
        "min_repeats": a.min_repeats, "max_repeats": a.max_repeats, "phase_s": a.phase_s, "max_step_s": a.max_step_s,
        "memory_cap_bytes": cap, "eval": not a.no_eval,
        "compare_threads": 0 if a.smoke else a.compare_threads, "compare_max_step_s": a.compare_max_step_s,
    }

    import torch

    previous = resumable(out_path, files, a.threads) if a.resume and out_path is not None else {}
    load_start = loadavg()
    t_run = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "protocol_cost",
        "created": utc_timestamp(),
        "complete": False,
        "smoke": a.smoke,
        "configfiles": files,
        "reference": a.reference,
        "device": "cpu",
        "torch_threads": a.threads,
        "fit_hours": FIT_HOURS,
        "settings": settings | {"timeout_s": a.timeout_s, "isolation": "in-process" if a.smoke else "one subprocess per distinct step", "memory_available_bytes": avail},
        "evaluation_note": EVALUATION_NOTE,
        "protocols": [],
        "failed": [],
    }

    def write() -> None:  # after every protocol: an interrupted run keeps what it measured (--resume goes on from it)
        result["wall_s"] = time.perf_counter() - t_run + sum(previous.get("__wall_s__", [0.0]))
        result["machine"] = machine(load_start, packages=["torch", "numpy"], cpu_model=_cpu_model(), torch_threads=a.threads, torch_version=torch.__version__)
        if out_path is not None:
            write_json_atomic(out_path, result)

    with tempfile.TemporaryDirectory(prefix="protocol_cost_data_") as tmp:
        t0 = time.perf_counter()
        entries, failed = plan(config, pairs, Path(tmp), smoke_batch=2 if a.smoke else None)
        result["synthetic_data_s"] = time.perf_counter() - t0
        result["failed"] = failed
        print(f"{len(entries)} protocols, {len({e['key'] for e in entries})} distinct steps; synthetic data in {result['synthetic_data_s']:.1f} s, load {loadavg()}", flush=True)
        done: dict[str, tuple[str, dict[str, Any]]] = {}
        rows = result["protocols"]
        for e in entries:
            name = f"{e['dataset']}/{e['model']}"
            if e["key"] in done:
                first, r = done[e["key"]]
                rows.append(record(e, r, measured_with=first))
                print(f"{name:>36}: the same step as {first}", flush=True)
                write()
                continue
            if name in previous:  # --resume: measured by an earlier, interrupted run of the same settings
                r = previous[name]
                print(f"{name:>36}: kept from the earlier run (--resume)", flush=True)
            else:
                spec = {**e["spec"], "threads": a.threads, "settings": settings, "work_root": tmp}
                t0 = time.perf_counter()
                r = run_inline(spec) if a.smoke else run_child(spec, a.timeout_s)
                r["wall_s"] = time.perf_counter() - t0
                r["measured_at"] = utc_timestamp()
            done[e["key"]] = (name, r)
            row = record(e, r)
            rows.append(row)
            write()
            if name in previous:
                continue
            if row["s_per_epoch"] is not None:
                print(
                    f"{name:>36}: batch {e['batch']:>2} step {row['step_s']:8.3g} s x {e['steps_per_epoch']:>5} steps = {_dur(row['s_per_epoch']):>9}/epoch, "
                    f"{row['hours']:7.3g} h  ({row['timed_steps']} timed, cpu share {r.get('cpu_share', float('nan')):.2f}, load {r['loadavg']['end']}, {r['wall_s']:.0f} s)",
                    flush=True,
                )
            else:
                print(f"{name:>36}: not measured: {row['not_measured']} ({r['wall_s']:.0f} s)", flush=True)
    result["complete"] = True
    if previous:
        result["resumed"] = sorted(k for k in previous if not k.startswith("__"))
    write()
    print(markdown_table(result))
    if a.append_to:
        print(append_rows(Path(a.append_to), result, " ".join(["python -m benchmarks.protocol_cost", *(argv if argv is not None else sys.argv[1:])]), a.why))
    if out is not None:
        print(f"wrote {out}")
    return 0


def append_rows(stored_path: Path, result: Mapping[str, Any], command: str, why: str) -> str:
    """Add the rows of ``result`` (a ``--pairs`` run) to the stored result at ``stored_path``, replacing
    its rows of the same pairs; each added row carries ``separate_run`` (the command, when, the wall
    time and load of that run, and why) and ``added`` lists them. Refused unless both runs used the
    same config files and threads."""
    stored = json.loads(stored_path.read_text())
    for key in ("configfiles", "torch_threads"):
        if stored.get(key) != result.get(key):
            raise SystemExit(f"--append-to {stored_path}: its {key} is {stored.get(key)!r}, this run's {result.get(key)!r}; measure with the same")
    new = {(r["dataset"], r["model"]) for r in result["protocols"]}
    run = {"command": command, "created": result["created"], "wall_s": result.get("wall_s"), "loadavg": [result["machine"].get("loadavg_start"), result["machine"].get("loadavg_end")], "why": why}
    stored["protocols"] = [r for r in stored["protocols"] if (r["dataset"], r["model"]) not in new] + [dict(r, separate_run=run) for r in result["protocols"]]
    stored["added"] = [x for x in stored.get("added", []) if x.split(":")[0] not in {f"{d}/{m}" for d, m in new}] + [
        f"{d}/{m}: measured in a separate --pairs run (its separate_run field)" for d, m in sorted(new)
    ]
    write_json_atomic(stored_path, stored)
    return f"added {len(new)} rows to {stored_path}"


def resumable(path: Path, files: Sequence[str], threads: int) -> dict[str, Any]:
    """``{"<dataset>/<model>": measurement}`` of the protocols an earlier run of the same config files
    and threads measured itself (not those it took from another pair), for ``--resume``; ``{}`` when
    there is no such file. ``"__wall_s__"``: that run's wall time."""
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    if old.get("benchmark") != "protocol_cost" or old.get("configfiles") != list(files) or old.get("torch_threads") != threads:
        return {}
    out: dict[str, Any] = {
        f"{r['dataset']}/{r['model']}": r["measurement"] for r in old.get("protocols", []) if not r.get("measured_with") and "error" not in r["measurement"]
    }
    out["__wall_s__"] = [float(old.get("wall_s") or 0.0)]
    return out


if __name__ == "__main__":
    sys.exit(main())
