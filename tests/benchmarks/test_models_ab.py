"""benchmarks/models_ab.py: before / after medians and ratios from interleaved runs of benchmarks.models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.models_ab import markdown, summarise


def _run(path: Path, train: float, infer: float, batch: int = 4) -> None:
    sizes = [{"size": 43, "batch": batch, "train": {"step_s": {"median": train}}, "inference": {"step_s": {"median": infer}}},
             {"size": 141, "skipped": "predicted too slow"}]
    path.write_text(json.dumps({"models": {"gt": {"sizes": sizes}}}))


def test_the_ratio_is_of_the_medians_over_rounds_and_every_round_is_kept(tmp_path: Path) -> None:
    for k, (b, a) in enumerate([(1.0, 1.1), (1.2, 1.0), (1.1, 1.3)], start=1):
        _run(tmp_path / f"models_before_{k}.json", b, b / 4)
        _run(tmp_path / f"models_after_{k}.json", a, a / 2)
    [row] = summarise(tmp_path)["rows"]
    assert row["before"]["train_step_s"] == [1.0, 1.2, 1.1] and row["after"]["train_step_s"] == [1.1, 1.0, 1.3]
    assert row["train_ratio"] == pytest.approx(1.1 / 1.1) and row["inference_ratio"] == pytest.approx((1.1 / 2) / (1.1 / 4))
    assert row["rounds"] == 3
    assert "| gt | 43 | 4 | 3 | 1.100 -> 1.100 s | 1.000 | 2.000 |" in markdown({"rows": [row]})


def test_a_batch_that_differs_between_versions_is_not_compared(tmp_path: Path) -> None:
    _run(tmp_path / "models_before_1.json", 1.0, 0.5, batch=7)
    _run(tmp_path / "models_after_1.json", 1.0, 0.5, batch=8)
    rows = summarise(tmp_path)["rows"]
    assert [(r["batch"], "train_ratio" in r) for r in rows] == [(7, False), (8, False)]


def test_a_smoke_round_runs_both_trees_and_compares_them(tmp_path: Path) -> None:
    import subprocess
    import sys

    from benchmarks.models_ab import ROOT

    def worktrees() -> int:
        return len(subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines())

    had = worktrees()
    out = tmp_path / "ab.json"
    run = subprocess.run([sys.executable, "-m", "benchmarks.models_ab", "--smoke", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["smoke"] is True and result["before"] and len(result["commands"]) == 2
    assert result["commands"][1] == "after: (cd .) python -m benchmarks.models --smoke --models fno --out models_after_1.json"  # no path of this machine
    assert {r["model"] for r in result["rows"]} == {"fno"} and all(r["rounds"] == 1 and r["train_ratio"] > 0 for r in result["rows"])
    assert worktrees() == had  # the temporary tree of the earlier commit is removed


def test_the_trainer_steps_of_pairs_are_compared_per_pair(tmp_path: Path) -> None:
    from benchmarks.models_ab import summarise_steps

    for k, (b, a) in enumerate([(0.50, 0.46), (0.55, 0.50), (0.50, 0.38)], start=1):
        (tmp_path / f"steps_before_{k}_0.json").write_text(json.dumps({"pair": "darcy141/gt", "step_s": b}))
        (tmp_path / f"steps_after_{k}_0.json").write_text(json.dumps({"pair": "darcy141/gt", "step_s": a}))
    [row] = summarise_steps(tmp_path)["rows"]
    assert row["pair"] == "darcy141/gt" and row["rounds"] == 3
    assert row["before"]["train_step_s"] == [0.50, 0.55, 0.50] and row["after"]["train_step_s"] == [0.46, 0.50, 0.38]
    assert row["train_ratio"] == pytest.approx(0.46 / 0.50)
    assert "| darcy141/gt | 3 | 0.500 -> 0.460 s | 0.920 |" in markdown({"rows": [row]})


def test_a_smoke_round_of_a_pair_times_the_trainer_step_in_both_trees(tmp_path: Path) -> None:
    import subprocess
    import sys

    from benchmarks.models_ab import ROOT

    out = tmp_path / "ab.json"
    run = subprocess.run([sys.executable, "-m", "benchmarks.models_ab", "--smoke", "--pairs", "darcy/fno", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert [r["pair"] for r in result["rows"]] == ["darcy/fno"] and result["rows"][0]["rounds"] == 1
    assert result["commands"][1] == ("after: (cd .) OPFLOW_CPU_HEAP=keep python -m benchmarks.cpu_heap --child darcy/fno "
                                     "--configfile config/default.yaml --steps 1 --warmup 1 --threads 1")  # no path of this machine
    assert result["machine"]["cpu_identity"] is not None
