"""Where and how training and evaluation run: device choice, seeds, RNG state, DDP, peak memory.

* Device ``auto`` picks CUDA, then Apple MPS, then the CPU; an explicit device that is not there
  is a :class:`~opflow.data.errors.ConfigError` (not a silent fallback).
* Seeding covers python's ``random``, numpy's global generator and torch (CPU and CUDA); the RNG
  states are saved in checkpoints so that a resumed run continues the same random stream.
* Distributed data parallel runs under ``torchrun``: ``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` in the
  environment select it; the backend is NCCL on CUDA and gloo on the CPU.
* Peak memory: on CUDA the allocator's ``max_memory_allocated``; on the CPU the peak of the
  resident set size above its value at the start, sampled by a thread every millisecond (plus the
  kernel's high-water mark when the process reaches a new peak).
* The CPU's heap (:func:`keep_cpu_heap`): on Linux with glibc, a training or evaluation on the CPU keeps the memory
  that torch frees for its next tensors instead of handing it back to the kernel, which then has to fault every page
  in again (about 10^5 page faults per training step of FNO on Darcy 85; the step 1.55x shorter without them).
* The CPU's subnormal numbers (:func:`flush_cpu_denormals`): a training or evaluation on the CPU flushes float values
  below the smallest normal one (1.2e-38 in float32) to zero; a trained FNO's step on Darcy 141 was 2.67x longer
  with them (weights of unused units that weight decay had shrunk into that range).
* One writer per output folder: :class:`FolderLock` takes ``fcntl.flock`` on ``<folder>/.lock``
  without waiting; a second training into the same folder fails at once with
  :class:`FolderBusyError` (the lock goes with the process, so a killed run never leaves a stale one).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import platform
import random
import resource
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from opflow.data.errors import ConfigError


def choose_device(spec: str = "auto") -> torch.device:
    """``auto`` = cuda > mps > cpu; ``cpu``, ``mps``, ``cuda``, ``cuda:N`` must exist."""
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "mps":
        if not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
            raise ConfigError("device: 'mps' asked for but this machine has no Apple MPS device; use 'auto' or 'cpu'")
        return torch.device("mps")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device: {spec!r} asked for but torch sees no CUDA device here; use 'auto' or 'cpu'")
        dev = torch.device(spec)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device: {spec!r} but only {torch.cuda.device_count()} CUDA device(s) exist")
        return dev
    raise ConfigError(f"device: {spec!r} must be auto, cpu, mps, cuda or cuda:N")


def seed_everything(seed: int) -> None:
    """Seed python ``random``, numpy's global generator and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """The global RNG states (python, numpy, torch CPU and CUDA), for checkpoints."""
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def cpu_identity() -> dict[str, Any]:
    """What tells two machines apart when their names do not (a VM's CPU reads "AMD EPYC"): ``/proc/cpuinfo``'s model
    name, family, model and stepping, whether it has AVX-512 (torch's CPU kernels dispatch to it), and the L2 / L3
    cache sizes the kernel reports for CPU 0. The same code's trainer steps measured 2.5-3x longer on a Zen 3
    without AVX-512 (family 25, model 1, 32 MiB L3) than on the AVX-512 machine of the session before, whose
    identity was not recorded. Empty where there is no ``/proc/cpuinfo`` (not Linux)."""
    out: dict[str, Any] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first CPU's block
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key in ("model name", "cpu family", "model", "stepping"):
                    out[key.replace(" ", "_")] = int(value) if value.isdigit() else value
                elif key == "flags":
                    out["avx512"] = "avx512f" in value.split()
    except OSError:
        return out
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        if kind in ("Unified", "Data") and level in ("2", "3"):
            out[f"l{level}"] = size
    return out


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (a cgroup's cpuset, ``taskset``), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity masks on this platform (macOS)
        return os.cpu_count() or 1


def set_threads(n: int | None) -> None:
    """Respect the scheduler's thread budget (Snakemake ``threads``; ``training.threads`` for a hand run), at most
    :func:`available_cpus`. More threads than cores make every parallel region of torch's OpenMP wait for a thread
    that is off its core: on 2 cores the quick profile's ONO epoch took 4.7 s with 4 threads, 2.2 s with 2."""
    if n is not None and n >= 1:
        torch.set_num_threads(min(int(n), available_cpus()))


#: glibc's ``mallopt`` parameters (``malloc.h``)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
#: the environment variable whose value ``default`` leaves glibc's heap as it is (:func:`keep_cpu_heap`)
CPU_HEAP_ENV = "OPFLOW_CPU_HEAP"


def _glibc() -> Any:
    """The C library when it is glibc on Linux (its ``mallopt`` and ``malloc_trim`` typed), else None."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def trim_cpu_heap() -> bool:
    """Hand the heap's free memory back to the kernel (glibc's ``malloc_trim(0)``), so that the resident set size
    counts only what is in use: :class:`PeakMemory` does it before it reads its baseline. False: not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def keep_cpu_heap() -> bool:
    """Make glibc's ``malloc`` keep the memory torch frees, for the next tensors of a CPU training or evaluation.

    By default glibc serves every allocation above its mmap threshold (128 KiB, rising with use to at most 32 MiB)
    with a fresh ``mmap`` and gives it back on ``free``, and it returns the top of its heap to the kernel once more
    than twice that is free. A training step allocates and frees the same large activations every step, so the
    kernel zero-fills and faults in every page of them again: about 1.1-1.5 x 10^5 minor page faults per step of FNO
    on Darcy 85 (batch 20, 2 threads) and 0.8-1.0 x 10^5 for the inverse GT at 141, whose activations of
    4 x 192 x 141^2 floats (61 MB) are above any threshold. Here ``mallopt(M_MMAP_MAX, 0)`` serves every allocation
    from the heap and ``mallopt(M_TRIM_THRESHOLD, 2^31 - 1)`` keeps its free top: the same steps then fault
    1,100-7,500 pages, and were 1.55x (FNO) and 1.18-1.20x (the inverse GT, FT and GT at 141) shorter
    (``benchmarks/cpu_heap.py``, docs/costs.md). The resident memory stays at the process's peak until it ends, as a caching allocator's does.
    The values computed are unchanged: only where the memory comes from differs.

    The kept memory counts in the resident set size, so a measurement of peak memory trims the heap first
    (:func:`trim_cpu_heap`). The same as starting the process with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``; jemalloc or
    tcmalloc preloaded (PyTorch's CPU tuning guide) would do as well, and need a library that is not a dependency
    here. ``OPFLOW_CPU_HEAP=default`` in the environment leaves glibc as it is. Returns whether it was applied
    (False: that variable, or not glibc: macOS, musl).
    """
    setting = os.environ.get(CPU_HEAP_ENV, "keep")
    if setting not in ("keep", "default"):
        raise ConfigError(f"{CPU_HEAP_ENV}={setting!r} in the environment: use 'keep' (the default) or 'default' (glibc's own heap)")
    libc = _glibc() if setting == "keep" else None
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


#: the environment variable whose value ``keep`` leaves the CPU's subnormal arithmetic on (:func:`flush_cpu_denormals`)
CPU_DENORMALS_ENV = "OPFLOW_CPU_DENORMALS"


def flush_cpu_denormals() -> bool:
    """Make the CPU treat subnormal float inputs as zero and round subnormal results to zero (x86's DAZ and FTZ
    flags, ``torch.set_flush_denormal``), for a training or evaluation on the CPU.

    A subnormal float32 (magnitude below 1.18e-38) takes a slow path through the processor on every operation that
    reads or makes one, tens of times the cost of a normal one. Training makes them: weight decay shrinks the weights
    of units that no longer get a gradient (dead ReLU units) geometrically towards zero, and Adam's moments of such
    weights decay the same way. The checkpoint of FNO2d 1cycle on Darcy 141 at epoch 58 held 352 subnormal weights
    of the 4,096 of its projection layer, which is applied at every grid point; the training step from that state
    took 448 ms, and 168 ms with the flags, as long as a step from fresh weights (169 ms)
    (``benchmarks/cpu_denormals.py``, docs/costs.md). The flags are per thread, and torch's worker threads take
    them from the thread that starts them: so call this before any parallel CPU work of the process (the trainer
    and the evaluation do it before they build anything); where worker threads already run, only the calling
    thread flushes. The values computed differ only where a number below 1.2e-38
    is replaced by zero, a change of at most 1.2e-38 to that number. CUDA runs are untouched: the flags are the
    CPU's. The setting is process-wide.

    ``OPFLOW_CPU_DENORMALS=keep`` in the environment leaves the CPU's subnormal arithmetic on. Returns whether the
    flags were set (False: that variable, or a CPU without them).
    """
    setting = os.environ.get(CPU_DENORMALS_ENV, "flush")
    if setting not in ("flush", "keep"):
        raise ConfigError(f"{CPU_DENORMALS_ENV}={setting!r} in the environment: use 'flush' (the default) or 'keep' (subnormal numbers kept)")
    return setting == "flush" and bool(torch.set_flush_denormal(True))


def warn_ignored(what: str, device: torch.device) -> None:
    warnings.warn(f"{what} needs a CUDA device; ignored on {device.type}", RuntimeWarning, stacklevel=2)


#: the C++ compilers that torch.compile's CPU backend (inductor) can build its kernels with
CPU_COMPILERS = ("g++", "c++", "clang++")


def compile_unsupported(device: torch.device) -> str | None:
    """Why ``torch.compile`` (inductor) cannot compile for ``device`` here (None: it can).

    CUDA always can (Triton ships with torch). A CPU needs a C++ compiler (``$CXX`` or one of
    :data:`CPU_COMPILERS` on the PATH); other devices (MPS) are not supported by opflow's training."""
    import shutil

    if device.type == "cuda":
        return None
    if device.type == "cpu":
        cxx = os.environ.get("CXX")
        if (cxx and shutil.which(cxx)) or any(shutil.which(c) for c in CPU_COMPILERS):
            return None
        return f"torch.compile on the CPU builds C++ kernels and no C++ compiler was found ($CXX, {', '.join(CPU_COMPILERS)})"
    return f"torch.compile is not supported on {device.type} by opflow's training"


# --------------------------------------------------------------------------- distributed


@dataclass(frozen=True)
class DistInfo:
    """This process's place in a torchrun job (world size 1 when not distributed)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_from_env() -> DistInfo:
    """Read ``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` set by torchrun (defaults: one process)."""
    ws = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    return DistInfo(ws, rank, local)


def init_distributed(device_spec: str) -> tuple[DistInfo, torch.device]:
    """Pick the device and, under torchrun, join the process group (NCCL on CUDA, gloo on CPU).

    With ``device: auto`` or ``cuda`` under torchrun, process ``LOCAL_RANK`` takes ``cuda:LOCAL_RANK``.
    """
    info = dist_from_env()
    device = choose_device(device_spec)
    if not info.distributed:
        return info, device
    import torch.distributed as dist

    if device.type == "cuda":
        if device_spec in ("auto", "cuda"):
            device = torch.device("cuda", info.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    elif device.type == "cpu":
        backend = "gloo"
    else:
        raise ConfigError(f"distributed training on {device.type} is not supported; use cuda (nccl) or cpu (gloo)")
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"backend": backend}
        if backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
    return info, device


def barrier(info: DistInfo) -> None:
    if info.distributed:
        import torch.distributed as dist

        dist.barrier()


def shutdown_distributed(info: DistInfo) -> None:
    if info.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


# --------------------------------------------------------------------------- memory


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return _maxrss_bytes()


def _maxrss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024


class PeakMemory:
    """Context manager measuring peak memory of the code inside it on ``device``.

    After the block, :attr:`bytes` holds the peak and :attr:`kind` says what was measured:
    ``cuda_max_allocated`` (torch allocator peak on that device, reset at entry) or
    ``cpu_peak_rss_delta`` (peak resident set size minus the size at entry).
    """

    def __init__(self, device: torch.device, interval_s: float = 1e-3) -> None:
        self.device = device
        self.interval_s = interval_s
        self.bytes = 0
        self.kind = "cuda_max_allocated" if device.type == "cuda" else "cpu_peak_rss_delta"
        self._stop = threading.Event()
        self._peak = 0

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._peak = max(self._peak, _rss_bytes())

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            trim_cpu_heap()  # the freed memory a kept heap holds is not in use: out of the baseline
            self._base = _rss_bytes()
            self._base_max = _maxrss_bytes()
            self._peak = self._base
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = int(torch.cuda.max_memory_allocated(self.device))
            return
        self._stop.set()
        self._thread.join()
        peak = max(self._peak, _rss_bytes())
        max_now = _maxrss_bytes()
        if max_now > self._base_max:  # a new process high-water mark was reached inside the block
            peak = max(peak, max_now)
        self.bytes = max(0, int(peak - self._base))

    def as_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "mib": round(self.bytes / 2**20, 3), "kind": self.kind, "device": str(self.device)}


# --------------------------------------------------------------------------- output folder lock


class FolderBusyError(ConfigError):
    """Another process holds the output folder's lock (another training writes there)."""


class FolderLock:
    """Exclusive, non-blocking ``flock`` on ``<folder>/.lock`` for as long as a run writes there.

    The holder's pid is written into the file for the message of whoever is refused. The file is
    removed on release (while still locked); :meth:`acquire` therefore checks that the file it
    locked is still the one at the path, and retries otherwise, so two runs never both hold it.
    """

    NAME = ".lock"

    def __init__(self, folder: str | os.PathLike[str], what: str = "training") -> None:
        self.folder = Path(folder)
        self.path = self.folder / self.NAME
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = self._holder(fd)
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise FolderBusyError(
                    f"{self.folder}: another {self.what}{holder} holds this folder (lock {self.path}); "
                    "wait for it to finish or use another output folder"
                ) from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous holder removed the file between our open and flock: again
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    @staticmethod
    def _holder(fd: int) -> str:
        with contextlib.suppress(OSError, ValueError):
            pid = int(os.pread(fd, 32, 0).decode().strip() or "x")
            return f" (pid {pid})"
        return ""

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str], info: DistInfo, what: str = "training") -> Any:
    """:class:`FolderLock` taken by rank 0 of a (possibly distributed) job; every rank fails if it is busy."""
    lock = FolderLock(folder, what)
    error = ""
    if info.is_main:
        try:
            lock.acquire()
        except FolderBusyError as e:
            error = str(e)
    if info.distributed:
        import torch.distributed as dist

        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error:
        raise FolderBusyError(error)
    try:
        yield lock
    finally:
        lock.release()
