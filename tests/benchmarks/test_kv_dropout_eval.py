"""benchmarks/kv_dropout_eval.py: one pass with the K^T V dropout off in evaluation, then passes with it on, each
with its own seeded masks; the model's layers are left as they were. Nothing is trained here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import benchmarks.kv_dropout_eval as bench


def test_the_smoke_run_compares_the_deterministic_pass_with_seeded_noisy_passes(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["benchmark"] == "kv_dropout_eval" and r["smoke"] is True and r["kv_dropout"] == [0.5]
    noisy = r["with_eval_dropout"]
    assert noisy["seeds"] == [0, 1] and len(noisy["values"]) == 2
    assert noisy["values"][0] != noisy["values"][1]  # each pass draws its own masks
    assert r["deterministic"] not in noisy["values"]


def test_compare_repeats_its_draws_and_restores_the_layers() -> None:
    model, mean_error, _ = bench.tiny()
    first, second = bench.compare(model, mean_error, 3), bench.compare(model, mean_error, 3)
    assert first == second  # the masks follow the seeds
    assert all(not m.kv_dropout_eval for m in bench.kv_dropout_layers(model))
    assert mean_error() == first["deterministic"]


def test_a_model_without_kv_dropout_is_refused() -> None:
    model, mean_error, _ = bench.tiny()
    for m in bench.kv_dropout_layers(model):
        m.kv_dropout = 0.0
    with pytest.raises(SystemExit, match="no attention layer with kv_dropout"):
        bench.compare(model, mean_error, 2)
