"""Subnormal floats on the CPU: the trainer's step from a trained checkpoint with subnormal arithmetic and with the
CPU's flush-to-zero flags (:func:`opflow.runtime.flush_cpu_denormals`), and the operation alone.

    python -m benchmarks.cpu_denormals [--checkpoint darcy141/fno2d_1cycle=models/darcy141_fno2d_1cycle/checkpoint.pt]
                                       [--pairs darcy141/fno2d_1cycle] [--threads 2] [--rounds 3] [--steps 5]
    python -m benchmarks.cpu_denormals --smoke --out /tmp/d.json     # seconds, no claim about timings

Subnormal numbers appear only as training goes on (weight decay shrinks the weights of dead units into them), so a
step from fresh weights cannot show their cost. The flags are per thread and torch's worker threads take them from
the thread that starts them, so every timing is a fresh child process started with ``OPFLOW_CPU_DENORMALS=keep`` or
``flush``, which sets them (or not) before any parallel work and checks on its threads that they hold (a product
whose subnormal inputs must come out as zeros on every thread: ``workers_flushed``). The two settings alternate
``--rounds`` times per checkpoint, so that the machine's drifts fall on both; medians reported. A child measures:

* ``op_ms``: ``x @ w`` of the FNO projection's shape on Darcy 141 at batch 4 (79,524 x 32 times 32 x 128) where
  12 of the 128 columns of ``w`` are subnormal (stored, as a trained checkpoint holds them; 11 of 128 units were
  in FNO2d 1cycle's projection at epoch 58), so that those columns of the product are subnormal too; forward only.
* ``step_s``: per ``--checkpoint PAIR=PATH`` (a checkpoint of that pair's training, e.g. one that
  ``scripts/cpu_training.sh keep`` kept in git's history), the real Trainer's step on the pair's model and settings
  and a synthetic file of its shape (:func:`benchmarks.cpu_lever.pair_trainer`), its model and optimizer state
  loaded from the checkpoint, ``--warmup`` steps, then the median of ``--steps`` steps timed one by one. The
  subnormal entries of that state are counted. ``--pairs`` adds pairs from fresh weights (no subnormal numbers:
  a ratio near 1, the control).

The ratio is the step with subnormal arithmetic over the step with the flags. Writes
benchmarks/results/cpu_denormals_cpu.json. Run it alone on the machine (under ``scripts/cpu_training.sh aside``
while a background training runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.cpu_lever import alternate_children, child_timing, lever_arguments, lever_finish, lever_result

OUT = "benchmarks/results/cpu_denormals_cpu.json"
#: the checkpoint measured by default: the CPU's training of FNO2d 1cycle on Darcy 141
CHECKPOINT = "darcy141/fno2d_1cycle=models/darcy141_fno2d_1cycle/checkpoint.pt"
SETTINGS = ("keep", "flush")
#: a full run needs a trained checkpoint (``make bench`` skips it without ``--extra cpu_denormals='--checkpoint ...'``)
BENCH_REQUIRES = ["--checkpoint"]
SUBNORMAL = 1e-39
#: the operation alone: rows of x, and the subnormal columns of w of its 128
OP_ROWS, OP_SUBNORMAL_COLUMNS = 4 * 141 * 141, 12


def subnormal_count(state: Any) -> tuple[int, int]:
    """Subnormal entries and all entries of the floating tensors in ``state`` (nested dicts and lists)."""
    import torch

    if isinstance(state, torch.Tensor):
        if not (state.is_floating_point() or state.is_complex()):
            return 0, 0
        x = torch.view_as_real(state) if state.is_complex() else state
        return int(((x != 0) & (x.abs() < torch.finfo(x.dtype).tiny)).sum()), x.numel()
    items = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else ()
    counts = [subnormal_count(v) for v in items]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def workers_flushed(threads: int) -> bool:
    """Whether subnormal inputs come out as zeros on every thread: rows of a product split over ``threads``."""
    import torch

    w = torch.ones(8, 4)
    w[:, 0] = SUBNORMAL
    y = torch.ones(10_000 * threads, 8) @ w
    return bool((y[:, 0] == 0).all())


def op_ms(rows: int, calls: int) -> float:
    """Median milliseconds of ``x @ w`` (module docstring)."""
    import torch

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, 32, generator=g), torch.randn(128, 32, generator=g)
    w[:OP_SUBNORMAL_COLUMNS] = SUBNORMAL
    x @ w.t()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        x @ w.t()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def child(pair: str, checkpoint: str | None, a: argparse.Namespace) -> dict[str, Any]:
    """One timing in this process, its flags set from the environment before any parallel work (module docstring)."""
    import torch
    import yaml

    from benchmarks.cpu_lever import pair_trainer
    from opflow.hostsync import deferred_checks
    from opflow.runtime import flush_cpu_denormals

    flushed = flush_cpu_denormals()
    torch.set_num_threads(a.threads)
    out: dict[str, Any] = {"flushed": flushed, "workers_flushed": workers_flushed(a.threads)}
    out["op_ms"] = op_ms(256 if a.smoke else OP_ROWS, 2 if a.smoke else 20)
    config = yaml.safe_load(Path(a.configfile).read_text())
    with pair_trainer(config, pair) as (trainer, _, step), deferred_checks():
        if checkpoint is not None:
            ck = torch.load(checkpoint, map_location="cpu", weights_only=False)
            trainer.model.load_state_dict(ck["model"])
            trainer.optimizer.load_state_dict(ck["optimizer"])
            out["epoch"] = int(ck["epoch"])
        out["subnormal"] = {"model": subnormal_count(trainer.model.state_dict()), "optimizer": subnormal_count(trainer.optimizer.state_dict()["state"])}
        for _ in range(a.warmup):
            step()
        times = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return out | {"step_s": statistics.median(times), "all_s": times}


def timing(pair: str, checkpoint: str | None, setting: str, a: argparse.Namespace) -> dict[str, Any]:
    extra = (*(["--smoke"] if a.smoke else []), *(["--checkpoint", f"{pair}={checkpoint}"] if checkpoint else []))
    return child_timing("benchmarks.cpu_denormals", pair, a, {"OPFLOW_CPU_DENORMALS": setting}, extra, check=("workers_flushed", setting == "flush"))


def pair_result(pair: str, checkpoint: str | None, a: argparse.Namespace) -> dict[str, Any]:
    from opflow.records import file_sha256

    steps, runs = alternate_children(lambda setting: timing(pair, checkpoint, setting, a), SETTINGS, a.rounds, ("op_ms",))
    first = runs["keep"][0]
    out: dict[str, Any] = {"pair": pair, "weights": "trained" if checkpoint else "fresh", "epoch": first.get("epoch", 0),
                           "checkpoint": checkpoint and {"file": Path(checkpoint).name, "sha256": file_sha256(checkpoint)},
                           "subnormal_entries": {k: {"subnormal": c[0], "of": c[1]} for k, c in first["subnormal"].items()}}
    out |= steps
    k, f = out["keep_step_s"]["median"], out["flush_step_s"]["median"]
    out["op_ratio"] = statistics.median(out["keep_op_ms"]) / statistics.median(out["flush_op_ms"])
    print(f"step {pair} ({out['weights']}, epoch {out['epoch']}): kept {1e3 * k:.1f} ms, flushed {1e3 * f:.1f} ms, ratio {k / f:.3f}; "
          f"op {statistics.median(out['keep_op_ms']):.1f} against {statistics.median(out['flush_op_ms']):.1f} ms")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smoke", action="store_true", help="a tiny operation, one pair from fresh weights, one round of one step (no claim about timings)")
    ap.add_argument("--checkpoint", action="append", default=None, metavar="PAIR=PATH",
                    help=f"a checkpoint of PAIR's training (repeatable; default {CHECKPOINT})")
    ap.add_argument("--child", metavar="PAIR", help=argparse.SUPPRESS)
    if "--child" in (argv if argv is not None else sys.argv[1:]):  # the flags before any parallel work of torch
        from opflow.runtime import flush_cpu_denormals

        flush_cpu_denormals()
    a, fresh, _ = lever_arguments(ap, (), argv)
    specs = [] if a.smoke and not a.child else (a.checkpoint or ([] if a.child else [CHECKPOINT]))
    runs: list[tuple[str, str | None]] = []
    for spec in specs:
        pair, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            raise SystemExit(f"benchmarks.cpu_denormals: --checkpoint {spec!r} needs PAIR=PATH with an existing checkpoint file "
                             "(scripts/cpu_training.sh start brings back the checkpoints that keep kept)")
        runs.append((pair, path))
    if a.child:
        print(json.dumps(child(a.child, runs[0][1] if runs else None, a)))
        return 0
    if a.smoke:
        a.rounds, fresh = 1, fresh or ("darcy/fno",)
    runs += [(pair, None) for pair in fresh]
    result = lever_result("cpu_denormals", a, settings=list(SETTINGS), subnormal_value=SUBNORMAL,
                          op={"rows": OP_ROWS, "subnormal_columns": OP_SUBNORMAL_COLUMNS, "of_columns": 128},
                          steps=[pair_result(pair, path, a) for pair, path in runs])
    return lever_finish(result, a)


if __name__ == "__main__":
    sys.exit(main())
