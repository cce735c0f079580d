"""Does training in TF32 or bf16 change the test error? fp32, tf32 and bf16 runs of one protocol, several seeds each.

    python -m benchmarks.precision --data data/darcy43/r43.nc [--dataset darcy43] [--model ono]
                                   [--precisions fp32,tf32,bf16] [--seeds 0,1,2] [--epochs 10]
                                   [--parallel 9] [--budget-s 240] [--cuda-graphs] [--out ...]

Each (precision, seed) trains the run of ``--dataset`` / ``--model`` resolved from ``config/default.yaml``
(``opflow train``'s resolution), with ``training.precision``, ``training.seed`` and ``training.epochs``
set, on ``--data``, with the real :func:`opflow.train.train` (the OneCycle schedule spans the
``--epochs``, so every run is a complete, shorter schedule), ``--parallel`` runs at a time in separate
processes on the one GPU (a small model leaves the GPU mostly idle; runs side by side only change how long
they take, not what they compute). The test relative L2 of each run is the mean over the test split
after the last epoch (the curves' last ``test_rel_l2``).

The decision (``decision``): a precision is *equal within the seed spread* when the difference of its
mean test error from fp32's is at most the larger of the two seed ranges (max - min over the seeds);
then paper runs on CUDA may use it, and their records say so. Otherwise the JSON says by how much it
differs (ratio of the means), and fp32 stays. A run that did not finish within ``--budget-s`` is
reported with the epochs it did, and its precision is not decided.

Needs CUDA for tf32 and bf16 (the trainer ignores them elsewhere: on a CPU every precision trains the
same fp32 numbers, so the comparison is refused there). ``--smoke`` runs a tiny version of the
machinery on the CPU (fp32 only, one epoch), for the tests.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, utc_timestamp, versions, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = "benchmarks/results/precision_{device}.json"
PRECISIONS = ("fp32", "tf32", "bf16")
#: opflow bench: a full run needs the protocol's file (skipped without); its GPU run
BENCH_REQUIRES = ["--data"]
BENCH_GPU_ARGS = ["--device", "cuda"]


def one_run(run: Mapping[str, Any], data: str, out_dir: str, budget_s: float, threads: int) -> dict[str, Any]:
    """Train one run in this (child) process; what the comparison needs of it."""
    from opflow.train import train

    t0 = time.perf_counter()
    res = train(run, data, out_dir, progress=False, max_seconds_this_call=budget_s, threads=threads, restart=True)
    tests = [r["test_rel_l2"] for r in res.curves if r.get("test_rel_l2") is not None]
    return {
        "complete": res.complete,
        "epochs_done": res.epochs_done,
        "test_rel_l2": tests[-1] if res.complete and tests else None,
        "final_train_loss": res.curves[-1]["train_loss"] if res.curves else None,
        "train_time_s": res.train_time_s,
        "wall_s": time.perf_counter() - t0,
        "epoch_s_median": statistics.median([r["epoch_time_s"] for r in res.curves]) if res.curves else None,
    }


def decide(runs: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> dict[str, Any]:
    """The module docstring's rule, per precision against fp32."""
    def stats(p: str) -> dict[str, Any] | None:
        vals = [r["test_rel_l2"] for r in runs.get(p, {}).values()]
        if not vals or any(v is None for v in vals):
            return None
        return {"mean": statistics.fmean(vals), "range": max(vals) - min(vals), "values": vals}

    base = stats("fp32")
    out: dict[str, Any] = {"fp32": base}
    for p in runs:
        if p == "fp32":
            continue
        s = stats(p)
        if base is None or s is None:
            out[p] = {"stats": s, "equal_within_seed_spread": None, "why": "a run of it or of fp32 did not finish"}
            continue
        diff = s["mean"] - base["mean"]
        spread = max(s["range"], base["range"])
        out[p] = {"stats": s, "difference_of_means": diff, "ratio_of_means": s["mean"] / base["mean"], "seed_spread": spread,
                  "equal_within_seed_spread": abs(diff) <= spread}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=False, help="the dataset file the runs train on")
    ap.add_argument("--configfile", action="append", default=None, help="config files (default config/default.yaml)")
    ap.add_argument("--dataset", default="darcy43")
    ap.add_argument("--model", default="ono")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--parallel", type=int, default=9, help="runs at a time, each in its own process")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per run")
    ap.add_argument("--budget-s", type=float, default=240.0, help="each run stops (with a checkpoint) before an epoch that would end later")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cuda-graphs", action="store_true", help="every run captures its step as one CUDA graph (training.cuda_graphs; "
                    "operational: the same numbers, fewer host launches, so 9 runs side by side finish in a lease)")
    ap.add_argument("--smoke", action="store_true", help="a tiny synthetic file, fp32, one epoch, on the CPU (checks the machinery)")
    a = ap.parse_args(argv)
    precisions = [p.strip() for p in a.precisions.split(",") if p.strip()]
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad or not precisions:
        ap.error(f"--precisions: {bad or a.precisions!r} not among {list(PRECISIONS)}")
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--seeds: {a.seeds!r} is not a comma-separated list of integers")
    if a.epochs < 1 or a.parallel < 1 or a.threads < 1 or a.budget_s <= 0:
        ap.error("--epochs, --parallel and --threads must be >= 1 and --budget-s > 0")

    import torch

    from opflow.config import load_config_files, resolve_run

    if a.smoke:
        a.device, precisions, seeds, a.epochs, a.parallel = "cpu", ["fp32"], seeds[:2], 1, 2
    elif not (a.device.startswith("cuda") and torch.cuda.is_available()):
        ap.error("tf32 and bf16 train only on CUDA (elsewhere every precision trains the fp32 numbers): run this on a GPU, or --smoke")
    files = a.configfile or ["config/default.yaml"]
    config = load_config_files([f if os.path.isabs(f) else str(ROOT / f) for f in files])
    out = a.out or ROOT / DEFAULT_OUT.format(device="cpu" if a.smoke else "cuda")
    load0 = loadavg()
    with tempfile.TemporaryDirectory(prefix="opflow-precision-") as tmp:
        data = a.data
        if a.smoke or data is None:
            if not a.smoke:
                ap.error("--data is required (the protocol's dataset file)")
            from benchmarks.train_speed import synthetic_darcy

            data = synthetic_darcy(Path(tmp) / "s.nc", train=8, test=4, resolution=9)
            config = copy.deepcopy(config)
            config["datasets"][a.dataset] = {"source": config["datasets"][a.dataset]["source"], "resolution": 9, "train": 8, "test": 4}
            config["models"][a.model] = {**config["models"][a.model], "width": 16, "n_layers": 1, "n_heads": 2, "ortho_dim": 4, "num_landmarks": 8}
        base = resolve_run(config, a.dataset, a.model, str(data))
        jobs = {}
        for p in precisions:
            for s in seeds:
                run = copy.deepcopy(base)
                run["training"].update({"precision": p, "seed": s, "epochs": a.epochs, "device": a.device, "eval_every": a.epochs,
                                        "cuda_graphs": bool(a.cuda_graphs)})
                jobs[(p, s)] = run
        result: dict[str, Any] = {
            "benchmark": "precision",
            "created": utc_timestamp(),
            "device_name": torch.cuda.get_device_name() if torch.cuda.is_available() and not a.smoke else "cpu",
            "versions": versions("torch", "numpy") | {"cuda": torch.version.cuda},
            "dataset": a.dataset, "model": a.model, "data": Path(data).name, "epochs": a.epochs, "seeds": seeds,
            "parallel": a.parallel, "budget_s": a.budget_s, "cuda_graphs": bool(a.cuda_graphs),
            "run": {k: base[k] for k in ("dataset", "model", "model_config", "data")},
            "training": {k: v for k, v in base["training"].items() if k not in ("precision", "seed", "epochs")},
            "smoke": a.smoke,
            "runs": {p: {} for p in precisions},
            "failed": {},
        }
        t0 = time.perf_counter()
        with ProcessPoolExecutor(max_workers=a.parallel, mp_context=get_context("spawn")) as pool:
            futs = {k: pool.submit(one_run, run, str(data), str(Path(tmp) / f"{k[0]}_{k[1]}"), a.budget_s, a.threads) for k, run in jobs.items()}
            for (p, s), f in futs.items():
                try:
                    r = f.result()
                except Exception as e:  # noqa: BLE001 - recorded, the other runs still count
                    result["failed"][f"{p} seed {s}"] = f"{type(e).__name__}: {e}"
                    continue
                result["runs"][p][s] = r
                print(f"{p:5s} seed {s}: test rel L2 {r['test_rel_l2']}  epochs {r['epochs_done']}  {r['wall_s']:.0f} s", flush=True)
        result["wall_s"] = time.perf_counter() - t0
        result["decision"] = decide(result["runs"])
        result["machine"] = machine(load0, torch_threads=a.threads)
        write_json_atomic(out, result)
    print(f"wrote {out}")
    return 0


def summarize(result: Mapping[str, Any]) -> list[str]:
    """``SUMMARY.md`` lines: mean test error per precision and the decision."""
    lines = [f"- {result.get('model')} on {result.get('dataset')}, {result.get('epochs')} epochs, seeds {result.get('seeds')}, {result.get('device_name')}"]
    for p, d in (result.get("decision") or {}).items():
        if p == "fp32":
            if d:
                lines.append(f"- fp32: mean test rel L2 {d['mean']:.4g} (seed range {d['range']:.2g})")
            continue
        if d.get("stats") and d.get("equal_within_seed_spread") is not None:
            lines.append(f"- {p}: mean {d['stats']['mean']:.4g}, ratio to fp32 {d.get('ratio_of_means', float('nan')):.3f}, "
                         f"equal within the seed spread: {d.get('equal_within_seed_spread')}")
        else:
            lines.append(f"- {p}: not decided ({d.get('why')})")
    for p, runs in (result.get("runs") or {}).items():
        done = sorted({r.get("epochs_done") for r in runs.values()})
        if any(not r.get("complete") for r in runs.values()):
            lines.append(f"- {p}: runs stopped by the budget after {done} of {result.get('epochs')} epochs (epoch median "
                         f"{statistics.median(r['epoch_s_median'] for r in runs.values() if r.get('epoch_s_median')):.1f} s, {result.get('parallel')} runs side by side)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
