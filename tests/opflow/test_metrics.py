"""Relative L2 / H1 errors on hand-computed cases, masks, the loss definition and summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from opflow.metrics import (
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
