"""The reproduction report: our results beside the published numbers of ``config/reference.yaml``.

    snakemake --cores 8 report                                      # <root>/results/report.md + <root>/report/
    snakemake --cores 2 --configfile config/quick.yaml -- quick/report
    opflow report quick/results/*.json --profile quick --md report.md --site report/

Inputs: every results JSON (:class:`opflow.records.Results`, format version 2) of a profile, the
published numbers (``config/reference.yaml``, :func:`load_reference`), the paper profile
(``config/default.yaml``) and the committed records that say what became of the published numbers
without a result (:mod:`opflow.report_status`): the estimated cost of each protocol
(``benchmarks/results/protocol_cost*.json``), the runs that diverged (``published/diverged.yaml``)
and the partial record folders (``published/<dataset>_<model>/`` without ``result.json``). Outputs
(:mod:`opflow.report_page`): a Markdown page (``report.md``) and a folder with a static HTML page
(``index.html``, every PNG inlined) beside the PNGs; both link each row to its record files
relative to themselves.

There is one row per published number (``reference.yaml`` entry) and one per result that has none:
dataset, model, the statistic and where it is read in the results JSON, our number, the published
one, the ratio ours / published, the source (paper and table), parameter count, training time and
device, the links to its record, and its status (reproduced, better, worse, diverged, not run and
why). The page opens with the counts of the statuses per paper and per model.

**Reproduction or not.** A result counts as a run of the paper protocol only when its run hash
(:func:`opflow.config.run_hash`: model, training numerics, task, dataset definition and splits)
equals the hash that the paper profile (``config/default.yaml``) gives the same dataset/model
pair. Every other result (the quick profile, a changed epoch count, a dataset/model pair the paper
profile lacks) is labelled ``reduced`` and gets no ratio: its number is shown for what it is, never
as a reproduction.

Figures: error against resolution for results with zero-shot evaluations (with the published
zero-shot numbers, where there are any, on the same axes), the training curves
(``<root>/models/<dataset>_<model>/curves.png``), the prediction panels of ``opflow evaluate``
(``results/<dataset>_<model>.png``) and the solver convergence plots of the benchmarks
(``benchmarks/results/*.png``).

Torch-free (numpy, yaml and matplotlib only), so the report rule runs anywhere.
"""

from __future__ import annotations

import argparse
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from opflow.atomic import atomic_write_text
from opflow.data.errors import ConfigError
from opflow.records import RecordError, Results
from opflow.reference import DEFAULT_REFERENCE, METRICS, RefEntry, load_reference
from opflow.report_status import ORDER, Cost, Facts, Status, classify, find_unfinished, load_costs, load_diverged, paper_names

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PAPER_CONFIG = REPO / "config" / "default.yaml"
DEFAULT_COSTS = REPO / "benchmarks" / "results" / "protocol_cost*.json"
DEFAULT_PUBLISHED = REPO / "published"
DEFAULT_DIVERGED = DEFAULT_PUBLISHED / "diverged.yaml"
DEFAULT_QUEUE = REPO / "config" / "queue.yaml"


# --------------------------------------------------------------------------- our results


@dataclass
class Found:
    """A results file that was read."""

    path: Path
    results: Results
    protocol: bool
    """True when its run hash equals the paper profile's hash of the same pair (a reproduction)."""
    paper_hash: str | None
    """The paper profile's run hash of this pair, or None when that profile does not have the pair."""


def read_results(paths: Iterable[str | Path]) -> tuple[list[tuple[Path, Results]], list[tuple[Path, str]]]:
    """Read every file: (path, Results) for the readable ones, (path, reason) for the others."""
    good, bad = [], []
    for p in sorted({Path(p) for p in paths}):
        try:
            good.append((p, Results.load(p)))
        except RecordError as e:
            bad.append((p, str(e)))
    return good, bad


def paper_hashes(paper_config: str | Path, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """The run hash the paper profile gives each (dataset, model) pair; None for pairs it does not have."""
    from opflow.config import resolve_run

    config = yaml.safe_load(Path(paper_config).read_text())
    out: dict[tuple[str, str], str | None] = {}
    for ds, model in pairs:
        try:
            out[(ds, model)] = resolve_run(config, ds, model)["hash"]
        except (ConfigError, KeyError, ValueError):
            out[(ds, model)] = None
    return out


def statistic_of(results: Results, statistic: str, where: tuple[str, str] | None, metric: str = "rel_l2") -> float | None:
    """The number ``statistic`` of ``metric`` at ``where`` in a results file, or None when it has none."""
    block: Any = results.metrics
    if where is not None:
        kind, name = where
        if kind == "zero_shot":
            block = results.zero_shot.get(name)
        elif kind == "eval_set":
            block = results.eval_sets.get(name)
        elif kind == "frames":
            block = (results.metrics.get("frame_groups") or {}).get(name)
        elif kind == "channel":
            block = (results.metrics.get("per_channel") or {}).get(name)
    if not isinstance(block, Mapping):
        return None
    value = block.get(f"{METRICS[metric]}_{statistic}")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------- the rows


#: the files of a record folder (published/<dataset>_<model>/, opflow publish) that a row links, with their labels
RECORD_FILES = (("record", "record.json"), ("curves", "curves.png"), ("json", "curves.json"), ("prediction", "prediction.png"), ("log", "train.log"), ("README", "README.md"))


@dataclass
class Row:
    dataset: str
    model: str
    what: str
    ours: float | None
    ref: RefEntry | None
    found: Found | None
    status: Status = Status.NOT_YET
    reason: str = ""
    """A few words on the status (why not run, where it diverged)."""
    links: list[tuple[str, Path]] = field(default_factory=list)
    """(label, file) of its record: result, curves, prediction figure, training log."""
    cost: Cost | None = None
    """The protocol's estimated training time (benchmarks/results/protocol_cost*.json)."""

    @property
    def ratio(self) -> float | None:
        """ours / published, only for a run of the paper protocol against an exact (not a bound) number."""
        if self.ref is None or self.found is None or not self.found.protocol or self.ref.relation != "=":
            return None
        return self.ref.compare(self.ours)[0]

    @property
    def bound(self) -> tuple[float, bool] | None:
        """``(ours / bound, below it)`` for a run of the paper protocol against a bound (``<``)."""
        if self.ref is None or self.found is None or not self.found.protocol or self.ref.relation != "<":
            return None
        ratio, meets = self.ref.compare(self.ours)
        return None if ratio is None else (ratio, bool(meets))

    @property
    def record(self) -> str | None:
        """The name of its committed record folder (published/<name>/), if it comes from one."""
        if self.found is not None and (self.found.path.parent / "record.json").is_file():
            return self.found.path.parent.name
        return None


@dataclass
class Report:
    rows: list[Row]
    unreadable: list[tuple[Path, str]]
    profile: str
    figures: list[tuple[str, Path]] = field(default_factory=list)
    """(caption, PNG in the site folder)."""
    papers: dict[str, str] = field(default_factory=dict)
    """Short name -> citation of every paper with a row, in the order of the reference."""


def links_of(found: Found, workdir: Path) -> list[tuple[str, Path]]:
    """The files a row of this result links: its record folder's, or the result, curves, prediction and log of the run."""
    folder = found.path.parent
    if (folder / "record.json").is_file():
        return [(label, folder / name) for label, name in RECORD_FILES if (folder / name).is_file()]
    res = found.results
    model_dir = workdir / Path(res.model_file).parent
    candidates = [("results", found.path), ("curves", model_dir / "curves.png"), ("json", model_dir / "curves.json")]
    candidates += [("prediction", workdir / res.plot)] if res.plot else []
    candidates += [("log", model_dir / "train.log")]
    return [(label, p) for label, p in candidates if p.is_file()]


def load_facts(
    paper_config: str | Path | None,
    *,
    costs: Iterable[str | Path] = (),
    diverged: str | Path | None = None,
    published: str | Path | None = None,
    pairs: Iterable[tuple[str, str]] = (),
    root: str | Path = ".",
    queue: str | Path | None = None,
    reference: Sequence[RefEntry] = (),
) -> Facts:
    """What the committed records say beyond the results (:mod:`opflow.report_status`): the paper
    profile's names, the cost estimates, the diverged runs and the partial records of ``pairs``, and
    where each queued pair stands (``queue``, config/queue.yaml, derived with ``published`` and the
    published numbers ``reference``: :func:`opflow.queue.standing`)."""
    from opflow.queue import derive, load_queue, protocol_epochs, standing

    datasets, models = paper_names(paper_config) if paper_config else (frozenset(), frozenset())
    facts = Facts(datasets, models, load_costs(costs), load_diverged(diverged, root), find_unfinished(published, pairs))
    if queue is not None and paper_config is not None and published is not None:
        entries = load_queue(queue)
        facts.queued = standing(derive(entries, reference, published, protocol_epochs([paper_config], entries)))
    return facts


def build_report(
    result_files: Iterable[str | Path],
    reference: Sequence[RefEntry],
    *,
    profile: str,
    paper_config: str | Path = DEFAULT_PAPER_CONFIG,
    facts: Facts | None = None,
    workdir: str | Path = ".",
) -> Report:
    """Rows for every published number and every result, each with its status (see the module doc)."""
    workdir = Path(workdir)
    facts = facts or Facts()
    good, bad = read_results(result_files)
    hashes = paper_hashes(paper_config, {(r.dataset, r.model) for _, r in good})
    by_pair: dict[tuple[str, str], Found] = {}
    for path, res in good:
        paper = hashes[(res.dataset, res.model)]
        found = Found(path, res, protocol=paper is not None and paper == res.run_hash, paper_hash=paper)
        old = by_pair.get((res.dataset, res.model))
        # a paper-protocol run beats a reduced one; between equals the committed record (published/) wins
        if old is None or (found.protocol, "published" in path.parts) > (old.protocol, "published" in old.path.parts):
            by_pair[(res.dataset, res.model)] = found

    rows: list[Row] = []
    referenced = set()
    order = list(dict.fromkeys([e.dataset for e in reference] + sorted({d for d, _ in by_pair})))
    for ds in order:
        for e in (e for e in reference if e.dataset == ds):
            found = by_pair.get((e.dataset, e.model))
            ours = statistic_of(found.results, e.statistic, e.where, e.metric) if found else None
            rows.append(Row(ds, e.model, e.what, ours, e, found))
            referenced.add((e.dataset, e.model))
        for (d, m), found in sorted(by_pair.items()):
            if d == ds and (d, m) not in referenced:
                rows.append(Row(d, m, "mean", statistic_of(found.results, "mean", None), None, found))
    for r in rows:
        pair = (r.dataset, r.model)
        r.cost = facts.costs.get(pair)
        r.status, r.reason = classify(
            pair, has_result=r.found is not None, protocol=bool(r.found and r.found.protocol), ours=r.ours,
            published=r.ref is not None, ratio=r.ratio, bound=r.bound, facts=facts,
        )  # fmt: skip
        if r.found is not None:
            r.links = links_of(r.found, workdir)
        elif pair in facts.diverged:
            v = facts.diverged[pair]
            r.links = [(label, p) for label, p in (("curves json", v.curves), ("figure", v.figure), ("diagnostic", v.diagnostic)) if p is not None]
        elif pair in facts.unfinished:
            folder = facts.unfinished[pair].folder
            r.links = [(label, folder / name) for label, name in RECORD_FILES if (folder / name).is_file()]
    papers = {e.paper: e.citation for e in reference if any(r.ref is e for r in rows)}
    return Report(rows, bad, profile, papers=papers)


# --------------------------------------------------------------------------- figures


def zero_shot_figure(found: Found, reference: Sequence[RefEntry], path: Path) -> Path | None:
    """Mean rel L2 against resolution (training resolution + the zero-shot ones), published curve beside it."""
    res = found.results
    if not res.zero_shot:
        return None
    from matplotlib.ticker import NullLocator

    from opflow.plots import figure, save_figure

    pts = []
    if res.resolution.isdigit():
        pts.append((int(res.resolution), res.metrics.get("rel_l2_mean")))
    pts += [(int(k), v.get("rel_l2_mean")) for k, v in res.zero_shot.items() if k.isdigit() and isinstance(v, Mapping)]
    pts = sorted((x, y) for x, y in pts if isinstance(y, int | float))
    pub = sorted((int(e.where[1]), e.value) for e in reference if e.dataset == res.dataset and e.model == res.model and e.where and e.where[0] == "zero_shot" and e.statistic == "mean")
    fig = figure(figsize=(5, 3.5))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(*zip(*pts), "o-", label="ours" + ("" if found.protocol else " (reduced run)"))
    if pub:
        ax.plot(*zip(*pub), "s--", label=f"published ({next(e.paper for e in reference if e.dataset == res.dataset)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted({x for x, _ in pts} | {x for x, _ in pub})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("test resolution (points per side)")
    ax.set_ylabel("mean relative L2")
    ax.set_title(f"{res.dataset} / {res.model}: trained at {res.resolution}, zero-shot above")
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)


def gather_figures(report: Report, reference: Sequence[RefEntry], site: Path, *, workdir: Path, bench_pngs: Iterable[Path] = ()) -> list[tuple[str, Path]]:
    """Write or copy every figure into ``site``; (caption, path) in the order the page shows them."""
    site.mkdir(parents=True, exist_ok=True)
    figs: list[tuple[str, Path]] = []
    founds = {(r.found.results.dataset, r.found.results.model): r.found for r in report.rows if r.found}
    for (ds, m), f in sorted(founds.items()):
        p = zero_shot_figure(f, reference, site / f"zero_shot_{ds}_{m}.png")
        if p is not None:
            figs.append((f"Error against resolution, {ds} / {m} (trained at {f.results.resolution})", p))
    for (ds, m), f in sorted(founds.items()):
        curves = workdir / Path(f.results.model_file).parent / "curves.png"
        if curves.is_file():
            figs.append((f"Training curves, {ds} / {m}", _copy(curves, site / f"curves_{ds}_{m}.png")))
    for (ds, m), f in sorted(founds.items()):
        if f.results.plot and (workdir / f.results.plot).is_file():
            figs.append((f"Test predictions (median and worst samples), {ds} / {m}", _copy(workdir / f.results.plot, site / f"predictions_{ds}_{m}.png")))
    for png in sorted(Path(p) for p in bench_pngs):
        if png.is_file():
            figs.append((f"Solver benchmark: {png.stem} (benchmarks/results/{png.name})", _copy(png, site / f"bench_{png.name}")))
    return figs


def _copy(src: Path, dst: Path) -> Path:
    if src.resolve() != dst.resolve():
        shutil.copyfile(src, dst)
    return dst


# --------------------------------------------------------------------------- writing


def write_report(
    result_files: Iterable[str | Path],
    *,
    md: str | Path,
    site: str | Path,
    profile: str,
    reference: str | Path = DEFAULT_REFERENCE,
    paper_config: str | Path = DEFAULT_PAPER_CONFIG,
    workdir: str | Path = ".",
    bench_pngs: Iterable[str | Path] = (),
    costs: Iterable[str | Path] | None = None,
    diverged: str | Path | None = DEFAULT_DIVERGED,
    published: str | Path | None = DEFAULT_PUBLISHED,
    queue: str | Path | None = DEFAULT_QUEUE,
) -> Report:
    """Build the report and write ``md`` and ``site``/index.html (+ the PNGs) atomically.

    ``costs`` (default: ``benchmarks/results/protocol_cost*.json``), ``diverged`` (``published/diverged.yaml``,
    its paths relative to the repository) and ``published`` (the record folders, for partial records)
    give the status of the published numbers without a result (:mod:`opflow.report_status`); ``queue``
    (config/queue.yaml) where those rows stand in the GPU lease queue or the CPU's list."""
    from opflow.report_page import render_html, render_markdown

    ref = load_reference(reference)
    costs = sorted(DEFAULT_COSTS.parent.glob(DEFAULT_COSTS.name)) if costs is None else costs
    facts = load_facts(
        paper_config, costs=costs, diverged=diverged, published=published, pairs={(e.dataset, e.model) for e in ref}, root=REPO, queue=queue, reference=ref,
    )  # fmt: skip
    report = build_report(result_files, ref, profile=profile, paper_config=paper_config, facts=facts, workdir=workdir)
    site, md = Path(site), Path(md)
    report.figures = gather_figures(report, ref, site, workdir=Path(workdir), bench_pngs=[Path(p) for p in bench_pngs])
    md.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(md, render_markdown(report, md.parent) + "\n")
    atomic_write_text(site / "index.html", render_html(report, site))
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``opflow report``."""
    p.add_argument("results", nargs="*", help="results JSON files (opflow evaluate); any that do not exist are ignored by the shell glob")
    p.add_argument("--profile", required=True, help="name of the profile the results came from (e.g. default, quick)")
    p.add_argument("--md", required=True, help="Markdown report to write")
    p.add_argument("--site", required=True, help="folder for index.html and the figures")
    p.add_argument("--reference", default=str(DEFAULT_REFERENCE), help="published numbers (default: config/reference.yaml)")
    p.add_argument("--paper-config", default=str(DEFAULT_PAPER_CONFIG), help="the paper profile (default: config/default.yaml)")
    p.add_argument("--workdir", default=".", help="folder the paths inside the results files are relative to")
    p.add_argument("--bench-png", nargs="*", default=[], help="benchmark figures to include (benchmarks/results/*.png)")
    p.add_argument("--cost", nargs="*", default=None, help="estimated cost per protocol (default: benchmarks/results/protocol_cost*.json)")
    p.add_argument("--diverged", default=str(DEFAULT_DIVERGED), help="runs of the paper profile that diverged (default: published/diverged.yaml)")
    p.add_argument("--published", default=str(DEFAULT_PUBLISHED), help="the record folders, for partial records (default: published/)")
    p.add_argument("--queue", default=str(DEFAULT_QUEUE), help="the GPU lease queue and the CPU's list, where unrun rows stand (default: config/queue.yaml)")


def run(a: argparse.Namespace) -> int:
    """``opflow report``: write the report; print a one-line summary."""
    rep = write_report(
        a.results, md=a.md, site=a.site, profile=a.profile, reference=a.reference, paper_config=a.paper_config, workdir=a.workdir,
        bench_pngs=a.bench_png, costs=a.cost, diverged=a.diverged, published=a.published, queue=a.queue,
    )  # fmt: skip
    counts = Counter(r.status for r in rep.rows)
    summary = ", ".join(f"{n} {s.label}" for s, n in sorted(counts.items(), key=lambda kv: ORDER.index(kv[0])))
    print(f"{a.md}: {len(rep.rows)} rows ({summary}), {len(rep.figures)} figures, {len(rep.unreadable)} files not read; {Path(a.site) / 'index.html'}")
    return 0
