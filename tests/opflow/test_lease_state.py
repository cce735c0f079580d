"""What a run that goes on in a later session keeps (opflow/lease_state.py): a pointer in published/<pair>/, the
checkpoint out of the tree, and both the checkpoint and the data a CPU run reads in git's history, from which a new
machine brings them back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import torch
from git_helpers import git, new_repo

from opflow import lease_state
from opflow.records import file_sha256


def project(path: Path) -> Path:
    """A repository laid out as this one: published/ tracked, the run outputs ignored."""
    return new_repo(path, "/models\n/data\n/.lease-state\n", {"published/f_m/curves.json": "[]"})


def checkpoint(path: Path, epoch: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": epoch, "model": {"w": torch.full((4,), float(epoch))}}, path)
    return path


def test_the_cpu_run_and_its_data_are_kept_once_and_come_back_on_a_new_machine(tmp_path):
    repo = project(tmp_path / "repo")
    folder = repo / "published" / "f_m"
    ckpt = checkpoint(repo / "models" / "f_m" / "checkpoint.pt", 7)
    subset = repo / ".lease-state" / "data" / "fem" / "all.nc"  # what opflow.queue.cpu_state gives: the subset it reads
    subset.parent.mkdir(parents=True)
    subset.write_bytes(b"the variables the run reads")
    kept = lease_state.save(repo, repo / "published", (folder, ckpt, [("data/fem/all.nc", subset)]))
    assert kept == ["data/fem/all.nc", "models/f_m/checkpoint.pt"]
    pointer = lease_state.read_pointer(folder, lease_state.CPU_POINTER)
    commit = git(repo, "rev-parse", "HEAD~1")
    assert pointer == {"file": "models/f_m/checkpoint.pt", "bytes": ckpt.stat().st_size, "sha256": file_sha256(ckpt), "epochs_done": 7,
                       "git": f"{commit}:models/f_m/checkpoint.pt",
                       "data": [{"file": "data/fem/all.nc", "bytes": 27, "sha256": file_sha256(subset), "git": f"{commit}:data/fem/all.nc"}]}
    assert git(repo, "ls-files") == ".gitignore\npublished/f_m/cpu_checkpoint.json\npublished/f_m/curves.json"  # the tree as small as before
    assert lease_state.read_pointer(folder) is None  # not the lease pointer: the pair stays the CPU's, not in progress on a GPU
    assert lease_state.save(repo, repo / "published", (folder, ckpt, [("data/fem/all.nc", subset)])) == []  # kept already: no commit
    assert git(repo, "rev-parse", "HEAD~1") == commit

    checkpoint(ckpt, 9)  # the next session's end: the new checkpoint, the data kept before named again
    assert lease_state.save(repo, repo / "published", (folder, ckpt, [("data/fem/all.nc", subset)])) == ["models/f_m/checkpoint.pt"]
    later = lease_state.read_pointer(folder, lease_state.CPU_POINTER)
    assert later["epochs_done"] == 9 and later["git"] == f"{git(repo, 'rev-parse', 'HEAD~1')}:models/f_m/checkpoint.pt"
    assert later["data"] == pointer["data"]

    clone = tmp_path / "new-machine"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    assert lease_state.restore(clone, clone / "published") == (["models/f_m/checkpoint.pt", "data/fem/all.nc"], [])
    assert file_sha256(clone / "models/f_m/checkpoint.pt") == file_sha256(ckpt) and (clone / "data/fem/all.nc").read_bytes() == subset.read_bytes()
    checkpoint(clone / "models/f_m/checkpoint.pt", 10)  # it trained on: a file here is never written over
    assert lease_state.restore(clone, clone / "published") == ([], [])
    assert torch.load(clone / "models/f_m/checkpoint.pt")["epoch"] == 10


def test_a_cpu_run_brought_back_gets_its_earlier_log_to_append_to(tmp_path):
    """The record's train.log (the snapshot taken before `keep`) goes beside the restored checkpoint, so that the
    published log holds every session's epochs; a log already there is never written over."""
    repo = project(tmp_path / "repo")
    folder = repo / "published" / "f_m"
    ckpt = checkpoint(repo / "models" / "f_m" / "checkpoint.pt", 8)
    (folder / "train.log").write_text("--- started from scratch (t0) ---\nepoch 1/100\nepoch 8/100\n")
    git(repo, "add", "published/f_m/train.log")
    git(repo, "commit", "-qm", "snapshot at epoch 8")
    lease_state.save(repo, repo / "published", (folder, ckpt, []))
    clone = tmp_path / "new-machine"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    assert lease_state.restore(clone, clone / "published") == (["models/f_m/checkpoint.pt", "models/f_m/train.log"], [])
    assert (clone / "models/f_m/train.log").read_text() == (folder / "train.log").read_text()

    other = tmp_path / "another-machine"
    subprocess.run(["git", "clone", "-q", str(repo), str(other)], check=True)
    (other / "models/f_m").mkdir(parents=True)
    (other / "models/f_m/train.log").write_text("this machine's own log\n")
    assert lease_state.restore(other, other / "published") == (["models/f_m/checkpoint.pt"], [])
    assert (other / "models/f_m/train.log").read_text() == "this machine's own log\n"


def test_a_lease_checkpoint_is_kept_in_the_history_and_one_never_kept_is_named_lost(tmp_path):
    repo = project(tmp_path / "repo")
    pulled = checkpoint(tmp_path / "pulled.pt", 3)
    lease_state.keep(repo, repo / "published" / "f_m", pulled, 3)  # what scripts/queue_pull.sh does
    assert lease_state.save(repo, repo / "published") == [".lease-state/f_m/checkpoint.pt"]
    pointer = json.loads((repo / "published/f_m/checkpoint.json").read_text())
    assert pointer["git"] == f"{git(repo, 'rev-parse', 'HEAD~1')}:.lease-state/f_m/checkpoint.pt"
    clone = tmp_path / "new-machine"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    assert lease_state.restore(clone, clone / "published") == ([".lease-state/f_m/checkpoint.pt"], [])
    assert lease_state.ready(clone, clone / "published/f_m")

    del pointer["git"]  # a pointer written before checkpoints were kept in the history, on a machine that is gone
    (clone / "published/f_m/checkpoint.json").write_text(json.dumps(pointer))
    (clone / ".lease-state/f_m/checkpoint.pt").unlink()
    restored, lost = lease_state.restore(clone, clone / "published")
    assert restored == [] and len(lost) == 1
    assert "f_m/checkpoint.json: .lease-state/f_m/checkpoint.pt is not here and was never kept in git's history" in lost[0]


def test_publishing_drops_both_pointers_and_only_the_lease_checkpoint(tmp_path):
    repo = project(tmp_path / "repo")
    folder = repo / "published" / "f_m"
    ckpt = checkpoint(repo / "models" / "f_m" / "checkpoint.pt", 7)
    lease_state.save(repo, repo / "published", (folder, ckpt, []))
    lease_state.keep(repo, folder, ckpt, 7)  # a GPU session took the run over
    assert sorted(lease_state.drop(repo, folder)) == [".lease-state/f_m/checkpoint.pt", "checkpoint.json", "cpu_checkpoint.json"]
    assert ckpt.is_file()  # the CPU run's own checkpoint stays with its run in models/
