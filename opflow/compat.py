"""Does a model fit the data it is asked to train on? One check per (model, dataset view) pair, run at config load.

A model such as FNO needs a regular grid; ViTNO / FANO need grid sides divisible by their patches;
a derivative loss needs targets on a grid. Found only when training starts, such a mismatch costs
the whole data generation first. So each pair is checked when the workflow loads, against what the
dataset *will* look like:

* :class:`DataShape` describes a dataset view as the model sees it: a grid (points per axis) or a
  point cloud, its coordinate dimension, its extra input sets, the variable of its first input.
  The workflow builds it from the config alone (source solver + resolution + view, no data file:
  :func:`solvers.config.view_shape`); the trainer builds it from the data it loaded
  (:meth:`DataShape.of_dataset`), so ``opflow train`` on a file refuses the same pairs with the
  same message.
* :class:`DataNeeds` is what an architecture requires of every dataset, declared beside its
  hyperparameters as the class attribute ``needs`` of its model in :mod:`opflow.models.hparams`;
  requirements that depend on hyperparameter values (patches dividing the grid, Fourier modes the
  grid has) are that model's ``misfits(data)`` method. A new architecture declares both there.
* the training settings have requirements of their own (derivative losses need targets on a grid),
  checked in the same pass (:func:`training_misfits`).

:func:`check_pair` runs all of them and raises one :class:`~opflow.data.errors.ConfigError` naming
the pair (``<dataset>_<model>``), the reason and the fix. This module imports neither torch nor
numpy (the Snakefile imports it when it loads).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from opflow.data.errors import ConfigError

if TYPE_CHECKING:
    from opflow.config import TrainConfig
    from opflow.models.hparams import Hparams

Layout = Literal["grid", "points"]

#: the input variable names that are a Darcy coefficient a(x) (the permeability the Darcy solvers,
#: finite-difference and finite-element, write as ``coeff``): the weight of ``grad_form: h1_coeff``
COEFFICIENT_INPUTS: tuple[str, ...] = ("coeff",)


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

    def misfits(self, arch: str, data: DataShape) -> list[str]:
        """Why ``data`` does not fit these needs (each a reason and a fix); empty when it does."""
        out = []
        if self.grid and data.layout != "grid":
            out.append(f"{arch} needs a regular grid, but it is {data.describe()}; train a point-cloud model on it ({', '.join(archs_taking_points())})")
        elif data.coord_dim not in self.dims:
            out.append(f"{arch} takes {' or '.join(f'{d}-D' for d in self.dims)} data, but it is {data.describe()}")
        if data.input_sets and not self.input_sets:
            out.append(
                f"{arch} takes no input functions on their own point sets, but the view declares {len(data.input_sets)} "
                f"(view.input_sets); use a model that does ({', '.join(archs_taking_input_sets())}) or remove view.input_sets"
            )
        if not data.targets_on_grid and not self.query:
            out.append(f"{arch} predicts at its input grid points only, but the targets of view {data.view} lie on other points; use gt with output_grid: coarse")
        return out


# --------------------------------------------------------------------------- helpers of the models' checks


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


def archs_taking_points() -> list[str]:
    """The built-in architectures that train on point clouds (from their declared needs)."""
    from opflow.models.hparams import ARCHITECTURES

    return sorted(a for a, (hp, _) in ARCHITECTURES.items() if not hp.needs.grid)


def archs_taking_input_sets() -> list[str]:
    from opflow.models.hparams import ARCHITECTURES

    return sorted(a for a, (hp, _) in ARCHITECTURES.items() if hp.needs.input_sets)


# --------------------------------------------------------------------------- the check


def training_misfits(train: TrainConfig, data: DataShape) -> list[str]:
    """What the training settings need of the data: derivative losses need targets on a grid (at
    least 3 points per axis for the H1 regulariser), ``h1_coeff`` a Darcy coefficient as first input."""
    out = []
    derivatives = [k for k, on in (("training.loss: rel_h1", train.loss == "rel_h1"), (f"training.grad_weight: {train.grad_weight}", train.grad_weight > 0)) if on]
    if derivatives and (data.layout != "grid" or not data.targets_on_grid):
        where = f"it is {data.describe()}" if data.layout != "grid" else f"the targets of view {data.view} do not lie on its grid"
        verb = "need" if len(derivatives) > 1 else "needs"
        out.append(f"{' and '.join(derivatives)} {verb} derivatives on a grid, but {where}; set loss: rel_l2 (or mse) and grad_weight: 0 for this dataset")
        return out
    if train.grad_weight > 0 and train.grad_form in ("h1", "h1_coeff") and data.grid is not None and min(data.grid) < 3:
        out.append(f"grad_form {train.grad_form} needs at least 3 points per grid axis (interior nodes), the grid has {list(data.grid)}")
    if train.grad_weight > 0 and train.grad_form == "h1_coeff" and data.training and data.first_input not in COEFFICIENT_INPUTS:
        first = f"is {data.first_input!r}" if data.first_input else "does not exist (no point inputs)"
        out.append(
            f"grad_form h1_coeff weights the H1 term by the Darcy coefficient (first input, one of {list(COEFFICIENT_INPUTS)}), but the "
            f"first input {first}; use grad_form: h1 (unweighted)"
        )
    return out


def check_pair(dataset: str, model: str, arch: str, hparams: Hparams, train: TrainConfig | None, shapes: Iterable[DataShape]) -> None:
    """Refuse the pair (``datasets.<dataset>``, ``models.<model>``) when a shape does not fit (module docstring).

    ``shapes``: the training view first, then the zero-shot grids and extra evaluation sets (their
    ``training`` false); ``train``: the merged training settings (None: not checked). Raises one
    :class:`ConfigError` ``<dataset>_<model>: models.<model> (arch) on <label>: <reason>; <fix>``.
    """
    for data in shapes:
        reasons = hparams.needs.misfits(arch, data)
        if not reasons:
            reasons = list(hparams.misfits(data))
        if not reasons and train is not None and data.training:
            reasons = training_misfits(train, data)
        if reasons:
            raise ConfigError(f"{dataset}_{model}: models.{model} ({arch}) on {data.label}: {reasons[0]}")


def pairs_of_targets(targets: Iterable[str], datasets: Iterable[str], models: Iterable[str], root: str = ".") -> list[tuple[str, str]]:
    """The (dataset, model) pairs that ``targets`` ask for: ``results/<d>_<m>.json``, ``results/<d>_<m>.png``
    or ``models/<d>_<m>/...`` under ``root`` (other targets ask for none)."""
    import re

    def alt(names: Iterable[str]) -> str:
        return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!)"

    prefix = "" if root in ("", ".") else re.escape(root.rstrip("/")) + "/"
    pattern = re.compile(rf"(?:\./)?{prefix}(?:results/(?P<d1>{alt(datasets)})_(?P<m1>{alt(models)})\.(?:json|png)|models/(?P<d2>{alt(datasets)})_(?P<m2>{alt(models)})/.+)")
    out: list[tuple[str, str]] = []
    for t in targets:
        m = pattern.fullmatch(str(t))
        if m:
            pair = (m["d1"] or m["d2"], m["m1"] or m["m2"])
            if pair not in out:
                out.append(pair)
    return out


def hparams_of(entry: Mapping[str, Any], where: str) -> Hparams:
    """The validated hyperparameters of a model entry (``arch`` + values; ``training`` left out)."""
    from opflow.models.hparams import check_hparams

    values = {k: v for k, v in entry.items() if k not in ("arch", "training")}
    return check_hparams(entry["arch"], values, where)


__all__ = [
    "COEFFICIENT_INPUTS",
    "DataNeeds",
    "DataShape",
    "archs_taking_input_sets",
    "archs_taking_points",
    "check_pair",
    "modes_misfit",
    "pairs_of_targets",
    "per_axis",
    "spectral_mode_caps",
    "training_misfits",
]
