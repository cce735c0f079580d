"""The benchmark runner: every ``benchmarks/<name>.py`` with a ``main()``, one process each, then a summary.

    opflow bench                        # full runs: benchmarks/results/*.json + benchmarks/results/SUMMARY.md
    opflow bench --smoke                # tiny sizes, seconds each (CI): benchmarks/results/smoke/
    opflow bench --only darcy_fd,lorenz --smoke --out-dir /tmp/b
    opflow bench --smoke --jobs 4       # four at a time (timings of a smoke run mean nothing anyway)
    make bench                          # = opflow bench

**Which benchmarks.** Every module ``benchmarks/<name>.py`` that defines a top-level ``main``
(found by reading the source, without importing it) except the helpers (``common``). A new
benchmark is picked up by being there; nothing here lists them.

**The protocol a benchmark follows** (``tests/test_bench.py`` checks the first two for every module):

* ``main(argv)`` parses ``--smoke`` (tiny sizes, finishes in seconds, asserts nothing about timings)
  and ``--out PATH`` (the JSON it writes; figures beside it);
* it exits 0 when it wrote its JSON, non-zero otherwise;
* optional, at module level: ``BENCH_REQUIRES``, a list of options a full run cannot do without (an
  outside checkout, a dataset); the runner skips the full run unless ``--extra NAME='...'`` gives
  them. Smoke runs never need them.
* optional: ``BENCH_GPU_ARGS``, the options of a second run on the GPU (e.g. ``["--device", "cuda"]``):
  when torch sees a CUDA device the runner runs it again with them, writing ``<name>_cuda.json``;
* optional: ``summarize(result: dict) -> list[str]``, the Markdown lines of its section of
  ``SUMMARY.md`` (its headline numbers and side-by-side ratios); otherwise the summary lists the
  JSON's top-level numbers.

Each benchmark runs as ``python -m benchmarks.<name>`` in the repository root, in its own process
(several pin thread counts before numpy is imported, and a crash or a time-out stays its own).
Smoke runs always write to ``--out-dir`` (default ``benchmarks/results/smoke``, not the measured
results); full runs write to each benchmark's own default under ``benchmarks/results`` unless
``--out-dir`` is given. ``SUMMARY.md`` lists every benchmark with its status, wall time and numbers,
and ``runs.json`` beside it the same as data.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from opflow.atomic import atomic_write_text

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "benchmarks"
RESULTS = BENCH_DIR / "results"
#: modules of benchmarks/ that hold shared helpers, not a benchmark of their own
HELPERS = frozenset({"__init__", "common", "cpu_lever"})


@dataclass
class Benchmark:
    name: str
    path: Path
    doc: str
    """First line of the module docstring."""
    requires: list[str]
    """``BENCH_REQUIRES``: options a full run needs."""
    gpu_args: list[str]
    """``BENCH_GPU_ARGS``: options of a second run on the GPU, made when one is present."""


def discover(bench_dir: Path = BENCH_DIR) -> list[Benchmark]:
    """The benchmark modules of ``bench_dir``: every ``*.py`` (not a helper) with a top-level ``main``."""
    out = []
    for path in sorted(bench_dir.glob("*.py")):
        if path.stem in HELPERS:
            continue
        tree = ast.parse(path.read_text(), str(path))
        if not any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            continue
        declared: dict[str, list[str]] = {"BENCH_REQUIRES": [], "BENCH_GPU_ARGS": []}
        for n in tree.body:
            if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Name) and t.id in declared:
                        declared[t.id] = list(ast.literal_eval(n.value))
        doc = (ast.get_docstring(tree) or path.stem).strip().splitlines()[0]
        out.append(Benchmark(path.stem, path, doc, declared["BENCH_REQUIRES"], declared["BENCH_GPU_ARGS"]))
    return out


@dataclass
class Run:
    name: str
    status: str
    """ok, failed, timeout or skipped."""
    wall_s: float
    command: list[str]
    out: str | None
    """The JSON it was told to write (None: its own default)."""
    tail: str
    """The last lines of its output (all of it for a failure)."""
    peak_rss_mib: float | None = None
    """Peak resident memory of its process (and the children it waited for), from ``wait4``."""
    cpu_s: float | None = None
    """User + system CPU seconds of its process (and waited children): on a shared machine a steadier
    measure of its cost than the wall time."""


def run_one(b: Benchmark, *, smoke: bool, out: Path | None, extra: list[str], timeout: float | None, gpu_args: list[str] | None = None) -> Run:
    """Run one benchmark in its own process in the repository root (``gpu_args``: its GPU run's options,
    before ``extra``; they do not stand in for what ``BENCH_REQUIRES`` asks of ``extra``)."""
    if not smoke and b.requires and not extra:
        return Run(b.name, "skipped", 0.0, [], None, f"a full run needs {' '.join(b.requires)}: pass --extra {b.name}='{' '.join(r + ' ...' for r in b.requires)}'")
    cmd = [sys.executable, "-m", f"benchmarks.{b.name}", *(["--smoke"] if smoke else []), *(["--out", str(out)] if out else []), *(gpu_args or []), *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        killed = threading.Event()
        timer = threading.Timer(timeout, lambda: (killed.set(), p.kill())) if timeout else None
        if timer:
            timer.start()
        _, status, usage = os.wait4(p.pid, 0)  # wait4, not wait: its resource usage (peak memory) comes with it
        if timer:
            timer.cancel()
        wall = time.perf_counter() - t0
        log.seek(0)
        text = log.read().decode(errors="replace").strip()
    code = os.waitstatus_to_exitcode(status)
    rss = usage.ru_maxrss / (1024 if sys.platform != "darwin" else 1024**2)  # KiB on Linux, bytes on macOS
    if killed.is_set():
        status_txt = "timeout"
        text = f"stopped after {timeout} s\n" + text
    else:
        status_txt = "ok" if code == 0 else f"failed (exit {code})"
    tail = "\n".join(text.splitlines()[-(8 if code == 0 else 40) :])
    return Run(b.name, status_txt, wall, cmd, str(out) if out else None, tail, rss, usage.ru_utime + usage.ru_stime)


# --------------------------------------------------------------------------- summary


def _numbers(d: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, float]]:
    """Top-level numbers of a result and the medians of its ``{median, min, max}`` summaries."""
    out: list[tuple[str, float]] = []
    if not isinstance(d, dict) or depth > 1:
        return out
    for k, v in d.items():
        if k in ("machine", "versions", "threads", "per_sample", "created", "seed", "params", "limits", "layer", "repeats", "smoke"):
            continue
        if isinstance(v, bool):
            continue
        if isinstance(v, int | float):
            out.append((prefix + k, float(v)))
        elif isinstance(v, dict) and "median" in v and isinstance(v["median"], int | float):
            out.append((prefix + k + " (median)", float(v["median"])))
        elif isinstance(v, dict) and depth == 0:
            out += _numbers(v, prefix + k + ".", depth + 1)
    return out


def summarize_result(name: str, result: dict[str, Any]) -> list[str]:
    """The benchmark's own ``summarize`` lines, or its numbers."""
    if str(REPO) not in sys.path:  # `opflow` runs from its console script: the repository is not on the path
        sys.path.insert(0, str(REPO))
    try:
        mod = importlib.import_module(f"benchmarks.{name}")
        fn = getattr(mod, "summarize", None)
    except Exception as e:  # a module that cannot even be imported here still gets its numbers listed
        fn, err = None, e
    else:
        err = None
    if fn is not None:
        try:
            return list(fn(result))
        except Exception as e:  # a summary must never hide the result
            return [f"- (its summarize() failed: {type(e).__name__}: {e})"] + [f"- {k}: {v:.4g}" for k, v in _numbers(result)[:15]]
    lines = [f"- {k}: {v:.4g}" for k, v in _numbers(result)[:20]]
    return lines + ([f"- (import failed: {err})"] if err else [])


def write_summary(runs: list[Run], out_dir: Path, *, smoke: bool) -> Path:
    """``SUMMARY.md`` (and ``runs.json``) in ``out_dir`` from the runs and every JSON there."""
    lines = [
        "# Benchmark summary" + (" (smoke run: tiny sizes, timings mean nothing)" if smoke else ""),
        "",
        "Written by `opflow bench` (opflow/bench.py). One process per benchmark; each JSON holds the machine, "
        "versions, load average and every repeat.",
        "",
        "| benchmark | status | wall time | CPU time | peak memory (RSS) | JSON |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    jsons = sorted(p for p in out_dir.glob("*.json") if p.name != "runs.json")
    for r in runs:
        mine = [p.name for p in jsons if p.stem == r.name or p.stem.startswith(r.name + "_")]
        rss = f"{r.peak_rss_mib:.0f} MiB" if r.peak_rss_mib else "-"
        cpu = f"{r.cpu_s:.1f} s" if r.cpu_s is not None else "-"
        lines.append(f"| {r.name} | {r.status} | {r.wall_s:.1f} s | {cpu} | {rss} | {', '.join(mine) or '-'} |")
    lines.append("")
    names = [r.name for r in runs if not r.name.endswith("_cuda")] or [b.name for b in discover()]
    for name in names:
        for p in jsons:
            if p.stem != name and not p.stem.startswith(name + "_"):
                continue
            try:
                result = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError) as e:
                lines += [f"## {p.name}", "", f"- unreadable: {e}", ""]
                continue
            when = result.get("created", "?") if isinstance(result, dict) else "?"
            lines += [f"## {p.name} ({when})", "", *summarize_result(name, result if isinstance(result, dict) else {}), ""]
    for r in runs:
        if r.status != "ok":
            lines += [f"## {r.name}: {r.status}", "", "```", r.tail, "```", ""]
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "runs.json", json.dumps([asdict(r) for r in runs], indent=1) + "\n")
    path = out_dir / "SUMMARY.md"
    atomic_write_text(path, "\n".join(lines))
    return path


# --------------------------------------------------------------------------- command


def _cuda_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``opflow bench``."""
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds per benchmark, no timing claims (CI)")
    p.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    p.add_argument("--skip", default="", help="comma-separated benchmark names to leave out")
    p.add_argument("--out-dir", type=Path, default=None, help="where the JSON files and SUMMARY.md go (default: benchmarks/results, smoke: benchmarks/results/smoke)")
    p.add_argument("--extra", action="append", default=[], metavar="NAME=ARGS", help="more options for one benchmark, e.g. ono_official='--release ../ONO'")
    p.add_argument("--timeout", type=float, default=None, help="seconds allowed to one benchmark (default: 300 with --smoke, none otherwise)")
    p.add_argument("--jobs", type=int, default=1, help="benchmarks run at the same time (default 1: timings undisturbed; more for a quick smoke run)")
    p.add_argument("--list", action="store_true", help="only list the benchmarks found")


def run(a: argparse.Namespace) -> int:
    """``opflow bench``: run the selected benchmarks, write the summary; exit 1 when one failed."""
    import shlex

    found = {b.name: b for b in discover()}
    if a.list:
        for b in found.values():
            print(f"{b.name:16s} {b.doc}" + (f"  [full run needs {' '.join(b.requires)}]" if b.requires else ""))
        return 0
    only = [n for n in a.only.split(",") if n]
    skip = {n for n in a.skip.split(",") if n}
    unknown = sorted((set(only) | skip) - set(found))
    if unknown:
        print(f"opflow bench: no benchmark {unknown}; there are {sorted(found)}", file=sys.stderr)
        return 2
    extra: dict[str, list[str]] = {}
    for e in a.extra:
        name, sep, args = e.partition("=")
        if not sep or name not in found:
            print(f"opflow bench: --extra {e!r}: write NAME=ARGS with NAME one of {sorted(found)}", file=sys.stderr)
            return 2
        extra[name] = shlex.split(args)
    selected = [found[n] for n in (only or found) if n not in skip]
    out_dir = a.out_dir or (RESULTS / "smoke" if a.smoke else RESULTS)
    out_dir = out_dir if out_dir.is_absolute() else Path.cwd() / out_dir
    pass_out = a.smoke or a.out_dir is not None
    timeout = a.timeout if a.timeout is not None else (300.0 if a.smoke else None)
    out_dir.mkdir(parents=True, exist_ok=True)
    from concurrent.futures import ThreadPoolExecutor

    def one(b: Benchmark) -> Run:
        r = run_one(b, smoke=a.smoke, out=out_dir / f"{b.name}.json" if pass_out else None, extra=extra.get(b.name, []), timeout=timeout)
        print(f"{b.name:16s} {r.status:10s} {r.wall_s:7.1f} s wall {r.cpu_s or 0:7.1f} s CPU {r.peak_rss_mib or 0:6.0f} MiB", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        runs = list(pool.map(one, selected))
    gpu = [b for b in selected if b.gpu_args]
    if gpu and _cuda_present():  # the torch benchmarks once more, per GPU (serially: one device)
        for b in gpu:
            r = run_one(b, smoke=a.smoke, out=out_dir / f"{b.name}_cuda.json", extra=extra.get(b.name, []), timeout=timeout, gpu_args=b.gpu_args)
            r.name = f"{b.name}_cuda"
            print(f"{r.name:16s} {r.status:10s} {r.wall_s:7.1f} s wall", flush=True)
            runs.append(r)
    path = write_summary(runs, out_dir, smoke=a.smoke)
    print(f"wrote {path}")
    return 0 if all(r.status in ("ok", "skipped") for r in runs) else 1
