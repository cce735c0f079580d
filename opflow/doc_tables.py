"""The tables of README.md and docs/*.md that are derived from committed records, written by one command.

    opflow docs            # rewrite every generated block of README.md and docs/*.md
    opflow docs --check    # change nothing; exit 1 naming each block that differs from what it would write

A generated block is the text between two marker lines of a page::

    <!-- generated: NAME -->
    ...what BLOCKS[NAME] writes...
    <!-- /generated -->

Everything else on the page is prose and stays as written. Each table has one generator, and each
generator reuses the code that owns the numbers rather than a copy of it:

==========================  ===============================================================================
block                       from
==========================  ===============================================================================
``reproductions-summary``   ``published/*/result.json`` through :func:`opflow.report.build_report` (the
                            report's rows and ratios): the rows that are runs of the paper protocol and
                            have a published number, one line each (the README's results table)
``reproductions``           the report page's table of our numbers (:func:`opflow.report_page.ours_table`)
``reproduction-records``    ``published/*/record.json``: statistics, training time and device, the note
``protocol-cost``           ``benchmarks/results/protocol_cost.json`` through
                            ``benchmarks.protocol_cost.readme_table`` (rows derived by its current rules)
``model-cost-cpu``          ``benchmarks/results/models_cpu.json`` through ``benchmarks.models.markdown_table``
``model-cost-gpu``          ``benchmarks/results/models_cuda.json``, the same
``train-step-gpu``          ``benchmarks/results/train_speed_steps_*.json`` through
                            ``benchmarks.train_speed.steps_table`` (a step's wall and GPU kernel time)
``run-progress``            in ``published/<pair>/README.md`` of a run still training: where it stands, from the
                            ``curves.json`` and ``train.log`` beside the page (``scripts/cpu_training.sh
                            snapshot`` copies them from ``models/<pair>/``)
``runs-in-progress``        every such page, one row each (the README's and docs/reproductions.md's list of
                            the runs not finished)
==========================  ===============================================================================

``tests/opflow/test_doc_tables.py`` checks that the committed pages equal what this writes, so a
new record or measurement shows in the pages once ``opflow docs`` has run, and a hand edit of a
generated block fails the tests. Torch-free; the benchmark modules are imported from the
repository (they are not part of the installed package), so this runs in a checkout.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from opflow.atomic import atomic_write_text

REPO = Path(__file__).resolve().parents[1]
#: the pages that may hold generated blocks, relative to the repository
PAGES = ("README.md", "docs/*.md", "published/*/README.md")

_BLOCK = re.compile(r"(?P<open><!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(?P<close><!-- /generated -->)", re.S)


class DocsError(ValueError):
    """A page's markers are wrong (unknown name, an opening marker without its closing one)."""


# --------------------------------------------------------------------------- the generators


def _report(repo: Path):
    """The report of the committed records, with what they say of diverged and unfinished runs and costs."""
    from opflow.reference import load_reference
    from opflow.report import build_report, load_facts

    files = sorted(repo.glob("published/*/result.json"))
    ref = load_reference(repo / "config" / "reference.yaml")
    paper = repo / "config" / "default.yaml"
    facts = load_facts(paper, costs=sorted((repo / "benchmarks" / "results").glob("protocol_cost*.json")),
                       diverged=repo / "published" / "diverged.yaml", published=repo / "published",
                       pairs={(e.dataset, e.model) for e in ref}, root=repo)
    return build_report(files, ref, profile="default", paper_config=paper, facts=facts, workdir=repo)


def _record(found) -> dict:
    return json.loads((found.path.parent / "record.json").read_text())


def _device(rec: dict) -> str:
    if rec.get("train_device") == "cpu":
        return f"CPU, {rec['machine']['logical_cores']} cores"
    return str(rec.get("train_device_name") or rec.get("train_device"))


def reproductions_summary(repo: Path = REPO) -> str:
    """The README's results table: every reproduced row (a paper-protocol run with a published number),
    numbers in the report's one format (:mod:`opflow.report_format`)."""
    from opflow import report_format as fmt
    from opflow.reference import RefEntry

    lines = ["| record | published number | ours | published | ours / published | trained on (h:mm) |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in _report(repo).rows:
        if r.ratio is None and r.bound is None:
            continue
        rec = _record(r.found)
        ratio = f"**{fmt.ratio(r.ratio)}**" if r.ratio is not None else RefEntry.bound_text(*r.bound)
        published = f"< {fmt.sci(r.ref.value)}" if r.ref.relation == "<" else fmt.sci(r.ref.value)
        where = f"{r.ref.paper} {r.ref.table}" + ("" if r.ref.statistic == "mean" and r.ref.where is None else f" ({r.what})")
        device = f"{_device(rec)}, {fmt.hmm(rec['train_time_s'])}"
        lines.append(f"| `{r.found.path.parent.name}` | {where} | {fmt.sci(r.ours)} | {published} | {ratio} | {device} |")
    return "\n".join(lines)


def reproductions(repo: Path = REPO) -> str:
    """Every row of the report that comes from a committed record (or a diverged or unfinished run), as the
    report page's table of our numbers (:func:`opflow.report_page.ours_table`), linked from docs/."""
    from opflow.report_page import _md_table, ours_table

    return "\n".join(_md_table(ours_table(_report(repo).rows), repo / "docs"))


def reproduction_records(repo: Path = REPO) -> str:
    """One entry per record: the three statistics, training time, median epoch, device and the note."""
    from opflow import report_format as fmt

    out = []
    for path in sorted(repo.glob("published/*/record.json")):
        rec = json.loads(path.read_text())
        res = json.loads((path.parent / "result.json").read_text())
        m = res.get("metrics", {})
        stats = " / ".join(fmt.sci(m.get(f"rel_l2_{s}")) for s in ("mean", "median", "max"))
        epoch = rec.get("epoch_time_s_median")
        head = (
            f"- **`{path.parent.name}`** (`{rec['rerun']}`): rel L2 mean / median / max {stats}; {rec['parameters']:,} parameters, "
            f"{rec['epochs']} epochs, {fmt.hmm(rec['train_time_s'])} (h:mm) of training on {_device(rec)}"
            + (f" ({epoch:.3g} s per epoch, median)" if epoch else "")
            + f"; commit {str(rec.get('git_commit') or '?')[:7]}, {str(rec.get('published_at', '?'))[:10]}."
        )
        out.append("\n  ".join(textwrap.wrap(head + (" " + rec["note"] if rec.get("note") else ""), 118)))
    return "\n".join(out)


def train_step_gpu(repo: Path = REPO) -> str:
    """The training step's wall time against the GPU's kernel time, every ``train_speed_steps_*.json`` measured on a GPU
    (a CPU's, which has no kernel time, is a record of its own: docs/costs.md)."""
    import importlib

    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    mod = importlib.import_module("benchmarks.train_speed")
    files = sorted((repo / "benchmarks" / "results").glob("train_speed_steps_*.json"))
    return mod.steps_table([r for r in (json.loads(p.read_text()) for p in files) if str(r.get("device", "")).startswith("cuda")])


def _bench(repo: Path, module: str, fn: str, result: str) -> str:
    import importlib

    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    mod = importlib.import_module(f"benchmarks.{module}")
    stored = json.loads((repo / "benchmarks" / "results" / result).read_text())
    if module == "protocol_cost":
        stored = mod.rederive(stored)
    return getattr(mod, fn)(stored)


#: the block of a run's page that says where it stands (``opflow publish`` removes such a page once it is finished)
PROGRESS_BLOCK = "run-progress"
_EPOCH_LINE = re.compile(r"^(?P<when>\S+) INFO \S+ epoch (?P<epoch>\d+)/(?P<total>\d+)\s", re.M)


_START_LINE = re.compile(r" rel_l2 on (?P<device>[a-z]+) x (?P<n>\d+)")


def _progress(repo: Path, page: Path) -> dict:
    """The facts of a training that has not finished, read from ``curves.json`` (the trainer's per-epoch rows) and
    ``train.log`` (its total of epochs, the time of the last epoch, the device of its last start) in the folder of
    ``page``, a ``published/<pair>/README.md``. The epoch time is the median wall time of the last
    :data:`~opflow.progress.PACE_WINDOW` epochs but the first (which holds the warm-up), as the epochs ran: those that
    shared the cores or were paused for a timing count with their pauses."""
    import statistics

    from opflow.progress import PACE_WINDOW, epoch_times

    folder = page.parent
    try:
        curves = json.loads((folder / "curves.json").read_text())
        log = (folder / "train.log").read_text()
    except (OSError, ValueError) as e:
        raise DocsError(f"{page.relative_to(repo)}: the block 'run-progress' reads curves.json and train.log beside the page ({e})") from None
    lines = list(_EPOCH_LINE.finditer(log))
    if not curves or not lines:
        raise DocsError(f"{page.relative_to(repo)}: no finished epoch in curves.json and train.log beside it; nothing to show yet")
    every = epoch_times(curves) or [float(curves[0]["epoch_time_s"])]
    times = every[-PACE_WINDOW:]  # the pace now (as the trainer's epoch line): settings and machines change over a long run
    tested = [c for c in curves if c.get("test_rel_l2") is not None]
    starts = list(_START_LINE.finditer(log))
    done, total = int(curves[-1]["epoch"]), int(lines[-1]["total"])
    return {"pair": folder.name, "done": done, "total": total, "when": lines[-1]["when"], "lr": curves[-1]["lr"],
            "last_test": tested[-1] if tested else None, "best_test": min(tested, key=lambda c: c["test_rel_l2"]) if tested else None,
            "median_s": statistics.median(times), "fastest_s": min(times), "paced": len(times), "window": PACE_WINDOW,
            "device": starts[-1]["device"] if starts else None}


def run_progress(repo: Path, page: Path) -> str:
    """Where a training that has not finished stands (:func:`_progress`): epochs done, test error, epoch time and the
    time left, as the table of its own page."""
    f = _progress(repo, page)
    done, total = f["done"], f["total"]
    rows = [("epochs done", f"{done} of {total}, the last one finished {f['when']} (`train.log`, `curves.csv`, `curves.json`, `curves.png`)")]
    if f["last_test"]:
        last, best = f["last_test"], f["best_test"]
        rows.append(("test rel L2", f"{last['test_rel_l2']:.4g} after epoch {last['epoch']} (learning rate {f['lr']:.3g}); the lowest so far "
                                    f"{best['test_rel_l2']:.4g} (epoch {best['epoch']})"))
    first = max(2, done - f["paced"] + 1)
    span = f"epochs {first}-{done}" if done > first else ("epoch 2" if done == 2 else "epoch 1, with the warm-up")
    rows.append(("epoch time", f"median {f['median_s']:.0f} s over {span} (the last {f['window']} at most), the fastest {f['fastest_s']:.1f} s (wall "
                               "time, as the epochs ran: one that shared the machine with other work or was paused counts with that)"))
    left = total - done
    rows.append(("left", f"{left} epochs: about {left * f['median_s'] / 3600:.1f} h at that median, {left * f['fastest_s'] / 3600:.1f} h at the fastest epoch's pace"))
    return "\n".join(["| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows)])


def runs_in_progress(repo: Path = REPO) -> str:
    """Every paper run that has not finished, one row each: the ``published/<pair>/README.md`` pages that hold a
    :data:`PROGRESS_BLOCK`, with the facts of that block (:func:`_progress`), so that the pages that name the runs
    (README.md, docs/reproductions.md) never say more, or older, than the runs' own files."""
    rows = []
    for page in sorted(repo.glob("published/*/README.md")):
        if f"<!-- generated: {PROGRESS_BLOCK} -->" not in page.read_text():
            continue
        f = _progress(repo, page)
        test = "-"
        if f["last_test"]:
            last, best = f["last_test"], f["best_test"]
            test = f"{last['test_rel_l2']:.3g} (epoch {last['epoch']})" + ("" if best is last else f"; lowest {best['test_rel_l2']:.3g} (epoch {best['epoch']})")
        left = (f["total"] - f["done"]) * f["median_s"] / 3600
        on = {"cpu": "CPU", "cuda": "GPU (CUDA)", "mps": "GPU (MPS)"}.get(f["device"], f["device"] or "-")
        rows.append(f"| `{f['pair']}` | {on} | {f['done']} of {f['total']} | {f['when'][:10]} | {test} | "
                    f"{left:.1f} h at {f['median_s']:.0f} s per epoch | `published/{f['pair']}/` |")
    if not rows:
        return "No paper run is in progress."
    return "\n".join(["| run | trains on | epochs done | last epoch | test rel L2 (last test pass) | left, at the median of the last epochs | where it stands |",
                      "| --- | --- | ---: | --- | --- | ---: | --- |", *rows])


def progress_page(pair: str, trained_by: str) -> str:
    """The page of a run in progress, ``published/<pair>/README.md``, as the scripts write it where there is none
    (``scripts/queue_pull.sh`` for a lease's unfinished pair, ``scripts/cpu_training.sh snapshot`` for the CPU's):
    what it is, then the :data:`PROGRESS_BLOCK` that :func:`run_progress` fills. ``opflow publish`` removes it."""
    return (f"# {pair} at the paper protocol: not finished\n\n{trained_by.strip()} Target `results/{pair}.json` of the paper profile.\n\n"
            "Where it stands (written by `opflow docs` from `curves.json` and `train.log`):\n\n"
            f"<!-- generated: {PROGRESS_BLOCK} -->\n<!-- /generated -->\n")


#: blocks whose text depends on the page that holds them: the generator gets the repository and the page
PAGE_BLOCKS: dict[str, Callable[[Path, Path], str]] = {PROGRESS_BLOCK: run_progress}

BLOCKS: dict[str, Callable[[Path], str]] = {
    "reproductions-summary": reproductions_summary,
    "reproductions": reproductions,
    "reproduction-records": reproduction_records,
    "protocol-cost": lambda repo: _bench(repo, "protocol_cost", "readme_table", "protocol_cost.json"),
    "model-cost-cpu": lambda repo: _bench(repo, "models", "markdown_table", "models_cpu.json"),
    "model-cost-gpu": lambda repo: _bench(repo, "models", "markdown_table", "models_cuda.json"),
    "train-step-gpu": lambda repo: train_step_gpu(repo),
    "runs-in-progress": runs_in_progress,
}


# --------------------------------------------------------------------------- pages


def pages(repo: Path = REPO) -> list[Path]:
    return sorted({p for pattern in PAGES for p in repo.glob(pattern)})


def render(text: str, where: str, repo: Path = REPO, cache: dict[str, str] | None = None) -> str:
    """``text`` with every generated block rewritten; :class:`DocsError` for an unknown or unclosed block."""
    cache = {} if cache is None else cache
    opened = text.count("<!-- generated: ")
    if opened != len(_BLOCK.findall(text)) or text.count("<!-- /generated -->") != opened:
        raise DocsError(f"{where}: {opened} '<!-- generated: NAME -->' markers but {text.count('<!-- /generated -->')} '<!-- /generated -->'; each block opens and closes once")

    def sub(m: re.Match) -> str:
        name = m["name"]
        if name in PAGE_BLOCKS:
            return m["open"] + PAGE_BLOCKS[name](repo, repo / where).rstrip("\n") + "\n" + m["close"]
        if name not in BLOCKS:
            raise DocsError(f"{where}: unknown generated block {name!r}; known: {sorted({*BLOCKS, *PAGE_BLOCKS})}")
        if name not in cache:
            cache[name] = BLOCKS[name](repo).rstrip("\n") + "\n"
        return m["open"] + cache[name] + m["close"]

    return _BLOCK.sub(sub, text)


def stale(repo: Path = REPO) -> list[tuple[Path, str]]:
    """(page, block name) of every generated block whose committed text differs from what it would be."""
    out, cache = [], {}
    for page in pages(repo):
        text = page.read_text()
        fresh = render(text, str(page.relative_to(repo)), repo, cache)
        if fresh != text:
            old = {m["name"]: m["body"] for m in _BLOCK.finditer(text)}
            out += [(page, m["name"]) for m in _BLOCK.finditer(fresh) if old.get(m["name"]) != m["body"]]
    return out


def write(repo: Path = REPO) -> list[Path]:
    """Rewrite the pages whose blocks changed; the pages written."""
    written, cache = [], {}
    for page in pages(repo):
        text = page.read_text()
        fresh = render(text, str(page.relative_to(repo)), repo, cache)
        if fresh != text:
            atomic_write_text(page, fresh)
            written.append(page)
    return written


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``opflow docs``."""
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each generated block that differs")
    p.add_argument("--progress-page", nargs=2, action="append", default=[], metavar=("FOLDER", "TRAINED_BY"),
                   help="first write FOLDER/README.md, the page of a run in progress, where there is none (TRAINED_BY: how it "
                        "trains); may be given several times")


def run(a: argparse.Namespace) -> int:
    """``opflow docs``: rewrite (or with --check compare) the generated blocks."""
    try:
        for where, by in [] if a.check else a.progress_page:
            folder = REPO / where
            if not (folder / "README.md").exists():
                folder.mkdir(parents=True, exist_ok=True)
                atomic_write_text(folder / "README.md", progress_page(folder.name, by))
                print(f"wrote {(folder / 'README.md').relative_to(REPO)}")
        if a.check:
            bad = stale()
            for page, name in bad:
                print(f"{page.relative_to(REPO)}: block {name!r} differs from its records; run: opflow docs")
            return 1 if bad else 0
        written = write()
    except DocsError as e:
        print(f"opflow docs: {e}", file=sys.stderr)
        return 2
    print("rewrote " + ", ".join(str(p.relative_to(REPO)) for p in written) if written else "every generated block is up to date")
    return 0


if __name__ == "__main__":
    ns = argparse.ArgumentParser(prog="python -m opflow.doc_tables")
    add_arguments(ns)
    sys.exit(run(ns.parse_args()))
