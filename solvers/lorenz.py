"""Trajectory generators of the continuum-attention paper: Lorenz-63 and a controlled ODE.

Calvello, Kovachki, Levine & Stuart, "Continuum Attention for Neural Operators", Sec. 6.1 (see
``PROTOCOLS.md``, "Lorenz-63 (continuum attention protocol)").

``lorenz63``
    x' = sigma (y - x),  y' = x (rho - z) - y,  z' = x y - beta z   (sigma, rho, beta = 10, 28, 8/3),
    initial state x0, y0 ~ U[-15, 15], z0 ~ U[0, 40], optional spin-up (default none: the protocol
    samples the initial state directly), T = 2. Fields ``x``, ``y``, ``z`` (sample, t) and the
    initial values ``y0``, ``z0`` (sample). Roles give task A of the paper, eq. (40),
    {x(t), y(0), z(0)} -> {y(t), z(t)}: ``x``, ``y0``, ``z0`` are inputs, ``y``, ``z`` outputs.
    Task B, x(t) -> y(t), is the same file read with ``inputs: [x], outputs: [y]``
    (``datasets.<name>.task``); nothing is lost either way since all three components are stored.

``controlled_ode``
    dz = sin(z) du, z(0) = z0 = 1, u(t) = sum_{j=1..J} xi_j sin(pi eta_j t), xi_j ~ N(0, 1),
    eta_j ~ U[0, 10], J = 10 (paper, eq. CDE; ``decay: true`` uses xi_j / j as the authors' code
    does). The equation is separable in u: dz/du = sin z, so for *every* path u and |z0| < pi
    z(t) = 2 arctan(tan(z0/2) exp(u(t) - u(0))) exactly (u(0) = 0 here). The default
    ``method: closed_form`` evaluates this (exact to rounding, ~40x faster); ``method: dopri5``
    (or ``scipy``) integrates dz/dt = sin(z) u'(t) with u' analytic instead. The two agree to
    ~2e-7 at rtol = atol = 1e-10: where z comes close to 0 or pi the flow amplifies the absolute
    tolerance by sin z(t) / sin z(s) (up to ~1e3 here), which the exact form does not suffer. Fields
    ``u`` (input) and ``z`` (output) on the time grid, and the coefficients ``xi``, ``eta``
    (sample, mode).

Time grids (both generators)
    ``uniform``: t_n = n dt for all n with n dt <= T (``endpoint: true``, the paper's eq. (42):
    201 points for T = 2, dt = 0.01) or n dt < T (``endpoint: false``: 200 points, the grid of the
    authors' code, ``arange(0, T, dt)``); t_n is computed as ``n * dt``, not by accumulation. When T
    is not a multiple of dt (dt = 0.0075, 0.015) the grid stops at the last n dt below T.
    ``nonuniform``: the uniform grid's first half at dt and second half at 2 dt, eq. (41): of the
    M uniform points keep n < M // 2, then every other point from n = M // 2 (201 -> 151 points,
    0, ..., 1.00, 1.02, ..., 2.00; with ``endpoint: false`` 200 -> 150 as in the authors' code).
    (Eq. (41) literally reads {2 n dt}_{n=N/2+1}^{3N/4}, times beyond T; we take the stated meaning,
    spacing 2 dt on the second half, which is also what the authors' code does.)
    ``random``: one grid per sample with as many points as the uniform grid: 0, the uniform grid's
    last time, and sorted U(0, t_end) points between, drawn from the sample's RNG after its other
    random numbers; stored as a per-sample coordinate ``t(sample, t)``.
    ``explicit``: the given ``times`` (strictly increasing, >= 0; the initial state is at t = 0;
    ``T`` and ``dt`` are not used).
    Shared grids are stored once as the coordinate ``t(t)``.

Randomness: sample ``i`` draws from ``sample_rng(seed, index_offset + i)`` (opflow.data.provenance),
in a fixed order (initial state or xi then eta, then random times), so a sample does not depend on
the block or shard it is computed in, and the same seed gives the *same trajectories* on every
grid (uniform at any dt, non-uniform, random): discretisation test sets are the same trajectories
sampled differently. ``index_offset`` regenerates samples of another set, e.g. its test split
(indices 8000..8999) at another dt with ``index_offset: 8000``.

Integration: :func:`solvers.ode.integrate` (batched Dormand-Prince 5(4) with per-trajectory step
control, stepping exactly onto the output times, rtol = atol = 1e-10), or scipy's DOP853 per
trajectory (``integrator``/``method: scipy``) as a fallback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Literal

import numpy as np

from opflow.data.errors import ConfigError
from opflow.data.format import Variable
from opflow.data.provenance import sample_rng
from solvers.base import FieldSpec, Generator, SolverError, register
from solvers.ode import IntegrationError, integrate, reference_solve

GRID_KINDS = ("uniform", "nonuniform", "random", "explicit")
MAX_POINTS = 1_000_000


# ---- time grids -------------------------------------------------------------------------------------


def uniform_times(T: float, dt: float, endpoint: bool = True) -> np.ndarray:
    """``n * dt`` for all ``n >= 0`` with ``n dt <= T`` (``endpoint``) or ``n dt < T``.

    ``T / dt`` within 1e-9 (relative) of an integer counts as that integer, so T = 2, dt = 0.01 gives
    201 points ending at 2.0 exactly (200 without the endpoint).
    """
    r = T / dt
    n = round(r)
    exact = abs(r - n) <= 1e-9 * max(1.0, r)
    last = n if exact else math.floor(r)
    count = last + 1 if (endpoint or not exact) else last
    return np.arange(count, dtype=np.float64) * dt


def nonuniform_times(T: float, dt: float, endpoint: bool = True) -> np.ndarray:
    """The uniform grid with its second half at ``2 dt``: paper eq. (41) (see module docstring)."""
    u = uniform_times(T, dt, endpoint)
    half = u.size // 2
    return np.concatenate([u[:half], u[half::2]])


def random_times(rng: np.random.Generator, count: int, t_end: float) -> np.ndarray:
    """``count`` increasing times: 0, ``count - 2`` sorted U(0, t_end) draws, ``t_end``."""
    inner = np.sort(rng.uniform(0.0, t_end, max(count - 2, 0)))
    return np.concatenate([[0.0], inner, [t_end]])


# ---- parameters --------------------------------------------------------------------------------------


def _finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be finite, got {value}")


def _range(name: str, r: tuple[float, float]) -> None:
    if len(r) != 2 or not all(math.isfinite(v) for v in r) or not r[0] < r[1]:
        raise ConfigError(f"{name} must be [low, high] with finite low < high, got {list(r)}")


@dataclass(frozen=True)
class TrajectoryParams:
    """Time grid and integrator settings shared by the trajectory generators (module docstring)."""

    T: float = 2.0
    dt: float = 0.01
    grid: Literal["uniform", "nonuniform", "random", "explicit"] = "uniform"
    endpoint: bool = True
    times: tuple[float, ...] | None = None
    index_offset: int = 0
    rtol: float = 1e-10
    atol: float = 1e-10

    def __post_init__(self) -> None:
        if self.grid not in GRID_KINDS:
            raise ConfigError(f"grid {self.grid!r} is unknown; use one of {list(GRID_KINDS)}")
        _finite("T", self.T)
        _finite("dt", self.dt)
        if not self.T > 0:
            raise ConfigError(f"T must be > 0, got {self.T}")
        if not 0 < self.dt <= self.T:
            raise ConfigError(f"dt must be in (0, T] = (0, {self.T}], got {self.dt}")
        if self.T / self.dt >= MAX_POINTS:
            raise ConfigError(f"T / dt = {self.T / self.dt:.3g} points is too many (limit {MAX_POINTS}); raise dt")
        if self.times is not None:
            object.__setattr__(self, "times", tuple(float(v) for v in self.times))
            if self.grid != "explicit":
                raise ConfigError(f"times is only used with grid: explicit (grid is {self.grid!r}); remove times or set grid: explicit")
            t = np.asarray(self.times)
            if t.size < 1 or not np.all(np.isfinite(t)) or t[0] < 0 or np.any(np.diff(t) <= 0):
                raise ConfigError("times must be a non-empty, strictly increasing list of finite values >= 0")
        elif self.grid == "explicit":
            raise ConfigError("grid: explicit needs times: [t_0, t_1, ...]")
        if self.index_offset < 0:
            raise ConfigError(f"index_offset must be >= 0, got {self.index_offset}")
        if not (1e-14 <= self.rtol < 1 and 0 < self.atol < 1):
            raise ConfigError(f"rtol must be in [1e-14, 1) and atol in (0, 1), got rtol={self.rtol}, atol={self.atol}")


@dataclass(frozen=True)
class Lorenz63Params(TrajectoryParams):
    """Lorenz-63 parameters, initial-state box and spin-up (defaults: the paper's protocol)."""

    sigma: float = 10.0
    rho: float = 28.0
    beta: float = 8.0 / 3.0
    x0_range: tuple[float, float] = (-15.0, 15.0)
    y0_range: tuple[float, float] = (-15.0, 15.0)
    z0_range: tuple[float, float] = (0.0, 40.0)
    spin_up: float = 0.0
    integrator: Literal["dopri5", "scipy"] = "dopri5"

    def __post_init__(self) -> None:
        super().__post_init__()
        for n in ("sigma", "rho", "beta"):
            _finite(n, getattr(self, n))
        for n in ("x0_range", "y0_range", "z0_range"):
            object.__setattr__(self, n, tuple(float(v) for v in getattr(self, n)))
            _range(n, getattr(self, n))
        _finite("spin_up", self.spin_up)
        if self.spin_up < 0:
            raise ConfigError(f"spin_up must be >= 0, got {self.spin_up}")
        if self.integrator not in ("dopri5", "scipy"):
            raise ConfigError(f"integrator {self.integrator!r} is unknown; use 'dopri5' or 'scipy'")


@dataclass(frozen=True)
class ControlledODEParams(TrajectoryParams):
    """Controlled ODE parameters (defaults: the paper, J = 10 modes, eta ~ U[0, 10], z0 = 1)."""

    n_modes: int = 10
    eta_max: float = 10.0
    decay: bool = False
    z0: float = 1.0
    method: Literal["closed_form", "dopri5", "scipy"] = "closed_form"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_modes < 1:
            raise ConfigError(f"n_modes must be >= 1, got {self.n_modes}")
        _finite("eta_max", self.eta_max)
        _finite("z0", self.z0)
        if not self.eta_max > 0:
            raise ConfigError(f"eta_max must be > 0, got {self.eta_max}")
        if self.method not in ("dopri5", "scipy", "closed_form"):
            raise ConfigError(f"method {self.method!r} is unknown; use 'dopri5', 'scipy' or 'closed_form'")
        if self.method == "closed_form" and not abs(self.z0) < math.pi:
            raise ConfigError(f"method: closed_form needs |z0| < pi, got z0 = {self.z0}; use method: dopri5")


# ---- right-hand sides --------------------------------------------------------------------------------


def lorenz63_rhs(sigma: float, rho: float, beta: float):
    """The Lorenz-63 vector field in the batched convention of :mod:`solvers.ode` (y: (3, n))."""

    def f(t: np.ndarray, y: np.ndarray) -> np.ndarray:
        x, yy, z = y
        return np.stack([sigma * (yy - x), x * (rho - z) - yy, x * yy - beta * z])

    return f


def controlled_rhs(t: np.ndarray, z: np.ndarray, amp: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """dz/dt = sin(z) u'(t), u'(t) = sum_j amp_j omega_j cos(omega_j t); amp, omega: (J, n)."""
    du = np.sum(amp * omega * np.cos(omega * t), axis=0)
    return np.sin(z) * du


def control_path(t: np.ndarray, amp: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """u(t) = sum_j amp_j sin(omega_j t) for samples ``amp, omega: (B, J)`` at ``t: (M,) or (B, M)``."""
    u = np.zeros((amp.shape[0], np.shape(t)[-1]))
    for j in range(amp.shape[1]):  # one mode at a time: memory O(B M), not O(B J M)
        u += amp[:, j, None] * np.sin(omega[:, j, None] * t)
    return u


def controlled_closed_form(u: np.ndarray, z0: float, u0: float | np.ndarray = 0.0) -> np.ndarray:
    """Exact solution of dz = sin(z) du: z = 2 arctan(tan(z0/2) exp(u - u0)), for |z0| < pi."""
    return 2.0 * np.arctan(np.tan(0.5 * z0) * np.exp(u - u0))


# ---- generators --------------------------------------------------------------------------------------


class _TrajectoryGenerator(Generator):
    """Shared time-grid handling: dims, the ``t`` coordinate, per-sample grids, error mapping."""

    block_size: ClassVar[int] = 2048

    @cached_property
    def base_times(self) -> np.ndarray:
        """The grid for shared kinds; for ``random`` the uniform grid giving count and end time."""
        p = self.params
        if p.grid == "explicit":
            return np.asarray(p.times, dtype=np.float64)
        if p.grid == "nonuniform":
            return nonuniform_times(p.T, p.dt, p.endpoint)
        return uniform_times(p.T, p.dt, p.endpoint)

    @property
    def per_sample_grid(self) -> bool:
        return self.params.grid == "random"

    def dims(self) -> dict[str, int]:
        return {"t": int(self.base_times.size)}

    def _time_attrs(self) -> dict[str, Any]:
        p = self.params
        if p.grid == "explicit":
            return {"units": "1", "long_name": "time", "grid": p.grid}
        return {"units": "1", "long_name": "time", "grid": p.grid, "dt": p.dt, "endpoint": int(p.endpoint)}

    def coords(self) -> dict[str, Variable]:
        if self.per_sample_grid:
            return {}
        return {"t": Variable(("t",), self.base_times, self._time_attrs())}

    def _time_field(self) -> dict[str, FieldSpec]:
        if not self.per_sample_grid:
            return {}
        return {"t": FieldSpec(("t",), "1", "time (a grid per sample)", "coordinate", "float64")}

    def _sample_times(self, rngs: list[np.random.Generator]) -> np.ndarray:
        """Shared grid ``(M,)``, or ``(B, M)`` per-sample grids drawn from each sample's RNG."""
        if not self.per_sample_grid:
            return self.base_times
        base = self.base_times
        return np.stack([random_times(r, base.size, float(base[-1])) for r in rngs])

    def _rngs(self, seed: int, indices: np.ndarray) -> list[np.random.Generator]:
        return [sample_rng(seed, int(i) + self.params.index_offset) for i in indices]

    def _solve(self, f, y0, times, args, seed: int, indices: np.ndarray, use_scipy: bool) -> np.ndarray:
        p = self.params
        try:
            if use_scipy:
                return reference_solve(f, y0, times, args=args, rtol=p.rtol, atol=p.atol)
            return integrate(f, y0, times, args=args, rtol=p.rtol, atol=p.atol).y
        except IntegrationError as e:
            i = int(indices[e.trajectories[0]]) if e.trajectories.size else None
            raise SolverError(f"{self.name}: {e}", index=i, seed=seed) from None


@register
class Lorenz63(_TrajectoryGenerator):
    """Lorenz-63 trajectories from uniform random initial states (module docstring)."""

    name = "lorenz63"
    Params = Lorenz63Params

    def fields(self) -> dict[str, FieldSpec]:
        return {
            "x": FieldSpec(("t",), "1", "Lorenz-63 x(t) (observed)", "input"),
            "y0": FieldSpec((), "1", "Lorenz-63 y(0) (initial value)", "input"),
            "z0": FieldSpec((), "1", "Lorenz-63 z(0) (initial value)", "input"),
            "y": FieldSpec(("t",), "1", "Lorenz-63 y(t)", "output"),
            "z": FieldSpec(("t",), "1", "Lorenz-63 z(t)", "output"),
            **self._time_field(),
        }

    def initial_states(self, rngs: list[np.random.Generator]) -> np.ndarray:
        """(B, 3) initial states, one ``uniform(low, high)`` draw of 3 numbers per sample."""
        p = self.params
        lo = np.array([p.x0_range[0], p.y0_range[0], p.z0_range[0]])
        hi = np.array([p.x0_range[1], p.y0_range[1], p.z0_range[1]])
        return np.stack([r.uniform(lo, hi) for r in rngs])

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        p = self.params
        indices = np.asarray(indices)
        rngs = self._rngs(seed, indices)
        s0 = self.initial_states(rngs)
        times = self._sample_times(rngs)
        f = lorenz63_rhs(p.sigma, p.rho, p.beta)
        scipy = p.integrator == "scipy"
        if p.spin_up > 0:
            s0 = self._solve(f, s0, [p.spin_up], (), seed, indices, scipy)[:, 0]
        traj = self._solve(f, s0, times, (), seed, indices, scipy)
        out = {"x": traj[..., 0], "y": traj[..., 1], "z": traj[..., 2], "y0": s0[:, 1], "z0": s0[:, 2]}
        if self.per_sample_grid:
            out["t"] = times
        return out


@register
class ControlledODE(_TrajectoryGenerator):
    """The controlled ODE dz = sin(z) du driven by random sine series (module docstring)."""

    name = "controlled_ode"
    Params = ControlledODEParams

    def dims(self) -> dict[str, int]:
        return {**super().dims(), "mode": self.params.n_modes}

    def fields(self) -> dict[str, FieldSpec]:
        return {
            "u": FieldSpec(("t",), "1", "control u(t) = sum_j xi_j sin(pi eta_j t)", "input"),
            "z": FieldSpec(("t",), "1", "state z(t) of dz = sin(z) du", "output"),
            "xi": FieldSpec(("mode",), "1", "amplitudes xi_j (divided by j when decay)", "auxiliary", "float64"),
            "eta": FieldSpec(("mode",), "1", "frequencies eta_j (u has sin(pi eta_j t))", "auxiliary", "float64"),
            **self._time_field(),
        }

    def coefficients(self, rngs: list[np.random.Generator]) -> tuple[np.ndarray, np.ndarray]:
        """(B, J) amplitudes (xi_j or xi_j / j) and frequencies eta_j; xi drawn before eta."""
        p = self.params
        xi = np.empty((len(rngs), p.n_modes))
        eta = np.empty_like(xi)
        for b, r in enumerate(rngs):
            xi[b] = r.standard_normal(p.n_modes)
            eta[b] = r.uniform(0.0, p.eta_max, p.n_modes)
        if p.decay:
            xi = xi / np.arange(1, p.n_modes + 1)
        return xi, eta

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        p = self.params
        indices = np.asarray(indices)
        rngs = self._rngs(seed, indices)
        xi, eta = self.coefficients(rngs)
        times = self._sample_times(rngs)
        omega = np.pi * eta
        u = control_path(times, xi, omega)
        if p.method == "closed_form":
            z = controlled_closed_form(u, p.z0)
        else:
            z0 = np.full((indices.size, 1), p.z0)
            args = (np.ascontiguousarray(xi.T), np.ascontiguousarray(omega.T))
            z = self._solve(controlled_rhs, z0, times, args, seed, indices, p.method == "scipy")[..., 0]
        out = {"u": u, "z": z, "xi": xi, "eta": eta}
        if self.per_sample_grid:
            out["t"] = times
        return out
