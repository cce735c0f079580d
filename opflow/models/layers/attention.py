"""The attention kernels of opflow, written once and selected by name by every model.

Notation: queries ``q_i`` (i = 1..M), keys ``k_j`` and values ``v_j`` (j = 1..N), per head, head
width ``d``. The functional kernels take head-split tensors ``q (B, H, M, d)``, ``k (B, H, N, d)``,
``v (B, H, N, e)`` and return ``(B, H, M, e)``. All of them support cross-attention (M != N, queries
from another point set) and an optional key mask ``(B, N)`` (``True`` = real point): a masked key
contributes nothing, exactly, so a padded batch gives the same outputs at its real points as the
unpadded samples. Outputs at masked *queries* are finite but meaningless. Every sample must have at
least one real key. Optional per-key quadrature weights ``w (B, N)`` (positive at real keys) turn the
sums over keys into quadratures of integrals (continuum attention).

Kernels (``KERNELS``), name -> formula:

* ``softmax`` -- Vaswani et al. 2017, with quadrature weights as in continuum attention (Calvello,
  Kovachki, Levine, Stuart 2024, "Continuum attention for neural operators")::

      z_i = sum_j w_j exp(q_i.k_j / sqrt(d)) v_j / sum_j w_j exp(q_i.k_j / sqrt(d))

  i.e. ``log w_j`` added to the logits (uniform weights cancel). Computed by
  ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels where available), the
  key-only bias ``log w_j`` folded into an extra query/key channel (:func:`fold_key_bias`) so that
  no attention mask is needed.
* ``linear`` -- Katharopoulos, Vyas, Pappas, Fleuret 2020, "Transformers are RNNs", eq. 6, feature
  map ``phi(x) = elu(x) + 1``::

      z_i = phi(q_i)^T (sum_j w_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j w_j phi(k_j))

* ``normalized`` -- GNOT's normalised linear attention (Hao et al. 2023, eqs. 3-6): the same ratio
  with ``phi = softmax`` over the feature axis of each ``q_i`` and ``k_j``.
* ``efficient`` -- Shen, Zhang, Zhao, Yi, Li 2021, "Efficient attention: attention with linear
  complexities": ``z_i = softmax_feat(q_i)^T sum_j a_j v_j^T`` with ``a_j = softmax over the keys
  j of (k_j + log w_j)`` per feature. (This is the "linear" block of the ONO authors' released code,
  via the ``linear_attention_transformer`` package, which also multiplies by ``d^-1/2``: the
  ``efficient_scale`` option of :class:`MultiHeadAttention`; without it, the paper's formula.)
* ``cao_linear`` -- the "linear" attention of Cao 2021 (the LT rows of its Tables 2-3; eq. 7 with the
  authors' released code): ``efficient`` divided by the number of keys, ``z_i = softmax_feat(q_i)^T
  sum_j a_j v_j^T / n``; with quadrature weights, times their mean over the real keys instead
  (``1/n`` for uniform weights ``w_j = 1/n``).
* ``galerkin`` -- Cao 2021, "Choose a transformer: Fourier or Galerkin", eq. 7: no softmax, layer
  normalisation (per head, learnable) on K and V::

      z = Q (K~^T diag(w) V~),   w_j = 1/n by default (n = number of real keys)

* ``fourier`` -- Cao 2021, eq. 6: layer normalisation on Q and K, ``z = (Q~ K~^T) diag(w) V``.
  Matrix products associate, so it is computed as ``Q~ (K~^T diag(w) V)`` in O(N d^2): the same
  numbers as the O(N^2 d) order, at linear cost.
* ``nystrom`` -- Xiong et al. 2021, "Nystromformer", eq. 15: with ``m`` landmarks ``Q^, K^``
  (segment means of the queries and keys)::

      z = softmax(Q K^^T / sqrt(d)) [softmax(Q^ K^^T / sqrt(d))]^+ softmax(Q^ K^T / sqrt(d)) V

  ``[.]^+`` is the iterative Moore-Penrose pseudo-inverse of Razavi et al. 2014 (the paper's eq. 16):
  ``Z <- Z (13 I - A Z (15 I - A Z (7 I - A Z))) / 4`` from ``Z_0 = A^T / (||A||_1 ||A||_inf)``,
  norms per matrix (so samples never influence each other). Segments: the real points of each
  sample, in their order, are cut into ``m`` contiguous segments of near-equal size
  (``segment = floor(rank * m / n)``), so padding never changes the landmarks; with ``n <= m`` every
  point is its own landmark and the kernel is exact softmax attention. Quadrature weights are not
  supported. The ``nystrom-attention`` package (used by the ONO authors' release) differs in three
  ways, each an option here (``pad_to_landmarks``, ``pinv_scale="batch"`` and
  :class:`MultiHeadAttention`'s ``residual_conv``): it front-pads the sequence with zero tokens to a
  multiple of ``m`` (:func:`padded_segment_means`), scales ``Z_0`` by norms over the whole batch,
  and adds a depth-wise convolution of V along the point sequence (it depends on the point order).

:class:`MultiHeadAttention` wraps a kernel with the Q/K/V/output projections, optional coordinates
concatenated to every head (Cao 2021, section 4), and the per-head layer norms of the Galerkin and
Fourier kernels (``head_norm``: the kernel's own pair, none -- the "regular LN" models of Cao 2021,
eq. 7, normalise the block instead -- or (Q, K) / (K, V) for any kernel, the paper's softmax
ablations). ``init_gain`` / ``init_diagonal`` give W_q, W_k, W_v the diagonally dominant
initialisation of Cao 2021, eq. 17: ``W = eta U + delta I``, U Xavier-uniform with gain 1, biases 0.
:class:`TransformerBlock` is the pre-LN block ``x <- x + Attn(LN(x)); x <- x + FFN(LN(x))`` (ONO
paper eq. 3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from opflow.data.errors import ConfigError

from ..hparams import HEAD_NORMS, KERNELS
from .dropout import Dropout, dropout
from .mlp import FeedForward

# KERNELS (name -> formula) is defined with the other enumerations in opflow.models.hparams


def check_kernel(name: str) -> str:
    """Return ``name`` if it is a known kernel, else raise :class:`ConfigError` listing them."""
    if name not in KERNELS:
        raise ConfigError(f"unknown attention kernel {name!r}; allowed: {sorted(KERNELS)}")
    return name


# ----------------------------------------------------------------------------------------------
# helpers


def _upcast(*ts: Tensor) -> tuple[Tensor, ...]:
    """Half-precision inputs are reduced in float32 (sums over many points lose bf16 precision)."""
    return tuple(t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in ts)


def _key_weights(key_mask: Tensor | None, weights: Tensor | None, like: Tensor) -> Tensor | None:
    """Per-key multiplicative weight ``(B, 1, N, 1)``: ``w_j`` (or 1), zero at masked keys."""
    if weights is None and key_mask is None:
        return None
    w = weights.to(like.dtype) if weights is not None else torch.ones(key_mask.shape, dtype=like.dtype, device=like.device)
    if key_mask is not None:
        w = w * key_mask.to(like.dtype)
    return w[:, None, :, None]


def _real_count(key_mask: Tensor | None, n: int, like: Tensor) -> Tensor:
    """Number of real keys per sample, shaped ``(B, 1, 1, 1)`` (or a scalar tensor without a mask)."""
    if key_mask is None:
        return torch.full((), float(n), dtype=like.dtype, device=like.device)  # a fill kernel: no copy from the host
    return key_mask.sum(-1).to(like.dtype)[:, None, None, None]


# ----------------------------------------------------------------------------------------------
# functional kernels


def fold_key_bias(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float, c: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """Fold a key-only additive logit bias ``b_j (B, N)`` into one extra query/key channel.

    ``q' = [q, c]``, ``k' = [k, b_j / (c s)]`` so that ``s q'_i.k'_j = s q_i.k_j + b_j``
    exactly: the bias costs one head channel instead of an ``(M, N)`` attention mask, and fused
    (flash / memory-efficient) kernels that take no mask apply. ``q``, ``k`` and ``v`` are padded with
    zeros to a common head width, a multiple of 8 (what the fused kernels want; a value width
    different from the key width sends PyTorch's CPU kernel to its unfused path). Masked keys
    carry ``b_j = -inf``; they get a finite key entry ``finfo.min / 4`` instead (so that no
    ``0 * inf`` appears in the backward pass), whose logit ``s c finfo.min / 4`` underflows
    ``exp`` to exactly 0. Returns ``q', k', v'``; the caller keeps the first ``v.shape[-1]``
    output channels.
    """
    B, H, M, d = q.shape
    N, e = k.shape[2], v.shape[-1]
    width = -(-(max(d + 1, e)) // 8) * 8
    floor = torch.finfo(k.dtype).min / 4
    kb = (bias.to(k.dtype) / (c * scale)).clamp_min(floor)[:, None, :, None].expand(B, H, N, 1)
    q2 = torch.cat([q, q.new_full((B, H, M, 1), c), q.new_zeros(B, H, M, width - d - 1)], -1)
    k2 = torch.cat([k, kb, k.new_zeros(B, H, N, width - d - 1)], -1)
    v2 = v if e == width else torch.cat([v, v.new_zeros(*v.shape[:-1], width - e)], -1)
    return q2, k2, v2


#: how :func:`softmax_attention` applies quadrature weights: ``"fold"`` (the log-weights in an extra
#: query/key channel, no mask: :func:`fold_key_bias`) or ``"mask"`` (an additive float attention mask,
#: the earlier path, kept for the benchmark ``benchmarks/tno_attention.py``).
SOFTMAX_BIAS_MODES = ("fold", "mask")


def softmax_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_mask: Tensor | None = None,
    weights: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    bias_mode: str = "fold",
) -> Tensor:
    """``z_i = sum_j w_j exp(s q_i.k_j) v_j / sum_j w_j exp(s q_i.k_j)``, ``s = scale or d^-1/2``.

    Quadrature weights enter as ``log w_j`` added to the logits, a key-only bias; masked keys get
    ``-inf``. ``bias_mode="fold"`` (default) folds that bias into an extra query/key channel
    (:func:`fold_key_bias`) so that ``scaled_dot_product_attention`` runs without a mask;
    ``"mask"`` passes it as an additive float mask ``(B, 1, 1, N)``. Both equal the explicit
    weighted softmax (tested in float64).
    """
    if bias_mode not in SOFTMAX_BIAS_MODES:
        raise ConfigError(f"softmax bias_mode must be one of {list(SOFTMAX_BIAS_MODES)}, got {bias_mode!r}")
    if weights is None:
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    bias = torch.log(weights.to(q.dtype))
    if key_mask is not None:
        bias = bias.masked_fill(~key_mask, float("-inf"))
    if bias_mode == "mask":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias[:, None, None, :], dropout_p=dropout_p, scale=scale)
    s = q.shape[-1] ** -0.5 if scale is None else float(scale)
    q2, k2, v2 = fold_key_bias(q, k, v, bias, s)
    out = F.scaled_dot_product_attention(q2, k2, v2, dropout_p=dropout_p, scale=s)
    return out[..., : v.shape[-1]]


def _feature_map_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor, key_mask: Tensor | None, weights: Tensor | None) -> Tensor:
    """``z_i = phi_q_i^T (sum_j w_j phi_k_j v_j^T) / (phi_q_i^T sum_j w_j phi_k_j)`` (positive maps)."""
    w = _key_weights(key_mask, weights, phi_k)
    if w is not None:
        phi_k = phi_k * w
    kv = torch.einsum("bhnd,bhne->bhde", phi_k, v)
    num = torch.einsum("bhmd,bhde->bhme", phi_q, kv)
    den = torch.einsum("bhmd,bhd->bhm", phi_q, phi_k.sum(dim=2))
    return num / den.clamp_min(torch.finfo(den.dtype).tiny)[..., None]


def linear_attention(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None = None, weights: Tensor | None = None) -> Tensor:
    """Katharopoulos et al. 2020, eq. 6 with ``phi(x) = elu(x) + 1``; see the module docstring."""
    dtype = q.dtype
    q, k, v = _upcast(q, k, v)
    return _feature_map_attention(F.elu(q) + 1, F.elu(k) + 1, v, key_mask, weights).to(dtype)


def normalized_attention(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None = None, weights: Tensor | None = None) -> Tensor:
    """GNOT (Hao et al. 2023) eqs. 3-6: ``phi = softmax`` over the feature axis of q and of k."""
    dtype = q.dtype
    q, k, v = _upcast(q, k, v)
    return _feature_map_attention(q.softmax(-1), k.softmax(-1), v, key_mask, weights).to(dtype)


def efficient_attention(
    q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None = None, weights: Tensor | None = None, q_scale: float = 1.0,
) -> Tensor:
    """Shen et al. 2021: ``softmax_features(Q) (softmax_points(K + log w)^T V)``.

    ``q_scale`` multiplies ``softmax_features(Q)``: ``d^-1/2`` is the ``linear_attention_transformer``
    package's ``linear_attn`` (version 0.19.1, the "linear" block of the ONO authors' release); 1 is the
    paper's formula.
    """
    dtype = q.dtype
    q, k, v = _upcast(q, k, v)
    logits = k
    if weights is not None:
        logits = logits + torch.log(weights.to(k.dtype))[:, None, :, None]
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask[:, None, :, None], float("-inf"))
    a = logits.softmax(dim=2)
    q = q.softmax(-1) if q_scale == 1.0 else q.softmax(-1) * q_scale
    return torch.einsum("bhmd,bhde->bhme", q, torch.einsum("bhnd,bhne->bhde", a, v)).to(dtype)


def cao_linear_attention(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None = None, weights: Tensor | None = None) -> Tensor:
    """Cao 2021's "linear" attention: :func:`efficient_attention` times the mean quadrature weight of the real
    keys (``1/n`` without weights), as the authors' ``linear_attention`` divides ``K^T V`` by the sequence length."""
    out = efficient_attention(q, k, v, key_mask, weights)
    if weights is None:
        return out / _real_count(key_mask, k.shape[2], out)
    w = weights.to(out.dtype) if key_mask is None else weights.to(out.dtype).masked_fill(~key_mask, 0.0)
    return out * (w.sum(-1) / _real_count(key_mask, k.shape[2], out).reshape(-1))[:, None, None, None]


def galerkin_attention(
    q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None = None, weights: Tensor | None = None, kv_dropout: float = 0.0,
) -> Tensor:
    """Cao 2021: ``Q (K^T diag(w) V)``, ``w_j = 1/n`` over the real keys unless weights are given.

    The layer norms that distinguish the Galerkin (on K, V) and Fourier (on Q, K) types are applied
    by :class:`MultiHeadAttention` before this product; both types share it. ``kv_dropout = p > 0``
    drops entries of the ``(d, d)`` product ``K^T diag(w) V`` of each head with probability ``p``
    (:func:`~opflow.models.layers.dropout.dropout`; the caller decides when: :class:`MultiHeadAttention`'s
    ``kv_dropout``), as the Galerkin authors' code does.
    """
    dtype = q.dtype
    q, k, v = _upcast(q, k, v)
    if weights is None:
        w = _key_weights(key_mask, None, k)
        kw = k / _real_count(key_mask, k.shape[2], k)
        if w is not None:
            kw = kw * w
    else:
        kw = k * _key_weights(key_mask, weights, k)
    kv = torch.einsum("bhnd,bhne->bhde", kw, v)
    if kv_dropout > 0.0:
        kv = dropout(kv, kv_dropout)
    return torch.einsum("bhmd,bhde->bhme", q, kv).to(dtype)


fourier_attention = galerkin_attention
"""Cao 2021 Fourier type ``(Q K^T) diag(w) V``, computed in the linear-cost order ``Q (K^T diag(w) V)``."""


def segment_means(x: Tensor, mask: Tensor | None, m: int) -> tuple[Tensor, Tensor]:
    """Nystromformer landmarks: means of ``m`` contiguous segments of each sample's real points.

    ``x (B, H, N, d)``, ``mask (B, N)``. The real points of sample b, in order, have ranks
    ``r = 0..n_b-1`` and go to segment ``floor(r m / n_b)``; padding joins no segment. Returns the
    means ``(B, H, m, d)`` and ``landmark_mask (B, m)``, False for empty segments (only when n_b < m).
    """
    B, H, N, d = x.shape
    if mask is None:
        mask = torch.ones(B, N, dtype=torch.bool, device=x.device)
    rank = mask.long().cumsum(-1) - 1
    n = mask.sum(-1, keepdim=True).clamp_min(1)
    seg = torch.where(mask, (rank * m) // n, torch.full_like(rank, m))  # padding -> dummy segment m
    sums = x.new_zeros(B, H, m + 1, d).scatter_add_(2, seg[:, None, :, None].expand(B, H, N, d), x)
    counts = x.new_zeros(B, m + 1).scatter_add_(1, seg, mask.to(x.dtype))[:, :m]
    return sums[:, :, :m] / counts.clamp_min(1)[:, None, :, None], counts > 0


def iterative_pinv(a: Tensor, iterations: int = 6, scale: str = "matrix") -> Tensor:
    """Moore-Penrose pseudo-inverse of each matrix in ``a (..., m, m)`` by the Nystromformer iteration.

    ``Z_0 = A^T / (max_j sum_i |A_ij| * max_i sum_j |A_ij|)``, then
    ``Z <- Z (13 I - A Z (15 I - A Z (7 I - A Z))) / 4`` (Razavi et al. 2014; Xiong et al. 2021 eq. 16).
    Zero rows/columns of ``a`` stay zero in ``Z``. ``scale="matrix"``: the two norms of each matrix
    (samples never influence each other); ``scale="batch"``: the largest column sum and the largest
    row sum over the whole tensor (every sample and head), as the ``nystrom-attention`` package
    (used by the ONO authors' release) computes them, so that with few iterations a sample's result
    depends on its batch mates.
    """
    absa = a.abs()
    if scale == "batch":
        norm1, norminf = absa.sum(-2).amax(), absa.sum(-1).amax()
    elif scale == "matrix":
        norm1 = absa.sum(-2).amax(-1)[..., None, None]  # max column sum
        norminf = absa.sum(-1).amax(-1)[..., None, None]  # max row sum
    else:
        raise ConfigError(f"pseudo-inverse scale must be 'matrix' or 'batch', got {scale!r}")
    z = a.mT / (norm1 * norminf).clamp_min(torch.finfo(a.dtype).tiny)
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def _masked_softmax(logits: Tensor, col_mask: Tensor | None, row_mask: Tensor | None) -> Tensor:
    """Softmax over the last axis ignoring masked columns; rows with ``row_mask`` False are zero."""
    if col_mask is not None:
        logits = logits.masked_fill(~col_mask[:, None, None, :], torch.finfo(logits.dtype).min)
    p = logits.softmax(-1)
    if col_mask is not None:
        p = p * col_mask[:, None, None, :].to(p.dtype)
    if row_mask is not None:
        p = p * row_mask[:, None, :, None].to(p.dtype)
    return p


def padded_segment_means(x: Tensor, mask: Tensor | None, m: int) -> tuple[Tensor, Tensor]:
    """Landmarks of the ``nystrom-attention`` package: segment means of a sequence front-padded with zeros.

    ``x (B, H, N, d)``, ``mask (B, N)``. Each sample's ``n`` real points, in order, are preceded by
    ``P = ceil(n / m) m - n`` zero tokens, the ``ceil(n / m) m`` tokens are cut into ``m`` segments
    of ``l = ceil(n / m)`` tokens, and a landmark is its segment's sum divided by ``l`` (zero tokens
    included: the first segments are zero or shrunk towards zero). Without a mask this is the
    package's computation (which pads the whole sequence); with a mask each sample is padded as if
    it were alone, so that padded points still never change the result. Returns the landmarks
    ``(B, H, m, d)`` and ``P`` per sample ``(B,)``.
    """
    B, H, N, d = x.shape
    if mask is None:
        seg_len = -(-N // m)
        pad = seg_len * m - N
        means = F.pad(x, (0, 0, pad, 0)).view(B, H, m, seg_len, d).sum(3) / seg_len
        return means, torch.full((B,), pad, dtype=torch.long, device=x.device)
    n = mask.sum(-1)
    seg_len = ((n + m - 1) // m).clamp_min(1)
    pad = seg_len * m - n
    rank = mask.long().cumsum(-1) - 1
    seg = torch.where(mask, (rank + pad[:, None]) // seg_len[:, None], torch.full_like(rank, m))
    sums = x.new_zeros(B, H, m + 1, d).scatter_add_(2, seg[:, None, :, None].expand(B, H, N, d), x)
    return sums[:, :, :m] / seg_len.to(x.dtype)[:, None, None, None], pad


def _zero_key_share(logits: Tensor, col_mask: Tensor | None, n_zero: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax over the last axis as if ``n_zero (B,)`` more keys of logit 0 were there, their columns left out.

    The zero tokens of :func:`padded_segment_means` are keys with ``k = 0`` (logit 0) and ``v = 0``:
    they only enlarge each row's softmax denominator, by ``n_zero exp(0)``. Returned as the plain
    softmax over the real keys and the factor of each row, ``sum_j e^{s_j} / (sum_j e^{s_j} + P)
    = sigmoid(logsumexp(s) - log P)`` ``(B, H, rows, 1)``, to be applied to the (smaller) product
    with the values.
    """
    if col_mask is not None:
        logits = logits.masked_fill(~col_mask[:, None, None, :], torch.finfo(logits.dtype).min)
    share = torch.sigmoid(torch.logsumexp(logits, -1, keepdim=True) - n_zero.to(logits.dtype).log()[:, None, None, None])
    return logits.softmax(-1), share


#: largest ``(B, H, N, m)`` factor in bytes that the automatic choice forms explicitly (:func:`nystrom_fused`)
NYSTROM_EXPLICIT_BYTES = 1 << 30


def nystrom_fused(q: Tensor, k: Tensor, num_landmarks: int) -> bool:
    """The automatic choice of :func:`nystrom_attention`'s path: the fused softmax kernels, except on
    CUDA in float32 with a head width under 32 (where the fused float32 kernels are slow), while a
    ``(B, H, N, m)`` factor takes at most :data:`NYSTROM_EXPLICIT_BYTES`."""
    B, H, M, d = q.shape
    n = max(M, k.shape[2])
    small = B * H * n * num_landmarks * q.element_size() <= NYSTROM_EXPLICIT_BYTES
    return not (q.is_cuda and q.dtype == torch.float32 and d < 32 and small)


def nystrom_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_mask: Tensor | None = None,
    query_mask: Tensor | None = None,
    num_landmarks: int = 64,
    pinv_iterations: int = 6,
    scale: float | None = None,
    pad_to_landmarks: bool = False,
    pinv_scale: str = "matrix",
    fused: bool | None = None,
) -> Tensor:
    """Nystromformer (Xiong et al. 2021, eq. 15) with mask-exact segment-mean landmarks::

        z = softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V

    (``Q~, K~``: the ``m`` landmarks, ``Q`` already scaled by ``s``). ``query_mask`` marks the real
    queries for the query landmarks (self-attention: pass the key mask). ``pad_to_landmarks``: the
    landmarks of the ``nystrom-attention`` package instead (:func:`padded_segment_means`: zero tokens in
    front up to a multiple of ``num_landmarks``, segments of equal length, every landmark real), the
    zero keys also entering the softmax over the keys. ``pinv_scale``: :func:`iterative_pinv`'s initial
    scaling, per matrix or over the batch.

    ``fused=True``: the two ``(N, m)`` factors are never formed. ``softmax(Q~ K^T) V`` and
    ``softmax(Q K~^T) W`` (``W = pinv(.) softmax(Q~ K^T) V``, ``(m, d)``) are softmax attentions and go
    through :func:`softmax_attention` (fused kernels); the ``P`` zero keys of the package are one zero
    key of quadrature weight ``P``. ``fused=False``: the explicit products (the reference the fused
    path is tested against; they hold ``B H N m`` numbers each, 0.47 GB in float32 at the ONO Darcy
    size of 85 x 85 points, batch 8, 8 heads, 256 landmarks). ``None`` (default, :func:`nystrom_fused`):
    explicit on CUDA in float32 with a head width under 32 while each factor takes at most
    :data:`NYSTROM_EXPLICIT_BYTES`, fused elsewhere. On an H200 the memory-efficient kernel's float32
    backward at head width 16 took 81 of the 170 ms of an ONO Darcy step; the explicit products are
    plain (TF32 where allowed) matrix multiplications.
    """
    if fused is None:
        fused = nystrom_fused(q, k, num_landmarks)
    dtype = q.dtype
    q, k, v = _upcast(q, k, v)
    s = scale if scale is not None else q.shape[-1] ** -0.5
    q = q * s
    if pad_to_landmarks:
        q_l, _ = padded_segment_means(q, query_mask, num_landmarks)
        k_l, n_zero = padded_segment_means(k, key_mask, num_landmarks)
        q_lmask = k_lmask = None
    else:
        q_l, q_lmask = segment_means(q, query_mask, num_landmarks)
        k_l, k_lmask = segment_means(k, key_mask, num_landmarks)
        # without a mask every segment holds a point when there are at least m of them: no landmark mask
        # (a mask would keep the fused kernels from running)
        if query_mask is None and q.shape[2] >= num_landmarks:
            q_lmask = None
        if key_mask is None and k.shape[2] >= num_landmarks:
            k_lmask = None
    kernel_2 = _masked_softmax(q_l @ k_l.mT, k_lmask, q_lmask)  # (B, H, m, m)
    if not fused:
        if pad_to_landmarks:
            kernel_3, share = _zero_key_share(q_l @ k.mT, key_mask, n_zero)  # (B, H, m, N), (B, H, m, 1)
            kv = (kernel_3 @ v) * share
        else:
            kv = _masked_softmax(q_l @ k.mT, key_mask, q_lmask) @ v
        kernel_1 = _masked_softmax(q @ k_l.mT, k_lmask, None)  # (B, H, M, m)
        return (kernel_1 @ (iterative_pinv(kernel_2, pinv_iterations, pinv_scale) @ kv)).to(dtype)
    if pad_to_landmarks:  # the zero keys: one key k = 0, v = 0 of weight P (log P added to its logit)
        B, H, _, d = k.shape
        real = torch.ones(k.shape[0], k.shape[2], dtype=k.dtype, device=k.device) if key_mask is None else key_mask.to(k.dtype)
        w = torch.cat([real, n_zero.to(k.dtype)[:, None]], -1)
        kz, vz = k.new_zeros(B, H, 1, d), v.new_zeros(B, H, 1, v.shape[-1])
        kv = softmax_attention(q_l, torch.cat([k, kz], 2), torch.cat([v, vz], 2), weights=w, scale=1.0)
    else:
        kv = softmax_attention(q_l, k, v, key_mask, scale=1.0)
        if q_lmask is not None:
            kv = kv * q_lmask[:, None, :, None].to(kv.dtype)
    w_l = iterative_pinv(kernel_2, pinv_iterations, pinv_scale) @ kv  # (B, H, m, e)
    return softmax_attention(q, k_l, w_l, k_lmask, scale=1.0).to(dtype)


# ----------------------------------------------------------------------------------------------
# modules


class _HeadNorm(nn.Module):
    """Layer normalisation over the head width, with a learnable affine map per head (Cao 2021)."""

    def __init__(self, n_heads: int, head_dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n_heads, 1, head_dim))
        self.bias = nn.Parameter(torch.zeros(n_heads, 1, head_dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:  # (B, H, N, d)
        return F.layer_norm(x, x.shape[-1:], eps=self.eps) * self.weight + self.bias


class MultiHeadAttention(nn.Module):
    """Multi-head attention with the kernel chosen by name (see :data:`KERNELS`).

    ``q = x W_q``, ``k = c W_k``, ``v = c W_v`` (``c = context``, or ``x`` for self-attention), split
    into ``n_heads`` heads of width ``head_dim`` (default ``dim // n_heads``); with ``pos_dim > 0``
    the coordinates are concatenated to every head's q, k and v after the per-head layer norms
    (Cao 2021, section 4); the kernel runs per head; heads are concatenated and mapped back to
    ``dim`` by ``W_o``, followed by dropout. Outputs at masked queries are set to zero.

    ``head_norm`` (:data:`~opflow.models.hparams.HEAD_NORMS`): ``auto`` = (K, V) for ``galerkin``,
    (Q, K) for ``fourier``, none for the other kernels; ``none``; ``qk``; ``kv``. With
    ``init_gain = eta`` (not None) W_q, W_k and W_v are each set to ``eta U + delta I`` (Cao 2021,
    eq. 17; ``delta = init_diagonal``, U Xavier-uniform with gain 1, ``I`` the identity, rectangular
    if ``head_dim * n_heads != dim``) and their biases to zero; W_o keeps PyTorch's default.

    ``bias``: biases of W_q, W_k, W_v (W_o always has one). Options of the ``nystrom-attention``
    package (the NN block of the ONO authors' release): ``residual_conv = K`` (odd, 0 = none) adds
    to the kernel output, per head, a depth-wise convolution of the queries' values along the
    point sequence (``Conv2d(n_heads, n_heads, (K, 1), padding=(K // 2, 0), groups=n_heads,
    bias=False)`` on ``v (B, H, N, d)``, the package's ``res_conv``; masked points enter as zeros;
    in cross-attention the values of the query tokens, ``x W_v``); ``pad_to_landmarks`` and
    ``pinv_scale`` are passed to :func:`nystrom_attention`.

    ``kv_dropout = p`` (``galerkin`` kernel only) drops entries of each head's ``(d, d)`` product ``K^T V / n``
    with probability ``p`` in training, and in evaluation too with ``kv_dropout_eval``: the Galerkin authors'
    code (``libs/layers.py``, ``linear_attention``) calls ``F.dropout`` there with its default p = 0.5 in
    both modes, whatever dropout rate is configured (0.5 and ``True`` reproduce it). Off by default: the
    paper describes no such dropout (its eq. 4 and 6).

    ``efficient_scale`` (``efficient`` kernel only): ``softmax_features(Q)`` times ``d^-1/2``, ``d`` the
    width of a query head, as the ``linear_attention_transformer`` package (0.19.1) computes it: the
    "linear" NN block of the ONO authors' release (their zero-shot, NS and plasticity commands).
    """

    def __init__(
        self,
        dim: int,
        n_heads: int = 8,
        kernel: str = "softmax",
        head_dim: int | None = None,
        context_dim: int | None = None,
        pos_dim: int = 0,
        dropout: float = 0.0,
        bias: bool = True,
        num_landmarks: int = 64,
        pinv_iterations: int = 6,
        norm_eps: float = 1e-5,
        head_norm: str = "auto",
        init_gain: float | None = None,
        init_diagonal: float = 0.0,
        residual_conv: int = 0,
        pad_to_landmarks: bool = False,
        pinv_scale: str = "matrix",
        kv_dropout: float = 0.0,
        kv_dropout_eval: bool = False,
        efficient_scale: bool = False,
    ) -> None:
        super().__init__()
        self.kernel = check_kernel(kernel)
        if efficient_scale and self.kernel != "efficient":
            raise ConfigError(f"efficient_scale is the d^-1/2 of the efficient kernel's query softmax; kernel {kernel!r} has none: set efficient_scale: false")
        self.efficient_scale = bool(efficient_scale)
        if kv_dropout and self.kernel != "galerkin":
            raise ConfigError(f"kv_dropout drops entries of K^T V, which only the galerkin kernel forms; kernel {kernel!r} has none: set kv_dropout: 0")
        if not 0.0 <= kv_dropout < 1.0:
            raise ConfigError(f"kv_dropout {kv_dropout} is outside [0, 1); the Galerkin authors' code drops with 0.5, 0 turns it off")
        self.kv_dropout, self.kv_dropout_eval = float(kv_dropout), bool(kv_dropout_eval)
        if residual_conv < 0 or (residual_conv and residual_conv % 2 == 0):
            raise ConfigError(f"residual_conv must be 0 (none) or an odd kernel size, got {residual_conv}")
        if pinv_scale not in ("matrix", "batch"):
            raise ConfigError(f"pinv_scale must be 'matrix' or 'batch', got {pinv_scale!r}")
        self.pad_to_landmarks, self.pinv_scale = pad_to_landmarks, pinv_scale
        #: how the softmax kernel applies quadrature weights (:data:`SOFTMAX_BIAS_MODES`); a plain
        #: attribute, not a hyperparameter: both modes compute the same numbers
        self.softmax_bias = "fold"
        if head_dim is None:
            if dim % n_heads:
                raise ConfigError(f"attention width {dim} is not divisible by n_heads={n_heads}; pick n_heads dividing {dim}")
            head_dim = dim // n_heads
        if num_landmarks < 1 or pinv_iterations < 0:
            raise ConfigError(f"nystrom needs num_landmarks >= 1 and pinv_iterations >= 0, got {num_landmarks}, {pinv_iterations}")
        self.n_heads, self.head_dim, self.pos_dim = n_heads, head_dim, pos_dim
        self.num_landmarks, self.pinv_iterations = num_landmarks, pinv_iterations
        inner = n_heads * head_dim
        self.to_q = nn.Linear(dim, inner, bias=bias)
        self.to_kv = nn.Linear(context_dim or dim, 2 * inner, bias=bias)
        self.to_out = nn.Linear(n_heads * (head_dim + pos_dim), dim)
        self.dropout = Dropout(dropout)
        if head_norm not in HEAD_NORMS:
            raise ConfigError(f"unknown head_norm {head_norm!r}; allowed: {list(HEAD_NORMS)}")
        auto = {"galerkin": "kv", "fourier": "qk"}.get(kernel, "none")
        normed = {"none": (), "qk": ("q", "k"), "kv": ("k", "v")}[auto if head_norm == "auto" else head_norm]
        self.norms = nn.ModuleDict({name: _HeadNorm(n_heads, head_dim, norm_eps) for name in normed})
        self.res_conv = (
            nn.Conv2d(n_heads, n_heads, (residual_conv, 1), padding=(residual_conv // 2, 0), groups=n_heads, bias=False) if residual_conv else None
        )
        if init_gain is not None:
            self.reset_qkv(init_gain, init_diagonal)

    @torch.no_grad()
    def reset_qkv(self, gain: float, diagonal: float) -> None:
        """Cao 2021, eq. 17: each of W_q, W_k, W_v <- ``gain * U + diagonal * I``, biases <- 0.

        U is Xavier-uniform with gain 1 for that matrix alone (entries ~ U(-sqrt(6 / (fan_in +
        fan_out)), +...), i.e. U(-sqrt(3/d), sqrt(3/d)) for a square d x d matrix, as in the paper).
        """
        inner = self.n_heads * self.head_dim
        for lin, chunks in ((self.to_q, 1), (self.to_kv, 2)):
            for w in lin.weight.split(inner, dim=0)[:chunks]:
                nn.init.xavier_uniform_(w, gain=1.0)
                w.mul_(gain).add_(diagonal * torch.eye(*w.shape, dtype=w.dtype, device=w.device))
            if lin.bias is not None:
                lin.bias.zero_()

    def _split(self, t: Tensor) -> Tensor:
        B, N, _ = t.shape
        return t.view(B, N, self.n_heads, self.head_dim).transpose(1, 2)

    def _query_values(self, x: Tensor, pos: Tensor | None) -> Tensor:
        """``x W_v`` per head (with the V head norm and coordinates, as for the keys): the values of the query tokens."""
        v = self._split(self.to_kv(x).chunk(2, dim=-1)[1])
        if "v" in self.norms:
            v = self.norms["v"](v)
        if self.pos_dim:
            v = torch.cat([v, pos[:, None].expand(-1, self.n_heads, -1, -1)], -1)
        return v

    def _residual_conv(self, v: Tensor, mask: Tensor | None) -> Tensor:
        """The ``nystrom-attention`` package's residual: depth-wise convolution of ``v (B, H, N, e)`` along the points."""
        if mask is not None:
            v = v * mask[:, None, :, None].to(v.dtype)
        return self.res_conv(v)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        query_mask: Tensor | None = None,
        weights: Tensor | None = None,
        pos: Tensor | None = None,
        context_pos: Tensor | None = None,
    ) -> Tensor:
        """``x (B, M, dim)`` attends to ``context (B, N, context_dim)`` (default: ``x`` itself).

        ``mask (B, N)``: real keys; ``query_mask (B, M)``: real queries (defaults to ``mask`` in
        self-attention); ``weights (B, N)``: quadrature weights of the keys; ``pos (B, M, pos_dim)``
        and ``context_pos (B, N, pos_dim)``: coordinates concatenated per head when ``pos_dim > 0``.
        """
        self_attention = context is None
        if self_attention:
            context, context_pos = x, pos
            if query_mask is None:
                query_mask = mask
        q = self._split(self.to_q(x))
        k, v = (self._split(t) for t in self.to_kv(context).chunk(2, dim=-1))
        if "q" in self.norms:
            q = self.norms["q"](q)
        if "k" in self.norms:
            k = self.norms["k"](k)
        if "v" in self.norms:
            v = self.norms["v"](v)
        if self.pos_dim:
            if pos is None or context_pos is None:
                raise ValueError(f"this attention concatenates {self.pos_dim} coordinates per head: pass pos (and context_pos for cross-attention)")
            pq = pos[:, None].expand(-1, self.n_heads, -1, -1)
            pk = context_pos[:, None].expand(-1, self.n_heads, -1, -1)
            q, k, v = torch.cat([q, pq], -1), torch.cat([k, pk], -1), torch.cat([v, pk], -1)

        kern = self.kernel
        if kern == "nystrom" and weights is not None:
            raise ValueError("the nystrom kernel does not take quadrature weights; use softmax for weighted attention")
        if kern == "softmax":
            out = softmax_attention(q, k, v, mask, weights, bias_mode=self.softmax_bias)
        elif kern == "linear":
            out = linear_attention(q, k, v, mask, weights)
        elif kern == "normalized":
            out = normalized_attention(q, k, v, mask, weights)
        elif kern == "efficient":
            out = efficient_attention(q, k, v, mask, weights, q.shape[-1] ** -0.5 if self.efficient_scale else 1.0)
        elif kern == "cao_linear":
            out = cao_linear_attention(q, k, v, mask, weights)
        elif kern in ("galerkin", "fourier"):
            p_kv = self.kv_dropout if self.training or self.kv_dropout_eval else 0.0
            out = galerkin_attention(q, k, v, mask, weights, kv_dropout=p_kv)
        else:
            out = nystrom_attention(
                q, k, v, mask, query_mask, self.num_landmarks, self.pinv_iterations, pad_to_landmarks=self.pad_to_landmarks, pinv_scale=self.pinv_scale
            )
        if self.res_conv is not None:
            out = out + self._residual_conv(v if self_attention else self._query_values(x, pos), query_mask)
        B, _, M, _ = out.shape
        out = self.dropout(self.to_out(out.transpose(1, 2).reshape(B, M, -1)))
        if query_mask is not None:
            out = out * query_mask[..., None].to(out.dtype)
        return out


class TransformerBlock(nn.Module):
    """Pre-LN transformer block (ONO paper eq. 3): ``x <- x + Attn(LN(x)); x <- x + FFN(LN(x))``.

    With ``context`` (cross-attention) the keys and values come from ``LN(context)`` with the same
    layer norm, so that ``context = x`` reproduces the self-attention block exactly.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int = 8,
        kernel: str = "linear",
        ffn_ratio: float = 1.0,
        dropout: float = 0.0,
        act: str = "gelu",
        **attention_kwargs,
    ) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, n_heads, kernel, dropout=dropout, **attention_kwargs)
        self.ln_ffn = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, ffn_ratio, act=act, dropout=dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None, context: Tensor | None = None, context_mask: Tensor | None = None, **kwargs) -> Tensor:
        """Self-attention over ``x`` with key mask ``mask``; or, with ``context``, cross-attention of
        ``x`` to ``context`` whose real points are ``context_mask`` (``mask`` is then the query mask)."""
        if context is None:
            x = x + self.attn(self.ln_attn(x), mask=mask, **kwargs)
        else:
            x = x + self.attn(self.ln_attn(x), self.ln_attn(context), mask=context_mask, query_mask=mask, **kwargs)
        return x + self.ffn(self.ln_ffn(x))


def nearest_features(points: Tensor, features: Tensor, query: Tensor, mask: Tensor | None = None, chunk: int = 1 << 22) -> Tensor:
    """Features of the nearest real point: ``out[b, i] = features[b, argmin_j |query[b, i] - points[b, j]|]``.

    ``points (B, N, d)``, ``features (B, N, c)``, ``query (B, M, d)``, ``mask (B, N)``. Exact where a
    query coincides with an input point. Processed in chunks of queries so that at most ``chunk``
    distances are held at once. Used to give the query points of a model an input value.
    """
    B, N, _ = points.shape
    step = max(1, chunk // max(1, B * N))
    out = []
    for s in range(0, query.shape[1], step):
        d2 = torch.cdist(query[:, s : s + step].to(points.dtype), points)
        if mask is not None:
            d2 = d2.masked_fill(~mask[:, None, :], float("inf"))
        idx = d2.argmin(-1)  # (B, m)
        out.append(torch.gather(features, 1, idx[..., None].expand(-1, -1, features.shape[-1])))
    return torch.cat(out, 1)


__all__ = [
    "KERNELS",
    "MultiHeadAttention",
    "TransformerBlock",
    "cao_linear_attention",
    "check_kernel",
    "efficient_attention",
    "fold_key_bias",
    "fourier_attention",
    "galerkin_attention",
    "iterative_pinv",
    "linear_attention",
    "nearest_features",
    "normalized_attention",
    "nystrom_attention",
    "nystrom_fused",
    "padded_segment_means",
    "segment_means",
    "softmax_attention",
]
