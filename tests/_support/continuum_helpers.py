"""Shared fixtures of the patched continuum-attention specifications (tests/opflow/models/test_vitno.py,
test_fano.py): grids of [0, 1)^2, a smooth input, small models, the observed refinement order and the
patch count each attention layer sees."""

from __future__ import annotations

import math

import numpy as np
import torch

from opflow.models import build_model
from opflow.models.continuum import PatchAttention


def periodic_grid(n: int) -> torch.Tensor:
    """``(1, n^2, 2)`` row-major points ``(i/n, j/n)``: the cells of [0, 1)^2, coarse grids strided subsets of fine ones."""
    x = torch.arange(n, dtype=torch.float64) / n
    X, Y = torch.meshgrid(x, x, indexing="ij")
    return torch.stack([X, Y], -1).reshape(1, -1, 2)


def smooth(c: torch.Tensor) -> torch.Tensor:
    return (torch.sin(2 * math.pi * c[..., 0]) * torch.cos(math.pi * c[..., 1]) + c[..., 0] ** 2)[..., None]


def small(arch: str, **kw) -> torch.nn.Module:
    torch.manual_seed(0)
    modes = {"vitno": {"lift_modes": 3}, "fano": {"qkv_modes": 3}}[arch]
    cfg = {"arch": arch, "patches_per_side": 2, "width": 16, "n_layers": 2, "n_heads": 2, "ffn_dim": 16, "smoothing_modes": 4, **modes, **kw}
    return build_model(cfg, 1, 1, 2).eval()


def refinement_order(model: torch.nn.Module, sizes=(16, 32, 64, 128), ref: int = 512) -> tuple[list[float], float]:
    """Max difference (relative) between the outputs on an n-grid and on the ref-grid at the n-grid's points,
    and the observed order (slope of log error against log n, negated)."""
    with torch.no_grad():
        c = periodic_grid(ref)
        out_ref = model(c, smooth(c), grid_shape=(ref, ref)).reshape(ref, ref)
        errs = []
        for n in sizes:
            c = periodic_grid(n)
            out = model(c, smooth(c), grid_shape=(n, n)).reshape(n, n)
            errs.append(float((out - out_ref[:: ref // n, :: ref // n]).abs().max() / out_ref.abs().max()))
    return errs, -float(np.polyfit(np.log(sizes), np.log(errs), 1)[0])


def patch_counts(model: torch.nn.Module, n: int) -> list[int]:
    """The number of patch tokens every attention layer sees on an n x n grid (forward hooks)."""
    seen: list[int] = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[1])) for m in model.modules() if isinstance(m, PatchAttention)]
    c = periodic_grid(n)
    with torch.no_grad():
        model(c, smooth(c), grid_shape=(n, n))
    for h in hooks:
        h.remove()
    return seen
