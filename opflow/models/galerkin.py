"""Galerkin and Fourier Transformers (config names ``gt`` and ``ft``).

Cao 2021, "Choose a Transformer: Fourier or Galerkin" (NeurIPS; arXiv 2105.14995): an encoder of
softmax-free attention layers between a problem-dependent feature extractor and decoder.

Encoder layer (eq. 4), for the latent ``y (n, d)`` and the coordinates ``x`` of its points::

    y <- y + Attn(y),   y <- y + g(y)        g: the 2-layer FFN, point-wise

with, per head, ``Q = y W_q``, ``K = y W_k``, ``V = y W_v`` and the coordinates concatenated to the
(normalised) Q, K and V of every head ("recurrent enrichment of positional encoding", Section 4)::

    Galerkin type (eq. 6):  z = Q (LN(K)^T LN(V)) / n        O(n d^2)
    Fourier type  (eq. 5):  z = (LN(Q) LN(K)^T) V / n        O(n^2 d) as written; computed here as
                                                              LN(Q) (LN(K)^T V) / n, the same numbers
                                                              at O(n d^2) cost

``LN`` is a layer normalisation per head with its own affine map (the kernels ``galerkin`` and
``fourier`` of :mod:`opflow.models.layers.attention`). ``norm: regular`` is the paper's "regular
layer normalisation" (eq. 7; post-LN ``y <- LN(y + Attn(y)); y <- LN(y + g(y))`` as the authors'
code computes it, no per-head norms); ``norm: qk`` / ``kv`` put the per-head norms on that pair
for any kernel (the paper's "ST Ln on Q, K" / "LT Ln on K, V" ablations with ``attention:
softmax`` / ``cao_linear``, the authors' "linear" attention; entries ``st1d``, ``lt1d``, ``st``,
``lt``, ...). W_q, W_k, W_v start from ``W = eta U + delta I`` (eq. 17, U Xavier with gain 1;
``init_gain`` = eta, ``init_diagonal`` = delta).

The 2D network (Appendix B, Figures 5-7, Table 5), on an ``n_f x n_f`` input grid:

1. **Down-sampler** (interpolation-based CNN): ``conv3x3(c_in -> d)``, bilinear interpolation to an
   intermediate ``n_m x n_m`` grid (``n_m = round(sqrt(n_f n_c))``), three chained ``conv3x3``
   (``d -> d//3 -> d//3 -> d - 2 (d//3)``) whose outputs are stacked to ``d`` channels, bilinear
   interpolation to the coarse ``n_c x n_c`` attention grid. Convolutions have no bias; each is
   followed by dropout and the activation (ReLU for the Darcy coefficient, Appendix B).
2. **Encoder**: ``n_layers`` layers as above on the ``n_c^2`` coarse points, coordinates = the
   coarse grid's (bilinear interpolation of the input coordinates, exact on a uniform grid).
3. **Up-sampler**: bilinear interpolation to ``n_m``, ``conv3x3(d -> d)`` + activation, bilinear
   interpolation to the input grid.
4. **Decoder**: the fine-grid coordinates concatenated, a linear map to ``decoder_width``, then
   ``decoder_layers`` spectral layers ``h <- act(K h + W h)`` (``K`` the FNO spectral convolution,
   :class:`opflow.models.layers.SpectralConv`, ``modes`` per axis, no batch norm), and the
   point-wise head ``Linear -> act -> Linear`` (``proj_width`` hidden units). The first linear map is computed
   before the up-sampler's last interpolation, which it commutes with (the same function; the CPU step 1.09-1.13x
   shorter: :meth:`GalerkinTransformer._decode_upsampled`). ``decoder:
   pointwise`` (the inverse problem, Example 3) is ``Linear`` + ``decoder_layers`` x (``Linear``,
   act) + ``Linear`` instead.

``sampler: none`` replaces steps 1 and 3 by a point-wise linear lift of the inputs: the 1D Burgers
network (Figure 4: lift 1 -> 96, 4 layers of one head, spectral decoder 96 -> 48 -> 48 with 16
modes and no coordinate concatenation, head 48 -> 48 -> 1).

Parameter counts (asserted in ``tests/opflow/models/test_galerkin.py``), equal to Table 5 and to the
authors' released models: 2,220,829 (Darcy, Example 2), 530,305 (Burgers, Example 1), 2,383,873
(inverse Darcy, Example 3: width 192, FFN 384, point-wise decoder of one hidden layer).

Coarse grid. Each input grid axis of ``n`` points maps to ``coarse_size(n)`` attention points: the
``[fine, coarse]`` pairs of ``coarse_sizes`` (default the paper's 141 -> 43 and 211 -> 61, which no
single ratio reproduces), else ``round(coarse_ratio (n - 1)) + 1``. So one model entry follows the
dataset's resolution, and a trained model runs on other resolutions (zero-shot) unchanged.

Differences from the authors' code (none changes a parameter count): the Darcy output is not forced
to zero on the boundary inside the model (the model's outputs are normalised; with the per-point
output normaliser of the ``gt`` / ``ft`` configs, whose scale vanishes where every training target is
zero, the decoded boundary is zero to within that normaliser's epsilon);
the up-sampler applies its activation once (the released code applies SiLU twice); the
intermediate grid is ``round(sqrt(n_f n_c))`` for both samplers (the code derives it from a rounded
scale factor: 78 down and 77 up at (141, 43)); attention dropout is on the attention output (the
code also drops entries of ``K^T V`` with p = 0.5 at every call, evaluation included, a slip
not reproduced by default; ``kv_dropout: 0.5`` with ``kv_dropout_eval: true`` reproduces it for the
Galerkin type, :class:`~opflow.models.layers.MultiHeadAttention`; the Fourier type's code drops entries
of the ``n x n`` matrix ``Q K^T / n``, which this linear-cost order never forms). Outputs at query
points other than the input points are bilinear interpolations of the decoder's grid output (point-wise decoder: of the up-sampled features, then the decoder at
the query coordinates). ``output_grid: coarse`` (the inverse problem, whose target lives on the
coarse grid: the authors' up-sampler there maps the coarse grid to itself) runs the up-sampler's
convolution and the decoder on the attention grid and interpolates from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from opflow.data.errors import ConfigError
from opflow.hostsync import checks_on

from .base import OperatorModel, register
from .layers import Dropout, FeedForward, MultiHeadAttention, SpectralConv, activation
from .transformer import check_batch, is_self_query


def coarse_size(n: int, ratio: float, sizes: Sequence[tuple[int, int]] = ()) -> int:
    """Attention-grid points for an input axis of ``n`` points: ``dict(sizes)[n]``, else
    ``round(ratio * (n - 1)) + 1`` (at least 2)."""
    table = {int(f): int(c) for f, c in sizes}
    if n in table:
        return table[n]
    return max(2, int(round(ratio * (n - 1))) + 1)


def middle_size(n_fine: int, n_coarse: int) -> int:
    """The CNN samplers' intermediate grid: ``round(sqrt(n_fine * n_coarse))`` (Cao 2021, App. B)."""
    return max(1, int(round(math.sqrt(n_fine * n_coarse))))


def _interp(x: Tensor, size: Sequence[int]) -> Tensor:
    """Bilinear interpolation (grid end points kept: ``align_corners=True``) of ``(B, C, n1, n2)``."""
    if tuple(x.shape[2:]) == tuple(size):
        return x
    return F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=True)


class ConvBlock(nn.Sequential):
    """``conv3x3 (no bias, padding 1) -> dropout -> act``: the convolution block of the samplers."""

    def __init__(self, c_in: int, c_out: int, act: str, dropout: float) -> None:
        super().__init__(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), Dropout(dropout), activation(act))


class CnnDownsampler(nn.Module):
    """Interpolation-based CNN from the input grid to the coarse grid (Cao 2021, App. B, Fig. 6).

    ``x (B, c_in, n1, n2) -> (B, d, c1, c2)``: ``act(interp_c(cat[x1, x2, x3]))`` with
    ``x0 = act(interp_m(conv(x)))``, ``x1 = conv(x0)``, ``x2 = conv(x1)``, ``x3 = conv(x2)``.
    """

    def __init__(self, c_in: int, width: int, act: str, dropout: float) -> None:
        super().__init__()
        c0 = c1 = width // 3
        if c0 < 1:
            raise ConfigError(f"the CNN down-sampler splits width into 3 stacked parts; width {width} must be >= 3")
        self.conv0 = ConvBlock(c_in, width, act, dropout)
        self.conv1 = ConvBlock(width, c0, act, dropout)
        self.conv2 = ConvBlock(c0, c1, act, dropout)
        self.conv3 = ConvBlock(c1, width - c0 - c1, act, dropout)
        self.act = activation(act)

    def forward(self, x: Tensor, middle: Sequence[int], coarse: Sequence[int]) -> Tensor:
        x = self.act(_interp(self.conv0(x), middle))
        x1 = self.conv1(x)
        x2 = self.conv2(x1)
        x3 = self.conv3(x2)
        return self.act(_interp(torch.cat([x1, x2, x3], 1), coarse))


class CnnUpsampler(nn.Module):
    """Interpolation-based CNN from the coarse grid back to the input grid (App. B, Fig. 7):
    ``interp_f(act(conv(interp_m(x))))``."""

    def __init__(self, width: int, act: str, dropout: float) -> None:
        super().__init__()
        self.conv = ConvBlock(width, width, act, dropout)

    def features(self, x: Tensor, middle: Sequence[int]) -> Tensor:
        """``act(conv(interp_m(x)))``: the up-sampler before its last interpolation."""
        return self.conv(_interp(x, middle))

    def forward(self, x: Tensor, middle: Sequence[int], fine: Sequence[int]) -> Tensor:
        return _interp(self.features(x, middle), fine)


class SpectralDecoder(nn.Module):
    """``[Linear([h, x])] -> decoder_layers x (h <- act(K h + W h)) -> Linear -> act -> Linear``.

    ``K``: :class:`~opflow.models.layers.SpectralConv` with ``modes`` per grid axis (FNO, Li et al.
    2021, eq. 5), ``W`` a point-wise linear map (the FNO bypass); dropout on the input of ``K``.
    Input and output channel-last ``(B, *grid, C)``.
    """

    def __init__(
        self, in_dim: int, coord_dim: int, out_dim: int, *, width: int, n_layers: int, modes: int, proj_width: int,
        coords: bool, act: str, dropout: float,
    ) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim + coord_dim, width) if coords else None
        dims = [width if coords else in_dim] + [width] * n_layers
        self.spectral = nn.ModuleList(SpectralConv(a, b, [modes] * coord_dim) for a, b in zip(dims[:-1], dims[1:]))
        self.bypass = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.act = activation(act)
        self.dropout = Dropout(dropout)
        self.proj = nn.Sequential(nn.Linear(width, proj_width), activation(act), nn.Linear(proj_width, out_dim))

    def forward(self, h: Tensor, x: Tensor) -> Tensor:
        if self.fc is not None:
            h = self.fc(torch.cat([h, x], -1))
        return self.body(h)

    def body(self, h: Tensor) -> Tensor:
        """The decoder after its first linear map (``h``: ``width`` channels, channel-last)."""
        for spec, lin in zip(self.spectral, self.bypass):
            k = spec(self.dropout(h).movedim(-1, 1)).movedim(1, -1)
            h = self.act(k + lin(h))
        return self.proj(h)


class PointwiseDecoder(nn.Module):
    """``[Linear([h, x])] -> n_layers x (Linear -> act -> dropout) -> Linear`` (Example 3)."""

    def __init__(self, in_dim: int, coord_dim: int, out_dim: int, *, width: int, n_layers: int, coords: bool, act: str, dropout: float) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim + coord_dim, width) if coords else None
        dims = [width if coords else in_dim] + [width] * n_layers
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), activation(act), Dropout(dropout)]
        self.ff = nn.Sequential(*layers)
        self.out = nn.Linear(width, out_dim)

    def forward(self, h: Tensor, x: Tensor) -> Tensor:
        if self.fc is not None:
            h = self.fc(torch.cat([h, x], -1))
        return self.body(h)

    def body(self, h: Tensor) -> Tensor:
        """The decoder after its first linear map (``h``: ``width`` channels, channel-last)."""
        return self.out(self.ff(h))


class GalerkinEncoderLayer(nn.Module):
    """One encoder layer of Cao 2021: ``y <- y + Attn(y, x); y <- y + FFN(y)`` (eq. 4, per-head norms
    inside ``Attn``), or with ``regular=True`` the post-LN layer of eq. 7 (no per-head norms)."""

    def __init__(
        self, width: int, n_heads: int, ffn_dim: int, kernel: str, norm: str, pos_dim: int, *,
        init_gain: float, init_diagonal: float, act: str, dropout: float, ffn_dropout: float,
        kv_dropout: float = 0.0, kv_dropout_eval: bool = False,
    ) -> None:
        super().__init__()
        head_norm = {"head": "auto", "qk": "qk", "kv": "kv", "regular": "none"}[norm]
        self.attn = MultiHeadAttention(
            width, n_heads, kernel, pos_dim=pos_dim, dropout=dropout, head_norm=head_norm, init_gain=init_gain, init_diagonal=init_diagonal,
            kv_dropout=kv_dropout, kv_dropout_eval=kv_dropout_eval,
        )
        self.ffn = FeedForward(width, ffn_dim / width, act=act, dropout=ffn_dropout)
        self.regular = norm == "regular"
        self.ln_attn = nn.LayerNorm(width) if self.regular else nn.Identity()
        self.ln_ffn = nn.LayerNorm(width) if self.regular else nn.Identity()

    def forward(self, y: Tensor, pos: Tensor, mask: Tensor | None = None) -> Tensor:
        y = self.ln_attn(y + self.attn(y, mask=mask, pos=pos))
        return self.ln_ffn(y + self.ffn(y))


def _sample(field: Tensor, lo: Tensor, hi: Tensor, query: Tensor) -> Tensor:
    """Multilinear interpolation of ``field (B, C, *grid)`` (1 or 2 axes; axis k spans
    ``[lo_k, hi_k]`` of coordinate k) at ``query (B, M, d)``; returns ``(B, M, C)``."""
    t = 2 * (query - lo[:, None]) / (hi - lo).clamp_min(torch.finfo(query.dtype).tiny)[:, None] - 1
    if field.dim() == 3:  # 1D: a 1 x n image
        field = field[:, :, None]
        t = torch.cat([t, torch.zeros_like(t)], -1)
    grid = t.flip(-1)[:, :, None].to(field.dtype)  # grid_sample's (x, y) = (last axis, first axis)
    return F.grid_sample(field, grid, mode="bilinear", align_corners=True)[..., 0].transpose(1, 2)


@register("gt")
class GalerkinTransformer(OperatorModel):
    """The Galerkin Transformer of Cao 2021 (module docstring); hyperparameters in
    :class:`opflow.models.hparams.GtHparams` (defaults: the paper's 2D Darcy network).

    Needs grid data: ``grid_shape`` (row-major points, axis k along coordinate k) in 2D; in 1D the
    points, in order, are the grid. No padding masks (every point of a grid is real).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        coord_dim: int,
        *,
        width: int,
        n_layers: int,
        n_heads: int,
        ffn_dim: int,
        attention: str,
        norm: str,
        init_gain: float,
        init_diagonal: float,
        ffn_act: str,
        dropout: float,
        ffn_dropout: float,
        sampler: str,
        coarse_ratio: float,
        coarse_sizes: Sequence[tuple[int, int]],
        down_act: str,
        down_dropout: float,
        up_act: str,
        up_dropout: float,
        decoder: str,
        decoder_layers: int,
        decoder_width: int,
        modes: int,
        proj_width: int,
        decoder_coords: bool,
        decoder_act: str,
        decoder_dropout: float,
        output_grid: str,
        kv_dropout: float = 0.0,
        kv_dropout_eval: bool = False,
    ) -> None:
        super().__init__(in_channels, out_channels, coord_dim)
        if coord_dim not in (1, 2):
            raise ConfigError(f"{type(self).__name__} takes 1D or 2D grid data; got coordinates of dimension {coord_dim}")
        if sampler == "cnn" and coord_dim != 2:
            raise ConfigError(f"sampler 'cnn' (the 2D interpolation CNN) needs 2D grids, got coordinates of dimension {coord_dim}; use sampler: none")
        self.sampler, self.decoder_kind, self.output_grid = sampler, decoder, output_grid
        #: the decoder's first linear map before the up-sampler's last interpolation (:meth:`_decode_upsampled`); False:
        #: after it, as Figure 7 draws it. The same function: a switch for its test and ``benchmarks/gt_lift_order.py``
        self.lift_first = True
        self.coarse_ratio, self.coarse_sizes = float(coarse_ratio), tuple((int(f), int(c)) for f, c in coarse_sizes)
        if sampler == "cnn":
            self.down: nn.Module = CnnDownsampler(in_channels, width, down_act, down_dropout)
            self.up: nn.Module | None = CnnUpsampler(width, up_act, up_dropout)
        else:
            self.down, self.up = nn.Linear(in_channels, width), None
        self.layers = nn.ModuleList(
            GalerkinEncoderLayer(
                width, n_heads, ffn_dim, attention, norm, coord_dim, init_gain=init_gain, init_diagonal=init_diagonal,
                act=ffn_act, dropout=dropout, ffn_dropout=ffn_dropout, kv_dropout=kv_dropout, kv_dropout_eval=kv_dropout_eval,
            )
            for _ in range(n_layers)
        )
        if decoder == "spectral":
            self.decoder: nn.Module = SpectralDecoder(
                width, coord_dim, out_channels, width=decoder_width, n_layers=decoder_layers, modes=modes, proj_width=proj_width,
                coords=decoder_coords, act=decoder_act, dropout=decoder_dropout,
            )
        else:
            self.decoder = PointwiseDecoder(
                width, coord_dim, out_channels, width=decoder_width, n_layers=decoder_layers, coords=decoder_coords,
                act=decoder_act, dropout=decoder_dropout,
            )

    def grids(self, fine: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(middle, coarse)`` grid shapes of the CNN samplers for the input grid ``fine``."""
        coarse = tuple(coarse_size(n, self.coarse_ratio, self.coarse_sizes) for n in fine)
        return tuple(middle_size(n, c) for n, c in zip(fine, coarse)), coarse

    def _decode_upsampled(self, z: Tensor, grid: Sequence[int], x_grid: Tensor) -> Tensor:
        """``decoder(interp_f(z), x)`` at the input grid's points, the decoder's first linear map taken before the last
        interpolation of the up-sampler.

        That map is ``fc([h, x]) = W_h h + W_x x + b``, and bilinear interpolation is, per channel, a combination of
        neighbouring values with weights that sum to one; so ``W_h interp_f(z) = interp_f(W_h z)``, and
        ``fc([interp_f(z), x]) = interp_f(W_h z) + W_x x + b``: the same function and gradients (to rounding), with the
        ``width`` -> ``decoder_width`` map (128 -> 32 for Darcy) on the intermediate grid (78 x 78 for 141) and only
        ``decoder_width`` channels interpolated to the input grid, not ``width``: no ``width``-channel tensor of the
        input grid's size (the CPU step 1.09-1.13x shorter: ``benchmarks/gt_lift_order.py``, docs/costs.md).
        ``z``: ``(B, width, m1, m2)``; returns ``(B, *grid, out)``.
        """
        fc = self.decoder.fc
        w_h, w_x = fc.weight[:, : z.shape[1]], fc.weight[:, z.shape[1] :]
        zh = F.linear(z.movedim(1, -1), w_h).movedim(-1, 1)  # (B, decoder_width, m1, m2)
        h = _interp(zh, grid).movedim(1, -1) + F.linear(x_grid, w_x, fc.bias)
        return self.decoder.body(h)

    def forward(
        self,
        coords: Tensor,
        inputs: Tensor,
        query: Tensor | None = None,
        mask: Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
    ) -> Tensor:
        check_batch(self, coords, inputs, query, mask)
        if mask is not None and checks_on() and not bool(mask.all()):
            raise ValueError(f"{type(self).__name__} works on complete grids; the batch has padded points (mask)")
        B, N, _ = coords.shape
        grid = tuple(int(n) for n in grid_shape) if grid_shape is not None else (N,) if self.coord_dim == 1 else None
        if grid is None or len(grid) != self.coord_dim or math.prod(grid) != N:
            raise ValueError(
                f"{type(self).__name__} needs a {self.coord_dim}D grid: grid_shape with {self.coord_dim} axes whose product is the "
                f"{N} points; got {grid_shape}"
            )
        x_grid = coords.reshape(B, *grid, self.coord_dim)  # channel-last coordinates of the input grid
        if self.up is not None:
            middle, coarse = self.grids(grid)
            h = self.down(inputs.reshape(B, *grid, -1).movedim(-1, 1), middle, coarse)  # (B, d, c1, c2)
            pos = _interp(x_grid.movedim(-1, 1), coarse).flatten(2).transpose(1, 2)  # coarse coordinates
            y = h.flatten(2).transpose(1, 2)
        else:
            pos, y = coords, self.down(inputs)
        for layer in self.layers:
            y = layer(y, pos)
        self_query = is_self_query(coords, query)
        if self.up is None:
            h, x_field = y.reshape(B, *grid, -1), x_grid
        elif self.output_grid == "coarse":  # the up-sampler's convolution on the attention grid itself
            h, x_field = self.up(y.transpose(1, 2).reshape(B, -1, *coarse), coarse, coarse).movedim(1, -1), pos.reshape(B, *coarse, -1)
        else:
            z = self.up.features(y.transpose(1, 2).reshape(B, -1, *coarse), middle)  # (B, d, m1, m2)
            if self.lift_first and self.decoder.fc is not None and self_query:
                return self._decode_upsampled(z, grid, x_grid).reshape(B, N, -1)
            h, x_field = _interp(z, grid).movedim(1, -1), x_grid  # (B, *grid, d)
        if self_query and x_field is x_grid:
            return self.decoder(h, x_grid).reshape(B, N, -1)
        pts = coords if self_query else query
        lo = x_field.reshape(B, -1, self.coord_dim)[:, 0]
        hi = x_field.reshape(B, -1, self.coord_dim)[:, -1]
        if self.decoder_kind == "pointwise":  # the point-wise decoder runs at the output points
            return self.decoder(_sample(h.movedim(-1, 1), lo, hi, pts), pts)
        return _sample(self.decoder(h, x_field).movedim(-1, 1), lo, hi, pts)


@register("ft")
class FourierTransformer(GalerkinTransformer):
    """The Fourier Transformer of Cao 2021: the same network with the Fourier-type kernel by
    default (:class:`opflow.models.hparams.FtHparams`)."""


__all__ = ["CnnDownsampler", "CnnUpsampler", "FourierTransformer", "GalerkinEncoderLayer", "GalerkinTransformer", "PointwiseDecoder",
           "SpectralDecoder", "coarse_size", "middle_size"]
