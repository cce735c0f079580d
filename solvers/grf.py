"""Gaussian random field samplers N(0, sigma^2 (-Laplacian + tau^2 I)^(-alpha)), batched and seeded.

Two domains, each with the convention of the published generators and a Karhunen-Loeve (KL)
convention whose amplitude is the true one:

* :func:`neumann_grf`: the unit square with zero-Neumann boundary, mean-zero functions (the
  constant mode is zeroed). Eigenpairs of -Laplacian: pi^2 |k|^2 with the L2-normalised cosines
  phi_k(x, y) = c_k1 c_k2 cos(pi k1 x) cos(pi k2 y), c_0 = 1, c_k = sqrt(2) (k >= 1). Used by Darcy
  flow (PROTOCOLS.md: FNO protocol and continuum-attention protocol).
* :func:`periodic_grf`: the torus [0, L)^d (d = 1, 2, 3), eigenpairs (2 pi / L)^2 |k|^2 with
  e_k(x) = exp(2 pi i k.x / L) / L^(d/2). Used by Navier-Stokes (d = 2) and Burgers (d = 1).

Every sampler takes one :class:`numpy.random.Generator` per sample (from
:func:`opflow.data.provenance.sample_rng` ``(seed, i)``), draws that sample's white noise from its
own generator only, then transforms the whole batch in one vectorised FFT/DCT call. Sample ``i`` is
therefore the same, bit for bit, whatever batch or shard it is computed in (the transforms run per
sample: a batched FFT may round differently from a single one at large sizes).

Draw order (``draw``). How a sample's white noise becomes mode coefficients decides what a
dataset regenerated at another resolution holds:

* ``"modes"`` (default): the coefficients are drawn from the sample's stream one MODE at a time in a
  fixed order that does not depend on the grid size: shells of increasing max_i |k_i|, and inside a
  shell the modes in lexicographic order of their wavenumbers. A grid with more points only draws
  more shells after the same first ones, so sample i at resolution n and at a finer resolution is
  the same random function: the finer field's modes shared with the coarse grid are the coarse
  field's, bit for bit, and the fine field restricted to the coarse grid's points equals the coarse
  field plus the fine-only modes there (for band-limited fields, exactly the coarse field, to
  round-off). This holds for evaluations at points that are the same functions' arguments at both
  sizes: the Neumann ``"kl"`` nodes n / (s - 1) (s and 2 s - 1 share every second node) and the
  periodic points j L / n (n and 2 n). The Neumann ``"fno"`` convention evaluates at cell centres
  (i + 1/2) / s, which move with s: there the draw is nested but the points are not.
* ``"grid"``: the white noise is one array of the grid's own shape (``rng.standard_normal((s, s))``,
  or ``(n,)*d`` for the periodic KL field), the layout of the published generators (MATLAB
  ``randn(s, s)`` in the FNO Darcy ``GRF.m``, ``torch.randn`` in the 2020 Navier-Stokes code): a
  different size draws an unrelated field. Kept for ``darcy_fno_exact`` (the FNO MATLAB pipeline
  step by step) and to regenerate, bit for bit, files made before the ``"modes"`` order existed.

Array layout: ``field[b, i1, i2]`` is the value at grid point (x[i1], y[i2]) of sample ``b``; mode
arrays are indexed ``[k1, k2]`` the same way. White noise is drawn as ``rng.standard_normal(shape)``
with the shapes stated in each function (this fixes the stream for a given seed).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal

import numpy as np

from opflow.data.errors import ConfigError

NeumannConvention = Literal["fno", "kl"]
PeriodicConvention = Literal["fno2020", "kl"]
Draw = Literal["modes", "grid"]
DRAWS: tuple[str, ...] = ("modes", "grid")

__all__ = [
    "DRAWS",
    "neumann_mode_rank",
    "periodic_mode_rank",
    "neumann_cosines",
    "neumann_grf",
    "neumann_mode_std",
    "neumann_pointwise_variance",
    "periodic_grf",
    "periodic_mode_variance",
    "periodic_pointwise_variance",
]


# --------------------------------------------------------------------------------------------
# argument checks (raised before any work)


def _per_sample(transform, batch: np.ndarray) -> np.ndarray:
    """Apply ``transform`` to each sample of ``batch`` (leading axis) separately.

    Batched FFTs can round differently from single ones, which would make a sample depend on the
    batch it is computed in; per-sample transforms keep every sample bit-identical.
    """
    if batch.shape[0] == 0:
        return np.asarray(transform(batch[:1]))[:0] if batch.ndim > 1 else batch
    return np.stack([transform(b) for b in batch])

def _check_common(n: int, alpha: float, tau: float, sigma: float, what: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise ConfigError(f"{what}: grid size must be an integer, got {n!r}")
    if n < 2:
        raise ConfigError(f"{what}: grid size {n} is too small; use at least 2 points per direction")
    for name, value in (("alpha", alpha), ("tau", tau), ("sigma", sigma)):
        if not np.isfinite(value) or value <= 0:
            raise ConfigError(f"{what}: {name} = {value!r} must be a finite number > 0")


def _check_draw(draw: str, what: str) -> None:
    if draw not in DRAWS:
        raise ConfigError(f"{what}: draw = {draw!r} is not one of {list(DRAWS)} ('modes': the same field at every resolution)")


def _check_rngs(rngs: Sequence[np.random.Generator], what: str) -> list[np.random.Generator]:
    if isinstance(rngs, np.random.Generator):
        raise ConfigError(
            f"{what}: give a sequence of per-sample generators, e.g. [sample_rng(seed, i) for i in indices], "
            "not a single Generator"
        )
    rngs = list(rngs)
    bad = [i for i, r in enumerate(rngs) if not isinstance(r, np.random.Generator)]
    if bad:
        raise ConfigError(
            f"{what}: entries {bad[:5]} are not numpy.random.Generator objects; "
            "use opflow.data.provenance.sample_rng(seed, i)"
        )
    return rngs


# --------------------------------------------------------------------------------------------
# zero-Neumann unit square


def neumann_mode_std(
    s: int,
    *,
    alpha: float,
    tau: float,
    sigma: float = 1.0,
    convention: NeumannConvention = "kl",
) -> np.ndarray:
    """Per-mode standard deviations ``m[k1, k2]`` of the ``(s, s)`` coefficient array of :func:`neumann_grf`.

    ``"kl"``: ``sqrt(lambda_k) = sigma (pi^2 |k|^2 + tau^2)^(-alpha/2)`` (KL coefficient of the
    L2-normalised cosine phi_k). ``"fno"``: ``sigma s tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2)``
    (the FNO generator's coefficients of the orthonormal DCT-II basis; ``sigma = 1`` reproduces
    them). The constant mode is zero in both.
    """
    _check_common(s, alpha, tau, sigma, "neumann_grf")
    if convention not in ("fno", "kl"):
        raise ConfigError(f"neumann_grf: convention {convention!r} is not one of ['fno', 'kl']")
    k2 = np.arange(s, dtype=np.float64) ** 2
    m = sigma * (np.pi**2 * (k2[:, None] + k2[None, :]) + tau**2) ** (-alpha / 2)
    if convention == "fno":
        m *= s * tau ** (alpha - 1)
    m[0, 0] = 0.0
    return m


def _dct1_weights(s: int) -> np.ndarray:
    """Weights w_k such that ``scipy.fft.dct(w * c, type=1)[n] = sum_k c_k phi_k(x_n)`` in 1D.

    Unnormalised DCT-I: y_n = x_0 + (-1)^n x_{s-1} + 2 sum_{k=1}^{s-2} x_k cos(pi k n / (s-1)); the
    L2-normalised cosines are 1 (k = 0) and sqrt(2) cos(pi k x) (k >= 1), at nodes x_n = n / (s-1).
    """
    w = np.full(s, np.sqrt(2.0) / 2.0)
    w[0] = 1.0
    w[-1] = np.sqrt(2.0)
    return w


def neumann_mode_rank(s: int) -> np.ndarray:
    """``rank[k1, k2]``: the position of mode (k1, k2) in the ``"modes"`` draw order, for k = 0 .. s-1.

    Shell m = max(k1, k2) holds the 2 m + 1 modes (0, m), (1, m), .., (m - 1, m), (m, 0), .., (m, m),
    in that order, after the m^2 modes of the shells before it::

        rank = m^2 + k1          if k1 < m
        rank = m^2 + m + k2      if k1 = m

    so the rank of a mode does not depend on s, and the ranks of an s x s grid are 0 .. s^2 - 1.
    """
    k = np.arange(s)
    k1, k2 = np.meshgrid(k, k, indexing="ij")
    m = np.maximum(k1, k2)
    return m * m + np.where(k1 < m, k1, m + k2)


def _neumann_noise(rngs: list[np.random.Generator], s: int, draw: str) -> np.ndarray:
    """White noise ``xi[b, k1, k2]`` of each sample in the ``draw`` order (module docstring)."""
    xi = np.empty((len(rngs), s, s))
    rank = neumann_mode_rank(s) if draw == "modes" else None
    for b, rng in enumerate(rngs):
        xi[b] = rng.standard_normal((s, s)) if rank is None else rng.standard_normal(s * s)[rank]
    return xi


def neumann_grf(
    rngs: Sequence[np.random.Generator],
    s: int,
    *,
    alpha: float,
    tau: float,
    sigma: float = 1.0,
    convention: NeumannConvention = "kl",
    draw: Draw = "modes",
) -> np.ndarray:
    """Samples of g ~ N(0, sigma^2 (-Laplacian + tau^2 I)^(-alpha)) on (0,1)^2, zero Neumann, mean zero.

    Returns an array ``(len(rngs), s, s)``, float64. Each sample draws s^2 standard normals
    ``xi[k1, k2]`` for the modes k = 0 .. s-1 per direction (``xi[0, 0]`` is drawn and discarded):
    with ``draw="modes"`` (default) ``xi[k1, k2] = rng.standard_normal(s * s)[rank[k1, k2]]``
    (:func:`neumann_mode_rank`: the same function at every s, see the module docstring), with
    ``draw="grid"`` ``xi = rng.standard_normal((s, s))``. Then the batch is transformed, O(s^2 log s)
    per sample.

    ``convention="fno"`` (FNO Darcy protocol, PROTOCOLS.md): coefficients
    ``s tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2) xi_k``, constant mode zeroed, then the
    orthonormal inverse 2D DCT-II (``scipy.fft.idctn(type=2, norm="ortho")``, i.e. an orthonormal
    DCT-III), which is what MATLAB's ``idct2`` used by the original generator computes. The DCT-II
    basis vectors are cos(pi k (n + 1/2) / s): the cosines of the unit square sampled at the CELL
    CENTRES (n + 1/2) / s, which is why the original solver interpolated this field from cell
    centres to the nodes. Written out, the result is exactly the KL sum below with
    ``sigma = tau^(alpha-1)`` evaluated at the cell centres; the array is used here as node values
    (as the published data does after thresholding), so only its sign pattern matters for piecewise
    constant coefficients. ``sigma`` multiplies the coefficients (1 = the original).

    ``convention="kl"`` (true amplitude; continuum-attention protocol, e.g. sigma = 12, tau = 6,
    alpha = 2 for lognormal Darcy a = exp(g)): the Karhunen-Loeve expansion
    ``g(x) = sum_{k != 0} sqrt(lambda_k) xi_k phi_k(x)``, ``lambda_k = sigma^2 (pi^2 |k|^2 + tau^2)^(-alpha)``,
    truncated at the grid's modes k1, k2 <= s - 1 and evaluated at the NODES x_n = n / (s - 1),
    both boundaries included. On that node set the cosines cos(pi k n / (s - 1)) are the DCT-I
    basis, so the sum is one unnormalised ``scipy.fft.dctn(type=1)`` with per-mode weights
    (see :func:`_dct1_weights`). Pointwise variance: :func:`neumann_pointwise_variance`.
    """
    import scipy.fft as sfft  # here, so that importing solvers.* stays cheap

    rngs = _check_rngs(rngs, "neumann_grf")
    _check_draw(draw, "neumann_grf")
    m = neumann_mode_std(s, alpha=alpha, tau=tau, sigma=sigma, convention=convention)
    xi = _neumann_noise(rngs, s, draw)
    if not rngs:
        return xi
    if convention == "fno":
        return _per_sample(lambda c: sfft.idctn(c, type=2, norm="ortho"), m * xi)
    w = _dct1_weights(s)
    return _per_sample(lambda c: sfft.dctn(c, type=1), (m * np.outer(w, w)) * xi)


def neumann_cosines(s: int, convention: NeumannConvention = "kl") -> np.ndarray:
    """The 1D L2-normalised cosines ``C[n, k] = phi_k(x_n)`` at the points the sampler uses.

    ``"kl"``: nodes x_n = n / (s-1); ``"fno"``: cell centres x_n = (n + 1/2) / s with the
    orthonormal DCT-II scaling 1/sqrt(s) folded in, so that ``field = C (m * xi) C^T`` for both
    conventions (``m`` from :func:`neumann_mode_std`).
    """
    k = np.arange(s)
    c = np.where(k == 0, 1.0, np.sqrt(2.0))
    if convention == "kl":
        x = np.arange(s) / (s - 1)
        return c[None, :] * np.cos(np.pi * np.outer(x, k))
    x = (np.arange(s) + 0.5) / s
    return c[None, :] * np.cos(np.pi * np.outer(x, k)) / np.sqrt(s)


def neumann_pointwise_variance(
    s: int,
    *,
    alpha: float,
    tau: float,
    sigma: float = 1.0,
    convention: NeumannConvention = "kl",
) -> np.ndarray:
    """Exact variance ``sum_k m_k^2 phi_k(x)^2`` of :func:`neumann_grf` at each grid point, ``(s, s)``."""
    m2 = neumann_mode_std(s, alpha=alpha, tau=tau, sigma=sigma, convention=convention) ** 2
    c2 = neumann_cosines(s, convention) ** 2
    return c2 @ m2 @ c2.T


# --------------------------------------------------------------------------------------------
# periodic torus [0, L)^d


def _wavenumbers(n: int, dim: int) -> np.ndarray:
    """|k|^2 on the full FFT grid of ``n^dim`` modes (integer wavenumbers, numpy.fft order)."""
    k = np.fft.fftfreq(n, d=1.0 / n)
    k2 = k**2
    out = np.zeros((n,) * dim)
    for ax in range(dim):
        shape = [1] * dim
        shape[ax] = n
        out = out + k2.reshape(shape)
    return out


def _integer_modes(n: int, dim: int) -> list[np.ndarray]:
    """The integer wavenumber arrays k_1 .. k_dim on the full FFT grid (numpy.fft order)."""
    k = np.rint(np.fft.fftfreq(n, d=1.0 / n)).astype(np.int64)
    return list(np.meshgrid(*([k] * dim), indexing="ij"))


def _shell(n: int, dim: int) -> np.ndarray:
    """max_i |k_i| of every mode of the full FFT grid."""
    return np.max(np.abs(np.stack(_integer_modes(n, dim))), axis=0)


def _band(n: int, dim: int, max_mode: int | None) -> np.ndarray:
    """True for the modes a field keeps: max_i |k_i| <= max_mode (all when ``max_mode`` is None)."""
    if max_mode is None:
        return np.ones((n,) * dim, dtype=bool)
    return _shell(n, dim) <= max_mode


@functools.lru_cache(maxsize=16)
def periodic_mode_rank(n: int, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``"modes"`` draw order of the periodic sampler on ``n^dim`` points: ``(rep, neg, rank)``.

    The modes drawn are those with every |k_i| <= K = (n - 1) // 2 (the Nyquist lines k_i = -n/2 of
    an even grid are left out: on the grid they alias +n/2 onto -n/2, so they are not the same
    function on a finer grid). A real field pairs k with -k; of each pair the REPRESENTATIVE is the
    mode whose first non-zero wavenumber is positive. Representatives are ordered by shell
    max_i |k_i|, then lexicographically by (k_1, .., k_dim); ``rank`` is the position in that order,
    which does not depend on n (every mode before a shell-m mode has shell <= m, inside the box of any
    grid with K >= m). Returns flat indices into the FFT grid of the representatives (``rep``, sorted
    by rank) and of their negatives (``neg``), and ``rank`` (0 .. R - 1). Cached; read-only arrays.
    """
    ks = [k.ravel() for k in _integer_modes(n, dim)]
    kmax = (n - 1) // 2
    inside = np.all(np.abs(np.stack(ks)) <= kmax, axis=0)
    first_nonzero = np.zeros_like(ks[0])
    for k in reversed(ks):  # after the loop: the first non-zero component of each mode
        first_nonzero = np.where(k != 0, k, first_nonzero)
    rep = np.flatnonzero(inside & (first_nonzero > 0))
    shell = np.max(np.abs(np.stack([k[rep] for k in ks])), axis=0)
    order = np.lexsort(tuple(k[rep] for k in reversed(ks)) + (shell,))  # last key sorts first
    rep = rep[order]
    neg = np.ravel_multi_index(tuple((-k[rep]) % n for k in ks), (n,) * dim)
    rank = np.arange(rep.size)
    for a in (rep, neg, rank):
        a.setflags(write=False)
    return rep, neg, rank


def _periodic_lambda(n: int, dim: int, alpha: float, tau: float, sigma: float, length: float) -> np.ndarray:
    lam = sigma**2 * ((2 * np.pi / length) ** 2 * _wavenumbers(n, dim) + tau**2) ** (-alpha)
    return lam


def _check_periodic(
    n: int, dim: int, alpha: float, tau: float, sigma: float, length: float, convention: str, draw: str, max_mode: int | None
) -> None:
    _check_common(n, alpha, tau, sigma, "periodic_grf")
    if dim not in (1, 2, 3):
        raise ConfigError(f"periodic_grf: dim = {dim!r} must be 1, 2 or 3")
    if not np.isfinite(length) or length <= 0:
        raise ConfigError(f"periodic_grf: length = {length!r} must be a finite number > 0 (the period L)")
    if convention not in ("fno2020", "kl"):
        raise ConfigError(f"periodic_grf: convention {convention!r} is not one of ['fno2020', 'kl']")
    _check_draw(draw, "periodic_grf")
    if max_mode is not None and (isinstance(max_mode, bool) or not isinstance(max_mode, int | np.integer) or max_mode < 1):
        raise ConfigError(f"periodic_grf: max_mode = {max_mode!r} must be an integer >= 1, or None for every mode of the grid")


def periodic_mode_variance(
    n: int,
    *,
    dim: int = 2,
    alpha: float,
    tau: float,
    sigma: float = 1.0,
    length: float = 1.0,
    convention: PeriodicConvention = "kl",
    zero_mean: bool = True,
    draw: Draw = "modes",
    max_mode: int | None = None,
) -> np.ndarray:
    """``E |G_k|^2`` of the unnormalised DFT ``G = numpy.fft.fftn(g)`` of :func:`periodic_grf` samples.

    ``"kl"``: ``n^(2d) lambda_k / L^d``; ``"fno2020"``: ``sqrt_eig_k^2`` = 2 x that (see
    :func:`periodic_grf`). The mean mode is 0 when ``zero_mean`` (always for ``fno2020``); the modes
    outside ``max_mode`` are 0, and so are the Nyquist lines of an even grid with ``draw="modes"``.
    """
    _check_periodic(n, dim, alpha, tau, sigma, length, convention, draw, max_mode)
    lam = _periodic_lambda(n, dim, alpha, tau, sigma, length)
    if convention == "fno2020":
        v = 2.0 * n ** (2 * dim) * lam
    else:
        v = n ** (2 * dim) * lam / length**dim
    if zero_mean or convention == "fno2020":
        v[(0,) * dim] = 0.0
    v[~_band(n, dim, max_mode)] = 0.0
    if draw == "modes":
        v[_shell(n, dim) > (n - 1) // 2] = 0.0
    return v


def periodic_pointwise_variance(
    n: int,
    *,
    dim: int = 2,
    alpha: float,
    tau: float,
    sigma: float = 1.0,
    length: float = 1.0,
    convention: PeriodicConvention = "kl",
    zero_mean: bool = True,
    draw: Draw = "modes",
    max_mode: int | None = None,
) -> float:
    """Exact pixel variance of :func:`periodic_grf` (the same at every point): ``sum_k E|G_k|^2 / n^(2d)``."""
    v = periodic_mode_variance(
        n, dim=dim, alpha=alpha, tau=tau, sigma=sigma, length=length, convention=convention, zero_mean=zero_mean,
        draw=draw, max_mode=max_mode,
    )
    return float(v.sum() / n ** (2 * dim))


def _periodic_modes_draw(
    rngs: list[np.random.Generator], n: int, dim: int, amplitude: np.ndarray, zero_mean: bool, max_mode: int | None
) -> np.ndarray:
    """Fields from mode coefficients drawn in the ``"modes"`` order (:func:`periodic_mode_rank`).

    ``amplitude[k]``: the standard deviation of the coefficient of exp(2 pi i k.x / L) (without the
    1/sqrt(2) of a complex normal). Per sample: ``z = rng.standard_normal(1 + 2 R)`` for the R
    representatives drawn (those of the band); z[0] is the mean mode's coefficient, z[1 + 2 r] and
    z[2 + 2 r] the real and imaginary parts of representative r's, scaled by 1/sqrt(2) so that
    E|c_k|^2 = amplitude_k^2; the negative mode gets the conjugate. The field at x_j = j L / n is
    sum_k c_k exp(2 pi i k.j / n) = n^dim ifftn(c), computed by irfftn on the half spectrum.
    """
    import scipy.fft as sfft

    shape = (n,) * dim
    rep, neg, _ = periodic_mode_rank(n, dim)
    flat = amplitude.ravel()
    if max_mode is not None:  # the band is a prefix of the order: draw only its shells
        rep_shell = _shell(n, dim).ravel()[rep]
        keep = int(np.searchsorted(rep_shell, max_mode, side="right"))
        rep, neg = rep[:keep], neg[:keep]
    a_rep = flat[rep] / np.sqrt(2.0)
    a0 = 0.0 if zero_mean else float(flat[0])
    out = np.empty((len(rngs),) + shape)
    for b, rng in enumerate(rngs):
        z = rng.standard_normal(1 + 2 * rep.size)
        c = np.zeros(n**dim, dtype=np.complex128)
        c_rep = a_rep * (z[1::2] + 1j * z[2::2])
        c[rep] = c_rep
        c[neg] = np.conj(c_rep)
        c[0] = a0 * z[0]
        half = c.reshape(shape)[..., : n // 2 + 1] * float(n**dim)
        out[b] = sfft.irfftn(half, s=shape)
    return out


def periodic_grf(
    rngs: Sequence[np.random.Generator],
    n: int,
    *,
    dim: int = 2,
    alpha: float,
    tau: float,
    sigma: float = 1.0,
    length: float = 1.0,
    convention: PeriodicConvention = "kl",
    zero_mean: bool = True,
    draw: Draw = "modes",
    max_mode: int | None = None,
) -> np.ndarray:
    """Samples of g ~ N(0, sigma^2 (-Laplacian + tau^2 I)^(-alpha)) on the torus [0, L)^dim, ``n`` points a side.

    Returns ``(len(rngs), n, ..., n)`` float64 at the points x_j = j L / n, j = 0 .. n-1.
    Eigenvalues ``lambda_k = sigma^2 ((2 pi / L)^2 |k|^2 + tau^2)^(-alpha)`` on the integer
    wavenumbers of the FFT grid (numpy.fft order, so the Nyquist mode is -n/2 for even n).
    ``max_mode``: keep only the modes with max_i |k_i| <= max_mode (a band-limited field: the
    published Burgers initial data has no mode above 20); None keeps every mode of the grid.

    ``convention="kl"`` (true amplitude): the field has covariance
    ``sum_k lambda_k e_k(x) conj(e_k(x'))`` with e_k = exp(2 pi i k.x / L) / L^(dim/2) (the truncated
    KL expansion), i.e. mode coefficients of variance ``lambda_k / L^dim``. ``zero_mean=True``
    (default) zeroes the mean mode, as vorticity on the torus and the published Burgers initial
    data require; ``False`` keeps it (variance sigma^2 tau^(-2 alpha)). For dim = 1, L = 1 this is
    the distribution of the FNO/Galerkin Burgers generator (its coefficients sqrt(2) sigma
    (4 pi^2 k^2 + tau^2)^(-alpha/2) on cos and sin, mean zero), whose ``sigma`` is this ``sigma``.

    ``convention="fno2020"`` (the 2020 FNO Navier-Stokes generator, PROTOCOLS.md): mode coefficients
    of variance ``2 lambda_k`` whatever L (the generator does not divide by L^dim), i.e. covariance
    exactly 2 x the KL one for L = 1: the fields are sqrt(2) times larger than the true-amplitude field. With
    sigma = 7^(3/2), tau = 7, alpha = 2.5 the exact pixel standard deviation is 0.2620 at n = 256
    (and at n = 64; :func:`periodic_pointwise_variance`), the ~0.26 of the published NS data.

    Draws (module docstring). ``draw="modes"`` (default): the coefficients of the modes with every
    |k_i| <= (n - 1) // 2 are drawn in the grid-independent order of :func:`periodic_mode_rank`
    (a complex normal per pair k, -k; the Nyquist lines of even grids are zero), so the field is the
    same function at every n. ``draw="grid"``: the published generators' layout. "kl": real white
    noise ``w = rng.standard_normal((n,)*dim)``, ``g = irfftn(rfftn(w) * n^(dim/2) sqrt(lambda_k /
    L^dim))``. "fno2020": Fourier coefficients ``sqrt_eig_k (xi_re + i xi_im)`` with xi_re, xi_im
    each N(0, 1) (drawn as ``rng.standard_normal((2,) + (n,)*dim)``), ``sqrt_eig = n^dim sqrt(2)
    sigma ((2 pi / L)^2 |k|^2 + tau^2)^(-alpha/2)``, mean mode zero, and ``g = Re(ifftn(...))``.
    """
    import scipy.fft as sfft

    rngs = _check_rngs(rngs, "periodic_grf")
    _check_periodic(n, dim, alpha, tau, sigma, length, convention, draw, max_mode)
    shape = (n,) * dim
    lam = _periodic_lambda(n, dim, alpha, tau, sigma, length)
    if not rngs:
        return np.empty((0,) + shape)
    band = _band(n, dim, max_mode)
    if draw == "modes":
        amplitude = np.sqrt(2.0 * lam) if convention == "fno2020" else np.sqrt(lam / length**dim)
        return _periodic_modes_draw(rngs, n, dim, amplitude, zero_mean or convention == "fno2020", max_mode)
    if convention == "fno2020":
        noise = np.empty((len(rngs), 2) + shape)
        for b, rng in enumerate(rngs):
            noise[b] = rng.standard_normal((2,) + shape)
        sqrt_eig = n**dim * np.sqrt(2.0) * np.sqrt(lam) * band
        sqrt_eig[(0,) * dim] = 0.0
        coeff = sqrt_eig * (noise[:, 0] + 1j * noise[:, 1])
        return np.real(_per_sample(sfft.ifftn, coeff))
    w = np.empty((len(rngs),) + shape)
    for b, rng in enumerate(rngs):
        w[b] = rng.standard_normal(shape)
    mult = n ** (dim / 2) * np.sqrt(lam / length**dim) * band
    if zero_mean:
        mult[(0,) * dim] = 0.0
    half = mult[..., : n // 2 + 1]  # rfftn keeps the non-negative half of the last axis
    return _per_sample(lambda v: sfft.irfftn(sfft.rfftn(v) * half, s=shape), w)
