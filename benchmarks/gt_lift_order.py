"""The Galerkin / Fourier Transformer's decoder on the CPU: its first linear map after the up-sampler's last
interpolation (Figure 7's order) against before it (:meth:`opflow.models.galerkin.GalerkinTransformer._decode_upsampled`).

    python -m benchmarks.gt_lift_order [--pairs darcy141/gt,...] [--threads 2] [--rounds 5] [--steps 5]
    python -m benchmarks.gt_lift_order --smoke --out /tmp/l.json     # seconds, no claim about timings

The two orders compute the same function (``tests/opflow/models/test_galerkin.py``): ``fc([interp_f(z), x])`` with
``width`` = 128 channels interpolated to the input grid, against ``interp_f(W_h z) + W_x x + b`` with the
``decoder_width`` = 32 channels of the map interpolated. Two measurements, each switching the model's ``lift_first``
in the same process, the two settings alternating ``--rounds`` times so that the machine's drifts fall on both;
medians reported:

* ``op``: forward and backward of the up-sampler's features through the decoder (the up-sampler's convolution
  excluded), the paper's Darcy network at 141 x 141 and 211 x 211, batch 4.
* ``steps``: one training step of each pair (:func:`benchmarks.cpu_lever.step_times`: the real Trainer's step on the
  pair's model and settings and a synthetic file of its shape), ``--steps`` steps per timing; the ratio is the step
  in Figure 7's order over the step with the map first.

Writes benchmarks/results/gt_lift_order_cpu.json. Run it alone on the machine (under ``scripts/cpu_training.sh aside``
while a background training runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from benchmarks.cpu_lever import alternate, lever_arguments, lever_finish, lever_result, step_times

OUT = "benchmarks/results/gt_lift_order_cpu.json"
#: the pairs of config/queue.yaml whose network decodes on the input grid
PAIRS = ("darcy141/gt", "darcy141/ft", "darcy211/gt")
GRIDS = (141, 211)
BATCH = 4


def op_times(grids: tuple[int, ...], rounds: int, calls: int, small: bool = False) -> list[dict[str, Any]]:
    """The decoder's forward and backward from the up-sampler's features, both orders, per input grid."""
    import torch

    from opflow.models import build_model
    from opflow.models.galerkin import _interp

    spec = {"arch": "gt", "width": 16, "decoder_width": 8, "modes": 4, "proj_width": 16, "coarse_sizes": [[17, 9]]} if small else {"arch": "gt"}
    torch.manual_seed(0)
    model = build_model(spec, 1, 1, 2)
    rows = []
    for n in grids:
        middle, _ = model.grids((n, n))
        z = torch.randn(BATCH, model.up.conv[0].out_channels, *middle, requires_grad=True)
        x = torch.linspace(0, 1, n)
        xg = torch.stack(torch.meshgrid(x, x, indexing="ij"), -1).expand(BATCH, n, n, 2)

        def decode() -> torch.Tensor:
            if model.lift_first:
                return model._decode_upsampled(z, (n, n), xg)
            return model.decoder(_interp(z, (n, n)).movedim(1, -1), xg)

        def timed() -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                decode().sum().backward()
            return (time.perf_counter() - t0) / calls

        timed()  # warm-up
        t = alternate(timed, lambda on: setattr(model, "lift_first", on), rounds)
        with torch.no_grad():
            model.lift_first = False
            after = decode()
            model.lift_first = True
            first = decode()
        diff = float((first - after).norm() / after.norm())
        after_s, first_s = statistics.median(t[False]), statistics.median(t[True])
        rows.append({"grid": n, "middle": list(middle), "batch": BATCH, "after_ms": 1e3 * after_s, "first_ms": 1e3 * first_s,
                     "ratio": after_s / first_s, "relative_difference": diff,
                     "after_all_ms": [1e3 * v for v in t[False]], "first_all_ms": [1e3 * v for v in t[True]]})
        print(f"op  grid {n}: map after {rows[-1]['after_ms']:.1f} ms, map first {rows[-1]['first_ms']:.1f} ms, "
              f"ratio {rows[-1]['ratio']:.2f}, relative difference {diff:.1e}")
    return rows


def _switch(trainer: Any, setting: bool) -> None:
    trainer.model.lift_first = setting


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smoke", action="store_true", help="a tiny network, one pair, two rounds of one step (no claim about timings)")
    a, chosen, config = lever_arguments(ap, PAIRS, argv)
    op = op_times((17,), a.rounds, 1, small=True) if a.smoke else op_times(GRIDS, a.rounds, 3)
    steps = step_times(config, chosen, a.rounds, a.steps, a.warmup, switch=_switch, labels=("after", "first"))
    return lever_finish(lever_result("gt_lift_order", a, batch=BATCH, op=op, steps=steps), a)


if __name__ == "__main__":
    sys.exit(main())
