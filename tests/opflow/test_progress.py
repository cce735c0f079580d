"""opflow/progress.py: time spans as a person reads them, and the time left at a run's pace."""

from __future__ import annotations

from opflow.progress import duration, epoch_times, time_left


def test_time_left_is_the_epochs_to_run_at_the_median_epoch_without_the_warm_up() -> None:
    rows = [{"epoch": 1, "epoch_time_s": 900.0}] + [{"epoch": e, "epoch_time_s": t} for e, t in [(2, 100.0), (3, 90.0), (4, 300.0)]]
    assert time_left(rows, 500) == f"~{496 * 100 / 3600:.1f} h left"  # median 100 s: the 900 s warm-up and the 300 s pause weigh nothing
    assert time_left(rows, 10) == "~10 min left"  # 6 x 100 s
    assert time_left(rows[:1], 500) == ""  # one epoch: its time is mostly the warm-up
    assert time_left(rows, 4) == ""  # done
    assert time_left([{"epoch": e, "epoch_time_s": 1.0 if e < 30 else 50.0} for e in range(1, 41)], 100) == "~50 min left"  # the last 20 epochs: median 50 s, 60 to run


def test_durations_read_as_seconds_minutes_or_hours() -> None:
    assert [duration(s) for s in (0.2, 45, 89.6, 90, 3000, 5399, 5400, 11520)] == ["1 s", "45 s", "90 s", "2 min", "50 min", "90 min", "1.5 h", "3.2 h"]


def test_the_epoch_times_leave_out_the_first_epoch_of_the_run() -> None:
    assert epoch_times([{"epoch": 1, "epoch_time_s": 9.0}, {"epoch": 2, "epoch_time_s": 2.0}]) == [2.0]
    assert epoch_times([{"epoch": 7, "epoch_time_s": 3.0}]) == [3.0]  # a resumed run's rows: none is the warm-up
