"""The report page (opflow/report_page.py) rendered from the committed records, as a specification.

The summary's counts per paper, per model and in all equal counts made here from the records
themselves (each ``published/*/record.json``'s own ratios, ``published/diverged.yaml``, the partial
record folders, the paper profile's names and ``benchmarks/results/protocol_cost*.json``); every
row links files that exist; numbers are written one way; no Markdown reaches the HTML. And, where
chromium is installed, the page in a real browser fits 1400 px without sideways scrolling and a
390 px phone without the page itself overflowing.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections import Counter
from html import escape
from pathlib import Path

import pytest
import yaml

from opflow.config import load_config_files
from opflow.queue import load_queue
from opflow.reference import load_reference
from opflow.report import DEFAULT_PAPER_CONFIG, write_report
from opflow.report_status import TOLERANCE
from report_helpers import Page

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "published"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The paper profile's report of the committed records, as `snakemake report` writes it."""
    work = tmp_path_factory.mktemp("page")
    write_report(
        sorted(PUBLISHED.glob("*/result.json")), md=work / "results/report.md", site=work / "report", profile="default",
        workdir=REPO, bench_pngs=sorted((REPO / "benchmarks/results").glob("*.png")),
    )  # fmt: skip
    return work / "report"


@pytest.fixture(scope="module")
def page(site: Path) -> Page:
    return Page((site / "index.html").read_text())


@functools.cache
def _paper_config() -> dict:
    return load_config_files([str(DEFAULT_PAPER_CONFIG)])


@functools.cache
def _protocol_costs() -> tuple[dict, ...]:
    return tuple(json.loads(f.read_text()) for f in sorted((REPO / "benchmarks/results").glob("protocol_cost*.json")))


def expected_status(key: str, dataset: str, model: str) -> str:
    """The status of one published number, read from the records alone (not through opflow.report_status)."""
    record = PUBLISHED / f"{dataset}_{model}" / "record.json"
    if record.is_file():
        (entry,) = [p for p in json.loads(record.read_text())["published"] if p["key"] == key]
        if entry["relation"] == "<":
            return "reproduced" if entry["meets"] else "worse"
        return "better" if entry["ratio"] < 1 - TOLERANCE else "worse" if entry["ratio"] > 1 + TOLERANCE else "reproduced"
    if f"{dataset}/{model}" in (yaml.safe_load((PUBLISHED / "diverged.yaml").read_text()) or {}):
        return "diverged"
    if (PUBLISHED / f"{dataset}_{model}" / "curves.json").is_file():  # curves, no record: a run in progress
        return "unfinished"
    config = _paper_config()
    if dataset not in config["datasets"]:
        return "no-data"
    if model not in config["models"]:
        return "no-model"
    for data in _protocol_costs():
        for p in data["protocols"]:
            if (p["dataset"], p["model"]) == (dataset, model):
                if "ConfigError" in (p.get("not_measured") or ""):
                    return "no-model"
                hours = p.get("hours_with_eval") or p.get("hours") or (p.get("extrapolated") or {}).get("hours")
                return "costly" if hours is not None and hours > data["fit_hours"] else "not-yet"
    return "not-yet"


def test_the_summary_counts_are_those_of_the_committed_records(page: Page) -> None:
    reference = load_reference()
    statuses = [(e, expected_status(e.key, e.dataset, e.model)) for e in reference]
    by_paper: dict[str, Counter[str]] = {}
    by_model: dict[str, Counter[str]] = {}
    for e, s in statuses:
        by_paper.setdefault(e.paper, Counter())[s] += 1
        by_model.setdefault(e.model, Counter())[s] += 1
    every = Counter(s for _, s in statuses)

    def shown(counts: dict[str, int]) -> dict[str, int]:
        return {k: v for k, v in counts.items() if v and k != "published"}

    for table, expected in (("by-paper", by_paper), ("by-model", by_model)):
        got = page.summary[table]
        assert set(got) == set(expected) | {"all"}, table
        for name, counts in expected.items():
            assert shown(got[name]) == dict(counts), (table, name)
            assert got[name]["published"] == sum(counts.values()), (table, name)
        assert shown(got["all"]) == dict(every) and got["all"]["published"] == len(reference)
    # the committed records: every paper-protocol number is compared, and nothing is left unexplained
    assert every["reproduced"] + every["better"] + every["worse"] == sum(
        len(json.loads(r.read_text())["published"]) for r in PUBLISHED.glob("*/record.json")
    )
    assert every["diverged"] == 4
    # a row that fits the CPU budget and has no run yet waits on the CPU's list (config/queue.yaml, cpu:)
    not_yet = {(e.dataset, e.model) for e, s in statuses if s == "not-yet"}
    on_the_cpu_list = {tuple(q.pair.split("/")) for q in load_queue() if q.cpu_rank is not None}
    assert not_yet <= on_the_cpu_list, sorted(not_yet - on_the_cpu_list)
    # one row per published number, with its status, and the results without one
    rows = [r for r in page.rows if r["attrs"]["paper"]]
    assert Counter(r["attrs"]["status"] for r in rows) == every
    assert {r["attrs"]["status"] for r in page.rows if not r["attrs"]["paper"]} <= {"ours-only"}


def test_a_row_not_run_or_unfinished_says_where_its_pair_stands_in_the_queue(site: Path) -> None:
    """Every row of a pair of config/queue.yaml that is not done says its place in the GPU lease queue, that the CPU
    trains it, or why it is blocked: the words of opflow.queue.standing, in the Markdown as on the page."""
    from opflow.queue import DEFAULT_QUEUE, derive, load_queue, protocol_epochs, standing

    entries = load_queue(DEFAULT_QUEUE)
    where = standing(derive(entries, load_reference(), PUBLISHED, protocol_epochs([DEFAULT_PAPER_CONFIG], entries)))
    assert any(t.startswith("queued for the GPU leases: place 1 of") for t in where.values())
    md = (site.parent / "results/report.md").read_text().splitlines()
    page = (site / "index.html").read_text()
    for (dataset, model), text in where.items():
        rows = [line for line in md if f"| {dataset} / {model} |" in line]
        assert rows and all(line.rstrip(" |").endswith(text) for line in rows), (dataset, model, rows)
        assert page.count(escape(text)) == len(rows), (dataset, model)


def test_numbers_are_written_one_way(page: Page) -> None:
    sci = re.compile(r"(< )?-?\d\.\d\de-?\d+")
    ours = [r["cells"] for r in page.rows if "ours" in r["cells"]]
    assert len(ours) >= 20
    for cells in ours:
        assert cells["ours"] == "-" or sci.fullmatch(cells["ours"]), cells
        assert cells["published"] == "-" or sci.fullmatch(cells["published"]), cells
        assert re.fullmatch(r"-|\d+\.\d\d( of bound)?", cells["ours / published"]), cells
        assert re.fullmatch(r"-|\d+:\d\d", cells["training h:mm"]), cells
    darcy_gt = next(r["cells"] for r in page.rows if r["attrs"]["dataset"] == "darcy" and r["attrs"]["model"] == "gt")
    assert (darcy_gt["ours"], darcy_gt["published"], darcy_gt["ours / published"]) == ("8.43e-3", "8.40e-3", "1.00")
    for r in page.rows:
        if "est. training h" in r["cells"]:
            assert re.fullmatch(r"-|~?[\d,]+\.\d", r["cells"]["est. training h"]), r


def test_every_row_links_its_record_and_the_links_resolve(site: Path, page: Page) -> None:
    html = (site / "index.html").read_text()
    for r in page.rows:
        a = r["attrs"]
        if a["status"] in ("reproduced", "better", "worse", "ours-only"):
            assert r["cells"]["record"].split() == ["record", "curves", "json", "prediction", "log"], a
            assert f'{a["dataset"]}_{a["model"]}/record.json"' in html
    diverged = [r for r in page.rows if r["attrs"]["status"] == "diverged"]
    assert all(r["cells"]["record"].startswith("curves json") for r in diverged)
    assert page.links and all((site / href).is_file() for href in page.links), [h for h in page.links if not (site / h).is_file()]


def test_no_markdown_in_the_html_and_statistics_on_one_line(site: Path, page: Page) -> None:
    text = "".join(page.text)
    assert "`" not in text and "**" not in text and not re.search(r"(?<![\w*])\*\w[^*]*\*(?!\w)", text) and "](" not in text
    html = (site / "index.html").read_text()
    assert "white-space:nowrap" in html and "max-width:100%" in html  # cells on one line; figures never wider than the page
    assert html.count('src="data:image/png;base64,') == len(list((site).glob("*.png")))


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


#: appended to a copy of the page: the widths the browser laid out, in the page's title
MEASURE = (
    "<script>document.title = JSON.stringify({page: document.documentElement.scrollWidth, "
    "view: document.documentElement.clientWidth, ours: [...document.querySelectorAll('.scroll')].map(d => d.scrollWidth - d.clientWidth)});</script>"
)


@pytest.mark.skipif(_chromium() is None, reason="no chromium: the layout is checked only in a real browser")
@pytest.mark.parametrize("width", [1400, 390])
def test_in_a_real_browser_the_page_fits_its_width(site: Path, width: int) -> None:
    copy = site / f"measure_{width}.html"
    copy.write_text((site / "index.html").read_text().replace("</body>", MEASURE + "</body>"))
    run = subprocess.run(
        [_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={width},1000", "--dump-dom", copy.as_uri()],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    title = re.search(r"<title>(.*?)</title>", run.stdout)
    assert run.returncode == 0 and title, run.stderr[-2000:]
    got = json.loads(title.group(1).replace("&quot;", '"'))
    assert got["page"] <= got["view"], got  # the page never scrolls sideways
    if width >= 1400:
        assert max(got["ours"]) <= 0, got  # every table fits: none scrolls inside its frame
