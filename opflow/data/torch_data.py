"""Torch datasets over opflow dataset files, the batch format every model takes, and data loaders.

Batch format (a dict; every model takes it, see :mod:`opflow.models.base`)::

    coords      (B, N, d)      input point coordinates
    inputs      (B, N, c_in)   input features at those points
    target      (B, M, c_out)  output values at the query points (M = N without query)
    query       (B, M, d)      optional output locations
    mask        (B, N) bool    optional: False at padding (point clouds of different sizes)
    query_mask  (B, M) bool    optional: the same for ragged query sets
    grid_shape  tuple          optional: (n_x, n_y) when the points are one row-major grid
    index       (B,) long      position of each sample in its dataset

:func:`collate` builds it from per-sample dicts of the same keys without the batch axis, padding
ragged point sets with zeros to the batch maximum (a mask is present only when sizes differ).

:class:`GridDataset` reads one split of a grid dataset file into memory once (float32): a field
``f(sample, x, y)`` becomes ``(N, 1)`` features with point ``p = ix * n_y + iy`` (row-major, the
file's own layout) and coordinates ``(x[ix], y[iy])``. Mesh and trajectory datasets are other
classes producing the same items.

Shuffling is a :class:`~torch.utils.data.distributed.DistributedSampler` in every case (one
replica without DDP): the order of epoch ``e`` is a permutation drawn from ``seed + e`` alone, so a
resumed run replays it exactly, and under DDP with ``W`` processes the union of the ``W`` local
batches ``k`` is the single-process batch ``k`` (global batch = ``W`` x local batch).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from .errors import DatasetError
from .format import SPLITS, open_dataset, read_dataset
from .transforms import GRID_DIMS


@dataclass(frozen=True)
class Task:
    """Which file variables are the operator's inputs and outputs (one channel each)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        return {"inputs": list(self.inputs), "outputs": list(self.outputs)}


def resolve_task(path: str | os.PathLike, task: Mapping[str, Any] | None = None) -> Task:
    """The task on file ``path``: configured names, or the variables with role input / output."""
    task = dict(task or {})
    with open_dataset(path) as nc:
        roles = {n: getattr(v, "role", None) for n, v in nc.variables.items()}
    chosen = {}
    for key, role in (("inputs", "input"), ("outputs", "output")):
        names = task.get(key)
        if names is None:
            names = [n for n, r in roles.items() if r == role]
            if not names:
                raise DatasetError(f"{path}: no variable has role {role!r}; name the {key} in datasets.<name>.task.{key}")
        missing = [n for n in names if n not in roles]
        if missing:
            raise DatasetError(f"{path}: task {key} {missing} are not variables of the file; it has {sorted(roles)}")
        chosen[key] = tuple(names)
    return Task(chosen["inputs"], chosen["outputs"])


class GridDataset(Dataset):
    """One split of a grid dataset file, in memory (module docstring)."""

    def __init__(self, path: str | os.PathLike, split: str = "train", task: Task | Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        if split not in SPLITS:
            raise DatasetError(f"unknown split {split!r}; use one of {list(SPLITS)}")
        self.task = task if isinstance(task, Task) else resolve_task(self.path, task)
        names = [*self.task.inputs, *self.task.outputs]
        with open_dataset(self.path) as nc:
            for key, group in (("inputs", self.task.inputs), ("outputs", self.task.outputs)):
                missing = [n for n in group if n not in nc.variables]
                if missing:
                    raise DatasetError(f"{self.path}: task {key} {missing} are not variables of the file; it has {sorted(nc.variables)}")
            dims = {n: tuple(nc.variables[n].dimensions) for n in names}
            if "split" not in nc.variables:
                raise DatasetError(f"{self.path}: has no 'split' variable; derive the dataset with `opflow derive`")
        field_dims = set(dims.values())
        if len(field_dims) != 1:
            raise DatasetError(f"{self.path}: task variables lie on different dimensions {dims}; they must share one grid")
        fdims = field_dims.pop()
        grid = fdims[1:]
        if fdims[:1] != ("sample",) or not grid or any(d not in GRID_DIMS for d in grid):
            raise DatasetError(
                f"{self.path}: GridDataset reads fields on (sample, x[, y[, z]]) but {names} have dims {fdims}; "
                "mesh and trajectory data have their own datasets"
            )
        ds = read_dataset(self.path, [*names, *grid], split=split)
        self.split = split
        self.grid_dims = grid
        self.grid_shape: tuple[int, ...] = tuple(int(ds[d].shape[0]) for d in grid)
        axes = [np.asarray(ds[d], dtype=np.float64) for d in grid]
        mesh = np.meshgrid(*axes, indexing="ij")
        self.coords = torch.from_numpy(np.stack([m.ravel() for m in mesh], axis=-1).astype(np.float32))
        n_pts = int(np.prod(self.grid_shape))
        s = ds[names[0]].shape[0]
        self.inputs = torch.from_numpy(np.stack([np.asarray(ds[n], np.float32).reshape(s, n_pts) for n in self.task.inputs], -1))
        self.target = torch.from_numpy(np.stack([np.asarray(ds[n], np.float32).reshape(s, n_pts) for n in self.task.outputs], -1))
        self.sample_index = np.asarray(ds["sample_index"]) if "sample_index" in ds.variables else np.arange(s)
        self.units = {n: ds.variables[n].attrs.get("units", "") for n in names}
        self.attrs = ds.attrs

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def coord_dim(self) -> int:
        return int(self.coords.shape[-1])

    @property
    def in_channels(self) -> int:
        return int(self.inputs.shape[-1])

    @property
    def out_channels(self) -> int:
        return int(self.target.shape[-1])

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"coords": self.coords, "inputs": self.inputs[i], "target": self.target[i], "grid_shape": self.grid_shape, "index": i}


# --------------------------------------------------------------------------- batches


def _pad(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stack (n_i, k) tensors into (B, max n, k), zero-padded, with a mask when sizes differ."""
    sizes = [t.shape[0] for t in tensors]
    if len(set(sizes)) == 1:
        return torch.stack(list(tensors)), None
    n = max(sizes)
    out = tensors[0].new_zeros((len(tensors), n, *tensors[0].shape[1:]))
    mask = torch.zeros(len(tensors), n, dtype=torch.bool)
    for b, t in enumerate(tensors):
        out[b, : t.shape[0]] = t
        mask[b, : t.shape[0]] = True
    return out, mask


def collate(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Batch per-sample dicts (module docstring): pad ragged point sets and add masks."""
    if not items:
        raise ValueError("cannot collate an empty batch")
    batch: dict[str, Any] = {}
    batch["coords"], mask = _pad([it["coords"] for it in items])
    batch["inputs"], _ = _pad([it["inputs"] for it in items])
    if any(it["inputs"].shape[0] != it["coords"].shape[0] for it in items):
        raise ValueError("each sample needs as many input feature rows as coordinates")
    if mask is not None:
        batch["mask"] = mask
    has_query = ["query" in it and it["query"] is not None for it in items]
    if any(has_query) and not all(has_query):
        raise ValueError("either every sample of a batch has query points or none has")
    target_mask = mask
    if all(has_query):
        batch["query"], qmask = _pad([it["query"] for it in items])
        if qmask is not None:
            batch["query_mask"] = qmask
        target_mask = qmask
    if "target" in items[0]:
        batch["target"], tmask = _pad([it["target"] for it in items])
        if (tmask is None) != (target_mask is None) or (tmask is not None and not torch.equal(tmask, target_mask)):
            raise ValueError("each sample needs one target row per output point (query point, or input point without query)")
    shapes = {tuple(it["grid_shape"]) if it.get("grid_shape") is not None else None for it in items}
    if mask is None and len(shapes) == 1 and None not in shapes:
        batch["grid_shape"] = shapes.pop()
    if all("index" in it for it in items):
        batch["index"] = torch.as_tensor([int(it["index"]) for it in items], dtype=torch.long)
    return batch


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    nb = device.type == "cuda"
    return {k: (v.to(device, non_blocking=nb) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def output_mask(batch: Mapping[str, Any]) -> torch.Tensor | None:
    """The mask of the target rows: ``query_mask`` with query points, else ``mask``."""
    return batch.get("query_mask") if batch.get("query") is not None else batch.get("mask")


# --------------------------------------------------------------------------- loaders


def _seed_worker(worker_id: int) -> None:
    """Seed numpy and python in a loader worker from its torch seed (base seed + worker id)."""
    s = torch.initial_seed() % 2**32
    np.random.seed(s)
    random.seed(s)


def make_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> tuple[DataLoader, DistributedSampler, torch.Generator]:
    """A loader of this process's share of ``dataset`` in batches of ``batch_size`` (local size).

    Call ``sampler.set_epoch(e)`` before each epoch; the returned generator seeds the workers
    (save its state to resume exactly).
    """
    if len(dataset) == 0:  # type: ignore[arg-type]
        raise DatasetError("the dataset split is empty; check the split sizes of the dataset")
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)
    gen = torch.Generator()
    gen.manual_seed(seed)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate,
        num_workers=num_workers,
        pin_memory=pin_memory,
        worker_init_fn=_seed_worker if num_workers > 0 else None,
        generator=gen,
        persistent_workers=num_workers > 0,
    )
    return loader, sampler, gen
