"""The benchmark runner (opflow/bench.py, `opflow bench`, `make bench`) as a specification.

Every benchmarks/*.py is a benchmark the runner finds (no list to keep up to date) and follows its
protocol (--smoke, --out); a smoke run of a few of them writes their JSON and SUMMARY.md with the
side-by-side numbers; a full run that needs an outside input is skipped with the reason. Nothing
here asserts a timing.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from opflow.bench import BENCH_DIR, HELPERS, REPO, discover


def _options(path: Path) -> set[str]:
    """Every option string passed to an ``add_argument`` call in a module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            out |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return out


def test_every_benchmark_module_is_found_and_takes_smoke_and_out() -> None:
    modules = {p.stem for p in BENCH_DIR.glob("*.py")} - HELPERS
    found = {b.name for b in discover()}
    assert found == modules, f"benchmarks without a main(): {sorted(modules - found)}"
    assert {"darcy_fd", "navier_stokes", "models", "attention_cost", "convergence"} <= found
    for b in discover():
        opts = _options(b.path)
        assert {"--smoke", "--out"} <= opts, f"benchmarks/{b.name}.py lacks {sorted({'--smoke', '--out'} - opts)}"
    # the two that need an outside input say so, and smoke runs do without it
    requires = {b.name: b.requires for b in discover() if b.requires}
    assert requires == {"ono_official": ["--release"], "ono_ablation": ["--data"], "precision": ["--data"], "models_ab": ["--before"],
                        "cpu_denormals": ["--checkpoint"], "kv_dropout_eval": ["--model", "--data"], "fno_neuralop": ["--library"]}
    # the torch solver and kernel benchmarks run once more per GPU when one is present
    gpu = {b.name: b.gpu_args for b in discover() if b.gpu_args}
    assert gpu["navier_stokes"] == ["--device", "cuda"] and gpu["attention_cost"] == ["--device", "cuda"]


def bench(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opflow.cli", "bench", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.mark.fem  # the convergence benchmark solves the FEM Darcy problem
def test_a_smoke_run_writes_each_json_and_the_summary(tmp_path: Path) -> None:
    run = bench("--smoke", "--only", "darcy_fd,lorenz,convergence", "--out-dir", str(tmp_path), "--jobs", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    for name in ("darcy_fd", "lorenz", "convergence"):
        result = json.loads((tmp_path / f"{name}.json").read_text())
        assert result["benchmark"] == name and result["smoke"] is True
    assert (tmp_path / "convergence.png").stat().st_size > 0  # the figure follows --out
    summary = (tmp_path / "SUMMARY.md").read_text()
    assert summary.startswith("# Benchmark summary (smoke run")
    for name in ("darcy_fd", "lorenz", "convergence"):
        assert f"| {name} | ok |" in summary
    # each benchmark's own summary lines: the side-by-side ratio, samples/s, observed orders
    assert "side by side, same matrices: scipy spsolve" in summary and "samples/s on one core" in summary
    assert "darcy_fd_arithmetic_pcg_poisson: max" in summary
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert [r["name"] for r in runs] == ["darcy_fd", "lorenz", "convergence"]
    assert all(r["status"] == "ok" and r["peak_rss_mib"] > 10 and r["cpu_s"] > 0 and "--smoke" in r["command"] for r in runs)


def test_a_full_run_that_needs_an_outside_input_is_skipped_with_the_reason(tmp_path: Path) -> None:
    run = bench("--only", "ono_official", "--out-dir", str(tmp_path), timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "skipped" in run.stdout
    summary = (tmp_path / "SUMMARY.md").read_text()
    assert "| ono_official | skipped |" in summary and "--extra ono_official='--release ...'" in summary
    assert not (tmp_path / "ono_official.json").exists()


def test_an_unknown_benchmark_name_is_refused_with_the_list() -> None:
    run = bench("--smoke", "--only", "darcy_fdd", timeout=60)
    assert run.returncode == 2 and "no benchmark ['darcy_fdd']" in run.stderr and "'darcy_fd'" in run.stderr
