"""Sharded dataset generation: compute samples ``start:stop`` of a generator into one shard file.

``python -m solvers shard --solver darcy_fd --params '{"resolution": 421}' --seed 0 --start 0 --stop 100 OUT``

Each shard is a complete opflow dataset (``sample_index`` holds the global indices); the merge step
(:func:`opflow.data.shards.merge_shards`) joins shards in index order. Because sample ``i`` is
seeded from ``(seed, i)`` alone, any shard size gives the same data.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from opflow.data.format import DatasetWriter
from opflow.data.provenance import provenance_attrs
from solvers.base import ConfigError, Generator, get_generator


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
    writer = DatasetWriter(out, dims, spec, attrs) if root else contextlib.nullcontext()
    with writer as w:
        if root:
            for name, v in coords.items():
                w.write(name, v.data)
            w.write("sample_index", np.arange(start, stop, dtype=np.int64), 0)
        with tqdm(total=n, desc=f"{gen.name} {start}:{stop}", unit="sample", disable=not (progress and root), mininterval=2.0) as bar:
            for b0 in range(start, stop, block):
                idx = np.arange(b0, min(b0 + block, stop))
                arrays = gen.generate(seed, idx)
                if root:
                    for name in fields:
                        if name not in arrays:
                            raise RuntimeError(f"generator {gen.name!r} returned no field {name!r}")
                        w.write(name, arrays[name].astype(fields[name].dtype, copy=False), int(idx[0] - start))
                bar.update(len(idx))
    return Path(out)


def shard_from_config(solver: str, params: dict[str, Any], seed: int, start: int, stop: int, out: str, progress: bool = True) -> Path:
    gen = get_generator(solver).from_config(params, where=f"{solver}.params")
    return write_shard(gen, seed, start, stop, out, progress=progress)
