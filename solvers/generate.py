"""Sharded dataset generation: compute samples ``start:stop`` of a generator into one shard file.

``python -m solvers shard --solver darcy_fd --params '{"resolution": 421}' --seed 0 --start 0 --stop 100 OUT``

Each shard is a complete opflow dataset (``sample_index`` holds the global indices); the merge step
(:func:`opflow.data.shards.merge_shards`) joins shards in index order. Because sample ``i`` is
seeded from ``(seed, i)`` alone, any shard size gives the same data.

A full disk is found before the work, not after it (issue 39: all 75 samples of a shard were solved
before the write failed): before the first solve the file system must have room for the first block
of samples uncompressed, and after it room for the rest at the first block's compressed size per
sample (x 1.1). Either refusal is a :class:`~opflow.data.errors.DiskFullError` naming the file
system, its free bytes and the estimate, and no file is left.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from opflow.atomic import require_space
from opflow.data.format import DatasetWriter
from opflow.data.provenance import provenance_attrs
from solvers.base import ConfigError, FieldSpec, Generator, SolverError, get_generator


def write_shard(
    gen: Generator,
    seed: int,
    start: int,
    stop: int,
    out: str | os.PathLike,
    *,
    progress: bool = True,
    extra_attrs: dict[str, Any] | None = None,
) -> Path:
    """Generate samples ``start:stop`` with ``gen`` and write them atomically to ``out``."""
    if not 0 <= start < stop:
        raise ConfigError(f"shard range {start}:{stop} is empty or negative; need 0 <= start < stop")
    n = stop - start
    dims = {"sample": n, **gen.dims()}
    coords = gen.coords()
    fields = gen.fields()
    spec: dict[str, tuple] = {"sample_index": (("sample",), np.int64, {"long_name": "global sample index (sets the seed)"})}
    for name, v in coords.items():
        spec[name] = (v.dims, v.data.dtype, {"role": "coordinate", **v.attrs})
    for name, f in fields.items():
        spec[name] = (("sample", *f.dims), f.dtype, {**f.attrs, "units": f.units, "long_name": f.long_name, "role": f.role})
    attrs = provenance_attrs(gen.name, gen.params_dict(), seed, **{**gen.extra_attrs(), **(extra_attrs or {})})
    attrs["opflow_shard"] = f"{start}:{stop}"

    from tqdm.auto import tqdm

    # Under MPI (a generator with a ``comm``), every rank computes each block (the solve is
    # collective) and rank 0 alone writes.
    comm = getattr(gen, "comm", None)
    root = comm is None or comm.rank == 0
    block = max(1, int(gen.block_size))
    per_sample = sum(int(np.prod([dims[d] for d in f.dims], dtype=np.int64)) * np.dtype(f.dtype).itemsize for f in fields.values())
    if root:  # before any solve: room for the first block, uncompressed (MPI: the other ranks stop at its first collective)
        first = min(block, n)
        require_space(out, per_sample * first, what=f"its first {first} sample(s) take up to", done=f"nothing was solved (samples {start}:{stop})")
    writer = DatasetWriter(out, dims, spec, attrs) if root else contextlib.nullcontext()
    with writer as w:
        if root:
            for name, v in coords.items():
                w.write(name, v.data)
            w.write("sample_index", np.arange(start, stop, dtype=np.int64), 0)
            header = w.bytes_on_disk()
        with tqdm(total=n, desc=f"{gen.name} {start}:{stop}", unit="sample", disable=not (progress and root), mininterval=2.0) as bar:
            for b0 in range(start, stop, block):
                idx = np.arange(b0, min(b0 + block, stop))
                arrays = gen.generate(seed, idx)
                if root:
                    for name in fields:
                        if name not in arrays:
                            raise RuntimeError(f"generator {gen.name!r} returned no field {name!r}")
                        data = arrays[name].astype(fields[name].dtype, copy=False)
                        _require_finite(gen, name, fields[name], data, idx, seed)
                        w.write(name, data, int(idx[0] - start))
                    if b0 == start and idx[-1] + 1 < stop:
                        _require_room_for_the_rest(w, out, header, len(idx), stop - idx[-1] - 1, start, stop)
                bar.update(len(idx))
    return Path(out)


def _require_finite(gen: Generator, name: str, field: FieldSpec, data: np.ndarray, idx: np.ndarray, seed: int) -> None:
    """Refuse a block whose input or output field holds NaN or inf, naming the *global* sample indices
    (those that set the seeds) and the seed: the shard job's last log line, which the Snakefile's
    ``onerror`` puts on the terminal. The writer's own check knows only its file's positions."""
    if field.role not in ("input", "output") or not np.issubdtype(data.dtype, np.floating):
        return
    bad = idx[~np.isfinite(data.reshape(len(idx), -1)).all(axis=1)]
    if bad.size:
        shown = ", ".join(map(str, bad[:5].tolist())) + (f", ... ({bad.size} in all)" if bad.size > 5 else "")
        raise SolverError(
            f"generator {gen.name!r} returned non-finite values (NaN or inf) in {name!r} for sample(s) {shown}; nothing was saved",
            index=int(bad[0]),
            seed=seed,
        )


#: the rest of a shard is estimated at its first block's compressed size per sample times this
SHARD_ROOM_SAFETY = 1.1


def _require_room_for_the_rest(w: DatasetWriter, out: str | os.PathLike, header: int, done: int, left: int, start: int, stop: int) -> None:
    """After the first block: the samples ``left`` will take about what the first ``done`` took on disk
    (compressed), times :data:`SHARD_ROOM_SAFETY`; refuse before solving them when there is less room.

    The size of a compressed shard is not known before its data are, so this is the earliest
    honest estimate; the check before the first solve (room for one block uncompressed) catches a
    disk that is already full."""
    per_sample = max(0, w.bytes_on_disk() - header) / done
    need = int(per_sample * left * SHARD_ROOM_SAFETY)
    require_space(  # on a refusal the writer removes its temporary file (the with block ends in the error)
        out, need, what=f"at the compressed size of the first {done}, the other {left} samples would take about",
        done=f"stopped before solving them (samples {start}:{stop}: {done} solved, nothing kept)",
    )


def shard_from_config(solver: str, params: dict[str, Any], seed: int, start: int, stop: int, out: str, progress: bool = True) -> Path:
    gen = get_generator(solver).from_config(params, where=f"{solver}.params")
    return write_shard(gen, seed, start, stop, out, progress=progress)
