"""Benchmark of the 2D Navier-Stokes vorticity solver (solvers/navier_stokes.py).

Two parts, one JSON file (written atomically):

1. Throughput: sample-steps per second of the ``fno`` and ``etdrk4`` steps at each grid size and
   batch size (the batch advanced together, ``chunk = batch``), median of ``--repeats`` timings.
2. Time to accuracy on the FNO torus problem (nu = 1e-5, FNO forcing, FNO-2020 Gaussian initial
   vorticity, ``--accuracy-n`` grid, horizon ``--accuracy-t``): relative L2 error at the horizon
   (max over ``--accuracy-samples`` samples) against an ETDRK4 reference with a step 8 x below the
   smallest tested, for ``fno`` at dt = 1e-4 (the protocol), ``heun_cn`` at a few steps, ``etdrk4``
   at a sequence of fixed steps and with CFL targets. Reported: steps and wall time of the cheapest
   ``etdrk4`` run whose error is at most the ``fno`` error, and the ratios, all from the same run.

    .venv/bin/python benchmarks/navier_stokes.py                  # CPU, a few minutes
    .venv/bin/python benchmarks/navier_stokes.py --device cuda    # unchanged on a GPU machine
    .venv/bin/python benchmarks/navier_stokes.py --quick          # smoke run (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import loadavg, write_json_atomic  # noqa: E402
from opflow.data.provenance import sample_rng  # noqa: E402
from solvers.base import SolverError  # noqa: E402
from solvers.grf import periodic_grf  # noqa: E402
from solvers.navier_stokes import VorticitySolver, fno_forcing, resolve_device  # noqa: E402


def initial_vorticity(n: int, count: int, seed: int = 0) -> np.ndarray:
    """The FNO-2020 Gaussian initial vorticity (as the navier_stokes generator draws it)."""
    kw = dict(alpha=2.5, tau=7.0, sigma=7.0**1.5, length=1.0, convention="fno2020")
    return np.stack([periodic_grf([sample_rng(seed, i)], n, **kw)[0] for i in range(count)])


def timed(fn: Any, device: str) -> tuple[Any, float]:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def throughput(
    sizes: list[int], batches: dict[int, list[int]], steps: dict[int, int], repeats: int, device: str, dtype: str
) -> list[dict]:
    rows = []
    for n in sizes:
        solver = VorticitySolver(n, 1.0, 1e-5, fno_forcing(n), device=device, dtype=dtype)
        for b in batches[n]:
            w0 = initial_vorticity(n, b)
            for scheme in ("fno", "etdrk4"):
                m = steps[n] if scheme == "fno" else max(steps[n] // 4, 5)
                dt = 1e-4

                def run() -> None:
                    solver.integrate(w0, [m * dt], scheme=scheme, dt=dt, chunk=b, cfl_limit=10.0)

                run()  # warm-up (plans, allocator)
                times = [timed(run, device)[1] for _ in range(repeats)]
                med = statistics.median(times)
                rows.append(
                    {
                        "n": n,
                        "batch": b,
                        "scheme": scheme,
                        "steps": m,
                        "repeats": repeats,
                        "median_s": med,
                        "all_s": times,
                        "sample_steps_per_s": b * m / med,
                        "rhs_evaluations_per_step": 1 if scheme == "fno" else 4,
                    }
                )
                print(f"throughput n={n:4d} batch={b:3d} {scheme:7s}: {b * m / med:10.1f} sample-steps/s", flush=True)
    return rows


def accuracy(
    n: int,
    horizon: float,
    samples: int,
    repeats: int,
    device: str,
    dtype: str,
    etd_dts: list[float],
    cfls: list[float],
    heun_dts: list[float],
    fno_dt: float,
    dt_max: float,
) -> dict:
    solver = VorticitySolver(n, 1.0, 1e-5, fno_forcing(n), device=device, dtype=dtype)
    w0 = initial_vorticity(n, samples)
    h_ref = min(etd_dts) / 8
    ref, t_ref = timed(lambda: solver.integrate(w0, [horizon], scheme="etdrk4", dt=h_ref, cfl_limit=10.0)[:, 0], device)
    print(f"reference: etdrk4 dt={h_ref:g} ({t_ref:.1f} s)", flush=True)

    def error(w: np.ndarray) -> float:
        return float(max(np.linalg.norm(w[b] - ref[b]) / np.linalg.norm(ref[b]) for b in range(samples)))

    def run(label: str, reps: int, **kw: Any) -> dict:
        stats: dict = {}
        row: dict[str, Any] = {"label": label, **kw}
        try:
            out, t = timed(lambda: solver.integrate(w0, [horizon], stats=stats, **kw)[:, 0], device)
        except SolverError as e:
            row.update(error=None, unstable=str(e))
            print(f"{label:28s} unstable: {e}", flush=True)
            return row
        walls = [t] + [timed(lambda: solver.integrate(w0, [horizon], **kw), device)[1] for _ in range(reps - 1)]
        row.update(
            error=error(out[:, 0] if out.ndim == 4 else out),
            steps=int(stats["steps"].max()),
            steps_per_sample=stats["steps"].tolist(),
            rhs_evaluations=int(stats["evaluations"]),
            wall_s=statistics.median(walls),
            all_wall_s=walls,
        )
        print(f"{label:28s} error {row['error']:.3e}  steps {row['steps']:6d}  wall {row['wall_s']:8.2f} s", flush=True)
        return row

    fno = run(f"fno dt={fno_dt:g}", 1, scheme="fno", dt=fno_dt, cfl_limit=10.0)
    # per-step cost of the fno scheme, median of repeats on a short horizon (a second measurement)
    m_short = max(int(round(0.02 * horizon / fno_dt)), 10)
    short = [
        timed(lambda: solver.integrate(w0, [m_short * fno_dt], scheme="fno", dt=fno_dt), device)[1]
        for _ in range(repeats)
    ]
    fno["wall_s_from_step_cost"] = statistics.median(short) / m_short * fno["steps"]
    heun = [run(f"heun_cn dt={dt:g}", repeats, scheme="heun_cn", dt=dt, cfl_limit=10.0) for dt in heun_dts]
    etd = [run(f"etdrk4 dt={dt:g}", repeats, scheme="etdrk4", dt=dt, cfl_limit=10.0) for dt in etd_dts]
    adaptive = [
        run(f"etdrk4 cfl={c:g} dt_max={dt_max:g}", repeats, scheme="etdrk4", cfl=c, dt_max=dt_max, cfl_limit=1.5)
        for c in cfls
    ]

    def best(rows: list[dict]) -> dict | None:
        ok = [r for r in rows if r.get("error") is not None and r["error"] <= fno["error"]]
        return min(ok, key=lambda r: r["wall_s"]) if ok else None

    summary: dict[str, Any] = {"fno_error": fno["error"], "fno_steps": fno["steps"], "fno_wall_s": fno["wall_s"]}
    for name, rows in (("etdrk4_fixed", etd), ("etdrk4_adaptive", adaptive)):
        b = best(rows)
        if b is None:
            summary[name] = None
            continue
        summary[name] = {
            "label": b["label"],
            "error": b["error"],
            "steps": b["steps"],
            "wall_s": b["wall_s"],
            "step_ratio": fno["steps"] / b["steps"],
            "wall_ratio": fno["wall_s"] / b["wall_s"],
        }
    return {
        "n": n,
        "horizon": horizon,
        "samples": samples,
        "nu": 1e-5,
        "forcing": "fno",
        "initial_condition": "periodic_grf fno2020 alpha=2.5 tau=7 sigma=7^1.5",
        "error_metric": "max over samples of ||w - w_ref||_2 / ||w_ref||_2 at the horizon",
        "reference": {"scheme": "etdrk4", "dt": h_ref, "wall_s": t_ref},
        "fno": fno,
        "heun_cn": heun,
        "etdrk4_fixed": etd,
        "etdrk4_adaptive": adaptive,
        "summary": summary,
    }


def full_protocol(samples: int, device: str) -> dict:
    """The whole nu = 1e-5, T = 20, 256^2 -> 64^2 generator run with ``fno`` (dt = 1e-4) and ``etdrk4``
    (defaults: cfl 0.5, dt_max 0.02; and cfl 0.25), each stored frame compared with an etdrk4
    reference capped at dt = 0.0025. Long: about 10 CPU-minutes per sample for the fno run."""
    from solvers.navier_stokes import NavierStokes

    runs = {
        "reference etdrk4 dt_max=0.0025": {"scheme": "etdrk4", "cfl": 0.05, "dt_max": 0.0025},
        "etdrk4 cfl=0.5 dt_max=0.02 (default)": {"scheme": "etdrk4"},
        "etdrk4 cfl=0.25 dt_max=0.01": {"scheme": "etdrk4", "cfl": 0.25, "dt_max": 0.01},
        "fno dt=1e-4": {"scheme": "fno"},
    }
    out: dict[str, Any] = {"samples": samples, "runs": {}}
    ref = None
    for label, params in runs.items():
        gen = NavierStokes.from_config({**params, "device": device})
        w, wall = timed(lambda: gen.generate(0, np.arange(samples))["vorticity"], device)
        if ref is None:
            ref = w
        err = np.linalg.norm(w - ref, axis=(2, 3)) / np.linalg.norm(ref, axis=(2, 3))
        out["runs"][label] = {"wall_s": wall, "max_error_per_frame": err.max(axis=0).tolist()}
        print(f"{label:38s} wall {wall:7.1f} s  error at t = 20: {err[:, -1].max():.2e}", flush=True)
    return out


#: opflow bench runs it a second time on the GPU when one is present (<name>_cuda.json)
BENCH_GPU_ARGS = ["--device", "cuda"]


def summarize(r: dict) -> list[str]:
    """Lines of SUMMARY.md (opflow bench): throughput per scheme and the equal-accuracy comparison."""
    dev = r["machine"]["device_name"]
    lines = [f"- {t['scheme']} {t['n']}^2 batch {t['batch']}: {t['sample_steps_per_s']:.4g} sample-steps/s ({dev})" for t in r["throughput"] if t["batch"] == 1]
    s = (r.get("time_to_accuracy") or {}).get("summary") or {}
    for name in ("etdrk4_fixed", "etdrk4_adaptive"):
        if s.get(name):
            e = s[name]
            lines.append(f"- side by side at equal or better accuracy: {e['label']} {e['steps']} steps, {e['wall_s']:.3g} s, error {e['error']:.2g} "
                         f"vs the FNO scheme {s['fno_steps']} steps, {s['fno_wall_s']:.3g} s, error {s['fno_error']:.2g}: "
                         f"{e['step_ratio']:.0f}x fewer steps, {e['wall_ratio']:.0f}x less time")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:<i> or auto")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a shared machine)")
    ap.add_argument("--precision", default="float64", choices=["float64", "float32"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--batches", default=None, help='JSON {"64": [1, 8, 32], "256": [1, 4]}; default by device')
    ap.add_argument("--accuracy-n", type=int, default=256)
    ap.add_argument("--accuracy-t", type=float, default=1.0)
    ap.add_argument("--accuracy-samples", type=int, default=2)
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--full-protocol", type=int, default=0, metavar="SAMPLES",
                    help="also run the whole T = 20 protocol for SAMPLES samples per scheme (long)")
    ap.add_argument("--smoke", "--quick", dest="quick", action="store_true", help="smoke run: tiny grids and horizon (opflow bench --smoke)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "navier_stokes.json")
    a = ap.parse_args(argv)

    import torch

    torch.set_num_threads(max(1, a.threads))
    device = resolve_device(a.device)
    cuda = device.startswith("cuda")
    if a.batches:
        batches = {int(k): v for k, v in json.loads(a.batches).items()}
    elif cuda:
        batches = {64: [1, 16, 64, 256], 256: [1, 8, 32, 64], 32: [1, 16]}
    else:
        batches = {64: [1, 8, 32], 256: [1, 4], 32: [1, 8]}
    steps = {32: 200, 64: 200, 256: 40}
    etd_dts, cfls, heun_dts = [0.05, 0.025, 0.0125, 0.00625], [1.0, 0.7, 0.5, 0.35], [2e-3, 1e-3]
    fno_dt, dt_max = 1e-4, 0.02  # the protocol step; the generator's default etdrk4 step cap
    sizes, acc_n, horizon = a.sizes, a.accuracy_n, a.accuracy_t
    if a.quick:
        sizes, acc_n, horizon, steps = [32], 32, 0.05, {32: 20}
        batches = {32: [1, 4]}
        etd_dts, cfls, heun_dts, fno_dt = [0.025, 0.0125], [0.5], [1e-3], 1e-3
    for n in sizes:
        batches.setdefault(n, [1])
        steps.setdefault(n, 40)

    load_start = loadavg()
    started = time.time()
    result: dict[str, Any] = {
        "benchmark": "navier_stokes",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "device": device,
            "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "load_average_at_start": load_start,
            "note": "shared machine: other jobs ran at the same time; timings are medians of repeats",
        },
        "precision": a.precision,
        "smoke": a.quick,
        "argv": sys.argv[1:] if argv is None else argv,
    }
    result["throughput"] = throughput(sizes, batches, steps, a.repeats, device, a.precision)
    if not a.skip_accuracy:
        result["time_to_accuracy"] = accuracy(
            acc_n, horizon, a.accuracy_samples, a.repeats, device, a.precision, etd_dts, cfls, heun_dts, fno_dt, dt_max
        )
        s = result["time_to_accuracy"]["summary"]
        for name in ("etdrk4_fixed", "etdrk4_adaptive"):
            if s.get(name):
                r = s[name]
                print(
                    f"{name}: {r['label']}: {r['step_ratio']:.0f}x fewer steps, {r['wall_ratio']:.0f}x less wall "
                    "time than fno at equal or better accuracy"
                )
    if a.full_protocol > 0:
        result["full_protocol"] = full_protocol(a.full_protocol, device)
    result["machine"]["load_average_at_end"] = loadavg()
    result["elapsed_s"] = time.time() - started
    write_json_atomic(a.out, result, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
