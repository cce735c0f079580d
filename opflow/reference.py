"""The published numbers: ``config/reference.yaml``, one :class:`RefEntry` per number, read and checked by
:func:`load_reference`. The report (:mod:`opflow.report`), ``opflow publish`` and the lease queue
(:mod:`opflow.queue`, which counts the numbers a pair gives) read them from here.

A key reads ``<dataset>/<model>/<statistic>[@<kind>:<name>]`` (e.g. ``darcy43/ono/mean@zero_shot:61``); an entry
has ``value``, ``paper`` (a key of ``papers``), ``table``, ``protocol`` and ``metric``, with optional ``relation``
(``=``, or ``<`` for a published bound such as "below 1 %") and ``note``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from opflow.data.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO / "config" / "reference.yaml"

STATISTICS = ("mean", "median", "max")
WHERE_KINDS = {"zero_shot": "zero-shot at", "eval_set": "evaluation set", "frames": "frames", "channel": "channel"}
RELATIONS = ("=", "<")
ENTRY_FIELDS = {"value", "paper", "table", "protocol", "metric"}
OPTIONAL_FIELDS = {"relation", "note"}
#: metric name -> prefix of the statistics in the results JSON: relative L2 in physical units, or in the
#: units of the run's output normaliser (opflow/evaluate.py)
METRICS = {"rel_l2": "rel_l2", "rel_l2_normalised": "rel_l2_normalised"}

_KEY = re.compile(r"^(?P<dataset>[^/@\s]+)/(?P<model>[^/@\s]+)/(?P<statistic>[a-z]+)(?:@(?P<kind>[a-z_]+):(?P<name>\S+))?$")


@dataclass(frozen=True)
class RefEntry:
    """One published number (an entry of ``config/reference.yaml``)."""

    key: str
    """``<dataset>/<model>/<statistic>[@<kind>:<name>]``."""
    dataset: str
    model: str
    statistic: str
    """mean, median or max over the test samples."""
    where: tuple[str, str] | None
    """``(kind, name)``: where in the results JSON (None: the test split's ``metrics``)."""
    value: float
    relation: str
    paper: str
    """Short name of the paper (a key of ``papers``)."""
    citation: str
    table: str
    protocol: str
    metric: str
    note: str = ""

    def compare(self, ours: float | None) -> tuple[float | None, bool | None]:
        """``(ratio, meets)`` of our number against this one: for an exact number (``=``) the ratio
        ours / published and ``meets`` None; for a bound (``<``, "below 1 %") ours / bound and
        whether ours is below it. ``(None, None)`` without our number."""
        if ours is None or not math.isfinite(ours):
            return None, None
        return ours / self.value, (ours < self.value if self.relation == "<" else None)

    @staticmethod
    def bound_text(ratio: float, meets: bool) -> str:
        """How the report and ``opflow publish`` state ours against a bound."""
        return f"{ratio:.2f} of the bound: {'below it' if meets else 'NOT below it'}"

    @property
    def source(self) -> str:
        """``<paper> <table>``, as the report prints it."""
        return f"{self.paper}: {self.table}"

    @property
    def what(self) -> str:
        """The statistic and the part of the results, e.g. ``mean, zero-shot at 61``."""
        if self.where is None:
            return self.statistic
        kind, name = self.where
        return f"{self.statistic}, {WHERE_KINDS[kind]} {name}"


def load_reference(path: str | Path = DEFAULT_REFERENCE) -> list[RefEntry]:
    """The entries of ``reference.yaml`` in file order; :class:`ConfigError` naming the key for a bad one."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read the published numbers ({e})") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("papers"), Mapping) or not isinstance(data.get("entries"), Mapping):
        raise ConfigError(f"{path}: needs two mappings, 'papers' (short name -> citation) and 'entries' (key -> published number)")
    papers = {str(k): str(v) for k, v in data["papers"].items()}
    out = []
    for key, body in data["entries"].items():
        where = f"{path}: entries.{key}"
        m = _KEY.match(str(key))
        if m is None:
            raise ConfigError(f"{where}: the key must read <dataset>/<model>/<statistic>[@<kind>:<name>], e.g. darcy43/ono/mean@zero_shot:61")
        if m["statistic"] not in STATISTICS:
            raise ConfigError(f"{where}: statistic {m['statistic']!r} is not one of {list(STATISTICS)}")
        if m["kind"] is not None and m["kind"] not in WHERE_KINDS:
            raise ConfigError(f"{where}: {m['kind']!r} is not one of {sorted(WHERE_KINDS)} (after the @)")
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: must be a mapping with {sorted(ENTRY_FIELDS)}")
        missing, unknown = ENTRY_FIELDS - set(body), set(body) - ENTRY_FIELDS - OPTIONAL_FIELDS
        if missing or unknown:
            raise ConfigError(f"{where}: missing {sorted(missing)}, unknown {sorted(unknown)}; allowed: {sorted(ENTRY_FIELDS | OPTIONAL_FIELDS)}")
        if body["paper"] not in papers:
            raise ConfigError(f"{where}.paper: {body['paper']!r} is not one of papers {sorted(papers)}")
        if body["metric"] not in METRICS:
            raise ConfigError(f"{where}.metric: {body['metric']!r} is not one of {sorted(METRICS)}")
        relation = str(body.get("relation", "="))
        if relation not in RELATIONS:
            raise ConfigError(f"{where}.relation: {relation!r} is not one of {list(RELATIONS)}")
        value = body["value"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(f"{where}.value: {value!r} is not a positive number (write a fraction: 0.0076, not 0.76 %)")
        out.append(
            RefEntry(
                key=str(key),
                dataset=m["dataset"],
                model=m["model"],
                statistic=m["statistic"],
                where=(m["kind"], m["name"]) if m["kind"] else None,
                value=float(value),
                relation=relation,
                paper=str(body["paper"]),
                citation=papers[str(body["paper"])],
                table=str(body["table"]),
                protocol=str(body["protocol"]),
                metric=str(body["metric"]),
                note=str(body.get("note", "")),
            )
        )
    return out


__all__ = ["DEFAULT_REFERENCE", "ENTRY_FIELDS", "METRICS", "OPTIONAL_FIELDS", "RELATIONS", "STATISTICS", "WHERE_KINDS", "RefEntry", "load_reference"]
