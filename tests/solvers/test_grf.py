"""Specification of solvers.grf: the Gaussian random field samplers.

Exact tests compare with the KL sum written out by hand; statistical tests draw many samples and
accept a per-mode (or per-point) variance only inside a two-sided chi-square interval at total
false-alarm probability 1e-4 (Bonferroni over all modes/points), so they fail if any one mode's
amplitude is off by more than sampling error allows.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft as sfft
from scipy import stats

from opflow.data.errors import ConfigError
from opflow.data.provenance import sample_rng
from solvers.grf import (
    neumann_grf,
    neumann_mode_rank,
    neumann_mode_std,
    neumann_pointwise_variance,
    periodic_grf,
    periodic_mode_rank,
    periodic_mode_variance,
    periodic_pointwise_variance,
)

P_TOTAL = 1e-4  # family-wise false-alarm probability of each statistical test


def rngs(seed: int, n: int, start: int = 0) -> list[np.random.Generator]:
    return [sample_rng(seed, i) for i in range(start, start + n)]


def chi2_ok(ratio: np.ndarray, dof: int | np.ndarray, tests: int) -> np.ndarray:
    """``ratio = dof * S / sigma^2`` must lie in the central 1 - P_TOTAL/tests interval of chi2(dof)."""
    q = P_TOTAL / tests / 2
    return (ratio >= stats.chi2.ppf(q, dof)) & (ratio <= stats.chi2.ppf(1 - q, dof))


def noise(rng: np.random.Generator, s: int, draw: str) -> np.ndarray:
    """The Neumann sampler's white noise xi[k1, k2] of one sample, written out for each draw order."""
    return rng.standard_normal((s, s)) if draw == "grid" else rng.standard_normal(s * s)[neumann_mode_rank(s)]


def cos_nodes(s: int) -> np.ndarray:
    """phi_k(x_n), L2-normalised Neumann cosines at the nodes n / (s-1)."""
    x, k = np.arange(s) / (s - 1), np.arange(s)
    return np.where(k == 0, 1.0, np.sqrt(2.0)) * np.cos(np.pi * np.outer(x, k))


# ----------------------------------------------------------------------------- Neumann, exact


@pytest.mark.parametrize("draw", ["modes", "grid"])
@pytest.mark.parametrize("s", [2, 5, 8])
def test_kl_is_the_kl_sum_at_the_nodes(s: int, draw: str) -> None:
    sigma, tau, alpha = 1.7, 3.0, 2.0
    g = neumann_grf(rngs(3, 4), s, alpha=alpha, tau=tau, sigma=sigma, convention="kl", draw=draw)
    k2 = np.arange(s) ** 2
    lam = sigma**2 * (np.pi**2 * (k2[:, None] + k2[None, :]) + tau**2) ** (-alpha)
    lam[0, 0] = 0
    C = cos_nodes(s)
    for b, rng in enumerate(rngs(3, 4)):
        xi = noise(rng, s, draw)
        expect = C @ (np.sqrt(lam) * xi) @ C.T
        np.testing.assert_allclose(g[b], expect, rtol=0, atol=1e-13)


@pytest.mark.parametrize("draw", ["modes", "grid"])
def test_fno_is_protocol_formula_and_kl_at_cell_centres(draw: str) -> None:
    s, tau, alpha = 6, 3.0, 2.0
    g = neumann_grf(rngs(4, 2), s, alpha=alpha, tau=tau, convention="fno", draw=draw)
    k2 = np.arange(s) ** 2
    coef = s * tau ** (alpha - 1) * (np.pi**2 * (k2[:, None] + k2[None, :]) + tau**2) ** (-alpha / 2)
    coef[0, 0] = 0
    x = (np.arange(s) + 0.5) / s
    k = np.arange(s)
    C = np.where(k == 0, 1.0, np.sqrt(2.0)) * np.cos(np.pi * np.outer(x, k))  # phi_k at cell centres
    for b, rng in enumerate(rngs(4, 2)):
        xi = noise(rng, s, draw)
        # PROTOCOLS.md: orthonormal inverse 2D DCT-II of s tau^(alpha-1) (...)^(-alpha/2) xi
        np.testing.assert_allclose(g[b], sfft.idctn(coef * xi, type=2, norm="ortho"), atol=1e-13)
        # ... which is the KL sum with sigma = tau^(alpha-1) at the cell centres
        np.testing.assert_allclose(g[b], C @ (coef / s * xi) @ C.T, atol=1e-13)


# ----------------------------------------------------------------------------- Neumann, statistics


@pytest.mark.parametrize("convention", ["kl", "fno"])
def test_neumann_mode_variances_match_the_spectrum(convention: str) -> None:
    s, n = 8, 2000
    kw = dict(alpha=2.0, tau=3.0, sigma=2.0, convention=convention)
    g = neumann_grf(rngs(11, n), s, **kw)
    if convention == "fno":
        coef = sfft.dctn(g, type=2, norm="ortho", axes=(1, 2))
    else:
        Ci = np.linalg.inv(cos_nodes(s))
        coef = np.einsum("kn,bnm,lm->bkl", Ci, g, Ci)
    m = neumann_mode_std(s, **kw)
    assert np.all(np.abs(coef[:, 0, 0]) < 1e-10), "constant mode must be zero"
    live = m > 0
    ratio = n * np.mean(coef**2, axis=0)[live] / m[live] ** 2
    ok = chi2_ok(ratio, n, live.sum())
    assert ok.all(), f"mode variance off at modes {np.argwhere(live)[~ok].tolist()}: ratio/n {ratio[~ok] / n}"
    # pooled over the (independent) modes: a common amplitude error of ~1 % would fail here
    assert chi2_ok(ratio.sum(), n * live.sum(), 1), f"pooled variance ratio {ratio.sum() / (n * live.sum()):.4f}"


def test_kl_pointwise_variance_and_zero_mean() -> None:
    s, n = 9, 2000
    kw = dict(alpha=2.0, tau=6.0, sigma=12.0, convention="kl")
    g = neumann_grf(rngs(12, n), s, **kw)
    var = neumann_pointwise_variance(s, **kw)
    # sum_k lambda_k phi_k(x)^2 written out
    k2 = np.arange(s) ** 2
    lam = 144.0 * (np.pi**2 * (k2[:, None] + k2[None, :]) + 36.0) ** (-2.0)
    lam[0, 0] = 0
    C2 = cos_nodes(s) ** 2
    np.testing.assert_allclose(var, C2 @ lam @ C2.T, rtol=1e-12)
    ratio = n * np.mean(g**2, axis=0) / var
    assert chi2_ok(ratio, n, s * s).all(), f"pointwise variance ratio range {ratio.min() / n:.3f}..{ratio.max() / n:.3f}"
    z = stats.norm.ppf(1 - P_TOTAL / (2 * s * s))
    assert np.all(np.abs(g.mean(axis=0)) <= z * np.sqrt(var / n)), "sample mean is not ~0"


@pytest.mark.parametrize("convention", ["kl", "fno"])
@pytest.mark.parametrize("draw", ["modes", "grid"])
def test_neumann_same_fields_in_one_batch_or_eight(convention: str, draw: str) -> None:
    kw = dict(alpha=2.0, tau=3.0, convention=convention, draw=draw)
    one = neumann_grf(rngs(5, 8), 12, **kw)
    eight = np.concatenate([neumann_grf(rngs(5, 1, start=i), 12, **kw) for i in range(8)])
    assert np.array_equal(one, eight)
    assert not np.array_equal(one[0], one[1])
    other_seed = neumann_grf(rngs(6, 1), 12, **kw)
    assert not np.array_equal(one[0], other_seed[0])


# ----------------------------------------------------------------------------- periodic


def self_conjugate(shape: tuple[int, ...]) -> np.ndarray:
    """Modes k with -k == k (mod n): their DFT coefficient of a real field is real."""
    idx = np.indices(shape)
    mask = np.ones(shape, dtype=bool)
    for ax, n in enumerate(shape):
        mask &= (-idx[ax]) % n == idx[ax]
    return mask


def first_of_pair(shape: tuple[int, ...]) -> np.ndarray:
    """One mode of each conjugate pair {k, -k} (the one with the smaller flat index)."""
    idx = np.indices(shape)
    flat = np.ravel_multi_index(tuple(idx), shape)
    neg = np.ravel_multi_index(tuple((-idx[ax]) % n for ax, n in enumerate(shape)), shape)
    return flat <= neg


@pytest.mark.parametrize(("dim", "npts"), [(2, 12), (1, 32), (2, 9)])
@pytest.mark.parametrize("convention", ["kl", "fno2020"])
@pytest.mark.parametrize("draw", ["modes", "grid"])
def test_periodic_mode_variances_match_the_spectrum(dim: int, npts: int, convention: str, draw: str) -> None:
    n = 2000
    kw = dict(dim=dim, alpha=2.5, tau=7.0, sigma=7**1.5, length=1.0, convention=convention, draw=draw)
    g = periodic_grf(rngs(21, n), npts, **kw)
    assert g.shape == (n,) + (npts,) * dim
    G = np.fft.fftn(g, axes=tuple(range(1, dim + 1)))
    v = periodic_mode_variance(npts, **kw)
    assert np.all(np.abs(G[(slice(None),) + (0,) * dim]) < 1e-9 * npts**dim), "mean mode must be zero"
    # |G_k|^2 / (v/2) ~ chi2(2) for complex modes, G_k^2 / v ~ chi2(1) for self-conjugate ones;
    # G_{-k} = conj(G_k), so only one mode of each conjugate pair is an independent test
    real = self_conjugate(g.shape[1:])
    live = (v > 0) & first_of_pair(g.shape[1:])
    dof = np.where(real, n, 2 * n)[live]
    ratio = np.sum(np.abs(G[:, live]) ** 2, axis=0) / np.where(real, v, v / 2)[live]
    ok = chi2_ok(ratio, dof, live.sum())
    assert ok.all(), f"mode variance ratio off: {(ratio[~ok] / dof[~ok]).tolist()}"
    assert chi2_ok(ratio.sum(), dof.sum(), 1), f"pooled variance ratio {ratio.sum() / dof.sum():.4f}"
    if draw == "modes" and npts % 2 == 0:  # the Nyquist lines are not drawn
        nyquist = np.any(np.indices((npts,) * dim) == npts // 2, axis=0)
        assert np.abs(G[:, nyquist]).max() < 1e-9 * npts**dim


@pytest.mark.parametrize("draw", ["modes", "grid"])
def test_periodic_kl_with_length_and_mean_mode(draw: str) -> None:
    """On [0, 2 pi)^2 with the mean mode kept: E|G_0|^2 = n^4 sigma^2 tau^(-2 alpha) / L^2."""
    n, npts, L = 2000, 8, 2 * np.pi
    kw = dict(alpha=2.0, tau=1.5, sigma=3.0, length=L, convention="kl", zero_mean=False, draw=draw)
    g = periodic_grf(rngs(22, n), npts, **kw)
    v = periodic_mode_variance(npts, **kw)
    assert np.isclose(v[0, 0], npts**4 * 9.0 * 1.5**-4.0 / L**2)
    G = np.fft.fft2(g)
    real = self_conjugate((npts, npts))
    keep = first_of_pair((npts, npts))
    keep &= v > 0
    ratio = np.sum(np.abs(G[:, keep]) ** 2, axis=0) / np.where(real, v, v / 2)[keep]
    assert chi2_ok(ratio, np.where(real, n, 2 * n)[keep], keep.sum()).all()


@pytest.mark.parametrize("draw", ["modes", "grid"])
def test_fno2020_is_sqrt2_times_kl_and_pixel_std_026(draw: str) -> None:
    kw = dict(alpha=2.5, tau=7.0, sigma=7**1.5, draw=draw)
    v_fno = periodic_pointwise_variance(256, convention="fno2020", **kw)
    v_kl = periodic_pointwise_variance(256, convention="kl", **kw)
    assert np.isclose(v_fno, 2 * v_kl, rtol=1e-12)
    assert abs(np.sqrt(v_fno) - 0.262) < 0.001  # PROTOCOLS.md: about 0.26 at 256^2
    # empirical: per-sample mean squares are iid with mean v_fno (CLT bound, 5 standard errors)
    g = periodic_grf(rngs(23, 48), 256, convention="fno2020", **kw)
    ms = np.mean(g**2, axis=(1, 2))
    assert abs(ms.mean() - v_fno) <= 5 * ms.std(ddof=1) / np.sqrt(ms.size)
    assert abs(np.sqrt(ms.mean()) - 0.262) < 0.03


@pytest.mark.parametrize("convention", ["kl", "fno2020"])
def test_both_draws_have_the_stated_pixel_variance_on_a_long_period(convention: str) -> None:
    """On [0, 2 pi)^2 (Kolmogorov) the two draw orders sample the same law: per-sample mean squares
    agree with :func:`periodic_pointwise_variance` (CLT bound, 5 standard errors), which differs
    between the draws only by the Nyquist lines that "modes" leaves out."""
    kw = dict(alpha=2.5, tau=7.0, sigma=7**1.5, length=2 * np.pi, convention=convention)
    for draw in ("modes", "grid"):
        v = periodic_pointwise_variance(32, draw=draw, **kw)
        ms = np.mean(periodic_grf(rngs(24, 200), 32, draw=draw, **kw) ** 2, axis=(1, 2))
        assert abs(ms.mean() - v) <= 5 * ms.std(ddof=1) / np.sqrt(ms.size), (draw, ms.mean(), v)
    grid, modes = (periodic_pointwise_variance(32, draw=d, **kw) for d in ("grid", "modes"))
    assert 0 < 1 - modes / grid < 1e-2  # measured 0.4 % at n = 32


@pytest.mark.parametrize("convention", ["kl", "fno2020"])
@pytest.mark.parametrize("draw", ["modes", "grid"])
def test_periodic_same_fields_in_one_batch_or_eight(convention: str, draw: str) -> None:
    for dim in (1, 2):
        kw = dict(dim=dim, alpha=2.0, tau=5.0, convention=convention, draw=draw)
        one = periodic_grf(rngs(7, 8), 16, **kw)
        eight = np.concatenate([periodic_grf(rngs(7, 1, start=i), 16, **kw) for i in range(8)])
        assert np.array_equal(one, eight)
        assert not np.array_equal(one[0], one[1])


def test_empty_batch_gives_empty_array() -> None:
    assert neumann_grf([], 5, alpha=2.0, tau=3.0).shape == (0, 5, 5)
    assert periodic_grf([], 6, alpha=2.0, tau=3.0).shape == (0, 6, 6)
    assert periodic_grf([], 6, alpha=2.0, tau=3.0, convention="fno2020").shape == (0, 6, 6)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(s=1), "too small"),
        (dict(s=4.0), "integer"),
        (dict(tau=0.0), "tau"),
        (dict(tau=-1.0), "tau"),
        (dict(alpha=0.0), "alpha"),
        (dict(sigma=-2.0), "sigma"),
        (dict(alpha=float("nan")), "alpha"),
        (dict(convention="matlab"), "convention"),
        (dict(draw="rows"), r"draw = 'rows' is not one of \['modes', 'grid'\]"),
    ],
)
def test_neumann_bad_parameters(kwargs: dict, match: str) -> None:
    args = dict(s=8, alpha=2.0, tau=3.0, sigma=1.0, convention="kl") | kwargs
    s = args.pop("s")
    with pytest.raises(ConfigError, match=match):
        neumann_grf(rngs(0, 1), s, **args)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(n=1), "too small"),
        (dict(dim=4), "dim"),
        (dict(length=0.0), "length"),
        (dict(tau=0.0), "tau"),
        (dict(alpha=-1.0), "alpha"),
        (dict(convention="fno"), "convention"),
        (dict(draw="rows"), "draw = 'rows'"),
        (dict(max_mode=0), "max_mode = 0 must be an integer >= 1"),
    ],
)
def test_periodic_bad_parameters(kwargs: dict, match: str) -> None:
    args = dict(n=8, alpha=2.0, tau=3.0) | kwargs
    n = args.pop("n")
    with pytest.raises(ConfigError, match=match):
        periodic_grf(rngs(0, 1), n, **args)


def test_generators_must_be_a_sequence_of_per_sample_rngs() -> None:
    with pytest.raises(ConfigError, match="sequence of per-sample"):
        neumann_grf(np.random.default_rng(0), 8, alpha=2.0, tau=3.0)
    with pytest.raises(ConfigError, match="not numpy.random.Generator"):
        periodic_grf([np.random.default_rng(0), 3], 8, alpha=2.0, tau=3.0)


def test_large_fields_are_bit_identical_whatever_the_batch() -> None:
    # Batched FFTs may round differently from single ones at large sizes; the samplers transform
    # per sample so that shards of any size give the same data (the NS 256^2 protocol size here).
    one = periodic_grf(rngs(3, 4), 256, dim=2, alpha=2.5, tau=7.0, sigma=7.0**1.5, convention="fno2020")
    four = np.concatenate([periodic_grf(rngs(3, 1, start=i), 256, dim=2, alpha=2.5, tau=7.0, sigma=7.0**1.5, convention="fno2020") for i in range(4)])
    assert np.array_equal(one, four)
    one = neumann_grf(rngs(3, 4), 421, alpha=2.0, tau=3.0, convention="fno")
    four = np.concatenate([neumann_grf(rngs(3, 1, start=i), 421, alpha=2.0, tau=3.0, convention="fno") for i in range(4)])
    assert np.array_equal(one, four)


# ----------------------------------------------------------------------------- the same field at every resolution


def test_the_neumann_mode_order_does_not_depend_on_the_grid() -> None:
    """The ranks of an s x s grid are 0 .. s^2 - 1, and on a finer grid the same modes keep the
    same ranks: a finer grid only draws more numbers after the same first ones."""
    for s in (1, 2, 5, 9):
        r = neumann_mode_rank(s)
        assert np.array_equal(np.sort(r.ravel()), np.arange(s * s))
        assert np.array_equal(neumann_mode_rank(3 * s + 1)[:s, :s], r)
    # shell by shell: (0,0); (0,1), (1,0), (1,1); (0,2), (1,2), (2,0), (2,1), (2,2)
    assert neumann_mode_rank(3).tolist() == [[0, 1, 4], [2, 3, 5], [6, 7, 8]]


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_the_periodic_mode_order_does_not_depend_on_the_grid(dim: int) -> None:
    """Representatives k (first non-zero wavenumber > 0) in shells of max |k_i|; the first R ranks of
    a finer grid are the same wavenumbers as the R of the coarse one; negatives pair up."""
    def wavenumbers(n: int) -> np.ndarray:
        rep, neg, rank = periodic_mode_rank(n, dim)
        k = np.stack(np.unravel_index(rep, (n,) * dim), axis=-1)
        k = np.where(k > n // 2, k - n, k)
        kn = np.stack(np.unravel_index(neg, (n,) * dim), axis=-1)
        assert np.array_equal(np.where(kn > n // 2, kn - n, kn), -k)
        assert np.array_equal(rank, np.arange(rep.size))
        return k

    coarse, fine = wavenumbers(8), wavenumbers(21)
    assert coarse.shape[0] == ((2 * 3 + 1) ** dim - 1) // 2  # |k_i| <= 3 = (8 - 1) // 2, Nyquist left out
    assert np.array_equal(fine[: coarse.shape[0]], coarse)
    shells = np.abs(fine).max(axis=1)
    assert np.all(np.diff(shells) >= 0)
    first = np.array([row[np.flatnonzero(row)[0]] for row in fine])
    assert np.all(first > 0)


def fine_only_modes_removed(g_fine: np.ndarray, s_coarse: int) -> np.ndarray:
    """The KL Neumann field on the fine nodes with its modes k >= s_coarse removed (exact: the
    node cosines are invertible)."""
    s = g_fine.shape[-1]
    C = cos_nodes(s)
    Ci = np.linalg.inv(C)
    coef = np.einsum("kn,bnm,lm->bkl", Ci, g_fine, Ci)
    coef[:, s_coarse:, :] = 0
    coef[:, :, s_coarse:] = 0
    return np.einsum("nk,bkl,ml->bnm", C, coef, C)


@pytest.mark.parametrize("s", [9, 33])
def test_a_neumann_field_is_the_same_function_at_s_and_2s_minus_1(s: int) -> None:
    """Sample i at s nodes and at 2 s - 1 nodes (every second node shared): the fine field's modes
    shared with the coarse grid ARE the coarse field (to round-off), and what differs at the common
    nodes is exactly the fine-only modes; the "grid" draw gives an unrelated field."""
    kw = dict(alpha=2.0, tau=3.0, sigma=1.0, convention="kl")
    coarse = neumann_grf(rngs(8, 3), s, **kw)
    fine = neumann_grf(rngs(8, 3), 2 * s - 1, **kw)
    band = fine_only_modes_removed(fine, s)[:, ::2, ::2]
    assert np.abs(band - coarse).max() < 1e-12 * np.abs(coarse).max()
    rest = np.abs(fine[:, ::2, ::2] - coarse).max() / np.abs(coarse).max()
    assert 1e-4 < rest < 0.5, rest  # the fine-only modes: measured 0.13 (s = 9) and 0.038 (s = 33), not zero
    legacy = neumann_grf(rngs(8, 3), 2 * s - 1, draw="grid", **kw)[:, ::2, ::2]
    assert np.linalg.norm(legacy - neumann_grf(rngs(8, 3), s, draw="grid", **kw)) > 0.5 * np.linalg.norm(legacy)


@pytest.mark.parametrize(("dim", "n"), [(1, 64), (2, 16), (3, 6)])
@pytest.mark.parametrize("convention", ["kl", "fno2020"])
def test_a_periodic_field_is_the_same_function_at_n_and_2n(dim: int, n: int, convention: str) -> None:
    """On the torus, sample i at n and at 2 n points a side: the fine field with its modes outside
    |k_i| <= (n - 1) // 2 removed equals the coarse field at the common points (every second)."""
    kw = dict(dim=dim, alpha=2.0, tau=5.0, sigma=3.0, length=2 * np.pi, convention=convention)
    coarse = periodic_grf(rngs(9, 3), n, **kw)
    fine = periodic_grf(rngs(9, 3), 2 * n, **kw)
    axes = tuple(range(1, dim + 1))
    F = np.fft.fftn(fine, axes=axes)
    k = np.abs(np.fft.fftfreq(2 * n, d=1.0 / (2 * n)))
    outside = np.zeros((2 * n,) * dim, dtype=bool)
    for ax in range(dim):
        outside |= (k > (n - 1) // 2).reshape([2 * n if a == ax else 1 for a in range(dim)])
    F[:, outside] = 0
    band = np.real(np.fft.ifftn(F, axes=axes))[(slice(None),) + (slice(None, None, 2),) * dim]
    assert np.abs(band - coarse).max() < 1e-12 * np.abs(coarse).max()


def test_a_band_limited_periodic_field_is_identical_at_every_resolution() -> None:
    """max_mode = 20 (the published Burgers initial data): the field is one trigonometric polynomial,
    so its values at the points shared by 64, 256 and 1024 points agree to round-off."""
    kw = dict(dim=1, alpha=2.0, tau=5.0, sigma=25.0, max_mode=20)
    g = {n: periodic_grf(rngs(10, 4), n, **kw) for n in (64, 256, 1024)}
    assert np.abs(g[256][:, ::4] - g[64]).max() < 1e-13 * np.abs(g[64]).max()
    assert np.abs(g[1024][:, ::16] - g[64]).max() < 1e-13 * np.abs(g[64]).max()
    spectrum = np.abs(np.fft.rfft(g[1024], axis=-1))
    assert spectrum[:, 21:].max() < 1e-12 * spectrum.max() and spectrum[:, 20].min() > 0
    with pytest.raises(ConfigError, match="max_mode"):
        periodic_grf(rngs(10, 1), 64, dim=1, alpha=2.0, tau=5.0, max_mode=2.5)
