"""benchmarks/cpu_denormals.py: the trainer's step in fresh processes with subnormal arithmetic and with the
flush-to-zero flags, and the count of subnormal entries in a training state."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from benchmarks import cpu_denormals


@pytest.fixture
def subnormals_kept() -> Iterator[None]:
    """This thread's flush-to-zero flags off for the test, as they were afterwards. The flags are process-wide
    state: a training earlier in the same pytest process (``opflow.runtime.flush_cpu_denormals``) leaves them set, and
    then ``torch.tensor([1e-39])`` is already 0.0, so a count of subnormal entries would see none."""
    was_flushing = torch.tensor([1e-39]).item() == 0.0
    torch.set_flush_denormal(False)
    yield
    if was_flushing:
        torch.set_flush_denormal(True)


@pytest.mark.usefixtures("subnormals_kept")
def test_subnormal_entries_are_counted_in_nested_state_and_nothing_else() -> None:
    w = torch.tensor([1e-39, 1e-30, 0.0, 1.0])
    state = {"model": {"w": w, "steps": torch.tensor([3])}, "moments": [torch.tensor([1e-40, 2.0], dtype=torch.float32)],
             "complex": torch.tensor([complex(1e-39, 1.0)], dtype=torch.complex64), "lr": 1e-3}
    assert cpu_denormals.subnormal_count(state) == (3, 4 + 2 + 2)  # 1e-39, 1e-40 and the real part 1e-39; the integers not counted


@pytest.mark.skipif(not torch.set_flush_denormal(False), reason="this CPU has no flush-to-zero flags")
def test_a_smoke_run_times_both_settings_each_in_its_own_process(tmp_path: Path) -> None:
    out = tmp_path / "denormals.json"
    assert cpu_denormals.main(["--smoke", "--out", str(out), "--threads", "2"]) == 0
    r = json.loads(out.read_text())
    assert r["benchmark"] == "cpu_denormals" and r["smoke"] is True and r["settings"] == ["keep", "flush"]
    [step] = r["steps"]  # each child checked on its threads that its flags held (workers_flushed)
    assert step["pair"] == "darcy/fno" and step["weights"] == "fresh" and step["checkpoint"] is None
    assert step["subnormal_entries"]["model"]["subnormal"] == 0 and step["subnormal_entries"]["model"]["of"] > 0
    for setting in ("keep", "flush"):
        assert len(step[f"{setting}_step_s"]["all"]) == 1 and step[f"{setting}_op_ms"][0] > 0
    assert step["ratio"] == pytest.approx(step["keep_step_s"]["median"] / step["flush_step_s"]["median"])
    assert {"versions", "machine", "wall_s"} <= r.keys()


def test_a_missing_checkpoint_is_named_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="needs PAIR=PATH with an existing checkpoint file"):
        cpu_denormals.main(["--checkpoint", f"darcy/fno={tmp_path / 'none.pt'}", "--out", str(tmp_path / "d.json")])
