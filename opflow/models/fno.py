"""FNO, the Fourier Neural Operator (Li, Kovachki, Azizzadenesheli, Liu, Bhattacharya, Stuart,
Anandkumar, "Fourier Neural Operator for Parametric Partial Differential Equations", ICLR 2021;
arXiv 2010.08895, Section 4 and Figure 2), in 1, 2 (or 3) grid dimensions.

On a regular grid, with ``a`` the input features and ``x`` the point coordinates::

    v_0(x)     = P [a(x), x]                                  (lifting, a linear map to ``width``)
    v_{l+1}(x) = sigma( W_l v_l(x) + (K_l v_l)(x) ),  l = 0 .. L-1   (eq. 2; no sigma after the last)
    u(x)       = Q_2 sigma(Q_1 v_L(x))                        (projection width -> proj_width -> out)

``K_l`` is the spectral convolution of eq. (4)-(5), :class:`opflow.models.layers.SpectralConv`
(the project's only one): low Fourier modes multiplied by complex weights, all other modes dropped;
``W_l`` is a point-wise linear map (a 1 x 1 convolution with bias) and ``sigma`` the activation
(GELU, as in the released code; the paper and the Galerkin paper's Table 5 say ReLU: ``act``).
The coordinates enter the lifting as extra channels, as in the released code (``[a(x), x]``).

``norm: batch`` puts a batch normalisation after each layer's sum, ``v_{l+1} = sigma(BN_l(W_l v_l + K_l
v_l))`` (no sigma after the last), as the FNO code's Navier-Stokes script ``fourier_2d_time.py`` (the
paper's NS2d runs) has it: BatchNorm with its learned scale and shift, batch statistics in training and
the running statistics (momentum 0.1) in evaluation, as PyTorch's BatchNorm does. That script never
switches to evaluation mode, so its test errors were computed with the statistics of each test batch
of 20 (docs/protocol-choices.md).

The NeuralOperator library's FNO (Kovachki et al. 2023, ``neuralop.models.FNO`` with its channel MLPs: version
1.0's defaults, 0.3's ``use_mlp=True``), which the continuum-attention paper trains (Calvello et al. 2024, Table 1:
5.70e6 parameters at 12 modes and width 128), is this network with two options. ``lift_width`` makes the lifting
two layers, ``[a, x] -> lift_width -> width`` with the activation between (the library: 2 x width).
``channel_mlp`` (the library: 0.5) adds to each layer a channel MLP ``M_l`` (``width -> channel_mlp x width ->
width``, activation between) beside a soft-gating skip ``g_l`` (one learned scale per channel, initialised to 1)
of the layer's input::

    z_l     = sigma( W_l v_l + (K_l v_l)(x) )              (no sigma after the last layer)
    v_{l+1} = sigma( M_l z_l + g_l * v_l )                 (no sigma after the last layer)

The library's linear skip has no bias and its spectral convolution has one: the same function as ``W_l`` with a
bias. Its modes ``(12, 12)`` keep frequencies -6 .. 5 on the first axis (after its ``fftshift``) and 0 .. 6 on the
last: ``modes: [6, 7]`` here. It appends a grid on [0, 1) (its ``GridEmbeddingND``); here the file's coordinates
are appended, as for every FNO entry. It counts a complex weight once: 5,705,089 for the continuum paper's network
on Darcy (one input), 11,210,113 counted here (real and imaginary parts separately).

``padding``: for non-periodic problems the released code appends zeros to the end of every grid
axis after the lifting (9 points for Darcy) and crops them before the projection, so that the
periodic FFT does not wrap the boundary values onto each other; ``padding: 0`` (the default)
treats the grid as periodic.

Parameters (real and imaginary parts counted separately, as in the published counts):
``(c_in + d) w + w`` (lifting) ``+ L (2^(d-1) 2 w^2 prod(modes) + w^2 + w)`` ``+ w p + p + p c_out + c_out``,
and ``2 w L`` more with ``norm: batch``; 2,368,001 for the Darcy network (d = 2, 12 modes, w = 32, L = 4,
p = 128, c_in = 1) and 549,569 for the Burgers FNO1d (16 modes, w = 64), the numbers of the Galerkin
Transformer paper's Table 5; 926,517 for the NS2d script's network (12 modes, w = 20, c_in = 10 frames,
ReLU, BatchNorm).

Data layout (the model contract of :mod:`opflow.models.base`): points are a row-major grid of
shape ``grid_shape`` (required in 2D and 3D; a 1D model takes the ``N`` points of a series as its
grid when ``grid_shape`` is None). The outputs are at the input grid points: ``query`` must be
None or equal to ``coords``, and a ``mask`` must be all True (FNO has no notion of missing grid
points). Because the spectral weights act on Fourier modes, one trained model runs on any grid
resolution (discretisation invariance; on grids too coarse for ``modes`` the missing modes are
dropped, see :mod:`opflow.models.layers.spectral`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from opflow.data.errors import ConfigError

from .base import OperatorModel, register
from .layers import SpectralConv, activation
from .transformer import check_batch, grid_of, require_full_grid


def as_modes(modes: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    """``modes`` as one count per grid axis: an int is repeated ``ndim`` times; a list must have ``ndim`` entries."""
    if isinstance(modes, int):
        return (modes,) * ndim
    out = tuple(int(m) for m in modes)
    if len(out) != ndim:
        raise ConfigError(f"modes {list(out)} has {len(out)} entries but the data have {ndim} grid dimension(s); give one per axis or a single int")
    return out


#: ``norm: batch``: the batch normalisation of a grid of 1, 2 or 3 dimensions
BATCH_NORMS: dict[int, type[nn.Module]] = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


class FourierLayer(nn.Module):
    """``v -> K v + W v`` on ``(B, width, *grid)``, then ``BN`` where ``norm`` is ``batch`` (activation
    applied by the caller)."""

    def __init__(self, width: int, modes: Sequence[int], norm: str = "none") -> None:
        super().__init__()
        self.spectral = SpectralConv(width, width, modes)
        self.pointwise = nn.Conv1d(width, width, 1)
        self.norm = BATCH_NORMS[len(modes)](width) if norm == "batch" else nn.Identity()

    def forward(self, v: Tensor) -> Tensor:
        return self.norm(self.spectral(v) + self.pointwise(v.flatten(2)).view_as(v))


@register("fno")
class FNO(OperatorModel):
    """Lifting + ``n_layers`` Fourier layers + two-layer projection (module docstring).

    The number of grid dimensions is ``coord_dim`` (1, 2 or 3).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        coord_dim: int,
        *,
        modes: int | Sequence[int],
        width: int,
        n_layers: int,
        proj_width: int,
        act: str,
        padding: int,
        norm: str = "none",
        lift_width: int = 0,
        channel_mlp: float = 0.0,
    ) -> None:
        super().__init__(in_channels, out_channels, coord_dim)
        if not 1 <= coord_dim <= 3:
            raise ConfigError(f"fno works on 1, 2 or 3 grid dimensions; the data have {coord_dim}")
        self.modes = as_modes(modes, coord_dim)
        self.width, self.padding = width, padding
        lift_in = in_channels + coord_dim
        self.lift = nn.Sequential(nn.Linear(lift_in, lift_width), activation(act), nn.Linear(lift_width, width)) if lift_width else nn.Linear(lift_in, width)
        self.layers = nn.ModuleList(FourierLayer(width, self.modes, norm) for _ in range(n_layers))
        self.act = activation(act)
        hidden = round(channel_mlp * width)
        if channel_mlp and hidden < 1:
            raise ConfigError(f"channel_mlp {channel_mlp} x width {width} leaves no hidden channel; use 0 (no channel MLP) or a larger value")
        self.channel_mlps = nn.ModuleList(
            nn.Sequential(nn.Conv1d(width, hidden, 1), activation(act), nn.Conv1d(hidden, width, 1)) for _ in range(n_layers if hidden else 0)
        )
        self.gates = nn.ParameterList(nn.Parameter(torch.ones(1, width, 1)) for _ in range(n_layers if hidden else 0))
        self.proj = nn.Sequential(nn.Linear(width, proj_width), activation(act), nn.Linear(proj_width, out_channels))

    def grid_of(self, n_points: int, grid_shape: Sequence[int] | None) -> tuple[int, ...]:
        """The grid the points form (:func:`~opflow.models.transformer.grid_of`)."""
        return grid_of("fno", self.coord_dim, n_points, grid_shape)

    def forward(
        self,
        coords: Tensor,
        inputs: Tensor,
        query: Tensor | None = None,
        mask: Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
    ) -> Tensor:
        check_batch(self, coords, inputs, query, mask)
        require_full_grid("fno", coords, query, mask)
        b, n, _ = inputs.shape
        grid = self.grid_of(n, grid_shape)
        v = self.lift(torch.cat([inputs, coords.to(inputs.dtype)], -1))  # (B, N, w)
        v = v.transpose(1, 2).reshape(b, self.width, *grid)
        if self.padding:
            v = F.pad(v, [0, self.padding] * len(grid))
        for i, layer in enumerate(self.layers):
            last = i + 1 == len(self.layers)
            z = layer(v)
            z = z if last else self.act(z)
            if self.channel_mlps:  # M_l z_l + g_l v_l, on the points flattened (module docstring)
                z = (self.channel_mlps[i](z.flatten(2)) + self.gates[i] * v.flatten(2)).view_as(v)
                z = z if last else self.act(z)
            v = z
        if self.padding:
            v = v[(slice(None), slice(None), *(slice(0, s) for s in grid))]
        return self.proj(v.flatten(2).transpose(1, 2))


__all__ = ["FNO", "FourierLayer", "as_modes"]
