"""opflow/doc_tables.py: the tables of README.md and docs/ made from committed records (`opflow docs`)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from opflow.doc_tables import BLOCKS, REPO, DocsError, pages, render, reproductions_summary, stale, write


def test_the_committed_pages_equal_what_opflow_docs_writes() -> None:
    assert stale() == [], "a generated table differs from its records; run: opflow docs"


def test_every_generator_has_a_place_and_the_readme_shows_the_results() -> None:
    text = {p.name: p.read_text() for p in pages()}
    used = {name for t in text.values() for name in BLOCKS if f"<!-- generated: {name} -->" in t}
    assert used == set(BLOCKS)
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
