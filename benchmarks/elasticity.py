"""Cost and statistics of the elasticity unit-cell generator ``elasticity`` (solvers/elasticity.py).

    python -m benchmarks.elasticity [--samples 20] [--timing-samples 7] [--out benchmarks/results/elasticity.json]

Timing: per sample, the gmsh mesh (geometry + meshing + extraction) and the solve (dolfinx mesh,
binding of the precompiled forms, 10 load steps of Newton with MUMPS LU, nodal and quadrature-point
stress, gathering) are timed separately; the report gives median, min and max over
``--timing-samples`` samples (each timed once; the first sample of each case, which also builds the
solver and loads the compiled forms, is excluded and reported as ``first_sample_s``). Cases: the
default O-grid (36 x 3 = 108 Q9) and two refinements (72 x 6, 144 x 12), and unstructured Q9 meshes
at mesh_size 0.09, 0.045, 0.0225 (scaling with the element count).

Statistics (``--samples`` samples of the default configuration, the published protocol: 108 Q9,
von Mises at the 972 Gauss points): per sample the mean of the von Mises stress over the points
(unweighted, as a model's loss sees it) and area-weighted, the maximum, the concentration
max / mean, the Newton iterations; summarised over samples. The same samples on the 4x finer
O-grid (144 x 12) give the discretisation error of the protocol mesh in these statistics.

Threads are pinned to 1. The JSON is written atomically (temporary file + rename). The machine may
be shared with other jobs: timings are medians over samples.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import summary, utc_timestamp, versions, write_json_atomic  # noqa: E402
from meshes.elasticity_cell import cell_mesh  # noqa: E402
from opflow.data.provenance import sample_rng  # noqa: E402
from solvers.elasticity import ElasticityParams, ElasticitySolver, solve_cell  # noqa: E402

TIMING_CASES: list[dict[str, Any]] = [
    {"topology": "ogrid", "ogrid_n_theta": 36, "ogrid_n_radial": 3},
    {"topology": "ogrid", "ogrid_n_theta": 72, "ogrid_n_radial": 6},
    {"topology": "ogrid", "ogrid_n_theta": 144, "ogrid_n_radial": 12},
    {"topology": "unstructured", "mesh_size": 0.09},
    {"topology": "unstructured", "mesh_size": 0.045},
    {"topology": "unstructured", "mesh_size": 0.0225},
]

#: what is known of the published set (Geo-FNO's Random_UnitCell_*_10.npy, used by ONO, GNOT, ...)
PUBLISHED = {
    "source": "Li et al. 2022 (Geo-FNO) section 4.1; array shapes as read by the public training scripts",
    "samples": 2000,
    "split": "first 1000 train, last 200 test",
    "points_per_sample": 972,
    "points": "von Mises stress at the 3 x 3 Gauss points of about 108 quadratic quadrilaterals (972 = 108 x 9)",
    "shape_code": "42 radii r(theta_j) (Random_UnitCell_rr_10.npy, shape (42, N)); angles: Random_UnitCell_theta_10.npy",
    "stress_statistics": None,
    "stress_statistics_note": (
        "no published description of the stress values (mean, maximum, concentration) was found; "
        "compare by loading Random_UnitCell_sigma_10.npy (shape (972, N)) where it is available"
    ),
}


def time_case(case: dict[str, Any], n: int, seed: int) -> dict[str, Any]:
    params = ElasticityParams(**case)
    prior, spec = params.prior(), params.mesh_spec()
    mesh_s, solve_s, cells, nodes = [], [], [], []
    first = None
    solver = None
    for i in range(n + 1):
        c = prior.sample(sample_rng(seed, i))
        t0 = time.perf_counter()
        mesh = cell_mesh(c, prior, spec)
        t1 = time.perf_counter()
        if solver is None:
            solver = ElasticitySolver(params.material_model(), cell=params.cell_type, degree=params.order,
                                      quadrature_degree=params.quadrature(), newton=params.newton_options())
        solve_cell(solver, mesh, params.traction, index=i, seed=seed)
        t2 = time.perf_counter()
        if i == 0:
            first = t2 - t0
            continue
        mesh_s.append(t1 - t0)
        solve_s.append(t2 - t1)
        cells.append(mesh.n_cells)
        nodes.append(mesh.n_nodes)
    total = [a + b for a, b in zip(mesh_s, solve_s, strict=True)]
    return {
        "params": case,
        "cells": summary(cells),
        "nodes": summary(nodes),
        "unknowns": summary([2 * v for v in nodes]),
        "mesh_s": summary(mesh_s),
        "solve_s": summary(solve_s),
        "total_s": summary(total),
        "first_sample_s": first,
    }


def sample_statistics(params: ElasticityParams, n: int, seed: int) -> list[dict[str, float]]:
    prior, spec = params.prior(), params.mesh_spec()
    solver = ElasticitySolver(params.material_model(), cell=params.cell_type, degree=params.order,
                              quadrature_degree=params.quadrature(), newton=params.newton_options())
    rows = []
    for i in range(n):
        c = prior.sample(sample_rng(seed, i))
        mesh = cell_mesh(c, prior, spec)
        sol = solve_cell(solver, mesh, params.traction, index=i, seed=seed)
        vm, w = sol.stress_qpoints.ravel(), sol.qweights.ravel()
        mean = float(vm.mean())
        rows.append({
            "mean": mean,
            "mean_area_weighted": float((vm * w).sum() / w.sum()),
            "max": float(vm.max()),
            "min": float(vm.min()),
            "concentration": float(vm.max() / mean),
            "max_nodal": float(sol.stress_nodes.max()),
            "max_displacement": float(np.abs(sol.displacement).max()),
            "radius_min": float(prior.code(c, 361).min()),
            "radius_max": float(prior.code(c, 361).max()),
            "newton_iterations_per_step": float(np.mean(sol.newton_iterations)),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=20, help="samples for the statistics")
    ap.add_argument("--timing-samples", type=int, default=7, help="timed samples per case (plus one warm-up)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "elasticity.json"))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.samples, a.timing_samples = 1, 1

    cases = []
    for case in TIMING_CASES[:1] if a.smoke else TIMING_CASES:
        r = time_case(case, a.timing_samples, a.seed)
        print(f"{case}: {r['cells']['median']:.0f} cells, mesh {r['mesh_s']['median']:.3f} s, "
              f"solve {r['solve_s']['median']:.3f} s", flush=True)
        cases.append(r)

    base = ElasticityParams()
    fine = ElasticityParams(ogrid_n_theta=144, ogrid_n_radial=12)  # the discretisation check (one sample in a smoke run)
    rows = sample_statistics(base, a.samples, a.seed)
    rows_fine = sample_statistics(fine, a.samples, a.seed)
    keys = ("mean", "mean_area_weighted", "max", "concentration", "max_nodal")
    stats = {k: {"mean": float(np.mean([r[k] for r in rows])), **summary([r[k] for r in rows])} for k in rows[0]}
    discretisation = {
        k: summary([abs(r[k] - f[k]) / abs(f[k]) for r, f in zip(rows, rows_fine, strict=True)]) for k in keys
    }
    print(json.dumps({k: stats[k] for k in keys}, indent=1))

    result = {
        "benchmark": "elasticity",
        "smoke": a.smoke,
        "created": utc_timestamp(),
        "seed": a.seed,
        "timing_rule": (
            "each sample timed once (mesh = gmsh geometry + meshing + extraction; solve = dolfinx mesh, "
            "form binding, 10 load steps, outputs); first sample of each case excluded (first_sample_s); "
            "median/min/max over timing_samples; machine shared with other jobs, 1 thread"
        ),
        "timing_samples": a.timing_samples,
        "cases": cases,
        "statistics": {
            "params": "defaults: O-grid 36 x 3 = 108 Q9, Rivlin-Saunders, traction 100, 10 load steps",
            "samples": a.samples,
            "quantities": "von Mises (Cauchy) at the 972 Gauss points; mean = unweighted over points",
            "over_samples": stats,
            "per_sample": rows,
            "relative_difference_to_144x12_ogrid": discretisation,
        },
        "published": PUBLISHED,
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()},
        "versions": versions("numpy", "fenics-dolfinx", "dolfinx-solver-real", "gmsh", "petsc4py", missing=None),
    }
    out = Path(a.out)
    write_json_atomic(out, result, indent=1)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
