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
keys are constructor keyword arguments, checked against its signature so that a misspelt
hyperparameter stops with its name and the allowed ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from opflow.data.errors import ConfigError

_REGISTRY: dict[str, type[OperatorModel]] = {}


class OperatorModel(nn.Module):
    """Base class; subclasses implement :meth:`forward` with the signature in the module doc."""

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
    def deco(cls: type[OperatorModel]) -> type[OperatorModel]:
        _REGISTRY[name] = cls
        return cls

    return deco


def _load_builtin() -> None:
    import importlib
    import pkgutil

    import opflow.models as pkg

    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name not in ("base", "layers"):
            importlib.import_module(f"opflow.models.{m.name}")


def available_models() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def model_class(arch: str) -> type[OperatorModel]:
    if arch not in _REGISTRY:
        _load_builtin()
    if arch not in _REGISTRY:
        raise ConfigError(f"unknown model arch {arch!r}; available: {sorted(_REGISTRY)}")
    return _REGISTRY[arch]


def check_hparams(arch: str, hparams: Mapping[str, Any], where: str = "model") -> None:
    """Raise :class:`ConfigError` for hyperparameters the architecture does not take."""
    cls = model_class(arch)
    sig = inspect.signature(cls.__init__)
    allowed = [p for p in sig.parameters if p not in ("self", "in_channels", "out_channels", "coord_dim")]
    unknown = sorted(set(hparams) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: {arch} has no hyperparameter(s) {unknown}; allowed: {sorted(allowed)}")


def build_model(config: Mapping[str, Any], in_channels: int, out_channels: int, coord_dim: int, where: str = "model") -> OperatorModel:
    """Instantiate ``config['arch']`` with the other keys of ``config`` as hyperparameters."""
    if "arch" not in config:
        raise ConfigError(f"{where}: missing 'arch'; available: {available_models()}")
    hp = {k: v for k, v in config.items() if k != "arch"}
    check_hparams(config["arch"], hp, where)
    try:
        return model_class(config["arch"])(in_channels=in_channels, out_channels=out_channels, coord_dim=coord_dim, **hp)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
