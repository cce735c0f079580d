"""Thread limits for one generation job (Snakemake gives each job its own ``threads``)."""

from __future__ import annotations

import os


def limit_threads(n: int) -> None:
    """Cap BLAS/OpenMP/torch threads at ``n`` so parallel jobs do not oversubscribe the cores.

    OpenBLAS reads its variable once, when numpy loads: call this before importing numpy
    (``python -m solvers`` does). torch, when already imported, is capped directly.
    """
    n = max(1, int(n))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
