"""Normalisers: exact round trips, statistics over the right axes, masks, regridding, saving."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from opflow.data.normalize import Identity, Pointwise, UnitGaussian, make_normalizer, normalizer_from_state


def data(s: int = 20, n: int = 30, c: int = 2, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(s, n, c, generator=g, dtype=torch.float64)
    return (x * torch.tensor([3.0, 0.01], dtype=torch.float64)[:c] + torch.tensor([5.0, -2.0], dtype=torch.float64)[:c]).float()


@pytest.mark.parametrize("kind", ["unit_gaussian", "pointwise", "none"])
def test_round_trip_is_the_identity(kind: str) -> None:
    x = data()
    norm = make_normalizer(kind).fit(x)
    y = data(seed=1)
    torch.testing.assert_close(norm.decode(norm.encode(y)), y, rtol=1e-5, atol=1e-6)


def test_unit_gaussian_statistics_per_channel_over_samples_and_points() -> None:
    x = data()
    z = UnitGaussian().fit(x).encode(x).double()
    np.testing.assert_allclose(z.mean(dim=(0, 1)).numpy(), [0.0, 0.0], atol=1e-5)
    np.testing.assert_allclose(z.std(dim=(0, 1), correction=0).numpy(), [1.0, 1.0], rtol=1e-4)  # eps guard: 1e-5
    # one scalar per channel: the same map at every point
    n = UnitGaussian().fit(x)
    assert n.mean.shape == (2,) and n.scale.shape == (2,)


def test_unit_gaussian_is_mask_aware() -> None:
    x = data(s=4, n=10)
    mask = torch.ones(4, 10, dtype=torch.bool)
    mask[1, 6:] = False
    mask[3, 2:] = False
    padded = x.clone()
    padded[~mask] = 1e6  # garbage in the padding
    fitted = UnitGaussian().fit(padded, mask)
    real = x[mask]  # (n_real, C)
    np.testing.assert_allclose(fitted.mean.numpy(), real.double().mean(0).numpy(), rtol=1e-6)
    np.testing.assert_allclose(fitted.scale.numpy(), real.double().std(0, correction=0).numpy() * (1 + 1e-5), rtol=1e-6)


def test_pointwise_statistics_per_point_and_a_constant_boundary() -> None:
    x = data(s=50, n=6, c=1)
    x[:, 0, 0] = 0.0  # a Dirichlet point: zero in every sample
    n = Pointwise().fit(x)
    assert n.mean.shape == (6, 1)
    np.testing.assert_allclose(n.mean[1:, 0].numpy(), x[:, 1:, 0].double().mean(0).numpy(), rtol=1e-5)
    z = n.encode(x)
    assert torch.isfinite(z).all() and torch.all(z[:, 0] == 0)
    np.testing.assert_allclose(z[:, 1:, 0].double().std(0, correction=0).numpy(), 1.0, rtol=1e-4)
    with pytest.raises(ValueError, match="needs every sample on the same points.*use unit_gaussian"):
        Pointwise().fit(x, torch.tensor([[True] * 6] * 49 + [[True] * 5 + [False]]))


def test_constant_channel_gets_scale_one() -> None:
    x = torch.full((5, 4, 1), 2.5)
    n = UnitGaussian().fit(x)
    assert n.scale.item() == 1.0
    assert torch.all(n.encode(x) == 0)


def test_pointwise_regrids_to_other_resolutions_of_the_same_box() -> None:
    """Mean/scale fields bilinear in (x, y) are carried exactly from a 5 x 5 to a 9 x 9 grid."""

    def field(s: int) -> torch.Tensor:
        x = torch.linspace(0, 1, s, dtype=torch.float64)
        X, Y = torch.meshgrid(x, x, indexing="ij")
        return X.ravel(), Y.ravel()

    X5, Y5 = field(5)
    k = torch.arange(40, dtype=torch.float64).reshape(40, 1) % 2 * 2 - 1  # +-1 in alternate samples
    train = ((1 + 2 * X5 + 3 * Y5) + (0.5 + X5 * Y5) * k).unsqueeze(-1)  # mean 1+2x+3y, std 0.5+xy
    n = Pointwise().fit(train.float(), grid_shape=(5, 5))
    X9, Y9 = field(9)
    v = torch.ones(1, 81, 1)
    enc = n.encode(v, grid_shape=(9, 9)).double()[0, :, 0]
    std = 0.5 + X9 * Y9
    want = (1 - (1 + 2 * X9 + 3 * Y9)) / (std + 1e-5 * 1.5)
    np.testing.assert_allclose(enc.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="cannot be applied to 81 points off a grid"):
        n.encode(v)


def test_state_dict_survives_torch_save(tmp_path) -> None:
    x = data()
    for norm in (UnitGaussian().fit(x), Pointwise().fit(x, grid_shape=(5, 6)), Identity()):
        buf = io.BytesIO()
        torch.save(norm.state_dict(), buf)
        buf.seek(0)
        back = normalizer_from_state(torch.load(buf, weights_only=False))
        assert type(back) is type(norm)
        torch.testing.assert_close(back.encode(x), norm.encode(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="unknown normaliser 'minmax'"):
        make_normalizer("minmax")
