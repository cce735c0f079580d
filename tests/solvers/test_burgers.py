"""Specification of the 1D viscous Burgers solver and its generator (solvers/burgers.py).

u_t + u u_x = nu u_xx on the periodic unit interval. Exact solution (Cole-Hopf) reproduced with
the observed temporal order of ETDRK4 asserted and spectral accuracy in space; the conserved mean;
the energy law d/dt (1/2)||u||^2 = -nu ||u_x||^2 (instantaneous, and integrated along a
trajectory); the 2/3 dealiasing; blow-up errors; the protocol's initial-field spectrum; per-sample
determinism whatever the block or shard; the file and its strided 1-D periodic subsets.
Grids of 8 - 256 points, so the file runs in seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import simpson

from opflow.data.errors import ConfigError
from opflow.data.format import read_dataset, validate
from opflow.data.shards import merge_shards
from opflow.data.transforms import derive
from solvers.base import SolverError, get_generator, params_from_dict
from solvers.burgers import Burgers, BurgersTerms, cole_hopf, dissipation, energy, grid_points, solve
from solvers.generate import write_shard
from solvers.grf import periodic_mode_variance
from solvers.verification import slope

# the Cole-Hopf test problem: nonzero mean (drift), amplitude 0.52 -> 0.35 over T = 1
NU, DRIFT, T = 0.02, 0.3, 1.0


def exact(n: int, t: float) -> np.ndarray:
    return cole_hopf(grid_points(n), t, nu=NU, drift=DRIFT)


def cole_hopf_error(n: int, dt: float) -> float:
    """Max-norm error at T relative to max |u(T)|."""
    u = solve(exact(n, 0.0)[None], [T], nu=NU, dt=dt)[0, -1]
    ref = exact(n, T)
    return float(np.abs(u - ref).max() / np.abs(ref).max())


# ------------------------------------------------------------------------------------------------
# the exact solution and the orders


def test_cole_hopf_solves_the_equation() -> None:
    """The formula itself: the PDE residual (spectral in x, centred differences in t) vanishes."""
    n, t, tau = 64, 0.4, 1e-4
    u = exact(n, t)
    u_t = (exact(n, t + tau) - exact(n, t - tau)) / (2 * tau)
    k = 2 * np.pi * np.fft.rfftfreq(n, 1 / n)
    u_hat = np.fft.rfft(u)
    u_x, u_xx = np.fft.irfft(1j * k * u_hat, n), np.fft.irfft(-(k**2) * u_hat, n)
    residual = u_t + u * u_x - NU * u_xx
    assert np.abs(residual).max() < 1e-7 * np.abs(u_t).max()
    assert abs(u.mean() - DRIFT) < 1e-14  # the mean is the drift


def test_etdrk4_is_fourth_order_on_the_cole_hopf_solution() -> None:
    dts = [1 / 8, 1 / 16, 1 / 32, 1 / 64]
    errors = [cole_hopf_error(64, dt) for dt in dts]  # n = 64 resolves u to ~1e-11
    order = slope(dts, errors)
    local = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert abs(order - 4.0) < 0.2, (order, errors)  # measured 4.05
    assert np.all(local > 3.7), local
    assert errors[-1] < 3e-8


def test_space_is_spectrally_accurate() -> None:
    """Exponential convergence in n: every 8 more points cut the error by more than 10x (an
    algebraic order p would give ratios that shrink to 1), down to round-off and time error."""
    ns = [8, 16, 24, 32, 40]
    errors = np.array([cole_hopf_error(n, 1 / 512) for n in ns])  # time error ~1e-12 at this dt
    ratios = errors[:-1] / errors[1:]
    assert np.all(ratios > 10), (errors, ratios)
    assert errors[-1] < 2e-9, errors


# ------------------------------------------------------------------------------------------------
# invariants


def test_the_mean_is_conserved() -> None:
    u0 = exact(64, 0.0)[None]
    u = solve(u0, [0.25, 1.0], nu=NU, dt=1 / 16)[0]
    assert np.abs(u.mean(axis=-1) - u0.mean()).max() < 1e-15
    # a random field with a mean of 0.7, stepped coarsely
    g = Burgers(Burgers.Params(nu=0.05, resolution=128))
    w = g.initial_fields(4, np.arange(3)) + 0.7
    out = solve(w, [1.0], nu=0.05, dt=0.05)[:, -1]
    assert np.abs(out.mean(axis=-1) - w.mean(axis=-1)).max() < 1e-15


def band_limited(u: np.ndarray, terms: BurgersTerms) -> np.ndarray:
    return terms.to_physical(terms.to_spectral(u) * terms.mask)


def test_the_nonlinear_term_does_no_work_on_band_limited_fields() -> None:
    """(u, N(u)) = 0 in the semi-discrete system: d/dt (1/2)||u||^2 = (u, L u) = -nu ||u_x||^2."""
    n, nu = 128, 0.03
    terms = BurgersTerms(n, nu)
    u = band_limited(Burgers(Burgers.Params(resolution=n)).initial_fields(1, np.arange(4)), terms)
    v = terms.to_spectral(u)
    n1, u_back = terms.nonlinear(v)
    np.testing.assert_allclose(u_back, u, atol=1e-14)
    w = np.full(v.shape[-1], 2.0)  # rfft weights: each m > 0 stands for +-m (Nyquist: single)
    w[0] = w[-1] = 1.0
    inner = lambda a, b: np.sum(w * np.real(np.conj(a) * b), axis=-1) / n**2  # (f, g) on [0, 1)  # noqa: E731
    assert np.all(np.abs(inner(v, n1)) < 1e-15 * np.abs(inner(v, v)))
    np.testing.assert_allclose(inner(v, terms.linear * v), -dissipation(u, nu), rtol=1e-12)
    np.testing.assert_allclose(0.5 * inner(v, v), energy(u), rtol=1e-13)


def test_the_energy_balance_holds_along_a_trajectory() -> None:
    """E(t0) - E(T) = int nu ||u_x||^2 dt over a GRF trajectory at the appendix viscosity, the
    dissipation integrated by Simpson's rule over the records; the balance error falls at the
    quadrature's order 4 as the records get denser (the solver's own error is far smaller)."""
    nu, n = 0.1 / (2 * np.pi), 256
    terms = BurgersTerms(n, nu)
    u0 = band_limited(Burgers(Burgers.Params(nu=nu, resolution=n)).initial_fields(3, np.arange(2)), terms)
    # start after the initial layer of the rough GRF (its fast decay needs far denser records)
    start = solve(u0, [0.1], nu=nu, dt=1 / 1000)[:, -1]
    gaps = []
    for k in (256, 512):
        times = np.linspace(0.0, 1.0, k + 1)
        u = solve(start, times, nu=nu, dt=1 / k)
        e, d = energy(u), dissipation(u, nu)
        lost = e[:, 0] - e[:, -1]
        assert np.all(lost > 0.8 * e[:, 0])  # most of the energy is dissipated: a real test
        assert np.all(np.diff(e, axis=-1) < 0)  # and monotonically
        gaps.append(np.abs(lost - simpson(d, x=times, axis=-1)) / lost)
    assert np.all(gaps[-1] < 2e-8), gaps  # measured 7e-9 and 3e-10
    assert np.all(gaps[0] / gaps[-1] > 10), gaps


def test_the_nonlinear_term_is_the_alias_free_truncated_product() -> None:
    """For band-limited u, N(u) equals -(i k / 2) times the exact product u^2 (computed on a 3/2
    padded grid) restricted to the band: the 2/3 rule removes the aliasing."""
    n = 48
    terms = BurgersTerms(n, 0.1)
    assert terms.cutoff == 15 and terms.mask.sum() == 16
    u = band_limited(np.random.default_rng(0).standard_normal((2, n)), terms)
    m = 3 * n // 2
    padded = np.zeros((2, m // 2 + 1), complex)
    padded[:, : n // 2 + 1] = np.fft.rfft(u) * (m / n)
    exact_sq = np.fft.rfft(np.fft.irfft(padded, m) ** 2)[:, : n // 2 + 1] * (n / m)
    expect = np.where(terms.mask, -0.5j * terms.k * exact_sq, 0)
    np.testing.assert_allclose(terms.nonlinear(np.fft.rfft(u))[0], expect, atol=1e-12)
    # without the truncation, the grid product would alias: the top modes differ
    grid_sq = np.fft.rfft(u * u)
    assert np.abs(grid_sq[:, 17:] - exact_sq[:, 17:]).max() > 1e-3


# ------------------------------------------------------------------------------------------------
# errors


def test_blow_up_names_the_first_offending_sample_and_the_seed() -> None:
    g = Burgers(Burgers.Params(nu=1e-3, resolution=64))
    u0 = g.initial_fields(0, np.arange(4))
    with pytest.raises(SolverError, match=r"exceeds max \|u0\|.*raise the resolution \(sample 12, seed 5\)"):
        solve(u0, [1.0], nu=1e-3, dt=1e-3, sample_indices=[10, 11, 12, 13], seed=5)  # fronts below the grid
    with pytest.raises(SolverError, match=r"reduce dt.*\(sample 11, seed 5\)"):
        solve(g.initial_fields(0, np.arange(2)) * 2, [1.0], nu=0.0159, dt=0.5, sample_indices=[10, 11], seed=5)
    bad = u0.copy()
    bad[1, 3] = np.nan
    with pytest.raises(SolverError, match=r"non-finite initial field \(sample 1\)"):
        solve(bad, [1.0], nu=0.1, dt=0.1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(u0=np.zeros((1, 7))), "even integer >= 8"),
        (dict(u0=np.zeros(8)), r"shape \(batch, n\)"),
        (dict(nu=0.0), "viscosity > 0"),
        (dict(dt=-1.0), "dt = -1.0"),
        (dict(times=[0.5, 0.2]), "increasing"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs: dict, message: str) -> None:
    args = dict(u0=np.zeros((1, 8)), times=[1.0], nu=0.1, dt=0.1) | kwargs
    with pytest.raises(ConfigError, match=message):
        solve(args.pop("u0"), args.pop("times"), **args)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"resolution": 1001}, "even integer >= 8"),
        ({"nu": 0}, "nu = 0"),
        ({"dt": -0.1}, "dt = -0.1"),
        ({"batch_size": 0}, "batch_size = 0"),
        ({"viscosity": 0.1}, "unknown parameter 'viscosity'; allowed: batch_size, dt"),
    ],
)
def test_generator_params_reject_bad_values(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        params_from_dict(Burgers.Params, values, "sources.burgers.params")


# ------------------------------------------------------------------------------------------------
# the generator


def test_defaults_are_the_protocol_and_metadata_is_cheap() -> None:
    assert get_generator("burgers") is Burgers
    p = Burgers.Params()
    assert (p.nu, p.t_final, p.resolution) == (0.1, 1.0, 8192)
    assert (p.ic_sigma**2, p.ic_tau**2, p.ic_alpha) == (625.0, 25.0, 2.0)
    g = Burgers(p)
    assert g.dims() == {"x": 8192}
    x = g.coords()["x"]
    assert x.attrs["grid_type"] == "periodic" and x.attrs["period"] == 1.0
    np.testing.assert_array_equal(x.data, np.arange(8192) / 8192)
    f = g.fields()
    assert (f["u0"].role, f["u"].role, f["u"].dims) == ("input", "output", ("x",))
    # importing and describing the generator does not import torch (the workflow reads dims/fields at load)
    code = "import sys; from solvers.burgers import Burgers as B; g = B(B.Params()); g.dims(); g.fields(); g.coords(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_initial_fields_have_the_protocol_spectrum() -> None:
    """E |FFT(u0)_m|^2 of N(0, 625 (-Laplacian + 25 I)^(-2)), mean mode zero, within sampling error."""
    n, count = 32, 4000
    u0 = Burgers(Burgers.Params(resolution=n)).initial_fields(7, np.arange(count))
    power = np.mean(np.abs(np.fft.fft(u0, axis=-1)) ** 2, axis=0)
    expect = periodic_mode_variance(n, dim=1, alpha=2.0, tau=5.0, sigma=25.0)
    assert np.abs(np.fft.fft(u0, axis=-1)[:, 0]).max() < 1e-4  # mean zero (float32 rounding)
    live = expect > 1e-6 * expect.max()
    # each mode's power is a mean of 4000 draws of a (scaled) chi-square with 1 or 2 degrees of freedom
    rel = np.abs(power[live] / expect[live] - 1)
    assert rel.max() < 5 * np.sqrt(2 / count), rel.max()
    assert np.sqrt(u0.var()) == pytest.approx(0.594, rel=0.03)


def test_samples_are_the_same_whatever_the_block_or_shard(tmp_path: Path) -> None:
    params = {"resolution": 256, "dt": 0.01, "nu": 0.0159}
    one = Burgers.from_config({**params, "batch_size": 1})
    many = Burgers.from_config({**params, "batch_size": 5})
    idx = np.arange(2, 9)
    a, b = one.generate(3, idx), many.generate(3, idx)
    for name in ("u0", "u"):
        np.testing.assert_array_equal(a[name], b[name])
    # shards of 3 + 4 merged = one shard of 7, bit for bit (a shard's blocks start at its own start)
    whole = write_shard(many, 3, 0, 7, tmp_path / "whole.nc", progress=False)
    parts = [write_shard(many, 3, 0, 3, tmp_path / "s0.nc", progress=False), write_shard(many, 3, 3, 7, tmp_path / "s1.nc", progress=False)]
    merged = merge_shards(parts, tmp_path / "merged.nc")
    w, m = read_dataset(whole), read_dataset(merged)
    for name in ("u0", "u", "x"):
        np.testing.assert_array_equal(np.asarray(w[name]), np.asarray(m[name]))
    np.testing.assert_array_equal(np.asarray(w["u0"])[2:], a["u0"][:5].astype(np.float32))


def test_the_file_derives_to_strided_periodic_subsets(tmp_path: Path) -> None:
    """8192 -> 2048, 512 in the protocol; here 64 -> 16: x[::4] with the period kept, splits labelled."""
    g = Burgers.from_config({"resolution": 64, "dt": 0.02})
    src = write_shard(g, 0, 0, 6, tmp_path / "src.nc", progress=False)
    assert validate(src) == []
    out = derive(src, tmp_path / "r16.nc", resolution=16, n_train=4, n_test=2, name="burgers")
    full, sub = read_dataset(src), read_dataset(out)
    np.testing.assert_array_equal(np.asarray(sub["x"]), np.arange(16) / 16)
    assert sub.variables["x"].attrs["grid_type"] == "periodic" and sub.attrs["opflow_stride"] == 4
    np.testing.assert_array_equal(np.asarray(sub["u"]), np.asarray(full["u"])[:, ::4])
    np.testing.assert_array_equal(np.asarray(sub["split"]), [0, 0, 0, 0, 1, 1])
    assert validate(out) == []
    # the workflow's check knows the valid resolutions of the source: the divisors of 64
    from solvers.config import check_generation_config, source_info

    cfg = {
        "sources": {"b": {"solver": "burgers", "n_samples": 10, "seed": 0, "params": {"resolution": 64}}},
        "datasets": {"d": {"source": "b", "resolution": 16, "train": 8, "test": 2}},
    }
    wf = check_generation_config(cfg)
    info = source_info(wf, "b")
    assert info.periodic and info.grid == 64 and info.resolutions() == [2, 4, 8, 16, 32, 64]
    cfg["datasets"]["d"]["resolution"] = 24
    with pytest.raises(ConfigError, match=r"24 is not a strided subsample of the 64-point periodic grid"):
        check_generation_config(json.loads(json.dumps(cfg)))
