"""docs/adding-a-solver.md: its example, copied out of the page, runs end to end.

The page's three blocks (the solver module, the config, the commands) are written into a copy of the
repository's code, and the commands run there as a user would run them: two generation shards, a
merge, the dataset at two resolutions, two epochs of a small FNO, the evaluation with its zero-shot
resolution. So the page cannot drift from the code.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-a-solver.md"
#: what the workflow needs of a checkout (the code, the rules, the shipped configs)
CODE = ("Snakefile", "rules", "config", "opflow", "solvers", "meshes", "envs")


def blocks(text: str) -> dict[str, str]:
    """The page's fenced blocks by their first line (``# solvers/heat1d.py``, ``# heat.yaml``, ``# run``)."""
    out = {}
    for body in re.findall(r"^```[a-z]*\n(.*?)^```$", text, re.S | re.M):
        first = body.split("\n", 1)[0]
        if first.startswith("# "):
            out[first[2:].strip()] = body
    return out


def test_the_page_names_its_three_blocks() -> None:
    found = blocks(PAGE.read_text())
    assert {"solvers/heat1d.py", "heat.yaml", "run"} <= set(found)
    assert "seed:" in found["heat.yaml"] and "period" in found["solvers/heat1d.py"]


def test_the_heat_solver_of_the_page_runs_end_to_end(tmp_path: Path) -> None:
    found = blocks(PAGE.read_text())
    repo = tmp_path / "repo"
    for name in CODE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            repo.mkdir(exist_ok=True)
            shutil.copy(src, repo / name)
    (repo / "solvers" / "heat1d.py").write_text(found["solvers/heat1d.py"])
    (repo / "heat.yaml").write_text(found["heat.yaml"])

    env = {**os.environ, "PYTHONPATH": str(repo)}
    for line in found["run"].splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        argv = shlex.split(line)
        # the page's `snakemake` / `opflow`, run by this interpreter on the copy
        argv = [sys.executable, "-m", {"snakemake": "snakemake", "opflow": "opflow.cli"}[argv[0]], *argv[1:]]
        run = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{line}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"

    res = json.loads((repo / "heat/results/heat_tiny_fno.json").read_text())
    assert res["dataset"] == "heat" and res["model"] == "tiny_fno" and res["epochs"] == 2
    assert np.isfinite(res["metrics"]["rel_l2_mean"]) and "128" in res["zero_shot"]
    assert (repo / "heat/data/heat/r64.nc").is_file() and (repo / "heat/data/heat/r128.nc").is_file()

    # the data are the exact solution: every Fourier mode of u is that of u0 times exp(-nu w^2 T)
    import netCDF4

    with netCDF4.Dataset(repo / "heat/data/sources/heat1d.nc") as f:
        u0, u, x = (np.asarray(f[v][:], dtype=np.float64) for v in ("u0", "u", "x"))
        assert f["x"].period == 2 * np.pi and f["x"].grid_type == "periodic"
    assert u0.shape == (60, 128)
    k = np.fft.rfftfreq(128, d=x[1] - x[0]) * 2 * np.pi
    decay = np.exp(-0.05 * k**2 * 1.0)
    np.testing.assert_allclose(np.fft.rfft(u, axis=1), np.fft.rfft(u0, axis=1) * decay, atol=1e-4)
