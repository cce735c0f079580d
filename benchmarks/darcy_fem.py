"""Speed of the Darcy finite-element generator ``darcy_fem`` (solvers/darcy_fem.py).

    python -m benchmarks.darcy_fem [--samples 12] [--out benchmarks/results/darcy_fem.json]

Cases (default): the unit square at s = 421 (n = 420 cells a side, P1, 176,400 unknowns) and at
s = 85, each with the MUMPS Cholesky solver (default) and with CG + GAMG, and the perforated
square (mesh_size 0.01) at s = 85. For every case it times, per sample, the coefficient sampling,
the matrix assembly, the linear solve (including the true-residual check) and the output
transfer (interpolation to the grid, gather), and records the KSP iterations and the true relative
residual; the report gives median, min and max over ``--samples`` samples (each sample timed
once: the factorisation cannot be reused between samples, so there is nothing to repeat). Set-up
(mesh, form compilation from the JIT cache, transfer operators, symbolic factorisation on the
first solve) is timed once per case; the cost of compiling the forms from an EMPTY JIT cache is
measured separately in a subprocess with a fresh ``XDG_CACHE_HOME``.

Threads are pinned to 1 (OMP/OpenBLAS variables set before numpy is imported). The JSON is written
atomically (temporary file + rename).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.common import loadavg, machine, summary, utc_timestamp, versions, write_json_atomic  # noqa: E402

DEFAULT_CASES = [
    {"resolution": 421},
    {"resolution": 421, "solver": "cg"},
    {"resolution": 85},
    {"resolution": 85, "solver": "cg"},
    {"resolution": 85, "domain": "perforated", "mesh_size": 0.01},
]

_COLD = """
import json, os, sys, time
t0 = time.perf_counter()
from solvers.darcy_fem import DarcyFEMGenerator
g = DarcyFEMGenerator.from_config(json.loads(sys.argv[1]))
g.mesh(); t1 = time.perf_counter()
g.setup(); t2 = time.perf_counter()
print(json.dumps({"import_and_mesh_s": t1 - t0, "setup_s": t2 - t1}))
"""


def run_case(params: dict, samples: int, seed: int) -> dict:
    from solvers.darcy_fem import DarcyFEMGenerator

    t0 = time.perf_counter()
    gen = DarcyFEMGenerator.from_config(params, where="case")
    gen.setup()
    setup_s = time.perf_counter() - t0
    mesh_s = gen.timings["mesh_s"]
    # the first solve also does MUMPS's symbolic analysis / GAMG's first set-up: time it apart
    t0 = time.perf_counter()
    gen.generate(seed, np.array([samples]))
    first_s = time.perf_counter() - t0
    keys = ("coefficient_s", "assemble_s", "solve_s", "output_s", "iterations", "residual")
    rows: dict[str, list[float]] = {k: [] for k in (*keys, "total_s")}
    for i in range(samples):
        t0 = time.perf_counter()
        gen.generate(seed, np.array([i]))
        rows["total_s"].append(time.perf_counter() - t0)
        for k in keys:
            rows[k].append(gen.timings[k])
    solver = gen.setup().solver
    return {
        "params": gen.params_dict(),
        "unknowns": int(solver.V.dofmap.index_map.size_global),
        "cells": int(gen.mesh().topology.index_map(2).size_global),
        "setup_s": setup_s,
        "mesh_s": mesh_s,
        "first_sample_s": first_s,
        "per_sample_s": summary(rows["total_s"]),
        **{k: summary(rows[k]) for k in keys},
    }


def cold_setup(params: dict) -> dict:
    """Import, mesh and set-up time in a fresh process with an empty dolfinx JIT cache."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_CACHE_HOME": tmp, "PYTHONPATH": str(root)}
        out = subprocess.run([sys.executable, "-c", _COLD, json.dumps(params)], env=env, cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fd_reference(resolution: int, samples: int, seed: int) -> dict:
    """darcy_fd's solve time for the same coefficients (context for the FEM numbers)."""
    from solvers.darcy import DarcyFD, solve

    gen = DarcyFD.from_config({"resolution": resolution})
    times = []
    for i in range(samples):
        a = gen.coefficients(seed, np.array([i]))[0]
        t0 = time.perf_counter()
        solve(a, 1.0)
        times.append(time.perf_counter() - t0)
    return {"resolution": resolution, "solve_s": summary(times)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", default=None, help="JSON list of darcy_fem parameter dicts (default: see module doc)")
    ap.add_argument("--no-cold", action="store_true", help="skip the empty-JIT-cache set-up measurement")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "darcy_fem.json"))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.samples, a.cases, a.no_cold = 2, json.dumps([{"resolution": 17}]), True
    if a.samples < 1:
        ap.error("--samples must be >= 1")
    cases = json.loads(a.cases) if a.cases else DEFAULT_CASES
    load_start = loadavg()
    results = []
    for params in cases:
        r = run_case(params, a.samples, a.seed)
        results.append(r)
        print(
            f"{json.dumps(params)}: {r['unknowns']} unknowns, per sample {r['per_sample_s']['median']:.4f} s "
            f"(assemble {r['assemble_s']['median']:.4f}, solve {r['solve_s']['median']:.4f}, "
            f"output {r['output_s']['median']:.4f}, coefficient {r['coefficient_s']['median']:.4f}), "
            f"iterations {r['iterations']['median']:.0f}, residual <= {r['residual']['max']:.1e}, set-up {r['setup_s']:.2f} s",
            flush=True,
        )
    report = {
        "benchmark": "darcy_fem",
        "smoke": a.smoke,
        "created": utc_timestamp(),
        "samples": a.samples,
        "seed": a.seed,
        "timing_rule": "each sample timed once (first sample of each case excluded, reported as first_sample_s); median/min/max over samples",
        "cases": results,
        "fd_reference": [fd_reference(s, min(a.samples, 10), a.seed) for s in sorted({c["resolution"] for c in cases if c.get("domain", "unit_square") == "unit_square"})],
        "machine": machine(
            load_start,
            threads=1,
            note="shared development machine (2 cores, other jobs running): absolute times are indicative",
        ),
        "versions": versions("numpy", "scipy", "fenics-dolfinx", "dolfinx-solver-real", "petsc4py", "gmsh", missing=None),
    }
    if not a.no_cold:
        report["cold_jit_setup"] = {"params": {"resolution": 85}, **cold_setup({"resolution": 85})}
        print(f"cold JIT set-up at s = 85: {report['cold_jit_setup']}")
    out = Path(a.out)
    write_json_atomic(out, report)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
