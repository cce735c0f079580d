"""The batched Dormand-Prince 5(4) integrator: order, accuracy, output grids, batch independence, errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from solvers.ode import TABLEAU, IntegrationError, integrate, reference_solve
from solvers.verification import linear, linear_exact, ode_fixed_step_study

# linear: y' = A y with eigenvalues -0.1 +- 2i, linear_exact: y(t) = e^{-0.1 t} R(2t) y0, R a rotation
# (problem (d) of solvers/verification.py)


def lorenz(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.stack([10.0 * (y[1] - y[0]), y[0] * (28.0 - y[2]) - y[1], y[0] * y[1] - 8.0 / 3.0 * y[2]])


def lorenz_states(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(-15, 15, n), rng.uniform(-15, 15, n), rng.uniform(0, 40, n)])


def _order_conditions(A: list, b: tuple, c: tuple, order: int) -> list[tuple[Fraction, Fraction]]:
    """(value, required) for the 17 rooted-tree conditions up to order 5 (Butcher)."""
    s = len(b)
    Am = [[A[i][j] if j < len(A[i]) else Fraction(0) for j in range(s)] for i in range(s)]

    def mat(v: list) -> list:
        return [sum((Am[i][j] * v[j] for j in range(s)), Fraction(0)) for i in range(s)]

    def dot(v: list) -> Fraction:
        return sum((b[i] * v[i] for i in range(s)), Fraction(0))

    def mul(*vs: list) -> list:
        return [np.prod([v[i] for v in vs]) for i in range(s)]

    one, cc = [Fraction(1)] * s, list(c)
    Ac, Ac2, AAc = mat(cc), mat(mul(cc, cc)), mat(mat(cc))
    conds = {
        1: [(dot(one), Fraction(1))],
        2: [(dot(cc), Fraction(1, 2))],
        3: [(dot(mul(cc, cc)), Fraction(1, 3)), (dot(Ac), Fraction(1, 6))],
        4: [
            (dot(mul(cc, cc, cc)), Fraction(1, 4)),
            (dot(mul(cc, Ac)), Fraction(1, 8)),
            (dot(Ac2), Fraction(1, 12)),
            (dot(AAc), Fraction(1, 24)),
        ],
        5: [
            (dot(mul(cc, cc, cc, cc)), Fraction(1, 5)),
            (dot(mul(cc, cc, Ac)), Fraction(1, 10)),
            (dot(mul(cc, Ac2)), Fraction(1, 15)),
            (dot(mul(cc, AAc)), Fraction(1, 30)),
            (dot(mul(Ac, Ac)), Fraction(1, 20)),
            (dot(mat(mul(cc, cc, cc))), Fraction(1, 20)),
            (dot(mat(mul(cc, Ac))), Fraction(1, 40)),
            (dot(mat(Ac2)), Fraction(1, 60)),
            (dot(mat(AAc)), Fraction(1, 120)),
        ],
    }
    return [vr for p in range(1, order + 1) for vr in conds[p]]


def test_tableau_is_a_5_4_pair_with_fsal() -> None:
    c, Arows, b, bhat = TABLEAU
    for i, row in enumerate(Arows):
        assert sum(row, Fraction(0)) == c[i], f"row {i} of A does not sum to c_{i}"
    assert tuple(Arows[-1]) + (Fraction(0),) == tuple(b), "first same as last: last row of A equals b"
    assert all(v == r for v, r in _order_conditions(Arows, b, c, 5)), "b must satisfy all 17 order-5 conditions"
    assert all(v == r for v, r in _order_conditions(Arows, bhat, c, 4)), "b_hat must satisfy the order-4 conditions"
    assert not all(v == r for v, r in _order_conditions(Arows, bhat, c, 5)), "b_hat is only fourth order"


def test_fixed_step_mode_converges_at_order_five() -> None:
    study = ode_fixed_step_study([20, 40, 80, 160], T=5.0, y0=(1.0, 0.5))
    slope, errs = study.slopes["max"], study.errors["max"]
    assert 4.8 < slope < 5.2, f"observed order {slope:.3f}, errors {errs}"


def test_adaptive_error_is_within_and_proportional_to_tolerance() -> None:
    """Global error ~ tolerance (slope 1) and steps ~ tolerance^(-1/5) (the fifth-order pair)."""
    y0 = np.array([[1.0, 0.5], [-0.3, 2.0]])
    t = np.linspace(0.0, 2.0, 5)
    tols = np.array([1e-6, 1e-8, 1e-10, 1e-12])
    errs, steps = [], []
    for tol in tols:
        sol = integrate(linear, y0, t, rtol=tol, atol=tol)
        err = max(np.abs(sol.y[b] - linear_exact(t, y0[b])).max() for b in range(2))
        assert err <= 5 * tol, f"tolerance {tol:g}: global error {err:.3g} exceeds 5 x tolerance"
        errs.append(err)
        steps.append(sol.n_accepted.mean())
    slope = np.polyfit(np.log(tols), np.log(errs), 1)[0]
    assert 0.9 < slope < 1.1, f"error should scale like the tolerance; slope {slope:.3f}, errors {errs}"
    step_slope = np.polyfit(np.log(tols), np.log(steps), 1)[0]
    assert -0.25 < step_slope < -0.15, f"steps should grow like tol^(-1/5); slope {step_slope:.3f}, steps {steps}"


@pytest.mark.parametrize(
    "times",
    [
        np.arange(201) * 0.01,  # uniform, t = 0 included
        np.concatenate([np.arange(100) * 0.01, 1.0 + np.arange(51) * 0.02]),  # first half dt, second half 2 dt
        np.array([0.013, 0.5, 0.5000001, 1.7, 3.0]),  # arbitrary, not starting at t0, one tiny gap
    ],
    ids=["uniform", "nonuniform", "given"],
)
def test_returned_grid_is_the_requested_one_and_states_sit_on_it(times: np.ndarray) -> None:
    y0 = np.array([[1.0, 0.5], [0.2, -1.0], [3.0, 0.0]])
    sol = integrate(linear, y0, times)
    assert sol.t.shape == times.shape and np.array_equal(sol.t, times)
    assert sol.y.shape == (3, times.size, 2)
    if times[0] == 0.0:
        assert np.array_equal(sol.y[:, 0], y0), "the output at t0 is the initial state itself"
    for b in range(3):
        np.testing.assert_allclose(sol.y[b], linear_exact(times, y0[b]), rtol=0, atol=1e-9)


def test_per_trajectory_grids() -> None:
    rng = np.random.default_rng(1)
    times = np.sort(rng.uniform(0.0, 3.0, (4, 30)), axis=1)
    y0 = rng.standard_normal((4, 2))
    sol = integrate(linear, y0, times)
    assert np.array_equal(sol.t, times)
    for b in range(4):
        np.testing.assert_allclose(sol.y[b], linear_exact(times[b], y0[b]), rtol=0, atol=1e-9)


def test_results_do_not_depend_on_batch_composition() -> None:
    """Per-trajectory step control + elementwise arithmetic: a trajectory alone and inside a batch
    of 100 (at any position, with any neighbours) takes the same steps: bit-identical results."""
    y0 = lorenz_states(100)
    t = np.arange(201) * 0.01
    batch = integrate(lorenz, y0, t)
    for b in (0, 37, 99):
        alone = integrate(lorenz, y0[b : b + 1], t)
        assert np.array_equal(alone.y[0], batch.y[b])
        assert alone.n_accepted[0] == batch.n_accepted[b] and alone.n_rejected[0] == batch.n_rejected[b]
    shuffled = np.random.default_rng(2).permutation(100)
    again = integrate(lorenz, y0[shuffled], t)
    assert np.array_equal(again.y, batch.y[shuffled])
    assert batch.n_accepted.min() != batch.n_accepted.max(), "step counts are per trajectory"


def test_per_trajectory_args_follow_their_trajectory() -> None:
    """Parameters passed in ``args`` (batch on the last axis) stay with their trajectory when the
    working set shrinks; results match scipy's DOP853 and are bit-identical alone or batched."""

    def decay(t: np.ndarray, y: np.ndarray, rate: np.ndarray, freq: np.ndarray) -> np.ndarray:
        return -rate * y + np.cos(freq * t)

    rng = np.random.default_rng(3)
    n = 12
    rate, freq = rng.uniform(0.5, 2.0, n), rng.uniform(1.0, 20.0, n)
    y0 = rng.standard_normal((n, 1))
    t_end = rng.uniform(0.5, 2.0, n)  # trajectories finish at different times
    times = t_end[:, None] * np.linspace(0, 1, 9)[None, :]
    sol = integrate(decay, y0, times, args=(rate, freq))
    ref = reference_solve(decay, y0, times, args=(rate, freq), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sol.y, ref, rtol=0, atol=1e-9)
    alone = integrate(decay, y0[5:6], times[5:6], args=(rate[5:6], freq[5:6]))
    assert np.array_equal(alone.y[0], sol.y[5])


def test_failures_name_the_trajectories() -> None:
    def riccati(t: np.ndarray, y: np.ndarray) -> np.ndarray:
        return y * y  # y0 = 1 blows up at t = 1; y0 = -1 decays

    with pytest.raises(IntegrationError, match="underflow") as e:
        integrate(riccati, np.array([[-1.0], [1.0], [-2.0]]), [2.0])
    assert e.value.trajectories.tolist() == [1]
    with pytest.raises(IntegrationError, match="more than 50 step attempts"):
        integrate(lorenz, lorenz_states(2), [2.0], max_steps=50)
    with pytest.raises(IntegrationError, match="non-finite initial state") as e:
        integrate(linear, np.array([[1.0, 0.0], [np.nan, 0.0]]), [1.0])
    assert e.value.trajectories.tolist() == [1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"times": [0.0, 0.5, 0.4]}, "strictly increasing"),
        ({"times": [-1.0, 1.0]}, "must not start before t0"),
        ({"times": np.zeros((3, 4)) + np.arange(4)}, "3 rows but y0 has 2"),
        ({"times": [1.0], "rtol": 0.0}, "rtol and atol must be > 0"),
        ({"times": [1.0], "step": -0.1}, "step must be > 0"),
    ],
)
def test_bad_arguments_are_refused_before_integrating(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        integrate(linear, np.ones((2, 2)), **kwargs)
