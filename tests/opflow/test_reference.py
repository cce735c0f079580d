"""The published rows (config/reference.yaml) against the paper profile: what each row is compared
with exists, is measured on the protocol's split, and is written by the evaluation; the protocol
audit (docs/protocol-audit.md, scripts/protocol_audit.py) is the config's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from opflow.config import load_config_files, parse_workflow
from opflow.reference import load_reference
from opflow.report import DEFAULT_PAPER_CONFIG

REPO = Path(__file__).resolve().parents[2]


def _audit_module():
    """scripts/protocol_audit.py (a script, not a package module), loaded once."""
    if "protocol_audit" not in sys.modules:
        spec = importlib.util.spec_from_file_location("protocol_audit", REPO / "scripts" / "protocol_audit.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["protocol_audit"] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules["protocol_audit"]


@pytest.fixture(scope="module")
def audit():
    mod = _audit_module()
    return mod, mod.audit()


@pytest.fixture(scope="module")
def paper():
    return load_config_files([str(DEFAULT_PAPER_CONFIG)])


def test_every_configured_row_has_the_protocols_split_and_a_computed_statistic(paper) -> None:
    """For a row whose dataset the paper profile has: its split sizes are those of the row's protocol
    text, and the statistic it names (test split, zero-shot resolution, evaluation set, frame group,
    output channel) is one the evaluation writes for that dataset."""
    mod = _audit_module()
    wf = parse_workflow(paper)
    checked = 0
    for e in load_reference():
        if e.dataset not in wf.datasets:
            continue
        ds = wf.dataset(e.dataset)
        ours = (ds.train, ds.val, ds.test) if ds.val else (ds.train, ds.test)
        assert mod._split_of_protocol(e.protocol) == ours, e.key
        assert mod._where_computed(wf, e.dataset, e.where) is None, e.key
        checked += 1
    assert checked >= 60


def test_the_audit_page_is_the_configs(audit) -> None:
    """docs/protocol-audit.md shows the table the config gives today (rerun the script when not)."""
    mod, rows = audit
    assert mod.table(rows) in (REPO / "docs" / "protocol-audit.md").read_text(), "run: python scripts/protocol_audit.py --write"
    assert [r.key for r in rows] == [e.key for e in load_reference()]  # one line per row


def test_a_row_that_runs_is_one_the_workflow_accepts(audit, paper) -> None:
    """Every row not marked 'no' names a configured dataset and model entry whose pair passes the
    workflow's model/data check; every 'no' row says why."""
    from pipeline.config import check_pairs

    mod, rows = audit
    wf = parse_workflow(paper)
    for r in rows:
        if r.verdict == mod.NO:
            assert r.why, r.key
            continue
        d, m = r.key.split("/")[:2]
        assert d in wf.datasets and m in wf.models, r.key
        check_pairs(wf, [(d, m)])


def test_elasticity_rows_name_the_published_972_point_set_and_the_paper_profile_trains_them(paper) -> None:
    """The Geo-FNO elasticity numbers were measured on the von Mises stress at the 3 x 3 Gauss points
    of the 108 cells (972 points): dataset elasticity972, not elasticity (the 504 nodal values)."""
    rows = [e for e in load_reference() if "elasticity" in e.dataset]
    assert rows and all(e.dataset == "elasticity972" and "972 points" in e.protocol for e in rows)
    assert paper["datasets"]["elasticity972"]["task"]["outputs"] == ["stress_qpoint"]
    for pair in ("elasticity972_ono", "elasticity972_gnot_official", "elasticity972_gnot"):
        assert f"results/{pair}.json" in paper["targets"], pair


def test_gnot_rows_name_the_release_and_repeat_for_our_variant(paper) -> None:
    """The published GNOT numbers were measured with the authors' code: their rows name
    gnot_official; where the paper profile trains gnot too, the same number is its row."""
    ref = load_reference()
    official = {(e.dataset, e.statistic, e.where): e.value for e in ref if e.model == "gnot_official"}
    ours = {(e.dataset, e.statistic, e.where): e.value for e in ref if e.model == "gnot"}
    assert official and set(ours) <= set(official)
    assert all(official[k] == v for k, v in ours.items())
    for d, _, _ in official:
        if d in paper["datasets"]:
            assert f"results/{d}_gnot_official.json" in paper["targets"] and f"results/{d}_gnot.json" in paper["targets"], d
