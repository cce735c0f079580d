"""Neural operators: one module per architecture family, shared layers in ``layers/``.

The interface and registry are in :mod:`opflow.models.base`; ``build_model(config, ...)`` builds any
registered architecture from its config entry. Hyperparameters (names, types, defaults, enums)
are defined once in :mod:`opflow.models.hparams`, which imports no torch: importing this package
is cheap, and the names below load :mod:`opflow.models.base` (and torch) on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OperatorModel", "available_models", "build_model", "count_parameters", "register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module 'opflow.models' has no attribute {name!r}")
