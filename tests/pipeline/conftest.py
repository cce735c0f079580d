"""One tiny run of the whole workflow, shared by every pipeline test that only reads its outputs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from workflow_helpers import TINY, TINY_TARGETS, snakemake


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    work = tmp_path_factory.mktemp("wf")
    run = snakemake(work, TINY, *TINY_TARGETS)
    assert run.returncode == 0, run.stderr[-4000:]
    return work, run
