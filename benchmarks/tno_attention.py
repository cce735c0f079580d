"""TNO's quadrature-weighted softmax attention on n x n grids: time and peak memory per sample, by path.

    python -m benchmarks.tno_attention [--sizes 32,64,128] [--paths explicit,mask,fold] [--repeats 3]
                                       [--threads 1] [--out benchmarks/results/tno_attention.json] [--smoke]

One forward + backward (sum of the outputs) of the quick-profile TNO (``config/quick.yaml``
``models.tno``: width 32, 2 post-LN layers, 4 heads, FFN 64; tensor-product trapezoid weights)
on one sample of an ``n x n`` grid, float32, CPU. The attention is (Calvello et al. 2024,
Appendix B.1) ``z_i = sum_j w_j exp(q_i.k_j / sqrt(d)) v_j / sum_j w_j exp(q_i.k_j / sqrt(d))``,
computed by one of three paths of the same numbers:

* ``explicit``: the weighted softmax written out, the ``(N, N)`` score matrix materialised per head
  (the plain reference; skipped where its predicted memory exceeds ``--max-gib``);
* ``mask``: ``scaled_dot_product_attention`` with ``log w_j`` as an additive float mask
  ``(B, 1, 1, N)`` (opflow's path before the fold, ``bias_mode="mask"``);
* ``fold``: ``log w_j`` folded into an extra query/key channel, ``q' = [q, 1]``,
  ``k' = [k, log w_j / s]``, heads zero-padded to a multiple of 8, SDPA without a mask
  (:func:`opflow.models.layers.attention.fold_key_bias`, the default now).

Each (path, n) runs in its own subprocess so that its peak memory is its own (the high-water mark
of the resident set, reset after the warm-up call: the measure of ``benchmarks/attention_cost.py``).
Times are medians of ``--repeats`` calls after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from benchmarks.attention_cost import _proc_kib, _reset_peak_rss
from benchmarks.common import loadavg, machine, summary, timed_repeats, utc_timestamp, write_json_atomic

MODEL = {"arch": "tno", "width": 32, "n_layers": 2, "n_heads": 4, "ffn_dim": 64}
PATHS = ("explicit", "mask", "fold")


def explicit_softmax(q, k, v, key_mask=None, weights=None, scale=None, dropout_p=0.0, bias_mode="fold"):
    """The weighted softmax with the score matrix materialised (the reference path)."""
    import torch

    s = q.shape[-1] ** -0.5 if scale is None else scale
    logits = s * q @ k.mT
    if weights is not None:
        logits = logits + torch.log(weights.to(q.dtype))[:, None, None, :]
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    return logits.softmax(-1) @ v


def measure(path: str, n: int, repeats: int, threads: int) -> dict:
    """One (path, n) point, in this (child) process."""
    import torch

    import opflow.models.layers.attention as attention
    from opflow.models import build_model

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model(MODEL, 1, 1, 2)
    for m in model.modules():
        if isinstance(m, attention.MultiHeadAttention):
            m.softmax_bias = "mask" if path == "mask" else "fold"
    if path == "explicit":
        attention.softmax_attention = explicit_softmax  # MultiHeadAttention looks the kernel up at call time
    x = torch.linspace(0, 1, n)
    X, Y = torch.meshgrid(x, x, indexing="ij")
    coords = torch.stack([X, Y], -1).reshape(1, -1, 2)
    u = torch.sin(3 * coords[..., :1]) * coords[..., 1:]

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(coords, u, grid_shape=(n, n)).sum().backward()

    t0 = time.perf_counter()
    step()
    warm = time.perf_counter() - t0
    hwm = _reset_peak_rss()
    base = _proc_kib("VmRSS") if hwm else None
    times = timed_repeats(step, repeats)
    peak = ((_proc_kib("VmHWM") or 0) - base) * 1024 if hwm and base is not None else None
    return {"path": path, "n": n, "points": n * n, "forward_backward_s": {**summary(times), "all": times}, "warmup_s": warm,
            "repeats": repeats, "peak_memory_bytes": peak}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="32,64,128")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-gib", type=float, default=3.0, help="skip the explicit path where its score matrices would need more")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; asserts nothing about timings (opflow bench --smoke)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(measure(a.child, a.n, a.repeats, a.threads)))
        return 0
    if a.smoke:
        a.sizes, a.repeats = "8,12", 1
    out = a.out or ("benchmarks/results/tno_attention_smoke.json" if a.smoke else "benchmarks/results/tno_attention.json")
    load0 = loadavg()
    rows, skipped = [], []
    for n in (int(s) for s in a.sizes.split(",")):
        for path in a.paths.split(","):
            if path not in PATHS:
                raise SystemExit(f"--paths: unknown path {path!r}; choose from {list(PATHS)}")
            # explicit: per layer the logits, the probabilities and their gradients, 4 heads, float32
            gib = 4 * MODEL["n_heads"] * (n * n) ** 2 * 4 / 2**30
            if path == "explicit" and gib > a.max_gib:
                skipped.append({"path": path, "n": n, "reason": f"score matrices ~{gib:.1f} GiB > --max-gib {a.max_gib}"})
                continue
            cmd = [sys.executable, "-m", "benchmarks.tno_attention", "--child", path, "--n", str(n), "--repeats", str(a.repeats), "--threads", str(a.threads)]
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, check=True)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                skipped.append({"path": path, "n": n, "reason": f"child failed: {str(getattr(e, 'stderr', '') or e)[-300:]}"})
                continue
            row = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{path:8s} n={n:4d}  {row['forward_backward_s']['median']:.3f} s  peak {(row['peak_memory_bytes'] or 0) / 2**20:.0f} MiB", flush=True)
    speedup = {}
    for n in {r["n"] for r in rows}:
        by = {r["path"]: r for r in rows if r["n"] == n}
        if "fold" in by:
            t = by["fold"]["forward_backward_s"]["median"]
            speedup[str(n)] = {f"{p}_over_fold": by[p]["forward_backward_s"]["median"] / t for p in by if p != "fold"}
    write_json_atomic(out, {
        "benchmark": "tno_attention",
        "created": utc_timestamp(),
        "model": MODEL,
        "batch": 1,
        "dtype": "float32",
        "device": "cpu",
        "threads": a.threads,
        "smoke": a.smoke,
        "results": sorted(rows, key=lambda r: (r["n"], r["path"])),
        "time_ratio": speedup,
        "skipped": skipped,
        "machine": machine(load0, packages=["torch"]),
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
