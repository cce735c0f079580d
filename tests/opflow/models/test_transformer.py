"""Specification of the plain pre-LN linear-attention transformer operator (``linear_transformer``)."""

from __future__ import annotations


import pytest
import torch

from opflow.data.errors import ConfigError
from opflow.models import build_model, count_parameters
from opflow.models.transformer import LinearTransformer

from model_helpers import overfit_mean_field_operator


def tiny(out: int = 1, **kw) -> LinearTransformer:
    cfg = dict(arch="linear_transformer", width=16, n_layers=2, n_heads=2)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_model(cfg, 1, out, 2).double()


def cloud(batch: int = 2, n: int = 30, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, n, 2, generator=g)
    return x, torch.sin(3 * x[..., :1]) * torch.cos(2 * x[..., 1:]) + 0.1 * torch.randn(batch, n, 1, generator=g)


def test_registered_with_the_same_defaults_as_ono():
    lt = build_model({"arch": "linear_transformer"}, 1, 1, 2)
    ono = build_model({"arch": "ono"}, 1, 1, 2)
    assert isinstance(lt, LinearTransformer) and len(lt.blocks) == len(ono.blocks) == 8
    assert lt.blocks[0].attn.kernel == ono.blocks[0].attn.kernel == "linear"
    assert lt.blocks[0].ln_attn.normalized_shape == ono.blocks[0].ln_attn.normalized_shape == (128,)
    # the bottom flows are identical blocks; ONO adds the orthogonal-attention flow
    assert count_parameters(lt.blocks) == count_parameters(ono.blocks)
    assert count_parameters(ono) > count_parameters(lt)


def test_shapes_and_errors():
    m = tiny(out=2)
    x, a = cloud()
    assert m(x, a).shape == (2, 30, 2)
    assert m(x, a, query=torch.rand(2, 9, 2)).shape == (2, 9, 2)
    with pytest.raises(ConfigError, match="linear"):
        build_model({"arch": "linear_transformer", "attention": "lineer"}, 1, 1, 2)
    with pytest.raises(ValueError, match="inputs"):
        m(x, a[:, :5])


@pytest.mark.parametrize("attention", ["linear", "nystrom", "softmax"])
def test_padding_does_not_change_real_outputs(attention):
    m = tiny(attention=attention, num_landmarks=7)
    x, a = cloud()
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[1, 18:] = False
    xp, ap = x.clone(), a.clone()
    xp[1, 18:], ap[1, 18:] = -5.0, 1e4
    out = m(xp, ap, mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[1, :18], m(x[1:, :18], a[1:, :18])[0], rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(out[0], m(x[:1], a[:1])[0], rtol=1e-9, atol=1e-10)


def test_permutation_equivariance():
    m = tiny()
    x, a = cloud()
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(m(x[:, perm], a[:, perm]), m(x, a)[:, perm], rtol=1e-9, atol=1e-11)


def test_query_stream_with_query_equal_to_coords_is_the_self_form():
    m = tiny()
    x, a = cloud()
    torch.testing.assert_close(m.forward_cross(x, a, x.clone()), m(x, a), rtol=1e-10, atol=1e-12)
    sub = x[:, ::3]
    torch.testing.assert_close(m(x, a, query=sub), m(x, a)[:, ::3], rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_overfits_four_samples_of_a_smooth_operator():
    """The task of the ONO overfitting test: u = a <a> + <a^2> on 32 points of [0, 1], 4 samples."""
    err = overfit_mean_field_operator(dict(arch="linear_transformer", width=32, n_layers=2, n_heads=4))
    assert err < 1e-3, err
