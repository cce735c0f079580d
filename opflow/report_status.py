"""The status of each published number in the reproduction report, from committed records only.

A row of the report (one published number of ``config/reference.yaml``, or a result of ours that
has none) gets one status, in this order of precedence:

=========================  =====================================================================
status                     when
=========================  =====================================================================
reproduced                 a run of the paper protocol, ours / published within 20 % (0.8-1.2);
                           for a published bound ("below 1 %"): ours is below it
better                     a run of the paper protocol, ours / published < 0.8
worse                      a run of the paper protocol, ours / published > 1.2, or a bound missed
reduced run                a result of another protocol (the quick profile, changed settings):
                           shown, never compared
not in the results         a result of the pair that lacks this statistic
ours only                  a result of ours that ``reference.yaml`` has no number for
diverged                   the paper profile's run diverged and was stopped: listed in
                           ``published/diverged.yaml`` (:func:`load_diverged`) with its curves
unfinished                 a record folder ``published/<dataset>_<model>/`` with curves but no
                           ``result.json``: a run of the paper protocol in progress
not run: no data           the paper profile (``config/default.yaml``) has no such dataset
not run: no model          it has no such model, or the cost measurement's config check refused
                           the pair (e.g. a grid model on a point cloud)
not run: too costly        the protocol's estimated hours on the CPU
                           (``benchmarks/results/protocol_cost*.json``) exceed its budget
                           (``fit_hours``)
not run yet                none of the above: it fits, or its cost was not measured
=========================  =====================================================================

A row unfinished, too costly or not run yet also says where its pair stands in the GPU lease queue
(``config/queue.yaml``: its place in the order the leases take them and its GPU minutes left, that the
CPU trains it now, or why it is blocked; :func:`opflow.queue.standing`).

Everything is read from committed files; no number is typed here but the 20 % band and the
divergence factor (``training.divergence_factor``'s default, opflow/config.py).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import yaml

from opflow.data.errors import ConfigError
from opflow.report_format import hours

#: ours / published within this band of 1 counts as reproduced
TOLERANCE = 0.20
#: an epoch is above when its loss exceeds this times the lowest before it (training.divergence_factor's default)
DIVERGENCE_FACTOR = 5.0
#: the keys of an entry of ``published/diverged.yaml``
DIVERGED_FIELDS = {"curves", "figure", "diagnostic", "note"}

Pair = tuple[str, str]


class Status(Enum):
    """The status of a row; the value is its key (CSS class, data attribute, summary column)."""

    REPRODUCED = "reproduced"
    BETTER = "better"
    WORSE = "worse"
    REDUCED = "reduced"
    MISSING = "missing"
    OURS_ONLY = "ours-only"
    DIVERGED = "diverged"
    UNFINISHED = "unfinished"
    NO_DATA = "no-data"
    NO_MODEL = "no-model"
    COSTLY = "costly"
    NOT_YET = "not-yet"

    @property
    def label(self) -> str:
        """The short text of its badge."""
        return _LABELS[self]

    @property
    def title(self) -> str:
        """The heading of its group of rows and the meaning of its summary column."""
        return _TITLES[self]

    @property
    def has_number(self) -> bool:
        """Whether rows of this status carry a number of ours."""
        return self in (Status.REPRODUCED, Status.BETTER, Status.WORSE, Status.REDUCED, Status.OURS_ONLY)

    @property
    def not_run(self) -> bool:
        """Whether rows of this status had no run of ours (the second table of the page)."""
        return self in (Status.NO_DATA, Status.NO_MODEL, Status.COSTLY, Status.NOT_YET)


_LABELS = {
    Status.REPRODUCED: "reproduced",
    Status.BETTER: "better",
    Status.WORSE: "worse",
    Status.REDUCED: "reduced run",
    Status.MISSING: "not in results",
    Status.OURS_ONLY: "ours only",
    Status.DIVERGED: "diverged",
    Status.UNFINISHED: "unfinished",
    Status.NO_DATA: "not run: no data",
    Status.NO_MODEL: "not run: no model",
    Status.COSTLY: "not run: too costly",
    Status.NOT_YET: "not run yet",
}
_TITLES = {
    Status.REPRODUCED: f"Reproduced: ours / published within {TOLERANCE:.0%} of 1, or below a published bound",
    Status.BETTER: f"Better: ours / published below {1 - TOLERANCE:.2f}",
    Status.WORSE: f"Worse: ours / published above {1 + TOLERANCE:.2f}, or a published bound missed",
    Status.REDUCED: "Reduced run: another protocol than the paper's, not compared",
    Status.MISSING: "Not in results: a run of the pair that lacks this statistic",
    Status.OURS_ONLY: "Ours only: results of ours that no paper gives a number for",
    Status.DIVERGED: "Diverged: the paper protocol's run diverged and was stopped",
    Status.UNFINISHED: "Unfinished: the paper protocol's run started, its record is partial",
    Status.NO_DATA: "Not run, no data: opflow has no generator or file for the dataset",
    Status.NO_MODEL: "Not run, no model: opflow has no such model, or it cannot take the data",
    Status.COSTLY: "Not run, too costly: the estimated training time exceeds the budget",
    Status.NOT_YET: "Not run yet",
}

#: the order of the groups on the page and of the summary's columns
ORDER = tuple(Status)


def of_ratio(ratio: float) -> Status:
    """Reproduced, better or worse, from ours / published."""
    if ratio < 1 - TOLERANCE:
        return Status.BETTER
    if ratio > 1 + TOLERANCE:
        return Status.WORSE
    return Status.REPRODUCED


# --------------------------------------------------------------------------- committed records


@dataclass(frozen=True)
class Cost:
    """One protocol's estimated training time (a row of ``benchmarks/results/protocol_cost*.json``)."""

    hours: float | None
    """Training + per-epoch evaluation, in hours; None when not measured."""
    approx: bool
    """True when extrapolated from a batch-1 step (the protocol batch was over the memory cap)."""
    budget: float
    """The budget the file compares with (``fit_hours``)."""
    machine: str
    """Where it was measured, e.g. ``2-core AMD EPYC CPU``."""
    epochs: int | None
    refused: str = ""
    """The config check's reason when the pair could not be built."""
    not_measured: str = ""
    source: str = ""
    """The file it was read from."""

    @property
    def fits(self) -> bool | None:
        return None if self.hours is None else self.hours <= self.budget


def load_costs(files: Iterable[str | Path]) -> dict[Pair, Cost]:
    """The estimated cost of each (dataset, model) protocol; the first file (sorted) that has a pair wins."""
    out: dict[Pair, Cost] = {}
    for path in sorted(Path(f) for f in files):
        try:
            data = json.loads(path.read_text())
            budget = float(data["fit_hours"])
            protocols = data["protocols"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{path}: not a protocol cost file of benchmarks/protocol_cost.py ({e})") from None
        m = data.get("machine") or {}
        machine = f"{m['cpu_count']}-core {m.get('cpu_model', '')} CPU".replace("  ", " ") if data.get("device") == "cpu" and "cpu_count" in m else str(data.get("device", "?"))
        for p in protocols:
            pair = (str(p["dataset"]), str(p["model"]))
            if pair in out:
                continue
            h, approx = p.get("hours_with_eval", p.get("hours")), False
            if h is None and p.get("extrapolated"):
                h, approx = p["extrapolated"].get("hours"), True
            why = str(p.get("not_measured") or "")
            refused = why.split(": ")[-1].split(";")[0].replace(" (view mesh)", "") if "ConfigError" in why else ""
            out[pair] = Cost(h, approx, budget, machine, p.get("epochs"), refused, why, str(path))
    return out


@dataclass(frozen=True)
class Diverged:
    """A run of the paper protocol that diverged (an entry of ``published/diverged.yaml``)."""

    curves: Path
    """Its per-epoch curves (JSON list of ``{epoch, train_loss, ...}``)."""
    began: int | None
    """The first epoch of the divergence, read from the curves (:func:`divergence_began`)."""
    stopped: int
    """The last epoch it ran."""
    figure: Path | None = None
    diagnostic: Path | None = None
    note: str = ""


def divergence_began(losses: Sequence[float], factor: float = DIVERGENCE_FACTOR) -> int | None:
    """The 1-based epoch from which every training loss exceeds ``factor`` x the lowest before it, or None."""
    n = len(losses)
    prefix_min, lo = [], float("inf")  # prefix_min[i]: the lowest of losses[:i]
    for x in losses:
        prefix_min.append(lo)
        lo = min(lo, x)
    began, suffix_min = None, float("inf")
    for i in range(n - 1, 0, -1):
        suffix_min = min(suffix_min, losses[i])
        if suffix_min <= factor * prefix_min[i]:
            break
        began = i + 1
    return began


def load_diverged(path: str | Path | None, root: str | Path = ".") -> dict[Pair, Diverged]:
    """``published/diverged.yaml``: ``<dataset>/<model>: {curves, figure, diagnostic, note}``, paths
    relative to ``root``; a missing file is no entry, a bad entry a :class:`ConfigError` naming it."""
    if path is None or not Path(path).is_file():
        return {}
    root = Path(root)
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: must map <dataset>/<model> to {{curves, figure, diagnostic, note}}")
    out: dict[Pair, Diverged] = {}
    for key, body in data.items():
        where = f"{path}: {key}"
        parts = str(key).split("/")
        if len(parts) != 2 or not isinstance(body, Mapping) or "curves" not in body or set(body) - DIVERGED_FIELDS:
            raise ConfigError(f"{where}: must read <dataset>/<model>: {{curves: FILE}} with optional {sorted(DIVERGED_FIELDS - {'curves'})}")
        files = {k: root / str(body[k]) for k in ("curves", "figure", "diagnostic") if body.get(k)}
        for k, f in files.items():
            if not f.is_file():
                raise ConfigError(f"{where}.{k}: {body[k]} does not exist")
        try:
            losses = [float(c["train_loss"]) for c in json.loads(files["curves"].read_text())]
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{where}.curves: not a curves JSON (a list of {{epoch, train_loss}}: {e})") from None
        out[(parts[0], parts[1])] = Diverged(files["curves"], divergence_began(losses), len(losses), files.get("figure"), files.get("diagnostic"), str(body.get("note", "")))
    return out


@dataclass(frozen=True)
class Unfinished:
    """A partial record: ``published/<dataset>_<model>/`` with curves and no ``result.json``."""

    folder: Path
    epochs_done: int


def find_unfinished(published: str | Path | None, pairs: Iterable[Pair]) -> dict[Pair, Unfinished]:
    """The partial record folders under ``published`` of the given pairs."""
    out: dict[Pair, Unfinished] = {}
    if published is None:
        return out
    for d, m in pairs:
        folder = Path(published) / f"{d}_{m}"
        curves = folder / "curves.json"
        if curves.is_file() and not (folder / "result.json").exists():
            try:
                out[(d, m)] = Unfinished(folder, len(json.loads(curves.read_text())))
            except ValueError:
                out[(d, m)] = Unfinished(folder, 0)
    return out


@dataclass
class Facts:
    """What the committed records say about the pairs, beyond their results."""

    datasets: frozenset[str] = frozenset()
    """Datasets of the paper profile (empty: unknown, nothing is 'no data')."""
    models: frozenset[str] = frozenset()
    costs: dict[Pair, Cost] = field(default_factory=dict)
    diverged: dict[Pair, Diverged] = field(default_factory=dict)
    unfinished: dict[Pair, Unfinished] = field(default_factory=dict)
    queued: dict[Pair, str] = field(default_factory=dict)
    """Where a pair stands in the GPU lease queue or the CPU's list (:func:`opflow.queue.standing`)."""


def paper_names(paper_config: str | Path) -> tuple[frozenset[str], frozenset[str]]:
    """The dataset and model names of the paper profile."""
    from opflow.config import load_config_files

    config = load_config_files([str(paper_config)])
    return frozenset(config.get("datasets") or {}), frozenset(config.get("models") or {})


# --------------------------------------------------------------------------- one row


def classify(
    pair: Pair,
    *,
    has_result: bool,
    protocol: bool,
    ours: float | None,
    published: bool,
    ratio: float | None,
    bound: tuple[float, bool] | None,
    facts: Facts,
) -> tuple[Status, str]:
    """The status of one row and a few words of why (see the module doc); a row not run or unfinished also says where
    its pair stands in the GPU lease queue or the CPU's list (``facts.queued``)."""
    d, m = pair
    cost = facts.costs.get(pair)
    if has_result:
        if not published:
            return Status.OURS_ONLY, "" if ours is not None else "the results have no mean"
        if ours is None:
            return Status.MISSING, "the pair's results lack this statistic"
        if not protocol:
            return Status.REDUCED, "not the paper protocol's run hash: no ratio"
        if bound is not None:
            return (Status.REPRODUCED, "below the published bound") if bound[1] else (Status.WORSE, "not below the published bound")
        return (of_ratio(ratio), "") if ratio is not None else (Status.MISSING, "no ratio")
    if pair in facts.diverged:
        v = facts.diverged[pair]
        total = f" of {cost.epochs}" if cost and cost.epochs else ""
        why = (f"diverged at epoch {v.began}, stopped at {v.stopped}{total}" if v.began else f"stopped at epoch {v.stopped}{total}")
        return Status.DIVERGED, _with_queue(why + (f"; {v.note}" if v.note else ""), pair, facts)
    if pair in facts.unfinished:
        u = facts.unfinished[pair]
        total = f" of {cost.epochs}" if cost and cost.epochs else ""
        return Status.UNFINISHED, _with_queue(f"{u.epochs_done}{total} epochs trained", pair, facts)
    if facts.datasets and d not in facts.datasets:
        return Status.NO_DATA, f"opflow has no generator or file for {d}"
    if facts.models and m not in facts.models:
        return Status.NO_MODEL, f"opflow has no model {m}"
    if cost is not None and cost.refused:
        return Status.NO_MODEL, f"refused by the config check: {cost.refused}"
    if cost is not None and cost.hours is not None and not cost.fits:
        return Status.COSTLY, _with_queue(f"over the {cost.budget:g} h budget on the {cost.machine}", pair, facts)
    if cost is not None and cost.hours is not None:
        return Status.NOT_YET, _with_queue(f"fits the {cost.budget:g} h budget (est. {hours(cost.hours)} h on the {cost.machine})", pair, facts)
    return Status.NOT_YET, _with_queue("cost not measured" + (f" ({cost.not_measured})" if cost and cost.not_measured else ""), pair, facts)


def _with_queue(why: str, pair: Pair, facts: Facts) -> str:
    """``why`` and where ``pair`` stands in the GPU lease queue or the CPU's list, when it is queued."""
    queued = facts.queued.get(pair)
    return f"{why}; {queued}" if queued else why


# --------------------------------------------------------------------------- the summary


@dataclass(frozen=True)
class SummaryRow:
    """Counts of published numbers by status for one paper, one model, or all."""

    name: str
    counts: Counter[Status]

    @property
    def published(self) -> int:
        return sum(n for s, n in self.counts.items() if s is not Status.OURS_ONLY)


def summarise(items: Iterable[tuple[str, Status]], order: Sequence[str] | None = None) -> list[SummaryRow]:
    """One :class:`SummaryRow` per name (in ``order``, or first-seen order) and a last one, ``all``,
    from (name, status) pairs."""
    by: dict[str, Counter[Status]] = {}
    for name, status in items:
        by.setdefault(name, Counter())[status] += 1
    names = [n for n in (order or []) if n in by] + [n for n in by if n not in (order or [])]
    total: Counter[Status] = Counter()
    for c in by.values():
        total.update(c)
    return [SummaryRow(n, by[n]) for n in names] + [SummaryRow("all", total)]


#: the summary's columns that are always shown (the others only when a row has one)
ALWAYS = (Status.REPRODUCED, Status.BETTER, Status.WORSE, Status.DIVERGED, Status.COSTLY, Status.NO_DATA)


def summary_columns(rows: Sequence[SummaryRow]) -> list[Status]:
    """The statuses that get a column: :data:`ALWAYS` and any other with a count, in :data:`ORDER`."""
    total = rows[-1].counts if rows else Counter()
    return [s for s in ORDER if s is not Status.OURS_ONLY and (s in ALWAYS or total[s])]


def as_dict(rows: Sequence[SummaryRow]) -> dict[str, dict[str, int]]:
    """``{name: {status key: count, 'published': n}}``, as the page's data attributes give them."""
    return {r.name: {"published": r.published, **{s.value: r.counts[s] for s in ORDER if r.counts[s]}} for r in rows}

