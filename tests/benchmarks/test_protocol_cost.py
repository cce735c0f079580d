"""benchmarks/protocol_cost.py: how a stored measurement becomes the cost table of docs/costs.md.

Nothing is timed here: the rows are derived from measurements (stored or made up), which is the
part a reader of docs/costs.md relies on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.protocol_cost import FIT_HOURS, _compact_label, readme_table, record, rederive

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "benchmarks/results/protocol_cost.json"


def _entry(epochs: int = 100, steps: int = 125) -> dict:
    return {
        "dataset": "d", "model": "m", "target": True, "reference": [], "epochs": epochs, "batch": 64, "train_samples": 64 * steps,
        "train_items_per_sample": 1.0, "dataset_train": 64 * steps, "steps_per_epoch": steps, "eval_every": 1, "eval_batches": 16,
    }


def test_hours_count_the_training_steps_and_fits_counts_the_per_epoch_evaluation_too() -> None:
    # 100 epochs x 125 steps x 0.69 s = 2.40 h of training; 16 evaluation batches of 0.5 s add 8 s an epoch: 2.62 h
    row = record(_entry(), {"step_s": {"median": 0.69}, "eval_batch_s": 0.5})
    assert row["s_per_epoch"] == pytest.approx(86.25)
    assert row["hours"] == pytest.approx(2.3958, rel=1e-4) and row["hours"] < FIT_HOURS
    assert row["eval_s_per_epoch"] == pytest.approx(8.0)
    assert row["hours_with_eval"] == pytest.approx(2.6181, rel=1e-4)
    assert row["fits"] is False
    # without a timed evaluation the training hours decide
    assert record(_entry(), {"step_s": {"median": 0.69}})["fits"] is True


def test_an_unmeasured_protocol_has_no_hours_but_an_extrapolation_kept_apart() -> None:
    row = record(_entry(epochs=10, steps=2), {"not_measured": "a batch-1 step used 3 GiB: batch 64 would need about 192 GiB > the cap 13.6 GiB", "batch1_x_batch_s": 36.0})
    assert row["s_per_epoch"] is None and row["hours"] is None and row["fits"] is None
    assert row["extrapolated"]["hours"] == pytest.approx(10 * 2 * 36.0 / 3600)
    # an extrapolation under the budget claims nothing ("?"); one far over it says "no"
    table = readme_table({"protocols": [row]})
    assert "| d/m | none (a target only) | 10 | 128 | 64 | not measured: batch 64 over the memory cap; a batch-1 step x 64: 72 s | ~0.2 | ? |" in table
    long = record(_entry(epochs=500, steps=2), {"not_measured": row["not_measured"], "batch1_x_batch_s": 36.0})
    assert readme_table({"protocols": [long]}).endswith("| ~10 | no |")


def test_labels_name_each_paper_once_and_merge_the_resolutions_of_one_table() -> None:
    assert _compact_label("ono: Table 2 (s = 61); ono: Table 2 (s = 85); ono: Table 2 (s = 421)") == "ono: Table 2 (s = 61, 85, 421)"
    assert _compact_label("ono: Table 3 (seen 11-18); ono: Table 3 (unseen 19-20)") == "ono: Table 3 (seen 11-18); Table 3 (unseen 19-20)"
    assert _compact_label("galerkin: Table 2(a), n = 512") == "galerkin: Table 2(a), n = 512"
    assert _compact_label("a: T1; b: T2") == "a: T1; b: T2"


def test_the_stored_result_is_derived_by_the_current_rules() -> None:
    """When the rules of :func:`record` change, ``--rederive`` rewrites the stored result."""
    stored = json.loads(STORED.read_text())
    assert rederive(stored)["protocols"] == stored["protocols"], "run: python -m benchmarks.protocol_cost --rederive benchmarks/results/protocol_cost.json"


def test_the_costs_page_shows_the_stored_result_as_its_cost_table() -> None:
    page = (ROOT / "docs" / "costs.md").read_text()
    table = readme_table(rederive(json.loads(STORED.read_text())))
    assert table in page, "write it with: opflow docs"
    n_fit = table.count("| **yes** |")
    assert f"{n_fit} of {table.count(chr(10)) - 1} fit in {FIT_HOURS:g} hours" in page


def test_appending_rows_never_writes_over_the_file_they_are_appended_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--append-to`` adds the rows of ``--pairs`` to a stored result; the run's own rows go to ``--out``,
    by default the stored result itself: that combination would replace the whole table with the few rows."""
    from benchmarks.protocol_cost import DEFAULT_OUT, main

    stored = ROOT / DEFAULT_OUT
    before = stored.read_bytes()
    with pytest.raises(SystemExit) as e:
        main(["--pairs", "burgers512/gt1d", "--append-to", str(stored)])
    assert e.value.code == 2 and "is also where this run writes its own rows (--out)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--append-to", str(stored), "--out", str(tmp_path / "x.json")])
    assert e.value.code == 2 and "--append-to adds the rows of --pairs" in capsys.readouterr().err
    assert stored.read_bytes() == before
