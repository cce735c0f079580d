"""The matrix-product work of one training step at the paper configurations, and the GPU time it cannot go below.

    python -m benchmarks.step_flops [--pairs darcy/ono,darcy/fno,elasticity972/gnot] [--out ...] [--smoke]

What is counted. The real trainer's step (:class:`opflow.train_step.TrainStep`: forward, loss, backward, clipping,
AdamW) of each pair, at the shape of :data:`benchmarks.train_speed.STEP_PAIRS` (a synthetic file of the protocol's
grid or point cloud, the paper's batch and model), run once on the CPU under PyTorch's
:class:`torch.utils.flop_counter.FlopCounterMode`. It counts the floating-point operations of the matrix products
(``mm``, ``bmm``, ``addmm``, ``baddbmm``), convolutions and fused attention kernels, exactly, from the shapes; FFTs
and element-wise work (softmax, GELU, normalisation, the optimiser) are not counted, so the count is a lower bound of
the work (a loose one for FNO, whose spectral layers are FFTs). The count does not depend on the machine.

What it gives. The step's floor on a GPU: the counted operations at the device's peak rate, per precision. The peak
rates are NVIDIA's figures for the H100 SXM / H200 (the same GH100 compute: float32 67 TFLOP/s; TF32 and BF16 tensor
cores 494.5 and 989.5 TFLOP/s dense, half the sparsity figures of the datasheets). Beside it, where a GPU
measurement exists (``benchmarks/results/train_speed_steps_*_h200.json``, the kernel time of the same step), the rate
that measurement reached: operations / kernel time, and its share of the peak. A step far below its peak spends its
kernel time on small, memory-bound kernels, not on products.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, utc_timestamp, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).parent / "results" / "step_flops.json"
DEFAULT_PAIRS = "darcy/ono,darcy/fno,elasticity972/gnot"
#: peak rates of one H100 SXM / H200 (TFLOP/s, dense): NVIDIA's datasheets (tensor-core figures halved: the sheets
#: quote them with structured sparsity)
PEAK_TFLOPS = {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5}


def count_step(config: dict[str, Any], pair: str, tmpdir: Path) -> dict[str, Any]:
    """The counted operations of one training step of ``pair`` (module docstring), total and per ATen operation."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.train_speed import step_pair_run, step_shape
    from opflow.config import TrainConfig
    from opflow.hostsync import deferred_checks
    from opflow.runtime import DistInfo
    from opflow.train import Trainer, to_device

    shape = step_shape(pair)
    if shape is None:
        raise SystemExit(f"--pairs: {pair} is not on a dataset of {DEFAULT_PAIRS} or the other step pairs (benchmarks.train_speed.STEP_PAIRS)")
    run, path = step_pair_run(config, pair, shape, tmpdir, batches=2)
    r = copy.deepcopy(dict(run))
    r["training"].update({"epochs": 2, "device": "cpu", "data_on_device": False})
    cfg = TrainConfig.from_dict(r["training"], "run.training")
    trainer = Trainer(r, cfg, DistInfo(), torch.device("cpu"), path, tmpdir / pair.replace("/", "_"), progress=False)
    trainer.setup()
    trainer.resume(restart=True)
    trainer.fwd_model.train()
    batch = to_device(next(iter(trainer.train_batches)), torch.device("cpu"))
    counter = FlopCounterMode(display=False)
    t0 = time.perf_counter()
    with deferred_checks(), counter:
        trainer.step(batch)
    by_op = {str(op): int(n) for op, n in sorted(counter.get_flop_counts()["Global"].items(), key=lambda kv: -kv[1])}
    return {
        "shape": shape,
        "batch_size": int(r["training"]["batch_size"]),
        "model_config": run["model_config"],
        "flop_per_step": int(counter.get_total_flops()),
        "flop_by_op": by_op,
        "cpu_step_s": time.perf_counter() - t0,
    }


def floors(flop: int) -> dict[str, float]:
    """Milliseconds per step of ``flop`` operations at each precision's peak rate."""
    return {p: flop / (tf * 1e12) * 1e3 for p, tf in PEAK_TFLOPS.items()}


def measured_rates(flop: int, pair: str, results: Path) -> dict[str, dict[str, float]]:
    """Per GPU variant of ``pair`` with a kernel time in ``results/train_speed_steps_*_h200.json``: the kernel time,
    the rate it reached (TFLOP/s of the counted operations) and its share of the peak of the precision that ran (the
    JSON's ``effective`` settings: a variant whose capture failed ran the plain step)."""
    out: dict[str, dict[str, float]] = {}
    for f in sorted(results.glob("train_speed_steps_*_h200.json")):
        measured = json.loads(f.read_text()).get("pairs", {}).get(pair, {}).get("variants", {})
        for name, v in measured.items():
            kernel, eff = v.get("step_kernel_s"), v.get("effective", {})
            if not kernel:
                continue
            precision = "bf16" if eff.get("autocast_bf16") else "tf32" if eff.get("tf32") else "fp32"
            rate = flop / kernel / 1e12
            out[name] = {"kernel_ms": kernel * 1e3, "precision": precision, "tflops": rate, "share_of_peak": rate / PEAK_TFLOPS[precision],
                         "captured": bool(eff.get("cuda_graph")), "file": f.name}
    return out


def summarize(result: dict[str, Any]) -> list[str]:
    """The ``SUMMARY.md`` lines: per pair the counted work, its floors and what the GPU measurements reached."""
    lines = []
    for pair, p in result["pairs"].items():
        fl = ", ".join(f"{k} {v:.2f} ms" for k, v in p["floor_ms"].items())
        got = "; ".join(f"{k}: {m['kernel_ms']:.1f} ms of kernels, {m['tflops']:.1f} TFLOP/s = {100 * m['share_of_peak']:.0f} % of its peak"
                        for k, m in p["measured_h200"].items())
        lines.append(f"- {pair}: {p['flop_per_step'] / 1e9:.0f} GFLOP of products per step; floor {fl}" + (f"; measured {got}" if got else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=DEFAULT_PAIRS, help=f"comma-separated dataset/model pairs (default {DEFAULT_PAIRS})")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for the one counted step (the count does not depend on them)")
    ap.add_argument("--out", default=None, help=f"result JSON (default {OUT.relative_to(ROOT)}; --smoke: none unless given)")
    ap.add_argument("--smoke", action="store_true", help="darcy/fno only (seconds); the same fields")
    a = ap.parse_args(argv)
    import torch

    from opflow.config import load_config_files

    torch.set_num_threads(max(1, a.threads))
    pairs = ["darcy/fno"] if a.smoke else [p.strip() for p in a.pairs.split(",") if p.strip()]
    config = load_config_files([str(ROOT / "config" / "default.yaml")])
    load0 = loadavg()
    result: dict[str, Any] = {
        "benchmark": "step_flops",
        "smoke": a.smoke,
        "what": "matrix-product operations of one training step (FlopCounterMode, exact, a lower bound of the work) and the "
                "GPU floor at the peak rates; the H200 kernel times measured for the same step beside them",
        "peak_tflops": PEAK_TFLOPS,
        "pairs": {},
        "created": utc_timestamp(),
    }
    with tempfile.TemporaryDirectory(prefix="opflow-step-flops-") as tmp:
        for pair in pairs:
            p = count_step(config, pair, Path(tmp))
            p["floor_ms"] = floors(p["flop_per_step"])
            p["measured_h200"] = measured_rates(p["flop_per_step"], pair, ROOT / "benchmarks" / "results")
            result["pairs"][pair] = p
            print(summarize({"pairs": {pair: p}})[0])
    result["machine"] = machine(load0, packages=["torch"])
    if not a.smoke or a.out:
        write_json_atomic(a.out or OUT, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
