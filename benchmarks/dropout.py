"""Dropout on the CPU: torch's mask (``aten::bernoulli_``) against opflow's (:mod:`opflow.models.layers.dropout`),
alone and in the training steps of the CPU's paper-protocol pairs.

    python -m benchmarks.dropout [--pairs darcy_lognormal64/ft,...] [--threads 2] [--rounds 5] [--steps 5]
    python -m benchmarks.dropout --smoke --out /tmp/d.json     # seconds, no claim about timings

Two measurements, each switching :data:`opflow.models.layers.dropout.CPU_MASK` between ``False`` (torch's
``nn.functional.dropout``) and ``True`` (the 16-bit chunks of 64-bit draws) in the same process, the
two settings alternating ``--rounds`` times so that the machine's drifts fall on both; medians reported.

* ``op``: forward and backward of ``dropout(x, p)`` (p = 0.05, the Galerkin / Fourier Transformer rate)
  on float32 tensors of 2^18 to 2^23 entries (an FT layer at 64 x 64, batch 4, width 128: 2^21).
* ``steps``: one training step of each pair (:func:`benchmarks.cpu_lever.step_times`: the real Trainer's
  step on the pair's model and settings and a synthetic file of its shape), ``--steps`` steps per timing; the
  ratio is the step with torch's mask over the step with opflow's, and the share of the step that
  the mask took with torch's is ``1 - 1 / ratio`` at most.

Writes benchmarks/results/dropout_cpu.json. Run it alone on the machine (under
``scripts/cpu_training.sh aside`` while a background training runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from benchmarks.cpu_lever import alternate, lever_main

OUT = "benchmarks/results/dropout_cpu.json"
#: the pairs of config/queue.yaml's cpu: list whose models use dropout
PAIRS = ("darcy_lognormal64/ft", "darcy_inverse141_eps0/gt_inverse", "darcy141/ft", "darcy141/gt")
SIZES = tuple(1 << k for k in (18, 20, 21, 23))
P = 0.05


def _set_mask(setting: bool) -> None:
    from opflow.models.layers import dropout as D

    D.CPU_MASK = setting


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one pair, two rounds of one step (no claim about timings)")
    return lever_main("dropout", ap, PAIRS, argv, p=P, switch=_set_mask, labels=("torch", "opflow"),
                      op=lambda a: op_times((1 << 12,) if a.smoke else SIZES, a.rounds, 1 if a.smoke else 10))


if __name__ == "__main__":
    sys.exit(main())
