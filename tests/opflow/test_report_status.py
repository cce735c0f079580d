"""The status of a published number (opflow/report_status.py): from the ratio, and for the numbers
without a result from the committed records: the diverged runs, the partial records, the paper
profile's names and the cost per protocol."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from opflow.config import TrainConfig
from opflow.data.errors import ConfigError
from opflow.report_status import (
    DIVERGENCE_FACTOR,
    Cost,
    Diverged,
    Facts,
    Status,
    Unfinished,
    classify,
    divergence_began,
    find_unfinished,
    load_costs,
    load_diverged,
    of_ratio,
    summarise,
    summary_columns,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("ratio", "status"), [(0.30, Status.BETTER), (0.79, Status.BETTER), (0.80, Status.REPRODUCED), (1.0, Status.REPRODUCED), (1.2, Status.REPRODUCED), (1.25, Status.WORSE)])
def test_reproduced_within_20_percent_better_below_worse_above(ratio: float, status: Status) -> None:
    assert of_ratio(ratio) is status


def test_the_divergence_factor_is_the_training_default() -> None:
    assert DIVERGENCE_FACTOR == TrainConfig().divergence_factor


def test_a_divergence_begins_where_the_loss_stays_far_above_its_lowest() -> None:
    assert divergence_began([1.0, 0.5, 0.1, 0.05, 600.0, 1.0, 1.0]) == 5
    assert divergence_began([1.0, 0.5, 0.1, 5.0, 0.05, 0.04]) is None  # a spike that recovered
    assert divergence_began([1.0]) is None


def test_the_committed_diverged_runs_are_read_with_their_epochs() -> None:
    got = load_diverged(REPO / "published/diverged.yaml", REPO)
    assert set(got) == {("burgers2048", "ft1d"), ("burgers", "ft1d"), ("darcy_inverse141_eps0", "gt_inverse"), ("burgers512", "gt1d_regular")}
    assert (got[("burgers2048", "ft1d")].began, got[("burgers2048", "ft1d")].stopped) == (26, 29)  # the README's account
    assert (got[("burgers", "ft1d")].began, got[("burgers", "ft1d")].stopped) == (31, 59)
    assert (got[("darcy_inverse141_eps0", "gt_inverse")].began, got[("darcy_inverse141_eps0", "gt_inverse")].stopped) == (26, 32)
    assert (got[("burgers512", "gt1d_regular")].began, got[("burgers512", "gt1d_regular")].stopped) == (31, 32)
    assert all(v.curves.is_file() and v.figure and v.figure.is_file() for v in got.values())


@pytest.mark.parametrize(
    ("body", "message"),
    [({"darcy_ono": {"curves": "x.json"}}, "must read <dataset>/<model>"), ({"darcy/ono": {"curves": "nope.json"}}, "curves: nope.json does not exist"),
     ({"darcy/ono": {"curves": "c.json", "epoch": 3}}, "with optional")],
)  # fmt: skip
def test_a_bad_diverged_entry_names_its_key(tmp_path: Path, body: dict, message: str) -> None:
    (tmp_path / "c.json").write_text(json.dumps([{"epoch": 1, "train_loss": 1.0}]))
    path = tmp_path / "diverged.yaml"
    path.write_text(yaml.safe_dump(body))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_diverged(path, tmp_path)


def test_the_committed_costs_and_partial_records() -> None:
    costs = load_costs(sorted((REPO / "benchmarks/results").glob("protocol_cost*.json")))
    assert costs[("burgers512", "gt1d")].fits and not costs[("darcy_lognormal64", "tno")].fits
    assert costs[("darcy", "ono")].approx and costs[("darcy", "ono")].hours > 2.5  # over the memory cap: extrapolated
    assert "regular grid" in costs[("elasticity", "gt")].refused
    assert costs[("burgers512", "gt1d")].machine.startswith("2-core")
    unfinished = find_unfinished(REPO / "published", [("darcy", "ono"), ("darcy", "gt")])
    assert set(unfinished) == {("darcy", "ono")} and unfinished[("darcy", "ono")].epochs_done >= 1


def _status(pair: tuple[str, str], facts: Facts, **kw: object) -> Status:
    args = {"has_result": False, "protocol": False, "ours": None, "published": True, "ratio": None, "bound": None} | kw
    return classify(pair, facts=facts, **args)[0]  # type: ignore[arg-type]


def test_the_status_of_a_number_without_a_result_follows_the_records_in_order(tmp_path: Path) -> None:
    cost = Cost(hours=10.0, approx=False, budget=2.5, machine="2-core CPU", epochs=100)
    facts = Facts(
        datasets=frozenset({"a", "b"}), models=frozenset({"m", "n"}),
        costs={("a", "m"): cost, ("a", "n"): Cost(1.0, False, 2.5, "2-core CPU", 100), ("b", "n"): Cost(None, False, 2.5, "cpu", 100, refused="m needs a grid")},
        diverged={("b", "m"): Diverged(tmp_path / "c.json", 26, 29)}, unfinished={("a", "m"): Unfinished(tmp_path, 8)},
    )  # fmt: skip
    assert _status(("b", "m"), facts) is Status.DIVERGED
    assert classify(("b", "m"), facts=facts, has_result=False, protocol=False, ours=None, published=True, ratio=None, bound=None)[1].startswith("diverged at epoch 26, stopped at 29")
    assert _status(("a", "m"), facts) is Status.UNFINISHED  # before its cost: it was started anyway
    assert _status(("z", "m"), facts) is Status.NO_DATA and _status(("a", "x"), facts) is Status.NO_MODEL
    assert _status(("b", "n"), facts) is Status.NO_MODEL  # refused by the config check
    assert _status(("a", "n"), facts) is Status.NOT_YET  # fits its budget
    facts.unfinished.clear()
    assert _status(("a", "m"), facts) is Status.COSTLY
    # with a result: the ratio decides, a bound is met or not, another protocol is not compared
    assert _status(("a", "m"), facts, has_result=True, protocol=True, ours=1.0, ratio=0.5) is Status.BETTER
    assert _status(("a", "m"), facts, has_result=True, protocol=True, ours=1.0, bound=(0.2, True)) is Status.REPRODUCED
    assert _status(("a", "m"), facts, has_result=True, protocol=True, ours=1.0, bound=(1.5, False)) is Status.WORSE
    assert _status(("a", "m"), facts, has_result=True, protocol=False, ours=1.0) is Status.REDUCED
    assert _status(("a", "m"), facts, has_result=True, protocol=True, ours=None) is Status.MISSING
    assert _status(("a", "m"), facts, has_result=True, published=False, ours=1.0) is Status.OURS_ONLY


def test_a_row_not_run_or_unfinished_says_where_its_pair_stands_in_the_queue(tmp_path: Path) -> None:
    """facts.queued (opflow.queue.standing) is added to the why of a row too costly, not run yet, unfinished or
    diverged (a diverged pair stays in the queue, blocked with the reason), and to no other: a row with a result or
    without data says its own."""
    queued = {p: f"queued {p[0]}" for p in [("a", "m"), ("a", "n"), ("b", "m"), ("z", "m"), ("b", "n")]}
    facts = Facts(
        datasets=frozenset({"a", "b"}), models=frozenset({"m", "n"}), costs={("a", "m"): Cost(10.0, False, 2.5, "2-core CPU", 100)},
        unfinished={("b", "m"): Unfinished(tmp_path, 8)}, queued=queued, diverged={("b", "n"): Diverged(tmp_path / "c.json", 26, 32, note="seed 0")},
    )  # fmt: skip

    def why(pair: tuple[str, str], **kw: object) -> tuple[Status, str]:
        args = {"has_result": False, "protocol": False, "ours": None, "published": True, "ratio": None, "bound": None} | kw
        return classify(pair, facts=facts, **args)  # type: ignore[arg-type]

    assert why(("a", "m")) == (Status.COSTLY, "over the 2.5 h budget on the 2-core CPU; queued a")
    assert why(("b", "m")) == (Status.UNFINISHED, "8 epochs trained; queued b")
    assert why(("a", "n")) == (Status.NOT_YET, "cost not measured; queued a")
    assert why(("b", "n")) == (Status.DIVERGED, "diverged at epoch 26, stopped at 32; seed 0; queued b")
    assert why(("z", "m")) == (Status.NO_DATA, "opflow has no generator or file for z")
    assert why(("a", "m"), has_result=True, protocol=True, ours=1.0, ratio=1.0) == (Status.REPRODUCED, "")


def test_the_summary_counts_by_name_and_in_all() -> None:
    rows = summarise([("p", Status.BETTER), ("q", Status.COSTLY), ("p", Status.BETTER), ("p", Status.NOT_YET)], order=["q", "p"])
    assert [r.name for r in rows] == ["q", "p", "all"]
    assert rows[1].counts[Status.BETTER] == 2 and rows[1].published == 3 and rows[-1].published == 4
    cols = summary_columns(rows)
    assert Status.NOT_YET in cols and Status.DIVERGED in cols and Status.UNFINISHED not in cols  # the usual ones always, others when present
