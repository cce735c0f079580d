"""A batched, vectorised Dormand-Prince 5(4) integrator for many ODE trajectories at once.

Solves ``y'(t) = f(t, y)``, ``y(t0) = y0`` for a batch of ``B`` independent trajectories of dimension
``d`` with the explicit embedded Runge-Kutta pair RK5(4)7M of Dormand & Prince (J. Comput. Appl.
Math. 6 (1980) 19-26; tableau also in Hairer, Norsett & Wanner, *Solving ODEs I*, Table II.5.2):
fifth-order solution (local extrapolation), fourth-order embedded error estimate, seven stages with
the first-same-as-last property (six right-hand-side evaluations per accepted step).

Design
------
* **Per-trajectory step control.** Every trajectory has its own time ``t_b``, step ``h_b``, error
  estimate and accept/reject decision; the batch only shares the loop iteration (one RK step
  attempt per trajectory per iteration). All arithmetic is elementwise over the batch axis (the
  stage sums are explicit ``a*k`` accumulations, norms are sums over the ``d`` components only; no
  BLAS, no reduction across trajectories), so a trajectory gets *bit-identical* results alone or
  in any batch: batch composition cannot change the data, and sharding stays exact.
* **Output by stepping onto the requested times.** The step is shortened so that each requested
  output time is hit exactly (``t`` is then set to the output time itself, no round-off drift),
  and the state there is the full fifth-order RK solution, not an interpolant. Any grid works:
  uniform, non-uniform, or one grid per trajectory (``times`` of shape ``(B, M)``). A step that is
  shortened to land on an output does not shrink the next step (the controller's unshortened
  proposal is kept when larger).
* **Error control** (Hairer et al. II.4): ``err = sqrt(mean_i (e_i / sc_i)^2)``,
  ``sc_i = atol + rtol * max(|y_i|, |y_new,i|)``, accept when ``err <= 1``; new step
  ``h * clip(0.9 err^(-1/5), 0.2, 10)`` (no growth right after a rejection). Initial step from
  Hairer's heuristic (II.4, "starting step size"). Defaults ``rtol = atol = 1e-10``.
* **Fixed-step mode** (``step=h``): no error control, steps of ``h`` (shortened only to land on
  outputs). Used to verify the fifth-order convergence of the tableau.
* Trajectories that have reached their last output leave the working set (state, parameters and
  counters are compacted), so the cost follows the trajectories still running.

The right-hand side is called as ``f(t, y, *args)`` with ``t`` of shape ``(n,)``, ``y`` of shape
``(d, n)`` (component-major, so ``y[0]`` is a contiguous row over the batch) and each of ``args``
an array whose **last** axis is the batch axis (per-trajectory parameters; they are compacted along
with the state); it returns an array of shape ``(d, n)``. It must act on each column independently.

:func:`reference_solve` integrates the same problem trajectory by trajectory with
``scipy.integrate.solve_ivp(method="DOP853")``: the independent reference used by the tests and the
benchmark, and a fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction as Fr

import numpy as np

from solvers.base import SolverError

RHS = Callable[..., np.ndarray]

# ---- Dormand-Prince RK5(4)7M tableau (exact rationals from the 1980 paper) -------------------------
_C = (Fr(0), Fr(1, 5), Fr(3, 10), Fr(4, 5), Fr(8, 9), Fr(1), Fr(1))
_A = (
    (),
    (Fr(1, 5),),
    (Fr(3, 40), Fr(9, 40)),
    (Fr(44, 45), Fr(-56, 15), Fr(32, 9)),
    (Fr(19372, 6561), Fr(-25360, 2187), Fr(64448, 6561), Fr(-212, 729)),
    (Fr(9017, 3168), Fr(-355, 33), Fr(46732, 5247), Fr(49, 176), Fr(-5103, 18656)),
    (Fr(35, 384), Fr(0), Fr(500, 1113), Fr(125, 192), Fr(-2187, 6784), Fr(11, 84)),
)
#: fifth-order weights (equal to the last row of A: first same as last)
_B = (Fr(35, 384), Fr(0), Fr(500, 1113), Fr(125, 192), Fr(-2187, 6784), Fr(11, 84), Fr(0))
#: embedded fourth-order weights
_BHAT = (Fr(5179, 57600), Fr(0), Fr(7571, 16695), Fr(393, 640), Fr(-92097, 339200), Fr(187, 2100), Fr(1, 40))

#: The tableau as exact fractions ``(c, A, b, b_hat)``, for checking the order conditions.
TABLEAU = (_C, _A, _B, _BHAT)
ORDER = 5

_c = tuple(float(v) for v in _C)
_a = tuple(tuple(float(v) for v in row) for row in _A)
#: error weights e = b - b_hat (the error estimate is h * sum_j e_j k_j)
_e = tuple(float(b - bh) for b, bh in zip(_B, _BHAT, strict=True))

_SAFETY, _FAC_MIN, _FAC_MAX = 0.9, 0.2, 10.0
_LAND_SLACK = 1.01  # a remaining distance up to 1.01 h is covered by one (slightly longer) step


class IntegrationError(SolverError):
    """Integration failed for some trajectories; ``trajectories`` holds their batch positions."""

    def __init__(self, message: str, trajectories: np.ndarray) -> None:
        super().__init__(message)
        self.trajectories = np.asarray(trajectories, dtype=np.int64)


@dataclass
class OdeSolution:
    """Result of :func:`integrate`.

    ``y``: ``(B, M, d)`` states at the requested times; ``t``: the requested times exactly as given
    (``(M,)`` or ``(B, M)``); ``n_accepted``/``n_rejected``: steps per trajectory; ``n_rhs``:
    right-hand-side evaluations per trajectory; ``n_iterations``: batch loop iterations.
    """

    t: np.ndarray
    y: np.ndarray
    n_accepted: np.ndarray
    n_rejected: np.ndarray
    n_rhs: np.ndarray
    n_iterations: int


def _check_times(times: np.ndarray, t0: np.ndarray, batch: int) -> np.ndarray:
    """Validate output times; return them as a ``(B, M)`` (possibly broadcast) float64 view."""
    t = np.asarray(times, dtype=np.float64)
    if t.ndim not in (1, 2) or t.shape[-1] < 1:
        raise ValueError(f"times must have shape (M,) or (B, M) with M >= 1, got {t.shape}")
    if t.ndim == 2 and t.shape[0] != batch:
        raise ValueError(f"per-trajectory times have {t.shape[0]} rows but y0 has {batch} trajectories")
    if not np.all(np.isfinite(t)):
        raise ValueError("times contain non-finite values")
    if t.shape[-1] > 1 and not np.all(np.diff(t, axis=-1) > 0):
        raise ValueError("times must be strictly increasing along the last axis")
    tb = np.broadcast_to(t, (batch, t.shape[-1]))
    if np.any(tb[:, 0] < t0):
        raise ValueError("times must not start before t0 (the integrator only steps forward)")
    return tb


def _rms(v: np.ndarray) -> np.ndarray:
    """Root mean square over the component axis 0 of a ``(d, n)`` array (per trajectory)."""
    return np.sqrt(np.sum(v * v, axis=0) / v.shape[0])


def _initial_step(f: RHS, t: np.ndarray, y: np.ndarray, f0: np.ndarray, args: tuple, rtol: float, atol: float) -> np.ndarray:
    """Hairer, Norsett & Wanner, Solving ODEs I, Sec. II.4: a first step for order 5, per trajectory."""
    sc = atol + rtol * np.abs(y)
    d0, d1 = _rms(y / sc), _rms(f0 / sc)
    h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / np.maximum(d1, 1e-300))
    f1 = f(t + h0, y + h0 * f0, *args)
    d2 = _rms((f1 - f0) / sc) / h0
    dm = np.maximum(d1, d2)
    h1 = np.where(dm <= 1e-15, np.maximum(1e-6, h0 * 1e-3), (0.01 / np.maximum(dm, 1e-300)) ** (1.0 / ORDER))
    return np.minimum(100.0 * h0, h1)


def integrate(
    f: RHS,
    y0: np.ndarray,
    times: np.ndarray | Sequence[float],
    *,
    t0: float | np.ndarray = 0.0,
    args: Sequence[np.ndarray] = (),
    rtol: float = 1e-10,
    atol: float = 1e-10,
    step: float | None = None,
    first_step: float | None = None,
    max_steps: int = 1_000_000,
) -> OdeSolution:
    """Integrate ``y' = f(t, y)`` from ``(t0, y0)`` for a batch and return the states at ``times``.

    ``y0``: ``(B, d)``; ``times``: ``(M,)`` shared or ``(B, M)`` per trajectory, strictly increasing,
    ``>= t0`` (an output at ``t0`` returns ``y0``); ``t0``: scalar or ``(B,)``; ``args``: arrays with
    the batch on their last axis, passed to ``f`` (see the module docstring for the calling
    convention). ``step`` switches to fixed-step mode. Raises :class:`IntegrationError` naming the
    failing trajectories when a step size underflows, the state stops being finite, or a trajectory
    needs more than ``max_steps`` step attempts.
    """
    y0 = np.asarray(y0, dtype=np.float64)
    if y0.ndim != 2:
        raise ValueError(f"y0 must have shape (B, d), got {y0.shape}")
    B, d = y0.shape
    if not np.all(np.isfinite(y0)):
        raise IntegrationError("non-finite initial state", np.flatnonzero(~np.isfinite(y0).all(axis=1)))
    if not (rtol > 0 and atol > 0):
        raise ValueError(f"rtol and atol must be > 0, got rtol={rtol}, atol={atol}")
    if step is not None and not step > 0:
        raise ValueError(f"step must be > 0, got {step}")
    args = tuple(np.asarray(a) for a in args)
    for a in args:
        if a.shape[-1:] != (B,):
            raise ValueError(f"each of args needs the batch ({B}) on its last axis, got shape {a.shape}")
    t0b = np.broadcast_to(np.asarray(t0, dtype=np.float64), (B,)).copy()
    tout = _check_times(np.asarray(times), t0b, B)
    M = tout.shape[1]
    out = np.empty((B, M, d))
    n_acc = np.zeros(B, np.int64)
    n_rej = np.zeros(B, np.int64)
    n_rhs = np.zeros(B, np.int64)

    # outputs at t0 are the initial state itself
    k = np.zeros(B, np.int64)
    at0 = tout[:, 0] == t0b
    out[at0, 0] = y0[at0]
    k[at0] = 1

    # the working set: trajectories with outputs left
    idx = np.flatnonzero(k < M)
    t = t0b[idx]
    Y = np.ascontiguousarray(y0[idx].T)  # (d, n)
    kk = k[idx]
    wargs = tuple(a[..., idx] for a in args)
    if idx.size == 0:
        return OdeSolution(np.asarray(times, dtype=np.float64), out, n_acc, n_rej, n_rhs, 0)
    K1 = f(t, Y, *wargs)
    n_rhs[idx] += 1
    if step is not None:
        h = np.full(idx.size, float(step))
    elif first_step is not None:
        h = np.full(idx.size, float(first_step))
    else:
        h = _initial_step(f, t, Y, K1, wargs, rtol, atol)
        n_rhs[idx] += 1
    no_grow = np.zeros(idx.size, bool)
    attempts = np.zeros(idx.size, np.int64)
    n_iter = 0
    stages: list[np.ndarray] = [K1] + [K1] * 6
    tmp = np.empty_like(Y)

    # overflow in a trial step is caught below (rejection, then IntegrationError), not warned about
    with np.errstate(over="ignore", invalid="ignore"):
        while idx.size:
            n_iter += 1
            target = tout[idx, kk]
            remaining = target - t
            land = remaining <= (h * _LAND_SLACK if step is None else h * (1.0 + 1e-9))
            hs = np.where(land, remaining, h)
            # stages 2..7 (stage 7 evaluates f at the new solution: FSAL)
            stages[0] = K1
            for i in range(1, 7):
                acc = Y.copy()
                for j, aij in enumerate(_a[i]):
                    if aij != 0.0:
                        np.multiply(stages[j], hs * aij, out=tmp)
                        acc += tmp
                stages[i] = f(t + _c[i] * hs, acc, *wargs)
            Ynew = acc
            n_rhs[idx] += 6
            finite = np.isfinite(Ynew).all(axis=0) & np.isfinite(stages[6]).all(axis=0)
            if step is None:
                errv = np.zeros_like(Y)
                for j, ej in enumerate(_e):
                    if ej != 0.0:
                        np.multiply(stages[j], hs * ej, out=tmp)
                        errv += tmp
                sc = atol + rtol * np.maximum(np.abs(Y), np.abs(Ynew))
                err = _rms(errv / sc)
                err = np.where(finite, err, np.inf)
                ok = err <= 1.0
                with np.errstate(divide="ignore"):
                    fac = np.clip(_SAFETY * err ** (-1.0 / ORDER), _FAC_MIN, _FAC_MAX)
                fac = np.where(ok & no_grow, np.minimum(fac, 1.0), fac)
                hnew = hs * fac
                # an accepted step shortened to land on an output keeps the larger unshortened proposal
                hnew = np.where(ok & land, np.maximum(hnew, h), hnew)
                no_grow = ~ok
                h = hnew
            else:
                if not finite.all():
                    bad = idx[~finite]
                    raise IntegrationError(f"fixed-step solution became non-finite (step {step})", bad)
                ok = np.ones(idx.size, bool)
            attempts += 1
            n_acc[idx[ok]] += 1
            n_rej[idx[~ok]] += 1

            # advance the accepted trajectories; land exactly on the output time
            if ok.all():
                Y, K1 = Ynew, stages[6]
            else:
                np.copyto(Y, Ynew, where=ok)
                K1 = np.where(ok, stages[6], K1)
            t = np.where(ok, np.where(land, target, t + hs), t)
            hit = ok & land
            if hit.any():
                out[idx[hit], kk[hit]] = Ynew[:, hit].T
                kk = kk + hit

            # failures: step underflow or too many attempts
            tiny = h < 1e-14 * np.maximum(np.abs(t), 1.0)
            over = attempts >= max_steps
            if tiny.any() or over.any():
                bad = idx[tiny | over]
                why = "step size underflow (stiff or blowing-up solution)" if tiny.any() else f"more than {max_steps} step attempts"
                raise IntegrationError(f"{why} at t = {t[tiny | over][0]:.6g}", bad)

            done = kk >= M
            if done.any():
                keep = ~done
                idx, t, kk, h, no_grow, attempts, K1 = idx[keep], t[keep], kk[keep], h[keep], no_grow[keep], attempts[keep], K1[:, keep]
                Y = np.ascontiguousarray(Y[:, keep])
                wargs = tuple(a[..., keep] for a in wargs)
                stages = [K1] + [K1] * 6
                tmp = np.empty_like(Y)

    return OdeSolution(np.asarray(times, dtype=np.float64), out, n_acc, n_rej, n_rhs, n_iter)


def reference_solve(
    f: RHS,
    y0: np.ndarray,
    times: np.ndarray | Sequence[float],
    *,
    t0: float = 0.0,
    args: Sequence[np.ndarray] = (),
    rtol: float = 1e-10,
    atol: float = 1e-10,
) -> np.ndarray:
    """The same problem as :func:`integrate`, one trajectory at a time with scipy's DOP853.

    Returns ``(B, M, d)``. ``f`` is called with batch size 1 (``t`` of shape ``(1,)``, ``y`` of shape
    ``(d, 1)``), so the batched right-hand sides serve unchanged.
    """
    from scipy.integrate import solve_ivp

    y0 = np.asarray(y0, dtype=np.float64)
    B, d = y0.shape
    tb = np.broadcast_to(np.asarray(times, dtype=np.float64), (B, np.shape(times)[-1]))
    args = tuple(np.asarray(a) for a in args)
    out = np.empty((B, tb.shape[1], d))
    for b in range(B):
        ab = tuple(a[..., b : b + 1] for a in args)

        def rhs(t: float, y: np.ndarray, ab: tuple = ab) -> np.ndarray:
            return f(np.array([t]), y.reshape(d, 1), *ab)[:, 0]

        sol = solve_ivp(rhs, (t0, tb[b, -1]), y0[b], method="DOP853", t_eval=tb[b], rtol=rtol, atol=atol)
        if not sol.success:
            raise IntegrationError(f"scipy DOP853 failed: {sol.message}", np.array([b]))
        out[b] = sol.y.T
    return out
