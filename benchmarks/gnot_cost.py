"""Cost of GNOT against the number of points: linear in the query points and in every input set.

    python -m benchmarks.gnot_cost [--sizes 1024,4096,16384,65536] [--threads 1] [--repeats 3]
                                   [--width 32 --layers 2 --heads 4 --experts 2]
                                   [--out benchmarks/results/gnot_cost.json] [--smoke]

One forward + backward (sum of the outputs) of :class:`opflow.models.gnot.GNOT` on random points
of the unit square, batch 1, float32, CPU. Two sweeps:

* ``points``: n query points that are also the n points of the input function (``query=None``,
  the Darcy / Navier-Stokes use), plus a second input function on its own n / 16 points;
* ``input_set``: 4096 query points and input points fixed, the second input function on m points
  (the fixed part dominates the small sizes, so the exponent of the total time understates the
  growth; the affine fit ``t = a + b m`` and its residuals show the linear part).

The paper's claim (Hao et al. 2023, Sec. 3.4, after eq. 8): the cost is ``O((N + sum_l N_l) n_e^2)``,
linear in every sequence length. Reported per size: median, min and max wall time of ``--repeats``
calls after one warm-up; per sweep the least-squares slope of log(median time) against log(size)
(1 = linear, 2 = quadratic), the slopes between consecutive sizes and the affine fit
``t = a + b size`` with its largest relative residual. Timings are not asserted
anywhere (tests never time); ``--smoke`` runs tiny sizes in seconds for CI.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from benchmarks.common import loadavg, machine, summary, timed_repeats, utc_timestamp, write_json_atomic

OUT = Path(__file__).parent / "results" / "gnot_cost.json"


def _slope(xs: list[int], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def _affine(xs: list[int], ys: list[float]) -> dict[str, float]:
    """Least-squares ``t = a + b n`` and its largest relative residual: a linear cost has small
    residuals even where a fixed part (the other point sets) hides the exponent."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    return {"intercept_s": a, "per_point_s": b, "max_rel_residual": max(abs(a + b * x - y) / y for x, y in zip(xs, ys))}


def run(sizes: list[int], fixed: int, hp: dict, repeats: int, threads: int, seed: int = 0) -> dict:
    import torch

    from opflow.models import build_model, count_parameters

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = build_model({"arch": "gnot", **hp, "input_sets": [[2, 1]]}, 1, 1, 2)
    gen = torch.Generator().manual_seed(seed)

    def step_for(n: int, m: int):
        x, a = torch.rand(1, n, 2, generator=gen), torch.rand(1, n, 1, generator=gen)
        sx, sv = torch.rand(1, m, 2, generator=gen), torch.rand(1, m, 1, generator=gen)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            model(x, a, input_sets=[(sx, sv, None)]).sum().backward()

        return step

    sweeps: dict[str, dict] = {}
    for name, cases in (("points", [(n, max(1, n // 16)) for n in sizes]), ("input_set", [(fixed, m) for m in sizes])):
        rows = []
        for n, m in cases:
            step = step_for(n, m)
            step()  # warm-up
            rows.append({"query_points": n, "input_set_points": m, "seconds": summary(timed_repeats(step, repeats))})
        size = [r["query_points"] if name == "points" else r["input_set_points"] for r in rows]
        med = [r["seconds"]["median"] for r in rows]
        fit = _affine(size, med) if len(rows) > 1 else None
        sweeps[name] = {
            "rows": rows,
            "affine_fit": fit,
            "time_exponent": _slope(size, med) if len(rows) > 1 else None,
            "local_time_exponents": [math.log(med[i + 1] / med[i]) / math.log(size[i + 1] / size[i]) for i in range(len(rows) - 1)],
        }
    return {"parameters": count_parameters(model), "sweeps": sweeps}


def summarize(result: dict) -> list[str]:
    """The ``SUMMARY.md`` lines: per sweep the times and the fitted exponent."""
    lines = []
    for name, sw in result["sweeps"].items():
        key = "query_points" if name == "points" else "input_set_points"
        times = ", ".join(f"{r[key]}: {r['seconds']['median']:.3g} s" for r in sw["rows"])
        lines.append(f"- GNOT {name} sweep ({result['parameters']:,} parameters): {times}; time exponent {sw['time_exponent']:.2f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1024,4096,16384,65536")
    p.add_argument("--fixed", type=int, default=4096, help="query / input points of the input_set sweep")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--experts", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat, no file unless --out is given")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.smoke:
        sizes, args.fixed, args.repeats = [64, 256], 128, 1
    hp = {"width": args.width, "n_layers": args.layers, "n_heads": args.heads, "n_experts": args.experts, "ffn_ratio": 2.0, "mlp_layers": 1}
    load0 = loadavg()
    res = run(sizes, args.fixed, hp, args.repeats, args.threads)
    out = {
        "benchmark": "gnot_cost",
        "what": "one forward + backward of GNOT, batch 1, float32, CPU; median of repeats after a warm-up",
        "model": {"arch": "gnot", **hp, "input_sets": [[2, 1]]},
        "repeats": args.repeats,
        "threads": args.threads,
        **res,
        "machine": machine(load0, packages=["torch"]),
        "created": utc_timestamp(),
    }
    for name, sw in res["sweeps"].items():
        print(f"{name}: " + ", ".join(f"{r['query_points']}/{r['input_set_points']}: {r['seconds']['median']:.3g} s" for r in sw["rows"]) + f"; exponent {sw['time_exponent']}")
    if not args.smoke or "--out" in (argv if argv is not None else __import__("sys").argv):
        write_json_atomic(args.out, out)


if __name__ == "__main__":
    main()
