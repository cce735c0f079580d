"""opflow/doc_tables.py: the tables of README.md and docs/ made from committed records (`opflow docs`)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from opflow.doc_tables import BLOCKS, PAGE_BLOCKS, REPO, DocsError, pages, render, reproductions_summary, stale, write


def test_the_committed_pages_equal_what_opflow_docs_writes() -> None:
    assert stale() == [], "a generated table differs from its records; run: opflow docs"


def test_every_generator_has_a_place_and_the_readme_shows_the_results() -> None:
    text = {str(p.relative_to(REPO)): p.read_text() for p in pages()}
    used = {name for t in text.values() for name in {*BLOCKS, *PAGE_BLOCKS} if f"<!-- generated: {name} -->" in t}
    assert used == {*BLOCKS, *PAGE_BLOCKS}
    assert "<!-- generated: reproductions-summary -->" in text["README.md"]


def test_the_readme_table_has_the_reproduced_rows_with_their_ratios() -> None:
    table = reproductions_summary()
    assert "| `burgers512_gt1d` | galerkin Table 2(a), n = 512 | 1.20e-3 | 1.20e-3 | **1.00** | CPU, 2 cores, 0:17 |" in table  # the report's one format
    # a published bound is stated as such, never as a ratio to a number
    assert "0.19 of the bound: below it" in table
    # a record with no published number is not a reproduced row
    assert "controlled_ode" not in table


def test_a_block_is_rewritten_and_prose_is_kept(tmp_path: Path) -> None:
    for d in ("published", "config", "benchmarks"):
        shutil.copytree(REPO / d, tmp_path / d, ignore=shutil.ignore_patterns("*.pt", "smoke"))
    (tmp_path / "docs").mkdir()
    page = tmp_path / "README.md"
    page.write_text("intro\n<!-- generated: reproductions-summary -->\nstale\n<!-- /generated -->\nafter\n")
    assert [name for _, name in stale(tmp_path)] == ["reproductions-summary"]
    assert write(tmp_path) == [page]
    text = page.read_text()
    assert text.startswith("intro\n<!-- generated: reproductions-summary -->\n| record |") and text.endswith("<!-- /generated -->\nafter\n")
    assert stale(tmp_path) == [] and write(tmp_path) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- generated: nope -->\nx\n<!-- /generated -->\n", "unknown generated block 'nope'"),
        ("<!-- generated: protocol-cost -->\nx\n", "each block opens and closes once"),
    ],
)
def test_a_bad_marker_is_named(text: str, message: str) -> None:
    with pytest.raises(DocsError, match=message):
        render(text, "page.md")


def test_check_exits_1_on_a_stale_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import opflow.doc_tables as dt

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text("<!-- generated: model-cost-cpu -->\nold\n<!-- /generated -->\n")
    shutil.copytree(REPO / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("*.png", "smoke", "diagnostics"))
    monkeypatch.setattr(dt, "REPO", tmp_path)
    monkeypatch.setattr(dt, "stale", lambda: stale(tmp_path))
    assert dt.run(argparse.Namespace(check=True)) == 1
    assert "docs/x.md: block 'model-cost-cpu' differs from its records; run: opflow docs" in capsys.readouterr().out


def test_a_run_in_progress_shows_where_it_stands_from_the_files_beside_its_page(tmp_path: Path) -> None:
    """`scripts/cpu_training.sh snapshot` copies curves.json and train.log next to published/<pair>/README.md;
    the page's run-progress block is derived from them, so the committed page cannot say more than the run did."""
    import json

    folder = tmp_path / "published" / "pair"
    folder.mkdir(parents=True)
    times = [180.0, 100.0, 90.0, 120.0]
    curves = [{"epoch": i + 1, "train_loss": 1.0 / (i + 1), "test_rel_l2": [0.6, 0.4, 0.3, 0.35][i], "lr": 1e-4 * (i + 1), "epoch_time_s": t}
              for i, t in enumerate(times)]
    (folder / "curves.json").write_text(json.dumps(curves))
    (folder / "train.log").write_text(
        "--- started from scratch (2026-11-26T18:42:27+00:00) ---\n"
        + "".join(f"2026-11-26T19:0{i}:00+00:00 INFO pair epoch {i + 1}/500  train rel_l2 1  test rel L2 1  lr 1  1s\n" for i in range(4))
    )
    page = folder / "README.md"
    page.write_text("about the run\n<!-- generated: run-progress -->\n<!-- /generated -->\nhow to resume\n")
    assert write(tmp_path) == [page]
    text = page.read_text()
    assert "| epochs done | 4 of 500, the last one finished 2026-11-26T19:03:00+00:00 " in text
    assert "| test rel L2 | 0.35 after epoch 4 (learning rate 0.0004); the lowest so far 0.3 (epoch 3) |" in text
    assert "| epoch time | median 100 s over epochs 2-4 (the last 20 at most), the fastest 90.0 s " in text  # the first epoch (warm-up) left out
    assert "| left | 496 epochs: about 13.8 h at that median, 12.4 h at the fastest epoch's pace |" in text
    assert text.startswith("about the run\n") and text.endswith("<!-- /generated -->\nhow to resume\n")
    assert stale(tmp_path) == []
    # the pace now: the median of the last 20 epochs (here 10 slow ones, then 20 at a compiled step's pace)
    long = [{**curves[0], "epoch": e, "epoch_time_s": 200.0 if e <= 10 else 80.0} for e in range(1, 31)]
    (folder / "curves.json").write_text(json.dumps(long))
    write(tmp_path)
    assert "| epoch time | median 80 s over epochs 11-30 (the last 20 at most), the fastest 80.0 s " in page.read_text()
    (folder / "curves.json").unlink()
    with pytest.raises(DocsError, match=r"published/pair/README.md: the block 'run-progress' reads curves.json and train.log beside the page"):
        stale(tmp_path)


def test_the_runs_not_finished_are_listed_from_their_own_pages(tmp_path: Path) -> None:
    """README.md and docs/reproductions.md name the runs still training through one block, one row per
    published/<pair>/README.md that holds a run-progress block, with that block's facts: no hand-written epoch count
    to go stale between sessions. A finished run (a page without the block) is not listed."""
    import json

    from opflow.doc_tables import runs_in_progress

    assert runs_in_progress(tmp_path) == "No paper run is in progress."
    for pair, device, tests in (("a_run", "cpu", [0.5, None, 0.3, None]), ("b_run", "cuda", [0.4, 0.2, 0.25, None])):
        folder = tmp_path / "published" / pair
        folder.mkdir(parents=True)
        curves = [{"epoch": i + 1, "train_loss": 1.0, "test_rel_l2": t, "lr": 1e-3, "epoch_time_s": [300.0, 100.0, 120.0, 110.0][i]}
                  for i, t in enumerate(tests)]
        (folder / "curves.json").write_text(json.dumps(curves))
        (folder / "train.log").write_text(
            f"2026-11-26T18:42:27+00:00 INFO {pair}: 10 parameters, 8 train / 2 test samples, rel_l2 on {device} x 1, epochs 1..100 of 100\n"
            + "".join(f"2026-11-2{6 + i}T19:00:00+00:00 INFO {pair} epoch {i + 1}/100  train rel_l2 1  lr 1  1s\n" for i in range(4)))
        (folder / "README.md").write_text("not finished\n<!-- generated: run-progress -->\n<!-- /generated -->\n")
    (tmp_path / "published" / "done_run").mkdir()
    (tmp_path / "published" / "done_run" / "README.md").write_text("# a record\n")
    rows = runs_in_progress(tmp_path).splitlines()
    assert len(rows) == 4  # header, rule, the two unfinished runs
    # the last test pass (epoch 3), not the last epoch (4, no test); 96 epochs left at the median 110 s of epochs 2-4
    assert rows[2] == "| `a_run` | CPU | 4 of 100 | 2026-11-29 | 0.3 (epoch 3) | 2.9 h at 110 s per epoch | `published/a_run/` |"
    assert rows[3] == "| `b_run` | GPU (CUDA) | 4 of 100 | 2026-11-29 | 0.25 (epoch 3); lowest 0.2 (epoch 2) | 2.9 h at 110 s per epoch | `published/b_run/` |"


def test_the_gpu_step_table_holds_only_the_step_measurements_made_on_a_gpu(tmp_path):
    """A CPU's step measurement (no kernel time: its record is docs/costs.md's) stays out of the wall / kernel table."""
    from opflow.doc_tables import train_step_gpu

    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    for name in ("train_speed_steps_ono_h200.json", "train_speed_steps_gnot_official_cpu.json"):
        shutil.copy(REPO / "benchmarks" / "results" / name, results / name)
    table = train_step_gpu(tmp_path)
    assert "| darcy/ono | fp32 |" in table and "gnot_official" not in table and "None" not in table
