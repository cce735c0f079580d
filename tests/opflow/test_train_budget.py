"""Time budget per call: stop before an epoch that would end late, with a checkpoint and exit status 75; resume exactly.

The trainer's clock (``opflow.train._now``) is replaced by a fake one on which every epoch takes
exactly 60 s, so what the budget allows does not depend on the speed of this machine: with a
2.5-minute budget (150 s) epoch 1 ends at 60 s, epoch 2 is estimated to end at 60 + 1.25 x 60 =
135 s (runs, ends at 120 s), epoch 3 at 120 + 75 = 195 s (refused).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import opflow.train
from opflow.cli import main
from opflow.data.errors import ConfigError
from opflow.inference import load_model
from opflow.train import BUDGET_ENV, CHECKPOINT_NAME, EX_TEMPFAIL, LOG_NAME, Trainer, budget_seconds, train

from learning_helpers import grid_dataset, toy_run

EPOCH_S = 60.0


class FakeClock:
    """A clock that stands still except when an epoch ends (then it moves on by ``EPOCH_S``)."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.epochs = 0

    def __call__(self) -> float:
        return self.t


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(opflow.train, "_now", c)
    real_epoch = Trainer.epoch

    def epoch(self: Trainer, e: int) -> dict:
        row = real_epoch(self, e)
        c.t += EPOCH_S
        c.epochs += 1
        return row

    monkeypatch.setattr(Trainer, "epoch", epoch)
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    return c


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grid_dataset(tmp_path_factory.mktemp("data") / "toy.nc")


def run_of(data: Path, **training) -> dict:
    return toy_run(data, dropout=0.2, **training)  # dropout: the RNG state must survive the stop too


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_model(path)[0].state_dict()


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def test_the_budget_stops_with_a_checkpoint_and_the_rerun_finishes_bit_for_bit(data: Path, tmp_path: Path, clock: FakeClock) -> None:
    run = run_of(data, epochs=4)
    full = train(run, data, tmp_path / "full", progress=False)

    cut = tmp_path / "cut"
    first = train(run, data, cut, progress=False, max_seconds_this_call=150.0)
    assert first.stopped_by == "time_budget" and not first.complete and first.epochs_done == 2 and first.model_path is None
    ck = torch.load(cut / CHECKPOINT_NAME, weights_only=False)
    assert ck["epoch"] == 2 and not (cut / "model.pt").exists()
    assert first.message.startswith("toy_mlp: stopped after epoch 2 of 4 within the 2.5-minute budget of this call")
    assert f"checkpoint at {cut / CHECKPOINT_NAME}; rerun the same command to resume" in first.message
    assert first.message in (cut / LOG_NAME).read_text()

    second = train(run, data, cut, progress=False, max_seconds_this_call=150.0)
    assert second.complete and second.stopped_by is None and second.resumed_from == 2 and second.message == ""
    assert_same_weights(full.model_path, second.model_path)
    assert [c["train_loss"] for c in second.curves] == [c["train_loss"] for c in full.curves]


def test_every_call_runs_one_epoch_and_leaves_a_checkpoint_whatever_the_cadence(data: Path, tmp_path: Path, clock: FakeClock) -> None:
    run = run_of(data, epochs=4, checkpoint_every=3)  # operational: the same run hash as the full run below
    full = train(run, data, tmp_path / "full", progress=False)
    out = tmp_path / "cut"
    done = []
    for _ in range(4):  # a 1-second budget: no epoch fits, but the first of each call always runs
        before = clock.epochs
        res = train(run, data, out, progress=False, max_seconds_this_call=1.0)
        assert clock.epochs - before == 1
        done.append(res.epochs_done)
        if not res.complete:
            assert res.stopped_by == "time_budget"
            assert torch.load(out / CHECKPOINT_NAME, weights_only=False)["epoch"] == res.epochs_done  # epochs 1 and 2 too
    assert done == [1, 2, 3, 4] and res.complete
    assert_same_weights(full.model_path, res.model_path)


def test_epoch_limit_and_budget_together_whichever_stops_first(data: Path, tmp_path: Path, clock: FakeClock) -> None:
    run = run_of(data, epochs=5)
    res = train(run, data, tmp_path / "a", progress=False, max_epochs_this_call=1, max_seconds_this_call=3600.0)
    assert res.stopped_by == "max_epochs" and res.epochs_done == 1
    res = train(run, data, tmp_path / "b", progress=False, max_epochs_this_call=3, max_seconds_this_call=150.0)
    assert res.stopped_by == "time_budget" and res.epochs_done == 2


def test_the_budget_in_seconds_must_be_positive_and_is_checked_before_any_data_is_read(tmp_path: Path) -> None:
    for bad in (0, -5.0, float("nan"), float("inf"), True):
        with pytest.raises(ConfigError, match=r"^max_seconds_this_call: .* must be a number of seconds > 0 \(the time budget of this call\)$"):
            train({"training": {}}, tmp_path / "missing.nc", tmp_path / "out", max_seconds_this_call=bad)
    assert not (tmp_path / "out").exists()


def test_budget_from_the_flag_or_the_environment() -> None:
    assert budget_seconds(None, {}) is None
    assert budget_seconds(None, {BUDGET_ENV: "  "}) is None  # empty counts as unset
    assert budget_seconds(2.5, {}) == 150.0
    assert budget_seconds(None, {BUDGET_ENV: "8"}) == 480.0
    assert budget_seconds(1.0, {BUDGET_ENV: "8"}) == 60.0  # the flag wins
    with pytest.raises(ConfigError, match=r"^--max-minutes-this-call: 0\.0 must be a number of minutes > 0"):
        budget_seconds(0.0, {BUDGET_ENV: "8"})
    for text in ("abc", "0", "-1", "nan", "inf"):
        with pytest.raises(ConfigError, match=rf"^{BUDGET_ENV}='{text}' must be a number of minutes > 0 \(the time budget of this call\)$"):
            budget_seconds(None, {BUDGET_ENV: text})


def test_a_deadline_caps_the_budget_of_every_call_so_jobs_in_a_row_stop_in_time() -> None:
    """OPFLOW_TRAIN_DEADLINE (a Unix time): the budget is at most the seconds left until it, whichever
    job of a command starts when; a past deadline leaves one epoch (1 s), a bad value is named."""
    from opflow.train import DEADLINE_ENV

    now = 1_000_000.0
    assert budget_seconds(None, {DEADLINE_ENV: "1000300"}, now=now) == 300.0
    assert budget_seconds(None, {DEADLINE_ENV: "1000300", BUDGET_ENV: "2"}, now=now) == 120.0  # the smaller
    assert budget_seconds(10.0, {DEADLINE_ENV: "1000300"}, now=now) == 300.0
    assert budget_seconds(None, {DEADLINE_ENV: "999000"}, now=now) == 1.0
    for text in ("soon", "nan", "-5"):
        with pytest.raises(ConfigError, match=rf"^{DEADLINE_ENV}='{text}' \(a Unix time in seconds\) must be a number of seconds > 0"):
            budget_seconds(None, {DEADLINE_ENV: text}, now=now)


# --------------------------------------------------------------------------- the command line


def cli_args(data: Path, run: dict, folder: Path, *extra: str) -> list[str]:
    (folder.parent / "run.json").write_text(json.dumps(run))
    return ["train", "--run-json", f"@{folder.parent / 'run.json'}", "--data", str(data), "--out-dir", str(folder), "--no-progress", *extra]


def test_cli_exits_75_with_one_line_and_the_same_command_resumes(
    data: Path, tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_of(data, epochs=4)
    full = train(run, data, tmp_path / "full", progress=False)
    args = cli_args(data, run, tmp_path / "cut", "--max-minutes-this-call", "2.5")
    assert main(args) == EX_TEMPFAIL == 75
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "stopped after epoch" in ln]
    assert len(lines) == 1 and "stopped after epoch 2 of 4 within the 2.5-minute budget" in lines[0]
    assert f"checkpoint at {tmp_path / 'cut' / CHECKPOINT_NAME}; rerun the same command to resume" in lines[0]
    assert main(args) == 0
    assert_same_weights(full.model_path, tmp_path / "cut" / "model.pt")
    # --max-epochs-this-call keeps exiting 0
    assert main(cli_args(data, run, tmp_path / "epochs", "--max-epochs-this-call", "1")) == 0
    assert "stopped after epoch 1" in capsys.readouterr().err


def test_a_restart_stopped_by_the_budget_says_to_resume_without_restart(
    data: Path, tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before (issue 39): 'rerun the same command to resume', and the same command (with --restart)
    discarded the checkpoint again."""
    run = run_of(data, epochs=4)
    args = cli_args(data, run, tmp_path / "cut", "--max-minutes-this-call", "2.5")
    assert main([*args, "--restart"]) == EX_TEMPFAIL
    err = capsys.readouterr().err.splitlines()
    assert [ln for ln in err if "stopped after epoch 2 of 4" in ln][0].endswith("; rerun the same command without --restart to resume")
    assert err[-1] == f"opflow: resume with: {shlex.join(['opflow', *args])}"
    assert main(args) == 0  # that command resumes, and the run completes
    assert "--- resumed at epoch 2 (" in (tmp_path / "cut" / LOG_NAME).read_text() and (tmp_path / "cut" / "model.pt").exists()


def test_cli_takes_the_budget_from_the_environment_and_the_flag_wins(
    data: Path, tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_of(data, epochs=4)
    monkeypatch.setenv(BUDGET_ENV, "2.5")
    assert main(cli_args(data, run, tmp_path / "env")) == EX_TEMPFAIL
    assert torch.load(tmp_path / "env" / CHECKPOINT_NAME, weights_only=False)["epoch"] == 2
    assert main(cli_args(data, run, tmp_path / "flag", "--max-minutes-this-call", "100")) == 0  # 100 minutes: all 4 epochs
    assert (tmp_path / "flag" / "model.pt").exists()


@pytest.mark.parametrize(
    ("flag", "env", "message"),
    [
        ("0", None, "opflow: --max-minutes-this-call: 0.0 must be a number of minutes > 0"),
        ("-3", "5", "opflow: --max-minutes-this-call: -3.0 must be a number of minutes > 0"),
        ("nan", None, "opflow: --max-minutes-this-call: nan must be a number of minutes > 0"),
        (None, "ten", f"opflow: {BUDGET_ENV}='ten' must be a number of minutes > 0"),
        (None, "0", f"opflow: {BUDGET_ENV}='0' must be a number of minutes > 0"),
    ],
)
def test_cli_refuses_a_bad_budget_before_reading_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: str | None, env: str | None, message: str
) -> None:
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(BUDGET_ENV, env)
    args = ["train", "--run-json", f"@{tmp_path / 'no-such-run.json'}", "--data", str(tmp_path / "no-such-data.nc"), "--out-dir", str(tmp_path / "out")]
    if flag is not None:
        args += ["--max-minutes-this-call", flag]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1  # about the budget, not the missing files
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_budget_that_is_not_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["train", "--data", str(tmp_path / "x.nc"), "--max-minutes-this-call", "soon"])
    assert e.value.code == 2 and "--max-minutes-this-call: invalid float value: 'soon'" in capsys.readouterr().err


def test_the_train_help_explains_the_budget_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--max-minutes-this-call M" in out and BUDGET_ENV in out and "exits with status 75 (EX_TEMPFAIL)" in out
    assert "rerun the same command to resume" in out


def test_ddp_processes_stop_together_and_resume(data: Path, tmp_path: Path) -> None:
    """Under torchrun the processes agree on the stop (one all-reduce per epoch): the workers stop after the
    same epoch with status 75, rank 0 writes the checkpoint and the one log line, and the rerun finishes.

    A budget of 0.0001 minutes (6 ms) makes the stop certain after the first epoch of each call
    whatever the machine's speed. torchrun itself reports a failed worker with its own status 1. A rank
    that stopped at another epoch would leave the other waiting in the all-reduce: the call would hang.
    """
    run = run_of(data, epochs=2, lr=1e-2)
    run["model_config"]["dropout"] = 0.0
    single = train(run, data, tmp_path / "single", progress=False)
    (tmp_path / "run.json").write_text(json.dumps(run))
    support = Path(__file__).resolve().parents[1] / "_support"
    entry = tmp_path / "entry.py"
    entry.write_text(f"import sys\nsys.path.insert(0, {str(support)!r})\nimport learning_helpers\nfrom opflow.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    torchrun = [sys.executable, "-m", "torch.distributed.run"]  # as the workflow launches it (no torchrun script needed)
    env = {k: v for k, v in os.environ.items() if k != BUDGET_ENV} | {"OMP_NUM_THREADS": "1"}
    cmd = [*torchrun, "--standalone", "--nproc_per_node", "2", str(entry), "train", "--run-json", f"@{tmp_path / 'run.json'}",
           "--data", str(data), "--out-dir", str(tmp_path / "ddp"), "--threads", "1", "--no-progress"]
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([*cmd, "--max-minutes-this-call", "0.0001"], capture_output=True, text=True, timeout=240, cwd=root, env=env)
    # torchrun lists each failed worker; one that exits 75 first may get its sibling terminated (SIGTERM, -15) in
    # its last moments: all files are written before the final barrier, so either code is a clean stop
    codes = [int(c) for c in re.findall(r"exitcode\s*:\s*(-?\d+)", out.stderr)]
    assert out.returncode != 0 and 75 in codes and set(codes) <= {75, -15}, out.stderr[-3000:]
    assert torch.load(tmp_path / "ddp" / CHECKPOINT_NAME, weights_only=False)["epoch"] == 1
    assert (tmp_path / "ddp" / LOG_NAME).read_text().count("stopped after epoch 1 of 2 within the 0.0001-minute budget") == 1
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=root, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    a, b = weights(single.model_path), weights(tmp_path / "ddp" / "model.pt")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)  # DDP: equal up to rounding
