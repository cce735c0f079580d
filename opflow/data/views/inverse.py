"""View kind ``inverse``: noisy solution on the fine grid -> coefficient averaged onto a coarse grid
(:class:`opflow.data.inverse.InverseDataset`; the protocol, the averaging operator and the noise
are stated exactly there).

Specification (:class:`InverseView`, registered with the kind)::

    view: {kind: inverse, factor: 4, noise: 0.01, noise_seed: 20211127}

* ``factor`` (f >= 1, default 1 = no averaging): the coarse grid has ceil(n / f) values per axis
  of n fine nodes; the Galerkin Transformer protocol is f = 4 on 141 (-> 36) and f = 3 on 211
  (-> 71);
* ``noise`` (eps >= 0, default 0): the inputs get eps times a standard normal field scaled by the
  pointwise standard deviation of the training inputs;
* ``noise_seed`` (default 0): the seed of the per-sample noise draws;
* ``inputs`` (``fine``, default, or ``coarse``): where the model reads the (noisy) inputs. ``fine``:
  on the whole fine grid (the attention models of the protocol: GT, FT). ``coarse``: only at the
  coarse nodes, the fine node f I per axis (the fine grid strided by f; needs n - 1 = f (n_c - 1)
  per axis, as 141 -> 36 and 211 -> 71 are), so inputs and targets share the coarse grid: the
  Galerkin paper's "FNO2d (only n_c)" rows of Table 3 (:mod:`opflow.data.inverse`).

Batches carry the coarse ``query`` points when the targets are not at the input points (``inputs:
fine`` with f > 1); otherwise the view is a plain grid to the model (its targets on its grid, so a
grid-only model such as FNO trains on it). The statistics are the plain ones (relative L2 over the
coarse points). The plot shows the (noisy) input on its grid and truth, prediction and error on the
coarse grid. This module imports neither torch nor numpy at module level.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from opflow.schema import NonNegFloat, NonNegInt, PosInt
from ..view_spec import View
from .base import ViewKind

if TYPE_CHECKING:
    from ..inverse import InverseDataset


class InverseView(View):
    """The inverse problem on a grid file: the task's inputs (noisy) on the fine grid -> its outputs
    block-averaged by ``factor`` (module docstring)."""

    kind: Literal["inverse"] = "inverse"
    factor: PosInt = 1
    noise: NonNegFloat = 0.0
    noise_seed: NonNegInt = 0
    inputs: Literal["fine", "coarse"] = "fine"

    @property
    def targets_on_input_grid(self) -> bool:
        """Whether the targets lie at the points the model reads (no ``query`` needed)."""
        return self.factor == 1 or self.inputs == "coarse"

    def to_dict(self) -> dict[str, Any]:
        """Without ``inputs`` when it is ``fine``, so the run hashes of the earlier inverse sets stay as they were."""
        d = super().to_dict()
        if self.inputs == "fine":
            d.pop("inputs", None)
        return d


class InverseKind(ViewKind):
    """Fine noisy inputs -> coarse averaged outputs (:class:`opflow.data.inverse.InverseDataset`)."""

    name = "inverse"
    spec = InverseView

    def dataset(self, path: str | os.PathLike, split: str | None, task: Any, view: Any, purpose: str = "train") -> InverseDataset:
        """One split in memory, noised and averaged (``purpose`` changes nothing)."""
        from ..inverse import InverseDataset

        return InverseDataset(path, split, task, view)

    def plot(self, samples: Sequence[Mapping[str, Any]], dataset: Any, png: str | os.PathLike, *, title: str = "") -> None:
        """Per sample: the input on the fine grid; truth, prediction and error on the coarse grid."""
        import numpy as np

        from opflow import plots

        ds = dataset
        coarse = (ds.query_coords if ds.query_coords is not None else ds.coords).numpy()
        rows = max(1, len(samples))
        fig = plots.figure(figsize=(14, 3.2 * rows), layout="constrained")
        axes = np.atleast_2d(fig.subplots(rows, 4))
        in_name, out_name = list(ds.task.inputs)[0], list(ds.task.outputs)[0]
        eps = float(ds.view.noise)
        for r, s in enumerate(samples):
            true, pred = np.asarray(s["target"])[:, 0], np.asarray(s["pred"])[:, 0]
            err = pred - true
            lim = (float(min(true.min(), pred.min())), float(max(true.max(), pred.max())))
            emax = float(np.abs(err).max()) or 1.0
            plots._panel(fig, axes[r, 0], np.asarray(s["inputs"])[:, 0], np.asarray(s["coords"]), ds.grid_shape, "viridis", None)
            plots._panel(fig, axes[r, 1], true, coarse, ds.target_shape, "magma", lim)
            plots._panel(fig, axes[r, 2], pred, coarse, ds.target_shape, "magma", lim)
            plots._panel(fig, axes[r, 3], err, coarse, ds.target_shape, "RdBu_r", (-emax, emax))
            axes[r, 0].set_ylabel(s.get("label", ""))
            fine, cs = "x".join(map(str, ds.grid_shape)), "x".join(map(str, ds.target_shape))
            names = (f"input {in_name} ({fine}, eps {eps:g})", f"truth {out_name} ({cs})", "prediction", "error (pred - truth)")
            for c, name in enumerate(names):
                axes[r, c].set_title(name, fontsize=9)
        if title:
            fig.suptitle(title)
        plots.save_figure(fig, png)
