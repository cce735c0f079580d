"""Dropout on the CPU: torch's mask (``aten::bernoulli_``) against opflow's (:mod:`opflow.models.layers.dropout`),
alone and in the training steps of the CPU's paper-protocol pairs.

    python -m benchmarks.dropout [--pairs darcy_lognormal64/ft,...] [--threads 2] [--rounds 5] [--steps 5]
    python -m benchmarks.dropout --smoke --out /tmp/d.json     # seconds, no claim about timings

Two measurements, each switching :data:`opflow.models.layers.dropout.CPU_MASK` between ``False`` (torch's
``nn.functional.dropout``) and ``True`` (the 16-bit chunks of 64-bit draws) in the same process, the
two settings alternating ``--rounds`` times so that the machine's drifts fall on both; medians reported.

* ``op``: forward and backward of ``dropout(x, p)`` (p = 0.05, the Galerkin / Fourier Transformer rate)
  on float32 tensors of 2^18 to 2^23 entries (an FT layer at 64 x 64, batch 4, width 128: 2^21).
* ``steps``: one training step of each pair (:class:`opflow.train_step.TrainStep` of the real Trainer,
  the batch fetched as the epoch fetches it; :func:`benchmarks.train_speed.step_pair_run`: the pair's
  model and training settings on a synthetic file of its shape), ``--steps`` steps per timing; the
  ratio is the step with torch's mask over the step with opflow's, and the share of the step that
  the mask took with torch's is ``1 - 1 / ratio`` at most.

Writes benchmarks/results/dropout_cpu.json. Run it alone on the machine (under
``scripts/cpu_training.sh aside`` while a background training runs).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, summary, utc_timestamp, versions, write_json_atomic

OUT = "benchmarks/results/dropout_cpu.json"
#: the pairs of config/queue.yaml's cpu: list whose models use dropout
PAIRS = ("darcy_lognormal64/ft", "darcy_inverse141_eps0/gt_inverse", "darcy141/ft", "darcy141/gt")
SIZES = tuple(1 << k for k in (18, 20, 21, 23))
P = 0.05


def _set_mask(setting: bool) -> None:
    from opflow.models.layers import dropout as D

    D.CPU_MASK = setting


def alternate(fn: Any, switch: Any, rounds: int) -> dict[bool, list[float]]:
    """Seconds per call of ``fn()`` after ``switch(False)`` and after ``switch(True)``, alternating ``rounds`` times
    (``switch(True)`` is left in force)."""
    out: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for setting in (False, True):
            switch(setting)
            out[setting].append(fn())
    switch(True)
    return out


def op_times(sizes: tuple[int, ...], rounds: int, calls: int) -> list[dict[str, Any]]:
    import torch

    from opflow.models.layers.dropout import dropout

    rows = []
    for n in sizes:
        x = torch.randn(n, requires_grad=True)
        g = torch.randn(n)

        def timed() -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                dropout(x, P, True).backward(g)
            return (time.perf_counter() - t0) / calls

        timed()  # warm-up
        t = alternate(timed, _set_mask, rounds)
        torch_s, ours_s = statistics.median(t[False]), statistics.median(t[True])
        rows.append({"entries": n, "torch_ms": 1e3 * torch_s, "opflow_ms": 1e3 * ours_s, "ratio": torch_s / ours_s,
                     "torch_ns_per_entry": 1e9 * torch_s / n, "opflow_ns_per_entry": 1e9 * ours_s / n,
                     "torch_all_ms": [1e3 * v for v in t[False]], "opflow_all_ms": [1e3 * v for v in t[True]]})
        print(f"op  {n:>8} entries: torch {rows[-1]['torch_ms']:.2f} ms, opflow {rows[-1]['opflow_ms']:.2f} ms, ratio {rows[-1]['ratio']:.2f}")
    return rows


def step_times(
    config: dict[str, Any], pairs: tuple[str, ...], rounds: int, steps: int, warmup: int, switch: Any = None, labels: tuple[str, str] = ("torch", "opflow"),
) -> dict[str, Any]:
    """Per pair, the trainer's step with ``switch(trainer, False)`` against ``switch(trainer, True)`` (default: torch's
    dropout mask against opflow's), alternated ``rounds`` times; ``labels`` name the two settings in the result."""
    import torch

    from benchmarks.train_speed import step_pair_run, step_shape
    from opflow.config import TrainConfig
    from opflow.hostsync import deferred_checks
    from opflow.runtime import DistInfo
    from opflow.train import Trainer, to_device

    switch = switch or (lambda trainer, setting: _set_mask(setting))
    off, on = labels
    out: dict[str, Any] = {}
    dev = torch.device("cpu")
    for pair in pairs:
        shape = step_shape(pair)
        if shape is None:
            raise SystemExit(f"benchmarks: no synthetic shape for {pair!r}; add its dataset to STEP_SHAPES in benchmarks/train_speed.py")
        with tempfile.TemporaryDirectory(prefix="opflow-cpu-step-") as tmp:
            run, path = step_pair_run(config, pair, shape, Path(tmp), batches=4)
            run = copy.deepcopy(run)
            tr = run["training"]
            tr.update({"epochs": 1000, "device": "cpu", "compile": False, "precision": "fp32", "data_on_device": False})
            cfg = TrainConfig.from_dict(tr, "run.training")
            trainer = Trainer(run, cfg, DistInfo(), dev, path, Path(tmp) / "work", progress=False)
            trainer.setup()
            trainer.resume(restart=True)
            trainer.fwd_model.train()
            n_drop = sum(1 for m in trainer.model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0)

            def batches() -> Any:
                while True:
                    yield from trainer.train_batches

            it = batches()

            def timed() -> float:
                t0 = time.perf_counter()
                for _ in range(steps):
                    trainer.step(to_device(next(it), dev))
                return (time.perf_counter() - t0) / steps

            with deferred_checks():
                for _ in range(warmup):
                    trainer.step(to_device(next(it), dev))
                t = alternate(timed, lambda setting: switch(trainer, setting), rounds)
            off_s, on_s = statistics.median(t[False]), statistics.median(t[True])
            out[pair] = {"dropout_modules": n_drop, "batch_size": int(tr["batch_size"]), "shape": dict(shape),
                         f"{off}_step_s": summary(t[False]) | {"all": t[False]}, f"{on}_step_s": summary(t[True]) | {"all": t[True]},
                         "ratio": off_s / on_s, "saved_share": 1 - on_s / off_s}
            print(f"step {pair}: {off} {1e3 * off_s:.1f} ms, {on} {1e3 * on_s:.1f} ms, ratio {off_s / on_s:.3f}")
            del trainer
    return out


def lever_arguments(ap: argparse.ArgumentParser, pairs: tuple[str, ...], argv: list[str] | None) -> tuple[argparse.Namespace, tuple[str, ...], dict[str, Any]]:
    """The command line of a CPU-lever benchmark (this one, :mod:`benchmarks.spectral`; ``ap`` holds its ``--out`` and
    ``--smoke``): the step options added, all parsed, the threads set, and ``--smoke`` applied to the step settings
    (one pair, two rounds of one step). Returns the options (with the start's load average and clock), the pairs and
    the config."""
    import torch
    import yaml

    ap.add_argument("--pairs", default=",".join(pairs), help="comma-separated dataset/model pairs")
    ap.add_argument("--configfile", default="config/default.yaml")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="alternations of the two settings (default 5)")
    ap.add_argument("--steps", type=int, default=5, help="training steps per timing (default 5)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1, help="repeats of the step measurement, a fresh trainer each")
    a = ap.parse_args(argv)
    a.loadavg_start, a.t0 = loadavg(), time.perf_counter()
    torch.set_num_threads(a.threads)
    chosen = tuple(p for p in a.pairs.split(",") if p)
    if a.smoke:
        chosen, a.rounds, a.steps, a.warmup, a.runs = chosen[:1], 2, 1, 1, 1
    return a, chosen, yaml.safe_load(Path(a.configfile).read_text())


def lever_result(name: str, a: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    """The result's common head: name, time, the step settings, then ``fields``."""
    return {"benchmark": name, "created": utc_timestamp(), "smoke": a.smoke, "threads": a.threads, "rounds": a.rounds,
            "steps_per_timing": a.steps, **fields}


def lever_finish(result: dict[str, Any], a: argparse.Namespace) -> int:
    """Versions, wall time and machine added; the result written to ``--out``."""
    result["versions"] = versions("torch", "numpy")
    result["wall_s"] = time.perf_counter() - a.t0
    result["machine"] = machine(a.loadavg_start, torch_threads=a.threads)
    write_json_atomic(a.out, result)
    print(f"wrote {a.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one pair, two rounds of one step (no claim about timings)")
    a, pairs, config = lever_arguments(ap, PAIRS, argv)
    sizes = (1 << 12,) if a.smoke else SIZES
    result = lever_result("dropout", a, p=P, op=op_times(sizes, a.rounds, 1 if a.smoke else 10),
                          steps=step_times(config, pairs, a.rounds, a.steps, a.warmup))
    return lever_finish(result, a)


if __name__ == "__main__":
    sys.exit(main())
