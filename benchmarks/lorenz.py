"""Speed and accuracy of the batched Lorenz-63 integrator (solvers/ode.py) against scipy per trajectory.

    python -m benchmarks.lorenz [--samples 10000] [--scipy-samples 200] [--out benchmarks/results/lorenz.json]

The ``lorenz63`` protocol (T = 2, dt = 0.01, 201 output times, initial states of the generator
under ``--seed``) is integrated at rtol = atol = 1e-10:

* batched: :func:`solvers.ode.integrate` on all ``--samples`` trajectories in one call
  (``--repeats`` runs, median and minimum reported), and the whole ``lorenz63`` generator
  (initial-state sampling included) on the same samples once;
* scipy: ``scipy.integrate.solve_ivp(method="DOP853")`` with a plain scalar right-hand side, one
  trajectory at a time, on the first ``--scipy-samples`` trajectories; its time is *extrapolated*
  linearly to ``--samples`` (per-trajectory cost does not depend on the count);
* accuracy: max deviation between the two on the scipy trajectories, and of each against DOP853 at
  rtol = atol = 1e-13 on the first ``--reference-samples`` trajectories.

Threads are pinned to 1 before numpy is imported. The JSON is written atomically (temporary file +
rename). The machine may be shared: the load average at start and end is recorded.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.common import loadavg, machine, utc_timestamp, write_json_atomic  # noqa: E402


def _scipy_solve(s0: np.ndarray, t: np.ndarray, rtol: float, atol: float, sigma: float, rho: float, beta: float) -> np.ndarray:
    from scipy.integrate import solve_ivp

    def rhs(_t: float, s: np.ndarray) -> list[float]:
        x, y, z = s
        return [sigma * (y - x), x * (rho - z) - y, x * y - beta * z]

    out = np.empty((s0.shape[0], t.size, 3))
    for b in range(s0.shape[0]):
        sol = solve_ivp(rhs, (0.0, t[-1]), s0[b], method="DOP853", t_eval=t, rtol=rtol, atol=atol)
        if not sol.success:
            raise RuntimeError(f"scipy failed on trajectory {b}: {sol.message}")
        out[b] = sol.y.T
    return out


def run(samples: int, scipy_samples: int, reference_samples: int, repeats: int, seed: int, dt: float, T: float) -> dict:
    from opflow.data.provenance import sample_rng
    from solvers.lorenz import Lorenz63, lorenz63_rhs
    from solvers.ode import integrate

    gen = Lorenz63.from_config({"dt": dt, "T": T}, where="benchmark")
    p = gen.params
    t = gen.base_times
    load_start = loadavg()
    s0 = gen.initial_states([sample_rng(seed, i) for i in range(samples)])
    f = lorenz63_rhs(p.sigma, p.rho, p.beta)

    integrate(f, s0[:16], t, rtol=p.rtol, atol=p.atol)  # warm-up, not timed
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sol = integrate(f, s0, t, rtol=p.rtol, atol=p.atol)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    data = gen.generate(seed, np.arange(samples))
    gen_time = time.perf_counter() - t0
    gen_same = bool(np.array_equal(data["y"], sol.y[..., 1]))

    ns = min(scipy_samples, samples)
    t0 = time.perf_counter()
    ref = _scipy_solve(s0[:ns], t, p.rtol, p.atol, p.sigma, p.rho, p.beta)
    scipy_time = time.perf_counter() - t0
    dev = np.abs(sol.y[:ns] - ref)

    nr = min(reference_samples, samples)
    fine = _scipy_solve(s0[:nr], t, 1e-13, 1e-13, p.sigma, p.rho, p.beta)
    err_batched = np.abs(sol.y[:nr] - fine).max(axis=(1, 2))
    err_scipy = np.abs(ref[:nr] - fine).max(axis=(1, 2))

    batched = float(np.median(times))
    scipy_extrapolated = scipy_time * samples / ns
    return {
        "benchmark": "lorenz",
        "created": utc_timestamp(),
        "problem": {"sigma": p.sigma, "rho": p.rho, "beta": p.beta, "T": T, "dt": dt, "output_times": int(t.size), "ic_box": [p.x0_range, p.y0_range, p.z0_range]},
        "samples": samples,
        "seed": seed,
        "tolerances": {"rtol": p.rtol, "atol": p.atol},
        "batched": {
            "method": "solvers.ode.integrate: Dormand-Prince 5(4), per-trajectory step control, all trajectories in one call",
            "repeats": repeats,
            "wall_s_median": batched,
            "wall_s_min": float(min(times)),
            "wall_s_all": times,
            "generator_wall_s": gen_time,
            "generator_matches_integrator": gen_same,
            "accepted_steps_mean": float(sol.n_accepted.mean()),
            "rejected_steps_mean": float(sol.n_rejected.mean()),
            "rhs_evaluations_mean": float(sol.n_rhs.mean()),
            "batch_iterations": int(sol.n_iterations),
        },
        "scipy": {
            "method": "scipy.integrate.solve_ivp(method='DOP853', t_eval=grid), scalar Python right-hand side, one trajectory per call",
            "timed_samples": ns,
            "wall_s_timed": scipy_time,
            "wall_s_extrapolated": scipy_extrapolated,
            "extrapolation": f"linear: wall_s_timed * {samples} / {ns}",
        },
        "speedup": scipy_extrapolated / batched,
        "speedup_definition": "extrapolated scipy wall time / median batched wall time, same samples, tolerances and output grid",
        "max_abs_deviation_batched_vs_scipy": float(dev.max()),
        "max_rel_deviation_batched_vs_scipy": float(dev.max() / np.abs(ref).max()),
        "accuracy_vs_dop853_1e-13": {
            "samples": nr,
            "batched_max_abs_error": {"max": float(err_batched.max()), "median": float(np.median(err_batched))},
            "scipy_max_abs_error": {"max": float(err_scipy.max()), "median": float(np.median(err_scipy))},
            "state_max_abs": float(np.abs(fine).max()),
        },
        "machine": machine(load_start, packages=("numpy", "scipy"), shared="the machine may run other jobs; see loadavg"),
    }


def summarize(r: dict) -> list[str]:
    """Lines of SUMMARY.md (opflow bench): trajectories/s of the batched integrator beside scipy's."""
    b, s, n = r["batched"], r["scipy"], r["samples"]
    return [f"- {n} trajectories: batched Dormand-Prince {b['wall_s_median']:.3g} s ({n / b['wall_s_median']:.4g} samples/s on one core); "
            f"scipy DOP853 one by one {s['wall_s_extrapolated']:.3g} s (extrapolated): {r['speedup']:.0f}x; "
            f"max deviation {r['max_abs_deviation_batched_vs_scipy']:.1e}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lorenz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--scipy-samples", type=int, default=200)
    ap.add_argument("--reference-samples", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3, help="batched runs; the median is reported")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dt", type=float, default=0.01)
    ap.add_argument("--T", type=float, default=2.0)
    ap.add_argument("--out", default="benchmarks/results/lorenz.json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.samples, a.scipy_samples, a.reference_samples, a.repeats = 200, 5, 5, 1
    if min(a.samples, a.scipy_samples, a.reference_samples, a.repeats) < 1:
        ap.error("--samples, --scipy-samples, --reference-samples and --repeats must be >= 1")

    from opflow.data.errors import ConfigError
    from solvers.base import SolverError

    try:
        res = run(a.samples, a.scipy_samples, a.reference_samples, a.repeats, a.seed, a.dt, a.T)
        res["smoke"] = a.smoke
    except (ConfigError, SolverError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_json_atomic(Path(a.out), res)
    b, s = res["batched"], res["scipy"]
    print(
        f"lorenz63 {a.samples} trajectories, T = {a.T}, dt = {a.dt}: batched {b['wall_s_median']:.2f} s (median of {a.repeats}), "
        f"scipy DOP853 {s['wall_s_extrapolated']:.1f} s (extrapolated from {s['timed_samples']}), speedup {res['speedup']:.0f}x, "
        f"max |batched - scipy| = {res['max_abs_deviation_batched_vs_scipy']:.2e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
