"""The reproduction report (opflow/report.py, rules/report.smk) as a specification.

Built from a few small results files: every published number of config/reference.yaml is in the
page exactly once with its source; a result gets a ratio and a status (reproduced, better, worse)
only when it is a run of the paper protocol (its run hash equals the paper profile's); quick results
are labelled and never get one; zero-shot runs get an error-against-resolution figure; the HTML page
has every figure inlined; a foreign file is listed, not fatal; and the Snakemake target builds the
same from a profile's results. The page of the committed records: tests/opflow/test_report_page.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from opflow.config import load_config_files, resolve_run
from opflow.data.errors import ConfigError
from opflow.reference import DEFAULT_REFERENCE, load_reference
from opflow.report import DEFAULT_PAPER_CONFIG, write_report
from report_helpers import PNG, Page, results
from workflow_helpers import snakemake


def page_rows(site: Path) -> dict[tuple[str, str, str], dict[str, str]]:
    """(dataset, model, statistic) -> the cells of its row of the page, with its status."""
    page = Page((site / "index.html").read_text())
    out = {}
    for r in page.rows:
        key = (r["attrs"]["dataset"], r["attrs"]["model"], r["cells"]["statistic"])
        assert key not in out, key
        out[key] = {**r["cells"], "status": r["attrs"]["status"]}
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    work = tmp_path_factory.mktemp("report")
    res = work / "quick" / "results"
    res.mkdir(parents=True)
    paper = load_config_files([str(DEFAULT_PAPER_CONFIG)])
    paper_hash = resolve_run(paper, "darcy", "ono")["hash"]
    # darcy/ono: a run of the paper protocol (same run hash as config/default.yaml gives it)
    results("darcy", "ono", paper_hash, 0.0095).save(res / "darcy_ono.json")
    # darcy43/ono: a quick run with zero-shot errors, a prediction panel and training curves
    (res / "darcy43_ono.png").write_bytes(PNG)
    (work / "quick/models/darcy43_ono").mkdir(parents=True)
    (work / "quick/models/darcy43_ono/curves.png").write_bytes(PNG)
    zs = {str(r): {"rel_l2_mean": 0.05 + 0.001 * i, "rel_l2_median": 0.05} for i, r in enumerate((61, 85, 141))}
    results("darcy43", "ono", "0123456789abcdef", 0.047, zero_shot=zs, plot="quick/results/darcy43_ono.png", resolution="43").save(res / "darcy43_ono.json")
    # a pair with no published number, and a file that is not a results file
    results("darcy", "deeponet", "fedcba9876543210", 0.116).save(res / "darcy_deeponet.json")
    (res / "broken.json").write_text('{"format": "something-else"}')
    bench = work / "convergence.png"
    bench.write_bytes(PNG)
    report = write_report(sorted(res.glob("*.json")), md=res / "report.md", site=work / "quick/report", profile="quick", workdir=work, bench_pngs=[bench])
    return work, report


def test_every_published_number_appears_once_with_its_source(built) -> None:
    work, _ = built
    rows = page_rows(work / "quick/report")
    reference = load_reference(DEFAULT_REFERENCE)
    assert len(reference) >= 80  # the protocol notes quote 81 numbers
    for e in reference:
        row = rows[(e.dataset, e.model, e.what)]
        published = f"{e.value:.2e}".replace("e-0", "e-")
        assert row["published"] == (published if e.relation == "=" else f"< {published}") and row["source"] == f"{e.paper}: {e.table}", e.key
    # each published number is in one row only: no entry is shown twice
    assert len([r for r in rows.values() if r["published"] != "-"]) == len(reference)
    md = (work / "quick/results/report.md").read_text()
    assert md.count("| ono: Table 1 (Darcy) |") == sum(e.source == "ono: Table 1 (Darcy)" for e in reference)


def test_only_a_run_of_the_paper_protocol_gets_a_ratio(built) -> None:
    work, report = built
    rows = page_rows(work / "quick/report")
    ono = rows[("darcy", "ono", "mean")]
    assert ono["ours"] == "9.50e-3" and ono["published"] == "7.60e-3" and ono["ours / published"] == f"{0.0095 / 0.0076:.2f}"
    assert ono["status"] == "worse"  # 1.25: more than 20 % above the published number
    assert ono["parameters"] == "1,227,649" and ono["training h:mm"] == "1:30" and ono["device"] == "NVIDIA H100"
    assert ono["record"].split() == ["results"]  # a run outside published/: its results file
    zs = rows[("darcy43", "ono", "mean, zero-shot at 85")]
    assert zs["ours"] == "5.10e-2" and zs["published"] == "2.59e-2" and zs["ours / published"] == "-" and zs["status"] == "reduced"
    assert zs["record"].split() == ["results", "curves", "prediction"]
    # a zero-shot resolution the run did not evaluate, and pairs nobody ran: their status says why
    assert rows[("darcy43", "ono", "mean, zero-shot at 421")]["status"] == "missing"
    assert rows[("darcy", "gnot", "mean")]["status"] == "costly" and float(rows[("darcy", "gnot", "mean")]["est. training h"]) > 2.5
    assert rows[("airfoil", "ono", "mean")]["status"] == "no-data" and rows[("darcy", "lsm", "mean")]["status"] == "no-model"
    assert rows[("burgers2048", "ft1d", "mean")]["status"] == "diverged"
    # a result without a published number is still shown, with none
    deeponet = rows[("darcy", "deeponet", "mean")]
    assert deeponet["ours"] == "1.16e-1" and deeponet["published"] == "-" and deeponet["ours / published"] == "-" and deeponet["status"] == "ours-only"
    assert sum(r.ratio is not None for r in report.rows) == 1


def test_figures_and_a_self_contained_html_page(built) -> None:
    work, report = built
    site = work / "quick/report"
    names = {p.name for _, p in report.figures}
    assert names == {"zero_shot_darcy43_ono.png", "curves_darcy43_ono.png", "predictions_darcy43_ono.png", "bench_convergence.png"}
    assert all((site / n).stat().st_size > 0 for n in names)
    md = (work / "quick/results/report.md").read_text()
    assert "](../report/zero_shot_darcy43_ono.png)" in md
    page = (site / "index.html").read_text()
    assert page.count('src="data:image/png;base64,') == 4 and not re.search(r'src="(?!data:)', page)
    assert "9.50e-3" in page and "ono: Table 1 (Darcy)" in page
    # the foreign file is named with the reason, not fatal
    assert "broken.json" in md and "not an opflow results file" in md


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"darcy/ono": {}}, "the key must read <dataset>/<model>/<statistic>"),
        ({"darcy/ono/average": {}}, "statistic 'average' is not one of ['mean', 'median', 'max']"),
        ({"darcy/ono/mean@test:x": {}}, "'test' is not one of"),
        ({"darcy/ono/mean": {"value": 0.0076, "paper": "ono", "table": "1", "protocol": "p"}}, "missing ['metric']"),
        ({"darcy/ono/mean": {"value": 0.76, "paper": "nope", "table": "1", "protocol": "p", "metric": "rel_l2"}}, "paper: 'nope' is not one of papers"),
        ({"darcy/ono/mean": {"value": -1, "paper": "ono", "table": "1", "protocol": "p", "metric": "rel_l2"}}, "value: -1 is not a positive number"),
    ],
)
def test_a_bad_reference_entry_names_its_key(tmp_path: Path, entry: dict, message: str) -> None:
    path = tmp_path / "reference.yaml"
    path.write_text(yaml.safe_dump({"papers": {"ono": "Xiao et al."}, "entries": entry}))
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_reference(path)
    assert f"entries.{next(iter(entry))}" in str(err.value)


def test_the_snakemake_target_reports_what_the_profile_has(tmp_path: Path) -> None:
    res = tmp_path / "quick/results"
    res.mkdir(parents=True)
    results("darcy", "ono", "0123456789abcdef", 0.0467).save(res / "darcy_ono.json")
    run = snakemake(tmp_path, None, "quick/report")
    assert run.returncode == 0, run.stderr[-3000:]
    row = page_rows(tmp_path / "quick/report")[("darcy", "ono", "mean")]
    assert row["ours"] == "4.67e-2" and row["ours / published"] == "-" and row["status"] == "reduced"
    assert "| reduced run | darcy / ono | mean | 4.67e-2 | 7.60e-3 | - |" in (res / "report.md").read_text()
