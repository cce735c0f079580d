"""Specification of the attention kernel library (opflow.models.layers.attention).

Every kernel is checked against a naive reference written from the paper formula with explicit loops
or dense matrices, in float64, with cross-attention (M != N), padded keys holding garbage, and
quadrature weights where the kernel takes them.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from opflow.data.errors import ConfigError
from opflow.models.layers import KERNELS, MultiHeadAttention, TransformerBlock, nearest_features
from opflow.models.layers import attention as A


B, H, M, N, D = 2, 2, 5, 7, 3
N_REAL = (7, 4)  # sample 1 has 3 padded keys


def _inputs(seed: int = 0, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    q = scale * torch.randn(B, H, M, D, generator=g, dtype=torch.float64)
    k = scale * torch.randn(B, H, N, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, N, D + 1, generator=g, dtype=torch.float64)
    mask = torch.zeros(B, N, dtype=torch.bool)
    for b, n in enumerate(N_REAL):
        mask[b, :n] = True
    k = torch.where(mask[:, None, :, None], k, 1e3)  # garbage in the padding
    v = torch.where(mask[:, None, :, None], v, -1e3)
    w = torch.rand(B, N, generator=g, dtype=torch.float64) + 0.1
    return q, k, v, mask, w


# ---------------------------------------------------------------------------------------------
# naive references (loops over batch, head and query; only the real keys)


def _ref_loop(q, k, v, mask, score):
    """z_i = sum_j s(i, j) v_j / sum_j s(i, j) over real j, with s from ``score(q_i, k_j, j)``."""
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for b in range(q.shape[0]):
        real = torch.nonzero(mask[b]).flatten().tolist()
        for h in range(q.shape[1]):
            for i in range(q.shape[2]):
                s = torch.stack([score(b, q[b, h, i], k[b, h, j], j) for j in real])
                out[b, h, i] = (s[:, None] * v[b, h, real]).sum(0) / s.sum()
    return out


def ref_softmax(q, k, v, mask, w=None):
    d = q.shape[-1]
    wt = (lambda b, j: w[b, j]) if w is not None else (lambda b, j: 1.0)
    return _ref_loop(q, k, v, mask, lambda b, qi, kj, j: wt(b, j) * torch.exp(qi @ kj / math.sqrt(d)))


def ref_linear(q, k, v, mask, w=None, phi=lambda x: F.elu(x) + 1):
    wt = (lambda b, j: w[b, j]) if w is not None else (lambda b, j: 1.0)
    return _ref_loop(q, k, v, mask, lambda b, qi, kj, j: wt(b, j) * (phi(qi) @ phi(kj)))


def ref_efficient(q, k, v, mask, w=None):
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for b in range(q.shape[0]):
        real = torch.nonzero(mask[b]).flatten()
        for h in range(q.shape[1]):
            kr = k[b, h, real]
            if w is not None:
                kr = kr + torch.log(w[b, real])[:, None]
            a = torch.exp(kr) / torch.exp(kr).sum(0)  # softmax over the points, per feature
            qs = torch.exp(q[b, h]) / torch.exp(q[b, h]).sum(-1, keepdim=True)
            out[b, h] = qs @ (a.T @ v[b, h, real])
    return out


def ref_galerkin_dense(q, k, v, mask, w=None):
    """(Q K^T) diag(w) V over the real keys, in the quadratic order (Cao's Fourier form)."""
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for b in range(q.shape[0]):
        real = torch.nonzero(mask[b]).flatten()
        wb = w[b, real] if w is not None else torch.full((len(real),), 1.0 / len(real), dtype=q.dtype)
        for h in range(q.shape[1]):
            out[b, h] = (q[b, h] @ k[b, h, real].T) @ (wb[:, None] * v[b, h, real])
    return out


def ref_nystrom(q, k, v, mask, qmask, m):
    """Xiong et al. eq. 15 with exact pseudo-inverse; segment j of n real points holds the ranks
    ceil(j n / m) <= r < ceil((j + 1) n / m); empty segments dropped."""
    d = q.shape[-1]
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)

    def landmarks(x, real):
        n = len(real)
        segs = [real[math.ceil(j * n / m) : math.ceil((j + 1) * n / m)] for j in range(m)]
        return torch.stack([x[s].mean(0) for s in segs if len(s)])

    for b in range(q.shape[0]):
        kr = torch.nonzero(mask[b]).flatten()
        qr = torch.nonzero(qmask[b]).flatten() if qmask is not None else torch.arange(q.shape[2])
        for h in range(q.shape[1]):
            qs, ks = q[b, h] / math.sqrt(d), k[b, h, kr]
            ql, kl = landmarks(qs, qr), landmarks(ks, torch.arange(len(kr)))
            f1 = torch.softmax(qs @ kl.T, -1)
            f2 = torch.softmax(ql @ kl.T, -1)
            f3 = torch.softmax(ql @ ks.T, -1)
            out[b, h] = f1 @ torch.linalg.pinv(f2) @ f3 @ v[b, h, kr]
    return out


# ---------------------------------------------------------------------------------------------
# kernels against the references


def test_softmax_matches_reference_with_mask_and_weights():
    q, k, v, mask, w = _inputs()
    torch.testing.assert_close(A.softmax_attention(q, k, v, mask), ref_softmax(q, k, v, mask), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(A.softmax_attention(q, k, v, mask, w), ref_softmax(q, k, v, mask, w), rtol=1e-10, atol=1e-12)


def test_softmax_with_uniform_weights_equals_plain_softmax():
    q, k, v, mask, _ = _inputs()
    plain = A.softmax_attention(q, k, v, mask)
    for c in (1.0, 1.0 / 7, 3.5):
        torch.testing.assert_close(A.softmax_attention(q, k, v, mask, torch.full((B, N), c)), plain, rtol=1e-12, atol=1e-12)


def test_softmax_weights_are_a_quadrature():
    """Two coincident keys with weight 1/2 each equal one key of weight 1 (continuum attention)."""
    q, k, v, _, _ = _inputs()
    k2, v2 = torch.cat([k, k[:, :, :1]], 2), torch.cat([v, v[:, :, :1]], 2)
    w2 = torch.ones(B, N + 1)
    w2[:, 0] = w2[:, -1] = 0.5
    torch.testing.assert_close(A.softmax_attention(q, k2, v2, weights=w2), A.softmax_attention(q, k, v), rtol=1e-12, atol=1e-12)


def test_linear_matches_reference():
    q, k, v, mask, w = _inputs()
    torch.testing.assert_close(A.linear_attention(q, k, v, mask), ref_linear(q, k, v, mask), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(A.linear_attention(q, k, v, mask, w), ref_linear(q, k, v, mask, w), rtol=1e-10, atol=1e-12)


def test_normalized_matches_reference():
    q, k, v, mask, w = _inputs()
    phi = lambda x: torch.softmax(x, -1)  # noqa: E731
    torch.testing.assert_close(A.normalized_attention(q, k, v, mask), ref_linear(q, k, v, mask, phi=phi), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(A.normalized_attention(q, k, v, mask, w), ref_linear(q, k, v, mask, w, phi=phi), rtol=1e-10, atol=1e-12)


def test_efficient_matches_reference():
    q, k, v, mask, w = _inputs()
    torch.testing.assert_close(A.efficient_attention(q, k, v, mask), ref_efficient(q, k, v, mask), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(A.efficient_attention(q, k, v, mask, w), ref_efficient(q, k, v, mask, w), rtol=1e-10, atol=1e-12)


def test_cao_linear_is_efficient_attention_over_the_number_of_real_keys():
    """Cao 2021's code: ``softmax_feat(Q) (softmax_points(K)^T V) / n``, n the sample's real keys; with quadrature
    weights, times their mean over the real keys (1/n for uniform ones)."""
    q, k, v, mask, w = _inputs()
    n_real = mask.sum(-1).to(q.dtype)[:, None, None, None]
    torch.testing.assert_close(A.cao_linear_attention(q, k, v, mask), ref_efficient(q, k, v, mask) / n_real, rtol=1e-10, atol=1e-12)
    mean_w = (w * mask).sum(-1)[:, None, None, None] / n_real
    torch.testing.assert_close(A.cao_linear_attention(q, k, v, mask, w), ref_efficient(q, k, v, mask, w) * mean_w, rtol=1e-10, atol=1e-12)
    k, v = torch.randn_like(k), torch.randn_like(v)  # no padding: every key real
    torch.testing.assert_close(A.cao_linear_attention(q, k, v), ref_efficient(q, k, v, torch.ones_like(mask)) / N, rtol=1e-10, atol=1e-12)


def test_galerkin_and_fourier_match_dense_quadratic_form():
    q, k, v, mask, w = _inputs()
    ref = ref_galerkin_dense(q, k, v, mask)
    torch.testing.assert_close(A.galerkin_attention(q, k, v, mask), ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(A.fourier_attention(q, k, v, mask), ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(A.galerkin_attention(q, k, v, mask, w), ref_galerkin_dense(q, k, v, mask, w), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("m", [2, 3, 4, 10])
def test_nystrom_matches_reference_with_exact_pinv(m):
    q, k, v, mask, _ = _inputs(scale=0.5)
    qmask = torch.ones(B, M, dtype=torch.bool)
    qmask[1, 3:] = False
    out = A.nystrom_attention(q, k, v, mask, qmask, num_landmarks=m, pinv_iterations=60)
    torch.testing.assert_close(out, ref_nystrom(q, k, v, mask, qmask, m), rtol=1e-8, atol=1e-8)


def test_nystrom_with_every_point_a_landmark_is_softmax():
    q, k, v, mask, _ = _inputs(scale=0.5)
    out = A.nystrom_attention(q, k, v, mask, None, num_landmarks=max(M, N), pinv_iterations=60)
    torch.testing.assert_close(out, A.softmax_attention(q, k, v, mask), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("pad", [False, True], ids=["segment_means", "package_landmarks"])
@pytest.mark.parametrize("masked", [False, True], ids=["grid", "padded"])
@pytest.mark.parametrize("n", [7, 50, 64], ids=["fewer_points_than_landmarks", "uneven_segments", "even_segments"])
def test_nystrom_fused_equals_the_explicit_products_values_and_gradients(pad, masked, n):
    """The fused path (softmax attentions, no (N, m) factor formed) is the same function as the explicit
    products of eq. 15, the package's zero keys included, in float64 to rounding, and so are its gradients."""
    g = torch.Generator().manual_seed(n + 2 * pad + masked)
    q, k, v = (torch.randn(2, 3, n, 5, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = None
    if masked:
        mask = torch.rand(2, n, generator=g) > 0.3
        mask[:, 0] = True
    outs, grads = [], []
    for fused in (True, False):
        out = A.nystrom_attention(q, k, v, mask, mask, num_landmarks=8, pinv_iterations=6, pad_to_landmarks=pad, fused=fused)
        if mask is not None:  # outputs at padded queries are meaningless (module docstring)
            out = out * mask[:, None, :, None]
        outs.append(out)
        grads.append(torch.autograd.grad((out * torch.cos(out)).sum(), (q, k, v)))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_iterative_pinv_converges_to_pinv_and_keeps_zero_blocks():
    g = torch.Generator().manual_seed(3)
    a = torch.softmax(torch.randn(2, 6, 6, generator=g, dtype=torch.float64), -1)
    torch.testing.assert_close(A.iterative_pinv(a, 40), torch.linalg.pinv(a), rtol=1e-9, atol=1e-9)
    a[:, 4:, :] = 0
    a[:, :, 4:] = 0
    z = A.iterative_pinv(a, 40)
    assert z[:, 4:, :].abs().max() == 0 and z[:, :, 4:].abs().max() == 0
    torch.testing.assert_close(z[:, :4, :4], torch.linalg.inv(a[:, :4, :4]), rtol=1e-9, atol=1e-9)


def test_segment_means_ignore_padding_position():
    x = torch.arange(10.0, dtype=torch.float64).reshape(1, 1, 10, 1)
    means, lmask = A.segment_means(x, None, 3)  # segments {0,1,2,3}, {4,5,6}, {7,8,9}
    torch.testing.assert_close(means.flatten(), torch.tensor([1.5, 5.0, 8.0]))
    assert lmask.all()
    mask = torch.tensor([[True, False, True, True, False, True, True, False, False, False]])
    means, lmask = A.segment_means(x, mask, 2)  # real points 0, 2, 3, 5, 6 -> {0, 2, 3}, {5, 6}
    torch.testing.assert_close(means.flatten(), torch.tensor([5 / 3, 5.5]))
    means, lmask = A.segment_means(x, mask, 8)  # 5 real points, 8 landmarks: 3 empty
    assert lmask.sum() == 5


# ---------------------------------------------------------------------------------------------
# masks, through the module, for every kernel


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_padding_is_ignored_exactly(kernel):
    """A padded batch gives, at the real points, the outputs of each unpadded sample alone; the
    padded rows are finite. Padding holds large garbage values."""
    torch.manual_seed(0)
    att = MultiHeadAttention(8, 2, kernel, num_landmarks=3, pinv_iterations=20).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 9, 8, generator=g)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    x[1, 6:] = 1e4
    out = att(x, mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], att(x[:1])[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out[1, :6], att(x[1:, :6])[0], rtol=1e-10, atol=1e-10)
    # cross-attention: padded keys of the context are ignored
    y = torch.randn(2, 4, 8, generator=g)
    cross = att(y, x, mask=mask)
    torch.testing.assert_close(cross[1], att(y[1:], x[1:, :6])[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kernel", ["softmax", "linear", "normalized", "efficient", "cao_linear", "galerkin", "fourier"])
def test_uniform_weights_do_not_change_the_normalised_kernels(kernel):
    """Uniform weights w = 1/n are the default quadrature of every kernel that takes weights."""
    torch.manual_seed(0)
    att = MultiHeadAttention(8, 2, kernel).double()
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(att(x, weights=torch.full((2, 6), 1 / 6)), att(x), rtol=1e-10, atol=1e-12)


def test_module_heads_and_layer_norms_are_where_the_papers_put_them():
    """Galerkin: per-head LN on K and V; Fourier: on Q and K; both Q (K^T V) / n; heads separate."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    for kernel, normed in (("galerkin", "kv"), ("fourier", "qk")):
        att = MultiHeadAttention(8, 2, kernel).double()
        with torch.no_grad():
            for nm in att.norms.values():
                nm.weight.uniform_(0.5, 1.5)
                nm.bias.uniform_(-0.5, 0.5)
        q, kv = att.to_q(x), att.to_kv(x)
        k, v = kv.chunk(2, -1)
        heads = []
        for h in range(2):
            sl = slice(4 * h, 4 * h + 4)
            t = {"q": q[..., sl], "k": k[..., sl], "v": v[..., sl]}
            for name in normed:
                nm = att.norms[name]
                t[name] = F.layer_norm(t[name], (4,)) * nm.weight[h, 0] + nm.bias[h, 0]
            heads.append(t["q"] @ (t["k"].mT @ t["v"]) / 6)
        torch.testing.assert_close(att(x), att.to_out(torch.cat(heads, -1)), rtol=1e-10, atol=1e-12)


def test_coordinates_are_concatenated_to_every_head():
    torch.manual_seed(0)
    att = MultiHeadAttention(8, 2, "softmax", pos_dim=2).double()
    x, pos = torch.randn(1, 5, 8), torch.rand(1, 5, 2)
    q = att.to_q(x).view(1, 5, 2, 4).transpose(1, 2)
    k, v = (t.view(1, 5, 2, 4).transpose(1, 2) for t in att.to_kv(x).chunk(2, -1))
    p = pos[:, None].expand(1, 2, 5, 2)
    z = ref_softmax(torch.cat([q, p], -1), torch.cat([k, p], -1), torch.cat([v, p], -1), torch.ones(1, 5, dtype=torch.bool))
    torch.testing.assert_close(att(x, pos=pos), att.to_out(z.transpose(1, 2).reshape(1, 5, 12)), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="pos"):
        att(x)


def test_unknown_kernel_is_a_config_error_listing_the_kernels():
    with pytest.raises(ConfigError) as e:
        MultiHeadAttention(8, 2, "performer")
    for name in KERNELS:
        assert name in str(e.value)
    with pytest.raises(ConfigError, match="divisible"):
        MultiHeadAttention(10, 4, "linear")


def test_nystrom_refuses_quadrature_weights():
    att = MultiHeadAttention(8, 2, "nystrom")
    with pytest.raises(ValueError, match="weights"):
        att(torch.randn(1, 4, 8), weights=torch.ones(1, 4))


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_transformer_block_cross_attention_to_itself_is_self_attention(kernel):
    torch.manual_seed(0)
    blk = TransformerBlock(8, 2, kernel, num_landmarks=3).double()
    x = torch.randn(2, 7, 8)
    torch.testing.assert_close(blk(x, context=x), blk(x), rtol=1e-12, atol=1e-12)


def test_nearest_features_picks_the_closest_real_point():
    pts = torch.tensor([[[0.0], [1.0], [2.0], [0.4]]])
    feats = torch.tensor([[[10.0], [11.0], [12.0], [13.0]]])
    query = torch.tensor([[[0.1], [0.3], [1.6], [2.0]]])
    assert nearest_features(pts, feats, query).flatten().tolist() == [10.0, 13.0, 12.0, 12.0]
    mask = torch.tensor([[True, True, True, False]])  # 0.4 is padding
    assert nearest_features(pts, feats, query, mask, chunk=1).flatten().tolist() == [10.0, 10.0, 12.0, 12.0]
