"""Relative L2 / H1 errors on hand-computed cases, masks, the loss definition and summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from opflow.data.errors import ConfigError
from opflow.metrics import (
    central_differences,
    gradient_loss,
    mse_loss,
    rel_l2_loss,
    relative_h1,
    relative_l2,
    relative_l2_joint,
    summary,
    training_loss,
)


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def test_relative_l2_by_hand() -> None:
    true = t([[[1.0], [2.0], [3.0]]])  # (B=1, N=3, C=1)
    pred = t([[[1.0], [2.0], [2.0]]])
    assert relative_l2(pred, true).item() == pytest.approx(1 / math.sqrt(14))
    assert relative_l2(true, true).item() == 0.0
    assert relative_l2(2 * true, true).item() == pytest.approx(1.0)


def test_per_channel_joint_and_the_loss_mean_over_channels() -> None:
    # channel 0 has magnitude 1, channel 1 magnitude 100; both with 10 % error in one sample
    true = t([[[1.0, 100.0], [0.0, 0.0]], [[3.0, 4.0], [0.0, 0.0]]])
    pred = true.clone()
    pred[0, 0, 0] = 1.1
    pred[0, 0, 1] = 90.0
    per = relative_l2(pred, true)
    np.testing.assert_allclose(per.numpy(), [[0.1, 0.1], [0.0, 0.0]], rtol=1e-12)
    joint = relative_l2_joint(pred, true)
    assert joint[0].item() == pytest.approx(math.sqrt(0.01 + 100.0) / math.sqrt(1 + 1e4))
    # loss = mean over batch of the per-sample mean over channels
    assert rel_l2_loss(pred, true).item() == pytest.approx((0.1 + 0.0) / 2)
    assert training_loss("rel_l2", pred, true).item() == pytest.approx(0.05)


def test_mask_ignores_padding_whatever_it_holds() -> None:
    rng = np.random.default_rng(0)
    a_true, a_pred = rng.standard_normal((5, 1)), rng.standard_normal((5, 1))
    b_true, b_pred = rng.standard_normal((3, 1)), rng.standard_normal((3, 1))
    true = torch.zeros(2, 5, 1, dtype=torch.float64)
    pred = torch.full((2, 5, 1), 1e6, dtype=torch.float64)  # garbage in the padding
    true[0], pred[0] = t(a_true), t(a_pred)
    true[1, :3], pred[1, :3] = t(b_true), t(b_pred)
    true[1, 3:] = 123.0
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    got = relative_l2(pred, true, mask)[:, 0].numpy()
    want = [np.linalg.norm(a_pred - a_true) / np.linalg.norm(a_true), np.linalg.norm(b_pred - b_true) / np.linalg.norm(b_true)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # mse over real points only: 8 points
    want_mse = (np.sum((a_pred - a_true) ** 2) + np.sum((b_pred - b_true) ** 2)) / 8
    assert mse_loss(pred, true, mask).item() == pytest.approx(want_mse)


def test_zero_truth_does_not_divide_by_zero() -> None:
    z = torch.zeros(1, 4, 1)
    assert relative_l2(z, z).item() == 0.0
    assert relative_l2(z + 1, z).item() > 1e10


def _grid(s: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.linspace(0, 1, s, dtype=torch.float64)
    X, Y = torch.meshgrid(x, x, indexing="ij")
    return X, Y, torch.stack([X.ravel(), Y.ravel()], -1)


def test_relative_h1_by_hand_on_a_linear_field() -> None:
    # u = x: grad u = (1, 0) exactly (also one-sided at the edges); a constant shift c has no gradient
    X, Y, coords = _grid(5)
    u = X.reshape(1, -1, 1)
    c = 0.3
    got = relative_h1(u + c, u, coords, (5, 5)).item()
    want = math.sqrt(25 * c**2) / math.sqrt(float((X**2).sum()) + 25 * 1.0)
    assert got == pytest.approx(want, rel=1e-12)
    assert relative_h1(u, u, coords, (5, 5)).item() == 0.0


def test_relative_h1_converges_at_second_order_to_the_continuous_value() -> None:
    """||w||_H1 / ||u||_H1 for u = sin^2(pi x) sin^2(pi y), w = 0.1 sin^2(2 pi x) sin^2(2 pi y) on (0,1)^2.

    Exact: ||u||^2 = 9/64 + 3 pi^2 / 8, ||w||^2 = 0.01 (9/64 + 3 pi^2 / 2). The integrands vanish on
    the boundary with their derivatives, so the node sums are trapezoid sums and the central
    differences set the order: 2.
    """
    exact = math.sqrt(0.01 * (9 / 64 + 1.5 * math.pi**2) / (9 / 64 + 3 * math.pi**2 / 8))
    sizes = [17, 33, 65, 129]
    errs = []
    for s in sizes:
        X, Y, coords = _grid(s)
        u = (torch.sin(math.pi * X) * torch.sin(math.pi * Y)) ** 2
        w = 0.1 * (torch.sin(2 * math.pi * X) * torch.sin(2 * math.pi * Y)) ** 2
        errs.append(abs(relative_h1((u + w).reshape(1, -1, 1), u.reshape(1, -1, 1), coords, (s, s)).item() - exact))
    slope = np.polyfit(np.log(1.0 / (np.array(sizes) - 1)), np.log(errs), 1)[0]
    assert 1.8 < slope < 2.2, (slope, errs)


def test_relative_h1_uses_each_axis_own_spacing() -> None:
    # u = y on x in [0, 1] (5 nodes, h = 0.25), y in [0, 2] (3 nodes, h = 1): grad u = (0, 1) only if
    # the y differences are divided by the y spacing
    x, y = torch.linspace(0, 1, 5, dtype=torch.float64), torch.linspace(0, 2, 3, dtype=torch.float64)
    X, Y = torch.meshgrid(x, y, indexing="ij")
    coords = torch.stack([X.ravel(), Y.ravel()], -1)
    u = Y.reshape(1, -1, 1)
    c = 0.7
    want = math.sqrt(15 * c**2) / math.sqrt(float((Y**2).sum()) + 15 * 1.0)
    assert relative_h1(u + c, u, coords, (5, 3)).item() == pytest.approx(want, rel=1e-12)


def test_loss_dispatch_errors() -> None:
    x = torch.zeros(1, 4, 1)
    with pytest.raises(ValueError, match="rel_h1 needs grid data"):
        training_loss("rel_h1", x, x)
    with pytest.raises(ValueError, match="unknown loss 'l1'"):
        training_loss("l1", x, x)
    with pytest.raises(ValueError, match="prediction shape"):
        relative_l2(torch.zeros(1, 3, 1), x)


def test_summary() -> None:
    s = summary([1.0, 2.0, 3.0, 10.0])
    assert s == {"mean": 4.0, "median": 2.5, "std": pytest.approx(np.std([1, 2, 3, 10])), "max": 10.0, "n": 4}


# ---------------------------------------------------------------------------------------------
# the derivative regulariser (grad_weight, grad_form)


def _release_grad_terms(pred: torch.Tensor, true: torch.Tensor, s: int) -> torch.Tensor:
    """The ONO Darcy script's deriv_loss per sample, restated with loops: the prediction's boundary
    ring zeroed, zeros outside the grid, (f(i+1) - f(i-1)) / 2h per axis, relative L2 of each axis."""
    out = []
    for b in range(pred.shape[0]):
        p = pred[b, :, 0].reshape(s, s).clone()
        p[0, :] = p[-1, :] = p[:, 0] = p[:, -1] = 0
        u = true[b, :, 0].reshape(s, s)
        total = 0.0
        for axis in (0, 1):
            def d(f: torch.Tensor) -> torch.Tensor:
                g = torch.zeros(s + 2, s + 2, dtype=f.dtype)
                g[1:-1, 1:-1] = f
                return (g[2:, 1:-1] - g[:-2, 1:-1]) * s / 2 if axis == 0 else (g[1:-1, 2:] - g[1:-1, :-2]) * s / 2
            total += float((d(p) - d(u)).norm() / d(u).norm())
        out.append(total)
    return torch.tensor(out, dtype=torch.float64)


def test_central_differences_by_hand() -> None:
    v = t([1.0, 4.0, 9.0, 16.0]).reshape(1, 4, 1)  # one axis of 4 nodes, zeros outside
    (d,) = central_differences(v, (4,))
    assert d.flatten().tolist() == [2.0, 4.0, 6.0, -4.5]


def test_gradient_loss_is_the_release_darcy_regulariser() -> None:
    g = torch.Generator().manual_seed(0)
    s = 9
    true, pred = torch.randn(3, s * s, 1, generator=g, dtype=torch.float64), torch.randn(3, s * s, 1, generator=g, dtype=torch.float64)
    want = _release_grad_terms(pred, true, s).mean()
    assert gradient_loss("central", pred, true, (s, s)).item() == pytest.approx(float(want), rel=1e-12)
    total = training_loss("rel_l2", pred, true, grid_shape=(s, s), grad_weight=0.1)
    assert total.item() == pytest.approx(float(rel_l2_loss(pred, true) + 0.1 * want), rel=1e-12)


def test_gradient_loss_vanishes_for_the_truth_with_zero_boundary_and_sees_the_ring() -> None:
    s = 7
    x = torch.linspace(0, 1, s, dtype=torch.float64)
    b = x * (1 - x)
    u = (b[:, None] * b[None, :]).reshape(1, -1, 1)  # exactly zero on the boundary
    assert gradient_loss("central", u, u, (s, s)).item() == 0.0
    assert gradient_loss("central", u + 1.0, u, (s, s)).item() > 0.1  # the ring is zeroed: a shift inside still shows
    ring_only = u.clone().reshape(s, s)
    ring_only[0] = 5.0
    assert gradient_loss("central", ring_only.reshape(1, -1, 1), u, (s, s)).item() == 0.0  # the prediction's ring is ignored


def test_zero_grad_weight_is_bit_identical_and_errors_are_named() -> None:
    g = torch.Generator().manual_seed(1)
    p, u = torch.randn(2, 16, 1, generator=g), torch.randn(2, 16, 1, generator=g)
    assert torch.equal(training_loss("rel_l2", p, u, grid_shape=(4, 4), grad_weight=0.0), rel_l2_loss(p, u))
    with pytest.raises(ValueError, match="needs grid data"):
        training_loss("rel_l2", p, u, grad_weight=0.1)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[1, -1] = False
    with pytest.raises(ValueError, match="complete grids"):
        training_loss("rel_l2", p, u, mask=mask, grid_shape=(4, 4), grad_weight=0.1)
    with pytest.raises(ValueError, match="unknown grad_form"):
        gradient_loss("h2", p, u, (4, 4))


def test_grad_settings_in_the_config() -> None:
    from opflow.config import TrainConfig, run_identity

    assert TrainConfig.from_dict({}).grad_weight == 0.0
    with pytest.raises(ConfigError, match="needs loss_space: physical"):
        TrainConfig.from_dict({"grad_weight": 0.1, "loss_space": "normalized"})
    with pytest.raises(ConfigError, match="grad_form"):
        TrainConfig.from_dict({"grad_form": "spectral"})
    base = {"dataset": "d", "model": "m", "model_config": {}, "task": {}, "data": {}}
    off = run_identity({**base, "training": TrainConfig.from_dict({}).to_dict()})
    assert "grad_weight" not in off["training"] and "grad_form" not in off["training"]  # hashes of earlier runs kept
    on = run_identity({**base, "training": TrainConfig.from_dict({"grad_weight": 0.1}).to_dict()})
    assert on["training"]["grad_weight"] == 0.1 and on["training"]["grad_form"] == "central"
