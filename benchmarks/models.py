"""Training-step cost of the neural operators: time per sample, throughput and peak memory.

    python -m benchmarks.models [--device cpu|cuda] [--resolution 85] [--batch 4] [--repeats 7]
                                [--models ono,linear_transformer] [--out benchmarks/results/models_cpu.json]

Each model runs in its own subprocess (so peak memory is its own): a training step is
forward + relative-L2 loss + backward + AdamW step on a batch of ``--batch`` Darcy-like inputs at
``resolution x resolution`` points; the first ``--warmup`` steps are discarded, then the median of
``--repeats`` steps is taken. Peak memory is ``torch.cuda.max_memory_allocated`` on a GPU and the
growth of the process's peak resident set size (``ru_maxrss``) over the step loop on a CPU.
Models are measured one after the other in the same run, so their ratios are comparable.

Default model configs are the paper ones (config/default.yaml ``models.ono``); the plain
linear-attention transformer ``linear_transformer`` has the same width, depth and heads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import loadavg, timed_repeats, write_json_atomic

CONFIGS = {
    "ono": {"arch": "ono", "width": 128, "n_layers": 8, "n_heads": 8, "ortho_dim": 16, "ffn_ratio": 1.0, "attention": "nystrom"},
    "ono_linear": {"arch": "ono", "width": 128, "n_layers": 8, "n_heads": 8, "ortho_dim": 16, "ffn_ratio": 1.0, "attention": "linear"},
    "linear_transformer": {"arch": "linear_transformer", "width": 128, "n_layers": 8, "n_heads": 8, "ffn_ratio": 1.0, "attention": "linear"},
}


def measure(name: str, resolution: int, batch: int, repeats: int, warmup: int, device: str, threads: int) -> dict:
    import resource

    import torch

    from opflow.metrics import rel_l2_loss
    from opflow.models import build_model, count_parameters

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dev = torch.device(device)
    t = torch.linspace(0, 1, resolution)
    xx, yy = torch.meshgrid(t, t, indexing="ij")
    coords = torch.stack([xx, yy], -1).reshape(1, -1, 2).repeat(batch, 1, 1).to(dev)
    a = (torch.randn(batch, resolution * resolution, 1) > 0).float().mul(9).add(3).to(dev)
    u = torch.randn(batch, resolution * resolution, 1, device=dev)
    model = build_model(CONFIGS[name], 1, 1, 2).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = rel_l2_loss(model(coords, a, grid_shape=(resolution, resolution)), u)
        loss.backward()
        opt.step()

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        step()
    sync()
    times = timed_repeats(step, repeats, sync)
    model.eval()
    with torch.no_grad():
        model(coords, a, grid_shape=(resolution, resolution))
        sync()
        inf = timed_repeats(lambda: model(coords, a, grid_shape=(resolution, resolution)), repeats, sync)
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    med = statistics.median(times)
    return {
        "config": CONFIGS[name],
        "parameters": count_parameters(model),
        "train_step_s": {"median": med, "min": min(times), "max": max(times), "all": times},
        "train_s_per_sample": med / batch,
        "train_samples_per_s": batch / med,
        "inference_s_per_sample": statistics.median(inf) / batch,
        "peak_memory_bytes": int(peak),
        "peak_memory_kind": "cuda max_memory_allocated" if dev.type == "cuda" else "growth of process peak RSS during the steps",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--resolution", type=int, default=85)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--models", default="ono,ono_linear,linear_transformer")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(measure(a.child, a.resolution, a.batch, a.repeats, a.warmup, a.device, a.threads)))
        return 0

    import torch

    results: dict = {
        "benchmark": "models",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": a.device,
        "device_name": torch.cuda.get_device_name() if a.device.startswith("cuda") else platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "threads": a.threads,
        "resolution": a.resolution,
        "points": a.resolution**2,
        "batch": a.batch,
        "repeats": a.repeats,
        "torch": torch.__version__,
        "load_average_before": loadavg(),
        "models": {},
    }
    for name in a.models.split(","):
        cmd = [sys.executable, "-m", "benchmarks.models", "--child", name, "--device", a.device, "--resolution", str(a.resolution),
               "--batch", str(a.batch), "--repeats", str(a.repeats), "--warmup", str(a.warmup), "--threads", str(a.threads)]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results["models"][name] = json.loads(r.stdout.strip().splitlines()[-1])
        m = results["models"][name]
        print(f"{name}: {m['parameters']:,} parameters, {m['train_s_per_sample']:.4g} s/sample/step, "
              f"{m['train_samples_per_s']:.3g} samples/s, peak {m['peak_memory_bytes'] / 2**20:.0f} MiB", flush=True)
    ms = results["models"]
    if "linear_transformer" in ms:
        base = ms["linear_transformer"]["train_s_per_sample"]
        results["cost_ratio_vs_linear_transformer"] = {k: v["train_s_per_sample"] / base for k, v in ms.items()}
    results["load_average_after"] = loadavg()
    out = Path(a.out or f"benchmarks/results/models_{a.device.split(':')[0]}.json")
    write_json_atomic(out, results)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
