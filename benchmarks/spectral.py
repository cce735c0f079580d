"""The spectral convolution's two transforms on the CPU (:mod:`opflow.models.layers.spectral`): the FFT of the whole
grid against the retained modes as matrix products, alone and in the training steps of the pairs that use it.

    python -m benchmarks.spectral [--pairs darcy141/ft,...] [--threads 2] [--rounds 5] [--steps 5] [--runs 3]
    python -m benchmarks.spectral --smoke --out /tmp/s.json     # seconds, no claim about timings

* ``op``: forward and backward of one ``SpectralConv(32, 32, (12, 12))`` (the Galerkin / Fourier Transformer
  decoder's and the FNO code's Darcy layer) on ``(batch, 32, n, n)`` float32 inputs, ``transform="fft"`` against
  ``"dft"``, for grids of 2s (64, 128, 256) and grids with a large prime factor (85, 141, 211, 416, 421).
* ``steps``: the trainer's step of each pair with every ``SpectralConv`` of the model set to ``"fft"`` against
  ``"auto"`` (what training uses), alternated in one process (:func:`benchmarks.cpu_lever.step_times`), the whole
  measurement ``--runs`` times (3 for the committed result) (this machine's speed drifts by 20-30 % between minutes: compare the ratios).

Each setting alternates ``--rounds`` times with the other; medians reported. Writes
benchmarks/results/spectral_cpu.json. Run it alone on the machine (under ``scripts/cpu_training.sh aside`` while
a background training runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from benchmarks.cpu_lever import alternate, lever_arguments, lever_finish, lever_result, step_times

OUT = "benchmarks/results/spectral_cpu.json"
#: pairs whose models hold a SpectralConv on a grid where "auto" takes the matrix products
PAIRS = ("darcy141/ft", "darcy141/gt", "darcy211/ft", "darcy/fno")
#: (batch, grid side): the batch of the pairs on that grid
GRIDS = ((4, 64), (4, 128), (2, 256), (20, 85), (4, 141), (4, 211), (4, 416), (4, 421))


def op_times(grids: tuple[tuple[int, int], ...], rounds: int, calls: int) -> list[dict[str, Any]]:
    import torch

    from opflow.models.layers import SpectralConv

    rows = []
    for batch, n in grids:
        conv = SpectralConv(32, 32, (12, 12))
        x = torch.randn(batch, 32, n, n, requires_grad=True)
        g = torch.randn(batch, 32, n, n)
        ref = None

        def timed() -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                conv(x).backward(g)
            return (time.perf_counter() - t0) / calls

        with torch.no_grad():
            conv.transform = "fft"
            ref = conv(x)
            conv.transform = "dft"
            diff = float((conv(x) - ref).norm() / ref.norm())
        timed()  # warm-up
        t = alternate(timed, lambda on: setattr(conv, "transform", "dft" if on else "fft"), rounds)
        fft_s, dft_s = statistics.median(t[False]), statistics.median(t[True])
        conv.transform = "auto"
        rows.append({"batch": batch, "grid": n, "fft_ms": 1e3 * fft_s, "dft_ms": 1e3 * dft_s, "ratio": fft_s / dft_s,
                     "auto": "dft" if conv.uses_dft(x) else "fft", "relative_difference": diff,
                     "fft_all_ms": [1e3 * v for v in t[False]], "dft_all_ms": [1e3 * v for v in t[True]]})
        print(f"op  batch {batch:>2} grid {n:>3}: fft {rows[-1]['fft_ms']:.1f} ms, dft {rows[-1]['dft_ms']:.1f} ms, "
              f"ratio {rows[-1]['ratio']:.2f}, auto {rows[-1]['auto']}, difference {diff:.1e}")
    return rows


def _set_transform(trainer: Any, on: bool) -> None:
    from opflow.models.layers import SpectralConv

    for m in trainer.model.modules():
        if isinstance(m, SpectralConv):
            m.transform = "auto" if on else "fft"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smoke", action="store_true", help="one small grid, one pair, two rounds of one step (no claim about timings)")
    a, pairs, config = lever_arguments(ap, PAIRS, argv)
    grids = ((2, 17),) if a.smoke else GRIDS
    runs = [step_times(config, pairs, a.rounds, a.steps, a.warmup, switch=_set_transform, labels=("fft", "auto")) for _ in range(a.runs)]
    steps = {p: {"ratio_per_run": [r[p]["ratio"] for r in runs],
                 "fft_step_s_per_run": [r[p]["fft_step_s"]["median"] for r in runs],
                 "auto_step_s_per_run": [r[p]["auto_step_s"]["median"] for r in runs]} for p in pairs}
    result = lever_result("spectral", a, op=op_times(grids, a.rounds, 1 if a.smoke else 3), step_runs=runs, steps=steps)
    return lever_finish(result, a)


if __name__ == "__main__":
    sys.exit(main())
