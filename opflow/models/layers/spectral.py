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

Two ways to compute the same transforms (``transform``): ``"fft"``, ``torch.fft.rfftn`` / ``irfftn``
of the whole grid, and ``"dft"``, only the retained modes as matrix products with the DFT matrices,
``X_k = sum_x x_x exp(-2 pi i k x / n)`` for the kept ``k`` of each axis and back (on the last axis
the real inverse ``(1/n) sum_k c_k Re(Y_k exp(2 pi i k x / n))``, ``c_k = 2`` except ``c_0 = 1`` and
``c_{n/2} = 1``, which is what ``irfft`` does with a half spectrum). They agree to round-off (the
tests: 1e-12 in float64). The products are laid out for the CPU (:meth:`SpectralConv._forward_dft`): the real last
axis through one real product each way (real and imaginary parts interleaved), the kept modes of every block side by
side so that the channels mix in one batched product. The default ``"auto"`` takes ``"dft"`` on the CPU when a grid
axis has a prime factor above 7 (141 = 3 x 47, 211, 421, 85 = 5 x 17, 416 = 2^5 x 13), where PyTorch's CPU FFT
leaves its fast small-radix algorithm. One layer's forward and backward (32 channels, 12 x 12 modes, 2 threads;
benchmarks/results/spectral_cpu.json), FFT against products: 101 / 133 / 825 ms against 11 / 21 / 82 ms at 141 / 211
/ 421 (batch 4); 70 against 24 ms at 85 (batch 20); 448 against 71 ms at 416. On grids of 2s the products were
faster too in that run (64: 7.3 against 5.6 ms, 128: 1.6x, 256: 2.3x), but ``"auto"`` keeps the FFT there, the
reference, since no CPU training of a paper row runs on them; on CUDA it keeps the FFT everywhere. Inside
``torch.compile`` (``training.compile``) ``"auto"`` takes the products everywhere: inductor cannot lower the FFT
path's complex mode product (its ``view_as_real`` of a strided complex tensor fails), so every FNO on a grid of small
primes fell back to the plain step; the products are real arithmetic, which it compiles.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

from opflow.data.errors import ConfigError

from opflow.models.needs import spectral_mode_caps


class SpectralConv(nn.Module):
    """Fourier layer kernel ``x -> irfftn(R . rfftn(x))`` on ``(B, C_in, *grid)`` real tensors.

    ``modes`` gives one retained-mode count per grid axis (1, 2 or 3 axes); the module's number of
    spatial dimensions is ``len(modes)``.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: Sequence[int], transform: str = "auto") -> None:
        super().__init__()
        if transform not in TRANSFORMS:
            raise ConfigError(f"SpectralConv transform {transform!r} is not one of {list(TRANSFORMS)}")
        self.transform = transform
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

    def uses_dft(self, x: torch.Tensor) -> bool:
        """Whether :meth:`forward` computes the retained modes as matrix products (module docstring)."""
        if self.transform != "auto":
            return self.transform == "dft"
        if torch.compiler.is_compiling():
            return True
        return x.device.type == "cpu" and any(largest_prime_factor(n) > FFT_FAST_PRIME for n in x.shape[2:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, *grid)`` -> ``(B, C_out, *grid)``; the grid has ``len(modes)`` axes."""
        d = self.ndim
        if x.dim() != d + 2 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"SpectralConv expects (B, {self.in_channels}, <{d} grid axes>), got shape {tuple(x.shape)}"
            )
        grid = tuple(x.shape[2:])
        m = self.effective_modes(grid)
        in_dtype = x.dtype
        if in_dtype in (torch.float16, torch.bfloat16):  # FFTs of half types are unsupported or power-of-2 only
            x = x.float()
        if self.uses_dft(x):
            return self._forward_dft(x, grid, m).to(in_dtype)
        dims = tuple(range(2, d + 2))
        x_ft = torch.fft.rfftn(x, dim=dims)
        out_ft = x_ft.new_zeros(x.shape[0], self.out_channels, *x_ft.shape[2:])
        for idx, w in self._blocks(grid, m, [n - k for n, k in zip(grid[:-1], m[:-1])]):
            out_ft[idx] = torch.einsum("bi...,io...->bo...", x_ft[idx], w.to(x_ft.dtype))
        return torch.fft.irfftn(out_ft, s=grid, dim=dims).to(in_dtype)

    def _blocks(self, grid: tuple[int, ...], m: tuple[int, ...], neg_start: Sequence[int]):  # noqa: ANN202
        """``(index, complex weight)`` of each corner block: non-negative (0..m-1) or negative frequencies
        (from ``neg_start``) on each non-last axis, ``0..m_d - 1`` on the last."""
        for w, signs in zip(self._kept_weights(m), itertools.product((False, True), repeat=self.ndim - 1)):
            idx = tuple(slice(s0, s0 + k) if neg else slice(0, k) for neg, s0, k in zip(signs, neg_start, m[:-1]))
            yield (slice(None), slice(None), *idx, slice(0, m[-1])), w

    def _kept_weights(self, m: tuple[int, ...]) -> list[torch.Tensor]:
        """The complex weight blocks cut to the ``m`` modes used on the grid, ``(in, out, *m)`` each, in the order
        of ``itertools.product((False, True), repeat=d - 1)`` over the non-last axes' signs (last axis fastest)."""
        return [torch.view_as_complex(w) for w in self._kept_pairs(m)]

    def _kept_pairs(self, m: tuple[int, ...]) -> list[torch.Tensor]:
        """:meth:`_kept_weights` as the stored real pairs, ``(in, out, *m, 2)`` each (real, imaginary part)."""
        keep = (slice(None), slice(None), *(slice(0, k) for k in m), slice(None))
        return [w[keep] for w in self.weights]

    def _forward_dft(self, x: torch.Tensor, grid: tuple[int, ...], m: tuple[int, ...]) -> torch.Tensor:
        """The ``"dft"`` transform: the retained modes by matrix products, axis by axis (module docstring).

        Laid out for the CPU's matrix products, in real arithmetic only: a complex number is a pair of reals
        next to each other on the last axis (``Re, Im`` of each kept ``k``), and each complex product is real
        products of the cosine and sine rows. (PyTorch's CPU backward of a complex product with a constant
        matrix multiplies by its conjugate view and resolves that conjugate matrix by matrix, a copy each:
        thousands of small operations per layer.) The last axis goes in and out through one real product each
        way; on every other axis the kept frequencies sit next to each other (``0 .. m_j - 1`` then
        ``-m_j .. -1``) and one real product with ``[cos; sin]`` (forward) or ``[cos^T, sin^T] / n`` (inverse)
        makes both parts; the ``2^(d-1)`` weight blocks make one tensor and the channels mix in one batched
        real product over the modes (:func:`_mix`)."""
        d, real = self.ndim, x.dtype
        n_last, m_last = grid[-1], m[-1]
        # forward, last axis (real input): X_k = sum_x x_x (cos - i sin)(2 pi k x / n), k = 0 .. m_d - 1
        cos, sin = _trig(n_last, range(m_last), real, x.device)  # (m_d, n_d)
        forward = torch.stack((cos.T, -sin.T), dim=-1).reshape(n_last, 2 * m_last)  # columns Re, Im of each k
        xf = x @ forward  # (B, C, n_1, ..., n_{d-1}, 2 m_d): pairs
        # forward, the other axes: rows 0 .. m_j - 1 and -m_j .. -1 of exp(-i theta) = cos - i sin;
        # (cos - i sin)(a + i b) = (cos a + sin b) + i (cos b - sin a)
        trig = []
        for j in range(d - 1):
            c, s_ = _trig(grid[j], list(range(m[j])) + list(range(-m[j], 0)), real, x.device)  # (2 m_j, n_j)
            trig.append((c, s_))
            both = torch.cat((c, s_)) @ torch.movedim(xf, 2 + j, -2)  # (..., 4 m_j, 2 m_d)
            ca, sa = both.split(2 * m[j], dim=-2)
            xf = torch.movedim(ca - _times_i(sa), -2, 2 + j)
        out = _mix(xf, self._dft_weight(m))
        # inverse, the other axes: (1 / n_j) sum_k Y_k exp(+i theta), (cos + i sin)(a + i b) = (cos a - sin b) + i (cos b + sin a)
        for j, (c, s_) in enumerate(trig):
            y = torch.movedim(out, 2 + j, -2)  # (..., 2 m_j, 2 m_d)
            back = torch.cat((c.T, s_.T), dim=1) / grid[j]  # (n_j, 4 m_j)
            out = torch.movedim(back @ torch.cat((y, _times_i(y)), dim=-2), -2, 2 + j)
        # inverse, last axis (real output): (1 / n) sum_k c_k (Re Y_k cos - Im Y_k sin)(2 pi k x / n)
        c_k = torch.full((m_last, 1), 2.0 / n_last, dtype=real, device=x.device)
        c_k[0] = 1.0 / n_last
        if n_last % 2 == 0 and m_last == n_last // 2 + 1:
            c_k[-1] = 1.0 / n_last
        inverse = torch.stack((c_k * cos, -c_k * sin), dim=1).reshape(2 * m_last, n_last)  # rows Re, Im of each k
        return out @ inverse

    def _dft_weight(self, m: tuple[int, ...]) -> torch.Tensor:
        """The weight of every kept mode in the ``"dft"`` layout, real pairs, ``(in, out, 2 m_1, ..., 2 m_{d-1}, m_d, 2)``:
        the blocks of :meth:`_kept_pairs` side by side, non-negative frequencies first on each non-last axis."""
        blocks = self._kept_pairs(m)
        for axis in reversed(range(self.ndim - 1)):
            blocks = [torch.cat(blocks[i:i + 2], dim=2 + axis) for i in range(0, len(blocks), 2)]
        return blocks[0]


def _times_i(v: torch.Tensor) -> torch.Tensor:
    """``i v`` for complex numbers stored as pairs on the last axis: ``(a, b) -> (-b, a)``."""
    pairs = v.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def _mix(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``y_{b,o,k} = sum_i x_{b,i,k} w_{i,o,k}`` (complex) for ``x (B, I, *modes[:-1], 2 m_d)`` (pairs on the last
    axis) and ``w (I, O, *modes, 2)``, as one batched real product over the modes:
    ``[Re x, Im x] [[Re w, Im w], [-Im w, Re w]] = [Re y, Im y]``, each mode's ``(B, 2I) x (2I, 2O)``. The ``einsum``
    of the same hands the CPU a strided batch, which it runs matrix by matrix with a copy each (the FFT path, on
    CUDA and on grids of small primes, keeps the complex ``einsum``: measured within noise of this on the CPU at
    64, 85 and 128)."""
    batch, in_ch, out_ch = x.shape[0], w.shape[0], w.shape[1]
    modes = w.shape[2:-1]
    xm = x.reshape(batch, in_ch, -1, 2).permute(2, 0, 3, 1).reshape(-1, batch, 2 * in_ch)  # (M, B, [Re, Im] x I)
    wr, wi = w.flatten(2, -2).permute(2, 0, 1, 3).unbind(-1)  # (M, I, O) each
    wm = torch.cat((torch.cat((wr, wi), dim=2), torch.cat((-wi, wr), dim=2)), dim=1)  # (M, 2I, 2O)
    y = torch.bmm(xm, wm)  # (M, B, [Re, Im] x O)
    return y.unflatten(-1, (2, out_ch)).permute(1, 3, 0, 2).reshape(batch, out_ch, *modes[:-1], 2 * modes[-1])


#: the transforms of :class:`SpectralConv` (module docstring)
TRANSFORMS = ("auto", "fft", "dft")
#: the largest prime factor of an axis length for which ``"auto"`` keeps the FFT on the CPU
FFT_FAST_PRIME = 7


def largest_prime_factor(n: int) -> int:
    """The largest prime factor of ``n >= 1`` (1 for 1)."""
    best, p = 1, 2
    while p * p <= n:
        while n % p == 0:
            best, n = p, n // p
        p += 1
    return max(best, n) if n > 1 else best


def _trig(n: int, freqs: Sequence[int] | range, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of ``2 pi k x / n`` for ``k`` in ``freqs`` (rows) and ``x = 0 .. n - 1`` (columns),
    the phase reduced exactly (``k x mod n`` in integers) before the float64 evaluation."""
    k = torch.tensor(list(freqs), dtype=torch.int64)[:, None]
    phase = (k * torch.arange(n, dtype=torch.int64)[None]) % n
    angle = phase.to(torch.float64) * (2 * math.pi / n)
    return torch.cos(angle).to(dtype=dtype, device=device), torch.sin(angle).to(dtype=dtype, device=device)


__all__ = ["FFT_FAST_PRIME", "TRANSFORMS", "SpectralConv", "largest_prime_factor"]
