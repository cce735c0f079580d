"""Published records (opflow/publish.py, rules/publish.smk) as a specification.

Only a run of the paper protocol (its run hash is the one config/default.yaml gives the pair) is
published; its record holds the artefacts, the published numbers with ratios and the machine; the
report takes a record as a paper-protocol result. And every record committed under published/ is
still the paper profile's run: its hash equals the one the profile gives today.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opflow.cli import main
from opflow.config import load_config_files, resolve_run
from opflow.publish import publish
from opflow.reference import load_reference
from opflow.report import DEFAULT_PAPER_CONFIG, build_report, paper_hashes
from opflow.report_page import ours_table
from opflow.report_status import Status

from report_helpers import PNG, results

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def paper_run(tmp_path: Path) -> Path:
    """results/ and models/ of a pretend paper-profile run of burgers512 / fno1d (mean 0.005)."""
    paper_hash = resolve_run(load_config_files([str(DEFAULT_PAPER_CONFIG)]), "burgers512", "fno1d")["hash"]
    (tmp_path / "results").mkdir()
    models = tmp_path / "models" / "burgers512_fno1d"
    models.mkdir(parents=True)
    results("burgers512", "fno1d", paper_hash, 0.005).save(tmp_path / "results/burgers512_fno1d.json")
    (tmp_path / "results/burgers512_fno1d.png").write_bytes(PNG)
    (models / "curves.csv").write_text("epoch,train_loss\n1,0.5\n")
    (models / "train.log").write_text("epoch 1\n")
    return tmp_path


def test_a_paper_run_is_published_with_its_numbers_ratios_and_machine(paper_run: Path) -> None:
    out = paper_run / "published/burgers512_fno1d"
    rec = publish(paper_run / "results/burgers512_fno1d.json", out, git_commit="abc")
    assert rec["run_hash"] == rec["paper_hash"]
    assert sorted(p.name for p in out.iterdir()) == ["curves.csv", "prediction.png", "record.json", "result.json", "train.log"]
    (entry,) = [p for p in rec["published"] if p["key"] == "burgers512/fno1d/mean"]
    assert entry["published"] == 0.004373 and entry["ours"] == 0.005 and entry["ratio"] == pytest.approx(0.005 / 0.004373)
    assert rec["machine"]["logical_cores"] >= 1 and rec["machine"]["torch"]
    assert rec["rerun"] == "snakemake --cores 2 published/burgers512_fno1d/record.json"
    assert json.loads((out / "record.json").read_text()) == rec
    # the report reads the record as a paper-protocol result and prefers it to a reduced run of the pair
    results("burgers512", "fno1d", "0123456789abcdef", 0.5).save(paper_run / "results/reduced.json")
    rep = build_report([out / "result.json", paper_run / "results/reduced.json"], load_reference(), profile="default")
    (row,) = [r for r in rep.rows if (r.dataset, r.model) == ("burgers512", "fno1d")]
    assert row.ours == 0.005 and row.ratio == pytest.approx(0.005 / 0.004373) and row.record == "burgers512_fno1d"
    assert row.status is Status.REPRODUCED and [label for label, _ in row.links] == ["record", "prediction", "log"]


def test_publishing_a_finished_run_removes_the_state_and_page_of_its_run_in_progress(paper_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pair trained over several leases had published/<pair>/checkpoint.json, the pointer to the checkpoint the
    leases resumed (opflow.lease_state), and a README.md saying where it stood; once published, neither is true any
    more, and the checkpoint goes too. A README of another kind is the author's and stays."""
    from opflow import lease_state

    out = paper_run / "published/burgers512_fno1d"
    state = paper_run / ".lease-state/burgers512_fno1d/checkpoint.pt"
    state.parent.mkdir(parents=True)
    state.write_bytes(b"state")
    lease_state.keep(paper_run, out, state, 3)  # the pointer names the file relative to paper_run
    pointer = json.loads((out / "checkpoint.json").read_text())
    (out / "checkpoint.json").write_text(json.dumps({**pointer, "file": str(state)}))  # absolute: publish resolves it from the repository
    (out / "README.md").write_text("# not finished\n\n<!-- generated: run-progress -->\n| | |\n<!-- /generated -->\n")
    assert main(["publish", str(paper_run / "results/burgers512_fno1d.json"), "--out", str(out)]) == 0
    assert f"{out}: removed checkpoint.json, {state} and README.md of the run in progress" in capsys.readouterr().out
    assert not (out / "checkpoint.json").exists() and not state.exists() and not state.parent.exists()
    assert not (out / "README.md").exists() and (out / "record.json").exists()
    (out / "README.md").write_text("# notes on this record\n")
    assert main(["publish", str(paper_run / "results/burgers512_fno1d.json"), "--out", str(out)]) == 0
    assert (out / "README.md").read_text() == "# notes on this record\n"


@pytest.mark.parametrize("mean, meets", [(0.005, True), (0.04, False)])
def test_a_published_bound_is_met_or_not_with_ours_as_a_share_of_it(tmp_path: Path, mean: float, meets: bool) -> None:
    """Lorenz-63 / TNO is published as bounds (median below 1 %, worst case below 10 %) of the authors'
    metric, the error in normalised units (``rel_l2_normalised``): the record and the report say whether
    ours is below each, and ours / bound; an exact number has no ``meets``."""
    paper_hash = resolve_run(load_config_files([str(DEFAULT_PAPER_CONFIG)]), "lorenz63", "tno")["hash"]
    (tmp_path / "results").mkdir()
    (tmp_path / "models/lorenz63_tno").mkdir(parents=True)
    results("lorenz63", "tno", paper_hash, mean).save(tmp_path / "results/lorenz63_tno.json")  # normalised: median 1.8 mean, max 6 mean
    out = tmp_path / "published/lorenz63_tno"
    rec = publish(tmp_path / "results/lorenz63_tno.json", out)
    got = {p["key"]: p for p in rec["published"]}
    assert got["lorenz63/tno/median"]["meets"] is meets and got["lorenz63/tno/median"]["ratio"] == pytest.approx(1.8 * mean / 0.01)
    assert got["lorenz63/tno/max"]["meets"] is meets and got["lorenz63/tno/max"]["ratio"] == pytest.approx(6 * mean / 0.1)
    rep = build_report([out / "result.json"], load_reference(), profile="default")
    rows = {r.what: r for r in rep.rows if (r.dataset, r.model) == ("lorenz63", "tno")}
    assert rows["median"].ratio is None and rows["median"].bound == (pytest.approx(1.8 * mean / 0.01), meets)
    assert rows["max"].bound == (pytest.approx(6 * mean / 0.1), meets)
    assert rows["max"].status is (Status.REPRODUCED if meets else Status.WORSE)
    (table_row,) = [row for _, body in ours_table(rep.rows).groups for row in body if row.cells[2].text == "max"]
    assert table_row.cells[5].text == f"{6 * mean / 0.1:.2f} of bound" and table_row.note == f"{'' if meets else 'not '}below the published bound"


def test_a_run_that_is_not_the_paper_protocol_is_refused(paper_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = paper_run / "results/burgers512_fno1d.json"
    results("burgers512", "fno1d", "0123456789abcdef", 0.005).save(path)
    out = paper_run / "published/burgers512_fno1d"
    assert main(["publish", str(path), "--out", str(out)]) == 2
    assert "is not the paper profile's" in capsys.readouterr().out and not (out / "record.json").exists()


RECORDS = sorted((REPO / "published").glob("*/record.json"))


@pytest.mark.parametrize("record", RECORDS, ids=[r.parent.name for r in RECORDS])
def test_every_committed_record_is_the_paper_profiles_run(record: Path) -> None:
    """A record whose hash the paper profile no longer gives is stale: rerun it (its ``rerun`` command)."""
    rec = json.loads(record.read_text())
    pair = (rec["dataset"], rec["model"])
    assert record.parent.name == f"{pair[0]}_{pair[1]}"
    assert paper_hashes(DEFAULT_PAPER_CONFIG, [pair])[pair] == rec["run_hash"]
    result = json.loads((record.parent / "result.json").read_text())
    assert result["run_hash"] == rec["run_hash"]
