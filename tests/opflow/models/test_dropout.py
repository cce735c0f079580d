"""Specification of the dropout layer (opflow.models.layers.dropout).

Training: each entry kept with probability 1 - p, independently, scaled by 1 / (1 - p) (p rounded
to a multiple of 2^-16), gradient = the same mask and scale; evaluation: the identity. The mask
follows the seeded CPU generator and takes the input's memory layout. Elsewhere (compiled, switched off)
it is torch's own dropout.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from opflow.data.errors import ConfigError
from opflow.models.layers import Dropout
from opflow.models.layers import dropout as D


def _binomial_ok(k: float, n: int, q: float, sigmas: float = 6.0) -> bool:
    """``k`` successes of ``n`` trials within ``sigmas`` standard deviations of ``n q``."""
    return abs(k - n * q) <= sigmas * math.sqrt(n * q * (1 - q))


@pytest.mark.parametrize("p", [0.05, 0.3, 0.9])
def test_keeps_each_entry_with_probability_one_minus_p(p):
    torch.manual_seed(0)
    x = torch.ones(64, 1000, 17)  # 1,088,000 entries: numel not a multiple of 4 is covered below
    y = D.dropout(x, p, training=True)
    kept = int((y != 0).sum())
    assert _binomial_ok(kept, x.numel(), 1 - p)
    p_drawn = round(p * D.LEVELS) / D.LEVELS
    assert abs(p_drawn - p) <= 0.5 / D.LEVELS
    # kept entries carry the unbiased scale 1 / (1 - p_drawn), dropped ones are exactly 0
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - p_drawn)), rtol=1e-12, atol=0)


def test_mask_entries_are_independent_across_the_16_bit_chunks():
    """Four neighbouring entries share one 64-bit draw: their keep indicators must still be independent
    and equally likely (per position in the draw; adjacent pairs keep together with probability (1-p)^2)."""
    torch.manual_seed(1)
    p, n = 0.3, 1 << 20
    keep, _ = D.keep_mask((n,), p)
    k = keep.view(-1, 4).double()
    for pos in range(4):
        assert _binomial_ok(float(k[:, pos].sum()), n // 4, 1 - p)
    both = float((k[:, :-1] * k[:, 1:]).sum())
    assert _binomial_ok(both, 3 * n // 4, (1 - p) ** 2)
    # and across draws (position 3 of one draw, position 0 of the next)
    across = float((k[:-1, 3] * k[1:, 0]).sum())
    assert _binomial_ok(across, n // 4 - 1, (1 - p) ** 2)


def test_output_is_unbiased():
    torch.manual_seed(2)
    x = torch.randn(200, 5003)
    y = D.dropout(x, 0.2, training=True)
    # E[y] = x entry by entry: the mean over entries of y / x is 1 within its standard error sqrt(p / (1 - p) / n)
    ratio = (y / x).mean()
    assert abs(float(ratio) - 1) <= 6 * math.sqrt(0.2 / 0.8 / x.numel())


def test_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(3)
    x = torch.randn(4, 333, 5, requires_grad=True)
    y = Dropout(0.25)(x)
    w = torch.randn_like(x)
    (y * w).sum().backward()
    assert torch.allclose(x.grad, (y / x).detach() * w, rtol=1e-12, atol=1e-12)


def test_evaluation_and_p_zero_are_the_identity_and_p_one_gives_zeros():
    x = torch.randn(3, 7, 2)
    d = Dropout(0.5).eval()
    assert torch.equal(d(x), x)
    assert torch.equal(D.dropout(x, 0.0, training=True), x)
    assert torch.equal(D.dropout(x, 1.0, training=True), torch.zeros_like(x))


def test_follows_the_seeded_generator_and_draws_fresh_masks():
    x = torch.ones(11, 13)
    torch.manual_seed(4)
    a, b = D.dropout(x, 0.5), D.dropout(x, 0.5)
    torch.manual_seed(4)
    assert torch.equal(D.dropout(x, 0.5), a)
    assert not torch.equal(a, b)
    # the generator state (saved in checkpoints) determines the next mask
    state = torch.get_rng_state()
    c = D.dropout(x, 0.5)
    torch.set_rng_state(state)
    assert torch.equal(D.dropout(x, 0.5), c)


def test_the_mask_takes_the_inputs_layout_with_the_draws_in_memory_order():
    """A channels-last input gets a channels-last mask and output; its memory holds the draws in the order the
    contiguous mask of the same seed holds them, so a contiguous input's mask is the one drawn before."""
    x = torch.randn(3, 6, 5, 4)
    xl = x.contiguous(memory_format=torch.channels_last)
    assert D.memory_order(x) == (0, 1, 2, 3) and D.memory_order(xl) == (0, 2, 3, 1)
    torch.manual_seed(5)
    plain, _ = D.keep_mask(x.shape, 0.3)
    torch.manual_seed(5)
    same, _ = D.keep_mask(x.shape, 0.3, like=x)
    torch.manual_seed(5)
    last, _ = D.keep_mask(x.shape, 0.3, like=xl)
    assert torch.equal(same, plain)
    assert last.stride() == xl.stride()
    assert torch.equal(last.permute(0, 2, 3, 1).flatten(), plain.flatten())
    torch.manual_seed(5)
    y = D.dropout(xl, 0.3)
    assert y.is_contiguous(memory_format=torch.channels_last)
    scale = 1 / (1 - round(0.3 * D.LEVELS) / D.LEVELS)
    assert torch.equal(y, xl * last.to(xl.dtype) * scale)


def test_the_contiguous_mask_of_before_is_one_switch_away(monkeypatch):
    xl = torch.randn(2, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    monkeypatch.setattr(D, "MASK_LAYOUT", False)
    torch.manual_seed(6)
    y = D.dropout(xl, 0.5)
    torch.manual_seed(6)
    mask, _ = D.keep_mask(xl.shape, 0.5)
    assert torch.equal(y, xl * mask.to(xl.dtype) * 2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_keeps_the_dtype_and_shape(dtype):
    x = torch.randn(2, 3, 5).to(dtype)
    y = D.dropout(x, 0.5)
    assert y.dtype == dtype and y.shape == x.shape


def test_is_a_torch_dropout_module():
    """Code that looks for dropout modules (the trainer, before capturing a CUDA graph) finds it."""
    d = Dropout(0.1)
    assert isinstance(d, nn.Dropout) and d.p == 0.1


def test_bad_probability_names_the_fix():
    with pytest.raises(ConfigError, match=r"outside \[0, 1\]"):
        Dropout(1.5)


def test_switched_off_or_compiled_it_is_torchs_dropout(monkeypatch):
    x = torch.ones(50, 40)
    torch.manual_seed(5)
    expected = F.dropout(x, 0.3, True)
    monkeypatch.setattr(D, "CPU_MASK", False)
    torch.manual_seed(5)
    assert torch.equal(D.dropout(x, 0.3), expected)
    monkeypatch.setattr(D, "CPU_MASK", True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.manual_seed(5)
    assert torch.equal(D.dropout(x, 0.3), expected)


def test_compiles_with_no_graph_break():
    model = nn.Sequential(nn.Linear(3, 4), Dropout(0.2), nn.Linear(4, 1)).train()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    torch.manual_seed(6)
    assert compiled(torch.randn(5, 3)).shape == (5, 1)
