"""The one interface every neural operator implements, and the registry mapping config names to classes.

Every model maps a batch of discretised input functions to output values at query points::

    y = model(coords, inputs, query=None, mask=None, grid_shape=None)

* ``coords``: ``(B, N, d)`` input point coordinates (d = 1, 2 or 3);
* ``inputs``: ``(B, N, c_in)`` input features at those points;
* ``query``: ``(B, M, d)`` output locations, ``None`` meaning ``query = coords`` (M = N);
* ``mask``: ``(B, N)`` bool, ``True`` for real points and ``False`` for padding (point clouds of
  different sizes padded to the batch maximum); models must ignore padded points;
* ``grid_shape``: the ``(n_x, n_y)`` shape when the points are a row-major regular grid (models
  such as FNO that need a grid require it; point-cloud models ignore it);
* returns ``(B, M, c_out)``.

Models are built from the config with :func:`build_model`: ``arch`` picks the class, the remaining
keys are its hyperparameters, validated by the architecture's pydantic model in
:mod:`opflow.models.hparams` (names, types, ranges, defaults: one definition, also used by the
workflow's load-time check without importing torch).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from opflow.data.errors import ConfigError
from opflow.models.hparams import ARCHITECTURES, Hparams, available_archs
from opflow.models.hparams import REGISTERED as _REGISTRY  # the run-time registrations live in the torch-free hparams
from opflow.models.hparams import check_hparams as _check


class OperatorModel(nn.Module):
    """Base class; subclasses implement :meth:`forward` with the signature in the module doc.

    ``Hparams`` is the pydantic model of the class's hyperparameters (:mod:`opflow.models.hparams`),
    set by :func:`register` for the built-in architectures.
    """

    Hparams: ClassVar[type[Hparams]]

    def __init__(self, in_channels: int, out_channels: int, coord_dim: int) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.coord_dim = in_channels, out_channels, coord_dim

    def forward(  # pragma: no cover - abstract
        self,
        coords: torch.Tensor,
        inputs: torch.Tensor,
        query: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError


def register(name: str) -> Callable[[type[OperatorModel]], type[OperatorModel]]:
    """Register a model class under ``name``: built-in names take their ``Hparams`` from
    :data:`~opflow.models.hparams.ARCHITECTURES`; other classes must define ``Hparams`` themselves."""

    def deco(cls: type[OperatorModel]) -> type[OperatorModel]:
        if name in ARCHITECTURES:
            cls.Hparams = ARCHITECTURES[name][0]
        elif not isinstance(getattr(cls, "Hparams", None), type):
            raise TypeError(f"{cls.__name__} needs a class attribute Hparams (a pydantic model of its hyperparameters)")
        _REGISTRY[name] = cls
        return cls

    return deco


def registered(arch: str) -> type[OperatorModel] | None:
    """The class registered at run time under ``arch`` (None when there is none)."""
    return _REGISTRY.get(arch)


def registered_names() -> list[str]:
    return sorted(_REGISTRY)


def available_models() -> list[str]:
    return available_archs()


def model_class(arch: str) -> type[OperatorModel]:
    """The class of ``arch``, importing its module for a built-in architecture."""
    if arch in _REGISTRY:
        return _REGISTRY[arch]
    if arch not in ARCHITECTURES:
        raise ConfigError(f"unknown model arch {arch!r}; available: {available_archs()}")
    module, name = ARCHITECTURES[arch][1].split(":")
    return getattr(importlib.import_module(module), name)


def check_hparams(arch: str, hparams: Mapping[str, Any], where: str = "model") -> Hparams:
    """Validated hyperparameters of ``arch`` (:func:`opflow.models.hparams.check_hparams`)."""
    return _check(arch, dict(hparams), where)


def build_model(config: Mapping[str, Any], in_channels: int, out_channels: int, coord_dim: int, where: str = "model") -> OperatorModel:
    """Instantiate ``config['arch']`` with the other keys of ``config`` as hyperparameters.

    The values are validated by the architecture's ``Hparams`` model, which also supplies every
    default: the class is called with all hyperparameters spelled out.
    """
    if "arch" not in config:
        raise ConfigError(f"{where}: missing 'arch'; available: {available_models()}")
    hp = check_hparams(config["arch"], {k: v for k, v in config.items() if k != "arch"}, where)
    cls = model_class(config["arch"])
    return cls(in_channels=in_channels, out_channels=out_channels, coord_dim=coord_dim, **dict(hp))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
