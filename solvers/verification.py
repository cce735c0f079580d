"""Convergence studies of the solvers on problems with known solutions: the one definition of each
manufactured or exact problem, shared by the tests (``tests/solvers/``) and the convergence plot
(``python -m benchmarks.convergence``).

Every study solves its problem on a sequence of mesh widths ``h`` or time steps ``dt`` and returns
a :class:`Study`: the sequence, the error in each norm, the expected order and the observed order
(the least-squares slope of log error against log h, :func:`slope`). The sequences are arguments:
the tests pass theirs, the benchmark longer ones. Heavy packages (dolfinx, torch, scipy) are
imported inside the functions, so ``import solvers.verification`` stays cheap.

(a) FD Darcy, 5-point scheme (:func:`darcy_fd_study`, :func:`solvers.darcy.solve`)::

        -div(a grad u) = f on (0, 1)^2, u = 0 on the boundary,
        u = sin(pi x) sin(2 pi y),  a = 1 + sin(2 pi x + 1) cos(pi y) / 2  (in [1/2, 3/2]),
        f = -(a_x u_x + a_y u_y) + 5 pi^2 a u   (Laplacian u = -5 pi^2 u; derived by hand).

    u vanishes on the boundary, a is smooth and varies in both directions, so both face means
    (arithmetic, harmonic) are exercised. Errors at the s x s nodes, h = 1/(s - 1): max norm and
    discrete L2 norm (h^2 sum e^2)^(1/2). Expected order 2.

(b) FEM Darcy, dolfinx Lagrange elements (:func:`darcy_fem_study`, :class:`solvers.darcy_fem.DarcyFEM`)::

        -div(a grad u) = f,  a = 1 + sin(2 pi x) cos(3 pi y) / 2 + x^2,
        u = 16 x (1 - x) y (1 - y) (x - 1/2) (y - 1/2)       (unit square and L-shape),
        u = 16 x (1 - x) y (1 - y) (|x - c|^2 - R^2) / R^2  (square with a hole of radius R = 1/4
                                                              about c = (1/2, 1/2)),

    f = -div(a grad u) formed symbolically in UFL (:func:`fem_source`). The first u vanishes on the
    sides of the unit square and on the lines x = 1/2, y = 1/2, hence on the boundary of the
    L-shape (0, 1)^2 minus [1/2, 1]^2 too. P1 takes the data path (a DG0 coefficient from the
    centroid values, :func:`fem_a_numpy`), P2 the exact coefficient (a DG0 coefficient would limit
    any element to L2 order 2). Errors: L2 norm and H1 seminorm of u_h - u by quadrature
    (:func:`solvers.darcy_fem.error_norms`). Expected orders: P1 2 (L2) and 1 (H1), P2 3 and 2.
    The unit square uses the structured mesh with n = 1/h squares a side, the other domains
    gmsh meshes of size h (:func:`meshes.domains.cached_mesh`).

(c) Navier-Stokes vorticity time stepping (:func:`solvers.navier_stokes.solve`), two problems:

    * Taylor-Green (:func:`taylor_green`, :func:`taylor_green_study`): on [0, 2 pi)^2,
      w = 2 k cos(k x) cos(k y) exp(-2 nu k^2 t), an exact solution because u . grad w vanishes
      identically; n = 32, k = 2, nu = 0.05, t = 1. Only the viscous term is active, which
      ``fno`` and ``heun_cn`` both treat by Crank-Nicolson: expected order 2 (``etdrk4`` is exact
      here). Error: max norm relative to max |w(t)|.
    * Forced flow (:func:`forced_flow`, :func:`ns_forced_study`): a smooth random initial field
      (:func:`smooth_field`, seed 0, two samples, not band limited), Kolmogorov forcing of
      wavenumber 1, nu = 0.01, n = 32, t = 1, against a fine ``etdrk4`` reference (dt = 1/512).
      No closed form; it checks the full nonlinear scheme. Expected orders: ``fno`` 1, ``heun_cn``
      2, ``etdrk4`` 4. Error: L2 norm relative to the reference.

(d) Batched Dormand-Prince 5(4) in fixed-step mode (:func:`ode_fixed_step_study`,
    :func:`solvers.ode.integrate`)::

        y' = A y,  A = [[-0.1, 2], [-2, -0.1]],  y(t) = exp(-0.1 t) R(2 t) y0,

    R a rotation (:func:`linear`, :func:`linear_exact`), y0 = (1, 1/2), T = 5, steps T/n. Error:
    max norm at T. Expected order 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "LINEAR_A",
    "NS_SCHEME_ORDERS",
    "R_HOLE",
    "ForcedFlow",
    "Study",
    "darcy_fd_study",
    "darcy_fem_study",
    "fd_a_exact",
    "fd_f_exact",
    "fd_grid",
    "fd_u_exact",
    "fem_a_exact",
    "fem_a_numpy",
    "fem_source",
    "forced_flow",
    "linear",
    "linear_exact",
    "ns_forced_study",
    "ode_fixed_step_study",
    "slope",
    "smooth_field",
    "solve_mms",
    "taylor_green",
    "taylor_green_study",
    "u_perforated",
    "u_square_and_l",
]

PI = math.pi
TWO_PI = 2 * math.pi


def slope(h: Sequence[float], errors: Sequence[float]) -> float:
    """Least-squares slope of log(error) against log(h): the observed order."""
    return float(np.polyfit(np.log(h), np.log(errors), 1)[0])


@dataclass(frozen=True)
class Study:
    """One convergence study: ``errors[norm][i]`` at ``steps[i]`` (h or dt, per ``variable``)."""

    name: str
    label: str
    variable: str  # "h" or "dt"
    steps: list[float]
    errors: dict[str, list[float]]
    expected: dict[str, float]  # the order each norm should show
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def slopes(self) -> dict[str, float]:
        """The observed order in each norm (least-squares fit over all steps)."""
        return {norm: slope(self.steps, e) for norm, e in self.errors.items()}

    def local_orders(self, norm: str) -> np.ndarray:
        """The order between each pair of consecutive steps."""
        e, h = np.asarray(self.errors[norm]), np.asarray(self.steps)
        return np.log(e[:-1] / e[1:]) / np.log(h[:-1] / h[1:])

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "variable": self.variable,
            "steps": list(self.steps),
            "errors": {k: list(v) for k, v in self.errors.items()},
            "expected_order": dict(self.expected),
            "observed_order": self.slopes,
            "local_orders": {k: self.local_orders(k).tolist() for k in self.errors},
            **({"meta": self.meta} if self.meta else {}),
        }


# ------------------------------------------------------------------------------ (a) FD Darcy


def fd_u_exact(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.sin(PI * x) * np.sin(2 * PI * y)


def fd_a_exact(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return 1 + 0.5 * np.sin(2 * PI * x + 1) * np.cos(PI * y)


def fd_f_exact(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ux = PI * np.cos(PI * x) * np.sin(2 * PI * y)
    uy = 2 * PI * np.sin(PI * x) * np.cos(2 * PI * y)
    ax = PI * np.cos(2 * PI * x + 1) * np.cos(PI * y)
    ay = -0.5 * PI * np.sin(2 * PI * x + 1) * np.sin(PI * y)
    return -(ax * ux + ay * uy) + 5 * PI**2 * fd_a_exact(x, y) * fd_u_exact(x, y)


def fd_grid(s: int) -> tuple[np.ndarray, np.ndarray]:
    """The s x s node grid of the unit square, ``indexing="ij"``."""
    x = np.linspace(0, 1, s)
    return np.meshgrid(x, x, indexing="ij")


def darcy_fd_study(sizes: Sequence[int], *, face_mean: str = "arithmetic", method: str = "pcg_poisson", rtol: float = 1e-12) -> Study:
    """Problem (a) on s x s node grids, s in ``sizes``; ``meta`` holds each solve's residual and method."""
    from solvers.darcy import solve

    hs, emax, el2, residuals, methods = [], [], [], [], []
    for s in sizes:
        X, Y = fd_grid(s)
        u, info = solve(fd_a_exact(X, Y), fd_f_exact, face_mean=face_mean, method=method, rtol=rtol)
        residuals.append(float(info.residual))
        methods.append(info.method)
        e = u - fd_u_exact(X, Y)
        h = 1 / (s - 1)
        hs.append(h)
        emax.append(float(np.abs(e).max()))
        el2.append(float(np.sqrt(h * h * np.sum(e**2))))
    return Study(
        name=f"darcy_fd_{face_mean}_{method}",
        label=f"{face_mean} mean",
        variable="h",
        steps=hs,
        errors={"max": emax, "L2": el2},
        expected={"max": 2.0, "L2": 2.0},
        meta={"sizes": [int(s) for s in sizes], "face_mean": face_mean, "method": method, "residuals": residuals, "methods": methods},
    )


# ------------------------------------------------------------------------------ (b) FEM Darcy


def _ufl() -> Any:
    from solvers.mpi import dolfinx_modules

    return dolfinx_modules().ufl


def fem_a_exact(x: Any) -> Any:
    """The coefficient as a UFL expression of the spatial coordinate ``x``."""
    ufl = _ufl()
    return 1 + 0.5 * ufl.sin(2 * PI * x[0]) * ufl.cos(3 * PI * x[1]) + x[0] ** 2


def fem_a_numpy(p: np.ndarray) -> np.ndarray:
    """The coefficient at points ``p`` (N, 2)."""
    return 1 + 0.5 * np.sin(2 * PI * p[:, 0]) * np.cos(3 * PI * p[:, 1]) + p[:, 0] ** 2


def u_square_and_l(x: Any) -> Any:
    """Vanishes on the boundary of the unit square and of the L-shape (corner 1/2)."""
    return 16 * x[0] * (1 - x[0]) * x[1] * (1 - x[1]) * (x[0] - 0.5) * (x[1] - 0.5)


R_HOLE = 0.25


def u_perforated(x: Any) -> Any:
    """Vanishes on the unit square's sides and on the circle of radius 1/4 about (1/2, 1/2)."""
    return 16 * x[0] * (1 - x[0]) * x[1] * (1 - x[1]) * ((x[0] - 0.5) ** 2 + (x[1] - 0.5) ** 2 - R_HOLE**2) / R_HOLE**2


def fem_source(u_exact: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """f = -div(a grad u) for the exact solution ``u_exact``, as a UFL expression of ``x``."""

    def f(x: Any) -> Any:
        ufl = _ufl()
        return -ufl.div(fem_a_exact(x) * ufl.grad(u_exact(x)))

    return f


def solve_mms(mesh: Any, degree: int, u_exact: Callable[[Any], Any]) -> tuple[float, float]:
    """``(L2 error, H1 seminorm error)`` of problem (b) with ``u_exact`` on ``mesh``.

    P1: the data path (DG0 coefficient from centroid values); P2: the exact coefficient, so that
    the observed order is the element's (a DG0 coefficient limits any element to L2 order 2)."""
    from solvers.darcy_fem import DarcyFEM, error_norms

    if degree == 1:
        s = DarcyFEM(mesh, degree=1, source=fem_source(u_exact), quadrature_degree=6)
        s.set_cell_coefficient(fem_a_numpy(s.cell_midpoints))
    else:
        s = DarcyFEM(mesh, degree=2, source=fem_source(u_exact), coefficient=fem_a_exact, quadrature_degree=8)
    return error_norms(s.solve(), u_exact)


def darcy_fem_study(degree: int, hs: Sequence[float], *, domain: str = "unit_square", u_exact: Callable[[Any], Any] = u_square_and_l, **mesh_options: Any) -> Study:
    """Problem (b) with P``degree`` elements at mesh widths ``hs``.

    ``domain="unit_square"``: the structured mesh with n = round(1/h) squares a side; any other
    name: the gmsh domain of :mod:`meshes.domains` with mesh size h (and ``mesh_options``, e.g.
    ``holes``), read through its mesh cache."""
    from solvers.darcy_fem import gmsh_mesh, unit_square_mesh

    errs = []
    for h in hs:
        if domain == "unit_square":
            mesh = unit_square_mesh(round(1 / h))
        else:
            from meshes.domains import cached_mesh

            mesh = gmsh_mesh(cached_mesh(domain, mesh_size=h, **mesh_options))
        errs.append(solve_mms(mesh, degree, u_exact))
    e = np.array(errs, dtype=float)
    return Study(
        name=f"darcy_fem_{domain}_p{degree}",
        label=f"P{degree}",
        variable="h",
        steps=[float(h) for h in hs],
        errors={"L2": e[:, 0].tolist(), "H1": e[:, 1].tolist()},
        expected={"L2": degree + 1.0, "H1": float(degree)},
        meta={"domain": domain, "degree": degree, "u_exact": u_exact.__name__},
    )


# ------------------------------------------------------------------------------ (c) Navier-Stokes

NS_SCHEME_ORDERS = {"fno": 1.0, "heun_cn": 2.0, "etdrk4": 4.0}


def taylor_green(n: int, k: int, nu: float, t: float) -> np.ndarray:
    """w = 2 k cos(kx) cos(ky) exp(-2 nu k^2 t) on [0, 2 pi)^2, shape (1, n, n): its advection
    vanishes identically."""
    from solvers.navier_stokes import grid_points

    x = grid_points(n, TWO_PI)
    return (2 * k * np.cos(k * x)[:, None] * np.cos(k * x)[None, :] * np.exp(-2 * nu * k**2 * t))[None]


def taylor_green_study(scheme: str, dts: Sequence[float], *, n: int = 32, k: int = 2, nu: float = 0.05, t: float = 1.0, device: str = "cpu") -> Study:
    """Problem (c), Taylor-Green, for ``fno`` or ``heun_cn`` (Crank-Nicolson on the only active term)."""
    from solvers.navier_stokes import solve

    if scheme not in ("fno", "heun_cn"):
        raise ValueError(f"taylor_green_study is for 'fno' and 'heun_cn' (etdrk4 is exact here), got {scheme!r}")
    w0, exact = taylor_green(n, k, nu, 0.0), taylor_green(n, k, nu, t)[0]
    scale = np.abs(exact).max()
    kw = dict(length=TWO_PI, nu=nu, scheme=scheme, cfl_limit=10, device=device)
    errs = [float(np.abs(solve(w0, [t], dt=dt, **kw)[0, 0] - exact).max() / scale) for dt in dts]
    return Study(
        name=f"taylor_green_{scheme}",
        label=scheme,
        variable="dt",
        steps=[float(dt) for dt in dts],
        errors={"max": errs},
        expected={"max": 2.0},
        meta={"n": n, "k": k, "nu": nu, "t": t, "device": device},
    )


def smooth_field(n: int, seed: int, batch: int = 1, band_limited: bool = True) -> np.ndarray:
    """A smooth random mean-zero field of unit standard deviation, optionally inside the 2/3 band."""
    from solvers.navier_stokes import dealias_mask

    rng = np.random.default_rng(seed)
    w_hat = np.fft.rfft2(rng.standard_normal((batch, n, n)))
    m2 = np.fft.fftfreq(n, 1 / n)[:, None] ** 2 + np.fft.rfftfreq(n, 1 / n)[None, :] ** 2
    w_hat *= np.exp(-0.05 * m2)
    if band_limited:
        w_hat *= dealias_mask(n)
    w_hat[:, 0, 0] = 0
    w = np.fft.irfft2(w_hat, s=(n, n))
    return w / w.std(axis=(1, 2), keepdims=True)


@dataclass(frozen=True)
class ForcedFlow:
    """Problem (c), forced flow: ``solve(w0, [t], scheme=..., dt=..., **solve_kw)`` against ``reference``."""

    w0: np.ndarray
    t: float
    solve_kw: dict[str, Any]
    reference: np.ndarray
    reference_dt: float

    def error(self, w: np.ndarray) -> float:
        """L2 norm of ``w - reference`` relative to the reference's."""
        return float(np.linalg.norm(w - self.reference) / np.linalg.norm(self.reference))


def forced_flow(*, n: int = 32, nu: float = 0.01, t: float = 1.0, device: str = "cpu", reference_dt: float = 1 / 512) -> ForcedFlow:
    """The forced-flow problem and its ``etdrk4`` reference at step ``reference_dt``."""
    from solvers.navier_stokes import kolmogorov_forcing, solve

    w0 = smooth_field(n, 0, batch=2, band_limited=False)
    kw = dict(length=TWO_PI, nu=nu, forcing=kolmogorov_forcing(n, 1), device=device, cfl_limit=10.0)
    ref = solve(w0, [t], scheme="etdrk4", dt=reference_dt, **kw)
    return ForcedFlow(w0=w0, t=t, solve_kw=kw, reference=ref, reference_dt=reference_dt)


def ns_forced_study(scheme: str, dts: Sequence[float], flow: ForcedFlow | None = None) -> Study:
    """Problem (c), forced flow, for ``scheme`` at steps ``dts`` (``flow``: default :func:`forced_flow`)."""
    from solvers.navier_stokes import solve

    flow = flow if flow is not None else forced_flow()
    errs = [flow.error(solve(flow.w0, [flow.t], scheme=scheme, dt=dt, **flow.solve_kw)) for dt in dts]
    return Study(
        name=f"ns_forced_{scheme}",
        label=scheme,
        variable="dt",
        steps=[float(dt) for dt in dts],
        errors={"L2": errs},
        expected={"L2": NS_SCHEME_ORDERS[scheme]},
        meta={"n": int(flow.w0.shape[-1]), "nu": flow.solve_kw["nu"], "t": flow.t, "reference": f"etdrk4, dt = {flow.reference_dt:g}", "device": flow.solve_kw["device"]},
    )


# ------------------------------------------------------------------------------ (d) ODE

# y' = A y with eigenvalues -0.1 +- 2i: y(t) = e^{-0.1 t} R(2t) y0, R a rotation
LINEAR_A = np.array([[-0.1, 2.0], [-2.0, -0.1]])


def linear(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    return LINEAR_A @ y


def linear_exact(t: np.ndarray, y0: np.ndarray) -> np.ndarray:
    """exp(A t) y0 for y0 (2,) and t (M,): (M, 2)."""
    c, s, g = np.cos(2 * t), np.sin(2 * t), np.exp(-0.1 * t)
    return np.stack([g * (c * y0[0] + s * y0[1]), g * (-s * y0[0] + c * y0[1])], axis=-1)


def ode_fixed_step_study(ns: Sequence[int], *, T: float = 5.0, y0: Sequence[float] = (1.0, 0.5)) -> Study:
    """Problem (d) with n fixed steps of T/n, n in ``ns``."""
    from solvers.ode import integrate

    y = np.array([y0], dtype=float)
    exact = linear_exact(np.array([T]), y[0])[0]
    errs = [float(np.abs(integrate(linear, y, [T], step=T / n).y[0, -1] - exact).max()) for n in ns]
    return Study(
        name="ode_dopri5_fixed_step",
        label="DP5(4)",
        variable="dt",
        steps=[T / n for n in ns],
        errors={"max": errs},
        expected={"max": 5.0},
        meta={"T": T, "y0": list(y0), "steps": [int(n) for n in ns]},
    )
