"""The view-kind interface: everything opflow does differently for one kind of view.

A :class:`ViewKind` turns a dataset file into a torch dataset (:meth:`ViewKind.dataset`), batches
its items (:meth:`ViewKind.collate`), adds its own statistics to the results JSON
(:meth:`ViewKind.metrics`) and draws the results PNG (:meth:`ViewKind.plot`). Only
:meth:`~ViewKind.dataset` is abstract; the defaults are those of the plain operator-learning views
(``grid``, ``series``, ``mesh``, ``one_step``): the built-in specification of
:mod:`opflow.data.view_spec`, :func:`opflow.data.torch_data.collate`, no extra statistics, and
input / truth / prediction / error panels (:func:`opflow.plots.plot_predictions`).

This module imports neither torch nor numpy at module level (the workflow imports the views when it
loads); each method imports what it needs.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..view_spec import View, spec_of

if TYPE_CHECKING:
    import numpy as np
    from torch.utils.data import Dataset

#: what :func:`opflow.data.views.make_dataset` may be asked for: training items, whole training
#: trajectories for unrolled training (``training.unroll``; ``window`` views only), or the items a
#: model is evaluated on (whole trajectories under a ``window`` view)
PURPOSES = ("train", "unroll", "rollout")


def training_purpose(unroll: str | None) -> str:
    """The purpose of a training split under ``training.unroll`` (``none`` or unset: ``"train"``)."""
    return "train" if unroll in (None, "none") else "unroll"


class ViewKind(ABC):
    """One kind of view (``datasets.<name>.view.kind``): its dataset, batches, statistics and plot.

    Subclasses set :attr:`name` and implement :meth:`dataset`; register an instance with
    :func:`opflow.data.views.register` (the package docstring: "Adding a view kind").

    The datasets a kind builds are read by the trainer and the evaluator through the attributes of
    :class:`opflow.data.torch_data.ArrayDataset` (deriving from it is the easy way): items are the
    dicts of the batch format of :mod:`opflow.data.torch_data`, and ``task``, ``coord_dim``,
    ``in_channels``, ``out_channels``, ``global_channels``, ``grid_shape``, ``sample_index``,
    ``rollout_steps``, ``fit_normalizers`` and ``info`` are used.
    """

    #: the kind's name: the value of ``view.kind`` in the workflow config (a Python identifier)
    name: str = ""

    @property
    def spec(self) -> type[View]:
        """The kind's specification model (:mod:`opflow.data.view_spec`): its parameters, their
        types, defaults and checks. The default is the built-in model of :attr:`name`; a kind with
        parameters of its own sets a :class:`~opflow.data.view_spec.View` subclass, whose ``kind``
        field defaults to the kind's name. Registering the kind registers its spec, so the workflow
        config accepts ``view: {kind: <name>, ...}`` once the kind's module is imported."""
        model = spec_of(self.name)
        if model is None:
            raise TypeError(f"view kind {self.name!r} has no specification; set {type(self).__name__}.spec to a View subclass")
        return model

    @abstractmethod
    def dataset(
        self,
        path: str | os.PathLike,
        split: str | None,
        task: Any,
        view: Any,
        purpose: str = "train",
    ) -> Dataset:
        """The torch dataset of ``split`` of ``path`` (``None``: every sample) under ``view``.

        ``task`` is a :class:`~opflow.data.torch_data.Task`, a mapping with ``inputs`` /
        ``outputs`` or None (the file's roles); ``view`` is an instance of :attr:`spec`;
        ``purpose`` is one of :data:`PURPOSES` (``"rollout"``: the items a model is evaluated on).
        """

    def collate(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """One batch from per-sample items (default :func:`opflow.data.torch_data.collate`)."""
        from ..torch_data import collate

        return collate(items)

    def metrics(self, e2: np.ndarray, r2: np.ndarray, dataset: Any) -> dict[str, Any]:
        """This kind's own statistics, added to the plain ones of the results JSON (default none).

        ``e2`` and ``r2`` are ``(samples, target channels)``: per sample and channel of the target,
        ``sum (pred - true)^2`` and ``sum true^2`` over the real points
        (:func:`opflow.metrics.squared_sums`); the evaluator already reports the relative L2
        statistics over all channels and per output variable.
        """
        return {}

    def plot(self, samples: Sequence[Mapping[str, Any]], dataset: Any, png: str | os.PathLike, *, title: str = "") -> None:
        """Draw the evaluation PNG of some test samples (default: input, truth, prediction, error).

        Each sample is a dict of numpy arrays in physical units: ``coords (N, d)``, ``inputs (N,
        c_in)``, ``target`` and ``pred (N, c_out)`` of one dataset item (real points only), plus
        ``grid_shape``, ``label`` (a title for its row) and ``index`` (its position in ``dataset``).
        """
        plot_predictions(samples, dataset, png, title=title)


def plot_predictions(samples: Sequence[Mapping[str, Any]], dataset: Any, png: str | os.PathLike, *, title: str = "") -> None:
    """Input, truth, prediction and error of the first input and output channel (:func:`opflow.plots.plot_predictions`).

    Without input channels the first coordinate stands in for the input.
    """
    from opflow import plots

    names = list(dataset.task.inputs) or ["(coordinates)"]
    if dataset.in_channels == 0:
        samples = [{**s, "inputs": s["coords"][:, :1]} for s in samples]
    plots.plot_predictions(samples, png, input_name=names[0], output_name=list(dataset.task.outputs)[0], title=title)


def summary_stats(errors: np.ndarray) -> dict[str, float]:
    """Mean, median, std and max of per-sample errors (:func:`opflow.metrics.summary` without ``n``)."""
    from opflow.metrics import summary

    return {k: v for k, v in summary(errors).items() if k != "n"}
