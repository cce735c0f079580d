"""Specification of the Galerkin and Fourier Transformers (``gt``, ``ft``).

Cao 2021, "Choose a Transformer: Fourier or Galerkin" (NeurIPS): eqs. 5-6 (the two attentions),
eq. 17 (initialisation), Section 4 (coordinates in every head), Appendix B and Table 5 (networks and
parameter counts).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from opflow.data.errors import ConfigError
from opflow.models import build_model, count_parameters
from opflow.models.galerkin import FourierTransformer, GalerkinTransformer, coarse_size
from opflow.models.hparams import check_hparams
from opflow.models.layers.attention import MultiHeadAttention, fourier_attention, galerkin_attention

from model_helpers import overfit_mean_field_operator

REPO = Path(__file__).resolve().parents[3]

#: the paper's 1D Burgers network (Example 1, Fig. 4, Table 5; the authors' ex1_burgers config)
BURGERS = dict(width=96, n_layers=4, n_heads=1, ffn_dim=192, sampler="none", decoder_width=48, modes=16, proj_width=48, decoder_coords=False)
#: the inverse-problem network (Example 3, Table 5; the authors' ex3_darcy_inv config)
INVERSE = dict(width=192, ffn_dim=384, decoder="pointwise", decoder_layers=1, decoder_width=192)
#: a small 2D network for the behaviour tests
SMALL2D = dict(width=12, n_layers=1, n_heads=2, ffn_dim=24, coarse_sizes=[[17, 9]], decoder_width=8, modes=4, proj_width=16,
               dropout=0.0, ffn_dropout=0.0, down_dropout=0.0)


def grid2d(n: int, batch: int = 1) -> torch.Tensor:
    x = torch.linspace(0, 1, n)
    return torch.stack(torch.meshgrid(x, x, indexing="ij"), -1).reshape(1, n * n, 2).repeat(batch, 1, 1)


def gt(arch: str = "gt", coord_dim: int = 2, seed: int = 0, **kw) -> GalerkinTransformer:
    torch.manual_seed(seed)
    return build_model({"arch": arch, **kw}, 1, 1, coord_dim)


def heads_qkv(att: MultiHeadAttention, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-head q, k, v of ``att`` computed by hand: projections, the module's per-head layer norms,
    then the coordinates concatenated, shapes (B, H, n, head_dim + pos_dim)."""
    B, n, _ = x.shape
    H, dh = att.n_heads, att.head_dim
    k, v = att.to_kv(x).chunk(2, -1)
    t = {"q": att.to_q(x), "k": k, "v": v}
    out = []
    for name in "qkv":
        z = t[name].view(B, n, H, dh).transpose(1, 2)
        if name in att.norms:
            nm = att.norms[name]
            z = F.layer_norm(z, (dh,)) * nm.weight + nm.bias
        out.append(torch.cat([z, pos[:, None].expand(B, H, n, pos.shape[-1])], -1))
    return tuple(out)


def randomise_norms(att: MultiHeadAttention) -> None:
    with torch.no_grad():
        for nm in att.norms.values():
            nm.weight.uniform_(0.5, 1.5)
            nm.bias.uniform_(-0.5, 0.5)


# ------------------------------------------------------------------------------------------------
# the two attentions (eqs. 5 and 6), with coordinates in every head


def test_fourier_attention_is_the_kernel_integral_with_coordinates_in_every_head():
    """Eq. 5 read as a quadrature (Sec. 4.1.2): z_i = (1/n) sum_j (q~_i . k~_j) v_j, with
    q~ = [LN(q), x], k~ = [LN(k), x], v~ = [v, x] per head; the module computes it in linear cost."""
    torch.manual_seed(0)
    att = MultiHeadAttention(8, 2, "fourier", pos_dim=2)
    randomise_norms(att)
    assert set(att.norms) == {"q", "k"}
    x, pos = torch.randn(2, 7, 8), torch.rand(2, 7, 2)
    q, k, v = heads_qkv(att, x, pos)
    n = x.shape[1]
    z = torch.zeros_like(v)
    for i in range(n):  # the explicit kernel integral, one query point at a time
        for j in range(n):
            z[:, :, i] += (q[:, :, i] * k[:, :, j]).sum(-1, keepdim=True) * v[:, :, j] / n
    expected = att.to_out(z.transpose(1, 2).reshape(2, n, -1))
    torch.testing.assert_close(att(x, pos=pos), expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fourier_attention(q, k, v), (q @ k.mT) @ v / n, rtol=1e-10, atol=1e-12)


def test_galerkin_attention_is_q_times_kt_v_over_n_computed_naively():
    """Eq. 6: z = Q (K~^T V~) / n with per-head LN on K and V; K^T V summed entry by entry."""
    torch.manual_seed(1)
    att = MultiHeadAttention(8, 2, "galerkin", pos_dim=2)
    randomise_norms(att)
    assert set(att.norms) == {"k", "v"}
    x, pos = torch.randn(2, 9, 8), torch.rand(2, 9, 2)
    q, k, v = heads_qkv(att, x, pos)
    n, e = x.shape[1], q.shape[-1]
    ktv = torch.zeros(2, 2, e, e)
    for a in range(e):
        for b in range(e):
            for j in range(n):
                ktv[:, :, a, b] += k[:, :, j, a] * v[:, :, j, b]
    z = q @ ktv / n
    torch.testing.assert_close(galerkin_attention(q, k, v), z, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(att(x, pos=pos), att.to_out(z.transpose(1, 2).reshape(2, n, -1)), rtol=1e-10, atol=1e-12)


def test_kv_dropout_drops_entries_of_kt_v_over_n_as_the_authors_code_does():
    """``kv_dropout = p``: Q (M * (K^T V / n)) / (1 - p), M Bernoulli(1 - p) per entry of each head's (d, d) product:
    the mask of :func:`opflow.models.layers.dropout.dropout` drawn from the same seed, on the product after the 1/n."""
    from opflow.models.layers.dropout import dropout

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 9, 4, generator=g) for _ in range(3))
    ktv = torch.einsum("bhnd,bhne->bhde", k, v) / 9
    torch.manual_seed(11)
    dropped = galerkin_attention(q, k, v, kv_dropout=0.5)
    torch.manual_seed(11)
    torch.testing.assert_close(dropped, q @ dropout(ktv, 0.5), rtol=1e-6, atol=1e-6)
    torch.manual_seed(11)
    kept = dropout(ktv, 0.5) / ktv
    assert set(kept.flatten().tolist()) == {0.0, 2.0}  # entries dropped or doubled, about half each
    assert 0.3 < (kept == 0).float().mean() < 0.7
    torch.testing.assert_close(galerkin_attention(q, k, v, kv_dropout=0.0), q @ ktv, rtol=1e-6, atol=1e-6)


def test_kv_dropout_is_on_in_training_and_in_evaluation_only_with_kv_dropout_eval():
    x, pos = torch.randn(2, 9, 8), torch.rand(2, 9, 2)
    torch.manual_seed(0)
    plain = MultiHeadAttention(8, 2, "galerkin", pos_dim=2)
    nets = {}
    for name, kw in {"train": {}, "always": {"kv_dropout_eval": True}}.items():
        torch.manual_seed(0)
        nets[name] = MultiHeadAttention(8, 2, "galerkin", pos_dim=2, kv_dropout=0.5, **kw)
        nets[name].load_state_dict(plain.state_dict())
    plain.eval()
    reference = plain(x, pos=pos)
    for net in nets.values():  # training: the product is dropped, a new mask at every call
        a, b = net(x, pos=pos), net(x, pos=pos)
        assert not torch.allclose(a, reference) and not torch.allclose(a, b)
        net.eval()
    torch.testing.assert_close(nets["train"](x, pos=pos), reference)  # evaluation: off unless kv_dropout_eval
    assert not torch.allclose(nets["always"](x, pos=pos), reference)


def test_kv_dropout_settings_that_cannot_apply_are_named():
    with pytest.raises(ValueError, match="only attention: galerkin forms"):
        check_hparams("gt", {"attention": "fourier", "kv_dropout": 0.5})
    with pytest.raises(ValueError, match="kv_dropout is 0"):
        check_hparams("gt", {"kv_dropout_eval": True})
    with pytest.raises(ConfigError, match="only the galerkin kernel"):
        MultiHeadAttention(8, 2, "softmax", kv_dropout=0.5)
    assert count_parameters(gt(**SMALL2D, kv_dropout=0.5)) == count_parameters(gt(**SMALL2D))  # a dropout: no weights
    net = gt(arch="gt", coord_dim=1, sampler="none", attention="galerkin", norm="regular", kv_dropout=0.5, kv_dropout_eval=True)
    assert all(layer.attn.kv_dropout == 0.5 and layer.attn.kv_dropout_eval for layer in net.layers)


def test_head_norm_options_and_regular_layer_norm():
    """Per-head norms: the kernel's pair, none, or a named pair for any kernel (the paper's softmax
    ablations); norm: regular is the post-LN layer of eq. 7 without per-head norms."""
    assert set(MultiHeadAttention(8, 2, "galerkin", head_norm="none").norms) == set()
    assert set(MultiHeadAttention(8, 2, "softmax").norms) == set()
    assert set(MultiHeadAttention(8, 2, "softmax", head_norm="qk").norms) == {"q", "k"}
    assert set(MultiHeadAttention(8, 2, "efficient", head_norm="kv").norms) == {"k", "v"}
    with pytest.raises(ConfigError, match="head_norm"):
        MultiHeadAttention(8, 2, "galerkin", head_norm="q")
    reg = gt(norm="regular")
    layer = reg.layers[0]
    assert len(layer.attn.norms) == 0 and isinstance(layer.ln_attn, torch.nn.LayerNorm) and isinstance(layer.ln_ffn, torch.nn.LayerNorm)
    assert count_parameters(reg) == 2_220_829  # two LN(128) per layer replace the four per-head LN(32)
    soft = gt(attention="softmax", norm="qk")
    assert soft.layers[0].attn.kernel == "softmax" and set(soft.layers[0].attn.norms) == {"q", "k"}


# ------------------------------------------------------------------------------------------------
# initialisation (eq. 17) and configuration


def test_projections_start_from_eta_xavier_plus_delta_identity():
    """W = eta U + delta I for W_q, W_k, W_v (U ~ Xavier-uniform with gain 1: U(-sqrt(3/d), sqrt(3/d))
    for d x d), zero biases; W_o keeps the default initialisation."""
    eta, delta, d = 0.3, 0.05, 128
    m = gt(init_gain=eta, init_diagonal=delta)
    bound = math.sqrt(3 / d)
    for layer in m.layers:
        att = layer.attn
        mats = [att.to_q.weight.detach(), *att.to_kv.weight.detach().split(d, 0)]
        for w in mats:
            u = (w - delta * torch.eye(d)) / eta
            assert u.abs().max() <= bound + 1e-12
            assert abs(float(u.std()) - math.sqrt(1 / d)) < 0.05 * math.sqrt(1 / d)  # variance bound^2 / 3 = 1/d
            assert abs(float(u.mean())) < 0.01 * bound
        assert torch.all(att.to_q.bias == 0) and torch.all(att.to_kv.bias == 0)
        assert att.to_out.weight.abs().max() > 0.05  # default init, not the small one
    pure = gt(init_gain=0.0, init_diagonal=0.01)  # eta = 0: exactly delta I
    w = pure.layers[0].attn.to_kv.weight
    torch.testing.assert_close(w, torch.cat([0.01 * torch.eye(d)] * 2), rtol=0, atol=0)
    defaults = check_hparams("gt", {})
    assert defaults.init_gain == 1e-2 and defaults.init_diagonal == 1e-2  # the paper's Darcy setting (PROTOCOLS)


def test_coarse_grid_follows_the_input_resolution():
    assert coarse_size(141, 0.3, [(141, 43), (211, 61)]) == 43
    assert coarse_size(211, 0.3, [(141, 43), (211, 61)]) == 61  # the paper's second configuration
    assert coarse_size(85, 0.3, [(141, 43)]) == 26 and coarse_size(421, 0.3) == 127
    m = gt()
    assert m.grids((141, 141)) == ((78, 78), (43, 43))  # intermediate round(sqrt(141 * 43))
    assert m.grids((211, 211)) == ((113, 113), (61, 61))
    with pytest.raises(ConfigError, match="coarse_sizes"):
        check_hparams("gt", {"coarse_sizes": [[141, 43], [141, 40]]})


def test_encoder_sees_the_coarse_grid_coordinates_in_every_head():
    """The attention runs on the coarse grid, its coordinates (the fine grid's, interpolated)
    concatenated in every head: W_o takes n_heads * (head_dim + 2) features."""
    m = gt(**SMALL2D).eval()
    att = m.layers[0].attn
    assert att.pos_dim == 2 and att.to_out.in_features == 2 * (6 + 2)
    seen = {}
    m.layers[0].register_forward_hook(lambda mod, args, out: seen.update(y=args[0], pos=args[1]))
    n = 17
    m(grid2d(n, 2), torch.randn(2, n * n, 1), grid_shape=(n, n))
    assert seen["y"].shape == (2, 81, 12)
    torch.testing.assert_close(seen["pos"], grid2d(9, 2), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# the published networks: parameter counts (Table 5) equal, exactly


def test_darcy_network_has_the_published_parameter_count():
    """2D Darcy (141, 43): 2,220,829 (Table 5 "2.22m"; the authors' FourierTransformer2D)."""
    for arch, cls, kernel in (("gt", GalerkinTransformer, "galerkin"), ("ft", FourierTransformer, "fourier")):
        m = gt(arch)
        assert type(m) is cls and m.layers[0].attn.kernel == kernel and len(m.layers) == 6
        att = m.layers[0].attn
        assert att.n_heads == 4 and att.head_dim == 32 and m.layers[0].ffn[0].out_features == 256
        down = 1 * 128 * 9 + 128 * 42 * 9 + 42 * 42 * 9 + 42 * 44 * 9  # CNN down-sampler, no biases
        layer = 3 * (128 * 128 + 128) + (4 * 34 * 128 + 128) + 2 * 2 * 4 * 32 + (128 * 256 + 256 + 256 * 128 + 128)
        up = 128 * 128 * 9
        dec = (130 * 32 + 32) + 2 * (2 * 32 * 32 * 12 * 12 * 2 + 32 * 32 + 32) + (32 * 128 + 128 + 128 + 1)
        assert count_parameters(m) == down + 6 * layer + up + dec == 2_220_829


def test_burgers_network_has_the_published_parameter_count():
    """1D Burgers: 530,305 (Table 5 "523k-530k"; the authors' SimpleTransformer for ex1)."""
    m = gt(coord_dim=1, **BURGERS)
    assert count_parameters(m) == 530_305
    assert count_parameters(gt("ft", coord_dim=1, **BURGERS)) == 530_305


@pytest.mark.parametrize("entry, kernel, norms, regular", [
    ("ft1d_regular", "fourier", set(), True), ("gt1d_regular", "galerkin", set(), True),
    ("st1d_regular", "softmax", set(), True), ("lt1d_regular", "cao_linear", set(), True),
    ("st1d", "softmax", {"q", "k"}, False), ("lt1d", "cao_linear", {"k", "v"}, False),
])
def test_the_burgers_ablation_entries_are_table_2a_rows_with_the_published_parameter_count(entry, kernel, norms, regular):
    """Galerkin Table 2(a)'s FT / GT / ST / LT "regular Ln" and "ST Ln on Q, K" / "LT Ln on K, V" rows: the gt1d
    network with that attention block, 530,305 parameters each (Table 5's 523k-530k); Table 2(b)'s Darcy rows
    the same on the gt / ft network, 2,220,829 each, and Table 3's on the inverse network, 2,383,873 each."""
    from opflow.config import load_config_files, models_of

    models = models_of(load_config_files([REPO / "config" / "default.yaml"]))
    for name, dim, count in ((entry, 1, 530_305), (entry.replace("1d", ""), 2, 2_220_829), (entry.replace("1d", "_inverse"), 2, 2_383_873)):
        m = build_model({k: v for k, v in models[name].items() if k != "training"}, 1, 1, dim)
        assert count_parameters(m) == count, name
        layer = m.layers[0]
        assert layer.attn.kernel == kernel and set(layer.attn.norms) == norms and layer.regular is regular, name


def test_inverse_network_has_the_published_parameter_count():
    """Inverse Darcy (Example 3): 2,383,873 (Table 5 "2.38m"): width 192, FFN 384, point-wise decoder."""
    assert count_parameters(gt(**INVERSE)) == 2_383_873


# ------------------------------------------------------------------------------------------------
# behaviour


def test_outputs_at_query_points_interpolate_the_grid_output_and_other_resolutions_run():
    m = gt(**SMALL2D).eval()
    n = 17
    g, a = grid2d(n, 2), torch.randn(2, n * n, 1)
    with torch.no_grad():
        full = m(g, a, grid_shape=(n, n))
        idx = torch.tensor([0, 5, 100, 288])
        torch.testing.assert_close(m(g, a, query=g[:, idx], grid_shape=(n, n)), full[:, idx], rtol=1e-10, atol=1e-12)
        mid = m(g, a, query=torch.tensor([[[0.5 / 16, 0.0]]]).repeat(2, 1, 1), grid_shape=(n, n))
        torch.testing.assert_close(mid[:, 0], (full[:, 0] + full[:, n]) / 2, rtol=1e-10, atol=1e-12)  # bilinear
        assert m(grid2d(21, 2), torch.randn(2, 21 * 21, 1), grid_shape=(21, 21)).shape == (2, 441, 1)  # 21 -> 7 by the ratio
    inv = gt(**{**SMALL2D, "decoder": "pointwise", "decoder_layers": 1}).eval()
    with torch.no_grad():
        torch.testing.assert_close(inv(g, a, query=g[:, idx], grid_shape=(n, n)), inv(g, a, grid_shape=(n, n))[:, idx], rtol=1e-10, atol=1e-12)


def test_the_decoders_first_map_before_the_last_interpolation_is_the_same_function_and_gradient():
    """``lift_first`` (the default) applies the decoder's ``fc([h, x])`` to the up-sampler's features on the
    intermediate grid and interpolates its ``decoder_width`` channels, not ``width``; bilinear interpolation is linear
    per channel with weights summing to one, so the outputs and every parameter's gradient equal Figure 7's order
    (interpolate, then the map) to rounding, for both decoders and both attentions (17 -> middle 12 -> coarse 9)."""
    n = 17
    g, a = grid2d(n, 2), torch.randn(2, n * n, 1)
    for spec in ({"arch": "gt"}, {"arch": "ft"}, {"arch": "gt", "decoder": "pointwise", "decoder_layers": 1}):
        m = gt(**{**SMALL2D, **spec})
        assert m.grids((n, n)) == ((12, 12), (9, 9))
        out, grads = {}, {}
        for first in (True, False):
            m.lift_first = first
            m.zero_grad()
            out[first] = m(g, a, grid_shape=(n, n))
            (out[first] ** 2).sum().backward()
            grads[first] = {k: p.grad.clone() for k, p in m.named_parameters()}
        torch.testing.assert_close(out[True], out[False], rtol=1e-12, atol=1e-13)
        assert set(grads[True]) == set(grads[False]) and all(g.abs().sum() > 0 for g in grads[True].values())
        for k in grads[True]:
            torch.testing.assert_close(grads[True][k], grads[False][k], rtol=1e-10, atol=1e-12, msg=k)


def test_inverse_network_decodes_on_the_coarse_grid():
    """output_grid: coarse (Example 3): the up-sampler's convolution and the point-wise decoder act on
    the attention grid (17 -> 5 here, the inverse view's block-averaged target grid); outputs at the
    fine nodes that are coarse nodes equal the outputs at the coarse query points."""
    m = gt(**{**SMALL2D, "coarse_sizes": [[17, 5]], "decoder": "pointwise", "decoder_layers": 1, "output_grid": "coarse"}).eval()
    seen = {}
    m.up.conv.register_forward_hook(lambda mod, args, out: seen.update(shape=tuple(args[0].shape)))
    n = 17
    g, a = grid2d(n, 2), torch.randn(2, n * n, 1)
    with torch.no_grad():
        coarse = m(g, a, query=grid2d(5, 2), grid_shape=(n, n))
        assert seen["shape"] == (2, 12, 5, 5) and coarse.shape == (2, 25, 1)
        fine = m(g, a, grid_shape=(n, n)).reshape(2, n, n)
    torch.testing.assert_close(fine[:, ::4, ::4].reshape(2, 25, 1), coarse, rtol=1e-10, atol=1e-12)


def test_bad_inputs_are_named():
    with pytest.raises(ConfigError, match="sampler"):
        gt(coord_dim=1)
    m = gt(**SMALL2D)
    with pytest.raises(ValueError, match="grid_shape"):
        m(grid2d(17), torch.randn(1, 289, 1))
    with pytest.raises(ValueError, match="padded"):
        m(grid2d(17), torch.randn(1, 289, 1), mask=torch.arange(289)[None] < 200, grid_shape=(17, 17))


def overfit_2d(spec: dict, steps: int, lr: float = 1e-2, n: int = 17) -> float:
    """The mean-field task of :func:`overfit_mean_field_operator` on an n x n grid: 4 samples of
    u = a <a> + <a^2>, a a smooth field; Adam + OneCycle, full batch; mean relative L2 in eval mode."""
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    g = grid2d(n, 4)
    k = torch.arange(1.0, 4.0)
    a = torch.einsum("bij,bni,bnj->bn", torch.randn(4, 3, 3), torch.sin(math.pi * g[..., :1] * k), torch.sin(math.pi * g[..., 1:] * k))[..., None]
    u = a * a.mean(1, keepdim=True) + (a**2).mean(1, keepdim=True)
    m = build_model(spec, 1, 1, 2)
    opt = torch.optim.Adam(m.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)

    def err() -> torch.Tensor:
        return ((m(g, a, grid_shape=(n, n)) - u).norm(dim=(1, 2)) / u.norm(dim=(1, 2))).mean()

    for _ in range(steps):
        loss = err()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    m.eval()
    with torch.no_grad():
        return float(err())


@pytest.mark.slow
def test_galerkin_transformer_2d_overfits_four_samples():
    """The whole 2D network (CNN down-sampler, Galerkin encoder, up-sampler, spectral decoder)."""
    err = overfit_2d({"arch": "gt", **SMALL2D}, steps=200)
    assert err < 3e-2, err


@pytest.mark.slow
@pytest.mark.parametrize("attention, norm", [("fourier", "head"), ("softmax", "regular"), ("cao_linear", "kv")])
def test_the_1d_network_overfits_four_samples_with_each_attention_block(attention, norm):
    """The Burgers-type network (no sampler, spectral decoder) on the shared overfitting task: the Fourier
    Transformer, and two of Table 2(a)'s ablations (softmax with the post-LN block, Cao's "linear" attention)."""
    spec = dict(arch="ft", attention=attention, norm=norm, width=16, n_layers=2, n_heads=2, ffn_dim=32, sampler="none", decoder_width=8,
                modes=6, proj_width=16, decoder_coords=False, dropout=0.0, ffn_dropout=0.0)
    err = overfit_mean_field_operator(spec, steps=300)
    assert err < 1e-2, err


# ------------------------------------------------------------------------------------------------
# the H1 regulariser of the training loss (Sec. 3, App. C.1)


def test_h1_regulariser_is_the_coefficient_weighted_seminorm_ratio():
    """r = sqrt(h / d * sum_I |a (D p - D u)|^2 / sum_I a |D u|^2), central differences at the
    interior nodes I, computed here node by node; the loss adds grad_weight * r (grad_weight =
    sqrt(gamma))."""
    from opflow.config import TrainConfig
    from opflow.metrics import h1_regulariser, rel_l2_loss, training_loss

    torch.manual_seed(0)
    n1, n2 = 5, 6
    x1, x2 = torch.linspace(0, 2, n1), torch.linspace(0, 1, n2)  # spacings 0.5 and 0.2
    coords = torch.stack(torch.meshgrid(x1, x2, indexing="ij"), -1).reshape(1, -1, 2).repeat(2, 1, 1)
    p, u = torch.randn(2, n1 * n2, 1), torch.randn(2, n1 * n2, 1)
    a = torch.rand(2, n1 * n2, 1) * 9 + 3
    P, U, A = (t.reshape(2, n1, n2) for t in (p, u, a))
    num, den = torch.zeros(2), torch.zeros(2)
    for i in range(1, n1 - 1):
        for j in range(1, n2 - 1):
            for dp, du in (((P[:, i + 1, j] - P[:, i - 1, j]) / 2, (U[:, i + 1, j] - U[:, i - 1, j]) / 2),
                           ((P[:, i, j + 1] - P[:, i, j - 1]) / 2, (U[:, i, j + 1] - U[:, i, j - 1]) / 2)):
                num += (A[:, i, j] * (dp - du)) ** 2
                den += A[:, i, j] * du**2
    expected = torch.sqrt((0.5 + 0.2) / 2 / 2 * num / den)
    torch.testing.assert_close(h1_regulariser(p, u, coords, (n1, n2), a)[:, 0], expected, rtol=1e-10, atol=0)
    # a constant coefficient c scales the ratio by c; the unweighted form is a = 1
    torch.testing.assert_close(h1_regulariser(p, u, coords, (n1, n2), torch.full_like(a, 4.0)), 2 * h1_regulariser(p, u, coords, (n1, n2)))
    loss = training_loss("rel_l2", p, u, coords=coords, grid_shape=(n1, n2), grad_weight=0.5**0.5, grad_form="h1_coeff", inputs=a)
    torch.testing.assert_close(loss, rel_l2_loss(p, u) + 0.5**0.5 * expected.mean())
    assert TrainConfig.from_dict({"grad_weight": 0.7071, "grad_form": "h1_coeff"}).grad_form == "h1_coeff"
    with pytest.raises(ValueError, match="coefficient"):
        training_loss("rel_l2", p, u, coords=coords, grid_shape=(n1, n2), grad_weight=1.0, grad_form="h1_coeff")
