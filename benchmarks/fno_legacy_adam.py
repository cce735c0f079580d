"""Galerkin Table 2(a)'s FNO1d and PyTorch 1.8's Adam: the author's script trained with the old and
the corrected update of complex weights, over seeds.

    python -m benchmarks.fno_legacy_adam [--dataset burgers512] [--seeds 0 1 2] [--jobs 2]
    python -m benchmarks.fno_legacy_adam --collect      # only read the runs already made
    python -m benchmarks.fno_legacy_adam --smoke --out /tmp/f.json   # check the runs' configs, train nothing

The Galerkin Transformer paper (Cao 2021, Table 2(a)) retrained FNO1d with the author's fork of the
FNO code's ``fourier_1d.py`` (commit d1bfdb4): ReLU, batch 8, Adam with weight decay 1e-4, 1cycle,
and spectral weights stored as ``torch.cfloat`` parameters under PyTorch 1.8.0, whose Adam
accumulated ``g * g`` for a complex gradient instead of ``|g|^2`` (pytorch/pytorch issue 59998).
The model entry ``fno1d_cao`` of config/default.yaml is that script with ``optimizer:
adam_complex_legacy`` (:mod:`opflow.optim`). This benchmark trains it with that optimiser and with
``optimizer: adam`` (today's update), each at every seed, and reports the mean relative L2 of each run
beside the published number: how much of the paper's FNO1d error the old optimiser accounts for.

Every run is the workflow's own: ``snakemake --configfile <overlay>`` over config/default.yaml with
an overlay that sets ``root: bench_runs/fno_legacy_adam/s<seed>_<optimizer>``, the seed, the
optimiser and one thread, its ``data/`` a link to the paper profile's ``data/`` (the same samples as
the published runs; the first run, made alone, makes them if missing). The others are independent:
``--jobs`` of them at a time, each on one thread, each Snakemake with ``--nolock`` (they share the
working directory; their outputs are disjoint). Snakemake skips a run whose results exist, so an interrupted benchmark
goes on where it stopped. Writes benchmarks/results/fno_legacy_adam.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, utc_timestamp, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
BASE = "bench_runs/fno_legacy_adam"
MODEL = "fno1d_cao"
OPTIMIZERS = ("adam_complex_legacy", "adam")
OUT = "benchmarks/results/fno_legacy_adam.json"


def run_root(seed: int, optimizer: str) -> str:
    return f"{BASE}/s{seed}_{optimizer}"


def overlay(dataset: str, seed: int, optimizer: str) -> str:
    """The config overlay of one run (YAML)."""
    return (
        f"# benchmarks/fno_legacy_adam.py: {MODEL} on {dataset}, seed {seed}, optimizer {optimizer} (not the paper profile)\n"
        f"root: {run_root(seed, optimizer)}\n"
        f"targets: [results/{dataset}_{MODEL}.json]\n"
        f"models:\n  {MODEL}:\n    training: {{seed: {seed}, threads: 1, optimizer: {optimizer}}}\n"
    )


def plan(dataset: str, seeds: list[int]) -> list[dict[str, Any]]:
    """Each run's root and run hash, its config (the paper profile + its overlay) checked as the
    workflow checks it: what a run would train, without training it."""
    import tempfile

    from opflow.config import load_config_files, resolve_run
    from pipeline.config import check_config

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for optimizer in OPTIMIZERS:
                f = Path(tmp) / f"s{seed}_{optimizer}.yaml"
                f.write_text(overlay(dataset, seed, optimizer))
                cfg = load_config_files([str(ROOT / "config/default.yaml"), str(f)])
                check_config(cfg)
                out.append({"seed": seed, "optimizer": optimizer, "root": run_root(seed, optimizer), "run_hash": resolve_run(cfg, dataset, MODEL)["hash"]})
    return out


def train(dataset: str, seed: int, optimizer: str) -> int:
    """One run through the workflow; its exit status."""
    root = ROOT / run_root(seed, optimizer)
    root.mkdir(parents=True, exist_ok=True)
    link = root / "data"
    if not link.exists():
        link.symlink_to(os.path.relpath(ROOT / "data", root), target_is_directory=True)
    cfg = root / "overlay.yaml"
    cfg.write_text(overlay(dataset, seed, optimizer))
    # --nolock: the runs share the working directory, whose lock files one Snakemake removes while another
    # writes its own (FileNotFoundError on .snakemake/locks); their outputs are disjoint and the data only read
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--nolock", "--configfile", str(cfg), "--", f"{run_root(seed, optimizer)}/results/{dataset}_{MODEL}.json"]
    with open(root / "snakemake.log", "w") as log:
        return subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def collect(dataset: str, seeds: list[int]) -> dict[str, Any]:
    """The runs' numbers beside the published one (config/reference.yaml)."""
    from opflow.reference import load_reference

    (ref,) = [e for e in load_reference(ROOT / "config/reference.yaml") if (e.dataset, e.model, e.statistic) == (dataset, MODEL, "mean")]
    runs, by_opt = [], {o: [] for o in OPTIMIZERS}
    for optimizer in OPTIMIZERS:
        for seed in seeds:
            path = ROOT / run_root(seed, optimizer) / "results" / f"{dataset}_{MODEL}.json"
            if not path.exists():
                runs.append({"seed": seed, "optimizer": optimizer, "missing": str(path.relative_to(ROOT))})
                continue
            r = json.loads(path.read_text())
            m = r["metrics"]
            runs.append({
                "seed": seed, "optimizer": optimizer, "run_hash": r["run_hash"], "rel_l2_mean": m["rel_l2_mean"], "rel_l2_median": m["rel_l2_median"],
                "rel_l2_max": m["rel_l2_max"], "ratio": m["rel_l2_mean"] / ref.value, "train_time_s": r["train_time_s"], "threads": r.get("threads"), "created": r.get("created"),
            })  # fmt: skip
            by_opt[optimizer].append(m["rel_l2_mean"])
    summary = {
        o: {"n": len(v), "mean": statistics.fmean(v), "min": min(v), "max": max(v), "ratio_of_mean": statistics.fmean(v) / ref.value}
        for o, v in by_opt.items() if v
    }  # fmt: skip
    if all(o in summary for o in OPTIMIZERS):
        summary["legacy_over_adam"] = summary["adam_complex_legacy"]["mean"] / summary["adam"]["mean"]
    return {"dataset": dataset, "model": MODEL, "published": {"value": ref.value, "paper": ref.paper, "table": ref.table}, "runs": runs, "summary": summary}


def summarize(result: dict[str, Any]) -> list[str]:
    """The SUMMARY.md lines (opflow bench)."""
    if result.get("smoke"):
        return [f"- smoke: {len(result['planned'])} runs planned (configs checked), none trained"]
    s, pub = result["summary"], result["published"]["value"]
    lines = [f"- {result['model']} on {result['dataset']}, published {pub:.4g} ({result['published']['paper']}, {result['published']['table']})"]
    for o in OPTIMIZERS:
        if o in s:
            lines.append(f"  - {o}: mean rel L2 {s[o]['mean']:.3g} over {s[o]['n']} seeds ({s[o]['min']:.3g}-{s[o]['max']:.3g}), ratio {s[o]['ratio_of_mean']:.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="burgers512", help="a Burgers dataset of the paper profile (default burgers512)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each (default 2)")
    ap.add_argument("--collect", action="store_true", help="train nothing: read the runs already made")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smoke", action="store_true", help="train nothing: check each run's config and write the plan (seconds)")
    a = ap.parse_args(argv)
    if a.jobs < 1 or any(s < 0 for s in a.seeds):
        ap.error("--jobs must be at least 1 and the seeds non-negative")
    if a.smoke:
        result = {"benchmark": "fno_legacy_adam", "smoke": True, "created": utc_timestamp(), "planned": plan(a.dataset, a.seeds)}
        write_json_atomic(Path(a.out) if os.path.isabs(a.out) else ROOT / a.out, result)
        print(f"{len(result['planned'])} runs planned, their configs checked; wrote {a.out}")
        return 0
    start = loadavg()
    failed = []
    if not a.collect:
        (ROOT / "data").mkdir(exist_ok=True)
        pairs = [(s, o) for s in a.seeds for o in OPTIMIZERS]
        codes = [train(a.dataset, *pairs[0])]  # alone: it makes the data if the paper profile has none yet
        with ThreadPoolExecutor(a.jobs) as pool:
            codes += list(pool.map(lambda p: train(a.dataset, *p), pairs[1:]))
        failed = [f"{run_root(s, o)} (exit {c}; see its snakemake.log)" for (s, o), c in zip(pairs, codes) if c]
    result = {"benchmark": "fno_legacy_adam", "created": utc_timestamp(), **collect(a.dataset, a.seeds), "failed": failed}
    result["machine"] = machine(start, packages=["torch"])
    write_json_atomic(Path(a.out) if os.path.isabs(a.out) else ROOT / a.out, result)
    print("\n".join(summarize(result)))
    print(f"wrote {a.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
