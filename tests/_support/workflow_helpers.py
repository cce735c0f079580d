"""The one way the tests start Snakemake, and the tiny configs of the pipeline tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROFILES = {"default": [ROOT / "config/default.yaml"], "quick": [ROOT / "config/default.yaml", ROOT / "config/quick.yaml"]}

# Deep-merged over config/default.yaml + config/quick.yaml: the real 421 x 421 FD solve, 24 samples
# in 3 shards, a tiny ONO trained for 2 epochs; and a tiny Lorenz-63 set of its own with two of the
# discretisation sets (fewer jobs than all six), trained for one epoch.
TINY: dict[str, Any] = {
    "root": "out",
    "sources": {
        "darcy_piecewise": {"n_samples": 24, "shard_size": 8},
        "lorenz63": {"n_samples": 40, "shard_size": 40},
        "lorenz63_test_dt00075": {"n_samples": 8, "params": {"index_offset": 32}},
        "lorenz63_test_dt001": {"n_samples": 8, "params": {"index_offset": 32}},
    },
    "datasets": {
        "darcy": {"resolution": 43, "train": 16, "test": 8},
        "darcy141": {"train": 16, "test": 8},
        "darcy211": {"train": 16, "test": 8},
        "darcy43": {"train": 16, "test": 8, "zero_shot": [61, 85]},
        # every other dataset of the shrunk Darcy source shrinks with it (the config check insists)
        **{f"darcy_inverse{r}{k}_eps{e}": {"train": 16, "test": 8} for r in (141, 211) for k in ("", "_coarse", "_fine") for e in ("0", "0.01", "0.1")},
        "lorenz63": {"train": 32, "test": 8},
        "lorenz63_b": {"train": 32, "test": 8},
        "lorenz_tiny": {
            "source": "lorenz63", "train": 32, "test": 8, "task": {"inputs": ["x", "y0", "z0"], "outputs": ["y", "z"]},
            "view": {"kind": "series"}, "eval_sets": {"dt0.0075": "lorenz63_test_dt00075", "dt0.01": "lorenz63_test_dt001"},
            "training": {"epochs": 1, "batch_size": 8, "threads": 1},
        },
    },
    "training": {"epochs": 2, "batch_size": 4, "threads": 1},
    "models": {
        "ono": {"width": 16, "n_layers": 1, "n_heads": 2, "ortho_dim": 4, "attention": "linear"},
        "tno": {"width": 8, "n_layers": 1, "n_heads": 2, "ffn_dim": 8},
    },
    "evaluate": {"threads": 1},
}  # fmt: skip
TINY_TARGETS = ("out/results/darcy43_ono.json", "out/data/darcy/r43.nc", "out/results/lorenz_tiny_tno.json")


def snakemake(workdir: Path, config: Mapping[str, Any] | None, *targets: str, profile: str = "quick", extra: Sequence[str] = (), timeout: int = 900, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the workflow in ``workdir`` with ``profile``'s config files plus ``config`` (deep-merged last); ``env``
    adds to this process's environment."""
    files = [str(p) for p in PROFILES[profile][1:]]
    if config is not None:
        cfg = workdir / "test-config.yaml"
        cfg.write_text(yaml.safe_dump(dict(config)))
        files.append(str(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "--cores", "2", *extra]
    if files:
        cmd += ["--configfile", *files]
    cmd += ["--", *targets]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env} if env else None)
