"""scripts/cpu_training.sh: the CPU machine's one background training, paused, resumed and stopped as one
process group (Snakemake and its job), its state in a folder of its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cpu_training.sh"


def run(cmd: str, state: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), cmd], env={**os.environ, "CPU_TRAINING_STATE": str(state), **env}, capture_output=True, text=True, timeout=120)


def stat_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


@pytest.fixture
def group(tmp_path: Path):
    """A stand-in for the training: a process group of its own, recorded where the script keeps it (SIGINT at its
    default whatever this process does with it, as `start` makes it)."""
    proc = subprocess.Popen(["env", "--default-signal=INT", "sleep", "60"], start_new_session=True)
    (tmp_path / "cpu_training.pgid").write_text(f"{os.getpgid(proc.pid)}\n")
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_pause_resume_and_stop_reach_the_process_group(tmp_path: Path, group: subprocess.Popen) -> None:
    assert run("status", tmp_path).stdout.startswith("cpu_training: running")
    assert run("pause", tmp_path).returncode == 0
    time.sleep(0.2)
    assert stat_of(group.pid) == "T" and run("status", tmp_path).stdout.startswith("cpu_training: paused")
    assert run("resume", tmp_path).returncode == 0
    time.sleep(0.2)
    assert stat_of(group.pid) != "T"
    started = run("start", tmp_path)  # one training at a time
    assert started.returncode == 1 and "already running" in started.stderr
    stopped = run("stop", tmp_path)
    assert stopped.returncode == 0 and "'start' resumes it" in stopped.stdout
    assert group.wait(timeout=10) == -signal.SIGINT
    assert run("status", tmp_path).stdout.startswith("cpu_training: not running")


def aside(state: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "aside", "--", *command], env={**os.environ, "CPU_TRAINING_STATE": str(state)},
                          capture_output=True, text=True, timeout=120)


def test_aside_runs_a_command_with_the_training_paused_and_resumes_it_whatever_its_outcome(tmp_path: Path, group: subprocess.Popen) -> None:
    """Heavy work beside the training is 10-50x slower, and so is the training: `aside` holds it for one command."""
    paused_inside = f'test "$(cut -d")" -f2 /proc/{group.pid}/stat | cut -d" " -f2)" = T'
    done = aside(tmp_path, "bash", "-c", f"{paused_inside} && exit 3")  # a failing command: its status, and the training resumed
    assert done.returncode == 3, done.stderr
    assert "cpu_training: paused (process group" in done.stdout and "cpu_training: resumed (process group" in done.stdout
    time.sleep(0.2)
    assert stat_of(group.pid) != "T"
    assert run("pause", tmp_path).returncode == 0  # paused by hand before: still paused after
    assert aside(tmp_path, "true").returncode == 0
    time.sleep(0.2)
    assert stat_of(group.pid) == "T"
    assert run("resume", tmp_path).returncode == 0
    missing = subprocess.run([str(SCRIPT), "aside"], env={**os.environ, "CPU_TRAINING_STATE": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "aside needs a command" in missing.stderr


def test_aside_without_a_training_runs_the_command(tmp_path: Path) -> None:
    done = aside(tmp_path, "bash", "-c", "echo ran")
    assert done.returncode == 0 and done.stdout.strip() == "ran"


def test_nothing_running_and_bad_commands_are_named(tmp_path: Path) -> None:
    paused = run("pause", tmp_path)
    assert paused.returncode == 1 and "cpu_training: not running (nothing to pause)" in paused.stderr
    bad = run("restart", tmp_path)
    assert bad.returncode == 2 and "usage: scripts/cpu_training.sh start|status|pause|resume|stop|snapshot|keep, or aside -- COMMAND..." in bad.stderr
    status = run("status", tmp_path)
    assert status.returncode == 0 and status.stdout.startswith("cpu_training: not running")


def test_start_runs_it_in_a_group_of_its_own_that_stop_ends(tmp_path: Path) -> None:
    """Found running the real training: a background command of a bash script starts with SIGINT ignored, so
    Snakemake and the trainer ignored `stop`. `start` gives them SIGINT back."""
    started = run("start", tmp_path, CPU_TRAINING_COMMAND="sleep 60")
    try:
        assert started.returncode == 0 and "cpu_training: training 'sleep 60' in the background (process group" in started.stdout, started.stderr
        pgid = int((tmp_path / "cpu_training.pgid").read_text())
        members = [int(p) for p in subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()]
        assert members and pgid != os.getpgid(0)
        for pid in members:  # the SigIgn mask of each: SIGINT (bit 1) not ignored
            ignored = int(next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("SigIgn:")).split()[1], 16)
            assert not ignored & (1 << (signal.SIGINT - 1)), f"process {pid} ignores SIGINT"
        assert run("stop", tmp_path).returncode == 0
        deadline = time.monotonic() + 10
        while run("status", tmp_path).stdout.startswith("cpu_training: running") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert run("status", tmp_path).stdout.startswith("cpu_training: not running")
    finally:
        pgid_file = tmp_path / "cpu_training.pgid"
        if pgid_file.exists():
            try:
                os.killpg(int(pgid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_snapshot_writes_where_the_run_stands_and_publishes_it_once_finished(tmp_path: Path) -> None:
    """In a copy of the repository (the script writes published/ of its own tree): the CPU pair's log and curves
    go to published/<pair>/, whose page's table is written from them; once the results exist, the record replaces
    the page of the run in progress."""
    import json

    from opflow.config import load_config_files, resolve_run
    from opflow.report import DEFAULT_PAPER_CONFIG

    from repo_copy import repository_copy
    from report_helpers import results

    repo, env = repository_copy(tmp_path)
    # a queue of one pair, on the CPU (whatever trains on the CPU today)
    (repo / "config/queue.yaml").write_text('queue:\n  - {pair: darcy141/gt, gpu_minutes: 10, source: "a test"}\ncpu:\n  - {pair: darcy141/gt, note: "a test"}\n')
    pair, target = "darcy141_gt", "results/darcy141_gt.json"
    shutil.rmtree(repo / "published" / pair, ignore_errors=True)  # a fresh pair here: not the page of the tree's own run of it
    listed = subprocess.run(["python3", "-m", "opflow.cli", "queue", "--cpu-targets"], cwd=repo, env=env, capture_output=True, text=True, check=True)
    assert listed.stdout.split() == [target]
    models = repo / "models" / pair
    models.mkdir(parents=True)
    curves = [{"epoch": e, "train_loss": 1.0 / e, "test_rel_l2": 0.2 / e, "lr": 1e-4, "epoch_time_s": 900.0, "elapsed_s": 900.0 * e} for e in range(1, 6)]
    (models / "curves.json").write_text(json.dumps(curves))
    (models / "curves.csv").write_text("epoch\n")
    (models / "train.log").write_text("".join(f"2026-11-27T0{e}:00:00+00:00 INFO {pair} epoch {e}/100  train rel_l2 1  test rel L2 1  lr 1  900.0s\n" for e in range(1, 6)))
    snap = subprocess.run([str(repo / "scripts/cpu_training.sh"), "snapshot"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert snap.returncode == 0, snap.stdout + snap.stderr
    page = (repo / "published" / pair / "README.md").read_text()  # written where there was none (opflow.doc_tables.progress_page)
    assert page.startswith(f"# {pair} at the paper protocol: not finished\n") and "on the development machine's CPU" in page
    assert "| epochs done | 5 of 100, the last one finished 2026-11-27T05:00:00+00:00 " in page and "| left | 95 epochs: about 23.8 h at that median" in page
    assert (repo / "published" / pair / "curves.png").stat().st_size > 0
    # a checkpoint that a changed run set aside (opflow.train) is named by status
    (models / "checkpoint.discarded-2026-11-27T101120Z.pt").write_bytes(b"old run")
    status = subprocess.run([str(repo / "scripts/cpu_training.sh"), "status"], cwd=repo, env={**env, "CPU_TRAINING_STATE": str(tmp_path / "state")},
                            capture_output=True, text=True, timeout=120)
    assert status.stdout.splitlines()[1:] == [
        f"  2026-11-27T05:00:00+00:00 INFO {pair} epoch 5/100  train rel_l2 1  test rel L2 1  lr 1  900.0s",
        f"  kept aside: models/{pair}/checkpoint.discarded-2026-11-27T101120Z.pt, a checkpoint of the run before a change of its settings or data"
        " (train.log says which)",
        "  not in git's history yet: run 'scripts/cpu_training.sh keep' before the session ends (a new machine would start it from scratch)",
    ]

    dataset, model = "darcy141", "gt"
    paper_hash = resolve_run(load_config_files([str(DEFAULT_PAPER_CONFIG)]), dataset, model)["hash"]
    (repo / "results").mkdir()
    results(dataset, model, paper_hash, 0.009).save(repo / target)
    done = subprocess.run([str(repo / "scripts/cpu_training.sh"), "snapshot"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "removed README.md of the run in progress" in done.stdout
    record = json.loads((repo / "published" / pair / "record.json").read_text())
    assert record["run_hash"] == paper_hash and "CPU in the background" in record["note"] and record["note"].endswith("; a test")  # + its cpu: note
    assert not (repo / "published" / pair / "README.md").exists()


def test_start_trains_the_cpu_list_one_pair_after_the_other_and_stops_at_a_failure(tmp_path: Path) -> None:
    """In a copy of the repository, with a stand-in for Snakemake that 'publishes' the pair it is given (its record):
    the list's pairs run in order, each with the test-pass overlay and, where its entry says so, the compile one, and the
    list stops at the first one that fails."""
    from repo_copy import repository_copy

    repo, env = repository_copy(tmp_path)
    for p in ("darcy141_gt", "darcy141_ft", "darcy211_gt"):  # this repository's own records of them would make them done
        shutil.rmtree(repo / "published" / p, ignore_errors=True)
    (repo / "config/queue.yaml").write_text(
        "queue:\n" + "".join(f"  - {{pair: {p}, gpu_minutes: 10, source: a test}}\n" for p in ("darcy141/gt", "darcy141/ft", "darcy211/gt"))
        + "cpu:\n" + "".join(f"  - {{pair: {p}, note: a test{c}}}\n" for p, c in
                              (("darcy141/ft", ", compile: true"), ("darcy141/gt", ""), ("darcy211/gt", ""))))
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "fake_snakemake.sh"  # records its arguments; fails for darcy141_gt when told to
    fake.write_text(f"""#!/bin/bash
echo "$*" >> {calls}
t="${{@: -1}}"; pair="$(basename "$t" .json)"
[[ -n "${{FAIL:-}}" && "$pair" == "$FAIL" ]] && exit 1
mkdir -p "published/$pair" && cp published/darcy_gt/* "published/$pair/"  # a record, as `opflow docs` reads it
""")
    fake.chmod(0o755)

    def start_and_wait(first: str, **extra: str) -> str:
        e = {**env, "CPU_TRAINING_STATE": str(tmp_path / "state"), "CPU_TRAINING_SNAKEMAKE": str(fake), "CORES": "1", **extra}
        started = subprocess.run([str(repo / "scripts/cpu_training.sh"), "start"], cwd=repo, env=e, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0 and f"{first}, then the next pairs of the cpu: list" in started.stdout, started.stdout + started.stderr
        pgid = int((tmp_path / "state" / "cpu_training.pgid").read_text())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).returncode == 0:
            time.sleep(0.5)
        return (tmp_path / "state" / "cpu_training.log").read_text()

    log = start_and_wait("results/darcy141_ft.json", FAIL="darcy141_gt")
    trained = [line.split()[-1] for line in calls.read_text().splitlines()]
    assert trained == ["results/darcy141_ft.json", "results/darcy141_gt.json"], log  # in the list's order, stopped at the failure
    first, second = calls.read_text().splitlines()
    assert "--configfile config/compile.yaml config/eval_every5.yaml --" in first  # compile: true
    assert "--configfile config/eval_every5.yaml --" in second  # plain (the default)
    assert not (repo / "published/darcy211_gt/record.json").exists()
    calls.unlink()
    log = start_and_wait("results/darcy141_gt.json", CPU_TRAINING_COMPILE="1")  # started again: the failed pair, then the rest
    assert [line.split()[-1] for line in calls.read_text().splitlines()] == ["results/darcy141_gt.json", "results/darcy211_gt.json"], log
    assert all("--configfile config/compile.yaml config/eval_every5.yaml --" in line for line in calls.read_text().splitlines())  # forced
    assert "every pair of the cpu: list is done or in progress on a GPU" in log


def test_keep_puts_the_checkpoint_in_the_history_and_start_brings_it_back_on_a_new_machine(tmp_path: Path) -> None:
    """A later session may find a new machine, its work tree laid anew from git: `keep` (at a session's end) commits the
    run's checkpoint into the history and out of the tree again, and `start` restores it before it trains."""
    import torch

    from repo_copy import repository_copy

    repo, env = repository_copy(tmp_path)
    (repo / "config/queue.yaml").write_text('queue:\n  - {pair: darcy141/ft, gpu_minutes: 10, source: a test}\ncpu:\n  - {pair: darcy141/ft, note: a test}\n')
    subprocess.run(["git", "commit", "-qam", "the test's queue"], cwd=repo, env=env, check=True)
    ckpt = repo / "models/darcy141_ft/checkpoint.pt"
    ckpt.parent.mkdir(parents=True)
    torch.save({"epoch": 12}, ckpt)
    status = {**env, "CPU_TRAINING_STATE": str(tmp_path / "state")}
    before = subprocess.run([str(repo / "scripts/cpu_training.sh"), "status"], cwd=repo, env=status, capture_output=True, text=True, timeout=120)
    assert "not in git's history yet: run 'scripts/cpu_training.sh keep' before the session ends" in before.stdout
    kept = subprocess.run([str(repo / "scripts/cpu_training.sh"), "keep"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert kept.returncode == 0 and "kept models/darcy141_ft/checkpoint.pt in git's history" in kept.stdout, kept.stdout + kept.stderr
    after = subprocess.run([str(repo / "scripts/cpu_training.sh"), "status"], cwd=repo, env=status, capture_output=True, text=True, timeout=120)
    assert "  in git's history: its checkpoint of epoch 12 (commit " in after.stdout, after.stdout + after.stderr
    tracked = subprocess.run(["git", "ls-files", "models", "published/darcy141_ft"], cwd=repo, capture_output=True, text=True, check=True).stdout
    assert tracked.split() == ["published/darcy141_ft/cpu_checkpoint.json"]
    ckpt.unlink()  # a new machine
    seen = tmp_path / "seen.txt"
    fake = tmp_path / "fake_snakemake.sh"  # what the training finds when it starts
    fake.write_text(f"#!/bin/bash\npython3 -c 'import torch; print(torch.load(\"{ckpt}\")[\"epoch\"])' > {seen}.tmp; mv {seen}.tmp {seen}\nexit 1\n")
    fake.chmod(0o755)
    e = {**env, "CPU_TRAINING_STATE": str(tmp_path / "state"), "CPU_TRAINING_SNAKEMAKE": str(fake), "CORES": "1"}
    started = subprocess.run([str(repo / "scripts/cpu_training.sh"), "start"], cwd=repo, env=e, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0 and "restored models/darcy141_ft/checkpoint.pt from git's history" in started.stderr, started.stdout + started.stderr
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not seen.exists():
        time.sleep(0.5)
    assert seen.read_text().strip() == "12"
