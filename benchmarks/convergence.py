"""Observed convergence orders of the solvers, as a JSON report and a log-log plot.

    python -m benchmarks.convergence [--out benchmarks/results/convergence.json] [--png benchmarks/results/convergence.png]

Runs the studies of :mod:`solvers.verification` (the problems the tests in ``tests/solvers/``
assert on, defined once there) on sequences that reach a little beyond the tests':

* FD Darcy, 5-point scheme, arithmetic and harmonic face means: max and L2 error against h,
  s = 9 ... 257 nodes a side (tests: 17 ... 129);
* FEM Darcy on the unit square, P1 and P2: L2 and H1-seminorm error against h, n = 8 ... 256
  squares a side (tests: 8 ... 64);
* Navier-Stokes, Taylor-Green (``fno``, ``heun_cn``): relative max error against dt,
  dt = 0.2 ... 0.003125 (tests: 0.1 ... 0.0125);
* Navier-Stokes, forced flow (``fno``, ``heun_cn``, ``etdrk4``): relative L2 error against an
  ``etdrk4`` reference at dt = 1/2048 (tests: 1/512), one step size further than the tests;
* Dormand-Prince 5(4) in fixed-step mode on the linear ODE: max error against dt, n = 20 ... 640
  steps (tests: 20 ... 160).

The observed order is the least-squares slope of log error against log h (or dt) over the whole
sequence; the local order between consecutive steps is reported too. The JSON (errors, slopes,
wall times, machine block) is written atomically; the PNG has one log-log panel per study with a
dashed line of the expected order and the fitted slope in the legend, and a table of all slopes.

Threads are pinned to 1 (OMP/OpenBLAS variables before numpy is imported, torch in :func:`run`):
the whole run takes about 15 s on one core.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.common import loadavg, machine, utc_timestamp, write_json_atomic  # noqa: E402

FD_SIZES = [9, 17, 33, 65, 129, 257]
FEM_HS = [1 / n for n in (8, 16, 32, 64, 128, 256)]
TG_DTS = [0.2, 0.1, 0.05, 0.025, 0.0125, 0.00625, 0.003125]
FORCED_REFERENCE_DT = 1 / 2048
FORCED_DTS = {
    "fno": [0.02, 0.01, 0.005, 0.0025, 0.00125],
    "heun_cn": [0.1, 0.05, 0.025, 0.0125, 0.00625],
    "etdrk4": [0.1, 0.05, 0.025, 0.0125, 0.00625],
}
ODE_STEPS = [20, 40, 80, 160, 320, 640]

# panel key -> (title, problem statement for the JSON, tag in the table of slopes)
PANELS = {
    "darcy_fd": ("(a) Darcy FD, 5-point", "-div(a grad u) = f on (0,1)^2, u = sin(pi x) sin(2 pi y), a = 1 + sin(2 pi x + 1) cos(pi y)/2", "FD"),
    "darcy_fem": ("(b) Darcy FEM, unit square", "-div(a grad u) = f on (0,1)^2, u = 16 x(1-x) y(1-y)(x-1/2)(y-1/2), a = 1 + sin(2 pi x) cos(3 pi y)/2 + x^2", "FEM"),
    "taylor_green": ("(c) Navier-Stokes, Taylor-Green (viscous term only)", "w = 2k cos(kx) cos(ky) exp(-2 nu k^2 t), k = 2, nu = 0.05, n = 32, t = 1 (relative max error)", "TG"),
    "ns_forced": ("(c) Navier-Stokes, forced flow", "smooth random IC, Kolmogorov forcing k = 1, nu = 0.01, n = 32, t = 1, vs etdrk4 at dt = 1/2048 (relative L2 error)", "NS"),
    "ode": ("(d) Dormand-Prince 5(4), fixed steps", "y' = A y, A = [[-0.1, 2], [-2, -0.1]], y0 = (1, 1/2), T = 5 (max error at T)", "ODE"),
}


def run(smoke: bool = False) -> tuple[dict[str, list[Any]], dict[str, float]]:
    """All studies, grouped by panel, and the wall time of each panel's studies (``smoke``: the first
    three steps of each sequence and a coarser Navier-Stokes reference, about a second)."""
    import torch

    from solvers import verification as v

    torch.set_num_threads(1)
    studies: dict[str, list[Any]] = {}
    wall: dict[str, float] = {}

    def timed(key: str, make: Any) -> None:
        t0 = time.perf_counter()
        studies[key] = make()
        wall[key] = time.perf_counter() - t0

    k = 3 if smoke else None  # steps of each sequence
    timed("darcy_fd", lambda: [v.darcy_fd_study(FD_SIZES[:k], face_mean=fm) for fm in ("arithmetic", "harmonic")])
    timed("darcy_fem", lambda: [v.darcy_fem_study(p, FEM_HS[:k]) for p in (1, 2)])
    timed("taylor_green", lambda: [v.taylor_green_study(s, TG_DTS[:k]) for s in ("fno", "heun_cn")])

    def forced() -> list[Any]:
        flow = v.forced_flow(reference_dt=1 / 256 if smoke else FORCED_REFERENCE_DT)
        return [v.ns_forced_study(s, dts[:k], flow) for s, dts in FORCED_DTS.items()]

    timed("ns_forced", forced)
    timed("ode", lambda: [v.ode_fixed_step_study(ODE_STEPS[:k])])
    return studies, wall


def _series(studies: list[Any]) -> list[tuple[str, Any, str]]:
    """(legend label, study, norm) for every curve of a panel."""
    out = []
    for st in studies:
        for norm in st.errors:
            label = f"{st.label}: {norm}" if len(st.errors) > 1 else st.label
            out.append((label, st, norm))
    return out


def plot(studies: dict[str, list[Any]], path: str | os.PathLike[str]) -> Path:
    from opflow.plots import figure, save_figure

    fig = figure(figsize=(15, 9), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    markers = "osD^vx"
    rows = []
    for ax, (key, group) in zip(axes, studies.items(), strict=False):
        title, _, tag = PANELS[key]
        series = _series(group)
        var = group[0].variable
        for i, (label, st, norm) in enumerate(series):
            p = st.slopes[norm]
            filled = i % 2 == 0 or key != "taylor_green"
            ax.loglog(st.steps, st.errors[norm], marker=markers[i % len(markers)], ms=6, lw=1.2,
                      mfc=None if filled else "none", label=f"{label}: slope {p:.2f}")
            rows.append((tag, label, st.expected[norm], p))
        # one dashed reference line per expected order, under the lowest curve of that order
        for order in sorted({st.expected[n] for _, st, n in series}):
            curves = [(st.steps, st.errors[n]) for _, st, n in series if st.expected[n] == order]
            h = np.array(curves[0][0])
            e_end = min(e[-1] for _, e in curves) / 2.5
            ax.loglog(h, e_end * (h / h[-1]) ** order, "k--", lw=1, alpha=0.7,
                      label=f"$O({var}^{{{order:g}}})$ reference")
        ax.set_title(title)
        ax.set_xlabel(var)
        ax.set_ylabel("error")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8, loc="lower right")
    table = axes[-1]
    table.axis("off")
    text = ["observed order (least-squares fit over all steps)", "", f"{'':5}{'curve':<22}{'expected':>9}{'observed':>10}"]
    text += [f"{tag:<5}{label:<22}{exp:>9g}{obs:>10.3f}" for tag, label, exp, obs in rows]
    table.text(0.0, 1.0, "\n".join(text), family="monospace", fontsize=9, va="top", transform=table.transAxes)
    fig.suptitle("Observed convergence orders of the opflow solvers (problems defined in solvers/verification.py)")
    return save_figure(fig, path)


def summarize(r: dict) -> list[str]:
    """Lines of SUMMARY.md (opflow bench): the observed order of every study against the expected one."""
    lines = []
    for panel in r["panels"].values():
        for st in panel["studies"]:
            orders = ", ".join(f"{k} {v:.2f} (expected {st['expected_order'][k]:g})" for k, v in st["observed_order"].items())
            lines.append(f"- {st['name']}: {orders}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.convergence", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results/convergence.json")
    ap.add_argument("--png", default=None, help="the plot (default: --out with .png)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke)")
    a = ap.parse_args(argv)
    a.png = a.png or str(Path(a.out).with_suffix(".png"))

    load_start = loadavg()
    t0 = time.perf_counter()
    studies, wall = run(a.smoke)
    total = time.perf_counter() - t0
    res = {
        "benchmark": "convergence",
        "smoke": a.smoke,
        "created": utc_timestamp(),
        "definition": "observed order = least-squares slope of log(error) against log(h or dt); local orders between consecutive steps",
        "panels": {
            key: {"title": PANELS[key][0], "problem": PANELS[key][1], "wall_s": wall[key], "studies": [st.to_dict() for st in group]}
            for key, group in studies.items()
        },
        "wall_s_total": total,
        "plot": str(a.png),
        "machine": machine(load_start, packages=("numpy", "scipy", "pyamg", "torch", "dolfinx-solver-real"), threads=1,
                           shared="the machine may run other jobs; see loadavg"),
    }
    write_json_atomic(Path(a.out), res)
    plot(studies, a.png)
    for key, group in studies.items():
        for st in group:
            slopes = ", ".join(f"{n} {p:.3f} (expected {st.expected[n]:g})" for n, p in st.slopes.items())
            print(f"{st.name:<34} {slopes}")
    print(f"{total:.1f} s; wrote {a.out} and {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
