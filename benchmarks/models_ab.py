"""Before / after on the CPU: ``benchmarks.models`` run from an earlier commit and from this tree, interleaved.

    python -m benchmarks.models_ab --before COMMIT [--rounds 4] [--models gnot,gt,fno,tno]
                                   [--sizes "darcy2d=43;lorenz63=201"] [--threads 1] [--phase-s 4]
                                   [--configfile config/default.yaml] [--out ...]
    python -m benchmarks.models_ab --before COMMIT --pairs darcy141/gt,darcy/fno [--rounds 3] [--steps 6] [--warmup 6]
                                   # the trainer's step of these dataset/model pairs instead of benchmarks.models
    python -m benchmarks.models_ab --from-runs DIR --before COMMIT   # summarise runs already made
    python -m benchmarks.models_ab --smoke --out /tmp/ab.json         # one round of benchmarks.models --smoke
                                                                     # against HEAD (seconds; no timing claim)

A change that should not slow the CPU (issue 36: "nothing slower on the CPU") is checked by timing the same
models before and after it on the same machine. One run of each is not enough on a shared machine: its speed
drifts by 10 % within minutes (measured here: GNOT's step went 1.04 -> 1.23 s over 10 minutes with no code
change). So the two versions alternate, ``before, after, before, after, ...``, ``--rounds`` times, each run
being the whole ``benchmarks.models`` (a fresh process per model and size, its medians of timed steps), and
the result is the median over the rounds of each version and their ratio, with every round's value kept.

With ``--pairs`` a version's round is, per pair, the trainer's step in a fresh process (``benchmarks.cpu_heap``'s
child: the real Trainer on synthetic data of the pair's shape, glibc's heap kept as a CPU training keeps it; the
median of ``--steps`` steps after ``--warmup``), which is what a background training spends its time on;
``benchmarks.models`` times the bare model step with the heap trimmed, a different regime. ``--configfile``
makes both versions read this tree's config (a model entry the earlier commit lacks).

The earlier commit is checked out into a temporary git worktree (outside the repository, removed at the end)
and run with the same Python; ``PYTHONPATH`` points each run at its own tree. A training running in the
background must be paused first (``scripts/cpu_training.sh pause``; the numbers are wrong otherwise).
Writes ``benchmarks/results/models_ab_cpu.json`` by default.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opflow.runtime import cpu_identity

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "models_ab_cpu.json"
#: what a full run needs (opflow bench skips it without): the commit before the change
BENCH_REQUIRES = ["--before"]


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _relative(arg: str) -> str:
    """A command's argument as the result records it: a path inside this tree relative to it."""
    return str(Path(arg).relative_to(ROOT)) if arg.startswith(str(ROOT) + os.sep) else arg


def run_rounds(before: str, rounds: int, bench_args: Sequence[str], runs: Path, pairs: Sequence[str] = ()) -> list[str]:
    """Alternate the measurement from ``before`` (a temporary worktree) and from this tree; the commands run.

    Without ``pairs`` a round of a version is the whole ``benchmarks.models``; with them, per pair the trainer's
    step in a fresh process (``benchmarks.cpu_heap``'s child, glibc's heap kept as the trainings keep it)."""
    commands = []
    with tempfile.TemporaryDirectory(prefix="opflow-before-") as tmp:
        tree = Path(tmp) / "tree"
        _git("worktree", "add", "--detach", "-q", str(tree), before)
        try:
            for k in range(1, rounds + 1):
                for version, root in (("before", tree), ("after", ROOT)):
                    print(f"[models_ab] round {k} {version} {time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}", flush=True)
                    env = {**os.environ, "PYTHONPATH": str(root), "OPFLOW_CPU_HEAP": "keep"}
                    where = f"(cd {'<worktree of ' + before + '>' if version == 'before' else '.'})"
                    if pairs:
                        for i, pair in enumerate(pairs):
                            cmd = [sys.executable, "-m", "benchmarks.cpu_heap", "--child", pair, *bench_args]
                            done = subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True, text=True)
                            step = json.loads(done.stdout.strip().splitlines()[-1])
                            (runs / f"steps_{version}_{k}_{i}.json").write_text(json.dumps({"pair": pair, **step}))
                            commands.append(f"{version}: {where} OPFLOW_CPU_HEAP=keep python {' '.join(_relative(c) for c in cmd[1:])}")
                        continue
                    out = runs / f"models_{version}_{k}.json"
                    cmd = [sys.executable, "-m", "benchmarks.models", *bench_args, "--out", str(out)]
                    subprocess.run(cmd, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, check=True, stdout=subprocess.DEVNULL)
                    shown = [_relative(c) for c in cmd[1:-1]] + [out.name]  # no path of this machine in the result
                    commands.append(f"{version}: {where} python {' '.join(shown)}")
        finally:
            _git("worktree", "remove", "--force", str(tree))
    return commands


def summarise_steps(runs: Path) -> dict[str, Any]:
    """Per pair: every round's median trainer step of each version, their medians and the ratio after / before."""
    rows: dict[str, dict[str, list[float]]] = {}
    for path in sorted(runs.glob("steps_*_*_*.json")):
        version = path.stem.split("_")[1]
        r = json.loads(path.read_text())
        rows.setdefault(r["pair"], {}).setdefault(version, []).append(r["step_s"])
    out = []
    for pair, v in rows.items():
        b, a = v.get("before", []), v.get("after", [])
        row: dict[str, Any] = {"pair": pair, "before": {"train_step_s": b}, "after": {"train_step_s": a}}
        if b and a:
            row["train_ratio"] = statistics.median(a) / statistics.median(b)
            row["rounds"] = min(len(a), len(b))
        out.append(row)
    return {"rows": out}


def summarise(runs: Path) -> dict[str, Any]:
    """Per model, size and batch: every round's median step (training, inference) of each version, their medians
    and the ratio after / before. Sizes whose batch differs between versions (a probe chose it) are kept apart."""
    rows: dict[tuple[str, int, int], dict[str, list[tuple[float, float]]]] = {}
    for path in sorted(runs.glob("models_*_*.json")):
        version = path.stem.split("_")[1]
        for name, m in json.loads(path.read_text())["models"].items():
            for s in m["sizes"]:
                if "train" in s and "inference" in s:
                    key = (name, int(s["size"]), int(s["batch"]))
                    rows.setdefault(key, {}).setdefault(version, []).append((s["train"]["step_s"]["median"], s["inference"]["step_s"]["median"]))
    out = []
    for (name, size, batch), v in sorted(rows.items()):
        row: dict[str, Any] = {"model": name, "size": size, "batch": batch}
        for version in ("before", "after"):
            vals = v.get(version, [])
            row[version] = {"train_step_s": [t for t, _ in vals], "inference_step_s": [i for _, i in vals]}
        b, a = row["before"], row["after"]
        if b["train_step_s"] and a["train_step_s"]:
            row["train_ratio"] = statistics.median(a["train_step_s"]) / statistics.median(b["train_step_s"])
            row["inference_ratio"] = statistics.median(a["inference_step_s"]) / statistics.median(b["inference_step_s"])
            row["rounds"] = min(len(b["train_step_s"]), len(a["train_step_s"]))
        out.append(row)
    return {"rows": out}


def markdown(result: dict[str, Any]) -> str:
    lines = ["| model | size | batch | rounds | training step before -> after (median) | ratio | inference ratio |", "| --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    if any("pair" in r for r in result["rows"]):
        lines = ["| pair | rounds | trainer's step before -> after (median) | ratio |", "| --- | ---: | --- | ---: |"]
        for r in result["rows"]:
            if "train_ratio" in r:
                tb, ta = statistics.median(r["before"]["train_step_s"]), statistics.median(r["after"]["train_step_s"])
                lines.append(f"| {r['pair']} | {r['rounds']} | {tb:.3f} -> {ta:.3f} s | {r['train_ratio']:.3f} |")
        return "\n".join(lines)
    for r in result["rows"]:
        if "train_ratio" not in r:
            continue
        tb, ta = statistics.median(r["before"]["train_step_s"]), statistics.median(r["after"]["train_step_s"])
        lines.append(f"| {r['model']} | {r['size']} | {r['batch']} | {r['rounds']} | {tb:.3f} -> {ta:.3f} s | {r['train_ratio']:.3f} | {r['inference_ratio']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", help="the commit before the change (needed but with --smoke: HEAD)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--models", default="gnot,gt,fno,tno")
    p.add_argument("--sizes", default="darcy2d=43;darcy_continuum2d=52;lorenz63=201")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--phase-s", type=float, default=4.0)
    p.add_argument("--configfile", action="append", default=None,
                   help="config files both versions read (this tree's; default: each tree its own config/default.yaml), e.g. for a model entry the earlier commit lacks")
    p.add_argument("--pairs", default=None, help="comma-separated dataset/model pairs: time the trainer's step of each (a fresh process per pair and version) instead of benchmarks.models")
    p.add_argument("--steps", type=int, default=6, help="--pairs: timed steps per process (default 6)")
    p.add_argument("--warmup", type=int, default=6, help="--pairs: untimed steps first (default 6: the kept heap grows over the first ones)")
    p.add_argument("--from-runs", type=Path, help="summarise the models_{before,after}_K.json in this folder instead of running")
    p.add_argument("--out", type=Path, help=f"result JSON (default {DEFAULT_OUT.relative_to(ROOT)}; --smoke: none unless given)")
    p.add_argument("--smoke", action="store_true", help="one round of benchmarks.models --smoke on --models (default fno) against HEAD")
    a = p.parse_args(argv)
    if a.before is None and not a.smoke:
        p.error("--before COMMIT is needed: the commit before the change to compare with")
    if a.smoke:
        a.before, a.rounds = a.before or "HEAD", 1
        bench_args = ["--smoke", "--models", a.models if "--models" in (argv if argv is not None else sys.argv) else "fno"]
    else:
        bench_args = ["--models", a.models, "--sizes", a.sizes, "--threads", str(a.threads), "--phase-s", str(a.phase_s)]
    for c in a.configfile or []:  # absolute, so that the earlier tree reads this tree's file
        bench_args += ["--configfile", str(Path(c).resolve())]
    pairs = [q for q in (a.pairs or "").split(",") if q]
    if pairs:
        configs = [x for x in bench_args if x.endswith((".yaml", ".yml"))] or [str(ROOT / "config" / "default.yaml")]
        if len(configs) > 1:
            p.error("--pairs reads one config file (benchmarks.cpu_heap's child)")
        bench_args = ["--configfile", configs[0], "--steps", str(1 if a.smoke else a.steps), "--warmup", str(1 if a.smoke else a.warmup),
                      "--threads", str(a.threads)]
    after = _git("rev-parse", "--short", "HEAD") + ("+dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")
    if a.from_runs is not None:
        runs, commands = a.from_runs, None
    else:
        runs = Path(tempfile.mkdtemp(prefix="opflow-models-ab-"))
        commands = run_rounds(a.before, a.rounds, bench_args, runs, pairs)
    result = {
        "benchmark": "models_ab",
        "smoke": a.smoke,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "before": _git("rev-parse", "--short", a.before),
        "after": after,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "cpu_identity": cpu_identity()},
        "method": ("the trainer's step of each pair (benchmarks.cpu_heap's child, a fresh process each, the heap kept) from the two trees alternately (before, after, ...); per version the median over the rounds"
                   if pairs else "benchmarks.models from the two trees alternately (before, after, ...), each round a whole run; per version the median over the rounds"),
        "bench_args": [_relative(x) for x in bench_args],
        "commands": commands,
        **(summarise_steps(runs) if pairs or any(runs.glob("steps_*.json")) else summarise(runs)),
    }
    from opflow.atomic import atomic_write_text

    out = a.out if a.out is not None else (None if a.smoke else DEFAULT_OUT)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
