"""Specification of DeepONet (``deeponet``) and MIONet (``mionet``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from opflow.data.errors import ConfigError
from opflow.models import build_model, count_parameters
from opflow.models.deeponet import DeepONet, MIONet
from opflow.models.hparams import check_hparams

from model_helpers import overfit_mean_field_operator

SMALL = dict(branch_width=16, branch_layers=2, trunk_width=16, trunk_layers=2, basis=8)


def tiny(arch: str = "deeponet", c_in: int = 2, c_out: int = 3, n_points: int = 30, **kw):
    torch.manual_seed(0)
    return build_model({"arch": arch, "n_points": n_points, **SMALL, **kw}, c_in, c_out, 2)


def cloud(batch: int = 2, n: int = 30, c: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, n, 2, generator=g)
    return x, torch.sin(3 * x[..., :1]) * torch.cos(torch.arange(1.0, c + 1) * x[..., 1:]) + 0.1 * torch.randn(batch, n, c, generator=g)


def test_output_is_the_branch_trunk_inner_product_plus_bias():
    m = tiny()
    with torch.no_grad():
        m.bias.copy_(torch.tensor([0.5, -1.0, 2.0]))
    x, a = cloud()
    y = torch.rand(2, 7, 2)
    out = m(x, a, query=y)
    assert out.shape == (2, 7, 3)
    b = m.branches[0](a.flatten(1)).view(2, 3, 8)  # (B, c_out, p): sensors = all points, all channels
    t = torch.nn.functional.gelu(m.trunk[0](y)).view(2, 7, 3, 8)  # the trunk ends with the activation
    expected = (b[:, None] * t).sum(-1) + m.bias
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(m(x, a), m(x, a, query=x))  # query None = the input points
    # parameters: branch MLP (m c_in -> 16 -> 16 -> p c_out), trunk MLP (d -> 16 -> 16 -> p c_out), bias
    mlp = lambda i, o: i * 16 + 16 + 16 * 16 + 16 + 16 * o + o  # noqa: E731
    assert count_parameters(m) == mlp(30 * 2, 24) + mlp(2, 24) + 3


def test_padded_points_do_not_change_the_output():
    m = tiny(n_points=30)
    x, a = cloud()
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[1, 18:] = False
    xp, ap = x.clone(), a.clone()
    xp[1, 18:], ap[1, 18:] = -5.0, 1e4  # garbage at the padding
    out = m(xp, ap, mask=mask)
    assert torch.isfinite(out).all()
    # sample 1 alone, cut to its 18 real points (a batch padded less), and sample 0 untouched
    alone = m(x[1:, :18], a[1:, :18], mask=torch.ones(1, 18, dtype=torch.bool))
    torch.testing.assert_close(out[1, :18], alone[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[0], m(x[:1], a[:1])[0], rtol=1e-12, atol=1e-12)
    # and the same for MIONet
    mi = tiny("mionet", n_points=30, input_groups=[1, 1])
    torch.testing.assert_close(mi(xp, ap, mask=mask)[1, :18], mi(x[1:, :18], a[1:, :18], mask=torch.ones(1, 18, dtype=torch.bool))[0])


def test_sensor_count_is_fixed():
    m = tiny(n_points=30)
    x, a = cloud(n=20)
    with pytest.raises(ValueError, match="built for 30 sensor points but got 20"):
        m(x, a)  # fewer points without a mask: another resolution, refused
    x, a = cloud(n=31)
    with pytest.raises(ValueError, match="built for 30"):
        m(x, a)
    with pytest.raises(ConfigError, match="n_points"):
        build_model({"arch": "deeponet"}, 1, 1, 2)  # n_points comes from the data
    with pytest.raises(ConfigError, match="no input channels"):
        build_model({"arch": "deeponet", "n_points": 5}, 0, 1, 2)


def test_training_sets_n_points_from_the_data():
    from opflow.train import build_for_data

    ds = SimpleNamespace(global_channels=0, global_names=(), inputs=torch.zeros(4, 25, 1), in_channels=1, out_channels=1, coord_dim=2)
    model, cfg, shape = build_for_data({"arch": "deeponet", **SMALL}, ds, "models.deeponet")
    assert cfg["n_points"] == 25 and model.n_points == 25 and shape == {"in_channels": 1, "out_channels": 1, "coord_dim": 2}
    with pytest.raises(ConfigError, match="n_points: 24 but the data have 25 input points"):
        build_for_data({"arch": "deeponet", "n_points": 24}, ds, "models.deeponet")


def test_mionet_splits_the_inputs_into_groups_combined_by_a_product():
    x, a = cloud(c=3)
    mi = tiny("mionet", c_in=3, c_out=2, input_groups=[1, 2])
    assert isinstance(mi, MIONet) and mi.groups == [1, 2] and len(mi.branches) == 2
    b1 = mi.branches[0](a[..., :1].flatten(1)).view(2, 2, 8)
    b2 = mi.branches[1](a[..., 1:].flatten(1)).view(2, 2, 8)
    t = mi.trunk(x).view(2, 30, 2, 8)
    torch.testing.assert_close(mi(x, a), (b1[:, None] * b2[:, None] * t).sum(-1) + mi.bias)
    # each input function moves the output only through its own branch (multilinear in the branches)
    assert tiny("mionet", c_in=3, input_groups=None).groups == [1, 1, 1]
    # one group of every channel is DeepONet (the same parameter names and values)
    one, deep = tiny("mionet", c_in=3, c_out=2, input_groups=[3]), tiny("deeponet", c_in=3, c_out=2)
    assert isinstance(deep, DeepONet) and one.state_dict().keys() == deep.state_dict().keys()
    torch.testing.assert_close(one(x, a), deep(x, a))
    with pytest.raises(ConfigError, match=r"input_groups \[1, 1\] add up to 2 channels but the data have 3"):
        tiny("mionet", c_in=3, input_groups=[1, 1])
    with pytest.raises(ConfigError, match="input_groups"):
        check_hparams("mionet", {"input_groups": [0, 1]})


@pytest.mark.slow
def test_overfits_four_samples_of_a_smooth_operator():
    """The shared task of the model tests: u = a <a> + <a^2> on 32 points of [0, 1], 4 samples
    (one input function, so MIONet would be this very network: see the test above)."""
    err = overfit_mean_field_operator(dict(arch="deeponet", n_points=32, branch_width=32, trunk_width=32, basis=16), steps=300)
    assert err < 1e-2, err  # measured 4.7e-3
