"""The spectral convolution of the Fourier Neural Operator, the project's one implementation.

Li, Kovachki, Azizzadenesheli, Liu, Bhattacharya, Stuart, Anandkumar, "Fourier Neural Operator for
Parametric Partial Differential Equations", ICLR 2021 (arXiv 2010.08895), Section 4, eq. (5)::

    (K v)(x) = F^{-1}( R . (F v) )(x),   (R . F v)_{k, o} = sum_i R_{k, o, i} (F v)_{k, i}

for the retained low modes ``k`` and zero for all others. ``F`` is the real FFT over the grid
axes (``torch.fft.rfftn``, so the last grid axis keeps only non-negative frequencies). Retained
modes, for ``modes = (m_1, ..., m_d)``:

* last grid axis: frequencies ``0 .. m_d - 1``;
* every other axis: the ``m_j`` lowest non-negative *and* the ``m_j`` lowest negative frequencies,
  i.e. ``2^(d-1)`` corner blocks of the spectrum (1D: one block; 2D: the two blocks
  ``[:m1, :m2]`` and ``[-m1:, :m2]`` of the original FNO; 3D: four blocks).

Each block has its own complex weight tensor of shape ``(in, out, m_1, ..., m_d)``, initialised,
as in the original code, as ``1/(in*out) * (U[0,1) + i U[0,1))``. The weights are stored as real
tensors with a trailing axis of 2 (real and imaginary part), so the parameter count is that of the
original FNO (which counts real and imaginary parts separately) and every optimiser sees real
parameters; they are viewed as complex in ``forward``, in the dtype of the weights (``.double()``
gives a complex128 convolution).

Because the multiplication is by a fixed tensor per mode, the layer is a periodic (circular)
convolution whose kernel has only the retained modes (the test builds that kernel and compares with
an explicit periodic convolution). A grid too coarse for the requested modes uses only the modes it
has: at most ``n_j // 2`` per sign on the non-last axes (so the positive and negative blocks never
overlap) and ``n_d // 2 + 1`` on the last axis; the weights of the missing modes are unused. This
lets one trained model run on coarser grids (zero-shot resolution change) instead of failing.
Half-precision inputs (float16, bfloat16) are transformed in float32 and the result cast back.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from opflow.models.needs import spectral_mode_caps


class SpectralConv(nn.Module):
    """Fourier layer kernel ``x -> irfftn(R . rfftn(x))`` on ``(B, C_in, *grid)`` real tensors.

    ``modes`` gives one retained-mode count per grid axis (1, 2 or 3 axes); the module's number of
    spatial dimensions is ``len(modes)``.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: Sequence[int]) -> None:
        super().__init__()
        modes = tuple(int(m) for m in modes)
        if not 1 <= len(modes) <= 3:
            raise ValueError(f"SpectralConv supports 1 to 3 grid dimensions, got modes={modes}")
        if any(m < 1 for m in modes):
            raise ValueError(f"every mode count must be >= 1, got modes={modes}")
        if in_channels < 1 or out_channels < 1:
            raise ValueError(f"channel counts must be >= 1, got in={in_channels}, out={out_channels}")
        self.in_channels, self.out_channels, self.modes = in_channels, out_channels, modes
        self.ndim = len(modes)
        scale = 1.0 / (in_channels * out_channels)
        n_blocks = 2 ** (self.ndim - 1)
        self.weights = nn.ParameterList(
            nn.Parameter(scale * torch.rand(in_channels, out_channels, *modes, 2)) for _ in range(n_blocks)
        )

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, out_channels={self.out_channels}, modes={self.modes}"

    def effective_modes(self, grid: Sequence[int]) -> tuple[int, ...]:
        """Modes used on a grid of shape ``grid``: the requested ones, capped by what the grid has."""
        return tuple(min(m, c) for m, c in zip(self.modes, spectral_mode_caps(grid)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, *grid)`` -> ``(B, C_out, *grid)``; the grid has ``len(modes)`` axes."""
        d = self.ndim
        if x.dim() != d + 2 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"SpectralConv expects (B, {self.in_channels}, <{d} grid axes>), got shape {tuple(x.shape)}"
            )
        grid = tuple(x.shape[2:])
        dims = tuple(range(2, d + 2))
        m = self.effective_modes(grid)
        in_dtype = x.dtype
        if in_dtype in (torch.float16, torch.bfloat16):  # FFTs of half types are unsupported or power-of-2 only
            x = x.float()
        x_ft = torch.fft.rfftn(x, dim=dims)
        out_ft = x_ft.new_zeros(x.shape[0], self.out_channels, *x_ft.shape[2:])
        keep = tuple(slice(0, k) for k in m)  # the weight entries used on this grid
        # corner blocks: non-negative (0..m-1) or negative (-m..-1) frequencies on each non-last axis
        for weight, signs in zip(self.weights, itertools.product((False, True), repeat=d - 1)):
            w = torch.view_as_complex(weight)[(slice(None), slice(None), *keep)]
            idx = tuple(slice(n - k, n) if neg else slice(0, k) for neg, n, k in zip(signs, grid[:-1], m[:-1]))
            idx = (slice(None), slice(None), *idx, slice(0, m[-1]))
            out_ft[idx] = torch.einsum("bi...,io...->bo...", x_ft[idx], w.to(x_ft.dtype))
        return torch.fft.irfftn(out_ft, s=grid, dim=dims).to(in_dtype)


__all__ = ["SpectralConv"]
