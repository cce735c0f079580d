"""What each cluster job asks for: memory estimated from the run, capped at the site's limits.

The site (``profiles/slurm/site.yaml``, read by ``rules/common.smk``; :class:`SiteLimits`) says
once what the cluster allows: the memory of its largest node (``max_mem_mb``, or ``auto``: asked
of ``sinfo``), the partition for CPU jobs and for GPU jobs, the account. Every rule's ``mem_mb``
is then the estimate below, never more than ``max_mem_mb``; the partition and account become the
``slurm_partition`` / ``slurm_account`` resources of snakemake-executor-plugin-slurm.

Memory of a training job (``train_mem_mb``), host RAM in MiB::

    need = base + 3 D + 32 P / 2**20          ask = round_up(1.5 need, 256), at most max_mem_mb

* ``base``: the Python process with torch, numpy and netCDF4 imported (about 520 MiB measured on
  the CPU) and its allocator's slack: :data:`BASE_CPU_MB`; a job with GPUs also maps the CUDA
  runtime into host memory: :data:`BASE_GPU_MB`;
* ``D``: the dataset in memory, in MiB: every variable of the data file(s) at its stored type (the
  uncompressed size, read from the NetCDF header: :func:`data_bytes`), three times (the arrays read
  from the file, the normalised float tensors, one batch copy in transit);
* ``P``: the model's parameter count (:func:`parameter_count`: the network built on PyTorch's
  ``meta`` device, no memory), 32 bytes each: weights, gradients, AdamW's two moments, and the
  state dict copied into a checkpoint;
* ``1.5``: the margin for what the formula leaves out (activations of a CPU training, the
  evaluation of the test split between epochs).

Evaluation (``eval_mem_mb``) is the same with 8 bytes per parameter (weights and one copy: no
gradients, no optimizer) and ``D`` over every file it reads (test set, zero-shot grids, extra
evaluation sets). A merge or derive job (``io_mem_mb``) holds its input once, and one output of the
same size: ``round_up(1.5 (BASE_IO_MB + 2 D), 256)``. A shard job's memory depends on the solver,
not on anything known before it runs: :data:`SHARD_MEM_MB` (the value the profile asked for every
shard before), capped at the site's limit like the rest.

The estimate only needs files that exist when the job is submitted (its inputs). In a dry run they
usually do not yet, so the rules report ``mem_mb=<TBD>`` for those jobs (Snakemake's convention):
the value is computed when the job is ready to go.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ValidationError
from pydantic_core import PydanticCustomError

from opflow.data.errors import ConfigError
from opflow.schema import PosInt, Str, StrictModel, format_error

#: the site file, relative to the repository root (rules/common.smk)
SITE_FILE = "profiles/slurm/site.yaml"
#: MiB of a CPU job's process before any data (torch + numpy + netCDF4 imported: ~520 MiB measured)
BASE_CPU_MB = 1024
#: MiB of a GPU job's process on the host (the CUDA runtime and its libraries are mapped there too)
BASE_GPU_MB = 4096
#: MiB of a merge or derive job's process (numpy + netCDF4, no torch)
BASE_IO_MB = 512
#: a shard job's request (solver-dependent; the profile's former fixed value)
SHARD_MEM_MB = 8000
#: bytes per parameter held by a training (weights, gradients, two AdamW moments, checkpoint copy)
TRAIN_BYTES_PER_PARAM = 32
#: bytes per parameter held by an evaluation (weights and one copy)
EVAL_BYTES_PER_PARAM = 8
#: copies of the data a training or evaluation holds (file arrays, normalised tensors, a batch)
DATA_COPIES = 3
#: safety factor over the estimate; requests are rounded up to a multiple of ROUND_MB
MARGIN = 1.5
ROUND_MB = 256
_MIB = 2**20


def _mem_limit(value: Any) -> Any:
    if value is None or value == "auto" or (type(value) is int and value >= 1):
        return value
    raise PydanticCustomError("mem_limit", "{value} must be the largest node's memory in MB (an integer >= 1), auto (ask sinfo) or null (no limit)", {"value": repr(value)})


#: a memory limit in MB, ``auto`` or ``None``
MemLimit = Annotated[PosInt | Literal["auto"] | None, BeforeValidator(_mem_limit)]


class SiteLimits(StrictModel):
    """``profiles/slurm/site.yaml``: what the cluster allows, in one place."""

    #: the memory of the largest node (MB, as slurm.conf's RealMemory); ``auto``: the largest
    #: ``sinfo`` reports for the partition (rules/common.smk asks only when the jobs go to SLURM;
    #: no limit where there is none); ``null``: no limit
    max_mem_mb: MemLimit = "auto"
    #: partition of the CPU jobs (``null``: the cluster's default partition)
    partition: Str | None = None
    #: partition of the jobs with GPUs (``null``: ``partition``)
    gpu_partition: Str | None = None
    #: account charged (``null``: no ``-A``, the plugin's guess fails in 2.8.0, so SLURM charges the user's default account: docs/scale_out.md)
    account: Str | None = None
    #: the smallest request (MB): no job asks for less
    min_mem_mb: PosInt = 1024

    def partition_for(self, gpus: int) -> str | None:
        """The partition of a job with ``gpus`` GPUs."""
        return (self.gpu_partition or self.partition) if gpus else self.partition


def load_site(path: str | Path) -> SiteLimits:
    """The site limits of ``path`` (all defaults when the file does not exist).

    A bad key or value raises :class:`ConfigError` naming the file, the key and the allowed values.
    """
    import yaml

    path = Path(path)
    if not path.exists():
        return SiteLimits()
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]}); fix the file") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: must be a mapping of max_mem_mb, partition, gpu_partition, account, min_mem_mb; got {type(raw).__name__}")
    try:
        return SiteLimits.model_validate(dict(raw))
    except ValidationError as e:
        msg = format_error(e).removeprefix("<top level>: ")
        keys = "" if "allowed:" in msg else f" (keys: {', '.join(SiteLimits.model_fields)})"
        raise ConfigError(f"{path}: {msg}; fix it in that file{keys}") from None


def sinfo_max_mem_mb(partition: str | None = None) -> int | None:
    """The largest node memory (MB) ``sinfo`` reports (for ``partition``); None without SLURM."""
    if shutil.which("sinfo") is None:
        return None
    cmd = ["sinfo", "-h", "-o", "%m", *(["-p", partition] if partition else [])]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    sizes = [int(tok.rstrip("+")) for tok in out.split() if tok.rstrip("+").isdigit()]
    return max(sizes) if sizes else None


def max_mem_mb(site: SiteLimits, gpus: int = 0) -> int | None:
    """The cap of a job with ``gpus`` GPUs (``auto`` resolved by :func:`sinfo_max_mem_mb`)."""
    if site.max_mem_mb == "auto":
        return sinfo_max_mem_mb(site.partition_for(gpus))
    return site.max_mem_mb


# --------------------------------------------------------------------------- what a job holds


@dataclass(frozen=True)
class DataSize:
    """The in-memory size of data files: ``nbytes`` over every variable, and the points of one sample."""

    nbytes: int
    points: int
    coord_dim: int
    inputs: int
    outputs: int


def data_bytes(paths: Iterable[str | Path]) -> DataSize:
    """Uncompressed size of every variable of the NetCDF files ``paths`` (headers only, no data read).

    ``points`` (the first output's non-sample, non-time size), ``coord_dim`` and the input / output
    counts (variables with ``role`` input / output) come from the first file. A missing file raises
    :class:`FileNotFoundError` (Snakemake reports ``<TBD>`` for a resource whose input is not there yet).
    """
    import netCDF4

    total, first = 0, None
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(2, "No such file or directory", str(p))
        with netCDF4.Dataset(p) as nc:
            total += sum(int(v.size) * v.dtype.itemsize for v in nc.variables.values() if hasattr(v.dtype, "itemsize"))
            if first is None:
                first = _shape_of(nc)
    points, coord_dim, n_in, n_out = first or (1, 1, 1, 1)
    return DataSize(total, points, coord_dim, n_in, n_out)


def _shape_of(nc: Any) -> tuple[int, int, int, int]:
    roles = {n: getattr(v, "role", None) for n, v in nc.variables.items()}
    outputs = [n for n, r in roles.items() if r == "output"]
    points = 1
    if outputs:
        v = nc.variables[outputs[0]]
        points = math.prod(len(nc.dimensions[d]) for d in v.dimensions if d not in ("sample", "t"))
    axes = sum(1 for n in ("x", "y", "z") if n in nc.variables) or sum(1 for n in ("node_x", "node_y", "node_z") if n in nc.variables)
    return max(points, 1), max(axes, 1), max(sum(r == "input" for r in roles.values()), 1), max(len(outputs), 1)


def parameter_count(model: Mapping[str, Any], data: DataSize) -> int:
    """Trainable parameters of ``model`` (``{arch, hyperparameters...}``) for ``data``'s shape.

    Built on PyTorch's ``meta`` device (shapes only, no memory, milliseconds). The channel counts
    are the data file's input / output variables, so a view that stacks time steps or adds globals
    changes the count by the encoder's and decoder's first and last layers only; a model whose
    hyperparameters are set from the data (``n_points``) gets them from the file. 0 when the model
    cannot be built without the data (a view's input sets): the estimate then rests on the data.
    """
    import torch

    from opflow.models.base import build_model, count_parameters, model_class

    cfg = {k: v for k, v in model.items() if k != "training"}
    try:
        if "n_points" in model_class(cfg["arch"]).Hparams.model_fields and not cfg.get("n_points"):
            cfg["n_points"] = data.points
        with torch.device("meta"):
            return count_parameters(build_model(cfg, data.inputs, data.outputs, data.coord_dim))
    except Exception:  # noqa: BLE001  the estimate must never stop the workflow; the data term remains
        return 0


# --------------------------------------------------------------------------- the requests


def _ask(need_mb: float, cap: int | None, floor: int) -> int:
    mb = max(floor, ROUND_MB * math.ceil(MARGIN * need_mb / ROUND_MB))
    return min(mb, cap) if cap else mb


def train_mem_mb(params: int, data_nbytes: int, gpus: int = 0, cap: int | None = None, floor: int = 1024) -> int:
    """MiB a training job asks for (module docstring), at most ``cap``."""
    base = BASE_GPU_MB if gpus else BASE_CPU_MB
    return _ask(base + (DATA_COPIES * data_nbytes + TRAIN_BYTES_PER_PARAM * params) / _MIB, cap, floor)


def eval_mem_mb(params: int, data_nbytes: int, gpus: int = 0, cap: int | None = None, floor: int = 1024) -> int:
    """MiB an evaluation job asks for (module docstring), at most ``cap``."""
    base = BASE_GPU_MB if gpus else BASE_CPU_MB
    return _ask(base + (DATA_COPIES * data_nbytes + EVAL_BYTES_PER_PARAM * params) / _MIB, cap, floor)


def io_mem_mb(data_nbytes: int, cap: int | None = None, floor: int = 1024) -> int:
    """MiB a merge or derive job asks for: its input and an output of the same size."""
    return _ask(BASE_IO_MB + 2 * data_nbytes / _MIB, cap, floor)


def fixed_mem_mb(mb: int, cap: int | None = None) -> int:
    """``mb`` at most ``cap`` (shard jobs)."""
    return min(mb, cap) if cap else mb
