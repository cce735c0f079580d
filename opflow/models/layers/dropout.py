"""Dropout (Srivastava et al., "Dropout: a simple way to prevent neural networks from overfitting",
JMLR 2014) with a mask that is cheap to draw on the CPU.

In training, each entry is kept with probability ``1 - p`` and scaled so that its expectation is
unchanged::

    y = x * m / (1 - p),   m ~ Bernoulli(1 - p) independently per entry;   y = x in evaluation.

Why not ``torch.nn.Dropout`` on the CPU: PyTorch draws its mask there one entry at a time
(``aten::bernoulli_``), and in the Galerkin / Fourier Transformer steps of the paper profile the
profiler put 14-23 % of a CPU training step there. Measured on the 2-core development machine
(benchmarks/results/dropout_cpu.json, p = 0.05, forward and backward): 4.6 ns per entry with
torch's mask, 1.6-2.1 ns with this one at 2^18-2^21 entries (2.2-2.8x); the training steps of the
CPU's paper pairs (FT, GT and the inverse GT on Darcy) 6-10 % shorter. Here the mask comes from 64-bit
draws of the same generator (``Tensor.random_`` on ``int64``, one draw for four entries), each split into four 16-bit
integers ``u`` uniform on ``{-32768, ..., 32767}``, and an entry is kept when
``u >= round(p * 65536) - 32768``. So the drop probability is ``p`` rounded to a multiple of
``2^-16`` (0.05 becomes 0.0500031), and the scale uses that rounded ``p``, so the output is still
unbiased. The mask follows the seeded default CPU generator (``torch.manual_seed``) and its saved
state, as ``nn.Dropout``'s does, but the masks differ from ``nn.Dropout``'s for the same seed.

The mask takes the input's memory layout: the draws fill it in memory order, so a channels-last input (the
Galerkin Transformer's CNN samplers run channels-last: their input is a channel-last grid moved to ``(B, C, H, W)``)
gets a channels-last mask, and a contiguous input the same mask as before. A contiguous mask on a channels-last
input made the products that apply it, and the activation's backward after them, cross layouts: ``silu(dropout(x))``
forward and backward on the inverse GT's first convolution output took 1.32x as long, and the steps of the inverse
GT, FT and GT at 141 1.03-1.06x (``benchmarks/mask_layout.py``, docs/costs.md).

Elsewhere (CUDA, whose fused dropout draws its own counter-based random numbers in the kernel;
inside ``torch.compile``; non-floating tensors) this is ``torch.nn.functional.dropout`` itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from opflow.data.errors import ConfigError

#: the mask's resolution: ``p`` is rounded to a multiple of ``1 / LEVELS``
LEVELS = 1 << 16

#: ``False``: :func:`torch.nn.functional.dropout` on the CPU too (the masks opflow drew before this module; the
#: baseline of ``benchmarks/dropout.py``)
CPU_MASK = True
#: ``False``: the CPU mask laid out contiguously whatever the input's layout (as before 2026-11-28; the baseline of
#: ``benchmarks/mask_layout.py``)
MASK_LAYOUT = True


def _fast_path(x: Tensor, p: float, training: bool) -> bool:
    return (
        CPU_MASK and training and 0.0 < p < 1.0 and x.device.type == "cpu" and x.is_floating_point()
        and not torch.compiler.is_compiling()
    )


def keep_mask(
    shape: torch.Size | tuple[int, ...], p: float, generator: torch.Generator | None = None, like: Tensor | None = None,
) -> tuple[Tensor, float]:
    """``(mask, p_drawn)``: a boolean CPU mask of ``shape`` whose entries are ``True`` (kept) with probability
    ``1 - p_drawn`` each, independently, ``p_drawn = round(p * 2^16) / 2^16`` (module docstring).

    ``like``: a tensor of that shape whose memory layout the mask takes (its axes ordered by decreasing stride, e.g.
    channels-last), the draws laid out in its memory order. Mixing layouts in the products that apply the mask made
    them several times slower (module docstring); a contiguous ``like`` gives the same mask as none."""
    n = 1
    for s in shape:
        n *= int(s)
    level = round(p * LEVELS)
    draws = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), (1 << 63) - 1, generator=generator)
    order = memory_order(like) if like is not None else tuple(range(len(shape)))
    u = draws.view(torch.int16)[:n].view([int(shape[d]) for d in order]).permute(*sorted(range(len(order)), key=order.__getitem__))
    return u >= level - LEVELS // 2, level / LEVELS


def memory_order(x: Tensor) -> tuple[int, ...]:
    """``x``'s axes from the slowest-varying in memory to the fastest (decreasing strides; ties, as size-1 axes
    give, in axis order): ``(0, 1, 2, 3)`` for a contiguous ``(B, C, H, W)``, ``(0, 2, 3, 1)`` for channels-last."""
    return tuple(sorted(range(x.dim()), key=lambda d: (-x.stride(d), d)))


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``x * m / (1 - p)`` with ``m ~ Bernoulli(1 - p)`` per entry while ``training``, else ``x`` (module docstring).

    On the CPU the mask is :func:`keep_mask`'s; elsewhere :func:`torch.nn.functional.dropout`.
    """
    if not _fast_path(x, p, training):
        return F.dropout(x, p, training)
    keep, p_drawn = keep_mask(x.shape, p, like=x if MASK_LAYOUT else None)
    if p_drawn >= 1.0:
        return x * 0.0
    scale = keep.to(x.dtype).mul_(1.0 / (1.0 - p_drawn))
    return x * scale


class Dropout(nn.Dropout):
    """:class:`torch.nn.Dropout` (a subclass: the same argument, training / evaluation behaviour and
    ``isinstance`` checks) whose forward is :func:`dropout`, with the mask cheap to draw on the CPU."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"dropout probability {p} is outside [0, 1]; use a value such as 0.05 (0 turns dropout off)")
        super().__init__(float(p))

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
