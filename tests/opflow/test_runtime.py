"""Device choice, RNG state round trips, torchrun environment and the CPU peak-memory probe."""

from __future__ import annotations

import mmap
import os
import random
import time

import numpy as np
import pytest
import torch

from opflow.data.errors import ConfigError
from opflow import runtime
from opflow.runtime import PeakMemory, available_cpus, choose_device, dist_from_env, rng_state, seed_everything, set_rng_state, set_threads


def test_device_choice() -> None:
    assert choose_device("cpu") == torch.device("cpu")
    auto = choose_device("auto")
    assert auto.type == ("cuda" if torch.cuda.is_available() else auto.type)
    if not torch.cuda.is_available():
        assert auto.type in ("cpu", "mps")
        with pytest.raises(ConfigError, match="device: 'cuda:1' asked for but torch sees no CUDA device here; use 'auto' or 'cpu'"):
            choose_device("cuda:1")
    with pytest.raises(ConfigError, match="must be auto, cpu, mps, cuda or cuda:N"):
        choose_device("tpu")


def test_rng_state_round_trip_restores_every_stream() -> None:
    seed_everything(11)
    state = rng_state()
    first = (random.random(), np.random.rand(), torch.rand(3))
    set_rng_state(state)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[0] == again[0] and first[1] == again[1] and torch.equal(first[2], again[2])
    seed_everything(12)
    assert torch.rand(1).item() != first[2][0].item()


def test_torchrun_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    info = dist_from_env()
    assert (info.world_size, info.rank, info.distributed, info.is_main) == (1, 0, False, True)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    info = dist_from_env()
    assert (info.world_size, info.rank, info.local_rank, info.distributed, info.is_main) == (4, 3, 1, True, False)


def test_cpu_peak_memory_sees_a_temporary_allocation() -> None:
    with PeakMemory(torch.device("cpu")) as mem:
        # 64 MiB of fresh pages, touched: an anonymous mapping of its own, not malloc, whose freed and
        # still-resident heap (an earlier test's, e.g. with mmap turned off in malloc by an MPI library)
        # could serve the array without any growth of the resident set
        region = mmap.mmap(-1, 64 * 2**20)
        a = np.frombuffer(region, dtype=np.uint8)
        a[::4096] = 1
        # the RSS is sampled by a thread every millisecond: on a loaded machine it may not run while
        # the array lives for the ~30 ms of the lines above, so hold it until a sample has seen it
        deadline = time.monotonic() + 5.0
        while mem._peak - mem._base < 48 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.005)
        del a
        region.close()
    assert mem.kind == "cpu_peak_rss_delta"
    assert 48 * 2**20 < mem.bytes < 256 * 2**20, mem.bytes
    assert mem.as_dict()["mib"] == pytest.approx(mem.bytes / 2**20, abs=1e-3)


def test_threads_are_at_most_the_cpus_of_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """training.threads: 4 (the default) on a 2-core machine ran the quick ONO epoch 2.1x slower than 2 threads."""
    before = torch.get_num_threads()
    assert 1 <= available_cpus() <= (os.cpu_count() or 1)
    try:
        monkeypatch.setattr(runtime, "available_cpus", lambda: 2)
        set_threads(4)
        assert torch.get_num_threads() == 2
        set_threads(1)
        assert torch.get_num_threads() == 1
        set_threads(None)  # no budget: left as it is
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
