"""benchmarks/cpu_heap.py: the trainer's step in fresh processes with glibc's default heap and with the heap kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opflow import runtime


@pytest.mark.skipif(runtime._glibc() is None, reason="the kept heap is glibc's; this C library is not glibc")
def test_a_smoke_run_times_both_settings_each_in_its_own_process(tmp_path: Path) -> None:
    from benchmarks import cpu_heap

    out = tmp_path / "heap.json"
    assert cpu_heap.main(["--smoke", "--out", str(out), "--threads", "1"]) == 0
    r = json.loads(out.read_text())
    assert r["benchmark"] == "cpu_heap" and r["smoke"] is True and r["settings"] == ["default", "keep"]
    [(pair, step)] = r["steps"].items()
    assert pair == cpu_heap.PAIRS[0]
    for setting in ("default", "keep"):  # each child checked that it ran with its setting (heap_kept)
        assert len(step[f"{setting}_step_s"]["all"]) == 1 and step[f"{setting}_peak_rss_mib"][0] > 0
    assert step["ratio"] == pytest.approx(step["default_step_s"]["median"] / step["keep_step_s"]["median"])
    assert {"versions", "machine", "wall_s"} <= r.keys()
