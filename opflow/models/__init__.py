"""Neural operators: one module per architecture family, shared layers in ``layers/``.

The interface and registry are in :mod:`opflow.models.base`; ``build_model(config, ...)`` builds any
registered architecture from its config entry.
"""

from .base import OperatorModel, available_models, build_model, count_parameters, register

__all__ = ["OperatorModel", "available_models", "build_model", "count_parameters", "register"]
