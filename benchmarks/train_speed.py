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
``all`` = the eight combinations. bf16 and compile need CUDA (the Trainer ignores them elsewhere):
on a CPU they are skipped, with the reason in ``skipped_variants``. Where this opflow's
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
import math
import os
import statistics
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
    return "+".join([v["precision"], *(["compile"] if v["compile"] else []), *(["ondevice"] if v["data_on_device"] else [])])


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


def skip_reason(v: Mapping[str, Any], device_type: str, has_on_device: bool) -> str | None:
    """Why variant ``v`` cannot run here (None: it can)."""
    if v["data_on_device"] and not has_on_device:
        return "this opflow's TrainConfig has no data_on_device key (training.data_on_device): nothing to switch"
    if device_type != "cuda":
        need = [k for k, on in (("bf16 autocast", v["precision"] == "bf16"), ("torch.compile", v["compile"])) if on]
        if need:
            return f"{' and '.join(need)} need(s) CUDA (the Trainer ignores it on {device_type})"
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
    tr.update({"precision": variant["precision"], "compile": bool(variant["compile"]), "epochs": epochs, "device": str(dev)})
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
            "compile": bool(trainer.use_compile),
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
            why = skip_reason(v, dev.type, has_on_device)
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


def summarize(result: Mapping[str, Any]) -> list[str]:
    """``SUMMARY.md`` lines: epoch time, samples/s, peak memory and final losses per variant."""
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
