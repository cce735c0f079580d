"""Join generation shards into one dataset file, streaming, with consistency checks."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .format import DatasetError, DatasetWriter, open_dataset


def merge_shards(paths: Sequence[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Concatenate shard files along ``sample`` in ``sample_index`` order into ``out`` (atomic).

    The shards must come from the same generator, parameters and seed (same ``opflow_params_hash``)
    and their sample indices must tile one contiguous range without gaps or overlaps. The merged
    file's ``history`` keeps the distinct lines of all shards (in sample order) and adds the merge.
    The merged file takes about the shards' total size: a file system with less free space is
    refused before anything is written (:class:`~opflow.data.errors.DiskFullError`).
    """
    if not paths:
        raise DatasetError("merge_shards: no shard files given")
    infos = []
    histories: dict[Path, str] = {}
    for p in paths:
        with open_dataset(p) as nc:
            idx = np.asarray(nc.variables["sample_index"][:])
            infos.append((int(idx[0]) if idx.size else 0, Path(p), idx, nc.getncattr("opflow_params_hash")))
            histories[Path(p)] = str(getattr(nc, "history", ""))
    hashes = {h for *_, h in infos}
    if len(hashes) != 1:
        raise DatasetError(f"shards come from different parameters or seeds (hashes {sorted(hashes)}); regenerate them together")
    infos.sort(key=lambda t: t[0])
    all_idx = np.concatenate([i for _, _, i, _ in infos])
    if not np.array_equal(all_idx, np.arange(all_idx[0], all_idx[0] + all_idx.size)):
        raise DatasetError(f"shard sample indices do not tile a contiguous range (got {all_idx.size} indices from {all_idx.min()} to {all_idx.max()})")

    first = infos[0][1]
    with open_dataset(first) as nc:
        dims = {k: len(d) for k, d in nc.dimensions.items()}
        dims["sample"] = int(all_idx.size)
        spec = {
            name: (v.dimensions, v.dtype, {k: v.getncattr(k) for k in v.ncattrs()})
            for name, v in nc.variables.items()
        }
        attrs = {k: nc.getncattr(k) for k in nc.ncattrs() if k not in ("opflow_format", "opflow_shard")}
        attrs["opflow_shards"] = len(infos)
        lines = [line for _, p, _, _ in infos for line in histories[p].splitlines() if line.strip()]
        attrs["history"] = "\n".join(dict.fromkeys(lines))
        static = {name: np.asarray(v[...]) for name, v in nc.variables.items() if v.dimensions[:1] != ("sample",)}

    size = sum(Path(p).stat().st_size for p in paths)  # the same chunks, compressed the same way
    with DatasetWriter(out, dims, spec, attrs, expected_bytes=size) as w:
        for name, data in static.items():
            w.write(name, data)
        offset = 0
        for _, p, idx, _ in infos:
            with open_dataset(p) as nc:
                for name, v in nc.variables.items():
                    if v.dimensions[:1] == ("sample",):
                        w.write(name, np.asarray(v[...]), offset)
            offset += idx.size
    return Path(out)
