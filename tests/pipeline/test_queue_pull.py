"""scripts/queue_pull.sh: after a lease of the queue, an unfinished pair's state goes to published/<pair>/ with a page
that says where it stands, for the next lease to resume."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

from repo_copy import ROOT, repository_copy


def _state(out: Path, pair: str, epochs: int) -> None:
    """The files a queue command sends back: state.tgz.part-* holding models/<pair>/ of a training stopped by the deadline."""
    curves = [{"epoch": e, "train_loss": 1.0 / e, "test_rel_l2": 0.5 / e, "lr": 1e-3, "epoch_time_s": 4.0, "elapsed_s": 4.0 * e} for e in range(1, epochs + 1)]
    log = "".join(f"2026-11-27T10:0{e}:00+00:00 INFO {pair} epoch {e}/100  train rel_l2 1  test rel L2 1  lr 0.001  4.0s\n" for e in range(1, epochs + 1))
    files = {f"./models/{pair}/checkpoint.pt": b"not a real checkpoint", f"./models/{pair}/curves.json": json.dumps(curves).encode(),
             f"./models/{pair}/train.log": log.encode(), f"./models/{pair}/curves.csv": b"epoch\n"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out.mkdir()
    (out / "state.tgz.part-0").write_bytes(buf.getvalue())


def test_an_unfinished_pair_is_kept_with_its_checkpoint_and_a_page_of_where_it_stands(tmp_path: Path) -> None:
    repo, env = repository_copy(tmp_path)  # the script writes published/ and .device-state of its own tree
    pair = "darcy141_gt"
    shutil.rmtree(repo / "published" / pair, ignore_errors=True)  # a fresh pair here: not the page of the tree's own run of it
    real = ROOT / "published" / pair  # this tree's own files of the pair (a page while the CPU trains it), left alone
    before = {f.name: f.read_bytes() for f in real.iterdir()} if real.is_dir() else None
    _state(tmp_path / "files_at", pair, epochs=3)
    run = subprocess.run([str(repo / "scripts/queue_pull.sh"), str(tmp_path / "files_at")], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    folder = repo / "published" / pair
    assert not (folder / "checkpoint.pt").exists()  # not among the tracked files: out of the tree, with a pointer
    assert (repo / ".lease-state" / pair / "checkpoint.pt").read_bytes() == b"not a real checkpoint"
    pointer = json.loads((folder / "checkpoint.json").read_text())
    kept = subprocess.run(["git", "rev-parse", "HEAD~1"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    assert pointer == {"file": f".lease-state/{pair}/checkpoint.pt", "bytes": 21, "sha256": hashlib.sha256(b"not a real checkpoint").hexdigest(), "epochs_done": 3,
                       "git": f"{kept}:.lease-state/{pair}/checkpoint.pt"}  # and in git's history, for a later session on a new machine
    blob = subprocess.run(["git", "cat-file", "blob", pointer["git"]], cwd=repo, capture_output=True, check=True).stdout
    assert blob == b"not a real checkpoint"
    ignored = subprocess.run(["git", "check-ignore", "-q", f".lease-state/{pair}/checkpoint.pt"], cwd=repo)
    assert ignored.returncode == 0
    assert json.loads((folder / "curves.json").read_text())[-1]["epoch"] == 3
    page = (folder / "README.md").read_text()
    assert page.startswith(f"# {pair} at the paper protocol: not finished\n") and "`checkpoint.json` points to the checkpoint the next lease" in page
    assert "| epochs done | 3 of 100, the last one finished 2026-11-27T10:03:00+00:00 " in page
    assert "| left | 97 epochs: about 0.1 h at that median" in page
    assert f"| {pair.replace('_', '/', 1)} | in progress (3 of 100 epochs) |" in run.stdout  # the queue's new state
    assert ({f.name: f.read_bytes() for f in real.iterdir()} if real.is_dir() else None) == before
