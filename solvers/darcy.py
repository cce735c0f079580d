"""Darcy flow -div(a grad u) = f on (0,1)^2, u = 0 on the boundary: coefficients, a fast verified
finite-difference solver, and the registered generator ``darcy_fd``.

Protocols (shared/PROTOCOLS.md):

* FNO piecewise constant (ONO, Galerkin, GNOT): a = 12 where g >= 0 and 3 where g < 0,
  g ~ N(0, (-Laplacian + 9 I)^(-2)) zero-Neumann, FNO cosine-transform convention (alpha = 2,
  tau = 3), f = 1, 421 x 421 nodes. These are the defaults of :class:`DarcyFD.Params`.
* Continuum attention: g ~ N(0, 12^2 (-Laplacian + 36 I)^(-2)) with the true KL amplitude
  (``grf_convention="kl"``, sigma = 12, tau = 6, alpha = 2); lognormal a = exp(g) (64 and 416
  nodes) or piecewise 12/3 at threshold 0 (416 nodes).

Discretisation. An s x s NODE grid x_i = i h, h = 1/(s-1), boundary included. At each interior
node the 5-point second-order scheme of the FNO protocol

    [a_{i+1/2,j} (u_ij - u_{i+1,j}) + a_{i-1/2,j} (u_ij - u_{i-1,j})
     + a_{i,j+1/2} (u_ij - u_{i,j+1}) + a_{i,j-1/2} (u_ij - u_{i,j-1})] / h^2 = f_ij,

with u = 0 at the boundary nodes. Face coefficients a_{i+1/2,j} are by default the ARITHMETIC mean
of the two adjacent node values: that is what the FNO data generator did (its faces average the
two node coefficients), so it reproduces the published data. ``face_mean="harmonic"`` gives the
flux-continuous choice, the better one for jumps that fall between nodes; both are second order
for smooth a (asserted in tests/solvers/test_darcy.py). The matrix is symmetric positive definite
and an M-matrix (so u >= 0 for f >= 0).

Linear solver. Preconditioned conjugate gradients (flexible Polak-Ribiere form) to a relative
residual ||f - A u||_2 / ||f||_2 <= rtol (default 1e-10), measured again on the true residual at
the end. Preconditioners:

* ``pcg_poisson``: the constant-coefficient Dirichlet Laplacian on the same grid, inverted exactly
  by two 2D type-I discrete sine transforms (scipy.fft, float32; the Polak-Ribiere form tolerates
  the rounding). A is spectrally equivalent to it with condition number <= max(a)/min(a): 4 for
  12/3 fields, i.e. about 24 iterations to 1e-10 whatever the resolution. Default for piecewise
  coefficients.
* ``pcg_scaled_poisson``: the same, symmetrically scaled by sqrt(diag(L) / diag(A)); for smooth
  coefficients (lognormal) A is close to D^(1/2) L D^(1/2), about 2-3 x fewer iterations than the
  plain Poisson preconditioner, while for discontinuous ones it is much worse. Default for lognormal.
* ``amg``: pyamg smoothed aggregation V-cycle as preconditioner (setup per sample), robust for
  high contrast; also the automatic fallback when a Poisson-preconditioned solve does not converge
  within ``maxiter``.
* ``direct``: scipy.sparse.linalg.spsolve (SuperLU), the reference.

Speed on one core of the 2-core development machine (benchmarks/darcy_fd.py; the machine was
shared, so per-sample minima over repeats): 421 x 421 piecewise, ``pcg_poisson``, 24 iterations to
a residual <= 1e-10 in a median 0.11 s (plus 0.012 s for the Gaussian field), against 1.3 s for
spsolve on the same matrices. The DST is fastest when s - 1 has small prime factors (420 =
2^2 3 5 7); at s = 416 (415 = 5 x 83) each transform is about 2.5 x slower and a solve takes
about 0.22 s CPU (piecewise or lognormal, ~24 iterations).

Protocol check (50 samples at 421, defaults: the KL field at the nodes, drawn mode by mode):
interior RMS of u 6.87e-3, mean u 5.64e-3, mean per-sample max 1.35e-2, fraction of nodes at 12:
0.49 +- 0.05; the published files have about 6.9e-3, 5.7e-3, 1.3e-2 and 0.50 +- 0.05
(PROTOCOLS.md). (The FNO convention at the cell centres with the per-grid draw, the default before
2026-11: 6.94e-3, 5.69e-3, 1.36e-2, 0.49 +- 0.06.) With low = 4 the RMS is 5.97e-3.

Resolution. Sample i's Gaussian field is the same function at every s (:mod:`solvers.grf`, draw
"modes"), so a set regenerated at 2 s - 1 nodes shares sample i's coefficient at every second node
except next to the interface, where the finer field's extra modes move the zero level set
(measured at 43 / 85: 0.48 % of the shared nodes differ, 97 % of them within one node of the
interface; tests/solvers/test_darcy.py).

The FNO group's MATLAB pipeline (``solve_gwf.m``) is the generator ``darcy_fno_exact``
(:func:`solve_fno_matlab`): the thresholded field taken as cell-centre values (i + 1/2)/s,
interpolated to the nodes by MATLAB's ``interp2(..., 'spline')`` (the tensor-product not-a-knot
cubic spline, extrapolated on the boundary ring; here scipy's ``make_interp_spline``), the same
5-point matrix, u interpolated back to the cell centres. It changes u by 4.8e-3 relative L2 at 421
(2.5e-2 when run at 85) and the published statistics cannot tell it from this solver, while they
do rule out low = 4 (docs/darcy_fidelity.md, benchmarks/darcy_fidelity.py).

Array layout: ``field[sample, ix, iy]`` is the value at the node (x[ix], y[iy]), x = y =
linspace(0, 1, s). Interior unknowns are numbered ``(ix - 1) (s - 2) + (iy - 1)`` (y fastest).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np

from opflow.data.format import Variable
from opflow.data.provenance import sample_rng
from solvers.base import FieldSpec, Generator, SolverError, register
from solvers.grf import neumann_grf

FaceMean = Literal["arithmetic", "harmonic"]
Method = Literal["pcg_poisson", "pcg_scaled_poisson", "amg", "direct"]
Forcing = float | np.ndarray | Callable[[np.ndarray, np.ndarray], np.ndarray]

__all__ = [
    "DarcyFD",
    "DarcyFnoExact",
    "SolveInfo",
    "assemble",
    "cell_centres",
    "coefficient_from_grf",
    "node_coordinates",
    "solve",
    "solve_fno_matlab",
    "spline_cells_to_nodes",
    "spline_nodes_to_cells",
]


def node_coordinates(s: int) -> np.ndarray:
    """The s node coordinates 0, h, ..., 1 (h = 1/(s-1)) used in both directions."""
    return np.linspace(0.0, 1.0, s)


def coefficient_from_grf(
    g: np.ndarray,
    kind: Literal["piecewise", "lognormal"],
    *,
    threshold: float = 0.0,
    high: float = 12.0,
    low: float = 3.0,
) -> np.ndarray:
    """Darcy coefficient from a Gaussian field: ``high`` where g >= threshold else ``low``, or exp(g)."""
    if kind == "piecewise":
        return np.where(g >= threshold, high, low)
    if kind == "lognormal":
        with np.errstate(over="ignore"):
            return np.exp(g)
    raise ValueError(f"coefficient kind {kind!r} is not one of ['piecewise', 'lognormal']")


def _face_coefficients(a: np.ndarray, face_mean: FaceMean) -> tuple[np.ndarray, np.ndarray]:
    """Face values between x-neighbours ``(s-1, s)`` and between y-neighbours ``(s, s-1)``."""
    a0, a1, b0, b1 = a[:-1, :], a[1:, :], a[:, :-1], a[:, 1:]
    if face_mean == "arithmetic":
        return 0.5 * (a0 + a1), 0.5 * (b0 + b1)
    if face_mean == "harmonic":
        return 2.0 * a0 * a1 / (a0 + a1), 2.0 * b0 * b1 / (b0 + b1)
    raise ValueError(f"face_mean {face_mean!r} is not one of ['arithmetic', 'harmonic']")


def assemble(a: np.ndarray, face_mean: FaceMean = "arithmetic"):
    """The 5-point matrix on the (s-2)^2 interior nodes, scaled by 1/h^2, as a scipy DIA array.

    Built from five diagonals with no loop over nodes (DIA is also the fastest format for the
    matrix-vector product here). ``a`` holds the node values ``(s, s)``, boundary included.
    """
    import scipy.sparse as sp

    s = a.shape[0]
    n = s - 2
    inv_h2 = float((s - 1) ** 2)
    ax, ay = _face_coefficients(np.asarray(a, dtype=np.float64), face_mean)
    west, east = ax[:-1, 1:-1], ax[1:, 1:-1]  # faces (ix-1/2, iy), (ix+1/2, iy) of interior nodes
    south, north = ay[1:-1, :-1], ay[1:-1, 1:]
    diag = (west + east + south + north).ravel()
    # coupling to (ix, iy+1): absent in the last interior column (that neighbour is on the boundary)
    up = north.copy()
    up[:, -1] = 0.0
    up = up.ravel()
    right = east[:-1, :].ravel()  # coupling to (ix+1, iy), interior rows 0..n-2
    N = n * n
    data = np.zeros((5, N))
    # DIA layout: data[d, col] = A[col - offset_d, col]
    data[0, : N - n] = -right  # offset -n: A[p + n, p] = A[p, p + n]
    data[1, :] = -up  # offset -1: A[p + 1, p] = A[p, p + 1]
    data[2, :] = diag
    data[3, 1:] = -up[:-1]  # offset +1
    data[4, n:] = -right  # offset +n
    data *= inv_h2
    return sp.dia_array((data, np.array([-n, -1, 0, 1, n])), shape=(N, N))


@functools.lru_cache(maxsize=8)
def _dirichlet_eigenvalues(s: int) -> np.ndarray:
    """Eigenvalues of the 5-point Dirichlet Laplacian on s x s nodes, ``(s-2, s-2)``, float32."""
    n = s - 2
    k = np.arange(1, n + 1)
    lam = 4.0 * (s - 1) ** 2 * np.sin(np.pi * k / (2 * (s - 1))) ** 2
    return (lam[:, None] + lam[None, :]).astype(np.float32)


def _poisson_inverse(s: int) -> Callable[[np.ndarray], np.ndarray]:
    """r -> L^{-1} r for the constant-coefficient 5-point Laplacian, by orthonormal DST-I (float32)."""
    import scipy.fft as sfft

    n = s - 2
    lam = _dirichlet_eigenvalues(s)

    def apply(r: np.ndarray) -> np.ndarray:
        rhat = sfft.dstn(r.reshape(n, n).astype(np.float32), type=1, norm="ortho")
        rhat /= lam
        return sfft.dstn(rhat, type=1, norm="ortho", overwrite_x=True).astype(np.float64).ravel()

    return apply


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """x.y without BLAS: a multithreaded BLAS dot on a busy machine costs more than the whole
    iteration (measured 5-8 x slower solves with 2 OpenBLAS threads on 2 shared cores)."""
    return float(np.einsum("i,i->", x, y))


def _norm(x: np.ndarray) -> float:
    return math.sqrt(_dot(x, x))


def _pcg(
    A, b: np.ndarray, precond: Callable[[np.ndarray], np.ndarray], rtol: float, maxiter: int
) -> tuple[np.ndarray, int, float]:
    """Flexible (Polak-Ribiere) preconditioned CG from x = 0; returns x, iterations, true relative residual.

    The recursive residual decides convergence; the true residual b - A x is then recomputed and,
    if it is above the target, the iteration restarts from x with it (residual replacement).
    """
    bnorm = _norm(b)
    x = np.zeros_like(b)
    if bnorm == 0.0:
        return x, 0, 0.0
    target = rtol * bnorm
    r = b.copy()
    it = 0
    for _restart in range(4):
        z = precond(r)
        p = z.copy()
        rz = _dot(r, z)
        while it < maxiter:
            q = A @ p
            pq = _dot(p, q)
            if not pq > 0.0 or not np.isfinite(rz):  # breakdown: A or the preconditioner is not SPD
                break
            alpha = rz / pq
            x += alpha * p
            r -= alpha * q
            it += 1
            if _norm(r) <= target:
                break
            z = precond(r)
            beta = -alpha * _dot(q, z) / rz  # Polak-Ribiere: z_{k+1}.(r_{k+1} - r_k) / (z_k.r_k)
            rz = _dot(r, z)
            p *= beta
            p += z
        r = b - A @ x
        res = _norm(r)
        if res <= target or it >= maxiter or not np.isfinite(res):
            break
    return x, it, res / bnorm


@dataclass
class SolveInfo:
    """What a solve did: method used, iterations, true relative residual, setup and solve seconds."""

    method: str
    iterations: int
    residual: float
    setup_s: float  # preconditioner / factorisation set-up
    solve_s: float  # iterations or triangular solves
    assemble_s: float = 0.0  # matrix assembly
    fallback_from: str | None = None


def _forcing_values(f: Forcing, s: int) -> np.ndarray:
    x = node_coordinates(s)
    if callable(f):
        X, Y = np.meshgrid(x, x, indexing="ij")
        vals = np.broadcast_to(np.asarray(f(X, Y), dtype=np.float64), (s, s))
    else:
        vals = np.broadcast_to(np.asarray(f, dtype=np.float64), (s, s))
    return np.ascontiguousarray(vals[1:-1, 1:-1]).ravel()


def _solve_once(A, b: np.ndarray, s: int, method: Method, rtol: float, maxiter: int) -> tuple[np.ndarray, SolveInfo]:
    t0 = time.perf_counter()
    if method == "direct":
        import scipy.sparse.linalg as spla

        Acsc = A.tocsc()
        t1 = time.perf_counter()
        x = spla.spsolve(Acsc, b)
        t2 = time.perf_counter()
        res = float(np.linalg.norm(b - A @ x) / max(np.linalg.norm(b), np.finfo(float).tiny))
        return x, SolveInfo(method, 0, res, t1 - t0, t2 - t1)
    if method == "pcg_poisson":
        precond = _poisson_inverse(s)
    elif method == "pcg_scaled_poisson":
        poisson = _poisson_inverse(s)
        d = np.sqrt(4.0 * (s - 1) ** 2 / A.diagonal())

        def precond(r: np.ndarray) -> np.ndarray:
            return d * poisson(d * r)
    elif method == "amg":
        import pyamg

        ml = pyamg.smoothed_aggregation_solver(A.tocsr(), symmetry="symmetric")
        M = ml.aspreconditioner(cycle="V")
        precond = M.matvec
    else:
        raise ValueError(f"solver method {method!r} is not one of {list(get_args(Method))}")
    t1 = time.perf_counter()
    x, it, res = _pcg(A, b, precond, rtol, maxiter)
    t2 = time.perf_counter()
    return x, SolveInfo(method, it, res, t1 - t0, t2 - t1)


def _solve_system(
    A, b: np.ndarray, s: int, method: Method, rtol: float, maxiter: int, fallback: Method | None, hint: str
) -> tuple[np.ndarray, SolveInfo]:
    """Solve the assembled system, retrying once with ``fallback`` when ``method`` misses ``rtol``.

    Raises :class:`SolverError` (ending with ``hint``, the advice for the caller's parameters) when
    no method reaches ``rtol`` or the result is not finite.
    """
    x, info = _solve_once(A, b, s, method, rtol, maxiter)
    ok = np.isfinite(info.residual) and info.residual <= rtol and np.all(np.isfinite(x))
    if not ok and fallback is not None and method != fallback:
        first = info
        x, info = _solve_once(A, b, s, fallback, rtol, maxiter)
        info.fallback_from = f"{first.method} (residual {first.residual:.2e} after {first.iterations} iterations)"
        ok = np.isfinite(info.residual) and info.residual <= rtol and np.all(np.isfinite(x))
    if not ok:
        tried = f"{info.fallback_from}, then {info.method}" if info.fallback_from else info.method
        raise SolverError(
            f"Darcy FD solve at {s}x{s} did not converge: relative residual {info.residual:.3e} > rtol {rtol:g} "
            f"after {info.iterations} iterations of {tried}; {hint}"
        )
    return x, info


def solve(
    a: np.ndarray,
    f: Forcing = 1.0,
    *,
    face_mean: FaceMean = "arithmetic",
    method: Method = "pcg_poisson",
    rtol: float = 1e-10,
    maxiter: int = 500,
    fallback: bool = True,
) -> tuple[np.ndarray, SolveInfo]:
    """Solve -div(a grad u) = f, u = 0 on the boundary, on the s x s node grid of ``a``.

    ``a``: node values ``(s, s)`` (s >= 3), positive and finite. ``f``: a number, node values
    ``(s, s)`` or a callable ``f(X, Y)`` of node-coordinate arrays (indexing "ij"). Returns ``u``
    ``(s, s)`` (boundary rows zero) and a :class:`SolveInfo`. With ``fallback`` a Poisson-
    preconditioned solve that misses ``rtol`` within ``maxiter`` iterations is repeated with the
    AMG preconditioner. Raises :class:`SolverError` when no method reaches ``rtol`` or the result
    is not finite (the caller adds the sample index and seed).
    """
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 3:
        raise ValueError(f"coefficient must be a square node array of size >= 3, got shape {a.shape}")
    if not np.all(np.isfinite(a)) or not np.all(a > 0):
        bad = "non-finite" if not np.all(np.isfinite(a)) else f"non-positive (min {a.min():.3g})"
        raise SolverError(f"Darcy coefficient is {bad}; the equation needs 0 < a < inf")
    s = a.shape[0]
    b = _forcing_values(f, s)
    t0 = time.perf_counter()
    A = assemble(a, face_mean)
    assemble_s = time.perf_counter() - t0
    use_amg = fallback and method in ("pcg_poisson", "pcg_scaled_poisson")
    hint = (
        "raise maxiter, loosen rtol, or set the darcy_fd parameter solver to 'direct' "
        "(method='direct' when calling solve() yourself)"
    )
    x, info = _solve_system(A, b, s, method, rtol, maxiter, "amg" if use_amg else None, hint)
    info.assemble_s = assemble_s
    u = np.zeros((s, s))
    u[1:-1, 1:-1] = x.reshape(s - 2, s - 2)
    return u, info


# ------------------------------------------------------------------------------------------------
# the FNO group's MATLAB pipeline (generator darcy_fno_exact)


def cell_centres(s: int) -> np.ndarray:
    """The s cell-centre coordinates (i + 1/2) / s, i = 0 .. s-1, of the FNO MATLAB pipeline."""
    return (np.arange(s) + 0.5) / s


@functools.lru_cache(maxsize=8)
def _spline_operator(s: int, to_nodes: bool) -> np.ndarray:
    """The (s, s) matrix S with ``(S @ v)[j]`` = the not-a-knot cubic spline through ``v`` evaluated at
    destination point j: cell centres -> nodes (``to_nodes``, the boundary nodes extrapolated by the
    end cubics) or nodes -> cell centres. Read-only; a column is the spline of a unit vector."""
    from scipy.interpolate import make_interp_spline

    src, dst = (cell_centres(s), node_coordinates(s)) if to_nodes else (node_coordinates(s), cell_centres(s))
    S = make_interp_spline(src, np.eye(s), k=3, bc_type="not-a-knot", axis=0)(dst, extrapolate=True)
    S.setflags(write=False)
    return S


def _spline2d(v: np.ndarray, to_nodes: bool) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    s = v.shape[-1]
    if v.ndim < 2 or v.shape[-2] != s or s < 4:
        raise ValueError(f"the spline needs square (..., s, s) arrays with s >= 4, got shape {v.shape}")
    S = _spline_operator(s, to_nodes)
    return S @ v @ S.T


def spline_cells_to_nodes(v: np.ndarray) -> np.ndarray:
    """MATLAB ``interp2(Xc, Yc, v, Xn, Yn, 'spline')``: cell-centre values ``(..., s, s)`` -> node values.

    The tensor-product not-a-knot cubic spline (a 1D not-a-knot spline along each axis in turn;
    the order does not matter), evaluated at the nodes i/(s-1); the boundary nodes lie half a cell
    outside the outermost cell centres and get the end cubics' extrapolation, as MATLAB's spline
    method does (it extrapolates by default). ``v[..., ix, iy]`` is the value at (x[ix], y[iy]).
    """
    return _spline2d(v, True)


def spline_nodes_to_cells(v: np.ndarray) -> np.ndarray:
    """MATLAB ``interp2(Xn, Yn, v, Xc, Yc, 'spline')``: node values ``(..., s, s)`` -> cell centres (inside the node range)."""
    return _spline2d(v, False)


def solve_fno_matlab(
    a: np.ndarray,
    f: float | np.ndarray = 1.0,
    *,
    interpolate: bool = True,
    method: Method = "pcg_poisson",
    rtol: float = 1e-10,
    maxiter: int = 500,
    fallback: bool = True,
    generator: str = "darcy_fno_exact",
) -> tuple[np.ndarray, SolveInfo]:
    """The FNO group's MATLAB Darcy solve (``solve_gwf.m``) of -div(a grad u) = f, u = 0 on the boundary.

    ``a`` and ``f`` (a number or an ``(s, s)`` array) are taken as values at the s x s CELL CENTRES
    (i + 1/2)/s. Both are spline-interpolated to the s x s NODES i/(s-1)
    (:func:`spline_cells_to_nodes`), the 5-point scheme with arithmetic face means (:func:`assemble`,
    the same matrix as the MATLAB code's block-tridiagonal one) is solved on the nodes with u = 0 on
    the boundary nodes, and u is spline-interpolated back to the cell centres
    (:func:`spline_nodes_to_cells`), so its outermost values are not zero. With ``interpolate=False``
    both spline steps are skipped: ``a`` is taken as node values and the result is :func:`solve`'s.

    The node coefficient overshoots the thresholded values (for 12/3 fields it reaches below 0 on
    the boundary ring and a little outside [3, 12] inside) and may be non-positive, so positivity
    is not required: the assembled matrix is solved as MATLAB's backslash would, by ``method`` and,
    with ``fallback``, by a direct sparse LU when that misses ``rtol``; ``generator`` names the
    generator in the error hint. Returns u ``(s, s)`` and a :class:`SolveInfo`.
    """
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < (4 if interpolate else 3):
        raise ValueError(f"coefficient must be a square array of size >= {4 if interpolate else 3}, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise SolverError("Darcy coefficient is non-finite; the equation needs 0 < a < inf")
    s = a.shape[0]
    F = np.broadcast_to(np.asarray(f, dtype=np.float64), (s, s))
    if interpolate:
        a, F = spline_cells_to_nodes(a), spline_cells_to_nodes(F)
    b = np.ascontiguousarray(F[1:-1, 1:-1]).ravel()
    t0 = time.perf_counter()
    A = assemble(a, "arithmetic")
    assemble_s = time.perf_counter() - t0
    hint = (
        f"raise maxiter, loosen rtol, or set the {generator} parameter solver to 'direct' "
        "(method='direct' when calling solve_fno_matlab() yourself)"
    )
    x, info = _solve_system(A, b, s, method, rtol, maxiter, "direct" if fallback else None, hint)
    info.assemble_s = assemble_s
    u = np.zeros((s, s))
    u[1:-1, 1:-1] = x.reshape(s - 2, s - 2)
    return (spline_nodes_to_cells(u) if interpolate else u), info


# ------------------------------------------------------------------------------------------------
# generator



@dataclass(frozen=True)
class CoefficientParams:
    """The random Darcy coefficient a and the constant source f, shared by ``darcy_fd`` and ``darcy_fem``.

    coefficient: "piecewise" (``high`` where g >= ``threshold``, else ``low``; FNO: 12 / 3) or
    "lognormal" (a = exp(g)); g ~ N(0, sigma^2 (-Lap + tau^2)^-alpha) drawn by
    :func:`solvers.grf.neumann_grf` in ``grf_convention`` ("kl": the Karhunen-Loeve scaling at the
    nodes, the default; "fno": the FNO MATLAB generator's scaling at the cell centres) and in the
    draw order ``grf_draw`` ("modes": sample i is the same field at every resolution; "grid": the
    published generators' per-grid white noise). For a piecewise field thresholded at 0 the
    amplitude does not matter: "kl" with sigma = 1 has the FNO generator's mode weights up to the
    factor s tau^(alpha-1), evaluated at the nodes n / (s-1) instead of the cell centres
    (n + 1/2) / s, which is what makes it the same function at every resolution. ``forcing``: f.
    """

    coefficient: Literal["piecewise", "lognormal"] = "piecewise"
    grf_convention: Literal["fno", "kl"] = "kl"
    grf_draw: Literal["modes", "grid"] = "modes"
    alpha: float = 2.0
    tau: float = 3.0
    sigma: float = 1.0
    threshold: float = 0.0
    high: float = 12.0
    low: float = 3.0
    forcing: float = 1.0

    def check_coefficient(self) -> None:
        """Raise ``ValueError`` naming the first coefficient or source field out of range."""
        for name in ("alpha", "tau", "sigma"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} = {v!r}: the Gaussian field needs a finite {name} > 0")
        for name in ("high", "low"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} = {v!r}: the piecewise coefficient values must be finite and > 0")
        for name in ("threshold", "forcing"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} = {getattr(self, name)!r} must be finite")


@register
class DarcyFD(Generator):
    """``darcy_fd``: random Darcy coefficients and their FD pressure on an s x s node grid.

    Fields ``coeff`` (input a, float32; exactly the values the solve used) and ``pressure``
    (output u, float32), laid out ``[sample, ix, iy]`` = value at (x[ix], y[iy]); ``residual``
    (auxiliary) is the relative residual each solve reached. Sample i draws its Gaussian field
    from ``sample_rng(seed, i)`` only (see :mod:`solvers.grf`).
    """

    name = "darcy_fd"
    block_size = 4
    legacy_params: ClassVar[dict[str, Any]] = {"grf_draw": "grid"}

    @dataclass(frozen=True)
    class Params(CoefficientParams):
        """Parameters; the defaults are the FNO piecewise-constant protocol at 421 x 421.

        resolution: nodes per side s (h = 1/(s-1)). coefficient: "piecewise" (high where
        g >= threshold, else low) or "lognormal" (a = exp(g)). grf_convention, alpha, tau, sigma:
        the Gaussian field g (:func:`solvers.grf.neumann_grf`; "fno" has a meaningless amplitude,
        use "kl" for lognormal). forcing: constant f. face_mean: "arithmetic" (FNO) or
        "harmonic". solver: "auto" (pcg_poisson for piecewise, pcg_scaled_poisson for lognormal),
        or a method of :func:`solve`. rtol, maxiter: PCG stopping rule; amg_fallback: retry a
        non-converged Poisson-preconditioned solve with AMG.
        """

        resolution: int = 421
        face_mean: Literal["arithmetic", "harmonic"] = "arithmetic"
        solver: Literal["auto", "pcg_poisson", "pcg_scaled_poisson", "amg", "direct"] = "auto"
        rtol: float = 1e-10
        maxiter: int = 500
        amg_fallback: bool = True

        def __post_init__(self) -> None:
            if isinstance(self.resolution, bool) or not isinstance(self.resolution, int) or self.resolution < 3:
                raise ValueError(
                    f"resolution = {self.resolution!r}: need an integer >= 3 (nodes per side, boundary included)"
                )
            self.check_coefficient()
            if not 0 < self.rtol < 1:
                raise ValueError(f"rtol = {self.rtol!r}: need 0 < rtol < 1 (relative residual, e.g. 1e-10)")
            if isinstance(self.maxiter, bool) or not isinstance(self.maxiter, int) or self.maxiter < 1:
                raise ValueError(f"maxiter = {self.maxiter!r}: need an integer >= 1")

    @property
    def method(self) -> Method:
        """The solver method ``auto`` resolves to for these parameters."""
        p = self.params
        if p.solver != "auto":
            return p.solver
        return "pcg_poisson" if p.coefficient == "piecewise" else "pcg_scaled_poisson"

    def dims(self) -> dict[str, int]:
        s = self.params.resolution
        return {"x": s, "y": s}

    def coords(self) -> dict[str, Variable]:
        x = node_coordinates(self.params.resolution)
        return {
            "x": Variable(("x",), x, {"units": "1", "long_name": "x node coordinate"}),
            "y": Variable(("y",), x.copy(), {"units": "1", "long_name": "y node coordinate"}),
        }

    def fields(self) -> dict[str, FieldSpec]:
        return {
            "coeff": FieldSpec(("x", "y"), "1", "permeability a(x)", "input"),
            "pressure": FieldSpec(("x", "y"), "1", "pressure u(x)", "output"),
            "residual": FieldSpec(
                (), "1", "relative residual ||f - A u||_2 / ||f||_2 of the linear solve", "auxiliary", "float64"
            ),
        }

    def coefficients(self, seed: int, indices: np.ndarray) -> np.ndarray:
        """The coefficient fields of samples ``indices`` (float64 node values, float32-representable)."""
        p = self.params
        g = neumann_grf(
            [sample_rng(seed, int(i)) for i in indices],
            p.resolution,
            alpha=p.alpha,
            tau=p.tau,
            sigma=p.sigma,
            convention=p.grf_convention,
            draw=p.grf_draw,
        )
        a = coefficient_from_grf(g, p.coefficient, threshold=p.threshold, high=p.high, low=p.low)
        # store exactly what is solved: round to the float32 of the file first
        with np.errstate(over="ignore"):  # overflow becomes inf and is reported by solve()
            return a.astype(np.float32).astype(np.float64)

    def solve_one(self, a: np.ndarray) -> tuple[np.ndarray, SolveInfo]:
        """u and the solve's report for one coefficient field ``a`` (the 5-point scheme, :func:`solve`)."""
        p = self.params
        return solve(a, p.forcing, face_mean=p.face_mean, method=self.method, rtol=p.rtol, maxiter=p.maxiter, fallback=p.amg_fallback)

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        indices = np.asarray(indices, dtype=np.int64)
        a = self.coefficients(seed, indices)
        u = np.empty_like(a)
        residual = np.empty(len(indices))
        for b, i in enumerate(indices):
            try:
                u[b], info = self.solve_one(a[b])
            except SolverError as e:
                raise SolverError(str(e), index=int(i), seed=int(seed)) from None
            residual[b] = info.residual
        return {"coeff": a.astype(np.float32), "pressure": u.astype(np.float32), "residual": residual}


@register
class DarcyFnoExact(DarcyFD):
    """``darcy_fno_exact``: the FNO group's MATLAB Darcy pipeline, reproduced step by step.

    The published FNO Darcy files (Li et al. 2021; ``data_generation/darcy`` of their repository:
    ``GRF.m``, ``solve_gwf.m``, ``demo.m``) were made by thresholding the Gaussian field on an
    s x s grid, taking those values as CELL-CENTRE values, spline-interpolating them to the s x s
    nodes, solving the 5-point scheme there and spline-interpolating u back to the cell centres
    (:func:`solve_fno_matlab`, which documents the steps). Fields as ``darcy_fd``: ``coeff`` (the
    thresholded values, what the files store), ``pressure`` (u at the cell centres, float32),
    ``residual``. The coordinates are the cell centres (i + 1/2)/s, or the nodes with
    ``interpolate: false``, which makes this generator ``darcy_fd`` with the same ``grf_convention`` and
    ``grf_draw`` (same samples, same solve).
    The default ``low`` is 3 (the papers, and the value the published statistics single out:
    docs/darcy_fidelity.md); the MATLAB demo script used 4. See docs/darcy_fidelity.md for what
    the interpolation changes and how each variant compares with the published statistics.
    """

    name = "darcy_fno_exact"

    @dataclass(frozen=True)
    class Params(CoefficientParams):
        """Parameters; the defaults are the published FNO piecewise set at 421 x 421 (12/3).

        resolution: points per side s (cell centres and nodes alike). grf_convention "fno" and
        grf_draw "grid" (the defaults here): the FNO MATLAB ``GRF.m`` field, its idct2 at the cell
        centres of a per-grid white-noise array, so this generator is not the same sample at two
        resolutions (the cell centres move with s); the published pipeline is defined at 421 and
        subsampled, which the datasets' ``resolution`` does. interpolate: the two spline
        steps of the MATLAB pipeline (false: the clean node FD solve of ``darcy_fd``). Coefficient
        and field parameters as ``darcy_fd``. solver: "auto" (pcg_poisson for piecewise,
        pcg_scaled_poisson for lognormal), "pcg_poisson", "pcg_scaled_poisson" or "direct"
        (sparse LU, what MATLAB's backslash does); rtol, maxiter: the iterative solvers' stopping
        rule; direct_fallback: retry a solve that misses rtol with the direct solver (the
        spline-overshooting coefficient can make the matrix indefinite in principle). The face
        means are arithmetic, as in the MATLAB code; use ``darcy_fd`` for harmonic ones.
        """

        resolution: int = 421
        grf_convention: Literal["fno", "kl"] = "fno"
        grf_draw: Literal["modes", "grid"] = "grid"
        interpolate: bool = True
        solver: Literal["auto", "pcg_poisson", "pcg_scaled_poisson", "direct"] = "auto"
        rtol: float = 1e-10
        maxiter: int = 500
        direct_fallback: bool = True

        def __post_init__(self) -> None:
            least = 4 if self.interpolate else 3
            if isinstance(self.resolution, bool) or not isinstance(self.resolution, int) or self.resolution < least:
                why = " (the not-a-knot cubic spline needs 4 points per side)" if self.interpolate else ""
                raise ValueError(f"resolution = {self.resolution!r}: need an integer >= {least}{why}")
            self.check_coefficient()
            if not 0 < self.rtol < 1:
                raise ValueError(f"rtol = {self.rtol!r}: need 0 < rtol < 1 (relative residual, e.g. 1e-10)")
            if isinstance(self.maxiter, bool) or not isinstance(self.maxiter, int) or self.maxiter < 1:
                raise ValueError(f"maxiter = {self.maxiter!r}: need an integer >= 1")

    def coords(self) -> dict[str, Variable]:
        s = self.params.resolution
        if not self.params.interpolate:
            return super().coords()
        x = cell_centres(s)
        return {
            k: Variable((k,), x.copy(), {"units": "1", "long_name": f"{k} cell-centre coordinate (i + 1/2)/s"})
            for k in ("x", "y")
        }

    def solve_one(self, a: np.ndarray) -> tuple[np.ndarray, SolveInfo]:
        """u at the cell centres for one thresholded field ``a`` (:func:`solve_fno_matlab`)."""
        p = self.params
        return solve_fno_matlab(
            a, p.forcing, interpolate=p.interpolate, method=self.method, rtol=p.rtol, maxiter=p.maxiter, fallback=p.direct_fallback, generator=self.name
        )
