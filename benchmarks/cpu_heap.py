"""glibc's heap kept for the next tensors (:func:`opflow.runtime.keep_cpu_heap`) against glibc's default, in the
training steps of the CPU's paper-protocol pairs.

    python -m benchmarks.cpu_heap [--pairs darcy/fno,...] [--threads 2] [--rounds 3] [--steps 6]
    python -m benchmarks.cpu_heap --smoke --out /tmp/h.json     # seconds, no claim about timings

The setting is process-wide, and glibc's own state (its mmap threshold, which rises with use) cannot be put back
inside a process, so every timing is a fresh child process started with ``OPFLOW_CPU_HEAP=default`` or ``keep``;
the two alternate ``--rounds`` times per pair, so that the machine's drifts fall on both. A child builds the pair's
trainer (:func:`benchmarks.cpu_lever.pair_trainer`: the real Trainer's step on the pair's model and settings and a
synthetic file of its shape), runs ``--warmup`` steps, then times ``--steps`` steps one by one, and reports their
median, the minor page faults per timed step and the process's peak resident set (``VmHWM``). The ratio is the
median over the rounds of the default's step over the kept heap's.

Writes benchmarks/results/cpu_heap_cpu.json. Run it alone on the machine (under ``scripts/cpu_training.sh aside``
while a background training runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from benchmarks.common import status_kib
from benchmarks.cpu_lever import alternate_children, child_timing, lever_arguments, lever_finish, lever_result

OUT = "benchmarks/results/cpu_heap_cpu.json"
#: the pairs of config/queue.yaml's cpu: list still to train
PAIRS = ("darcy/fno", "darcy_inverse141_eps0/gt_inverse", "darcy141/ft", "darcy141/gt")
SETTINGS = ("default", "keep")


def child(pair: str, configfile: str, steps: int, warmup: int) -> dict[str, Any]:
    """One timing in this process (its heap setting from the environment): see the module docstring."""
    import resource
    import time

    import yaml

    from benchmarks.cpu_lever import pair_trainer
    from opflow.hostsync import deferred_checks

    config = yaml.safe_load(open(configfile))
    with pair_trainer(config, pair) as (trainer, _, step), deferred_checks():
        for _ in range(warmup):
            step()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        kept = trainer.cpu_heap
    return {"step_s": statistics.median(times), "all_s": times, "faults_per_step": faults / steps,
            "peak_rss_mib": (status_kib("VmHWM") or 0) / 1024, "heap_kept": kept}


def timing(pair: str, setting: str, a: argparse.Namespace) -> dict[str, Any]:
    return child_timing("benchmarks.cpu_heap", pair, a, {"OPFLOW_CPU_HEAP": setting}, check=("heap_kept", setting == "keep"))


def pair_result(pair: str, a: argparse.Namespace) -> dict[str, Any]:
    out, _ = alternate_children(lambda setting: timing(pair, setting, a), SETTINGS, a.rounds, ("faults_per_step", "peak_rss_mib"))
    d, k = out["default_step_s"]["median"], out["keep_step_s"]["median"]
    print(f"step {pair}: default {1e3 * d:.1f} ms ({statistics.median(out['default_faults_per_step']):.0f} faults), "
          f"kept {1e3 * k:.1f} ms ({statistics.median(out['keep_faults_per_step']):.0f} faults), ratio {d / k:.3f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smoke", action="store_true", help="one pair, one round of one step per setting (no claim about timings)")
    ap.add_argument("--child", metavar="PAIR", help=argparse.SUPPRESS)
    a, pairs, _ = lever_arguments(ap, PAIRS, argv)
    if a.child:
        print(json.dumps(child(a.child, a.configfile, a.steps, a.warmup)))
        return 0
    if a.smoke:
        a.rounds = 1
    result = lever_result("cpu_heap", a, settings=list(SETTINGS), steps={p: pair_result(p, a) for p in pairs})
    return lever_finish(result, a)


if __name__ == "__main__":
    sys.exit(main())
