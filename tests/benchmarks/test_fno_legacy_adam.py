"""benchmarks/fno_legacy_adam.py: each run is the paper profile's fno1d_cao with one seed and one
optimiser changed, and the result sets each run beside the published number. Nothing is trained here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import benchmarks.fno_legacy_adam as bench
from opflow.config import load_config_files, resolve_run
from pipeline.config import check_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("optimizer", bench.OPTIMIZERS)
def test_a_run_is_the_paper_configuration_with_its_seed_and_optimizer(tmp_path: Path, optimizer: str) -> None:
    cfg_file = tmp_path / "overlay.yaml"
    cfg_file.write_text(bench.overlay("burgers512", 2, optimizer))
    cfg = load_config_files([str(ROOT / "config/default.yaml"), str(cfg_file)])
    check_config(cfg)
    paper = resolve_run(load_config_files([str(ROOT / "config/default.yaml")]), "burgers512", "fno1d_cao")
    run = resolve_run(cfg, "burgers512", "fno1d_cao")
    assert cfg["root"] == f"bench_runs/fno_legacy_adam/s2_{optimizer}" and cfg["targets"] == ["results/burgers512_fno1d_cao.json"]
    assert run["training"]["seed"] == 2 and run["training"]["optimizer"] == optimizer
    assert paper["training"]["optimizer"] == "adam_complex_legacy" and paper["training"]["seed"] == 0
    changed = {k for k in run["training"] if run["training"][k] != paper["training"][k]}
    assert changed <= {"seed", "threads", "optimizer"}
    assert run["model_config"] == paper["model_config"] and run["data"] == paper["data"]


def test_collect_sets_each_run_beside_the_published_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config/reference.yaml").write_text((ROOT / "config/reference.yaml").read_text())
    errors = {("adam_complex_legacy", 0): 0.004, ("adam_complex_legacy", 1): 0.002, ("adam", 0): 0.0015}
    for (opt, seed), mean in errors.items():
        res = tmp_path / bench.run_root(seed, opt) / "results"
        res.mkdir(parents=True)
        metrics = {"rel_l2_mean": mean, "rel_l2_median": mean, "rel_l2_max": 3 * mean}
        (res / "burgers512_fno1d_cao.json").write_text(json.dumps({"metrics": metrics, "run_hash": f"h{seed}", "train_time_s": 1.0}))
    out = bench.collect("burgers512", [0, 1])
    assert out["published"]["value"] == 0.004373
    s = out["summary"]
    assert s["adam_complex_legacy"]["n"] == 2 and s["adam_complex_legacy"]["mean"] == pytest.approx(0.003)
    assert s["adam_complex_legacy"]["ratio_of_mean"] == pytest.approx(0.003 / 0.004373)
    assert s["adam"]["n"] == 1 and s["legacy_over_adam"] == pytest.approx(2.0)
    assert [r for r in out["runs"] if "missing" in r] == [{"seed": 1, "optimizer": "adam", "missing": "bench_runs/fno_legacy_adam/s1_adam/results/burgers512_fno1d_cao.json"}]
    assert "adam_complex_legacy: mean rel L2 0.003 over 2 seeds (0.002-0.004), ratio 0.69" in "\n".join(bench.summarize(out))
