"""Specification of ONO, the Orthogonal Neural Operator (opflow.models.ono)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from opflow.data.errors import ConfigError
from opflow.models import build_model, count_parameters
from opflow.models.ono import ONO, CholeskyWhitening, jittered_cholesky

from model_helpers import overfit_mean_field_operator


def tiny(coord_dim: int = 2, out: int = 1, **kw) -> ONO:
    cfg = dict(arch="ono", width=16, n_layers=2, n_heads=2, ortho_dim=4)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_model(cfg, 1, out, coord_dim).double()


def grid(n: int, batch: int = 1, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Node grid on [0, 1]^2 (row-major) and smooth random inputs a(x, y)."""
    t = torch.linspace(0, 1, n)
    X, Y = torch.meshgrid(t, t, indexing="ij")
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(batch, 4, generator=g, dtype=torch.float64)
    a = (
        c[:, 0, None, None] * torch.sin(2 * math.pi * X)
        + c[:, 1, None, None] * torch.cos(math.pi * Y)
        + c[:, 2, None, None] * X * Y
        + c[:, 3, None, None]
    )
    coords = torch.stack([X, Y], -1).reshape(1, -1, 2).expand(batch, -1, -1).contiguous()
    return coords, a.reshape(batch, -1, 1)


def fit_buffers(model: ONO, coords: torch.Tensor, inputs: torch.Tensor) -> ONO:
    """One training-mode forward (fills the covariance buffers), then evaluation mode."""
    model.train()
    with torch.no_grad():
        model(coords, inputs)
    return model.eval()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


# ---------------------------------------------------------------------------------------------
# interface


def test_output_shapes_on_grids_point_clouds_and_queries():
    m = tiny(out=3)
    coords, a = grid(6, batch=2)
    assert m(coords, a).shape == (2, 36, 3)
    mask = torch.ones(2, 36, dtype=torch.bool)
    mask[1, 20:] = False
    assert m(coords, a, mask=mask).shape == (2, 36, 3)
    assert m(coords, a, query=torch.rand(2, 11, 2), mask=mask).shape == (2, 11, 3)
    m1 = tiny(coord_dim=1)
    assert m1(torch.rand(3, 17, 1), torch.randn(3, 17, 1)).shape == (3, 17, 1)


def test_darcy_configuration_has_about_a_million_parameters():
    """The paper: the 8-layer width-128 ONO has approximately 1M parameters."""
    m = build_model({"arch": "ono"}, 1, 1, 2)
    assert m.width == 128 and len(m.blocks) == 8
    assert 0.9e6 < count_parameters(m) < 1.4e6


def test_bad_configuration_and_bad_batches_are_named():
    with pytest.raises(ConfigError, match="nystrom"):
        build_model({"arch": "ono", "attention": "performer"}, 1, 1, 2)
    with pytest.raises(ConfigError, match="quadrature"):
        build_model({"arch": "ono", "quadrature": "trapezoid"}, 1, 1, 2)
    with pytest.raises(ConfigError, match="momentum"):
        build_model({"arch": "ono", "momentum": 1.0}, 1, 1, 2)
    with pytest.raises(ConfigError, match="ortho_dim"):
        build_model({"arch": "ono", "psi_dim": 8}, 1, 1, 2)
    m = tiny()
    with pytest.raises(ValueError, match="coords"):
        m(torch.rand(1, 5, 3), torch.rand(1, 5, 1))
    with pytest.raises(ValueError, match="inputs"):
        m(torch.rand(1, 5, 2), torch.rand(1, 4, 1))
    with pytest.raises(ValueError, match="mask"):
        m(torch.rand(1, 5, 2), torch.rand(1, 5, 1), mask=torch.zeros(1, 5, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------
# padding, permutations, batch independence


@pytest.mark.parametrize("attention", ["linear", "nystrom", "galerkin", "softmax"])
def test_padded_points_do_not_change_real_outputs(attention):
    m = tiny(attention=attention, num_landmarks=8)
    coords, a = grid(7, batch=2)  # 49 points
    fit_buffers(m, coords, a)
    n_real = 30
    mask = torch.ones(2, 49, dtype=torch.bool)
    mask[0, n_real:] = False
    c_pad, a_pad = coords.clone(), a.clone()
    c_pad[0, n_real:], a_pad[0, n_real:] = 7.0, -1e3  # garbage in the padding
    out = m(c_pad, a_pad, mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, :n_real], m(coords[:1, :n_real], a[:1, :n_real])[0], rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(out[1], m(coords[1:], a[1:])[0], rtol=1e-9, atol=1e-10)
    # training mode: the batch covariance and psi^T h also skip the padding
    m.train()
    torch.testing.assert_close(m(c_pad[:1], a_pad[:1], mask=mask[:1])[0, :n_real], m(coords[:1, :n_real], a[:1, :n_real])[0], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("attention", ["linear", "softmax", "galerkin"])
def test_permuting_the_points_permutes_the_outputs(attention):
    m = tiny(attention=attention)
    coords, a = grid(6, batch=2)
    fit_buffers(m, coords, a)
    perm = torch.randperm(36, generator=torch.Generator().manual_seed(1))
    for mode in ("eval", "train"):
        m.train(mode == "train")
        torch.testing.assert_close(m(coords[:, perm], a[:, perm]), m(coords, a)[:, perm], rtol=1e-9, atol=1e-11)


def test_evaluation_uses_the_buffer_not_the_batch():
    m = tiny()
    coords, a = grid(6, batch=3)
    fit_buffers(m, coords, a)
    before = [oa.ort.running_cov.clone() for oa in m.ortho]
    out = m(coords, a)
    torch.testing.assert_close(out[1:2], m(coords[1:2], a[1:2]), rtol=1e-12, atol=1e-12)  # independent of batch mates
    for oa, b in zip(m.ortho, before):
        assert torch.equal(oa.ort.running_cov, b)  # evaluation does not touch the buffer
    with torch.no_grad():
        m.ortho[0].ort.running_cov.mul_(4.0)
    assert rel(m(coords, a), out) > 1e-3
    m.train()  # training mode ignores the buffer: batch statistics
    out_train = m(coords, a)
    with torch.no_grad():
        for oa in m.ortho:
            oa.ort.running_cov.copy_(torch.eye(4) * 1e3)
    m.train()
    torch.testing.assert_close(m(coords, a), out_train, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# orthogonalisation


def _features(seed: int = 0, b: int = 3, n: int = 50, k: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(k, k, generator=g) + 2 * torch.eye(k)
    return torch.randn(b, n, k, generator=g) @ mix + 0.5


def test_batch_whitening_makes_the_eigenfunctions_orthonormal():
    """(1/(N M)) sum_i psi_i^T psi_i = I for the batch that was whitened (eq. 9), with and
    without padding (then each sample's mean over its real points)."""
    ort = CholeskyWhitening(5, ridge=0.0).train()
    g = _features()
    psi = g @ ort(g)
    torch.testing.assert_close(torch.einsum("bmk,bml->kl", psi, psi) / (3 * 50), torch.eye(5), rtol=0, atol=1e-10)
    mask = torch.ones(3, 50, dtype=torch.bool)
    mask[0, 35:] = False
    mask[2, 10:] = False
    g = torch.where(mask[..., None], g, 1e3)
    psi = g @ ort(g, mask)
    n = mask.sum(1)
    gram = sum(psi[b, : n[b]].T @ psi[b, : n[b]] / n[b] for b in range(3)) / 3
    torch.testing.assert_close(gram, torch.eye(5), rtol=0, atol=1e-10)


def test_ono_psi_is_orthonormal_on_the_training_batch():
    m = tiny(ortho_ridge=0.0).train()
    coords, a = grid(8, batch=2)
    g, _ = m.encoder(torch.cat([coords, a], -1)).chunk(2, -1)
    g = m.blocks[0](g)
    psi, _ = m.ortho[0].eigenfunctions(g)
    torch.testing.assert_close(torch.einsum("bmk,bml->kl", psi, psi) / (2 * 64), torch.eye(4), rtol=0, atol=1e-4)


def test_ridge_regularised_whitening_identity():
    """With ridge delta: W^T (C + delta I) W = I, i.e. the batch Gram is I - delta W^T W."""
    ort = CholeskyWhitening(5, ridge=1e-2).train()
    g = _features(1)
    w = ort(g)
    c = CholeskyWhitening.covariance(g)
    delta = 1e-2 * torch.trace(c) / 5
    torch.testing.assert_close(w.T @ c @ w + delta * w.T @ w, torch.eye(5), rtol=0, atol=1e-10)
    assert torch.linalg.eigvalsh(w.T @ c @ w).max() < 1


def test_ema_buffer_follows_the_documented_rule():
    """running_cov <- momentum * running_cov + (1 - momentum) * C_batch; the first batch sets it."""
    ort = CholeskyWhitening(5, momentum=0.7, ridge=0.0)
    assert torch.equal(ort.running_cov, torch.eye(5, dtype=torch.float64))
    g1, g2 = _features(1), _features(2)
    c1, c2 = CholeskyWhitening.covariance(g1), CholeskyWhitening.covariance(g2)
    ort.train()
    ort(g1)
    torch.testing.assert_close(ort.running_cov, c1, rtol=1e-14, atol=0)
    w2 = ort(g2)
    torch.testing.assert_close(ort.running_cov, 0.7 * c1 + 0.3 * c2, rtol=1e-14, atol=0)
    assert int(ort.num_batches_tracked) == 2
    torch.testing.assert_close(w2.T @ c2 @ w2, torch.eye(5), rtol=0, atol=1e-10)  # training: batch stats
    ort.eval()
    w = ort(_features(3))
    torch.testing.assert_close(w.T @ ort.running_cov @ w, torch.eye(5), rtol=0, atol=1e-10)  # eval: buffer
    assert int(ort.num_batches_tracked) == 2


def test_covariance_buffer_stays_float64_and_round_trips():
    m = tiny()
    coords, a = grid(5, batch=2)
    fit_buffers(m, coords, a)
    out = m(coords, a)
    m.float()
    assert m.ortho[0].ort.running_cov.dtype == torch.float64 and m.ortho[0].w_q.weight.dtype == torch.float32
    m.double()
    fresh = tiny()
    fresh.load_state_dict(m.state_dict())
    fresh.eval()
    torch.testing.assert_close(fresh(coords, a), out, rtol=1e-6, atol=1e-7)


def test_jittered_cholesky_handles_rank_deficient_features():
    g = _features(4, k=4)
    g = torch.cat([g, g[..., :1]], -1)  # 5 features of rank 4: C is singular
    ort = CholeskyWhitening(5, ridge=0.0).train()
    with pytest.warns(RuntimeWarning, match="jitter"):
        w = ort(g)
    psi = g @ w
    assert torch.isfinite(psi).all()
    gram = torch.einsum("bmk,bml->kl", psi, psi) / (3 * 50)
    assert torch.linalg.eigvalsh(gram).max() < 1 + 1e-6  # jitter only shrinks
    c = torch.zeros(3, 3)
    with pytest.warns(RuntimeWarning):
        L = jittered_cholesky(c)
    torch.testing.assert_close(L @ L.T, 1e-6 * torch.eye(3))
    with pytest.raises(FloatingPointError, match="NaN"):
        jittered_cholesky(torch.full((3, 3), float("nan")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a positive definite matrix needs no jitter
        jittered_cholesky(torch.eye(3))


def test_gradients_are_finite_and_reach_every_parameter():
    m = tiny().train()
    coords, a = grid(6, batch=2)
    mask = torch.ones(2, 36, dtype=torch.bool)
    mask[1, 30:] = False
    loss = m(coords, a, mask=mask).square().sum()
    loss.backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max() > 0, name


# ---------------------------------------------------------------------------------------------
# queries and resolution


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_cross_form_with_query_equal_to_coords_is_the_self_form(mode):
    m = tiny()
    coords, a = grid(6, batch=2)
    fit_buffers(m, coords, a)
    m.train(mode == "train")
    self_form = m(coords, a)
    torch.testing.assert_close(m.forward_cross(coords, a, coords.clone()), self_form, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(m(coords, a, query=coords.clone()), self_form, rtol=0, atol=0)


def test_query_points_off_the_input_grid():
    m = tiny()
    coords, a = grid(9, batch=2)
    fit_buffers(m, coords, a)
    fine, _ = grid(17, batch=2)
    out = m(coords, a, query=fine)
    assert out.shape == (2, 289, 1) and torch.isfinite(out).all()
    # at the fine points that are also coarse points, the query stream equals the self form
    on_coarse = fine.reshape(2, 17, 17, 2)[:, ::2, ::2].reshape(2, 81, 2)
    torch.testing.assert_close(m(coords, a, query=on_coarse), m(coords, a), rtol=1e-10, atol=1e-12)
    # padded input points are ignored by the query stream too
    mask = torch.ones(2, 81, dtype=torch.bool)
    mask[0, 60:] = False
    pad_c, pad_a = coords.clone(), a.clone()
    pad_c[0, 60:], pad_a[0, 60:] = 0.5, 1e3
    torch.testing.assert_close(m(pad_c, pad_a, query=fine, mask=mask)[0], m(coords[:1, :60], a[:1, :60], query=fine[:1])[0], rtol=1e-9, atol=1e-10)


def test_mean_quadrature_makes_the_kernel_integral_resolution_independent():
    """q(psi^T h) with quadrature="mean" approximates int psi h dx and barely moves when the grid is
    refined; with "sum" (the paper's eq. 5) it grows with the number of points M."""
    ratios = {}
    for quad in ("mean", "sum"):
        m = tiny(quadrature=quad)
        coords, a = grid(17)
        fit_buffers(m, coords, a)
        coef = {}
        for n in (17, 33):
            coords, a = grid(n)
            g, h = m.encoder(torch.cat([coords, a], -1)).chunk(2, -1)
            g = m.blocks[0](g)
            psi, _ = m.ortho[0].eigenfunctions(g)
            coef[n] = m.ortho[0].coefficients(psi, h)
        ratios[quad] = float(coef[33].detach().norm() / coef[17].detach().norm())
    assert abs(ratios["mean"] - 1) < 0.05
    assert abs(ratios["sum"] - 33**2 / 17**2) < 0.05 * 33**2 / 17**2


@pytest.mark.parametrize("attention", ["linear", "nystrom"])
def test_outputs_converge_under_grid_refinement(attention):
    """Zero-shot super-resolution: the same (untrained, evaluation-mode) ONO applied to one input
    function sampled on nested grids 9, 17, ..., 129: its outputs at the coarse points converge at
    the first order of the equal-weight node quadrature (observed order fitted over 3 refinements)."""
    m = tiny(width=32, n_heads=4, ortho_dim=8, attention=attention, num_landmarks=16)
    fit_buffers(m, *grid(33))
    ns = (9, 17, 33, 65, 129)
    with torch.no_grad():
        outs = [m(*grid(n)).reshape(n, n)[:: (n - 1) // 8, :: (n - 1) // 8] for n in ns]
    diffs = torch.tensor([rel(outs[i], outs[i + 1]) for i in range(len(ns) - 1)])
    h = torch.tensor([1.0 / (n - 1) for n in ns[1:-1]])
    order = float(torch.linalg.lstsq(torch.stack([torch.log(h), torch.ones(3)], 1), torch.log(diffs[1:])[:, None]).solution[0, 0])
    assert 0.7 < order < 1.5, (diffs, order)
    assert (diffs[1:] < diffs[:-1]).all()


# ---------------------------------------------------------------------------------------------
# learning


@pytest.mark.slow
def test_overfits_four_samples_of_a_smooth_operator():
    """u = a <a> + <a^2> (<.> = mean over the domain) for 4 smooth inputs a on 32 points of [0, 1]:
    ONO (width 32, 2 stages, k = 8) reaches relative L2 < 1e-3, measured in evaluation mode."""
    err = overfit_mean_field_operator(dict(arch="ono", width=32, n_layers=2, n_heads=4, ortho_dim=8))
    assert err < 1e-3, err


def test_the_jitter_is_chosen_on_the_device_and_the_gradient_flows_only_through_the_chosen_factor():
    """jittered_cholesky_ex makes the choice of jittered_cholesky without reading a value back: the
    first candidate that factorises (c itself, then 10^j times eps tr(C)/k), its index, and the
    flag of a non-finite c; the gradient reaches c through the chosen factor alone (finite for a
    singular c, whose unjittered candidate has no valid factor)."""
    from opflow.models.ono import jittered_cholesky_ex

    a = torch.randn(5, 3, dtype=torch.float64)
    pd = a.T @ a + torch.eye(3, dtype=torch.float64)
    L, tries, bad = jittered_cholesky_ex(pd)
    assert int(tries) == 0 and not bool(bad) and torch.equal(L, torch.linalg.cholesky(pd))
    v = torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64)
    singular = (v[:, None] * v[None, :]).requires_grad_()  # rank 1
    L, tries, bad = jittered_cholesky_ex(singular, eps=1e-6)
    k = 3
    want_jitter = 1e-6 * float(singular.detach().trace()) / k * 10.0 ** (int(tries) - 1)
    assert 1 <= int(tries) <= 8 and not bool(bad)
    assert torch.allclose(L @ L.T, singular.detach() + want_jitter * torch.eye(3, dtype=torch.float64), atol=1e-12)
    L.sum().backward()
    assert torch.isfinite(singular.grad).all()
    _, tries, bad = jittered_cholesky_ex(torch.full((3, 3), float("nan"), dtype=torch.float64))
    assert bool(bad) and int(tries) == 9  # every candidate failed
    _, tries, _ = jittered_cholesky_ex(-100 * torch.eye(3, dtype=torch.float64))  # jitter up to 10 (scale 1) cannot help
    assert int(tries) == 9


def test_outside_the_checks_a_failed_whitening_is_counted_not_raised():
    """In a training step (opflow.hostsync.deferred_checks) the whitening counts its faults on the
    device; eagerly it raises at once, as before."""
    from opflow.hostsync import deferred_checks, take_faults

    ort = CholeskyWhitening(3, ridge=0.0)
    ort.eval()
    ort.running_cov.fill_(float("nan"))
    g = torch.randn(2, 4, 3, dtype=torch.float64)
    with pytest.raises(FloatingPointError, match="NaN/inf"):
        ort(g)
    with deferred_checks():
        ort(g)
        ort(g)
    faults = take_faults(ort)
    assert [(msg.split(":")[1].strip()[:20], n) for _, msg, n in faults] == [("the feature covarian", 2)]
    assert take_faults(ort) == []  # reset by the read
    assert "fault_counts" not in ort.state_dict()  # checkpoints unchanged
