"""Device choice, RNG state round trips, torchrun environment and the CPU peak-memory probe."""

from __future__ import annotations

import mmap
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

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


#: a child process: page faults of four 64 MiB tensors made and freed, before and after keep_cpu_heap()
HEAP_PROBE = """
import resource, torch
from opflow.runtime import keep_cpu_heap

def faults():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        x = torch.ones(16 << 20)
        del x
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

before = faults()
applied = keep_cpu_heap()
faults()  # the heap grows once to hold the tensor
print(applied, before, faults())
"""
GLIBC = runtime._glibc() is not None


def heap_probe(setting: str) -> tuple[str, int, int]:
    env = os.environ | {runtime.CPU_HEAP_ENV: setting}
    out = subprocess.run([sys.executable, "-c", HEAP_PROBE], capture_output=True, text=True, check=True, env=env).stdout.split()
    return out[0], int(out[1]), int(out[2])


@pytest.mark.skipif(not GLIBC, reason="keep_cpu_heap tunes glibc's malloc; this C library is not glibc")
def test_a_kept_heap_serves_the_next_tensors_without_page_faults() -> None:
    """glibc maps a 64 MiB tensor afresh each time and the kernel faults its 16,384 pages in again (fewer with
    transparent huge pages); with the heap kept, the freed memory serves the next one."""
    applied, before, after = heap_probe("keep")
    pages = 4 * (64 << 20) // resource.getpagesize()
    assert applied == "True"
    assert after < 0.01 * pages, (before, after)


@pytest.mark.skipif(not GLIBC, reason="keep_cpu_heap tunes glibc's malloc; this C library is not glibc")
def test_the_environment_can_leave_glibc_as_it_is() -> None:
    applied, before, after = heap_probe("default")
    assert applied == "False"
    assert after >= 0.5 * before > 0, (before, after)


#: a child process: 2 threads multiply 40,000 rows by a weight whose first column is subnormal (stored, as a
#: trained checkpoint holds it), after flush_cpu_denormals() was called before any parallel work
DENORMAL_PROBE = """
import torch
from opflow.runtime import flush_cpu_denormals
applied = flush_cpu_denormals()
torch.set_num_threads(2)
w = torch.ones(8, 4)
w[:, 0] = 1e-39
y = torch.ones(40_000, 8) @ w
print(applied, int((y[:, 0] != 0).sum()), float(y[:, 1].min()))
"""


def denormal_probe(setting: str) -> tuple[str, int, float]:
    env = os.environ | {runtime.CPU_DENORMALS_ENV: setting}
    out = subprocess.run([sys.executable, "-c", DENORMAL_PROBE], capture_output=True, text=True, check=True, env=env).stdout.split()
    return out[0], int(out[1]), float(out[2])


@pytest.mark.skipif(not torch.set_flush_denormal(False), reason="this CPU has no flush-to-zero flags")
def test_subnormal_numbers_read_and_come_out_as_zero_on_every_thread_after_the_flush() -> None:
    """The flags are per thread; torch's worker threads take them from the thread that starts them, so the product's
    rows computed on the second thread are zero too (8 x 1e-39 would be a subnormal 8e-39 without the flags)."""
    applied, nonzero, normal = denormal_probe("flush")
    assert applied == "True" and nonzero == 0 and normal == 8.0


def test_the_environment_can_keep_subnormal_arithmetic() -> None:
    applied, nonzero, normal = denormal_probe("keep")
    assert applied == "False" and nonzero == 40_000 and normal == 8.0


def test_an_unknown_denormal_setting_is_refused_naming_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.CPU_DENORMALS_ENV, "zero")
    with pytest.raises(ConfigError, match="OPFLOW_CPU_DENORMALS='zero' in the environment: use 'flush' \\(the default\\) or 'keep'"):
        runtime.flush_cpu_denormals()


def test_an_unknown_heap_setting_is_refused_naming_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.CPU_HEAP_ENV, "off")
    with pytest.raises(ConfigError, match="OPFLOW_CPU_HEAP='off' in the environment: use 'keep' \\(the default\\) or 'default'"):
        runtime.keep_cpu_heap()


PEAK_AFTER_KEPT_HEAP = """
import time, torch
from opflow.runtime import PeakMemory, keep_cpu_heap

assert keep_cpu_heap()
for _ in range(3):  # 64 MiB made and freed until the heap serves it again from memory kept resident
    x = torch.ones(16 << 20)
    del x
with PeakMemory(torch.device("cpu")) as mem:
    y = torch.ones(16 << 20)
    deadline = time.monotonic() + 5.0
    while mem._peak - mem._base < 48 * 2**20 and time.monotonic() < deadline:
        time.sleep(0.005)
    del y
print(mem.bytes)
"""


@pytest.mark.skipif(not GLIBC, reason="keep_cpu_heap tunes glibc's malloc; this C library is not glibc")
def test_peak_memory_counts_a_tensor_that_reuses_the_kept_heap() -> None:
    """The heap is trimmed before the baseline is read: without that, the 64 MiB tensor reuses memory already
    resident and the peak reads about 0 (28 KiB when the trim was taken out)."""
    out = subprocess.run([sys.executable, "-c", PEAK_AFTER_KEPT_HEAP], capture_output=True, text=True, check=True)
    assert 48 * 2**20 < int(out.stdout.split()[-1]) < 256 * 2**20, out.stdout


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


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo (not Linux)")
def test_the_cpu_identity_names_the_processor_and_whether_it_has_avx512():
    """Two VMs both reading "AMD EPYC" ran the same training steps 2.5-3x apart: the identity tells them apart."""
    from opflow.runtime import cpu_identity

    ident = cpu_identity()
    assert isinstance(ident["model_name"], str) and ident["model_name"]
    assert isinstance(ident["avx512"], bool)
    flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    assert ident["avx512"] == ("avx512f" in flags.split())
