"""Specification of the 2D Navier-Stokes vorticity solver and its generators (solvers/navier_stokes.py).

Exact solutions (Taylor-Green decay, the laminar Kolmogorov state, a manufactured steady state whose advection
is not zero), observed temporal orders
(fitted over four step sizes), invariants (mean vorticity; energy and enstrophy of the inviscid
Galerkin system), the 2/3 dealiasing rule, blow-up errors, and the generators' determinism.
Grids are 16^2 - 32^2 so the file runs in seconds; the CUDA variants run when a GPU is present.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from opflow.data.errors import ConfigError
from opflow.data.format import read_dataset, validate
from solvers.base import SolverError, params_from_dict
from solvers.generate import write_shard
from solvers.navier_stokes import (
    Kolmogorov,
    NavierStokes,
    VorticitySolver,
    dealias_cutoff,
    dealias_mask,
    fno_forcing,
    grid_points,
    kolmogorov_forcing,
    record_times,
    solve,
)
from solvers.verification import forced_flow, ns_forced_study, slope, smooth_field, taylor_green, taylor_green_study

NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=NO_CUDA)]
TWO_PI = 2 * np.pi


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small FFTs run fastest (and reproducibly) on one thread; restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ------------------------------------------------------------------------------------------------
# spatial discretisation


def test_dealias_mask_is_the_largest_alias_free_square_band() -> None:
    n = 32
    mask = dealias_mask(n)
    k = dealias_cutoff(n)
    assert mask.shape == (n, n // 2 + 1) and k == 10
    assert mask.sum() == (2 * k + 1) * (k + 1)
    assert dealias_cutoff(256) == 85 == int(2 / 3 * 128)  # the FNO generator's cutoff
    assert dealias_cutoff(416) == 138

    rng = np.random.default_rng(0)
    m_x, m_y = np.abs(np.fft.fftfreq(n, 1 / n)), np.abs(np.fft.rfftfreq(n, 1 / n))

    def band(kk: int) -> np.ndarray:
        keep = (m_x[:, None] <= kk) & (m_y[None, :] <= kk)
        return np.fft.irfft2(np.fft.rfft2(rng.standard_normal((2, n, n))) * keep, s=(n, n))

    def truncated_product_error(f: np.ndarray, g: np.ndarray) -> float:
        # exact product on a 3/2-padded grid (no aliasing), truncated to the mask, vs the n-grid one
        m = 3 * n // 2
        pad = np.zeros((2, m, m // 2 + 1), complex)
        for a, field in enumerate((f, g)):
            fh = np.fft.fft2(field)
            full = np.zeros((m, m), complex)
            idx = np.fft.fftfreq(n, 1 / n).astype(int)
            full[np.ix_(idx % m, idx % m)] = fh * (m / n) ** 2
            pad[a] = full[:, : m // 2 + 1]
        prod = np.fft.irfft2(pad[0], s=(m, m)) * np.fft.irfft2(pad[1], s=(m, m))
        exact = np.fft.fft2(prod) * (n / m) ** 2
        exact = exact[np.ix_(np.fft.fftfreq(n, 1 / n).astype(int) % m, np.arange(n // 2 + 1))]
        grid = np.fft.rfft2(f * g)
        return float(np.abs((exact - grid) * mask).max() / np.abs(grid).max())

    f, g = band(k)
    assert truncated_product_error(f, g) < 1e-13  # band K: the 2/3 rule is exact
    f, g = band(k + 1)
    assert truncated_product_error(f, g) > 1e-3  # one more mode aliases into the kept band


def test_velocity_is_divergence_free_with_the_stated_sign_convention() -> None:
    n = 32
    s = VorticitySolver(n, TWO_PI, 0.01)
    x = grid_points(n, TWO_PI)
    # w = sin(x) -> psi = sin(x), u = (psi_y, -psi_x) = (0, -cos x)
    u, v = s.velocity(s.to_spectral(np.sin(x)[None, :, None] * np.ones((1, n, n))))
    assert np.abs(u.numpy()).max() < 1e-14
    np.testing.assert_allclose(v.numpy()[0], -np.cos(x)[:, None] * np.ones((1, n)), atol=1e-14)

    rng = np.random.default_rng(3)
    w = rng.standard_normal((2, n, n))  # rough, all modes (mean and Nyquist too)
    w_hat = s.to_spectral(w)
    u, v = s.velocity(w_hat)
    div = s.to_physical(s.to_spectral(u) * s.dx_op + s.to_spectral(v) * s.dy_op)
    assert float(div.abs().max()) < 1e-12 * float(u.abs().max())
    # the curl v_x - u_y gives back w up to its mean and its Nyquist modes (no derivative there)
    curl_hat = s.to_spectral(v) * s.dx_op - s.to_spectral(u) * s.dy_op
    keep = torch.ones_like(s.k2)
    keep[0, 0] = 0
    keep[n // 2, :] = 0
    keep[:, n // 2] = 0
    assert float(((curl_hat - w_hat) * keep).abs().max()) < 1e-12 * float(w_hat.abs().max())


# ------------------------------------------------------------------------------------------------
# exact solutions and observed orders


@pytest.mark.parametrize("device", DEVICES)
def test_taylor_green_decays_exactly_and_cn_is_second_order(device: str) -> None:
    n, k, nu, t = 32, 2, 0.05, 1.0
    w0, exact = taylor_green(n, k, nu, 0.0), taylor_green(n, k, nu, t)[0]
    scale = np.abs(exact).max()
    # etdrk4 integrates the viscous term exactly: round-off error with two steps, or adaptive
    w = solve(w0, [t], length=TWO_PI, nu=nu, scheme="etdrk4", dt=0.5, cfl_limit=100, device=device)
    assert np.abs(w[0, 0] - exact).max() / scale < 1e-13
    # adaptive steps land exactly on odd record times
    times = [0.1, 0.37, 1.0]
    w = solve(w0, times, length=TWO_PI, nu=nu, scheme="etdrk4", cfl=0.5, device=device)
    for j, tj in enumerate(times):
        assert np.abs(w[0, j] - taylor_green(n, k, nu, tj)[0]).max() / scale < 1e-13
    # fno and heun_cn: Crank-Nicolson on the viscous term, the only active term -> order 2
    for scheme in ("fno", "heun_cn"):
        study = taylor_green_study(scheme, [0.1, 0.05, 0.025, 0.0125], n=n, k=k, nu=nu, t=t, device=device)
        assert abs(study.slopes["max"] - 2.0) < 0.05, (scheme, study.errors["max"])


def test_fixed_steps_are_cut_to_land_on_record_times() -> None:
    # dt = 0.03 does not divide the intervals 0.1 and 0.15: they get 4 steps of 0.025 and 5 of 0.03,
    # and the fno result is the Crank-Nicolson amplification factor of those steps, exactly
    n, k, nu = 16, 2, 0.5
    w0 = taylor_green(n, k, nu, 0.0)
    lam = -nu * 2 * k**2
    w = solve(w0, [0.1, 0.25], length=TWO_PI, nu=nu, scheme="fno", dt=0.03)

    def cn(h: float, m: int) -> float:
        return ((1 + h * lam / 2) / (1 - h * lam / 2)) ** m

    np.testing.assert_allclose(w[0, 0], w0[0] * cn(0.025, 4), rtol=0, atol=1e-13)
    np.testing.assert_allclose(w[0, 1], w0[0] * cn(0.025, 4) * cn(0.03, 5), rtol=0, atol=1e-13)


def test_fno_scheme_is_the_published_update() -> None:
    """Ten steps of ``fno`` equal an independent numpy transcription of the 2020 generator's loop
    (PROTOCOLS.md): psi = w / (4 pi^2 |k|^2), q = psi_y, v = -psi_x, F = dealias(q w_x + v w_y),
    w <- (-dt F + dt f + (1 - dt nu lap / 2) w) / (1 + dt nu lap / 2), square 2/3 mask."""
    n, nu, dt = 32, 1e-3, 1e-2
    w = smooth_field(n, 9)[0]  # inside the 2/3 band, so the Nyquist convention cannot matter
    f_h = np.fft.rfft2(fno_forcing(n))
    k1 = np.fft.fftfreq(n, 1 / n)[:, None] * np.ones((1, n // 2 + 1))
    k2 = np.fft.rfftfreq(n, 1 / n)[None, :] * np.ones((n, 1))
    lap = 4 * np.pi**2 * (k1**2 + k2**2)
    lap_inv = np.where(lap > 0, 1 / np.where(lap > 0, lap, 1), 1.0)
    dealias = (np.abs(k1) <= 2 / 3 * (n // 2)) & (np.abs(k2) <= 2 / 3 * (n // 2))
    w_h = np.fft.rfft2(w)
    for _ in range(10):
        psi_h = w_h * lap_inv
        q = np.fft.irfft2(2j * np.pi * k2 * psi_h, s=(n, n))
        v = np.fft.irfft2(-2j * np.pi * k1 * psi_h, s=(n, n))
        w_x = np.fft.irfft2(2j * np.pi * k1 * w_h, s=(n, n))
        w_y = np.fft.irfft2(2j * np.pi * k2 * w_h, s=(n, n))
        F_h = dealias * np.fft.rfft2(q * w_x + v * w_y)
        w_h = (-dt * F_h + dt * f_h + (1 - 0.5 * dt * nu * lap) * w_h) / (1 + 0.5 * dt * nu * lap)
    ours = solve(w[None], [10 * dt], length=1.0, nu=nu, forcing=fno_forcing(n), scheme="fno", dt=dt)[0, 0]
    np.testing.assert_allclose(ours, np.fft.irfft2(w_h, s=(n, n)), rtol=0, atol=1e-13)


@pytest.mark.parametrize("device", DEVICES)
def test_observed_order_with_advection_and_forcing(device: str) -> None:
    """Random smooth IC with Kolmogorov forcing: errors against a fine etdrk4 reference (dt = 1/512)."""
    flow = forced_flow(n=32, nu=0.01, t=1.0, device=device, reference_dt=1 / 512)
    expected = {
        "fno": (1.0, [0.02, 0.01, 0.005, 0.0025]),
        "heun_cn": (2.0, [0.1, 0.05, 0.025, 0.0125]),
        "etdrk4": (4.0, [0.1, 0.05, 0.025, 0.0125]),
    }
    errors = {}
    for scheme, (order, dts) in expected.items():
        study = ns_forced_study(scheme, dts, flow)
        errors[scheme] = study.errors["L2"]
        assert abs(study.slopes["L2"] - order) < 0.15, (scheme, errors[scheme])
    # adaptive etdrk4 (cfl 0.5) is more accurate than fno with 400 steps, in under 1/5 of the steps
    stats: dict = {}
    adaptive = solve(flow.w0, [flow.t], scheme="etdrk4", cfl=0.5, stats=stats, **flow.solve_kw)
    assert flow.error(adaptive) < errors["fno"][-1]
    assert stats["steps"].max() < 400 / 5


@pytest.mark.parametrize("scheme", ["fno", "heun_cn", "etdrk4"])
def test_laminar_kolmogorov_flow_is_steady_and_forcing_sign_is_the_curl(scheme: str) -> None:
    n, nf, nu = 32, 4, 1 / 70
    y = grid_points(n, TWO_PI)
    f = kolmogorov_forcing(n, nf)
    np.testing.assert_allclose(f, -nf * np.cos(nf * y)[None, :] * np.ones((n, 1)), atol=1e-14)
    # laminar state: nu Laplacian w + f = 0 and u . grad w = 0, with velocity sin(n y) / (nu n^2) e_x
    w_lam = (-np.cos(nf * y) / (nu * nf))[None, None, :] * np.ones((1, n, 1))
    s = VorticitySolver(n, TWO_PI, nu, f)
    u, v = s.velocity(s.to_spectral(w_lam))
    np.testing.assert_allclose(u.numpy()[0], np.sin(nf * y)[None, :] / (nu * nf**2) * np.ones((n, 1)), atol=1e-12)
    assert np.abs(v.numpy()).max() < 1e-12
    kw = dict(cfl=0.5) if scheme == "etdrk4" else dict(dt=0.01)
    w = solve(w_lam, [1.0], length=TWO_PI, nu=nu, forcing=f, scheme=scheme, **kw)
    assert np.abs(w[0, 0] - w_lam[0]).max() < 1e-12 * np.abs(w_lam).max()


def _manufactured_steady_state(n: int, nu: float, a: float = 1.0, b: float = 0.7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """w* = a sin x cos 2y + b cos(3x + y) on [0, 2 pi)^2 and the forcing f = u* . grad w* - nu Laplacian w* that makes
    it a steady solution, all from the closed forms (psi* = a/5 sin x cos 2y + b/10 cos(3x + y), u* = psi*_y,
    v* = -psi*_x): nothing taken from the solver. Returns (w*, f, u* . grad w*) on the n x n grid."""
    x = grid_points(n, TWO_PI)[:, None]
    y = grid_points(n, TWO_PI)[None, :]
    w = a * np.sin(x) * np.cos(2 * y) + b * np.cos(3 * x + y)
    u = -(2 * a / 5) * np.sin(x) * np.sin(2 * y) - (b / 10) * np.sin(3 * x + y)
    v = -(a / 5) * np.cos(x) * np.cos(2 * y) + (3 * b / 10) * np.sin(3 * x + y)
    wx = a * np.cos(x) * np.cos(2 * y) - 3 * b * np.sin(3 * x + y)
    wy = -2 * a * np.sin(x) * np.sin(2 * y) - b * np.sin(3 * x + y)
    advection = u * wx + v * wy
    lap = -5 * a * np.sin(x) * np.cos(2 * y) - 10 * b * np.cos(3 * x + y)
    return w, advection - nu * lap, advection


@pytest.mark.parametrize("scheme", ["fno", "heun_cn", "etdrk4"])
def test_a_manufactured_steady_state_with_advection_stays_steady(scheme: str) -> None:
    """The advection term against closed forms: w* (two modes whose velocities advect each other, |u . grad w| up to
    0.40 against |w| up to 1.7) is steady under the forcing computed by hand, so the solver keeps it to round-off over a time unit.
    Every product is inside the 2/3 band at n = 32 (wavenumbers <= 6 < 10), so the dealiased term is exact. With the
    advection left out of the forcing the state moves by 22 % of its size (all three schemes; kept to 1e-14
    with it): the check sees that term's sign and scale."""
    n, nu = 32, 0.01
    w_star, f, advection = _manufactured_steady_state(n, nu)
    assert np.abs(advection).max() > 0.3  # the nonlinear term is not zero (unlike Taylor-Green's or Kolmogorov's)
    kw = dict(cfl=0.5) if scheme == "etdrk4" else dict(dt=0.01)
    w = solve(w_star[None], [1.0], length=TWO_PI, nu=nu, forcing=f, scheme=scheme, **kw)
    assert np.abs(w[0, 0] - w_star).max() < 1e-11 * np.abs(w_star).max()
    unbalanced = solve(w_star[None], [1.0], length=TWO_PI, nu=nu, forcing=f - advection, scheme=scheme, **kw)
    assert np.abs(unbalanced[0, 0] - w_star).max() > 0.1 * np.abs(w_star).max()


# ------------------------------------------------------------------------------------------------
# invariants


@pytest.mark.parametrize("scheme", ["fno", "heun_cn", "etdrk4"])
def test_mean_vorticity_is_conserved_with_zero_mean_forcing(scheme: str) -> None:
    n = 32
    w0 = 0.3 + smooth_field(n, 5, batch=2, band_limited=False) * 0.5
    kw = dict(cfl=0.5) if scheme == "etdrk4" else dict(dt=1e-3)
    w = solve(w0, [0.0, 0.25, 0.5], length=1.0, nu=1e-3, forcing=fno_forcing(n), scheme=scheme, **kw)
    assert np.abs(w.mean(axis=(-2, -1)) - 0.3).max() < 1e-13


@pytest.mark.parametrize(("scheme", "order"), [("fno", 1), ("heun_cn", 2), ("etdrk4", 4)])
def test_inviscid_energy_and_enstrophy_drift_shrinks_at_the_scheme_order(scheme: str, order: int) -> None:
    """nu = 0, f = 0, band-limited IC: the semi-discrete system conserves both, so any drift is the
    time stepping's; it must fall at least at the scheme's order (Heun: 3, ETDRK4: about 5 here)."""
    n = 32
    w0 = smooth_field(n, 1)
    s = VorticitySolver(n, TWO_PI, 0.0)

    def invariants(w: np.ndarray) -> np.ndarray:
        u, v = s.velocity(s.to_spectral(w))
        return np.array([0.5 * float((u**2 + v**2).mean()), 0.5 * float((w**2).mean())])

    i0 = invariants(w0)
    dts = [0.08, 0.04, 0.02, 0.01]
    drift = np.array([np.abs(invariants(s.integrate(w0, [2.0], scheme=scheme, dt=dt)[:, 0]) / i0 - 1) for dt in dts])
    for j, name in enumerate(("energy", "enstrophy")):
        assert slope(dts, list(drift[:, j])) > order - 0.2, (name, drift[:, j])
    assert drift[-1].max() < {"fno": 0.05, "heun_cn": 1e-5, "etdrk4": 1e-9}[scheme]


# ------------------------------------------------------------------------------------------------
# errors


def test_blow_up_names_the_first_offending_sample_and_the_seed() -> None:
    n = 32
    w0 = smooth_field(n, 2, batch=3)
    w0[1] *= 40.0  # only sample 1 is too fast for dt = 0.05 (CFL ~ 20)
    with pytest.raises(SolverError, match=r"CFL number .* above the limit 1.0.*\(sample 8, seed 123\)") as e:
        solve(w0, [1.0], length=TWO_PI, nu=1e-3, scheme="fno", dt=0.05, sample_indices=[7, 8, 9], seed=123)
    assert (e.value.index, e.value.seed) == (8, 123)
    with pytest.raises(SolverError, match=r"\(sample 7, seed 5\)"):  # every sample blows up: the first is named
        solve(w0 * 100, [1.0], length=TWO_PI, nu=1e-3, scheme="etdrk4", dt=0.5, sample_indices=[7, 8, 9], seed=5)
    bad = smooth_field(n, 2, batch=3)
    bad[2, 3, 3] = np.nan
    with pytest.raises(SolverError, match=r"non-finite .*\(sample 9, seed 1\)"):
        solve(bad, [1.0], length=TWO_PI, nu=1e-3, scheme="etdrk4", cfl=0.5, sample_indices=[7, 8, 9], seed=1)
    with pytest.raises(SolverError, match=r"non-finite vorticity at t = 0 .*\(sample 9"):
        solve(bad, [0.0, 1.0], length=TWO_PI, nu=1e-3, scheme="fno", dt=0.01, sample_indices=[7, 8, 9])


def test_bad_arguments_are_config_errors_naming_the_fix() -> None:
    w0 = smooth_field(16, 0)
    with pytest.raises(ConfigError, match="scheme 'rk3' is not one of"):
        solve(w0, [1.0], length=1.0, nu=1e-3, scheme="rk3")
    with pytest.raises(ConfigError, match="cfl targets are for 'etdrk4'"):
        solve(w0, [1.0], length=1.0, nu=1e-3, scheme="fno", cfl=0.5)
    with pytest.raises(ConfigError, match="increasing"):
        solve(w0, [1.0, 0.5], length=1.0, nu=1e-3)
    with pytest.raises(ConfigError, match="store_stride = 3 must divide"):
        solve(w0, [1.0], length=1.0, nu=1e-3, store_stride=3)
    with pytest.raises(ConfigError, match="not a multiple of record_every"):
        record_times(20.5, 1.0)


# ------------------------------------------------------------------------------------------------
# float32 and devices


def test_float32_tracks_float64() -> None:
    w0 = smooth_field(32, 4, band_limited=False)
    kw = dict(length=1.0, nu=1e-3, forcing=fno_forcing(32), scheme="etdrk4", cfl=0.5)
    w64 = solve(w0, [0.5], **kw)
    w32 = solve(w0, [0.5], dtype="float32", **kw)
    assert np.linalg.norm(w32 - w64) / np.linalg.norm(w64) < 1e-5


@NO_CUDA
def test_cuda_matches_cpu() -> None:
    w0 = smooth_field(32, 6, batch=3, band_limited=False)
    kw = dict(length=1.0, nu=1e-3, forcing=fno_forcing(32), scheme="etdrk4", cfl=0.5)
    gpu, cpu = solve(w0, [0.5], device="cuda", **kw), solve(w0, [0.5], device="cpu", **kw)
    np.testing.assert_allclose(gpu, cpu, rtol=0, atol=1e-11)


# ------------------------------------------------------------------------------------------------
# generators

SMALL_NS = {"resolution": 32, "store_resolution": 16, "t_final": 0.2, "record_every": 0.1, "nu": 1e-3, "device": "cpu"}


def test_navier_stokes_defaults_are_the_fno_protocol() -> None:
    g = NavierStokes.from_config({})
    p = g.params
    assert (p.nu, p.t_final, p.record_every, p.t_record_start) == (1e-5, 20.0, 1.0, 0.0)
    # the scheme of config/default.yaml (etdrk4, CFL-bounded); dt is the fixed step of scheme fno
    assert (p.resolution, p.store_resolution, p.scheme, p.cfl, p.dt_max, p.dt, p.forcing) == (256, 64, "etdrk4", 0.5, 0.02, 1e-4, "fno")
    assert (p.ic_alpha, p.ic_tau, p.ic_sigma, p.ic_convention) == (2.5, 7.0, 7**1.5, "fno2020")
    assert g.dims() == {"t": 21, "x": 64, "y": 64}
    c = g.coords()
    np.testing.assert_array_equal(c["t"].data, np.arange(21.0))
    np.testing.assert_allclose(c["x"].data, np.arange(64) / 64)
    assert c["x"].attrs["grid_type"] == c["y"].attrs["grid_type"] == "periodic"
    assert g.fields()["vorticity"].dims == ("t", "x", "y") and g.fields()["vorticity"].role == "output"
    k = Kolmogorov.from_config({})
    assert k.dims() == {"t": 2, "x": 416, "y": 416}
    np.testing.assert_allclose(k.coords()["t"].data, [11.0, 11.1])
    assert (k.params.wavenumber, k.params.nu) == (4, 1 / 70)


@pytest.mark.parametrize(
    ("gen", "values", "message"),
    [
        (
            NavierStokes,
            {"store_resolution": 60},
            r"store_resolution = 60 does not divide resolution = 256.*\[2, 4, 8, 16, 32, 64, 128, 256\]",
        ),
        (NavierStokes, {"t_final": 20.5}, r"not a multiple of record_every"),
        (NavierStokes, {"resolution": 255, "store_resolution": 5}, r"even grid size"),
        (NavierStokes, {"cfl": 1.2}, r"cfl = 1.2 must be below cfl_limit = 1.0"),
        (NavierStokes, {"scheme": "rk4"}, r"'rk4' is not one of \['fno', 'heun_cn', 'etdrk4'\]"),
        (NavierStokes, {"device": "gpu"}, r"device = 'gpu': use 'auto'"),
        (NavierStokes, {"nu": -1.0}, r"nu = -1.0: need a finite number >= 0"),
        (Kolmogorov, {"resolution": 24, "store_resolution": 24, "wavenumber": 8}, r"wavenumber = 8 lies outside"),
    ],
)
def test_generator_params_reject_bad_values(gen: type, values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        params_from_dict(gen.Params, values, "sources.x.params")


def test_navier_stokes_generator_is_deterministic_and_independent_of_block_size() -> None:
    for scheme in ("etdrk4", "fno"):
        g = NavierStokes.from_config({**SMALL_NS, "scheme": scheme, "dt": 1e-3, "batch_size": 3})
        together = g.generate(11, np.arange(3))["vorticity"]
        apart = np.concatenate([g.generate(11, np.array([i]))["vorticity"] for i in range(3)])
        np.testing.assert_array_equal(together, apart)
        np.testing.assert_array_equal(together, g.generate(11, np.arange(3))["vorticity"])
        assert together.shape == (3, 3, 16, 16)
        assert not np.allclose(together, g.generate(12, np.arange(3))["vorticity"])
        # frame 0 is the initial condition, strided onto the stored grid
        np.testing.assert_array_equal(together[:, 0], g.initial_vorticity(11, np.arange(3))[:, ::2, ::2])
        assert np.abs(together[:, 2] - together[:, 0]).max() > 1e-3


def test_kolmogorov_generator_writes_a_valid_pair_dataset(tmp_path: Path) -> None:
    g = Kolmogorov.from_config(
        {"resolution": 32, "store_resolution": 16, "t_input": 0.5, "t_gap": 0.1, "device": "cpu"}
    )
    w0 = g.initial_vorticity(3, np.arange(2))
    assert 1.0 < w0.std() < 4.0  # the FNO-group convention on [0, 2 pi]^2: pixel std about 2
    out = write_shard(g, 3, 0, 2, tmp_path / "k.nc", progress=False)
    validate(out)
    ds = read_dataset(out)
    w = ds["vorticity"]
    assert w.shape == (2, 2, 16, 16)
    np.testing.assert_allclose(ds["t"], [0.5, 0.6])
    assert ds.variables["x"].attrs["grid_type"] == "periodic"
    assert 0 < np.abs(w[:, 1] - w[:, 0]).max() < np.abs(w[:, 0]).max()


def test_generators_construct_without_importing_torch() -> None:
    code = (
        "import sys; from solvers.navier_stokes import NavierStokes, Kolmogorov\n"
        "for G in (NavierStokes, Kolmogorov):\n"
        "    g = G.from_config({}); g.dims(); g.coords(); g.fields()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
