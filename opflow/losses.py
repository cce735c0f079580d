"""The names of the training losses and derivative regularisers: a leaf module.

The config accepts these names (:class:`opflow.config.TrainConfig`: ``loss``, ``grad_form``) and
:mod:`opflow.metrics` computes them. Both import the names from here, so the list is written once
and neither of the two imports the other: the config stays torch-free, and the metrics (torch)
stay below the config and the data views that call them (``opflow/__init__.py``, "Direction of
imports"). Imports nothing.
"""

from __future__ import annotations

from typing import Literal, get_args

#: training losses (:func:`opflow.metrics.training_loss`)
Loss = Literal["rel_l2", "rel_h1", "mse"]
LOSSES: tuple[str, ...] = get_args(Loss)
#: derivative regularisers added to the loss with weight ``grad_weight`` (:func:`opflow.metrics.gradient_loss`)
GradForm = Literal["central", "h1", "h1_coeff"]
GRAD_FORMS: tuple[str, ...] = get_args(GradForm)

__all__ = ["GRAD_FORMS", "LOSSES", "GradForm", "Loss"]
