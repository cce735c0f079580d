"""benchmarks/cpu_lever.py: the two settings of a CPU lever alternate, and the lever benchmarks write their result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.cpu_lever import alternate


def test_the_two_settings_alternate_and_the_second_is_left_in_force() -> None:
    calls: list[str] = []
    state = {"on": None}

    def switch(setting: bool) -> None:
        state["on"] = setting
        calls.append(f"switch {setting}")

    def fn() -> float:
        calls.append(f"run {state['on']}")
        return 2.0 if state["on"] else 1.0

    t = alternate(fn, switch, rounds=3)
    assert t == {False: [1.0, 1.0, 1.0], True: [2.0, 2.0, 2.0]}
    assert calls[:4] == ["switch False", "run False", "switch True", "run True"] and calls[-1] == "switch True"
    assert state["on"] is True


@pytest.mark.parametrize("name, labels", [("dropout", ("torch", "opflow")), ("spectral", ("fft", "auto")),
                                          ("mask_layout", ("contiguous", "input_layout")),
                                          ("gt_lift_order", ("after", "first"))])
def test_a_smoke_run_times_the_trainers_step_under_both_settings(tmp_path: Path, name: str, labels: tuple[str, str]) -> None:
    import importlib

    from opflow.models.layers import dropout as D

    bench = importlib.import_module(f"benchmarks.{name}")
    out = tmp_path / f"{name}.json"
    assert bench.main(["--smoke", "--out", str(out), "--threads", "1"]) == 0
    r = json.loads(out.read_text())
    assert r["benchmark"] == name and r["smoke"] is True and r["rounds"] == 2 and r["steps_per_timing"] == 1
    assert r["op"] and all(row["ratio"] > 0 for row in (r["op"] if isinstance(r["op"], list) else [r["op"]]))
    [(pair, step)] = r["step_runs"][0].items() if name == "spectral" else r["steps"].items()
    assert pair == bench.PAIRS[0]
    off, on = (step[f"{label}_step_s"] for label in labels)
    assert len(off["all"]) == len(on["all"]) == 2
    assert step["ratio"] == pytest.approx(off["median"] / on["median"])
    assert {"versions", "machine", "wall_s"} <= r.keys()
    assert D.CPU_MASK is True and D.MASK_LAYOUT is True  # the benchmark leaves the training settings in force
