"""The CPU dropout mask in the input's memory layout against a contiguous one (:mod:`opflow.models.layers.dropout`,
``MASK_LAYOUT``), alone and in the training steps of the CPU's pairs whose CNN samplers run channels-last.

    python -m benchmarks.mask_layout [--pairs darcy_inverse141_eps0/gt_inverse,...] [--threads 2] [--rounds 5] [--steps 5]
    python -m benchmarks.mask_layout --smoke --out /tmp/m.json     # seconds, no claim about timings

Both settings in one process, alternating ``--rounds`` times (:mod:`benchmarks.cpu_lever`); medians reported.

* ``op``: forward and backward of ``silu(dropout(x, 0.05))`` on a channels-last float32 ``x`` of the inverse GT's
  first convolution (4 x 192 x 141 x 141; smaller with ``--smoke``), the shape where the layouts crossed.
* ``steps``: the trainer's step of each pair (:func:`benchmarks.cpu_lever.step_times`); the ratio is the step with
  the contiguous mask over the step with the mask in the input's layout.

Writes benchmarks/results/mask_layout_cpu.json. Run it alone on the machine (under ``scripts/cpu_training.sh aside``
while a background training runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from benchmarks.cpu_lever import alternate, lever_main

OUT = "benchmarks/results/mask_layout_cpu.json"
#: the pairs of config/queue.yaml's cpu: list with the Galerkin Transformer's CNN samplers
PAIRS = ("darcy_inverse141_eps0/gt_inverse", "darcy141/ft", "darcy141/gt")
P = 0.05


def _set_layout(setting: bool) -> None:
    from opflow.models.layers import dropout as D

    D.MASK_LAYOUT = setting


def op_times(shape: tuple[int, ...], rounds: int, calls: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from opflow.models.layers.dropout import dropout

    x = torch.randn(shape).contiguous(memory_format=torch.channels_last).requires_grad_(True)
    g = torch.randn(shape).contiguous(memory_format=torch.channels_last)

    def timed() -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            F.silu(dropout(x, P, True)).backward(g)
        return (time.perf_counter() - t0) / calls

    timed()  # warm-up
    t = alternate(timed, _set_layout, rounds)
    c, m = statistics.median(t[False]), statistics.median(t[True])
    print(f"op  {shape}: contiguous mask {1e3 * c:.1f} ms, input's layout {1e3 * m:.1f} ms, ratio {c / m:.2f}")
    return {"shape": list(shape), "contiguous_ms": 1e3 * c, "input_layout_ms": 1e3 * m, "ratio": c / m,
            "contiguous_all_ms": [1e3 * v for v in t[False]], "input_layout_all_ms": [1e3 * v for v in t[True]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smoke", action="store_true", help="a small tensor, one pair, two rounds of one step (no claim about timings)")
    return lever_main("mask_layout", ap, PAIRS, argv, p=P, switch=_set_layout, labels=("contiguous", "input_layout"),
                      op=lambda a: op_times((2, 8, 16, 16) if a.smoke else (4, 192, 141, 141), a.rounds, 1 if a.smoke else 5))


if __name__ == "__main__":
    sys.exit(main())
