"""Speed of the Darcy FD generator (solvers/darcy.py) on one core, against plain scipy spsolve.

    python -m benchmarks.darcy_fd [--resolution 421] [--samples 12] [--out benchmarks/results/darcy_fd.json]

For each of ``--samples`` samples of the ``darcy_fd`` generator (default parameters = FNO
piecewise protocol; ``--params`` JSON overrides, e.g. '{"coefficient": "lognormal", ...}') it
times the Gaussian field, the assembly, the preconditioner set-up and the PCG solve, and records
the iterations and the true relative residual reached. Each sample is solved ``--repeats`` times
and its time is the minimum (the usual way to strip noise from other processes); the report gives
median, min and max over samples. In the same run, the first ``--baseline-samples`` samples are
solved with scipy.sparse.linalg.spsolve (same matrix) and the median ratio is the speedup.

Threads are pinned to 1 (OMP/OpenBLAS/MKL variables set before numpy is imported). The JSON is
written atomically (temporary file + rename).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.common import loadavg, machine, summary, utc_timestamp, write_json_atomic  # noqa: E402


def run(resolution: int, samples: int, baseline_samples: int, repeats: int, seed: int, params: dict) -> dict:
    from solvers.darcy import DarcyFD, solve

    gen = DarcyFD.from_config({**params, "resolution": resolution}, where="--params")
    p = gen.params
    method = gen.method
    load_start = loadavg()

    # warm-up (first-call imports, FFT plans, eigenvalue cache); not timed
    a0 = gen.coefficients(seed, np.array([0]))[0]
    solve(a0, p.forcing, face_mean=p.face_mean, method=method, rtol=p.rtol, maxiter=p.maxiter)

    per_sample = []
    fast_u = {}
    for i in range(samples):
        t_grf = min(_timed(lambda: gen.coefficients(seed, np.array([i])))[0] for _ in range(repeats))
        a = gen.coefficients(seed, np.array([i]))[0]
        best = None
        for _ in range(repeats):
            t, (u, info) = _timed(
                lambda: solve(a, p.forcing, face_mean=p.face_mean, method=method, rtol=p.rtol, maxiter=p.maxiter)
            )
            if best is None or t < best[0]:
                best = (t, info, _timed.cpu)
        t, info, cpu = best
        fast_u[i] = u
        per_sample.append(
            {
                "index": i,
                "grf_s": t_grf,
                "total_solve_s": t,
                "total_solve_cpu_s": cpu,
                "assemble_s": info.assemble_s,
                "setup_s": info.setup_s,
                "pcg_s": info.solve_s,
                "per_sample_s": t_grf + t,
                "iterations": info.iterations,
                "relative_residual": info.residual,
                "method": info.method,
                "fallback_from": info.fallback_from,
                "u_max": float(u.max()),
                "u_rms_interior": float(np.sqrt(np.mean(u[1:-1, 1:-1] ** 2))),
                "fraction_high": float(np.mean(a == p.high)) if p.coefficient == "piecewise" else None,
            }
        )

    baseline = []
    for i in range(min(baseline_samples, samples)):
        a = gen.coefficients(seed, np.array([i]))[0]
        best = None
        for _ in range(repeats):
            t, (u, info) = _timed(lambda: solve(a, p.forcing, face_mean=p.face_mean, method="direct"))
            if best is None or t < best[0]:
                best = (t, u, info, _timed.cpu)
        t, u, info, cpu = best
        diff = float(np.linalg.norm(fast_u[i] - u) / np.linalg.norm(u))
        baseline.append({"index": i, "spsolve_s": t, "spsolve_cpu_s": cpu, "relative_residual": info.residual, "fast_vs_spsolve_rel_diff": diff})

    solve_times = [r["total_solve_s"] for r in per_sample]
    result = {
        "benchmark": "darcy_fd",
        "created": utc_timestamp(),
        "resolution": resolution,
        "unknowns": (resolution - 2) ** 2,
        "samples": samples,
        "repeats_per_sample": repeats,
        "timing_rule": (
            "per sample: the repeat with the least wall time (its process CPU time beside it, which other "
            "processes on a shared machine inflate less); then median/min/max over samples"
        ),
        "seed": seed,
        "params": {**gen.params_dict()},
        "method": method,
        "per_sample_s": summary([r["per_sample_s"] for r in per_sample]),
        "solve_s": summary(solve_times),
        "solve_cpu_s": summary([r["total_solve_cpu_s"] for r in per_sample]),
        "grf_s": summary([r["grf_s"] for r in per_sample]),
        "assemble_s": summary([r["assemble_s"] for r in per_sample]),
        "setup_s": summary([r["setup_s"] for r in per_sample]),
        "pcg_s": summary([r["pcg_s"] for r in per_sample]),
        "iterations": summary([r["iterations"] for r in per_sample]),
        "relative_residual": summary([r["relative_residual"] for r in per_sample]),
        "baseline": {
            "method": "scipy.sparse.linalg.spsolve (SuperLU, default ordering), same matrix",
            "samples": len(baseline),
            "median_s": float(np.median([b["spsolve_s"] for b in baseline])) if baseline else None,
            "median_cpu_s": float(np.median([b["spsolve_cpu_s"] for b in baseline])) if baseline else None,
            "per_sample": baseline,
        },
        "speedup_vs_spsolve": (
            float(np.median([b["spsolve_s"] for b in baseline]) / np.median(solve_times[: len(baseline)]))
            if baseline
            else None
        ),
        "speedup_vs_spsolve_cpu": (
            float(
                np.median([b["spsolve_cpu_s"] for b in baseline])
                / np.median([r["total_solve_cpu_s"] for r in per_sample[: len(baseline)]])
            )
            if baseline
            else None
        ),
        "speedup_definition": (
            "median spsolve time / median fast solve time (assembly + set-up + PCG) on the same samples; "
            "speedup_vs_spsolve_cpu: the same with process CPU times"
        ),
        "per_sample": per_sample,
        "machine": machine(
            load_start,
            packages=("numpy", "scipy", "pyamg"),
            affinity=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        ),
        "threads": {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
    }
    return result


def _timed(fn):
    """Wall-clock seconds of ``fn()`` and its result; CPU seconds go to ``_timed.cpu``."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    _timed.cpu = time.process_time() - c
    return time.perf_counter() - t, out


def summarize(r: dict) -> list[str]:
    """Lines of SUMMARY.md (opflow bench): samples/s on one core, and the side-by-side spsolve ratio."""
    n, per = r["resolution"], r["per_sample_s"]["median"]
    b = r["baseline"]
    lines = [f"- {n} x {n}, {r['method']}: {per:.4g} s per sample (GRF + solve), {1 / per:.3g} samples/s on one core; "
             f"{r['iterations']['median']:.0f} iterations, residual <= {r['relative_residual']['max']:.1e}"]
    if b["samples"]:
        lines.append(f"- side by side, same matrices: scipy spsolve {b['median_s']:.4g} s, {r['speedup_vs_spsolve']:.1f}x the FD solver's time")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.darcy_fd", description=__doc__.split("\n\n")[0])
    ap.add_argument("--resolution", type=int, default=421)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--baseline-samples", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="solves per sample; the minimum time is kept")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--params", default="{}", help="JSON object of darcy_fd parameters (resolution from --resolution)")
    ap.add_argument("--out", default="benchmarks/results/darcy_fd.json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.resolution, a.samples, a.baseline_samples, a.repeats = 33, 2, 1, 1
    if a.samples < 1 or a.repeats < 1 or a.baseline_samples < 0:
        ap.error("--samples and --repeats must be >= 1, --baseline-samples >= 0")

    from opflow.data.errors import ConfigError
    from solvers.base import SolverError

    try:
        res = run(a.resolution, a.samples, a.baseline_samples, a.repeats, a.seed, json.loads(a.params))
        res["smoke"] = a.smoke
    except (ConfigError, SolverError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_json_atomic(Path(a.out), res)
    s, b = res["solve_s"], res["baseline"]
    print(
        f"darcy_fd {a.resolution}x{a.resolution} ({res['method']}): solve median {s['median']:.3f} s "
        f"(min {s['min']:.3f}, max {s['max']:.3f}) over {a.samples} samples, GRF {res['grf_s']['median']:.3f} s, "
        f"iterations {res['iterations']['median']:.0f}, residual <= {res['relative_residual']['max']:.1e}; "
        f"CPU time median {res['solve_cpu_s']['median']:.3f} s"
    )
    if b["samples"]:
        print(
            f"spsolve median {b['median_s']:.3f} s (CPU {b['median_cpu_s']:.3f} s) over {b['samples']} samples; "
            f"speedup {res['speedup_vs_spsolve']:.1f}x (CPU time {res['speedup_vs_spsolve_cpu']:.1f}x)"
        )
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
