"""Torch datasets over opflow dataset files, the batch format every model takes, and data loaders.

Batch format (a dict; every model takes it, see :mod:`opflow.models.base`)::

    coords      (B, N, d)      input point coordinates
    inputs      (B, N, c_in)   input features at those points
    target      (B, M, c_out)  output values at the query points (M = N without query)
    query       (B, M, d)      optional output locations
    mask        (B, N) bool    optional: False at padding (point clouds of different sizes)
    query_mask  (B, M) bool    optional: the same for ragged query sets
    globals     (B, g)         optional: per-sample inputs without a point dimension (Lorenz-63's
                               y(0), z(0); the elasticity radius code), see below
    grid_shape  tuple          optional: (n_x, n_y) when the points are one row-major grid
    input_sets  list of dicts  optional: more input functions, each on its own point set (below)
    index       (B,) long      position of each sample in its dataset
    rollout_steps int          optional: the batch holds whole trajectories to be predicted
                               autoregressively (:mod:`opflow.data.trajectory`)

:func:`collate` builds it from per-sample dicts of the same keys without the batch axis, padding
ragged point sets with zeros to the batch maximum (a mask is present only when sizes differ).

Datasets. Every dataset class derives from :class:`ArrayDataset` (one split in memory, float32):
shared or per-sample coordinates, inputs, targets, optional globals and optional per-sample point
counts (ragged sets are stored padded and cut to their count in ``__getitem__``), and it fits its
own normalisers on itself (:meth:`ArrayDataset.fit_normalizers`, called on the training split
only). :class:`GridDataset` is the grid view: a field ``f(sample, x, y)`` becomes ``(N, 1)``
features with point ``p = ix * n_y + iy`` (row-major, the file's own layout) and coordinates
``(x[ix], y[iy])``. The other views live in :mod:`opflow.data.points` (series, meshes) and
:mod:`opflow.data.trajectory`; :func:`opflow.data.views.make_dataset` picks one.

Globals. Task inputs that do not extend over the points (dims ``(sample,)`` or ``(sample, k)``)
are flattened, in task order, into ``globals (S, g)`` and normalised on the training split by
their own normaliser (the input normaliser's kind, one mean and scale per global channel). Models
with ``accepts_globals = True`` take them as ``forward(..., globals=...)``; for other models
``opflow.train`` broadcasts the normalised globals to every point and appends them to the input
channels (so ``in_channels = c_in + g`` for those models).

Input sets. A view may declare more input functions, each discretised on its own point set (a
``mesh`` view's ``input_sets``, :class:`opflow.data.view_spec.InputSetSpec`; GNOT's heterogeneous
inputs, Hao et al. 2023 Sec. 3.3): ``input_sets[l]`` is ``{"coords": (B, N_l, d_l), "values":
(B, N_l, c_l), "mask": (B, N_l) bool}`` (the mask only when the set's sizes differ within the
batch), padded by :func:`collate` like the main point set. Their values are normalised on the
training split, one normaliser per set (``Normalizers.input_sets``); coordinates are not. Only
models with ``accepts_input_sets = True`` take them, as ``forward(..., input_sets=[(coords,
values, mask), ...])``; the trainer refuses to build any other model on such a dataset. Datasets
without input sets, and every model, see no difference.

Shuffling is a :class:`~torch.utils.data.distributed.DistributedSampler` in every case (one
replica without DDP): the order of epoch ``e`` is a permutation drawn from ``seed + e`` alone, so a
resumed run replays it exactly, and under DDP with ``W`` processes the union of the ``W`` local
batches ``k`` is the single-process batch ``k`` (global batch = ``W`` x local batch). A split whose
items all have the same shapes can instead be held on the device and cut into the same batches by
index (:class:`opflow.data.device_batches.DeviceBatches`, ``training.data_on_device``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from .errors import DatasetError
from .format import SPLITS, open_dataset, read_dataset, require_finite
from .normalize import Identity, Normalizer, make_normalizer, normalizer_from_state
from .transforms import GRID_DIMS


@dataclass(frozen=True)
class Task:
    """Which file variables are the operator's inputs and outputs (one channel each).

    Inputs without the point dimension become globals (module docstring); ``inputs`` may be
    empty (the coordinates alone are the input, as in the elasticity point-cloud protocol).
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        return {"inputs": list(self.inputs), "outputs": list(self.outputs)}


def resolve_task(
    path: str | os.PathLike, task: Task | Mapping[str, Any] | None = None, *, inputs_default: str = "role", swap_roles: bool = False
) -> Task:
    """The task on file ``path``: configured names, or the variables with role input / output.

    ``inputs_default="outputs"`` (trajectory views) makes the inputs default to the outputs: the
    operator maps earlier frames of a field to later ones. ``swap_roles`` (the inverse view) makes
    the defaults the file's outputs as inputs and its inputs as outputs.
    """
    if isinstance(task, Task):
        return task
    task = dict(task or {})
    with open_dataset(path) as nc:
        roles = {n: getattr(v, "role", None) for n, v in nc.variables.items()}
    chosen: dict[str, tuple[str, ...]] = {}
    roles_of = {"outputs": "input", "inputs": "output"} if swap_roles else {"outputs": "output", "inputs": "input"}
    for key in ("outputs", "inputs"):
        role = roles_of[key]
        names = task.get(key)
        if names is None and key == "inputs" and inputs_default == "outputs":
            names = list(chosen["outputs"])
        if names is None:
            names = [n for n, r in roles.items() if r == role]
            if not names:
                raise DatasetError(f"{path}: no variable has role {role!r}; name the {key} in datasets.<name>.task.{key}")
        missing = [n for n in names if n not in roles]
        if missing:
            raise DatasetError(f"{path}: task {key} {missing} are not variables of the file; it has {sorted(roles)}")
        chosen[key] = tuple(names)
    return Task(chosen["inputs"], chosen["outputs"])


# --------------------------------------------------------------------------- normalisers


def fit_normalizer(kind: str, x: torch.Tensor, mask: torch.Tensor | None = None, grid_shape: Sequence[int] | None = None) -> Normalizer:
    """A normaliser of ``kind`` fitted on ``x (S, N, C)``; the identity when there are no channels."""
    if x.shape[-1] == 0:
        return Identity()
    return make_normalizer(kind).fit(x, mask, grid_shape)


def concat_normalizers(parts: Sequence[Normalizer]) -> Normalizer:
    """One normaliser whose channels are those of ``parts`` in order (all of one kind).

    Every kind is a per-channel affine map whose statistics of channel ``c`` depend on channel
    ``c`` alone, so fitting channel by channel and concatenating equals fitting all at once; this
    lets :mod:`opflow.data.trajectory` fit its window channels without materialising every pair.
    """
    kinds = {p.kind for p in parts}
    if len(kinds) != 1:
        raise ValueError(f"cannot concatenate normalisers of kinds {sorted(kinds)}")
    if kinds == {"none"}:
        return Identity()
    states = [p.state_dict() for p in parts]
    state = dict(states[0])
    state["mean"] = torch.cat([s["mean"] for s in states], -1)
    state["scale"] = torch.cat([s["scale"] for s in states], -1)
    return normalizer_from_state(state)


@dataclass
class Normalizers:
    """The normalisers of a run: point inputs, outputs, globals and each input set's values (fitted on train only)."""

    inputs: Normalizer
    outputs: Normalizer
    globals: Normalizer
    input_sets: list[Normalizer] = field(default_factory=list)

    def state_dict(self) -> dict[str, Any]:
        state = {"inputs": self.inputs.state_dict(), "outputs": self.outputs.state_dict(), "globals": self.globals.state_dict()}
        if self.input_sets:
            state["input_sets"] = [n.state_dict() for n in self.input_sets]
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Normalizers:
        """Rebuild from :meth:`state_dict` (files written before globals or input sets existed have none)."""
        g = state.get("globals")
        sets = [normalizer_from_state(s) for s in state.get("input_sets") or ()]
        return cls(normalizer_from_state(state["inputs"]), normalizer_from_state(state["outputs"]), normalizer_from_state(g) if g else Identity(), sets)

    def to(self, device: torch.device | str) -> Normalizers:
        self.inputs.to(device)
        self.outputs.to(device)
        self.globals.to(device)
        for n in self.input_sets:
            n.to(device)
        return self


@dataclass
class InputSet:
    """One more input function of a split on its own point set (module docstring, "Input sets").

    ``coords`` ``(n, d)`` shared by every sample or ``(S, n, d)``; ``values (S, n, c)``; ``counts
    (S,)`` real points per sample (padded storage) or None; ``names`` the file variables of the values.
    """

    names: tuple[str, ...]
    coords: torch.Tensor
    values: torch.Tensor
    counts: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(coordinate dimension, channels)``: what a model is built with."""
        return int(self.coords.shape[-1]), int(self.values.shape[-1])

    def mask(self) -> torch.Tensor | None:
        """``(S, n)`` bool, False at padding; None when every sample has every point."""
        if self.counts is None:
            return None
        mask = torch.arange(self.values.shape[1])[None, :] < self.counts[:, None]
        return None if bool(mask.all()) else mask

    def item(self, i: int) -> dict[str, torch.Tensor]:
        """Sample ``i``'s points and values, cut to its real points."""
        n = self.values.shape[1] if self.counts is None else int(self.counts[i])
        c = self.coords[i] if self.coords.dim() == 3 else self.coords
        return {"coords": c[:n], "values": self.values[i, :n]}


# --------------------------------------------------------------------------- datasets


class ArrayDataset(Dataset):
    """One split of a dataset in memory: the common base of every view (module docstring).

    Subclasses fill: ``coords`` ``(N, d)`` shared or ``(S, N, d)`` per sample; ``inputs (S, N,
    c_in)``; ``target (S, N, c_out)``; ``globals (S, g)`` or None; ``counts (S,)`` (real points of
    each sample, padded storage) or None; ``grid_shape``; ``sample_index``; ``task``;
    ``global_names`` (the task inputs that became globals); ``units``; ``attrs``; ``kind``.
    """

    kind = "base"
    #: the :class:`opflow.data.views.ViewKind` that built this dataset (set by
    #: :func:`opflow.data.views.make_dataset`); :func:`make_loader` batches with its ``collate``
    view_impl: Any = None
    coords: torch.Tensor
    inputs: torch.Tensor
    target: torch.Tensor
    globals: torch.Tensor | None = None
    counts: torch.Tensor | None = None
    grid_shape: tuple[int, ...] | None = None
    rollout_steps: int = 0
    #: more input functions on their own point sets (module docstring, "Input sets")
    input_sets: tuple[InputSet, ...] = ()

    def _init_common(self, path: str | os.PathLike, split: str | None) -> None:
        self.path = Path(path)
        if split is not None and split not in SPLITS:
            raise DatasetError(f"unknown split {split!r}; use one of {list(SPLITS)}")
        self.split = split
        self.global_names: tuple[str, ...] = ()

    @staticmethod
    def _read(path: Path, names: Sequence[str], split: str | None) -> Any:
        """Read ``names`` of ``split`` (every sample with ``split=None``); a split needs a split variable.

        Non-finite values are refused here, once, before any normaliser or epoch sees them
        (:func:`opflow.data.format.require_finite`)."""
        if split is not None:
            with open_dataset(path) as nc:
                if "split" not in nc.variables:
                    raise DatasetError(f"{path}: has no 'split' variable; derive the dataset with `opflow derive`")
        names = list(dict.fromkeys(names))
        ds = read_dataset(path, names, split=split)
        require_finite(ds, names, split)
        return ds

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

    @property
    def global_channels(self) -> int:
        return 0 if self.globals is None else int(self.globals.shape[-1])

    @property
    def per_sample_coords(self) -> bool:
        return self.coords.dim() == 3

    def sample_coords(self, i: int) -> torch.Tensor:
        """The coordinates of sample ``i`` cut to its real points ``(n_i, d)``."""
        c = self.coords[i] if self.per_sample_coords else self.coords
        return c if self.counts is None else c[: int(self.counts[i])]

    def point_mask(self) -> torch.Tensor | None:
        """``(S, N)`` bool, False at padding; None when every sample has every point."""
        if self.counts is None:
            return None
        n = self.inputs.shape[1]
        mask = torch.arange(n)[None, :] < self.counts[:, None]
        return None if bool(mask.all()) else mask

    def channel_names(self) -> list[str]:
        """Names of the output channels (the per-channel error keys)."""
        return list(self.task.outputs)

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = None if self.counts is None else int(self.counts[i])
        cut = slice(None) if n is None else slice(0, n)
        item: dict[str, Any] = {
            "coords": self.sample_coords(i),
            "inputs": self.inputs[i, cut],
            "target": self.target[i, cut],
            "grid_shape": self.grid_shape,
            "index": i,
        }
        if self.globals is not None:
            item["globals"] = self.globals[i]
        if self.input_sets:
            item["input_sets"] = [s.item(i) for s in self.input_sets]
        if self.rollout_steps:
            item["rollout_steps"] = self.rollout_steps
        return item

    def fit_normalizers(self, input_kind: str, output_kind: str) -> Normalizers:
        """Normalisers fitted on this dataset (call it on the training split only); masks honoured."""
        mask = self.point_mask()
        g = self.globals
        return Normalizers(
            fit_normalizer(input_kind, self.inputs, mask, self.grid_shape),
            fit_normalizer(output_kind, self.target, mask, self.grid_shape),
            fit_normalizer(input_kind, g[:, None, :], None, None) if g is not None and g.shape[-1] else Identity(),
            [fit_normalizer(input_kind, s.values, s.mask(), None) for s in self.input_sets],
        )

    def info(self) -> dict[str, Any]:
        """What a trained model records about its data (``model.pt`` ``task``; ``input_sets``, the
        ``[coordinate dim, channels]`` of each input set, only when there are some)."""
        extra = {"input_sets": [list(s.shape) for s in self.input_sets]} if self.input_sets else {}
        return {
            **extra,
            **self.task.to_dict(),
            "globals": list(self.global_names),
            "view_kind": self.kind,
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "coord_dim": self.coord_dim,
            "global_channels": self.global_channels,
            "grid_shape": list(self.grid_shape) if self.grid_shape is not None else None,
        }


def split_globals(dims: Mapping[str, tuple[str, ...]], names: Sequence[str], point_dims: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split input ``names`` into those on the points (dims containing ``point_dims``) and globals."""
    on_points, glob = [], []
    for n in names:
        d = dims[n]
        if d[:1] != ("sample",):
            raise DatasetError(f"task input {n!r} has dims {d}; per-sample variables start with 'sample'")
        (on_points if set(point_dims) <= set(d[1:]) else glob).append(n)
    return on_points, glob


def stack_globals(ds: Any, names: Sequence[str]) -> torch.Tensor | None:
    """``(S, g)`` float32: the global inputs ``names`` of a read dataset, flattened per sample, concatenated."""
    if not names:
        return None
    cols = []
    for n in names:
        a = np.asarray(ds[n], dtype=np.float32)
        cols.append(a.reshape(a.shape[0], -1))
    return torch.from_numpy(np.concatenate(cols, axis=1))


def unit_axis(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """A grid axis mapped to [0, 1): ``(x - x_0) / period`` on a periodic axis (attribute ``period``),
    ``(x - x_0) / (x_last - x_0)`` on a node axis (both ends included)."""
    if str(attrs.get("grid_type", "nodes")) == "periodic" and "period" in attrs:
        return (x - x[0]) / float(attrs["period"])
    span = x[-1] - x[0]
    return (x - x[0]) / span if span != 0 else np.zeros_like(x)


class GridDataset(ArrayDataset):
    """One split of a grid dataset file, in memory (module docstring)."""

    kind = "grid"

    def __init__(
        self, path: str | os.PathLike, split: str | None = "train", task: Task | Mapping[str, Any] | None = None, coords: str = "file"
    ) -> None:
        self._init_common(path, split)
        self.task = resolve_task(self.path, task)
        names = [*self.task.inputs, *self.task.outputs]
        with open_dataset(self.path) as nc:
            for key, group in (("inputs", self.task.inputs), ("outputs", self.task.outputs)):
                missing = [n for n in group if n not in nc.variables]
                if missing:
                    raise DatasetError(f"{self.path}: task {key} {missing} are not variables of the file; it has {sorted(nc.variables)}")
            dims = {n: tuple(nc.variables[n].dimensions) for n in names}
        out_dims = {dims[n] for n in self.task.outputs}
        fdims = next(iter(out_dims))
        grid = fdims[1:]
        if len(out_dims) != 1 or fdims[:1] != ("sample",) or not grid or any(d not in GRID_DIMS for d in grid):
            raise DatasetError(
                f"{self.path}: GridDataset reads fields on (sample, x[, y[, z]]) but {list(self.task.outputs)} have dims "
                f"{sorted(out_dims)}; mesh and trajectory data have their own datasets (datasets.<name>.view)"
            )
        point_inputs, glob = split_globals(dims, self.task.inputs, grid)
        bad = [n for n in point_inputs if dims[n] != fdims]
        if bad:
            raise DatasetError(f"{self.path}: task variables lie on different dimensions {dims}; they must share one grid")
        ds = self._read(self.path, [*names, *grid], split)
        self.global_names = tuple(glob)
        self.grid_dims = grid
        self.grid_shape = tuple(int(ds[d].shape[0]) for d in grid)
        axes = [np.asarray(ds[d], dtype=np.float64) for d in grid]
        if coords == "unit":
            axes = [unit_axis(a, ds.variables[d].attrs) for a, d in zip(axes, grid)]
        elif coords != "file":
            raise ValueError(f"coords = {coords!r}: use 'file' or 'unit'")
        mesh = np.meshgrid(*axes, indexing="ij")
        self.coords = torch.from_numpy(np.stack([m.ravel() for m in mesh], axis=-1).astype(np.float32))
        n_pts = int(np.prod(self.grid_shape))
        s = ds[self.task.outputs[0]].shape[0]

        def fields(group: Sequence[str]) -> torch.Tensor:
            if not group:
                return torch.zeros(s, n_pts, 0)
            return torch.from_numpy(np.stack([np.asarray(ds[n], np.float32).reshape(s, n_pts) for n in group], -1))

        self.inputs = fields(point_inputs)
        self.target = fields(self.task.outputs)
        self.globals = stack_globals(ds, glob)
        self.sample_index = np.asarray(ds["sample_index"]) if "sample_index" in ds.variables else np.arange(s)
        self.units = {n: ds.variables[n].attrs.get("units", "") for n in names}
        self.attrs = ds.attrs


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
    n_sets = {len(it.get("input_sets") or ()) for it in items}
    if len(n_sets) != 1:
        raise ValueError(f"samples of one batch have different numbers of input sets {sorted(n_sets)}")
    if (k := n_sets.pop()) > 0:
        batch["input_sets"] = []
        for l in range(k):
            sc, smask = _pad([it["input_sets"][l]["coords"] for it in items])
            sv, _ = _pad([it["input_sets"][l]["values"] for it in items])
            if any(it["input_sets"][l]["values"].shape[0] != it["input_sets"][l]["coords"].shape[0] for it in items):
                raise ValueError(f"input set {l}: each sample needs as many value rows as points")
            batch["input_sets"].append({"coords": sc, "values": sv, **({"mask": smask} if smask is not None else {})})
    has_globals = ["globals" in it and it["globals"] is not None for it in items]
    if any(has_globals):
        if not all(has_globals):
            raise ValueError("either every sample of a batch has globals or none has")
        batch["globals"] = torch.stack([it["globals"] for it in items])
    steps = {int(it.get("rollout_steps") or 0) for it in items}
    if len(steps) != 1:
        raise ValueError(f"samples of one batch ask for different rollout lengths {sorted(steps)}")
    if (s := steps.pop()) > 0:
        batch["rollout_steps"] = s
    shapes = {tuple(it["grid_shape"]) if it.get("grid_shape") is not None else None for it in items}
    if mask is None and len(shapes) == 1 and None not in shapes:
        batch["grid_shape"] = shapes.pop()
    if all("index" in it for it in items):
        batch["index"] = torch.as_tensor([int(it["index"]) for it in items], dtype=torch.long)
    return batch


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """The batch with every tensor (also those in lists and dicts: ``input_sets``) on ``device``."""
    nb = device.type == "cuda"

    def move(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.to(device, non_blocking=nb)
        if isinstance(v, list):
            return [move(x) for x in v]
        if isinstance(v, dict):
            return {k: move(x) for k, x in v.items()}
        return v

    return {k: move(v) for k, v in batch.items()}


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
    collate_fn: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]] | None = None,
) -> tuple[DataLoader, DistributedSampler, torch.Generator]:
    """A loader of this process's share of ``dataset`` in batches of ``batch_size`` (local size).

    Call ``sampler.set_epoch(e)`` before each epoch; the returned generator seeds the workers
    (save its state to resume exactly). Batches come from ``collate_fn``, by default the
    ``collate`` of the view kind that built the dataset (``dataset.view_impl``, set by
    :func:`opflow.data.views.make_dataset`), else :func:`collate`.
    """
    if collate_fn is None:
        collate_fn = getattr(getattr(dataset, "view_impl", None), "collate", None) or collate
    if len(dataset) == 0:  # type: ignore[arg-type]
        raise DatasetError("the dataset split is empty; check the split sizes of the dataset")
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)
    gen = torch.Generator()
    gen.manual_seed(seed)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate_fn,
        num_workers=num_workers,
        pin_memory=pin_memory,
        worker_init_fn=_seed_worker if num_workers > 0 else None,
        generator=gen,
        persistent_workers=num_workers > 0,
    )
    return loader, sampler, gen
