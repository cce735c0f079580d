"""The reproduction report as a page: ``report.md`` and the static ``index.html``, from one layout.

Top to bottom:

1. a sentence of counts and how to read the page;
2. the summary: published numbers per paper and per model (and in all), by status
   (:mod:`opflow.report_status`): reproduced within 20 %, better, worse, diverged, not run and why;
3. *Our numbers*: every row with a result of ours (and the diverged and unfinished runs), grouped by
   status: ours, published, ours / published, source, parameters, training time, device and
   the links to its record (``published/<dataset>_<model>/``: record, curves, prediction, log);
4. *Not run*: the other published numbers, grouped by why (no data, no model, too costly), with the
   estimated training time;
5. the figures, at their natural width (never wider than the page), each linked to its PNG;
6. the papers cited.

Numbers are written one way everywhere (:mod:`opflow.report_format`): errors as ``8.43e-3``, ratios
with two decimals, training time as h:mm, estimated cost in hours. The HTML page is built from the
same cells as the Markdown, never from Markdown text, and every text is escaped. Links are relative
to the page's folder (``..``/published/...), so they resolve where the repository is checked out.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from opflow import report_format as fmt
from opflow.report_status import ORDER, TOLERANCE, Status, SummaryRow, summarise, summary_columns

if TYPE_CHECKING:
    from opflow.report import Report, Row

# --------------------------------------------------------------------------- cells and tables


@dataclass
class Cell:
    """One table cell: its text, optional links (label, file), and how it is drawn."""

    text: str = ""
    links: list[tuple[str, Path]] = field(default_factory=list)
    num: bool = False
    """Right-aligned, tabular figures."""
    status: Status | None = None
    """Drawn as a coloured badge (the status column) or tinted (the ratio)."""
    badge: bool = False
    wrap: bool = False
    """Text that may wrap (source, device, reasons), at its words; every other cell stays on one line."""
    narrow: bool = False
    """With ``wrap``: as narrow as its longest word (the device), not a column of text."""
    title: str = ""
    """A tooltip: the number in full where the cell rounds it."""


@dataclass
class TableRow:
    """One row: its cells, its data attributes (status, paper, model, dataset) and a note."""

    attrs: dict[str, str]
    cells: list[Cell]
    note: str = ""
    """Why the status (where it diverged, why not run): the last column of the Markdown, a line under
    the row in the HTML (so that the table keeps to the width of the page)."""


@dataclass
class Table:
    """A table: its header, and its rows in groups (a group: the status, and its rows)."""

    key: str
    header: list[tuple[str, bool]]
    """(title, numeric) per column, the note's excluded."""
    note: str
    """The title of the notes."""
    groups: list[tuple[Status, list[TableRow]]]
    note_below: bool = False
    """In the HTML, each note on a line under its row, not in a last column."""


def _published(row: Row) -> str:
    if row.ref is None:
        return fmt.NONE
    return ("< " if row.ref.relation == "<" else "") + fmt.sci(row.ref.value)


def _full(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def _ratio(row: Row) -> str:
    if row.bound is not None:
        return f"{fmt.ratio(row.bound[0])} of bound"
    return fmt.ratio(row.ratio)


def _attrs(row: Row) -> dict[str, str]:
    return {"status": row.status.value, "paper": row.ref.paper if row.ref else "", "model": row.model, "dataset": row.dataset}


def _grouped(rows: Sequence[Row], keep: Callable[[Status], bool]) -> list[tuple[Status, list[Row]]]:
    return [(s, [r for r in rows if r.status is s]) for s in ORDER if keep(s) and any(r.status is s for r in rows)]


def ours_table(rows: Sequence[Row]) -> Table:
    """Rows with a run of ours (or a diverged / unfinished one), grouped by status."""
    header = [("status", False), ("dataset / model", False), ("statistic", False), ("ours", True), ("published", True),
              ("ours / published", True), ("source", False), ("parameters", True), ("training h:mm", True),
              ("device", False), ("record", False)]  # fmt: skip
    groups = []
    for status, members in _grouped(rows, lambda s: not s.not_run):
        body = []
        for r in members:
            res = r.found.results if r.found else None
            body.append(TableRow(_attrs(r), [
                Cell(r.status.label, status=r.status, badge=True), Cell(f"{r.dataset} / {r.model}"), Cell(r.what),
                Cell(fmt.sci(r.ours), num=True, title=_full(r.ours)), Cell(_published(r), num=True, title=_full(r.ref.value if r.ref else None)), Cell(_ratio(r), num=True, status=r.status),
                Cell(r.ref.source if r.ref else fmt.NONE, wrap=True), Cell(fmt.count(res.parameters) if res else fmt.NONE, num=True),
                Cell(fmt.hmm(res.train_time_s) if res else fmt.NONE, num=True, title=f"{res.epochs} epochs" if res else ""),
                Cell((res.train_device_name or res.train_device or fmt.NONE) if res else fmt.NONE, wrap=True, narrow=True), Cell(links=r.links),
            ], r.reason))  # fmt: skip
        groups.append((status, body))
    return Table("ours", header, "notes", groups, note_below=True)


def not_run_table(rows: Sequence[Row]) -> Table:
    """The published numbers without a run of ours, grouped by why."""
    header = [("status", False), ("dataset / model", False), ("statistic", False), ("published", True), ("source", False),
              ("est. training h", True)]  # fmt: skip
    groups = []
    for status, members in _grouped(rows, lambda s: s.not_run):
        body = []
        for r in members:
            cost = fmt.NONE if r.cost is None or r.cost.hours is None else ("~" if r.cost.approx else "") + fmt.hours(r.cost.hours)
            body.append(TableRow(_attrs(r), [
                Cell(r.status.label, status=r.status, badge=True), Cell(f"{r.dataset} / {r.model}"), Cell(r.what),
                Cell(_published(r), num=True, title=_full(r.ref.value if r.ref else None)), Cell(r.ref.source if r.ref else fmt.NONE, wrap=True), Cell(cost, num=True),
            ], r.reason))  # fmt: skip
        groups.append((status, body))
    return Table("not-run", header, "why", groups)


def summaries(rows: Sequence[Row]) -> dict[str, list[SummaryRow]]:
    """The summary per paper and per model (published numbers only), each with its ``all`` row."""
    published = [r for r in rows if r.ref is not None]
    return {
        "paper": summarise(((r.ref.paper, r.status) for r in published), order=list(dict.fromkeys(r.ref.paper for r in published))),
        "model": summarise(((r.model, r.status) for r in published), order=list(dict.fromkeys(r.model for r in published))),
    }


def headline(report: Report) -> str:
    """One sentence of counts: what the page holds."""
    s = summaries(report.rows)["paper"][-1]
    c = s.counts
    ours = c[Status.REPRODUCED] + c[Status.BETTER] + c[Status.WORSE]
    not_run = sum(c[x] for x in ORDER if x.not_run)
    parts = [
        f"Profile {report.profile}: {s.published} published numbers from {len(report.papers)} papers (config/reference.yaml).",
        f"{ours} have a number of ours from a run of the paper protocol: {c[Status.REPRODUCED]} reproduced within {TOLERANCE:.0%}, "
        f"{c[Status.BETTER]} better, {c[Status.WORSE]} worse.",
    ]
    if c[Status.REDUCED]:
        parts.append(f"{c[Status.REDUCED]} have a number from a reduced run (another protocol, not compared).")
    parts.append(
        f"{c[Status.DIVERGED]} diverged, {c[Status.UNFINISHED]} unfinished; {not_run} not run: "
        f"{c[Status.COSTLY]} too costly, {c[Status.NO_DATA]} for want of data, {c[Status.NO_MODEL]} for want of a model, {c[Status.NOT_YET]} not yet."
    )
    extra = sum(1 for r in report.rows if r.status is Status.OURS_ONLY)
    if extra:
        parts.append(f"{extra} more result{'s' if extra > 1 else ''} of ours without a published number.")
    return " ".join(parts)


HOW_TO_READ = (
    "A result counts as a run of the paper protocol only when its run hash equals the one config/default.yaml gives the pair; "
    "only those get a ratio (ours / published). A published bound (\"below 1 %\") is compared as ours / bound. "
    "Errors are relative L2 over the test samples (the statistic: mean, median or max), written with three significant digits; "
    "training time in hours:minutes; the estimated training time of a protocol not run is that of "
    "benchmarks/results/protocol_cost.json (~: extrapolated from a batch-1 step)."
)


# --------------------------------------------------------------------------- Markdown


def _md_escape(text: str) -> str:
    return text.replace("|", "/").replace("*", "\\*") if text else text


def _md_cell(c: Cell, here: Path) -> str:
    if c.links:
        return " ".join(f"[{label}]({_rel(p, here)})" for label, p in c.links)
    text = _md_escape(c.text)
    return f"**{text}**" if c.badge and c.status in (Status.REPRODUCED, Status.BETTER, Status.WORSE, Status.DIVERGED) else text


def _md_table(t: Table, here: Path) -> list[str]:
    out = ["| " + " | ".join(h for h, _ in t.header) + f" | {t.note} |", "|" + "|".join(" ---: " if num else " --- " for _, num in t.header) + "| --- |"]
    for _, body in t.groups:
        for row in body:
            out.append("| " + " | ".join(_md_cell(c, here) for c in [*row.cells, Cell(row.note)]) + " |")
    return out


def _md_summary(rows: list[SummaryRow], first: str) -> list[str]:
    cols = summary_columns(rows)
    out = [f"| {first} | published | " + " | ".join(s.label for s in cols) + " |", "| --- | ---: |" + " ---: |" * len(cols)]
    for r in rows:
        name = f"**{r.name}**" if r.name == "all" else _md_escape(r.name)
        out.append(f"| {name} | {r.published} | " + " | ".join(str(r.counts[s]) if r.counts[s] else "" for s in cols) + " |")
    return out


def render_markdown(report: Report, md_dir: Path) -> str:
    """``report.md``: the same page as the HTML, links relative to ``md_dir``."""
    sums = summaries(report.rows)
    out = ["# Reproduction report", "", headline(report), "", "## Summary", "", "Published numbers by paper:", ""]
    out += _md_summary(sums["paper"], "paper") + ["", "By model:", ""] + _md_summary(sums["model"], "model") + ["", HOW_TO_READ, ""]
    ours, not_run = ours_table(report.rows), not_run_table(report.rows)
    if ours.groups:
        out += ["## Our numbers", ""] + _md_table(ours, md_dir) + [""]
    if not_run.groups:
        out += ["## Not run", ""] + _md_table(not_run, md_dir) + [""]
    if report.unreadable:
        out += ["## Files not read", ""] + [f"- {_md_escape(str(p))}: {_md_escape(why)}" for p, why in report.unreadable] + [""]
    if report.figures:
        out += ["## Figures", ""]
        for caption, p in report.figures:
            out += [f"![{caption}]({_rel(p, md_dir)})", "", caption, ""]
    out += ["## Papers", ""] + [f"- {name}: {_md_escape(cite)}" for name, cite in report.papers.items()] + [""]
    return "\n".join(out)


# --------------------------------------------------------------------------- HTML

#: the badge colours: (text, background); the ratio cell takes the text colour
COLOURS = {
    Status.REPRODUCED: ("#14532d", "#bbf7d0"),
    Status.BETTER: ("#1e3a8a", "#bfdbfe"),
    Status.WORSE: ("#7f1d1d", "#fecaca"),
    Status.REDUCED: ("#374151", "#e5e7eb"),
    Status.MISSING: ("#78350f", "#fde68a"),
    Status.OURS_ONLY: ("#374151", "#e5e7eb"),
    Status.DIVERGED: ("#581c87", "#e9d5ff"),
    Status.UNFINISHED: ("#78350f", "#fde68a"),
    Status.NO_DATA: ("#4b5563", "#f3f4f6"),
    Status.NO_MODEL: ("#4b5563", "#f3f4f6"),
    Status.COSTLY: ("#4b5563", "#f3f4f6"),
    Status.NOT_YET: ("#4b5563", "#f3f4f6"),
}

STYLE = (
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1f2937;margin:0 auto;padding:14px 16px;max-width:1600px}"
    "h1{font-size:1.6em;margin:.2em 0 .4em}h2{font-size:1.25em;margin:1.6em 0 .5em;border-bottom:1px solid #e5e7eb;padding-bottom:.2em}"
    "h3{font-size:1.05em;margin:1.2em 0 .4em}p{max-width:60em}.lead{font-size:1.05em}"
    ".scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;margin:.4em 0 1em}"
    "table{border-collapse:collapse;font-size:12.5px}"
    "table.rows thead th{white-space:normal;vertical-align:bottom}"
    "th,td{padding:3px 5px;border-bottom:1px solid #e5e7eb;text-align:left;white-space:nowrap;vertical-align:top}"
    "thead th{background:#f9fafb;border-bottom:2px solid #d1d5db}"
    "td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}"
    "td.wrap{white-space:normal;min-width:10em;max-width:15em}td.wrap.narrow{min-width:0;max-width:8em}"
    "#not-run td.wrap{max-width:26em}tr.noted td{border-bottom:0}tr.note td{white-space:normal;color:#4b5563;padding:0 7px 4px 2.5em;font-size:12.5px}"
    "tr.note td::before{content:'\\21B3  '}"
    "tr.group th{background:#f3f4f6;font-weight:600;padding-top:8px;white-space:normal}"
    "tr.total td{font-weight:700;border-top:2px solid #d1d5db}"
    "table.summary td:first-child,table.summary th:first-child{position:sticky;left:0;background:#fff}"
    "table.summary thead th:first-child{background:#f9fafb}"
    ".badge{display:inline-block;padding:0 8px;border-radius:10px;font-size:12.5px;font-weight:600;white-space:nowrap}"
    "td.zero{color:#c0c4cc}.cite{font-size:12px;color:#6b7280;white-space:normal;min-width:16em;max-width:26em}"
    ".chips{display:flex;flex-wrap:wrap;gap:6px;margin:.6em 0 1em;padding:0;list-style:none}"
    ".chips li{border-radius:12px;padding:3px 10px;font-size:14px}.chips b{font-size:16px;margin-right:4px}"
    "a{color:#1d4ed8}"
    "ul.legend{list-style:none;padding:0;margin:.3em 0}ul.legend li{margin:.2em 0}"
    "figure{margin:1.2em 0}figure img{display:block;max-width:100%;height:auto;border:1px solid #e5e7eb}"
    "figcaption{font-size:13px;color:#4b5563;margin-top:.3em}"
    # a phone: rows of the two big tables become cards (one line per cell, its column's name before it);
    # the summary keeps its table, sideways-scrolling with the names fixed; figures keep their natural width
    "@media (max-width:760px){body{padding:10px;font-size:14px}"
    "table.rows thead{display:none}table.rows,table.rows tbody{display:block}"
    "table.rows tr{display:block;padding:6px 2px;border-bottom:1px solid #d1d5db}"
    "table.rows tr.group{padding:0}table.rows tr.group th{display:block}"
    "table.rows td{display:flex;gap:.6em;border:0;padding:1px 2px;white-space:normal;text-align:left}"
    "table.rows td.num{text-align:left}table.rows td.empty{display:none}"
    "table.rows td::before{content:attr(data-label);flex:0 0 8.5em;color:#6b7280;font-size:12px;font-weight:400}"
    "table.rows td.wrap{max-width:none}"
    ".cite{display:none}.fig{overflow-x:auto}figure img{max-width:none}}"
)


def _status_css() -> str:
    return ".s-published{color:#111827;background:#e5e7eb}" + "".join(f".s-{s.value}{{color:{fg};background:{bg}}}td.r-{s.value}{{color:{fg};font-weight:600}}" for s, (fg, bg) in COLOURS.items())


def _rel(p: Path, here: Path) -> str:
    """``p`` relative to the folder ``here``, with forward slashes."""
    return os.path.relpath(os.path.abspath(p), os.path.abspath(here)).replace(os.sep, "/")


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _html_cell(c: Cell, here: Path, label: str) -> str:
    empty = not c.links and c.text in ("", fmt.NONE)
    classes = [k for k, on in (("num", c.num), ("wrap", c.wrap), ("narrow", c.narrow), ("empty", empty)) if on]
    if c.status is not None and not c.badge and c.text != fmt.NONE:
        classes.append(f"r-{c.status.value}")
    cls = f' class="{" ".join(classes)}"' if classes else ""
    if c.title:
        cls += f' title="{_e(c.title)}"'
    cls += f' data-label="{_e(label)}"'
    if c.links:
        inner = " ".join(f'<a href="{_e(_rel(p, here))}" title="{_e(p.name)}">{_e(name)}</a>' for name, p in c.links)
    elif c.badge and c.status is not None:
        inner = f'<span class="badge s-{c.status.value}" title="{_e(c.status.title)}">{_e(c.text)}</span>'
    else:
        inner = _e(c.text)
    return f"<td{cls}>{inner}</td>"


def _html_table(t: Table, here: Path) -> str:
    header = t.header if t.note_below else [*t.header, (t.note, False)]
    head = "".join(f'<th{" class=num" if num else ""}>{_e(h)}</th>' for h, num in header)
    body = []
    for status, members in t.groups:
        body.append(f'<tr class="group" id="{t.key}-{status.value}"><th colspan="{len(header)}">{_e(status.title)} ({len(members)})</th></tr>')
        for row in members:
            data = "".join(f' data-{k}="{_e(v)}"' for k, v in row.attrs.items())
            below = t.note_below and row.note
            cells = row.cells if t.note_below else [*row.cells, Cell(row.note, wrap=True)]
            noted = ' class="noted"' if below else ""
            body.append(f"<tr{data}{noted}>" + "".join(_html_cell(c, here, h) for c, (h, _) in zip(cells, header)) + "</tr>")
            if below:
                body.append(f'<tr class="note"><td colspan="{len(t.header)}" data-label="{_e(t.note)}">{_e(row.note)}</td></tr>')
    return f'<div class="scroll"><table class="rows" id="{t.key}"><thead><tr>{head}</tr></thead><tbody>\n' + "\n".join(body) + "\n</tbody></table></div>"


def _html_summary(rows: list[SummaryRow], key: str, first: str, citations: dict[str, str]) -> str:
    cols = summary_columns(rows)
    head = f"<th>{_e(first)}</th><th class=num>published</th>" + "".join(
        f'<th class=num><span class="badge s-{s.value}" title="{_e(s.title)}">{_e(s.label)}</span></th>' for s in cols
    )
    body = []
    for r in rows:
        name = _e(r.name) + (f'<div class="cite">{_e(citations[r.name])}</div>' if r.name in citations else "")
        cells = "".join(
            f'<td class="num{"" if r.counts[s] else " zero"}" data-status="{s.value}">{r.counts[s]}</td>' for s in cols
        )
        cls = ' class="total"' if r.name == "all" else ""
        body.append(f'<tr{cls} data-name="{_e(r.name)}"><td>{name}</td><td class="num" data-status="published">{r.published}</td>{cells}</tr>')
    return f'<div class="scroll"><table class="summary" id="by-{key}"><thead><tr>{head}</tr></thead><tbody>' + "".join(body) + "</tbody></table></div>"


def _chips(total: SummaryRow) -> str:
    """The counts of all published numbers by status, as one line of coloured chips."""
    items = [f'<li class="s-published"><b>{total.published}</b>published numbers</li>']
    items += [f'<li class="s-{s.value}" title="{_e(s.title)}"><b>{total.counts[s]}</b>{_e(s.label)}</li>' for s in summary_columns([total])]
    return f'<ul class="chips" id="chips">{"".join(items)}</ul>'


def render_html(report: Report, site: Path) -> str:
    """``index.html`` in the folder ``site``: the page, figures inlined, links relative to ``site``."""
    sums = summaries(report.rows)
    ours, not_run = ours_table(report.rows), not_run_table(report.rows)
    legend = "".join(
        f'<li><span class="badge s-{s.value}">{_e(s.label)}</span> {_e(s.title.split(": ", 1)[-1])}</li>'
        for s in ORDER if any(r.status is s for r in report.rows)
    )  # fmt: skip
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>opflow reproduction report ({_e(report.profile)})</title><style>{STYLE}{_status_css()}</style></head><body>",
        "<h1>Reproduction report</h1>",
        f'<p class="lead" id="headline">{_e(headline(report))}</p>',
        "<h2 id=\"summary\">Summary</h2>",
        _chips(sums["paper"][-1]),
        "<h3>Published numbers by paper</h3>",
        _html_summary(sums["paper"], "paper", "paper", report.papers),
        "<h3>By model</h3>",
        _html_summary(sums["model"], "model", "model", {}),
        f'<h3>Status</h3><ul class="legend">{legend}</ul>',
        f"<h3>How to read it</h3><p>{_e(HOW_TO_READ)}</p>",
    ]
    if ours.groups:
        parts += ['<h2 id="ours">Our numbers</h2>', _html_table(ours, site)]
    if report.unreadable:
        items = "".join(f"<li>{_e(str(p))}: {_e(why)}</li>" for p, why in report.unreadable)
        parts.append(f"<h2>Files not read</h2><ul>{items}</ul>")
    if report.figures:
        parts.append('<h2 id="figures">Figures</h2>')
        for caption, p in report.figures:
            data = base64.b64encode(p.read_bytes()).decode()
            parts.append(
                f'<figure class="fig"><a href="{_e(_rel(p, site))}"><img alt="{_e(caption)}" src="data:image/png;base64,{data}"></a>'
                f"<figcaption>{_e(caption)}</figcaption></figure>"
            )
    if not_run.groups:
        parts += ['<h2 id="not-run">Not run</h2>', _html_table(not_run, site)]
    cites = "".join(f"<li><b>{_e(n)}</b>: {_e(c)}</li>" for n, c in report.papers.items())
    parts += [f'<h2 id="papers">Papers</h2><ul>{cites}</ul>', "</body></html>\n"]
    return "\n".join(parts)
