"""2D incompressible Navier-Stokes in vorticity form on a periodic square: a batched pseudo-spectral
solver (torch, CPU or CUDA) and the generators ``navier_stokes`` (FNO torus) and ``kolmogorov``.

Equations (PROTOCOLS.md, "Navier-Stokes vorticity on the unit torus" and "Kolmogorov flow")::

    w_t + u . grad w = nu Laplacian w + f,    u = (psi_y, -psi_x),    -Laplacian psi = w

on [0, L)^2, periodic. With this sign convention (the one of the FNO generator), w = v_x - u_y is
the vorticity of u and div u = 0 exactly. The mean of w is a constant of motion (the mean mode of
psi is set to zero). Forcings (vorticity form, i.e. the curl of a velocity forcing):

* ``fno`` (Li et al. 2020, L = 1): f = 0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y))).
* ``kolmogorov`` (Calvello et al. 2024, L = 2 pi): velocity forcing sin(n y) e_x, whose curl is
  d/dx 0 - d/dy sin(n y) = -n cos(n y).
* ``none``.

Space. Grid x_j = j L / n (n even), ``w[..., ix, iy]`` = w(x[ix], y[iy]); real FFTs over the last
two axes (``torch.fft.rfft2``, modes ``[kx, ky]`` with ky >= 0). Derivatives are spectral (the
derivative of the Nyquist mode is set to zero; the 2020 FNO code gave it wavenumber -n/2 instead,
which changes its 256^2 result by 3e-10 relative after one time unit, 1e-6 at 64^2: only the
initial field has Nyquist content), psi_hat = w_hat / |k|^2. The advection term is
formed in physical space as u w_x + v w_y and dealiased by the 2/3 rule: its modes with
max(|m_x|, |m_y|) > K are zeroed, K = (n - 1) // 3 the largest integer wavenumber below n / 3
(K = 85 at n = 256, the FNO generator's mask; at n = 416, K = 138). For fields inside that band
the truncated product is exactly the Galerkin projection of the product (no aliasing), so with
nu = 0 and a band-limited state the semi-discrete system conserves energy and enstrophy exactly;
only the time stepping changes them (asserted in tests/solvers/test_navier_stokes.py).

Time stepping (N(w) = -P(u . grad w) + f, linear part L = -nu |k|^2, diagonal):

* ``fno``: the FNO 2020 scheme, Crank-Nicolson on the viscous term and forward Euler on advection
  and forcing, w+ = ((1 + h L / 2) w + h N(w)) / (1 - h L / 2), h = dt = 1e-4 in the protocol.
  First order (second order when N = 0, e.g. Taylor-Green).
* ``heun_cn``: Crank-Nicolson on viscosity with Heun's predictor-corrector on N (the scheme of the
  FNO/PINO Kolmogorov-flow code). Second order.
* ``etdrk4``: exponential time differencing RK4 (Cox & Matthews 2002, coefficients as in Kassam &
  Trefethen 2005), the viscous term integrated exactly; the phi-functions are evaluated by
  Taylor series for |z| < 0.1 and closed forms otherwise (float64, no contour integral needed
  because z = h L is real). Fourth order; exact for Taylor-Green whatever the step. The
  recommended scheme: far fewer steps and less wall time than ``fno`` for the same accuracy
  (benchmarks/navier_stokes.py; benchmarks/results/navier_stokes.json).

Step size. ``fno`` and ``heun_cn`` (and ``etdrk4`` with ``cfl=None``) take fixed steps: each
interval between record times is cut into ceil(interval / dt) equal steps, so records land exactly
on their times (dt = 1e-4 divides 1 exactly: 10,000 steps per FNO time unit). ``etdrk4`` with a
``cfl`` target chooses steps per sample from the advective CFL number

    C = h (max |u| / dx + max |v| / dy),   dx = dy = L / n,

at the start of each step: when C leaves [0.7, 1.1] x target (or at a record time) the remaining
part of the interval is re-cut into m equal steps with h = remaining / m <= min(target / speed,
dt_max); so steps land exactly on record times, and a sample's steps depend on that sample only
(batches and shards do not change the data). RK4 is stable for C up to about 1.35 with this
dealiased spectrum in the worst case (imaginary-axis bound 2.83 over the largest kept wavenumber
2 pi / (3 dx) per direction; runs stay stable somewhat beyond). The defaults (target 0.5, and
dt_max = 0.02 for the FNO torus, which caps the step whatever the resolution) are set by accuracy:
on the FNO problem at 256^2 (nu = 1e-5, one time unit) they give a relative error of 9e-7 in 56
steps where the ``fno`` scheme at dt = 1e-4 has 2.8e-5 in 10,000 steps; fixed dt = 0.025 reaches
3.4e-6 in 40 steps: 200-250 x fewer steps and 40-80 x less wall time than ``fno`` at equal or
better accuracy (benchmark runs on a shared CPU). Over the whole T = 20 protocol the default
etdrk4 run took 12 x less wall time than ``fno`` with an error at t = 20 of 8e-7 against 1.5e-3.

Blow-up. A non-finite state, or a CFL number above ``cfl_limit`` with a fixed step (checked every
``check_every`` steps and at each record), or an adaptive step below 1e-10 of the record interval,
raises :class:`solvers.base.SolverError` naming the first offending sample's index and the seed.

Records. The state is recorded at the requested times on the solve grid and downsampled by stride
(n_solve / n_store; periodic grids keep x_0 = 0 and drop the endpoint) to the stored grid; a
record at t = 0 is the initial field itself.

Batches. On CPU the samples of a batch are advanced one at a time (``chunk=1``): each sample's
result is then bit-identical whatever batch, block or shard it is computed in (batched FFTs and
vectorised loops round differently from single ones). That costs some CPU throughput (batches of
4-8 ran 1-1.5 x faster at 256^2 and about 2 x at 64^2 in the benchmark; pass ``chunk`` to
:meth:`VorticitySolver.integrate` to trade). On CUDA the batch is advanced together; results agree
across batchings to round-off.

Heavy import: torch is imported inside functions only, so importing this module and constructing
a generator stay cheap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

import numpy as np

from opflow.data.errors import ConfigError
from opflow.data.format import Variable
from opflow.data.provenance import sample_rng
from solvers.base import FieldSpec, Generator, SolverError, register

if TYPE_CHECKING:
    import torch

Scheme = Literal["fno", "heun_cn", "etdrk4"]
SCHEMES: tuple[str, ...] = get_args(Scheme)
Precision = Literal["float64", "float32"]

#: adaptive re-planning band around the CFL target (see module docstring)
_CFL_BAND = (0.7, 1.1)
#: adaptive steps below this fraction of the record interval count as a blow-up
_MIN_STEP_FRACTION = 1e-10


# ------------------------------------------------------------------------------------------------
# grid helpers (numpy; cheap)


def grid_points(n: int, length: float) -> np.ndarray:
    """The periodic grid x_j = j L / n, j = 0 .. n-1 (endpoint excluded)."""
    return np.arange(n, dtype=np.float64) * (length / n)


def dealias_cutoff(n: int) -> int:
    """K = (n - 1) // 3: the largest integer wavenumber kept by the 2/3 rule (K < n / 3 strictly)."""
    return (n - 1) // 3


def dealias_mask(n: int) -> np.ndarray:
    """Boolean 2/3-rule mask on the ``rfft2`` modes ``[mx, my]``, shape ``(n, n // 2 + 1)``.

    True where max(|mx|, |my|) <= K = (n - 1) // 3 (a square in wavenumber space, as in the FNO
    generator); the product of two fields inside it, truncated to it, has no aliasing error.
    """
    m_x = np.abs(np.fft.fftfreq(n, d=1.0 / n))
    m_y = np.abs(np.fft.rfftfreq(n, d=1.0 / n))
    k = dealias_cutoff(n)
    return (m_x[:, None] <= k) & (m_y[None, :] <= k)


def fno_forcing(n: int, length: float = 1.0) -> np.ndarray:
    """FNO vorticity forcing 0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y))) on the n x n grid of [0, L)^2."""
    x = grid_points(n, length)
    s = 2 * np.pi * (x[:, None] + x[None, :])
    return 0.1 * (np.sin(s) + np.cos(s))


def kolmogorov_forcing(n: int, wavenumber: int = 4, length: float = 2 * np.pi) -> np.ndarray:
    """Vorticity forcing of the velocity forcing sin(n y) e_x: curl = -n cos(n y) (L = 2 pi).

    For a general period L the velocity forcing is sin(2 pi n y / L) e_x and its curl
    -(2 pi n / L) cos(2 pi n y / L). Returned on the grid, shape ``(n_grid, n_grid)`` (y = axis 1).
    """
    y = grid_points(n, length)
    k = 2 * np.pi * wavenumber / length
    return np.broadcast_to(-k * np.cos(k * y)[None, :], (n, n)).copy()


def record_times(t_final: float, record_every: float, t_record_start: float = 0.0) -> np.ndarray:
    """t_record_start + k record_every, k = 0 .. K, ending exactly at t_final (ConfigError otherwise)."""
    if record_every <= 0 or t_final < t_record_start or t_record_start < 0:
        raise ConfigError(
            f"record times: need record_every > 0 and 0 <= t_record_start <= t_final, got record_every = "
            f"{record_every}, t_record_start = {t_record_start}, t_final = {t_final}"
        )
    q = (t_final - t_record_start) / record_every
    k = round(q)
    if abs(q - k) > 1e-9 * max(1.0, q):
        raise ConfigError(
            f"t_final - t_record_start = {t_final - t_record_start} is not a multiple of "
            f"record_every = {record_every}; "
            f"use t_final = {t_record_start + k * record_every:g} or change record_every"
        )
    return t_record_start + record_every * np.arange(k + 1, dtype=np.float64)


# ------------------------------------------------------------------------------------------------
# exponential integrator coefficients


def phi_functions(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """phi_1, phi_2, phi_3 of real ``z`` (phi_k(z) = sum_j z^j / (j + k)!), accurate in float64.

    Closed forms (e^z - 1)/z, (e^z - 1 - z)/z^2, (e^z - 1 - z - z^2/2)/z^3 for |z| >= 0.1,
    12-term Taylor series below (remainder < 1e-17), which avoids the cancellation near 0.
    """
    import torch

    small = z.abs() < 0.1
    zs = torch.where(small, torch.ones_like(z), z)
    em1 = torch.expm1(zs)
    p1 = em1 / zs
    p2 = (em1 - zs) / zs**2
    p3 = (em1 - zs - 0.5 * zs**2) / zs**3
    zt = torch.where(small, z, torch.zeros_like(z))
    taylor = []
    for k in (1, 2, 3):
        acc = torch.full_like(zt, 1.0 / math.factorial(k + 11))
        for j in range(10, -1, -1):
            acc = acc * zt + 1.0 / math.factorial(j + k)
        taylor.append(acc)
    return (torch.where(small, taylor[0], p1), torch.where(small, taylor[1], p2), torch.where(small, taylor[2], p3))


# ------------------------------------------------------------------------------------------------
# the solver


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when available, else ``"cpu"``; other names are checked."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r}: CUDA is not available on this machine; use device 'cpu' or 'auto'")
    return device


class VorticitySolver:
    """Batched pseudo-spectral solver of w_t + u . grad w = nu Laplacian w + f on [0, L)^2.

    See the module docstring for the discretisation. ``forcing`` is the vorticity forcing f on the
    n x n grid (None = 0). ``dtype`` "float64" (default, data generation) or "float32". States
    are complex ``rfft2`` coefficient tensors of shape ``(batch, n, n // 2 + 1)``.
    """

    def __init__(
        self,
        n: int,
        length: float,
        nu: float,
        forcing: np.ndarray | None = None,
        *,
        device: str = "cpu",
        dtype: Precision = "float64",
    ) -> None:
        import torch

        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 4 or n % 2:
            raise ConfigError(f"grid size n = {n!r}: need an even integer >= 4")
        if not (math.isfinite(length) and length > 0):
            raise ConfigError(f"length = {length!r}: need a finite period L > 0")
        if not (math.isfinite(nu) and nu >= 0):
            raise ConfigError(f"nu = {nu!r}: need a finite viscosity >= 0")
        if dtype not in ("float64", "float32"):
            raise ConfigError(f"dtype {dtype!r} is not one of ['float64', 'float32']")
        self.n, self.length, self.nu = int(n), float(length), float(nu)
        self.device = torch.device(resolve_device(device))
        self.rdtype = torch.float64 if dtype == "float64" else torch.float32
        self.cdtype = torch.complex128 if dtype == "float64" else torch.complex64
        self.dx = self.length / self.n

        m_x = np.fft.fftfreq(n, d=1.0 / n)
        m_y = np.fft.rfftfreq(n, d=1.0 / n)
        scale = 2 * np.pi / self.length
        kx = scale * m_x[:, None] * np.ones((1, m_y.size))
        ky = scale * m_y[None, :] * np.ones((m_x.size, 1))
        k2 = kx**2 + ky**2
        inv_k2 = np.where(k2 > 0, 1.0 / np.where(k2 > 0, k2, 1.0), 0.0)
        # spectral derivatives; the Nyquist mode has no consistent derivative and gets zero
        kx_d = np.where(np.abs(m_x[:, None]) == n // 2, 0.0, kx)
        ky_d = np.where(np.abs(m_y[None, :]) == n // 2, 0.0, ky)

        def t(a: np.ndarray, dt: Any) -> torch.Tensor:
            return torch.as_tensor(a, dtype=dt, device=self.device)

        self.k2 = t(k2, torch.float64)  # kept in float64 for the coefficients
        self.lin = -self.nu * self.k2  # L = -nu |k|^2
        self.dx_op = t(1j * kx_d, self.cdtype)
        self.dy_op = t(1j * ky_d, self.cdtype)
        self.u_op = t(1j * ky_d * inv_k2, self.cdtype)  # u_hat = i ky psi_hat
        self.v_op = t(-1j * kx_d * inv_k2, self.cdtype)  # v_hat = -i kx psi_hat
        self.inv_k2 = t(inv_k2, self.rdtype)
        self.mask = t(dealias_mask(n).astype(np.float64), self.rdtype)
        if forcing is None:
            self.f_hat = None
        else:
            f = np.asarray(forcing, dtype=np.float64)
            if f.shape != (n, n):
                raise ConfigError(f"forcing has shape {f.shape}; need the ({n}, {n}) grid values")
            self.f_hat = torch.fft.rfft2(t(f, self.rdtype))

    # ---- transforms and diagnostics

    def to_spectral(self, w: np.ndarray | torch.Tensor) -> torch.Tensor:
        """rfft2 of physical fields ``(batch, n, n)``."""
        import torch

        w = torch.as_tensor(w, device=self.device).to(self.rdtype)
        if w.shape[-2:] != (self.n, self.n):
            raise ConfigError(f"fields have grid shape {tuple(w.shape[-2:])}; this solver is ({self.n}, {self.n})")
        return torch.fft.rfft2(w)

    def to_physical(self, w_hat: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.fft.irfft2(w_hat, s=(self.n, self.n))

    def stream_function(self, w_hat: torch.Tensor) -> torch.Tensor:
        """psi_hat = w_hat / |k|^2 (mean mode 0): the solution of -Laplacian psi = w - mean(w)."""
        return w_hat * self.inv_k2

    def velocity(self, w_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Physical velocity (u, v) = (psi_y, -psi_x)."""
        return self.to_physical(w_hat * self.u_op), self.to_physical(w_hat * self.v_op)

    def speed(self, w_hat: torch.Tensor) -> torch.Tensor:
        """Per-sample max|u| / dx + max|v| / dy (the CFL number of a unit step)."""
        u, v = self.velocity(w_hat)
        return (u.abs().amax(dim=(-2, -1)) + v.abs().amax(dim=(-2, -1))) / self.dx

    def rhs(self, w_hat: torch.Tensor, with_speed: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """N(w) = -P(u w_x + v w_y) + f (spectral, dealiased) and the per-sample speed (see :meth:`speed`;
        None unless ``with_speed``)."""
        import torch

        # four separate transforms: batching them into one call is slower on CPU (cache) and no
        # faster on CUDA
        u, v = self.to_physical(w_hat * self.u_op), self.to_physical(w_hat * self.v_op)
        adv = u * self.to_physical(w_hat * self.dx_op)
        adv += v * self.to_physical(w_hat * self.dy_op)
        adv = torch.fft.rfft2(adv) * self.mask
        speed = (u.abs().amax(dim=(-2, -1)) + v.abs().amax(dim=(-2, -1))) / self.dx if with_speed else None
        out = -adv if self.f_hat is None else self.f_hat - adv
        return out, speed

    # ---- one-step coefficients

    def _cn_coefficients(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A = (1 + hL/2) / (1 - hL/2), B = h / (1 - hL/2) for per-sample steps ``h`` (batch,)."""
        hl = h[:, None, None] * self.lin
        den = 1.0 - 0.5 * hl
        return ((1.0 + 0.5 * hl) / den).to(self.rdtype), (h[:, None, None] / den).to(self.rdtype)

    def _etd_coefficients(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """ETDRK4 coefficients E, E2, Q, F1, F2, F3 for per-sample steps ``h`` (batch,), float64 then cast."""
        import torch

        hb = h[:, None, None]
        z = hb * self.lin
        e, e2 = torch.exp(z), torch.exp(0.5 * z)
        q = 0.5 * hb * phi_functions(0.5 * z)[0]
        p1, p2, p3 = phi_functions(z)
        f1 = hb * (p1 - 3 * p2 + 4 * p3)
        f2 = hb * (p2 - 2 * p3)
        f3 = hb * (-p2 + 4 * p3)
        return tuple(c.to(self.rdtype) for c in (e, e2, q, f1, f2, f3))

    # ---- steps (n1 = N(w) already evaluated)

    def _step(self, scheme: str, w: torch.Tensor, n1: torch.Tensor, coef: tuple[torch.Tensor, ...]) -> torch.Tensor:
        if scheme == "fno":
            a, b = coef
            return a * w + b * n1
        if scheme == "heun_cn":
            a, b = coef
            pred = a * w + b * n1
            n2, _ = self.rhs(pred, False)
            return a * w + b * (0.5 * (n1 + n2))
        e, e2, q, f1, f2, f3 = coef
        a = e2 * w + q * n1
        na, _ = self.rhs(a, False)
        b = e2 * w + q * na
        nb, _ = self.rhs(b, False)
        c = e2 * a + q * (2 * nb - n1)
        nc, _ = self.rhs(c, False)
        return e * w + f1 * n1 + 2 * f2 * (na + nb) + f3 * nc

    def _coefficients(self, scheme: str, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._etd_coefficients(h) if scheme == "etdrk4" else self._cn_coefficients(h)

    # ---- integration

    def integrate(
        self,
        w0: np.ndarray | torch.Tensor,
        times: Sequence[float] | np.ndarray,
        *,
        scheme: Scheme = "etdrk4",
        dt: float = 1e-4,
        cfl: float | None = None,
        dt_max: float = math.inf,
        cfl_limit: float = 1.0,
        store_stride: int = 1,
        check_every: int = 100,
        chunk: int | None = None,
        sample_indices: Sequence[int] | None = None,
        seed: int | None = None,
        stats: dict[str, Any] | None = None,
    ) -> np.ndarray:
        """Integrate physical initial fields ``w0`` (batch, n, n) from t = 0; return the states at ``times``.

        Returns float64 numpy ``(batch, len(times), n / store_stride, n / store_stride)``; a record
        at t = 0 is the initial field itself. Fixed steps of at most ``dt`` unless ``scheme =
        "etdrk4"`` and ``cfl`` is given (adaptive, see module docstring; ``dt_max`` caps the step).

        ``chunk``: samples advanced together (vectorised). Default: 1 on CPU, which makes every
        sample's result bit-identical whatever batch it comes in (batched FFTs and the vectorised
        loops' tails round differently); the whole batch on CUDA, where batching is what makes it
        fast and results agree across batchings to round-off.

        Errors name ``sample_indices[b]`` (default b) and ``seed``. ``stats`` (optional dict) gets
        ``steps`` (per sample) and ``evaluations`` (batched right-hand-side evaluations, summed over chunks).
        """
        import torch

        if scheme not in SCHEMES:
            raise ConfigError(f"scheme {scheme!r} is not one of {list(SCHEMES)}")
        if cfl is not None and scheme != "etdrk4":
            raise ConfigError(f"scheme {scheme!r} takes fixed steps; give dt (cfl targets are for 'etdrk4')")
        if cfl is not None and not (0 < cfl < cfl_limit):
            raise ConfigError(f"cfl = {cfl!r}: need 0 < cfl < cfl_limit = {cfl_limit}")
        if not (dt > 0 and math.isfinite(dt)) or not dt_max > 0:
            raise ConfigError(f"dt = {dt!r}, dt_max = {dt_max!r}: need positive step sizes")
        if store_stride < 1 or self.n % store_stride:
            raise ConfigError(f"store_stride = {store_stride} must divide the grid size {self.n}")
        times = np.asarray(times, dtype=np.float64)
        if times.ndim != 1 or times.size == 0 or times[0] < 0 or np.any(np.diff(times) <= 0):
            raise ConfigError(f"record times {times.tolist()} must be a non-empty increasing list of times >= 0")
        w0 = torch.as_tensor(w0, device=self.device).to(self.rdtype)
        if w0.ndim != 3 or w0.shape[-2:] != (self.n, self.n):
            raise ConfigError(
                f"initial fields must be a batch (batch, {self.n}, {self.n}); got shape {tuple(w0.shape)}"
            )
        nb = w0.shape[0]
        ids = list(range(nb)) if sample_indices is None else [int(i) for i in sample_indices]
        if len(ids) != nb:
            raise ConfigError(f"{len(ids)} sample indices for a batch of {nb}")
        if chunk is None:
            chunk = 1 if self.device.type == "cpu" else max(nb, 1)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ConfigError(f"chunk = {chunk!r}: need an integer >= 1")

        out = np.empty((nb, times.size, self.n // store_stride, self.n // store_stride))
        steps = np.zeros(nb, dtype=np.int64)
        evaluations = 0
        for c0 in range(0, nb, chunk):
            sl = slice(c0, min(c0 + chunk, nb))
            part: dict[str, Any] = {}
            out[sl] = self._integrate_batch(
                w0[sl], times, scheme, dt, cfl, dt_max, cfl_limit, store_stride, check_every, ids[sl], seed, part
            )
            steps[sl] = part["steps"]
            evaluations += part["evaluations"]
        if stats is not None:
            stats["steps"] = steps
            stats["evaluations"] = evaluations
        return out

    def _integrate_batch(
        self,
        w0: torch.Tensor,
        times: np.ndarray,
        scheme: str,
        dt: float,
        cfl: float | None,
        dt_max: float,
        cfl_limit: float,
        store_stride: int,
        check_every: int,
        ids: list[int],
        seed: int | None,
        stats: dict[str, Any],
    ) -> np.ndarray:
        """:meth:`integrate` for one vectorised batch (arguments already checked)."""
        import torch

        nb = w0.shape[0]
        w_hat = torch.fft.rfft2(w0)

        def fail(b: int, what: str) -> SolverError:
            return SolverError(what, index=ids[b], seed=seed)

        steps_per_sample = torch.zeros(nb, dtype=torch.int64)
        evaluations = 0
        out = np.empty((nb, times.size, self.n // store_stride, self.n // store_stride))

        def record(k: int, w_hat: torch.Tensor, t: float) -> None:
            w = w0 if t == 0 else self.to_physical(w_hat)  # the initial field itself, no FFT round trip
            bad = ~torch.isfinite(w).all(dim=-1).all(dim=-1)
            if bool(bad.any()):
                b = int(torch.nonzero(bad)[0])
                raise fail(b, f"non-finite vorticity at t = {t:g} (the solution blew up; reduce dt or cfl)")
            out[:, k] = w[:, ::store_stride, ::store_stride].to(torch.float64).cpu().numpy()

        t_now = 0.0
        for k, t_rec in enumerate(times):
            interval = float(t_rec) - t_now
            if interval > 0:
                if cfl is None:
                    m = max(1, math.ceil(interval / dt - 1e-9))
                    h = torch.full((nb,), interval / m, dtype=torch.float64, device=self.device)
                    coef = self._coefficients(scheme, h)
                    peak = torch.zeros(nb, dtype=self.rdtype, device=self.device)
                    for j in range(m):
                        n1, speed = self.rhs(w_hat)
                        peak = torch.maximum(peak, speed)
                        w_hat = self._step(scheme, w_hat, n1, coef)
                        if (j + 1) % check_every == 0 or j == m - 1:
                            c = peak.to(torch.float64) * (interval / m)
                            bad = ~torch.isfinite(c) | (c > cfl_limit)
                            if bool(bad.any()):
                                b = int(torch.nonzero(bad)[0])
                                raise fail(
                                    b,
                                    f"CFL number {float(c[b]):.3g} above the limit {cfl_limit} (or non-finite) before "
                                    f"t = {t_now + (j + 1) * interval / m:g} with dt = {interval / m:.3g}: "
                                    "the solution is blowing up or the step is too large; reduce dt",
                                )
                    steps_per_sample += m
                    evaluations += m * (1, 2, 4)[SCHEMES.index(scheme)]
                else:
                    w_hat, steps, evals = self._adaptive_interval(
                        w_hat, interval, t_now, cfl, dt_max, cfl_limit, fail
                    )
                    steps_per_sample += steps
                    evaluations += evals
            record(k, w_hat, float(t_rec))
            t_now = float(t_rec)
        stats["steps"] = steps_per_sample.numpy()
        stats["evaluations"] = evaluations
        return out

    def _adaptive_interval(
        self,
        w_hat: torch.Tensor,
        interval: float,
        t0: float,
        cfl: float,
        dt_max: float,
        cfl_limit: float,
        fail: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """ETDRK4 over one record interval with per-sample CFL-chosen steps landing on its end."""
        import torch

        nb = w_hat.shape[0]
        dev = self.device
        h = torch.zeros(nb, dtype=torch.float64, device=dev)
        left = torch.zeros(nb, dtype=torch.int64, device=dev)  # steps left in the current plan
        done = torch.zeros(nb, dtype=torch.int64, device=dev)  # steps taken in this interval
        active = torch.ones(nb, dtype=torch.bool, device=dev)
        first = True
        coef: tuple[torch.Tensor, ...] = ()
        evals = 0
        h_min = _MIN_STEP_FRACTION * interval
        while True:
            n1, speed = self.rhs(w_hat)
            evals += 1
            speed = speed.to(torch.float64)
            if not bool(torch.isfinite(speed[active]).all()):
                b = int(torch.nonzero(active & ~torch.isfinite(speed))[0])
                raise fail(b, f"non-finite velocity after t = {t0:g} (the solution blew up)")
            lo, hi = _CFL_BAND
            c = h * speed
            if first:
                replan = active.clone()
                rem = torch.full_like(h, interval)
            else:
                grow = (c < lo * cfl) & (h < dt_max * (1 - 1e-12)) & (left > 1)
                replan = active & ((c > min(hi * cfl, cfl_limit)) | grow)
                rem = left.to(torch.float64) * h
            first = False
            if bool(replan.any()):
                target = torch.clamp(cfl / torch.clamp(speed, min=1e-300), max=dt_max)
                m = torch.clamp(torch.ceil(rem / target - 1e-9), min=1.0)
                h_new = rem / m
                small = replan & (h_new < h_min)
                if bool(small.any()):
                    b = int(torch.nonzero(small)[0])
                    raise fail(
                        b,
                        f"adaptive step {float(h_new[b]):.3g} fell below {h_min:.3g} after t = {t0:g} "
                        f"(speed {float(speed[b]):.3g}): the solution is blowing up",
                    )
                h = torch.where(replan, h_new, h)
                left = torch.where(replan, m.to(torch.int64), left)
                coef = self._etd_coefficients(h)
            w_new = self._step("etdrk4", w_hat, n1, coef)
            evals += 3
            w_hat = torch.where(active[:, None, None], w_new, w_hat)
            left = left - active.to(torch.int64)
            done = done + active.to(torch.int64)
            active = left > 0
            if not bool(active.any()):
                return w_hat, done.cpu(), evals


def solve(
    w0: np.ndarray,
    times: Sequence[float] | np.ndarray,
    *,
    length: float,
    nu: float,
    forcing: np.ndarray | None = None,
    scheme: Scheme = "etdrk4",
    dt: float = 1e-4,
    cfl: float | None = None,
    dt_max: float = math.inf,
    cfl_limit: float = 1.0,
    store_stride: int = 1,
    device: str = "cpu",
    dtype: Precision = "float64",
    chunk: int | None = None,
    sample_indices: Sequence[int] | None = None,
    seed: int | None = None,
    stats: dict[str, Any] | None = None,
) -> np.ndarray:
    """Solve from physical initial vorticities ``w0`` (batch, n, n); see :meth:`VorticitySolver.integrate`."""
    w0 = np.asarray(w0)
    if w0.ndim != 3 or w0.shape[1] != w0.shape[2]:
        raise ConfigError(f"initial vorticity must have shape (batch, n, n); got {w0.shape}")
    solver = VorticitySolver(w0.shape[1], length, nu, forcing, device=device, dtype=dtype)
    return solver.integrate(
        w0,
        times,
        scheme=scheme,
        dt=dt,
        cfl=cfl,
        dt_max=dt_max,
        cfl_limit=cfl_limit,
        store_stride=store_stride,
        chunk=chunk,
        sample_indices=sample_indices,
        seed=seed,
        stats=stats,
    )


# ------------------------------------------------------------------------------------------------
# generators


def _check_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ConfigError(f"{name} = {value!r}: need a finite number {'>= 0' if allow_zero else '> 0'}")


def _check_int(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} = {value!r}: need an integer >= {low}")


def _check_device(device: str) -> None:
    if device != "auto" and not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise ConfigError(f"device = {device!r}: use 'auto' (CUDA when available), 'cpu', 'cuda' or 'cuda:<i>'")


def _check_grid(resolution: int, store_resolution: int) -> None:
    _check_int("resolution", resolution, 8)
    if resolution % 2:
        raise ConfigError(f"resolution = {resolution}: the spectral solver needs an even grid size")
    _check_int("store_resolution", store_resolution, 2)
    if resolution % store_resolution:
        divisors = [d for d in range(2, resolution + 1) if resolution % d == 0]
        raise ConfigError(
            f"store_resolution = {store_resolution} does not divide resolution = {resolution} (periodic grids are "
            f"subsampled by stride n_solve / n_store); choose one of {divisors}"
        )


def _check_stepping(p: Any) -> None:
    _check_positive("dt", p.dt)
    _check_positive("cfl_limit", p.cfl_limit)
    _check_positive("dt_max", p.dt_max)
    _check_positive("cfl", p.cfl)
    if p.cfl >= p.cfl_limit:
        raise ConfigError(f"cfl = {p.cfl} must be below cfl_limit = {p.cfl_limit} (the blow-up threshold)")
    _check_int("batch_size", p.batch_size, 1)
    _check_device(p.device)


def _periodic_coords(n: int, length: float, times: np.ndarray) -> dict[str, Variable]:
    x = grid_points(n, length)
    grid = {"units": "1", "grid_type": "periodic", "period": float(length)}
    return {
        # the equations are nondimensional (L = 1 or 2 pi, nu a pure number): time, space and
        # vorticity all carry CF's dimensionless unit "1"
        "t": Variable(("t",), times, {"units": "1", "long_name": "time"}),
        "x": Variable(("x",), x, {**grid, "long_name": "x coordinate (periodic, endpoint excluded)"}),
        "y": Variable(("y",), x.copy(), {**grid, "long_name": "y coordinate (periodic, endpoint excluded)"}),
    }


def _initial_vorticity(p: Any, seed: int, indices: np.ndarray, length: float) -> np.ndarray:
    """Gaussian initial vorticities from ``sample_rng(seed, i)``, one sample per sampler call:
    batched FFTs round differently from single ones, and this keeps sample i bit-identical
    whatever block or shard it is generated in."""
    from solvers.grf import periodic_grf

    w0 = np.empty((len(indices), p.resolution, p.resolution))
    for b, i in enumerate(indices):
        w0[b] = periodic_grf(
            [sample_rng(seed, int(i))],
            p.resolution,
            alpha=p.ic_alpha,
            tau=p.ic_tau,
            sigma=p.ic_sigma,
            length=length,
            convention=p.ic_convention,
            draw=p.ic_draw,
        )[0]
    return w0


def _run(
    gen: Generator,
    w0: np.ndarray,
    times: np.ndarray,
    length: float,
    forcing: np.ndarray | None,
    seed: int,
    indices: np.ndarray,
) -> np.ndarray:
    p = gen.params
    return solve(
        w0,
        times,
        length=length,
        nu=p.nu,
        forcing=forcing,
        scheme=p.scheme,
        dt=p.dt,
        cfl=p.cfl if p.scheme == "etdrk4" else None,
        dt_max=p.dt_max,
        cfl_limit=p.cfl_limit,
        store_stride=p.resolution // p.store_resolution,
        device=p.device,
        dtype=p.precision,
        sample_indices=[int(i) for i in indices],
        seed=int(seed),
    )


class _VorticityGenerator(Generator):
    """What the vorticity generators share: a (sample, t, x, y) trajectory of one field on a periodic
    square of side ``length``, stored at ``store_resolution``, from a GRF initial vorticity, solved
    in blocks of ``batch_size`` samples. Subclasses give ``times()`` (the stored frames) and
    ``forcing()`` (the curl of the body force on the solve grid, or None)."""

    length: float = 1.0
    description = "vorticity w = v_x - u_y"

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.block_size = params.batch_size

    def times(self) -> np.ndarray:
        raise NotImplementedError

    def forcing(self) -> np.ndarray | None:
        raise NotImplementedError

    def dims(self) -> dict[str, int]:
        s = self.params.store_resolution
        return {"t": int(self.times().size), "x": s, "y": s}

    def coords(self) -> dict[str, Variable]:
        return _periodic_coords(self.params.store_resolution, self.length, self.times())

    def fields(self) -> dict[str, FieldSpec]:
        return {"vorticity": FieldSpec(("t", "x", "y"), "1", self.description, "output")}

    def initial_vorticity(self, seed: int, indices: np.ndarray) -> np.ndarray:
        """w0 of samples ``indices`` on the solve grid, (len(indices), n, n) float64."""
        return _initial_vorticity(self.params, seed, indices, self.length)

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        indices = np.asarray(indices, dtype=np.int64)
        w0 = self.initial_vorticity(seed, indices)
        return {"vorticity": _run(self, w0, self.times(), self.length, self.forcing(), seed, indices)}


@register
class NavierStokes(_VorticityGenerator):
    """``navier_stokes``: the FNO torus protocol (Li et al. 2020; ONO, GNOT, Galerkin "NS2d").

    Field ``vorticity[sample, t, x, y]`` (float32, "1"): frame k is w at ``t[k]`` = t_record_start
    + k record_every, so with the defaults frame 0 is the initial condition w0 and frames 1..20 are
    t = 1..20. The published 2020 files stored w0 separately as ``a`` and ``u[..., k]`` = w(t = k + 1);
    here ``a`` = frame 0 and ``u[..., k]`` = frame k + 1. The ONO/GNOT "10 -> 10" task (nu = 1e-5,
    T = 20) maps frames 1..10 (t = 1..10) to frames 11..20 (t = 11..20); frame 0 is not used.

    Initial vorticity: :func:`solvers.grf.periodic_grf` with the 2020 FNO convention (``fno2020``:
    alpha = 2.5, tau = 7, sigma = 7^(3/2), pixel std 0.262), sampled on the solve grid from
    ``sample_rng(seed, i)`` in the resolution-independent mode order (``ic_draw: modes``; the
    published code's per-grid noise is ``ic_draw: grid``). Forcing 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y)).
    """

    name = "navier_stokes"
    legacy_params: ClassVar[dict[str, Any]] = {"ic_draw": "grid"}
    block_size = 8

    @dataclass(frozen=True)
    class Params:
        """Parameters; the defaults are the FNO nu = 1e-5, T = 20 protocol solved with ``etdrk4``
        (the scheme config/default.yaml uses; ``scheme: fno`` with dt = 1e-4 is the published update).

        nu: viscosity. t_final, record_every, t_record_start: records at t_record_start +
        k record_every up to t_final (frame 0 = w0 when t_record_start = 0). resolution: solve grid
        (256); store_resolution: stored grid (64; stride 4). scheme: "etdrk4" (default and
        recommended; adaptive with cfl target ``cfl`` and step cap ``dt_max``), "fno" (the
        published scheme, dt = 1e-4) or "heun_cn". dt: the (largest) step of fixed-step schemes.
        cfl_limit: CFL number treated as a blow-up. forcing: "fno" or "none". ic_*: the Gaussian initial vorticity
        (periodic_grf, convention ic_convention, draw order ic_draw: "modes" = the same w0 at every
        solve resolution, "grid" = the 2020 code's per-grid noise). precision: float64 (default) or float32.
        device: "auto", "cpu", "cuda[:i]". batch_size: samples solved together (does not change
        the data).
        """

        nu: float = 1e-5
        t_final: float = 20.0
        record_every: float = 1.0
        t_record_start: float = 0.0
        resolution: int = 256
        store_resolution: int = 64
        scheme: Scheme = "etdrk4"
        dt: float = 1e-4
        cfl: float = 0.5
        dt_max: float = 0.02
        cfl_limit: float = 1.0
        forcing: Literal["fno", "none"] = "fno"
        ic_alpha: float = 2.5
        ic_tau: float = 7.0
        ic_sigma: float = 7.0**1.5
        ic_convention: Literal["fno2020", "kl"] = "fno2020"
        ic_draw: Literal["modes", "grid"] = "modes"
        precision: Precision = "float64"
        device: str = "auto"
        batch_size: int = 8

        def __post_init__(self) -> None:
            _check_positive("nu", self.nu, allow_zero=True)
            _check_positive("t_final", self.t_final)
            _check_positive("record_every", self.record_every)
            _check_positive("t_record_start", self.t_record_start, allow_zero=True)
            record_times(self.t_final, self.record_every, self.t_record_start)
            _check_grid(self.resolution, self.store_resolution)
            _check_stepping(self)
            for name in ("ic_alpha", "ic_tau", "ic_sigma"):
                _check_positive(name, getattr(self, name))

    def times(self) -> np.ndarray:
        p = self.params
        return record_times(p.t_final, p.record_every, p.t_record_start)

    def forcing(self) -> np.ndarray | None:
        p = self.params
        return fno_forcing(p.resolution) if p.forcing == "fno" else None


@register
class Kolmogorov(_VorticityGenerator):
    """``kolmogorov``: Kolmogorov flow pairs (w(T), w(T + gap)) (continuum attention, Calvello et al. 2024).

    u_t + u . grad u + grad p = nu Laplacian u + sin(n y) e_x on [0, 2 pi]^2, solved in vorticity
    form (forcing -n cos(n y)), n = 4, nu = 1/70, from w0 ~ N(0, sigma^2 (-Laplacian + tau^2)^(-alpha)).

    Field ``vorticity[sample, t, x, y]`` with t = [T, T + gap] = [11, 11.1]: the operator maps
    frame 0 (input) to frame 1 (output), the same trajectory layout as ``navier_stokes``.

    Initial condition (PROTOCOLS.md: "taken literally its amplitude is tiny"). The paper writes
    C = 7^3 (-Laplacian + 49 I)^(-5); taken as a true covariance its pixel standard deviation is
    about 1e-3 and the flow at T = 11 would still be close to the laminar state. The authors' code
    loads ``NavierStokes_N10000_s416_FP_FNO_Re70_11to111.pt`` (github.com/EdoardoCalvello/
    TransformerNeuralOperators, datasets.py), i.e. data from the FNO group's Kolmogorov generator
    (Re = 1/nu = 70, T = 11 -> 11.1), whose initial field is ``GaussianRF(2, s, 2 pi, alpha=2.5,
    tau=7)`` (default sigma = tau^(alpha - 1) = 7^(3/2), hence the paper's 7^3 = sigma^2). Its
    distribution is that of :func:`solvers.grf.periodic_grf` with convention "fno2020", alpha =
    2.5, tau = 7, sigma = 7^(3/2), L = 2 pi (pixel std about 2.0): that is the default here, an
    inference from the released code, not a statement of the paper. The literal reading is
    ``ic_alpha=5, ic_convention="kl"``.
    """

    name = "kolmogorov"
    legacy_params: ClassVar[dict[str, Any]] = {"ic_draw": "grid"}
    block_size = 4

    @dataclass(frozen=True)
    class Params:
        """Parameters; defaults: the continuum-attention protocol at 416 x 416 with the etdrk4 scheme.

        wavenumber: forcing sin(n y) e_x. nu: viscosity (1/70). t_input, t_gap: records at
        t_input and t_input + t_gap. resolution / store_resolution: solve and stored grids.
        scheme, dt, cfl, dt_max, cfl_limit: time stepping as for ``navier_stokes`` (dt is the
        fixed step of "fno" / "heun_cn"; the FNO group's Kolmogorov code used Heun-CN with 1e-3).
        ic_*: the Gaussian initial vorticity (see the class docstring). precision, device,
        batch_size: as for ``navier_stokes``.
        """

        wavenumber: int = 4
        nu: float = 1.0 / 70.0
        t_input: float = 11.0
        t_gap: float = 0.1
        resolution: int = 416
        store_resolution: int = 416
        scheme: Scheme = "etdrk4"
        dt: float = 1e-3
        cfl: float = 0.5
        dt_max: float = 0.01
        cfl_limit: float = 1.0
        ic_alpha: float = 2.5
        ic_tau: float = 7.0
        ic_sigma: float = 7.0**1.5
        ic_convention: Literal["fno2020", "kl"] = "fno2020"
        ic_draw: Literal["modes", "grid"] = "modes"
        precision: Precision = "float64"
        device: str = "auto"
        batch_size: int = 4

        def __post_init__(self) -> None:
            _check_int("wavenumber", self.wavenumber, 0)
            _check_positive("nu", self.nu)
            _check_positive("t_input", self.t_input, allow_zero=True)
            _check_positive("t_gap", self.t_gap)
            _check_grid(self.resolution, self.store_resolution)
            if self.wavenumber > dealias_cutoff(self.resolution):
                raise ConfigError(
                    f"wavenumber = {self.wavenumber} lies outside the dealiased band |k| <= "
                    f"{dealias_cutoff(self.resolution)} of resolution {self.resolution}; raise the resolution"
                )
            _check_stepping(self)
            for name in ("ic_alpha", "ic_tau", "ic_sigma"):
                _check_positive(name, getattr(self, name))

    length = 2 * np.pi
    description = "vorticity w = v_x - u_y at t = [T, T + gap]"

    def times(self) -> np.ndarray:
        p = self.params
        return np.array([p.t_input, p.t_input + p.t_gap], dtype=np.float64)

    def forcing(self) -> np.ndarray | None:
        p = self.params
        return kolmogorov_forcing(p.resolution, p.wavenumber) if p.wavenumber > 0 else None
