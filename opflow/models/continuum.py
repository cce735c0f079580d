"""ViTNO and FANO, the patched transformer neural operators of Calvello, Kovachki, Levine, Stuart,
"Continuum attention for neural operators" (arXiv 2406.06486): Section 3 (patched attention,
Definitions 13-14), Sections 4.3-4.4, Appendix B.2-B.3 (eqs. 60-70), Remark 21; config names
``vitno`` and ``fano``.

Patches fixed in physical space. The domain ``D`` is cut into ``P = prod_a patches_per_side_a``
congruent boxes ``D_1 .. D_P``; on a row-major regular grid of ``n_a`` points per axis each patch
holds ``p_a = n_a / patches_per_side_a`` points per axis. The number of patches is a
hyperparameter and does not change with the resolution; refining the grid refines every patch.
A grid side that ``patches_per_side`` does not divide is refused with the valid resolutions named.

Both models map ``u`` on ``D`` to ``z`` on ``D`` through functions of the patch index
``v: {1..P} -> U(D'; R^width)`` (eq. 9)::

    u_in(x)   = [u(x), x]                                                  (eq. 14)
    v0(j)     = W_in u_in|_{D_j}                                           (eqs. 20-22 / 30)
    v <- LN(v + MultiHead(v));  v <- LN(v + FFN(v))   (L layers, post-LN)   (eqs. 10a-d, W_1 = W_2 = I)
    z(x)      = W_out v(x)                       (reshaped back onto D)    (eqs. 26-28)
    z         <- z + K_s z                       (final spectral layer)    (Remark 21)

with, per head ``h``, the patched self-attention of Definitions 13-14::

    A_P(v)(j) = sum_k p(k; j) V_h v(k),
    p(k; j)   = softmax_k( <Q_h v(j), K_h v(k)>_{L2(D'; R^dK)} )

* **ViTNO** (Section 4.3, Appendix B.2): ``W_in`` is a Fourier integral operator applied to each
  patch (Definition 20, eq. 60: ``F^-1(R . F u)`` over the patch's grid, ``lift_modes`` modes per
  axis); ``Q_h, K_h, V_h`` are pointwise linear maps.
* **FANO** (Section 4.4, Appendix B.3): ``W_in`` is pointwise linear; ``Q_h, K_h, V_h`` are Fourier
  integral operators on each patch (eq. 68, ``qkv_modes`` modes per axis; the heads' operators
  together form one ``width -> width`` operator per Q, K and V, split into heads afterwards).

Every Fourier integral operator here, and the final spectral layer ``K_s`` (``smoothing_modes``
modes per axis over the whole grid, applied to the output as ``z + K_s z``: the authors' code
for the 64-mode "final spectral convolution layer" of Section 6.2), is the project's one
:class:`~opflow.models.layers.SpectralConv` (FNO convention: ``m`` lowest non-negative and ``m``
lowest negative frequencies on the leading axes, ``0 .. m-1`` on the last; Definition 20's
``|k_j| <= k_max`` is the same set up to the Nyquist bookkeeping). On a patch of ``p`` points per
axis only the modes the patch has are used (``p // 2`` per sign), so a model runs on coarser grids.

The L2(D') inner product (eq. 62) is the quadrature ``sum_{x_i in D'} |cell| q(x_i).k(x_i)``
with the cell volume ``|cell| = prod_a h_a`` of the uniform grid (``h_a`` the spacing of axis ``a``,
read from the coordinates), i.e. the mean over the patch times the patch volume: it converges to
the integral as the grid is refined (first order for the non-periodic patch functions, the
rate asserted in the tests). On the unit square it is the authors' ``1/N`` of eq. 63. There is no
extra ``1/sqrt(d_K)`` (eq. 63 and the authors' code have none). It is computed by
:func:`~opflow.models.layers.softmax_attention` on patch tokens: each patch's ``p_1 ... p_d x d_K``
values flattened into one token, queries scaled by ``|cell|``, ``scale = 1``.

Defaults (the paper's 416 x 416 runs, Section 6.2, and the authors' run scripts
``paper_run_scripts/2d_experiments_{ViTNO,FANO}/run.py``): 13 patches per side (patch size 32 at
416), width 128, 6 layers, 8 heads, FFN 128, GELU, lifting 12 modes (ViTNO) or Q/K/V 9 modes
(FANO), final spectral layer 64 modes. Data layout: as :mod:`opflow.models.fno` (row-major grid,
``grid_shape`` required in 2D and 3D, outputs at the input points, no padding mask).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from opflow.data.errors import ConfigError

from .base import OperatorModel, register
from .fno import as_modes
from .layers import Dropout, FeedForward, SpectralConv
from .layers.attention import softmax_attention
from .transformer import check_batch, grid_of, require_full_grid


# ----------------------------------------------------------------------------------------------
# patching


def patch_size(grid: Sequence[int], patches_per_side: Sequence[int], arch: str = "patch model") -> tuple[int, ...]:
    """Points per patch along each axis, ``n_a / patches_per_side_a``; a clear error when one does not divide.

    The error names the nearest valid resolutions (the multiples of ``patches_per_side_a``).
    """
    grid, pps = tuple(int(n) for n in grid), tuple(int(k) for k in patches_per_side)
    if len(grid) != len(pps):
        raise ValueError(f"{arch}: patches_per_side {list(pps)} has {len(pps)} entries for a {len(grid)}-axis grid {grid}")
    for a, (n, k) in enumerate(zip(grid, pps)):
        if n % k:
            lo = max(k, (n // k) * k)
            near = sorted({lo - k, lo, lo + k, lo + 2 * k} - {0})
            raise ValueError(
                f"{arch}: patches_per_side={k} (axis {a}) needs a grid side divisible by {k} (patch size = n / {k} points); "
                f"got n = {n} in grid {grid}. Valid resolutions are the multiples of {k}, e.g. {near}; "
                f"or choose patches_per_side among the divisors of {n}: {[d for d in range(1, n + 1) if n % d == 0]}"
            )
    return tuple(n // k for n, k in zip(grid, pps))


def to_patches(v: Tensor, patches_per_side: Sequence[int]) -> Tensor:
    """``(B, n_1, ..., n_d, C)`` -> ``(B, P, p_1, ..., p_d, C)``, patches in row-major order."""
    B, *grid, C = v.shape
    d = len(grid)
    p = [n // k for n, k in zip(grid, patches_per_side)]
    split = [B] + [s for k, pa in zip(patches_per_side, p) for s in (k, pa)] + [C]
    order = [0] + [1 + 2 * a for a in range(d)] + [2 + 2 * a for a in range(d)] + [1 + 2 * d]
    return v.reshape(split).permute(order).reshape(B, math.prod(patches_per_side), *p, C)


def from_patches(v: Tensor, patches_per_side: Sequence[int]) -> Tensor:
    """Inverse of :func:`to_patches`: ``(B, P, p_1, ..., p_d, C)`` -> ``(B, n_1, ..., n_d, C)``."""
    B, _, *p, C = v.shape
    d = len(p)
    v = v.reshape(B, *patches_per_side, *p, C)
    order = [0] + [s for a in range(d) for s in (1 + a, 1 + d + a)] + [1 + 2 * d]
    return v.permute(order).reshape(B, *(k * pa for k, pa in zip(patches_per_side, p)), C)


def cell_volume(coords: Tensor, grid: Sequence[int]) -> Tensor:
    """``(B,)``: the cell volume ``prod_a h_a`` of each sample's uniform row-major grid of shape ``grid``."""
    B, _, d = coords.shape
    g = coords.reshape(B, *grid, d)
    vol = coords.new_ones(B)
    for a in range(d):
        if grid[a] < 2:
            raise ValueError(f"grid {tuple(grid)}: every axis needs at least 2 points to define a spacing")
        index = [slice(None)] + [0] * d
        index[1 + a] = 1
        vol = vol * (g[tuple(index)][..., a] - g[(slice(None),) + (0,) * d][..., a]).abs()
    return vol


class PatchSpectralConv(nn.Module):
    """A Fourier integral operator (Definition 20, eqs. 60 / 68) applied to every patch on its own grid.

    ``(B, P, p_1, ..., p_d, C_in)`` -> ``(B, P, p_1, ..., p_d, C_out)`` through
    :class:`~opflow.models.layers.SpectralConv` (the patches are a batch for it).
    """

    def __init__(self, in_channels: int, out_channels: int, modes: Sequence[int]) -> None:
        super().__init__()
        self.conv = SpectralConv(in_channels, out_channels, modes)

    def forward(self, v: Tensor) -> Tensor:
        B, P, *p, C = v.shape
        d = len(p)
        x = v.reshape(B * P, *p, C).permute(0, d + 1, *range(1, d + 1))
        y = self.conv(x)
        return y.permute(0, *range(2, d + 2), 1).reshape(B, P, *p, -1)


class PatchAttention(nn.Module):
    """Multi-head patched self-attention (Definitions 13-14; eqs. 62-64, 70) on ``(B, P, p..., width)``.

    ``qkv_modes=None``: pointwise linear ``Q_h, K_h, V_h`` (ViTNO); otherwise Fourier integral
    operators with those modes per axis (FANO). ``cell (B,)``: the cell volume, the quadrature weight
    of every point in the patch inner product. Output ``W_MultiHead [A_P^1 .. A_P^H]`` (eq. 64).
    """

    def __init__(self, width: int, n_heads: int, qkv_modes: Sequence[int] | None = None, dropout: float = 0.0) -> None:
        super().__init__()
        if width % n_heads:
            raise ConfigError(f"width {width} is not a multiple of n_heads {n_heads}")
        self.width, self.n_heads, self.head_dim = width, n_heads, width // n_heads
        if qkv_modes is None:
            self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        else:
            self.q, self.k, self.v = (PatchSpectralConv(width, width, qkv_modes) for _ in range(3))
        self.out = nn.Linear(width, width)
        self.drop = Dropout(dropout)

    def _tokens(self, t: Tensor) -> Tensor:
        """``(B, P, p..., H d_K)`` -> ``(B, H, P, prod(p) d_K)``: one token per patch and head."""
        B, P, *p, _ = t.shape
        return t.reshape(B, P, math.prod(p), self.n_heads, self.head_dim).permute(0, 3, 1, 2, 4).reshape(B, self.n_heads, P, -1)

    def forward(self, x: Tensor, cell: Tensor) -> Tensor:
        B, P, *p, _ = x.shape
        q, k, v = (self._tokens(f(x)) for f in (self.q, self.k, self.v))
        q = q * cell.to(q.dtype)[:, None, None, None]  # <Q v(j), K v(k)>_{L2(D')} = sum_i |cell| q.k
        z = softmax_attention(q, k, v, scale=1.0)  # (B, H, P, S d_K)
        z = z.reshape(B, self.n_heads, P, math.prod(p), self.head_dim).permute(0, 2, 3, 1, 4).reshape(B, P, *p, self.width)
        return self.drop(self.out(z))


class PatchEncoderLayer(nn.Module):
    """``v <- LN(v + MultiHead(v)); v <- LN(v + FFN(v))`` (eqs. 10a-d, 24-25, post-LN, W_1 = W_2 = I)."""

    def __init__(self, width: int, n_heads: int, ffn_dim: int, act: str, dropout: float, qkv_modes: Sequence[int] | None) -> None:
        super().__init__()
        self.attn = PatchAttention(width, n_heads, qkv_modes, dropout)
        self.norm_attn = nn.LayerNorm(width)
        self.ffn = FeedForward(width, ffn_dim / width, act=act)
        self.drop = Dropout(dropout)
        self.norm_ffn = nn.LayerNorm(width)

    def forward(self, x: Tensor, cell: Tensor) -> Tensor:
        x = self.norm_attn(x + self.attn(x, cell))
        return self.norm_ffn(x + self.drop(self.ffn(x)))


# ----------------------------------------------------------------------------------------------
# the models


class PatchOperator(OperatorModel):
    """Shared body of :class:`ViTNO` and :class:`FANO` (module docstring): subclasses set the lift."""

    arch = "patch model"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        coord_dim: int,
        *,
        patches_per_side: int | Sequence[int],
        width: int,
        n_layers: int,
        n_heads: int,
        ffn_dim: int,
        act: str,
        dropout: float,
        smoothing_modes: int,
        qkv_modes: Sequence[int] | None,
    ) -> None:
        super().__init__(in_channels, out_channels, coord_dim)
        if not 1 <= coord_dim <= 3:
            raise ConfigError(f"{self.arch} works on 1, 2 or 3 grid dimensions; the data have {coord_dim}")
        self.patches_per_side = as_modes(patches_per_side, coord_dim)
        self.width = width
        self.layers = nn.ModuleList(PatchEncoderLayer(width, n_heads, ffn_dim, act, dropout, qkv_modes) for _ in range(n_layers))
        self.proj = nn.Linear(width, out_channels)  # W_out, eq. 27
        self.smoothing = SpectralConv(out_channels, out_channels, (smoothing_modes,) * coord_dim) if smoothing_modes else None

    def lift(self, u_in: Tensor) -> Tensor:  # pragma: no cover - abstract
        """``(B, P, p..., c_in + d)`` -> ``(B, P, p..., width)``."""
        raise NotImplementedError

    def grid_of(self, n_points: int, grid_shape: Sequence[int] | None) -> tuple[int, ...]:
        """The grid the points form (:func:`~opflow.models.transformer.grid_of`)."""
        return grid_of(self.arch, self.coord_dim, n_points, grid_shape)

    def patch_layout(self, grid: Sequence[int]) -> tuple[int, tuple[int, ...]]:
        """``(P, (p_1, ..., p_d))``: the number of patches (fixed) and the points per patch on ``grid``."""
        return math.prod(self.patches_per_side), patch_size(grid, self.patches_per_side, self.arch)

    def forward(
        self,
        coords: Tensor,
        inputs: Tensor,
        query: Tensor | None = None,
        mask: Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
    ) -> Tensor:
        check_batch(self, coords, inputs, query, mask)
        require_full_grid(self.arch, coords, query, mask)
        B, N, _ = inputs.shape
        grid = self.grid_of(N, grid_shape)
        self.patch_layout(grid)  # the divisibility check, with its error message
        cell = cell_volume(coords.to(inputs.dtype), grid)
        u_in = torch.cat([inputs, coords.to(inputs.dtype)], -1).reshape(B, *grid, -1)
        v = self.lift(to_patches(u_in, self.patches_per_side))
        for layer in self.layers:
            v = layer(v, cell)
        z = self.proj(from_patches(v, self.patches_per_side))  # (B, *grid, c_out)
        if self.smoothing is not None:
            zc = z.movedim(-1, 1)
            z = (zc + self.smoothing(zc)).movedim(1, -1)
        return z.reshape(B, N, self.out_channels)


@register("vitno")
class ViTNO(PatchOperator):
    """ViT neural operator (Section 4.3, Appendix B.2): Fourier-integral lifting per patch,
    pointwise Q/K/V, patched attention, pointwise W_out, final spectral layer."""

    arch = "vitno"

    def __init__(self, in_channels: int, out_channels: int, coord_dim: int, *, lift_modes: int | Sequence[int], **kw) -> None:
        super().__init__(in_channels, out_channels, coord_dim, qkv_modes=None, **kw)
        self.lift_in = PatchSpectralConv(in_channels + coord_dim, self.width, as_modes(lift_modes, coord_dim))  # eq. 60

    def lift(self, u_in: Tensor) -> Tensor:
        return self.lift_in(u_in)


@register("fano")
class FANO(PatchOperator):
    """Fourier attention neural operator (Section 4.4, Appendix B.3): pointwise lifting, Fourier
    integral Q/K/V per patch, patched attention, pointwise W_out, final spectral layer."""

    arch = "fano"

    def __init__(self, in_channels: int, out_channels: int, coord_dim: int, *, qkv_modes: int | Sequence[int], **kw) -> None:
        super().__init__(in_channels, out_channels, coord_dim, qkv_modes=as_modes(qkv_modes, coord_dim), **kw)
        self.lift_in = nn.Linear(in_channels + coord_dim, self.width)  # W_in, eq. 30

    def lift(self, u_in: Tensor) -> Tensor:
        return self.lift_in(u_in)


__all__ = ["FANO", "PatchAttention", "PatchSpectralConv", "ViTNO", "cell_volume", "from_patches", "patch_size", "to_patches"]
