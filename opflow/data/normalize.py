"""Normalisers of input and output features, fitted on the training split only, saved with the model.

Features are ``(S, N, C)`` (samples, points, channels) with an optional ``mask`` ``(S, N)`` that is
``False`` at padding. Every normaliser is an affine map per channel (and point)::

    encode(v) = (v - mean) / scale ,   decode(w) = w * scale + mean

* :class:`UnitGaussian` (``unit_gaussian``): one mean and standard deviation per channel over all
  training samples and real points: the ONO authors' ``UnitTransformer``. It applies unchanged at
  any resolution and on any mesh.
* :class:`Pointwise` (``pointwise``): mean and standard deviation per point and channel over the
  training samples, as the ``UnitGaussianNormalizer`` of the FNO and Galerkin Transformer code.
  It needs every sample on the same points. Fitted on a grid, it serves other grids over the same
  box (zero-shot resolutions) by bilinear (trilinear) interpolation of its mean and scale fields
  between the grids' corner-aligned nodes.
* :class:`Identity` (``none``).

Standard deviations are population ones (``correction = 0``). ``scale = std + eps * s_c`` with
``s_c`` the largest standard deviation of channel ``c`` (``eps = 1e-5``), so points where every
training sample agrees (Dirichlet boundaries) do not divide by zero while the relative size of
the guard is independent of the data's units (the FNO code adds an absolute 1e-5, which assumes
O(1) data). A channel that is constant everywhere gets ``scale = 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

EPS = 1e-5


def _masked_moments(x: torch.Tensor, mask: torch.Tensor | None, dims: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and population std of ``x`` over ``dims``, counting real points only; float64."""
    x = x.to(torch.float64)
    if mask is None:
        mean = x.mean(dim=dims)
        var = ((x - mean) ** 2).mean(dim=dims)
        return mean, var.sqrt()
    w = mask.to(torch.float64).unsqueeze(-1).expand_as(x)
    n = w.sum(dim=dims)
    if bool((n == 0).any()):
        raise ValueError("a normaliser statistic has no real (unmasked) points to be fitted on")
    mean = (x * w).sum(dim=dims) / n
    var = (((x - mean) ** 2) * w).sum(dim=dims) / n
    return mean, var.sqrt()


def _scale(std: torch.Tensor, eps: float) -> torch.Tensor:
    """std + eps * (largest std of the channel); 1 for a channel constant everywhere."""
    s_c = std.reshape(-1, std.shape[-1]).amax(dim=0)
    scale = std + eps * s_c
    return torch.where(s_c > 0, scale, torch.ones_like(scale))


class Normalizer:
    """Base class: ``fit``, ``encode``, ``decode``, ``state_dict``, ``to``."""

    kind = "base"

    def fit(self, x: torch.Tensor, mask: torch.Tensor | None = None, grid_shape: Sequence[int] | None = None) -> Normalizer:
        raise NotImplementedError

    def encode(self, x: torch.Tensor, grid_shape: Sequence[int] | None = None) -> torch.Tensor:
        mean, scale = self._stats(x, grid_shape)
        return (x - mean) / scale

    def decode(self, x: torch.Tensor, grid_shape: Sequence[int] | None = None) -> torch.Tensor:
        mean, scale = self._stats(x, grid_shape)
        return x * scale + mean

    def _stats(self, x: torch.Tensor, grid_shape: Sequence[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to(self, device: torch.device | str) -> Normalizer:
        return self


class Identity(Normalizer):
    kind = "none"

    def fit(self, x: torch.Tensor, mask: torch.Tensor | None = None, grid_shape: Sequence[int] | None = None) -> Identity:
        return self

    def encode(self, x: torch.Tensor, grid_shape: Sequence[int] | None = None) -> torch.Tensor:
        return x

    def decode(self, x: torch.Tensor, grid_shape: Sequence[int] | None = None) -> torch.Tensor:
        return x

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}


class UnitGaussian(Normalizer):
    """Per-channel mean and standard deviation over all training samples and real points."""

    kind = "unit_gaussian"

    def __init__(self, eps: float = EPS) -> None:
        self.eps = eps
        self.mean: torch.Tensor | None = None
        self.scale: torch.Tensor | None = None

    def fit(self, x: torch.Tensor, mask: torch.Tensor | None = None, grid_shape: Sequence[int] | None = None) -> UnitGaussian:
        mean, std = _masked_moments(x, mask, (0, 1))
        self.mean, self.scale = mean.to(torch.float32), _scale(std, self.eps).to(torch.float32)
        return self

    def _stats(self, x: torch.Tensor, grid_shape: Sequence[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mean is None or self.scale is None:
            raise RuntimeError("normaliser used before fit() or load_state_dict()")
        if x.shape[-1] != self.mean.shape[-1]:
            raise ValueError(f"normaliser fitted on {self.mean.shape[-1]} channels, got {x.shape[-1]}")
        return self.mean.to(x.device, x.dtype), self.scale.to(x.device, x.dtype)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "eps": self.eps, "mean": self.mean, "scale": self.scale}

    def load_state_dict(self, state: dict[str, Any]) -> UnitGaussian:
        self.eps, self.mean, self.scale = state["eps"], state["mean"], state["scale"]
        return self

    def to(self, device: torch.device | str) -> UnitGaussian:
        if self.mean is not None and self.scale is not None:
            self.mean, self.scale = self.mean.to(device), self.scale.to(device)
        return self


class Pointwise(Normalizer):
    """Per-point, per-channel mean and standard deviation over the training samples (FNO style)."""

    kind = "pointwise"

    def __init__(self, eps: float = EPS) -> None:
        self.eps = eps
        self.mean: torch.Tensor | None = None  # (N, C)
        self.scale: torch.Tensor | None = None
        self.grid_shape: tuple[int, ...] | None = None
        self._cache: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def fit(self, x: torch.Tensor, mask: torch.Tensor | None = None, grid_shape: Sequence[int] | None = None) -> Pointwise:
        if mask is not None and not bool(mask.all()):
            raise ValueError(
                "the pointwise normaliser needs every sample on the same points, but the data is padded "
                "(samples of different sizes); use unit_gaussian"
            )
        mean, std = _masked_moments(x, None, (0,))
        self.mean, self.scale = mean.to(torch.float32), _scale(std, self.eps).to(torch.float32)
        self.grid_shape = tuple(int(g) for g in grid_shape) if grid_shape is not None else None
        self._cache = {}
        return self

    def _stats(self, x: torch.Tensor, grid_shape: Sequence[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mean is None or self.scale is None:
            raise RuntimeError("normaliser used before fit() or load_state_dict()")
        mean, scale = self.mean, self.scale
        n = x.shape[-2]
        if n != mean.shape[0]:
            if self.grid_shape is None or grid_shape is None or len(grid_shape) != len(self.grid_shape):
                raise ValueError(
                    f"pointwise normaliser fitted on {mean.shape[0]} points cannot be applied to {n} points "
                    "off a grid; use unit_gaussian for data whose points change"
                )
            mean, scale = self._regrid(tuple(int(g) for g in grid_shape))
        return mean.to(x.device, x.dtype), scale.to(x.device, x.dtype)

    def _regrid(self, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and scale interpolated to another grid over the same box (corner-aligned nodes)."""
        if shape not in self._cache:
            assert self.grid_shape is not None and self.mean is not None and self.scale is not None
            mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(shape)]
            out = []
            for field in (self.mean, self.scale):
                c = field.shape[-1]
                g = field.T.reshape(1, c, *self.grid_shape)
                r = F.interpolate(g.to(torch.float64), size=shape, mode=mode, align_corners=True)
                out.append(r.reshape(c, -1).T.contiguous().to(torch.float32))
            self._cache[shape] = (out[0], out[1])
        return self._cache[shape]

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "eps": self.eps, "mean": self.mean, "scale": self.scale, "grid_shape": self.grid_shape}

    def load_state_dict(self, state: dict[str, Any]) -> Pointwise:
        self.eps, self.mean, self.scale = state["eps"], state["mean"], state["scale"]
        self.grid_shape = tuple(state["grid_shape"]) if state.get("grid_shape") is not None else None
        self._cache = {}
        return self

    def to(self, device: torch.device | str) -> Pointwise:
        if self.mean is not None and self.scale is not None:
            self.mean, self.scale = self.mean.to(device), self.scale.to(device)
        self._cache = {k: (m.to(device), s.to(device)) for k, (m, s) in self._cache.items()}
        return self


KINDS: dict[str, type[Normalizer]] = {"unit_gaussian": UnitGaussian, "pointwise": Pointwise, "none": Identity}


def make_normalizer(kind: str) -> Normalizer:
    if kind not in KINDS:
        raise ValueError(f"unknown normaliser {kind!r}; use one of {sorted(KINDS)}")
    return KINDS[kind]()


def normalizer_from_state(state: dict[str, Any]) -> Normalizer:
    """Rebuild a normaliser saved with :meth:`Normalizer.state_dict`."""
    norm = make_normalizer(state["kind"])
    if hasattr(norm, "load_state_dict"):
        norm.load_state_dict(state)  # type: ignore[attr-defined]
    return norm
