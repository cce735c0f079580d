"""The inverse-problem view of a grid dataset (view kind ``inverse``): noisy solution on the fine
grid -> coefficient averaged onto a coarse grid.

Protocol (PROTOCOLS.md, "Inverse Darcy"; Cao 2021, Galerkin Transformer, Sec. 5.3 and appendix
C.4, eq. 23): the operator u_h + eps nu_h -> Pi_{h_c} a_h learned on the Darcy data with input
and output swapped, for eps in {0, 0.01, 0.1}, on 141 -> 36 and 211 -> 71. No new solve: the
view reads the same file as the forward sets (``darcy141`` / ``darcy211``).

Task. The task's inputs are the fine-grid fields the model reads (``pressure``), its outputs the
fields it recovers (``coeff``). Without a configured task the file's roles are swapped: inputs =
the variables with role ``output``, outputs = those with role ``input`` (:func:`inverse_task`).

Averaging Pi_{h_c} (:func:`block_average`), exactly. Per grid axis with n fine nodes (indices
i = 0 .. n-1) and an integer ``factor`` f: n_c = ceil(n / f) coarse values; the n nodes are padded
to n_c f slots by s = (n_c f - n) // 2 empty slots before and n_c f - n - s after, and coarse value
I is the mean of the fine values in slots [I f, I f + f), i.e. over the fine indices

    B_I = { i : I f - s <= i < I f - s + f,  0 <= i < n }.

In 2D the coarse value (I, J) is the mean of a[i, j] over the tensor block B_I x B_J (empty
slots are not counted). This is the non-overlapping mean pooling with centred NaN padding of the
Galerkin Transformer's released code (``pooling_2d(..., padding=True)``, applied to the
coefficient on the fine grid). For the protocol's grids (s = 1 in both):

* 141 -> 36 (f = 4, 144 slots): B_0 = {0, 1, 2}, B_I = {4I - 1, 4I, 4I + 1, 4I + 2} for
  I = 1 .. 34, B_35 = {139, 140}; so 3 x 3 nodes average into the corner value (0, 0), 4 x 4
  into an interior one and 2 x 2 into (35, 35);
* 211 -> 71 (f = 3, 213 slots): B_0 = {0, 1}, B_I = {3I - 1, 3I, 3I + 1} for I = 1 .. 69,
  B_70 = {209, 210}: each interior block is centred on the fine node 3I.

The coarse values sit at the node grid of n_c points spanning the fine grid's box (coordinate
x_0 + (x_{n-1} - x_0) I / (n_c - 1) per axis; the released code's ``linspace(0, 1, n_c)``). When
n - 1 = f (n_c - 1), as in both protocol grids, that is the fine node f I, which lies in B_I.

Noise (:func:`noise_fields`). Input channel c at fine point p of the sample with global index i
(the file's ``sample`` / ``sample_index``) gets eps * sqrt(var_c(p)) * z, where var_c(p) is the
variance (over the training split of the same file, float64, population variance) of the clean
input at p, and z is drawn once per sample as ``noise_rng(noise_seed, i).standard_normal((C, *grid))``
(channels in task order, then the grid in the file's layout). The draw depends only on
(noise_seed, i): a sample is noised identically in every call, split and epoch, in training and
test inputs alike, and sets with different eps share their z (so eps only scales the noise).
:func:`noise_rng` spawns a stream distinct from every generator's sample stream whatever the
seed. eps = 0 leaves the inputs exactly as stored. The released code adds eps N(0, 1) to the
inputs normalised per point by the training mean and standard deviation: the same distribution.

Batches carry ``query`` (the coarse coordinates) and a target on the coarse points; losses and
metrics are plain relative L2 over those points (the relative H1 loss needs the target's own grid
and is not supported on this view). ``grid_shape`` is the fine input grid.

Inputs on the coarse grid (``view.inputs: coarse``; :func:`opflow.data.coarsening.coarse_node_count`). The model reads the
noisy inputs only at the coarse nodes: the fine node f I along each axis, i.e. the fine grid strided
by f, which needs n - 1 = f (n_c - 1) (141 -> 36 and 211 -> 71 do; any other grid is refused). The
noise is drawn on the fine grid as above and taken at those nodes, so each coarse input is the clean
value plus eps sqrt(var(p)) z at the same point p. Inputs and targets then share the coarse grid:
``grid_shape`` is the coarse grid, ``coords`` its nodes (taken from the file's coordinates), and no
``query`` is carried (nor when f = 1). This is the reading of the Galerkin paper's "FNO2d (only
n_c)" rows (Table 3) that the authors' released data class gives when its input subsampling equals
its coarse one (``subsample_nodes = subsample_attn``: the solution strided to n_c, noised there, the
coefficient pooled onto n_c); the paper does not describe that run and its script was not released.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .coarsening import coarse_node_count, coarse_size
from .errors import DatasetError
from .format import open_dataset, read_dataset
from .normalize import Normalizer
from .torch_data import ArrayDataset, GridDataset, Normalizers, Task, fit_normalizer, resolve_task

__all__ = [
    "InverseDataset",
    "block_average",
    "block_members",
    "coarse_size",
    "inverse_task",
    "noise_fields",
    "noise_rng",
    "training_variance",
]

#: the second word of the noise streams' spawn key (SeedSequence(seed, spawn_key=(i, NOISE_STREAM))):
#: generators draw sample i from spawn_key=(i,), so the two never coincide
NOISE_STREAM = 1


# --------------------------------------------------------------------------- the averaging operator


def block_members(n: int, factor: int) -> list[np.ndarray]:
    """The fine indices B_I averaged into each coarse value I along one axis (module docstring)."""
    nc = coarse_size(n, factor)
    s = (nc * factor - n) // 2
    return [np.arange(max(0, i * factor - s), min(n, i * factor - s + factor)) for i in range(nc)]


def _average_axis(a: np.ndarray, axis: int, factor: int) -> np.ndarray:
    """Block means along ``axis`` (vectorised: pad with zeros, sum blocks, divide by the counts)."""
    n = a.shape[axis]
    nc = coarse_size(n, factor)
    s = (nc * factor - n) // 2
    pad = [(0, 0)] * a.ndim
    pad[axis] = (s, nc * factor - n - s)
    padded = np.pad(a, pad)
    shape = a.shape[:axis] + (nc, factor) + a.shape[axis + 1 :]
    sums = padded.reshape(shape).sum(axis=axis + 1)
    counts = np.array([len(b) for b in block_members(n, factor)], dtype=np.float64)
    view = [1] * sums.ndim
    view[axis] = nc
    return sums / counts.reshape(view)


def block_average(a: np.ndarray, factor: int, axes: Sequence[int]) -> np.ndarray:
    """Pi_{h_c}: the mean of ``a`` over the blocks B_I x B_J x ... of ``axes`` (module docstring), float64.

    The tensor-block mean is the composition of the per-axis block means (each block's count is
    the product of its per-axis counts).
    """
    out = np.asarray(a, dtype=np.float64)
    for ax in axes:
        out = _average_axis(out, ax, factor)
    return out


# --------------------------------------------------------------------------- noise


def noise_rng(seed: int, index: int) -> np.random.Generator:
    """The noise generator of the sample with global index ``index`` (module docstring)."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(int(index), NOISE_STREAM)))


def noise_fields(seed: int, indices: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """Standard normal z of each sample, ``(len(indices), *shape)`` float64, one generator per sample."""
    out = np.empty((len(indices), *shape))
    for b, i in enumerate(indices):
        out[b] = noise_rng(seed, int(i)).standard_normal(tuple(shape))
    return out


def training_variance(path: str | os.PathLike, names: Sequence[str], *, block: int = 64) -> np.ndarray:
    """Pointwise variance over the training split of the fields ``names`` (clean, as stored):
    ``(len(names), *grid)`` float64, population variance, accumulated in blocks of samples.

    A file without a ``split`` variable (a source used as an evaluation set) uses every sample.
    """
    path = Path(path)
    with open_dataset(path) as nc:
        if "split" in nc.variables:
            n = int(np.count_nonzero(np.asarray(nc.variables["split"][:]) == 0))
            split: str | None = "train"
        else:
            n, split = len(nc.dimensions["sample"]), None
    if n == 0:
        raise DatasetError(f"{path}: the noise is scaled by the training variance, but the file has no training samples")
    total = sq = None
    for b in range(0, n, block):
        ds = read_dataset(path, list(names), split=split, samples=slice(b, min(b + block, n)))
        x = np.stack([np.asarray(ds[name], dtype=np.float64) for name in names], axis=1)  # (s, C, *grid)
        total = x.sum(axis=0) if total is None else total + x.sum(axis=0)
        sq = (x * x).sum(axis=0) if sq is None else sq + (x * x).sum(axis=0)
    assert total is not None and sq is not None
    mean = total / n
    return np.maximum(sq / n - mean * mean, 0.0)


# --------------------------------------------------------------------------- the dataset


def inverse_task(path: str | os.PathLike, task: Task | Mapping[str, Any] | None) -> Task:
    """The task of the inverse view: as configured, or the file's roles swapped (module docstring)."""
    t = resolve_task(path, task, swap_roles=True)
    for key in ("inputs", "outputs"):
        if not getattr(t, key):
            raise DatasetError(f"{path}: the inverse view needs {key}; name them in datasets.<name>.task.{key}")
    return t


class InverseDataset(ArrayDataset):
    """One split of a grid file under the inverse view, in memory (module docstring).

    Attributes beyond :class:`~opflow.data.torch_data.ArrayDataset`'s: ``query_coords (M, d)`` (None
    when the targets lie at the input points: ``inputs: coarse`` or factor 1) and ``target_shape``
    (the coarse grid), ``fine_target`` (the outputs on the fine grid, float32),
    ``clean_inputs`` (the inputs before the noise), ``noise_std`` (``(N, c_in)``: eps times the
    pointwise training standard deviation; None when eps = 0), ``view``.
    """

    kind = "inverse"

    def __init__(self, path: str | os.PathLike, split: str | None, task: Task | Mapping[str, Any] | None, view: Any) -> None:
        self._init_common(path, split)
        self.view = view
        task = inverse_task(self.path, task)
        grid = GridDataset(self.path, split, task)
        self.task, self.global_names, self.units, self.attrs = grid.task, grid.global_names, grid.units, grid.attrs
        self.sample_index = np.asarray(grid.sample_index)
        self.grid_shape = grid.grid_shape
        self.coords, self.globals = grid.coords, grid.globals
        shape = tuple(int(g) for g in grid.grid_shape or ())
        d = len(shape)
        factor = int(view.factor)
        if factor > min(shape):
            raise DatasetError(f"{self.path}: view.factor {factor} exceeds the grid {shape}; the coarse grid needs at least one block per axis")
        s, n_pts = len(grid), int(np.prod(shape))
        # the target: block means of the fine outputs, (S, N, c) -> (S, M, c)
        c_out = grid.target.shape[-1]
        fine = grid.target.numpy().reshape(s, *shape, c_out)
        coarse = block_average(fine, factor, axes=range(1, d + 1))
        self.target_shape = tuple(coarse.shape[1:-1])
        self.fine_target = grid.target
        self.target = torch.from_numpy(coarse.reshape(s, -1, c_out).astype(np.float32))
        # the coarse node grid spanning the fine grid's box
        lo, hi = grid.coords.min(dim=0).values.double().numpy(), grid.coords.max(dim=0).values.double().numpy()
        axes = [lo[a] + (hi[a] - lo[a]) * np.arange(nc) / max(nc - 1, 1) for a, nc in enumerate(self.target_shape)]
        mesh = np.meshgrid(*axes, indexing="ij")
        self.query_coords: torch.Tensor | None = torch.from_numpy(np.stack([m.ravel() for m in mesh], axis=-1).astype(np.float32))
        # the inputs: clean + eps sqrt(var) z
        self.clean_inputs = grid.inputs
        self.noise_std: torch.Tensor | None = None
        eps = float(view.noise)
        point_inputs = [n for n in self.task.inputs if n not in self.global_names]
        if eps > 0 and point_inputs:
            c_in = len(point_inputs)
            # read from the file whatever the split: one computation, so a sample is noised
            # bit-identically in every split selection that contains it
            var = training_variance(self.path, point_inputs).reshape(c_in, n_pts)
            std = eps * np.sqrt(var)  # (C, N)
            z = noise_fields(view.noise_seed, self.sample_index.tolist(), (c_in, *shape)).reshape(s, c_in, n_pts)
            noisy = grid.inputs.double().numpy() + np.transpose(std[None] * z, (0, 2, 1))
            self.inputs = torch.from_numpy(noisy.astype(np.float32))
            self.noise_std = torch.from_numpy(std.T.astype(np.float32))
        else:
            self.inputs = grid.inputs
        if view.inputs == "coarse":
            self._inputs_at_coarse_nodes(shape, factor)
        elif factor == 1:  # the targets are the fine outputs themselves: a plain grid to the model
            self.query_coords = None

    def _inputs_at_coarse_nodes(self, shape: tuple[int, ...], factor: int) -> None:
        """``view.inputs: coarse``: inputs, clean inputs, noise scale and coordinates kept at the coarse
        nodes only (module docstring); the grid becomes the coarse one and no query is carried."""
        try:
            nodes = [np.arange(coarse_node_count(n, factor)) * factor for n in shape]  # the fine nodes f I
        except DatasetError as err:
            raise DatasetError(f"{self.path}: {err}") from None
        flat = np.ravel_multi_index(np.meshgrid(*nodes, indexing="ij"), shape).ravel()
        keep = torch.from_numpy(flat)
        self.inputs = self.inputs[:, keep]
        self.clean_inputs = self.clean_inputs[:, keep]
        if self.noise_std is not None:
            self.noise_std = self.noise_std[keep]
        self.coords = self.coords[keep]
        self.grid_shape = self.target_shape
        self.query_coords = None

    @property
    def factor(self) -> int:
        return int(self.view.factor)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = super().__getitem__(i)
        if self.query_coords is not None:
            item["query"] = self.query_coords
        return item

    def fit_normalizers(self, input_kind: str, output_kind: str) -> Normalizers:
        """As the base class, with the output normaliser fitted on the coarse target grid."""
        base = super().fit_normalizers(input_kind, "none")
        outputs: Normalizer = fit_normalizer(output_kind, self.target, None, self.target_shape)
        return Normalizers(base.inputs, outputs, base.globals)

    def describe(self) -> str:
        """One line: grids, factor and noise (for logs)."""
        eps = float(self.view.noise)
        return (
            f"inverse view: {list(self.task.inputs)} on {'x'.join(map(str, self.grid_shape or ()))} "
            f"(noise eps {eps:g}, seed {self.view.noise_seed}) -> {list(self.task.outputs)} averaged by "
            f"{self.factor} onto {'x'.join(map(str, self.target_shape))}"
        )
