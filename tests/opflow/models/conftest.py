"""Shared set-up of the model tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _float64_one_thread():
    """Model tests compute in float64 (tight tolerances) on one thread (tiny tensors: threads only
    add contention on a shared machine); the defaults are restored afterwards."""
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    yield
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)
