"""Does a model fit the data it is asked to train on? One check per (model, dataset view) pair, run at config load.

A model such as FNO needs a regular grid; ViTNO / FANO need grid sides divisible by their patches;
a derivative loss needs targets on a grid. Found only when training starts, such a mismatch costs
the whole data generation first. So each pair is checked when the workflow loads, against what the
dataset *will* look like:

* :class:`~opflow.models.needs.DataShape` describes a dataset view as the model sees it: a grid
  (points per axis) or a point cloud, its coordinate dimension, its extra input sets, the variable
  of its first input. The workflow builds it from the config alone (source solver + resolution +
  view, no data file: :func:`pipeline.config.view_shape`); the trainer builds it from the data it
  loaded (:meth:`DataShape.of_dataset`), so ``opflow train`` on a file refuses the same pairs with
  the same message.
* :class:`~opflow.models.needs.DataNeeds` is what an architecture requires of every dataset,
  declared beside its hyperparameters as the class attribute ``needs`` of its model in
  :mod:`opflow.models.hparams` (checked here by :func:`needs_misfits`); requirements that depend on
  hyperparameter values (patches dividing the grid, Fourier modes the grid has) are that model's
  ``misfits(data)`` method. A new architecture declares both there.
* the training settings have requirements of their own (derivative losses need targets on a grid),
  checked in the same pass (:func:`training_misfits`).

:func:`check_pair` runs all of them and raises one :class:`~opflow.data.errors.ConfigError` naming
the pair (``<dataset>_<model>``), the reason and the fix. This module imports neither torch nor
numpy (the Snakefile imports it when it loads).

Place in the imports (``opflow/__init__.py``): the check relates models and data, so it sits
above both and above the config it reads the training settings from: it imports
:mod:`opflow.config` and :mod:`opflow.models.hparams`, and nothing below imports it (the models
declare their needs in the words of :mod:`opflow.models.needs`, which this module re-exports).
``opflow.train`` and the workflow layer (:mod:`pipeline.config`) call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opflow.config import TrainConfig
from opflow.data.errors import ConfigError
from opflow.models.hparams import ARCHITECTURES, Hparams, check_hparams
from opflow.models.needs import DataNeeds, DataShape, Layout, modes_misfit, per_axis, spectral_mode_caps

#: the input variable names that are a Darcy coefficient a(x) (the permeability the Darcy solvers,
#: finite-difference and finite-element, write as ``coeff``): the weight of ``grad_form: h1_coeff``
COEFFICIENT_INPUTS: tuple[str, ...] = ("coeff",)


def archs_taking_points() -> list[str]:
    """The built-in architectures that train on point clouds (from their declared needs)."""
    return sorted(a for a, (hp, _) in ARCHITECTURES.items() if not hp.needs.grid)


def archs_taking_input_sets() -> list[str]:
    return sorted(a for a, (hp, _) in ARCHITECTURES.items() if hp.needs.input_sets)


def needs_misfits(needs: DataNeeds, arch: str, data: DataShape) -> list[str]:
    """Why ``data`` does not fit ``arch``'s declared ``needs`` (each a reason and a fix); empty when it does."""
    out = []
    if needs.grid and data.layout != "grid":
        out.append(f"{arch} needs a regular grid, but it is {data.describe()}; train a point-cloud model on it ({', '.join(archs_taking_points())})")
    elif data.coord_dim not in needs.dims:
        out.append(f"{arch} takes {' or '.join(f'{d}-D' for d in needs.dims)} data, but it is {data.describe()}")
    if data.input_sets and not needs.input_sets:
        out.append(
            f"{arch} takes no input functions on their own point sets, but the view declares {len(data.input_sets)} "
            f"(view.input_sets); use a model that does ({', '.join(archs_taking_input_sets())}) or remove view.input_sets"
        )
    if not data.targets_on_grid and not needs.query:
        out.append(f"{arch} predicts at its input grid points only, but the targets of view {data.view} lie on other points; use gt with output_grid: coarse")
    return out


# --------------------------------------------------------------------------- the check


def training_misfits(train: TrainConfig, data: DataShape) -> list[str]:
    """What the training settings need of the data: unrolled training a ``window`` view, derivative
    losses targets on a grid (at least 3 points per axis for the H1 regulariser), ``h1_coeff`` a
    Darcy coefficient as first input."""
    out = []
    if train.unroll != "none" and data.view != "window":
        out.append(
            f"training.unroll: {train.unroll} predicts whole trajectories frame by frame, but it is {data.describe()}; "
            "unrolled training needs a window view (view: {kind: window, ...}): set training.unroll: none for this dataset"
        )
        return out
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
        reasons = needs_misfits(hparams.needs, arch, data)
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
    values = {k: v for k, v in entry.items() if k not in ("arch", "training")}
    return check_hparams(entry["arch"], values, where)


__all__ = [
    "COEFFICIENT_INPUTS",
    "DataNeeds",
    "DataShape",
    "Layout",
    "archs_taking_input_sets",
    "archs_taking_points",
    "check_pair",
    "hparams_of",
    "modes_misfit",
    "needs_misfits",
    "pairs_of_targets",
    "per_axis",
    "spectral_mode_caps",
    "training_misfits",
]
