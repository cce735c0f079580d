"""What a model needs of its data, and what a dataset view is to a model: the vocabulary of the fit check.

:class:`DataShape` describes a dataset view as a model sees it (grid or points, dimension, sizes,
input sets); :class:`DataNeeds` is what an architecture requires of every dataset, declared as
the class attribute ``needs`` of its hyperparameter model (:mod:`opflow.models.hparams`), whose
``misfits(data)`` method states the requirements that depend on hyperparameter values with the
helpers below (:func:`modes_misfit`, :func:`per_axis`, :func:`spectral_mode_caps`).

The check that relates the two, :func:`opflow.compat.check_pair`, sits above both models and
data; this module is below the models (they declare their needs in its words) and imports nothing
(no torch, nothing of opflow), so the hyperparameters and the spectral layers can use it without
importing the check (``opflow/__init__.py``, "Direction of imports").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Layout = Literal["grid", "points"]


@dataclass(frozen=True)
class DataShape:
    """One dataset view as a model sees it (module docstring).

    ``layout``: ``grid`` when the points are one complete row-major grid (a field on ``x[, y]``, a
    trajectory's frames, or a 1-D series, whose points the grid models take as their grid) or
    ``points`` (a point cloud: meshes, ragged sets). ``grid``: points per axis of a grid (None for
    point clouds). ``n_points``: points per sample when every sample has the same number (None when
    unknown from the config, e.g. a mesh whose node count varies with the sample: for those only
    the layout and the dimension are checked). ``targets_on_grid``: the targets lie at the grid
    points (False for the ``inverse`` view, whose targets are on a coarser grid). ``input_sets``:
    ``(coordinate dimension, channels)`` of each extra input set of the view (``None`` entries:
    not known from the config). ``first_input``: the variable of the first input channel (None:
    no point inputs, or unknown). ``label``: how messages name it.
    """

    label: str
    view: str
    layout: Layout
    coord_dim: int
    grid: tuple[int, ...] | None = None
    n_points: int | None = None
    targets_on_grid: bool = True
    input_sets: tuple[tuple[int, int] | None, ...] = ()
    first_input: str | None = None
    #: False for zero-shot grids and extra evaluation sets: only what would fail is checked there,
    #: not what is merely wasteful (more Fourier modes than the grid has are dropped, legally)
    training: bool = True

    def describe(self) -> str:
        """``a 2-D grid of 43 x 43 points`` / ``a 2-D point cloud (view mesh)``."""
        if self.layout == "grid" and self.grid is not None:
            return f"a {len(self.grid)}-D grid of {' x '.join(map(str, self.grid))} points (view {self.view})"
        n = f", {self.n_points} points" if self.n_points else ""
        return f"a {self.coord_dim}-D point cloud (view {self.view}{n})"

    @classmethod
    def of_dataset(cls, ds: Any, label: str, view: str) -> DataShape:
        """The shape of a loaded :class:`~opflow.data.torch_data.ArrayDataset` (what the trainer got)."""
        d = int(ds.coord_dim)
        n = int(ds.inputs.shape[1])
        grid = tuple(int(g) for g in ds.grid_shape) if ds.grid_shape is not None else None
        if grid is None and d == 1 and ds.counts is None:  # a 1-D point set of fixed size: the grid models' (N,) grid
            grid = (n,)
        inputs = [v for v in ds.task.inputs if v not in set(getattr(ds, "global_names", ()))]
        return cls(
            label=label,
            view=view,
            layout="grid" if grid is not None and ds.counts is None else "points",
            coord_dim=d,
            grid=grid if ds.counts is None else None,
            n_points=n if ds.counts is None else None,
            targets_on_grid=getattr(ds, "query_coords", None) is None,
            input_sets=tuple(tuple(s.shape) for s in getattr(ds, "input_sets", ())),
            first_input=inputs[0] if inputs else None,
        )


@dataclass(frozen=True)
class DataNeeds:
    """What an architecture requires of every dataset (its ``needs``, beside its hyperparameters).

    ``grid``: needs a complete regular grid (a 1-D series counts); ``dims``: the coordinate
    dimensions it takes; ``input_sets``: takes extra input functions on their own point sets (a
    ``mesh`` view's ``input_sets``); ``query``: predicts at points other than its input points
    (the ``inverse`` view's coarse targets).
    """

    grid: bool = False
    dims: tuple[int, ...] = (1, 2, 3)
    input_sets: bool = False
    query: bool = True


# --------------------------------------------------------------------------- helpers of the models' misfits


def spectral_mode_caps(grid: Sequence[int]) -> tuple[int, ...]:
    """Fourier modes per axis a grid has for :class:`~opflow.models.layers.SpectralConv`: ``n // 2``
    per sign on the leading axes, ``n // 2 + 1`` (the real FFT's) on the last one."""
    *lead, last = (int(n) for n in grid)
    return (*(n // 2 for n in lead), last // 2 + 1)


def per_axis(value: int | Sequence[int], ndim: int, key: str) -> tuple[int, ...] | str:
    """``value`` as one int per grid axis, or the reason it cannot be (a list of the wrong length)."""
    if isinstance(value, int):
        return (value,) * ndim
    out = tuple(int(v) for v in value)
    if len(out) != ndim:
        return f"{key} {list(out)} has {len(out)} entries but the data have {ndim} grid axis(es); give one per axis or a single int"
    return out


def modes_misfit(key: str, modes: int | Sequence[int], grid: Sequence[int], what: str) -> str | None:
    """The reason ``modes`` exceed the Fourier modes of ``grid`` (``what`` names it), or None."""
    m = per_axis(modes, len(grid), key)
    if isinstance(m, str):
        return m
    caps = spectral_mode_caps(grid)
    if all(a <= c for a, c in zip(m, caps)):
        return None
    shown = modes if isinstance(modes, int) else list(modes)
    limit = min(caps) if isinstance(modes, int) else list(caps)
    return (
        f"{key} {shown} exceeds the Fourier modes of {what} {' x '.join(map(str, grid))} ({list(caps)} per axis: n // 2, "
        f"n // 2 + 1 on the last), so the extra weights would never be used; set {key} <= {limit}"
    )


__all__ = ["DataNeeds", "DataShape", "Layout", "modes_misfit", "per_axis", "spectral_mode_caps"]
