"""TNO, the Transformer Neural Operator with continuum (quadrature-weighted) softmax attention
(Calvello, Kovachki, Levine, Stuart, "Continuum attention for neural operators", arXiv 2406.06486:
Section 2.1.2 Definitions 4-5, Section 4.1 eqs. 9-11, Section 4.2 eqs. 14-19, Appendix B.1
eqs. 57-59, Section 6.1; config name ``tno``).

Continuum attention (Definitions 4-5). For a function ``v`` on ``D`` and a point ``x``::

    A(v)(x) = int_D exp(<Q v(x), K v(s)> / sqrt(d_K)) V v(s) ds / int_D exp(<Q v(x), K v(s)> / sqrt(d_K)) ds

discretised at the sample's own points ``x_1..x_N`` with quadrature weights ``w_j``::

    A(v)_i = sum_j w_j exp(q_i.k_j / sqrt(d_K)) v_j / sum_j w_j exp(q_i.k_j / sqrt(d_K))

which is the ``softmax`` kernel of :mod:`opflow.models.layers.attention` with per-key weights
(``log w_j`` added to the logits). Appendix B.1 eqs. 58-59 write the 1D trapezoidal rule as
``(1/2) sum_{k=2..N} (f_k + f_{k-1}) dx_k``, which is ``sum_j w_j f_j`` with the weights of
:func:`trapezoid_weights` (``w_1 = (t_2-t_1)/2``, ``w_j = (t_{j+1}-t_{j-1})/2``,
``w_N = (t_N-t_{N-1})/2``); tested against that pairwise form. The ``1/sqrt(d_K)`` scale is the
authors' code (eqs. 58-59 omit it; footnote 1 says a different scaling may be used). Weights:

* 1D (``coord_dim == 1``), ``quadrature="trapezoid"`` (default): the trapezoidal weights of each
  sample's own, possibly non-uniform, grid, computed from its coordinates after sorting them (so
  the point order does not matter); padded points get weight 0 and are masked in the softmax.
  Second order for smooth integrands (tested: the observed order of the whole random-weight
  model is ~2 on uniform and on piecewise-uniform grids, which converge to the same limit).
* regular grids in d >= 2 (``grid_shape`` given, points a row-major tensor-product grid): the
  tensor product of the 1D trapezoidal weights of each axis. (The paper's eq. 58 with
  ``dx_k = prod_i |(x_k)_i - (x_{k-1})_i|`` is meaningful only in 1D; the authors' code uses plain
  softmax, i.e. uniform weights, for d >= 2. On a uniform grid the two differ only by the halved
  weights of boundary points.)
* point clouds in d >= 2 (no ``grid_shape``): uniform weights ``1/n`` per sample, i.e. the Monte
  Carlo quadrature of the paper's Theorem 6 (standard softmax attention).
* ``quadrature="uniform"``: weights ``1/n`` everywhere: standard softmax attention (Vaswani et
  al. 2017), the baseline of the paper's Figure 9. Only first order on a grid that includes its
  end points, and on a non-uniform grid it converges to a different (grid-density weighted) limit.

Architecture (Section 4.2 and Appendix B.1; eq. numbers of the paper)::

    v0_j = W_in [u(x_j), x_j]                                   (eqs. 14-15: coordinates concatenated
                                                                  to the input, linear lift, with bias)
    v <- LN(v + MultiHead(v));  v <- LN(v + FFN(v))               (eqs. 10a-d, post-LN, W_1 = W_2 = I;
                                                                  L layers)
    MultiHead(v) = [A(v; Q_h, K_h, V_h)]_{h=1..H} W_MultiHead     (eqs. 11, 57; d_K = d_model / H)
    FFN(v) = W_3 gelu(W_4 v + b_1) + b_2                          (eq. 18)
    z_j = W_out v_j                                               (eq. 19, linear, with bias)

Positional information enters only through the coordinates in the lift (no positional
encoding), so the parameters are independent of the discretisation.

Per-sample global inputs (``globals (B, g)``, e.g. ``y(0), z(0)`` in Lorenz-63 task A,
``{x(t), y(0), z(0)} -> {y(t), z(t)}``), ``global_channels = g``; two treatments:

* ``globals_mode="initial_point"`` (default; the paper's Section 6.1 and the authors' code): the
  point with the smallest coordinate (t = 0 in Lorenz) is lifted by its own linear map,
  ``v0 = W_in0 [u(t_0), g, t_0]`` ("separate embedding linear transformations W_in0 and W_in, for
  the initial condition and the rest of the trajectory"), every other point by ``W_in``. That
  token keeps its ordinary quadrature weight (trapezoid: ``(t_1 - t_0)/2``). Caveat, stated
  because it matters for zero-shot resolution changes: that weight vanishes as the grid is
  refined, so the influence of ``g`` on the outputs at ``t > t_0`` decays like ``dt`` (tested:
  slope ~ -1 in N); the model is discretisation invariant only in the input function, not in
  ``g``. Needs ``coord_dim == 1``.
* ``globals_mode="token"`` (our discretisation-invariant alternative): ``g`` is lifted by its own
  linear map ``W_g`` to one extra token without coordinates, which takes part in every attention
  layer (as key and as query; its output is discarded) with the fixed quadrature weight
  ``global_weight * |D|`` (``|D|`` = the sum of the sample's weights, i.e. the domain measure). The
  attention measure is then ``Lebesgue(D) + global_weight |D| delta_g``, a fixed measure whatever
  the grid, so the outputs converge as the grid is refined with the globals' influence intact
  (tested). With ``global_weight = 1`` the token weighs as much as the whole domain at equal
  scores; the network rescales its share through its keys.

Query points other than the input points (an extension; the paper maps functions on the same
grid): the continuum TNO defines the features ``v^(l)(y)`` at any ``y in D``, because
``A(v)(y)`` needs ``v`` at ``y`` only as the query. ``forward_cross`` evaluates exactly that: query
tokens are lifted from ``[u(y), y]`` with ``u(y)`` linearly interpolated between the real input
points (1D; constant beyond the ends; nearest input point in d >= 2), and in every layer they
attend, with the same weights and quadrature, to the input tokens of that layer, and are never
attended to. With ``query == coords`` it reproduces :meth:`TNO.forward` exactly (tested); queries
at input points give the outputs there; off-grid queries converge at second order in 1D.

Hyperparameters and where they come from (paper = Sections 4.2, 6.1, Appendix C.1 Table 4;
code = the authors' repository, ``paper_run_scripts/1d_experiments_L63/run.py`` and
``models/transformer_custom.py``):

==================  ===========  =============================================================
name                default      source
==================  ===========  =============================================================
width (d_model)     128          paper Fig. 7 caption; code ``d_model=128``; PROTOCOLS
n_layers            6            paper Fig. 7 caption ("6 encoder layers"); code
n_heads             8            code ``nhead=8``; PROTOCOLS
ffn_dim             128          paper eq. 18 (W_3, W_4 square); code ``dim_feedforward=128``
act                 "gelu"       code ``activation='gelu'``
dropout             0            ours; the code used 1e-4 on the residual branches and, hidden in
                                 its attention module, 0.1 on the attention probabilities
quadrature          "trapezoid"  paper Appendix B.1 eqs. 58-59
globals_mode        "initial_    paper Section 6.1 (W_in0); code ``linear_in_initialcond``
                    point"
global_channels     0            the number of per-sample globals g (2 for Lorenz task A)
global_weight       1.0          ours, only for ``globals_mode="token"``
==================  ===========  =============================================================

Parameter count at the defaults: ``6 (6 d^2 + 10 d) + (c_in + d_x + 1) d + (d + 1) c_out`` (Table 4
plus biases and layer norms), 598,145 for the paper's 2D Darcy TNO (c_in = 1, d_x = 2, c_out = 1),
exactly the published count; Lorenz task A (c_in = 1, d_x = 1, g = 2, c_out = 2, with ``W_in0``)
598,786; task B 598,017. Training recipe (not part of the model; code): relative L2 loss (paper
Remark 24), Adam, batch 64, lr 1e-3 or 1e-4, ReduceLROnPlateau on the validation MSE (patience 2,
factor 0.5), 100 epochs, 10000 / 2000 / 2000 trajectories.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from opflow.data.errors import ConfigError
from opflow.hostsync import checks_on

from .base import OperatorModel, register
from .hparams import GlobalsMode, TnoQuadrature, literal_values
from .layers import Dropout, FeedForward, MultiHeadAttention, nearest_features
from .transformer import check_batch, is_self_query

QUADRATURES = tuple(literal_values(TnoQuadrature))
GLOBALS_MODES = tuple(literal_values(GlobalsMode))


# ----------------------------------------------------------------------------------------------
# quadrature weights


def trapezoid_weights(t: Tensor, mask: Tensor | None = None) -> Tensor:
    """Trapezoidal-rule weights of each sample's own 1D grid: ``t (B, N)`` -> ``w (B, N)``.

    For the real points sorted as ``s_1 <= ... <= s_n``: ``w(s_1) = (s_2 - s_1)/2``,
    ``w(s_j) = (s_{j+1} - s_{j-1})/2``, ``w(s_n) = (s_n - s_{n-1})/2``, so that
    ``sum_j w_j f(t_j)`` is the trapezoidal rule for ``int f`` over ``[s_1, s_n]`` (Calvello et al.
    2024, Appendix B.1 eqs. 58-59). The points may come in any order (weights are computed after
    sorting and scattered back); padded points (``mask`` False) get weight 0. A sample with fewer
    than two distinct real points gets all-zero weights.
    """
    if mask is None:
        mask = torch.ones_like(t, dtype=torch.bool)
    s, order = torch.where(mask, t, torch.full_like(t, float("inf"))).sort(dim=-1)
    real_sorted = mask.gather(-1, order)
    gaps = (s[:, 1:] - s[:, :-1]).nan_to_num(nan=0.0, posinf=0.0)
    gaps = torch.where(real_sorted[:, 1:], gaps, torch.zeros_like(gaps))  # both ends real
    zero = gaps.new_zeros(gaps.shape[0], 1)
    w_sorted = 0.5 * (torch.cat([zero, gaps], -1) + torch.cat([gaps, zero], -1))
    return torch.zeros_like(w_sorted).scatter(-1, order, w_sorted)


def _uniform_weights(coords: Tensor, mask: Tensor | None) -> Tensor:
    """``1/n`` at the real points of each sample (Monte Carlo / standard softmax), 0 at padding."""
    if mask is None:
        return torch.full(coords.shape[:2], 1.0 / coords.shape[1], dtype=coords.dtype, device=coords.device)
    m = mask.to(coords.dtype)
    return m / m.sum(-1, keepdim=True)


def _grid_trapezoid_weights(coords: Tensor, grid_shape: tuple[int, ...]) -> Tensor:
    """Tensor product of the 1D trapezoidal weights of each axis of a row-major regular grid."""
    B, N, d = coords.shape
    shape = tuple(int(s) for s in grid_shape)
    grid = coords.reshape(B, *shape, d)
    w = coords.new_ones(B, *shape)
    scale = (coords.amax(1) - coords.amin(1)).abs().amax().clamp_min(1.0)
    for a in range(d):
        index = [slice(None)] + [0] * d
        index[1 + a] = slice(None)
        line = grid[(*index, a)]  # (B, n_a): coordinate a along axis a
        view = [B] + [1] * d
        view[1 + a] = shape[a]
        if checks_on() and (grid[..., a] - line.reshape(view)).abs().amax() > 1e-6 * scale:
            raise ValueError(
                f"grid_shape={shape}: coordinate {a} varies along another axis, so the points are not a row-major "
                "tensor-product grid; pass grid_shape=None to treat them as a point cloud"
            )
        w = w * trapezoid_weights(line).reshape(view)
    return w.reshape(B, N)


def quadrature_weights(
    coords: Tensor,
    mask: Tensor | None = None,
    grid_shape: tuple[int, ...] | None = None,
    rule: str = "trapezoid",
) -> Tensor:
    """Per-point quadrature weights ``w (B, N)`` for continuum attention (see the module docstring).

    ``rule="trapezoid"``: 1D trapezoidal weights of each sample's own grid; tensor-product
    trapezoidal weights of a regular grid when ``grid_shape`` (length ``d``) is given; ``1/n``
    (Monte Carlo) for point clouds in d >= 2. ``rule="uniform"``: ``1/n`` everywhere (standard
    softmax attention). Padded points (``mask`` False) get weight 0.
    """
    if rule not in QUADRATURES:
        raise ConfigError(f"quadrature must be one of {list(QUADRATURES)}, got {rule!r}")
    d = coords.shape[-1]
    if rule == "uniform":
        return _uniform_weights(coords, mask)
    if d == 1:
        return trapezoid_weights(coords[..., 0], mask)
    if grid_shape is None:
        return _uniform_weights(coords, mask)
    if len(grid_shape) != d or math.prod(grid_shape) != coords.shape[1]:
        raise ValueError(f"grid_shape={tuple(grid_shape)} does not match coords of {coords.shape[1]} points in {d} dimensions")
    w = _grid_trapezoid_weights(coords, grid_shape)
    return w if mask is None else w * mask.to(w.dtype)


def interpolate_1d(coords: Tensor, values: Tensor, query: Tensor, mask: Tensor | None = None) -> Tensor:
    """Piecewise-linear interpolation of ``values (B, N, c)`` given at ``coords (B, N, 1)`` to
    ``query (B, M, 1)``, per sample, over its real points (any order); constant beyond the ends."""
    t = coords[..., 0]
    if mask is None:
        mask = torch.ones_like(t, dtype=torch.bool)
    s, order = torch.where(mask, t, torch.full_like(t, float("inf"))).sort(dim=-1)
    f = values.gather(1, order[..., None].expand(-1, -1, values.shape[-1]))
    n = mask.sum(-1, keepdim=True)
    q = query[..., 0].to(s.dtype).contiguous()
    hi = torch.searchsorted(s.contiguous(), q).clamp(min=1)
    hi = torch.minimum(hi, (n - 1).clamp(min=1))
    lo = hi - 1
    t_lo, t_hi = s.gather(1, lo), s.gather(1, hi)
    gap = (t_hi - t_lo).nan_to_num(nan=0.0, posinf=0.0)
    lam = torch.where(gap > 0, (q - t_lo) / torch.where(gap > 0, gap, torch.ones_like(gap)), torch.zeros_like(gap))
    lam = lam.clamp(0.0, 1.0)[..., None].to(values.dtype)
    f_lo = f.gather(1, lo[..., None].expand(-1, -1, f.shape[-1]))
    f_hi = f.gather(1, hi[..., None].expand(-1, -1, f.shape[-1]))
    return (1 - lam) * f_lo + lam * f_hi


# ----------------------------------------------------------------------------------------------
# the encoder layer


class PostLNEncoderLayer(nn.Module):
    """One TNO encoder layer (paper eqs. 10a-d with W_1 = W_2 = I): post-LN,
    ``v <- LN(v + MultiHead(v)); v <- LN(v + FFN(v))``, MultiHead with the quadrature-weighted
    softmax kernel; ``dropout`` on both residual branches.

    With ``context`` the attention reads keys/values from the context tokens (the query stream of
    :meth:`TNO.forward_cross`); ``context = x`` reproduces the self-attention layer exactly.
    """

    def __init__(self, width: int, n_heads: int, ffn_dim: int, act: str = "gelu", dropout: float = 0.0) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(width, n_heads, "softmax", dropout=dropout)
        self.norm_attn = nn.LayerNorm(width)
        self.ffn = FeedForward(width, ffn_dim / width, act=act)
        self.drop = Dropout(dropout)
        self.norm_ffn = nn.LayerNorm(width)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        weights: Tensor | None = None,
        context: Tensor | None = None,
        context_mask: Tensor | None = None,
        context_weights: Tensor | None = None,
    ) -> Tensor:
        """Self-attention over ``x (B, N, width)`` with key mask ``mask`` and quadrature ``weights``;
        or, with ``context``, ``x`` (queries, real where ``mask``) attends to ``context``."""
        if context is None:
            a = self.attn(x, mask=mask, weights=weights)
        else:
            a = self.attn(x, context, mask=context_mask, query_mask=mask, weights=context_weights)
        x = self.norm_attn(x + a)
        return self.norm_ffn(x + self.drop(self.ffn(x)))


# ----------------------------------------------------------------------------------------------
# the model


@register("tno")
class TNO(OperatorModel):
    """Transformer neural operator with continuum attention (see the module docstring).

    ``forward(coords, inputs, query=None, mask=None, grid_shape=None, globals=None)``; ``globals
    (B, global_channels)`` are per-sample global inputs (required when ``global_channels > 0``).
    """

    accepts_globals = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        coord_dim: int,
        *,
        width: int,
        n_layers: int,
        n_heads: int,
        ffn_dim: int,
        act: str,
        dropout: float,
        quadrature: str,
        global_channels: int,
        globals_mode: str,
        global_weight: float,
    ) -> None:
        super().__init__(in_channels, out_channels, coord_dim)  # ranges and enums checked by TnoHparams
        if global_channels and globals_mode == "initial_point" and coord_dim != 1:
            raise ConfigError(
                f"tno: globals_mode='initial_point' lifts the initial point of a 1D trajectory; with coord_dim={coord_dim} "
                "use globals_mode='token'"
            )
        self.quadrature, self.globals_mode = quadrature, globals_mode
        self.global_channels, self.global_weight = global_channels, float(global_weight)
        self.lift = nn.Linear(in_channels + coord_dim, width)  # W_in, eq. 15
        if global_channels and globals_mode == "initial_point":
            self.lift_initial = nn.Linear(in_channels + global_channels + coord_dim, width)  # W_in0, Section 6.1
        elif global_channels:
            self.lift_globals = nn.Linear(global_channels, width)  # W_g, the global token
        self.layers = nn.ModuleList(PostLNEncoderLayer(width, n_heads, ffn_dim, act, dropout) for _ in range(n_layers))
        self.proj = nn.Linear(width, out_channels)  # W_out, eq. 19

    # -- helpers -----------------------------------------------------------------------------

    def _check_globals(self, coords: Tensor, globals: Tensor | None) -> None:
        if self.global_channels == 0:
            if globals is not None:
                raise ValueError(f"this tno was built without globals; got globals {tuple(globals.shape)}: set global_channels={globals.shape[-1]}")
            return
        if globals is None:
            raise ValueError(f"this tno was built with global_channels={self.global_channels}: pass globals of shape (batch, {self.global_channels})")
        if globals.dim() != 2 or globals.shape != (coords.shape[0], self.global_channels):
            raise ValueError(f"globals must be (batch={coords.shape[0]}, {self.global_channels}); got {tuple(globals.shape)}")

    def weights(self, coords: Tensor, mask: Tensor | None = None, grid_shape: tuple[int, ...] | None = None) -> Tensor:
        """The quadrature weights of the batch (:func:`quadrature_weights` with this model's rule)."""
        w = quadrature_weights(coords, mask, grid_shape, self.quadrature)
        if checks_on() and not bool((w.sum(-1) > 0).all()):
            raise ValueError("tno: a sample has zero total quadrature weight; 1D samples need at least two distinct real points")
        return w

    def _initial_point(self, coords: Tensor, mask: Tensor | None) -> Tensor:
        """``(B, N)`` bool: the real point with the smallest coordinate of each sample."""
        t = coords[..., 0]
        if mask is not None:
            t = t.masked_fill(~mask, float("inf"))
        return torch.arange(t.shape[1], device=t.device)[None] == t.argmin(-1, keepdim=True)

    def _lift(self, coords: Tensor, inputs: Tensor, globals: Tensor | None, initial: Tensor | None) -> Tensor:
        """``v0 = W_in [u, x]``; the initial point (``initial`` mask) gets ``W_in0 [u, g, x]``."""
        x = self.lift(torch.cat([inputs, coords], -1))
        if initial is not None:
            g = globals.to(inputs.dtype)[:, None].expand(-1, inputs.shape[1], -1)
            x0 = self.lift_initial(torch.cat([inputs, g, coords], -1))
            x = torch.where(initial[..., None], x0, x)
        return x

    def _with_token(self, x: Tensor, mask: Tensor | None, w: Tensor, globals: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Append the global token (weight ``global_weight * sum(w)``) to tokens, mask and weights."""
        B = x.shape[0]
        tok = self.lift_globals(globals.to(x.dtype))[:, None]
        m = torch.ones(B, x.shape[1], dtype=torch.bool, device=x.device) if mask is None else mask
        m = torch.cat([m, m.new_ones(B, 1)], 1)
        w = torch.cat([w, self.global_weight * w.sum(-1, keepdim=True)], 1)
        return torch.cat([x, tok], 1), m, w

    # -- forward -----------------------------------------------------------------------------

    def forward(
        self,
        coords: Tensor,
        inputs: Tensor,
        query: Tensor | None = None,
        mask: Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
        globals: Tensor | None = None,
    ) -> Tensor:
        check_batch(self, coords, inputs, query, mask)
        self._check_globals(coords, globals)
        if not is_self_query(coords, query):
            return self.forward_cross(coords, inputs, query, mask, grid_shape, globals)
        w = self.weights(coords, mask, grid_shape)
        initial = self._initial_point(coords, mask) if self.global_channels and self.globals_mode == "initial_point" else None
        x = self._lift(coords, inputs, globals, initial)
        n, m = x.shape[1], mask
        if self.global_channels and self.globals_mode == "token":
            x, m, w = self._with_token(x, mask, w, globals)
        for layer in self.layers:
            x = layer(x, m, w)
        out = self.proj(x[:, :n])
        return out if mask is None else out * mask[..., None].to(out.dtype)

    def forward_cross(
        self,
        coords: Tensor,
        inputs: Tensor,
        query: Tensor,
        mask: Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
        globals: Tensor | None = None,
    ) -> Tensor:
        """Outputs at ``query (B, M, d)``: the continuum TNO evaluated there (module docstring).

        Equals :meth:`forward` at ``query == coords``. Every query point is treated as real.
        """
        check_batch(self, coords, inputs, query, mask)
        self._check_globals(coords, globals)
        w = self.weights(coords, mask, grid_shape)
        if self.coord_dim == 1:
            u_q = interpolate_1d(coords, inputs, query, mask)
        else:
            u_q = nearest_features(coords, inputs, query, mask)
        query = query.to(coords.dtype)
        init_x = init_q = None
        if self.global_channels and self.globals_mode == "initial_point":
            init_x = self._initial_point(coords, mask)
            t0 = coords[..., 0].masked_fill(~init_x, 0.0).sum(-1, keepdim=True)
            init_q = query[..., 0] == t0
        x = self._lift(coords, inputs, globals, init_x)
        y = self._lift(query, u_q, globals, init_q)
        m = mask
        if self.global_channels and self.globals_mode == "token":
            x, m, w = self._with_token(x, mask, w, globals)
        for i, layer in enumerate(self.layers):
            y = layer(y, context=x, context_mask=m, context_weights=w)
            if i < len(self.layers) - 1:
                x = layer(x, m, w)
        return self.proj(y)


__all__ = ["GLOBALS_MODES", "QUADRATURES", "TNO", "interpolate_1d", "quadrature_weights", "trapezoid_weights"]
