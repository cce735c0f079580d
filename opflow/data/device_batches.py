"""A training split held on the device and batched by indexing: the data loader without the loader.

On a GPU a small model trains faster than a data loader feeds it: every batch is collated on the
host (a Python loop over items, a stack per key) and copied to the device. When every item of a
split has the same shapes (grid views, fixed-size point clouds, teacher-forced window pairs) that
work can be done once: :meth:`DeviceBatches.build` collates the whole split with the view's own
``collate``, exactly as the loader does per batch, writes every tensor into one preallocated
tensor on the device with the samples along axis 0, and each batch is then an ``index_select`` of
those tensors on the device (no host work, no copy, no synchronisation).

Same batches as the loader. The indices are those the loader would visit: the
:class:`~torch.utils.data.distributed.DistributedSampler` of :func:`opflow.data.torch_data.make_loader`
(``sampler.set_epoch(e)``, then ``list(sampler)``: this process's share of the permutation drawn
from ``seed + e``) cut into consecutive chunks of the local batch size, the last one smaller
(``drop_last`` False, as the loader). A batch of indices ``I`` is therefore the loader's batch of
``I``, bit for bit: stacking items ``I`` and selecting rows ``I`` of the stacked split give the same
numbers, and the non-tensor entries of a batch (``grid_shape``, ``rollout_steps``) are the same
for every batch. Each pass also takes one draw from the loader's generator, as a loader iterator
without workers does, so the generator state saved in a checkpoint is the same on both paths.

Which splits qualify (:func:`uniform_reason`): every item must have the same keys, tensors of the
same shapes and dtypes, and the same non-tensor values (``index`` aside, which the collate turns
into a tensor). Ragged point sets do not: the loader pads each batch to the batch's own largest
item, which indexing a split padded once to the split's largest item would not reproduce.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler

from .torch_data import collate as _default_collate

#: items collated per host step while building (bounds the host memory of :meth:`DeviceBatches.build`)
BUILD_CHUNK = 256


def _signature(value: Any) -> Any:
    """What must agree between items for indexing to equal collating: shapes, dtypes, other values."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, Mapping):
        return ("dict", tuple((k, _signature(v)) for k, v in sorted(value.items())))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_signature(v) for v in value))
    return ("value", value)


def _item_signature(item: Mapping[str, Any]) -> Any:
    return _signature({k: v for k, v in item.items() if k != "index"})


def _describe(sig: Any) -> str:
    """A short text of the first tensor shapes of a signature (for messages)."""
    if sig[0] == "dict":
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in sig[1]) + "}"
    if sig[0] == "tensor":
        return str(list(sig[1]))
    if sig[0] in ("list", "tuple"):
        return "[" + ", ".join(_describe(v) for v in sig[1]) + "]"
    return repr(sig[1])


def uniform_reason(dataset: Dataset) -> str | None:
    """None when every item of ``dataset`` has the same shapes and non-tensor values, else why not.

    The reason names the first item that differs from item 0 and both items' shapes.
    """
    n = len(dataset)  # type: ignore[arg-type]
    if n == 0:
        return "the split is empty"
    first = _item_signature(dataset[0])
    for i in range(1, n):
        sig = _item_signature(dataset[i])
        if sig != first:
            return (
                f"its items differ in shape or per-item fields (item 0 {_describe(first)}, item {i} {_describe(sig)}): "
                "ragged point sets are padded per batch by the loader, which indexing one padded split cannot reproduce"
            )
    return None


def item_nbytes(dataset: Dataset) -> int:
    """Bytes the collated split takes (items x the tensor bytes of item 0; uniform splits only)."""
    n = len(dataset)  # type: ignore[arg-type]
    return n * _tensor_bytes(dataset[0]) if n else 0


def _map(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map(v, fn) for v in value]
    return value


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], value


def _tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in a (nested dict / list) batch or item."""
    return sum(v.numel() * v.element_size() for _, v in _leaves(value) if isinstance(v, torch.Tensor))


class DeviceBatches:
    """The batches of one split, held on ``device`` and cut by index (module docstring).

    ``data`` is a collated batch of the whole split (every tensor with the samples along axis 0,
    on the device); iterating yields the batches the loader over ``sampler`` with ``batch_size``
    would yield for the sampler's current epoch. Build it with :meth:`build`.
    """

    def __init__(
        self, data: dict[str, Any], sampler: DistributedSampler, batch_size: int, device: torch.device, generator: torch.Generator | None = None
    ) -> None:
        self.data = data
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.device = torch.device(device)
        self.generator = generator

    @classmethod
    def build(
        cls,
        dataset: Dataset,
        sampler: DistributedSampler,
        batch_size: int,
        device: torch.device | str,
        *,
        generator: torch.Generator | None = None,
        collate_fn: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]] | None = None,
    ) -> DeviceBatches:
        """Collate ``dataset`` (chunks of :data:`BUILD_CHUNK` items) into tensors on ``device``.

        ``collate_fn`` defaults to the view's (``dataset.view_impl.collate``), as in
        :func:`opflow.data.torch_data.make_loader`. Raises ``ValueError`` with the reason when the
        items are not uniform (:func:`uniform_reason`) or the collate gives a tensor without the
        batch axis.
        """
        if collate_fn is None:
            collate_fn = getattr(getattr(dataset, "view_impl", None), "collate", None) or _default_collate
        why = uniform_reason(dataset)
        if why is not None:
            raise ValueError(why)
        device = torch.device(device)
        n = len(dataset)  # type: ignore[arg-type]
        full: dict[str, Any] | None = None
        fixed: dict[str, Any] = {}
        for lo in range(0, n, BUILD_CHUNK):
            hi = min(n, lo + BUILD_CHUNK)
            part = collate_fn([dataset[i] for i in range(lo, hi)])
            leaves = dict(_leaves(part))
            for name, v in leaves.items():
                if isinstance(v, torch.Tensor) and (v.dim() == 0 or v.shape[0] != hi - lo):
                    raise ValueError(f"the view's collate gives {name} of shape {list(v.shape)} without a batch axis of {hi - lo} items")
            if full is None:
                full = _map(part, lambda t: torch.empty((n, *t.shape[1:]), dtype=t.dtype, device=device))
                fixed = {k: v for k, v in leaves.items() if not isinstance(v, torch.Tensor)}
            elif {k: v for k, v in leaves.items() if not isinstance(v, torch.Tensor)} != fixed:
                raise ValueError("the view's collate gives different non-tensor entries for different items")
            for (name, dst), src in zip(_leaves(full), leaves.values(), strict=True):
                if isinstance(dst, torch.Tensor):
                    dst[lo:hi].copy_(src)
        if full is None:
            raise ValueError("the split is empty")
        return cls(full, sampler, batch_size, device, generator)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors held on the device."""
        return _tensor_bytes(self.data)

    def epoch_indices(self) -> list[list[int]]:
        """This epoch's batches as sample indices: ``list(sampler)`` in chunks of the batch size."""
        order = list(self.sampler)
        return [order[k : k + self.batch_size] for k in range(0, len(order), self.batch_size)]

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.generator is not None:  # what a DataLoader iterator without workers draws (its workers' base seed)
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        order = torch.as_tensor(list(self.sampler), dtype=torch.long)
        if self.device.type == "cuda":  # one copy per epoch, from pinned memory: no wait for the device
            order = order.pin_memory().to(self.device, non_blocking=True)
        for k in range(0, order.shape[0], self.batch_size):
            idx = order[k : k + self.batch_size]
            yield _map(self.data, lambda t, idx=idx: t.index_select(0, idx))
