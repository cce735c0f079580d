"""Lorenz-63 and controlled-ODE generators: accuracy against independent references, time grids,
seeding, sampling distributions, file layout and parameter errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from opflow.data.errors import ConfigError
from opflow.data.format import read_dataset, validate
from opflow.data.provenance import sample_rng
from solvers.base import SolverError, get_generator
from solvers.generate import write_shard
from solvers.lorenz import ControlledODEParams, Lorenz63Params, nonuniform_times, uniform_times


def lorenz_gen(**params):
    return get_generator("lorenz63").from_config(params)


def cde_gen(**params):
    return get_generator("controlled_ode").from_config(params)


def fine_lorenz(s0: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Independent reference: scipy DOP853 at rtol = atol = 1e-12 on the scalar right-hand side."""

    def rhs(_t: float, s: np.ndarray) -> list[float]:
        x, y, z = s
        return [10.0 * (y - x), x * (28.0 - z) - y, x * y - 8.0 / 3.0 * z]

    return solve_ivp(rhs, (0.0, t[-1]), s0, method="DOP853", t_eval=t, rtol=1e-12, atol=1e-12).y.T


# ---- accuracy ----------------------------------------------------------------------------------------


def test_lorenz_matches_a_fine_independent_integration() -> None:
    """Over T = 2 (about 2 Lyapunov times, lambda ~ 0.9) the rtol = atol = 1e-10 data agree with
    DOP853 at 1e-12 to 1e-6 of the trajectory's size (typical: 1e-9; worst of 300: 1e-7)."""
    gen = lorenz_gen()
    out = gen.generate(7, np.arange(12))
    t = gen.base_times
    for b in range(12):
        ref = fine_lorenz(np.array([out["x"][b, 0], out["y0"][b], out["z0"][b]]), t)
        got = np.stack([out["x"][b], out["y"][b], out["z"][b]], axis=-1)
        scale = np.abs(ref).max()
        assert np.abs(got - ref).max() <= 1e-6 * scale, f"sample {b}: error {np.abs(got - ref).max():.3g}"


def test_lorenz_scipy_integrator_option_gives_the_same_data() -> None:
    a = lorenz_gen().generate(7, np.arange(3))
    b = lorenz_gen(integrator="scipy").generate(7, np.arange(3))
    for k in ("x", "y", "z"):
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6 * np.abs(a[k]).max())
    assert np.array_equal(a["y0"], b["y0"])


@pytest.mark.parametrize("n_modes", [1, 10])
def test_controlled_ode_integration_matches_the_exact_solution(n_modes: int) -> None:
    """dz = sin(z) du is separable: z = 2 arctan(tan(z0/2) e^{u(t) - u(0)}) for any path u.
    The integrated data (dz/dt = sin(z) u'(t)) must reproduce it."""
    exact = cde_gen(n_modes=n_modes).generate(5, np.arange(16))
    ode = cde_gen(n_modes=n_modes, method="dopri5").generate(5, np.arange(16))
    assert np.array_equal(exact["u"], ode["u"])
    assert np.abs(ode["z"] - exact["z"]).max() < 1e-6
    assert np.abs(exact["z"][:, 0] - 1.0).max() < 1e-15, "z(0) = z0 = 1"
    if n_modes == 1:  # the paper's single-mode control, evaluated by hand
        t = cde_gen().base_times
        u = exact["xi"][:, :1] * np.sin(np.pi * exact["eta"][:, :1] * t)
        np.testing.assert_allclose(exact["u"], u, rtol=0, atol=1e-14)
        np.testing.assert_allclose(exact["z"], 2 * np.arctan(np.tan(0.5) * np.exp(u)), rtol=0, atol=1e-14)


def test_controlled_ode_exact_form_against_an_independent_integration() -> None:
    """Guards the closed form itself: scipy DOP853 at 1e-12 on dz/dt = sin(z) u'(t), written here."""
    gen = cde_gen(decay=True)
    out = gen.generate(11, np.arange(3))
    t = gen.base_times
    for b in range(3):
        a, w = out["xi"][b], np.pi * out["eta"][b]
        sol = solve_ivp(lambda s, z: np.sin(z) * np.sum(a * w * np.cos(w * s)), (0, t[-1]), [1.0], method="DOP853", t_eval=t, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out["z"][b], sol.y[0], rtol=0, atol=1e-8)
        np.testing.assert_allclose(out["u"][b], np.sum(a[:, None] * np.sin(w[:, None] * t), axis=0), rtol=0, atol=1e-13)


def test_lorenz_spin_up_shifts_the_trajectory_in_time() -> None:
    t = np.linspace(0.0, 1.0, 11)
    base = lorenz_gen(grid="explicit", times=(0.0, 0.5, *(0.5 + t[1:]))).generate(3, np.arange(2))
    spun = lorenz_gen(grid="explicit", times=tuple(t), spin_up=0.5).generate(3, np.arange(2))
    for k in ("x", "y", "z"):
        np.testing.assert_allclose(spun[k], base[k][:, 1:], rtol=0, atol=1e-7)
    assert np.array_equal(spun["y0"], spun["y"][:, 0]) and np.array_equal(spun["z0"], spun["z"][:, 0])


# ---- time grids ----------------------------------------------------------------------------------------


def test_uniform_and_nonuniform_grids_follow_the_paper() -> None:
    t = uniform_times(2.0, 0.01)
    assert t.size == 201 and t[0] == 0.0 and t[-1] == 2.0 and np.array_equal(t, np.arange(201) * 0.01)
    assert uniform_times(2.0, 0.01, endpoint=False).size == 200  # the authors' arange(0, T, dt)
    assert uniform_times(2.0, 0.015).size == 134 and math.isclose(uniform_times(2.0, 0.015)[-1], 1.995)
    assert uniform_times(2.0, 0.0075).size == 267
    assert uniform_times(2.0, 0.005).size == 401 and uniform_times(2.0, 0.02).size == 101
    nu = nonuniform_times(2.0, 0.01)  # eq. (41): {n dt}_{n=0}^{N/2} u {(N/2 + 2k) dt}_{k=1}^{N/4}
    expect = np.concatenate([np.arange(101), 100 + 2 * np.arange(1, 51)]) * 0.01
    assert np.array_equal(nu, expect) and nu.size == 151 and nu[-1] == 2.0
    assert nonuniform_times(2.0, 0.01, endpoint=False).size == 150


@pytest.mark.parametrize(
    ("params", "expect"),
    [
        ({}, np.arange(201) * 0.01),
        ({"dt": 0.02, "endpoint": False}, np.arange(100) * 0.02),
        ({"grid": "nonuniform"}, nonuniform_times(2.0, 0.01)),
        ({"grid": "explicit", "times": [0.0, 0.1, 0.35, 1.0]}, np.array([0.0, 0.1, 0.35, 1.0])),
    ],
    ids=["uniform", "uniform-open", "nonuniform", "explicit"],
)
def test_stored_time_grid_is_the_requested_one(tmp_path: Path, params: dict, expect: np.ndarray) -> None:
    for name in ("lorenz63", "controlled_ode"):
        gen = get_generator(name).from_config(params)
        path = write_shard(gen, 1, 0, 3, tmp_path / f"{name}.nc", progress=False)
        ds = read_dataset(path)
        assert ds.variables["t"].dims == ("t",) and np.array_equal(ds["t"], expect)
        assert ds.variables["t"].attrs["role"] == "coordinate"
        assert validate(path) == []


def test_the_same_trajectories_on_every_grid() -> None:
    """ICs do not depend on the grid: the non-uniform and the dt = 0.005 sets hold the dt = 0.01
    trajectories at other times (agreement to integration accuracy)."""
    fine = lorenz_gen(dt=0.005).generate(2, np.arange(4))
    for params in ({}, {"grid": "nonuniform"}):
        gen = lorenz_gen(**params)
        out = gen.generate(2, np.arange(4))
        pos = np.round(gen.base_times / 0.005).astype(int)
        for k in ("x", "y", "z"):
            np.testing.assert_allclose(out[k], fine[k][:, pos], rtol=0, atol=1e-6 * np.abs(fine[k]).max())
        assert np.array_equal(out["y0"], fine["y0"])


def test_random_grids_are_per_sample(tmp_path: Path) -> None:
    gen = lorenz_gen(grid="random")
    path = write_shard(gen, 4, 0, 3, tmp_path / "r.nc", progress=False)
    ds = read_dataset(path)
    t = ds["t"]
    assert ds.variables["t"].dims == ("sample", "t") and t.shape == (3, 201)
    assert np.all(t[:, 0] == 0.0) and np.all(t[:, -1] == 2.0) and np.all(np.diff(t, axis=1) > 0)
    assert not np.array_equal(t[0], t[1])
    assert validate(path) == []
    # the values sit at each sample's own times
    for b in range(3):
        ref = fine_lorenz(np.array([ds["x"][b, 0], ds["y0"][b], ds["z0"][b]], dtype=np.float64), t[b])
        np.testing.assert_allclose(ds["y"][b], ref[:, 1], rtol=0, atol=1e-5 * np.abs(ref).max())


# ---- seeding and distributions -------------------------------------------------------------------------


def test_samples_are_determined_by_seed_and_index_alone() -> None:
    for gen in (lorenz_gen(), cde_gen(method="dopri5", T=1.0, eta_max=3.0)):
        block = gen.generate(9, np.arange(6))
        single = gen.generate(9, np.array([4]))
        pair = gen.generate(9, np.array([3, 4]))
        for k in block:
            assert np.array_equal(single[k][0], block[k][4]), f"{gen.name}.{k} depends on the block"
            assert np.array_equal(pair[k][1], block[k][4])
        other = gen.generate(10, np.array([4]))
        assert not np.array_equal(other[next(iter(block))][0], block[next(iter(block))][4])
    shifted = lorenz_gen(index_offset=3).generate(9, np.array([1]))
    assert np.array_equal(shifted["x"][0], lorenz_gen().generate(9, np.array([4]))["x"][0])


def test_lorenz_initial_states_are_uniform_on_the_protocol_box() -> None:
    gen = lorenz_gen()
    n = 12000
    s0 = gen.initial_states([sample_rng(0, i) for i in range(n)])
    lo, hi = np.array([-15.0, -15.0, 0.0]), np.array([15.0, 15.0, 40.0])
    assert np.all(s0 >= lo) and np.all(s0 < hi)
    width = hi - lo
    # mean and variance of U[lo, hi] within 4 standard errors
    assert np.all(np.abs(s0.mean(0) - (lo + hi) / 2) < 4 * width / math.sqrt(12 * n))
    var_se = width**2 * math.sqrt(1 / 180 / n)  # sd of the sample variance of a uniform (kurtosis 9/5)
    assert np.all(np.abs(s0.var(0) - width**2 / 12) < 4 * var_se)
    assert abs(np.corrcoef(s0.T)[0, 1]) < 4 / math.sqrt(n)
    out = gen.generate(0, np.arange(3))  # the generator uses exactly these states
    assert np.array_equal(np.stack([out["x"][:, 0], out["y0"], out["z0"]], 1), s0[:3])


def test_controlled_ode_coefficients_follow_the_paper() -> None:
    gen = cde_gen()
    n = 4000
    rngs = [sample_rng(1, i) for i in range(n)]
    xi, eta = gen.coefficients(rngs)
    assert xi.shape == eta.shape == (n, 10)
    assert np.all((eta >= 0) & (eta < 10))
    m = n * 10
    assert abs(xi.mean()) < 4 / math.sqrt(m) and abs(xi.var() - 1) < 4 * math.sqrt(2 / m)
    assert abs(eta.mean() - 5) < 4 * 10 / math.sqrt(12 * m)
    xd, ed = cde_gen(decay=True).coefficients([sample_rng(1, i) for i in range(5)])
    np.testing.assert_array_equal(xd, xi[:5] / np.arange(1, 11))
    np.testing.assert_array_equal(ed, eta[:5])


# ---- file layout ----------------------------------------------------------------------------------------


def test_file_layout_and_roles(tmp_path: Path) -> None:
    ds = read_dataset(write_shard(lorenz_gen(), 0, 0, 4, tmp_path / "l.nc", progress=False))
    roles = {n: v.attrs.get("role") for n, v in ds.variables.items()}
    assert roles == {"sample": None, "t": "coordinate", "sample_index": None, "x": "input", "y0": "input", "z0": "input", "y": "output", "z": "output"}
    assert ds["x"].shape == (4, 201) and ds["y0"].shape == (4,)
    assert np.array_equal(ds["y0"], ds["y"][:, 0]) and np.array_equal(ds["z0"], ds["z"][:, 0])
    c = read_dataset(write_shard(cde_gen(), 0, 0, 4, tmp_path / "c.nc", progress=False))
    assert {n: v.attrs.get("role") for n, v in c.variables.items() if n not in ("sample", "sample_index")} == {
        "t": "coordinate", "u": "input", "z": "output", "xi": "auxiliary", "eta": "auxiliary"}
    assert c["xi"].shape == (4, 10)


# ---- parameters -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("lorenz63", {"dt": 0.0}, r"dt must be in \(0, T\]"),
        ("lorenz63", {"dt": -0.01}, r"dt must be in \(0, T\]"),
        ("lorenz63", {"dt": 3.0}, r"dt must be in \(0, T\]"),
        ("lorenz63", {"T": 0.0}, r"T must be > 0"),
        ("lorenz63", {"T": -1.0}, r"T must be > 0"),
        ("lorenz63", {"grid": "chebyshev"}, r"grid: 'chebyshev' is not one of \['uniform', 'nonuniform', 'random', 'explicit'\]"),
        ("lorenz63", {"times": [0.0, 1.0]}, r"times is only used with grid: explicit"),
        ("lorenz63", {"grid": "explicit"}, r"grid: explicit needs times"),
        ("lorenz63", {"grid": "explicit", "times": [0.0, 0.5, 0.5]}, r"strictly increasing"),
        ("lorenz63", {"z0_range": [40.0, 0.0]}, r"z0_range must be \[low, high\] with finite low < high"),
        ("lorenz63", {"spin_up": -1.0}, r"spin_up must be >= 0"),
        ("lorenz63", {"dt": 1e-7}, r"too many"),
        ("lorenz63", {"rtol": 0.0}, r"rtol must be in"),
        ("controlled_ode", {"n_modes": 0}, r"n_modes must be >= 1"),
        ("controlled_ode", {"z0": 4.0}, r"closed_form needs \|z0\| < pi"),
        ("controlled_ode", {"decay": "yes"}, r"decay: 'yes' is not of type bool"),
    ],
)
def test_bad_parameters_raise_config_errors(name: str, params: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_generator(name).from_config(params, where=f"sources.{name}.params")


def test_direct_construction_checks_too() -> None:
    with pytest.raises(ConfigError, match="grid 'log' is unknown"):
        Lorenz63Params(grid="log")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dt must be"):
        ControlledODEParams(dt=0.0)
    assert lorenz_gen(grid="explicit", times=[0.0, 1.0]).params.times == (0.0, 1.0)


def test_integration_failure_names_sample_and_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An integrator failure for batch position 1 is reported with that sample's global index."""
    import solvers.lorenz as mod
    from solvers.ode import IntegrationError

    def failing(*args, **kwargs):
        raise IntegrationError("step size underflow at t = 0.3", np.array([1]))

    monkeypatch.setattr(mod, "integrate", failing)
    with pytest.raises(SolverError, match=r"lorenz63: step size underflow at t = 0.3 \(sample 8, seed 5\)"):
        lorenz_gen().generate(5, np.array([7, 8, 9]))
