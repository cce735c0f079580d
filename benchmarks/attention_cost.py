"""Cost of one attention layer against the number of points: Galerkin (linear) vs softmax (quadratic).

    python -m benchmarks.attention_cost [--sizes 1024,4096,16384,65536] [--kernels galerkin,softmax]
                                        [--device cpu] [--threads 1] [--repeats 5]
                                        [--out benchmarks/results/attention_cost.json]

One :class:`opflow.models.layers.MultiHeadAttention` layer of the Galerkin Transformer's Darcy
configuration (width 128, 4 heads, 2D coordinates concatenated in every head; Cao 2021) on ``n``
random points, batch 1, float32: the time of one forward + backward (sum of the outputs) and its
peak memory. Kernels:

* ``galerkin``: Q (LN(K)^T LN(V)) / n (Cao 2021, eq. 6), O(n d^2) time and O(n d) memory;
* ``softmax``: the continuum-attention (TNO) kernel, softmax with quadrature weights (uniform
  here) through ``scaled_dot_product_attention``, O(n^2 d) time; memory O(n^2) when the weights'
  log-bias is materialised, as on the CPU;
* ``fourier``: (LN(Q) LN(K)^T) V / n, computed by the library in the linear order (same cost as
  ``galerkin``).

Each (kernel, n) runs in its own subprocess, so the peak memory is its own: on a CPU (Linux) the
high-water mark of the resident set (``VmHWM``, reset through ``/proc/self/clear_refs`` after the
warm-up call) minus the resident set then (``VmRSS``), i.e. what the timed calls added at their peak
(the warm-up's one-off costs, such as loading kernels, left out)
(elsewhere the growth of ``ru_maxrss``, which misses peaks below an earlier one); on a GPU
``torch.cuda.max_memory_allocated``. Times are medians of ``--repeats`` calls after one warm-up.
Sizes are measured in increasing order; a size is skipped (and listed with the reason in the
JSON) when the previous size's time or memory, extrapolated with the kernel's nominal exponent
(1 or 2), exceeds ``--max-seconds`` (30) or ``--max-gib`` (8), or when the child fails or runs out
of time. The fitted exponent is the least-squares slope of log(median time) (and of log(peak
memory)) against log(n) over the measured sizes; ``local_time_exponents`` are the slopes between
consecutive sizes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import loadavg, machine, summary, timed_repeats, utc_timestamp, write_json_atomic

WIDTH, HEADS, POS_DIM, BATCH = 128, 4, 2, 1
NOMINAL_EXPONENT = {"galerkin": 1, "fourier": 1, "softmax": 2}


def _proc_kib(field: str) -> int | None:
    """``VmRSS`` / ``VmHWM`` of this process in KiB from ``/proc/self/status`` (None elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the resident-set high-water mark (Linux: write 5 to ``/proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _proc_kib("VmHWM") is not None


def measure(kernel: str, n: int, repeats: int, device: str, threads: int) -> dict:
    """One (kernel, n) point, in this (child) process."""
    import resource

    import torch

    from opflow.models.layers import MultiHeadAttention

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dev = torch.device(device)
    att = MultiHeadAttention(WIDTH, HEADS, kernel, pos_dim=POS_DIM, init_gain=1e-2, init_diagonal=1e-2).to(dev)
    x = torch.randn(BATCH, n, WIDTH, device=dev, requires_grad=True)
    pos = torch.rand(BATCH, n, POS_DIM, device=dev)
    weights = torch.full((BATCH, n), 1.0 / n, device=dev) if kernel == "softmax" else None

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step() -> None:
        att.zero_grad(set_to_none=True)
        x.grad = None
        att(x, pos=pos, weights=weights).sum().backward()

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    step()  # warm-up
    sync()
    warm = time.perf_counter() - t0
    hwm = dev.type == "cpu" and _reset_peak_rss()
    base = _proc_kib("VmRSS") if hwm else None
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = timed_repeats(step, repeats, sync)
    if dev.type == "cuda":
        peak, kind = torch.cuda.max_memory_allocated(), "cuda max_memory_allocated"
    elif hwm and base is not None:
        peak, kind = ((_proc_kib("VmHWM") or 0) - base) * 1024, "VmHWM after the calls - VmRSS before (high-water mark reset)"
    else:
        peak, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0, "growth of process peak RSS"
    return {"n": n, "forward_backward_s": {**summary(times), "all": times}, "warmup_s": warm, "repeats": repeats,
            "peak_memory_bytes": int(peak), "peak_memory_kind": kind}


def fitted_exponent(ns: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(values) against log(ns) (None with fewer than 2 positive points)."""
    import numpy as np

    pts = [(a, b) for a, b in zip(ns, values) if b > 0]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


#: opflow bench runs it a second time on the GPU when one is present (<name>_cuda.json)
BENCH_GPU_ARGS = ["--device", "cuda"]


def summarize(r: dict) -> list[str]:
    """Lines of SUMMARY.md (opflow bench): time per size and the fitted exponent of each kernel."""
    lines = []
    for name, k in r["kernels"].items():
        sizes = ", ".join(f"{s['n']}: {s['forward_backward_s']['median']:.3g} s" for s in k["sizes"])
        e = k["time_exponent"]
        lines.append(f"- {name}: {sizes}; fitted exponent {'-' if e is None else f'{e:.2f}'} (nominal {k['nominal_exponent']})")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,4096,16384,65536")
    ap.add_argument("--kernels", default="galerkin,softmax")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=30.0, help="skip a size predicted to take longer per call")
    ap.add_argument("--max-gib", type=float, default=8.0, help="skip a size predicted to need more memory")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed to one child process")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.smoke and not a.child:
        a.sizes, a.repeats = "256,512", 1
    if a.child:
        print(json.dumps(measure(a.child, a.n, a.repeats, a.device, a.threads)))
        return 0

    import torch

    load0 = loadavg()
    sizes = sorted(int(s) for s in a.sizes.split(","))
    results: dict = {
        "benchmark": "attention_cost",
        "smoke": a.smoke,
        "created": utc_timestamp(),
        "layer": {"width": WIDTH, "heads": HEADS, "pos_dim": POS_DIM, "batch": BATCH, "dtype": "float32",
                  "measured": "one forward + backward of MultiHeadAttention (outputs summed)"},
        "device": a.device,
        "device_name": torch.cuda.get_device_name() if a.device.startswith("cuda") else None,
        "threads": a.threads,
        "limits": {"max_seconds": a.max_seconds, "max_gib": a.max_gib, "timeout_s": a.timeout},
        "kernels": {},
    }
    for kernel in a.kernels.split(","):
        rows: list[dict] = []
        skipped: list[dict] = []
        p = NOMINAL_EXPONENT.get(kernel, 2)
        for n in sizes:
            if rows:
                last = rows[-1]
                grow = (n / last["n"]) ** p
                t_pred = last["forward_backward_s"]["median"] * grow
                m_pred = max(last["peak_memory_bytes"], 0) * grow / 2**30
                if t_pred > a.max_seconds or m_pred > a.max_gib:
                    skipped.append({"n": n, "reason": f"predicted {t_pred:.3g} s and {m_pred:.3g} GiB per call from n = {last['n']} "
                                    f"with exponent {p} (limits {a.max_seconds:g} s, {a.max_gib:g} GiB)"})
                    continue
            repeats = a.repeats
            cmd = [sys.executable, "-m", "benchmarks.attention_cost", "--child", kernel, "--n", str(n), "--repeats", str(repeats),
                   "--device", a.device, "--threads", str(a.threads)]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            except subprocess.TimeoutExpired:
                skipped.append({"n": n, "reason": f"child ran past {a.timeout:g} s"})
                continue
            if r.returncode != 0:
                skipped.append({"n": n, "reason": f"child failed (exit {r.returncode}): {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}"})
                continue
            row = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{kernel:8s} n={n:6d}: {row['forward_backward_s']['median']:.4g} s, peak {row['peak_memory_bytes'] / 2**20:.0f} MiB", flush=True)
        ns = [r["n"] for r in rows]
        results["kernels"][kernel] = {
            "sizes": rows,
            "skipped": skipped,
            "time_exponent": fitted_exponent(ns, [r["forward_backward_s"]["median"] for r in rows]),
            "memory_exponent": fitted_exponent(ns, [float(r["peak_memory_bytes"]) for r in rows]),
            "local_time_exponents": {f"{r0['n']}-{r1['n']}": fitted_exponent([r0["n"], r1["n"]], [r0["forward_backward_s"]["median"], r1["forward_backward_s"]["median"]])
                                     for r0, r1 in zip(rows[:-1], rows[1:])},
            "nominal_exponent": p,
        }
    ks = results["kernels"]
    if "galerkin" in ks and "softmax" in ks:
        g = {r["n"]: r["forward_backward_s"]["median"] for r in ks["galerkin"]["sizes"]}
        s = {r["n"]: r["forward_backward_s"]["median"] for r in ks["softmax"]["sizes"]}
        results["softmax_over_galerkin_time"] = {str(n): s[n] / g[n] for n in sorted(set(g) & set(s))}
    results["machine"] = machine(load0, packages=["torch", "numpy"])
    out = Path(a.out or "benchmarks/results/attention_cost.json")
    write_json_atomic(out, results)
    for kernel, r in ks.items():
        e = r["time_exponent"]
        print(f"{kernel}: time exponent {'-' if e is None else f'{e:.2f}'}, skipped {[s['n'] for s in r['skipped']]}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
