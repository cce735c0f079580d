"""The ONO authors' release as options of opflow's ``ono`` (``models.ono_official``; docs/ono.md).

The release (``ONOmodel2.ONO2`` with the ``nystrom-attention`` package) is not a dependency: its
structure is pinned here by shapes, counts and independent re-statements of its formulas;
``benchmarks/ono_official.py`` compares the two models number for number (float64, 1e-13).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from opflow.config import load_config_files
from opflow.data.errors import ConfigError
from opflow.models import build_model, count_parameters
from opflow.models.layers import FeedForward, MultiHeadAttention
from opflow.models.layers.attention import nystrom_attention, padded_segment_means
from opflow.models.ono import RELEASE_DARCY, RELEASE_ELASTICITY, RELEASE_ZEROSHOT

ROOT = Path(__file__).resolve().parents[3]


def release_entry(*files: str) -> dict:
    cfg = load_config_files([str(ROOT / "config" / f) for f in files])
    entry = dict(cfg["models"]["ono_official"])
    entry.pop("training", None)
    return entry


def tiny_release(**kw) -> nn.Module:
    """The release's structure at a test size (every structural option as released)."""
    cfg = {"arch": "ono", **RELEASE_DARCY, "width": 16, "n_layers": 2, "n_heads": 2, "ortho_dim": 4, "encoder_hidden": 32, "num_landmarks": 8}
    cfg.update(kw)
    torch.manual_seed(0)
    return build_model(cfg, 1, 1, 2)


def grid(n: int, batch: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.linspace(0, 1, n)
    X, Y = torch.meshgrid(t, t, indexing="ij")
    coords = torch.stack([X, Y], -1).reshape(1, -1, 2).expand(batch, -1, -1).contiguous()
    g = torch.Generator().manual_seed(seed)
    return coords, torch.randn(batch, n * n, 1, generator=g)


# ---------------------------------------------------------------------------------------------
# the configuration and its parameter count


def test_the_config_entry_is_the_release_and_has_its_parameter_count():
    """README command: 10 layers, k 32, Nystrom, width 128, 8 heads, FFN ratio 2 -> 2,027,985."""
    entry = release_entry("default.yaml")
    assert entry == {"arch": "ono", **RELEASE_DARCY}
    model = build_model(entry, 1, 1, 2)
    assert count_parameters(model) == 2_027_985
    training = load_config_files([str(ROOT / "config/default.yaml")])["models"]["ono_official"]["training"]
    assert training == {"batch_size": 4, "grad_weight": 0.1, "grad_form": "central"}


def test_the_quick_entry_only_shrinks_sizes():
    quick = release_entry("default.yaml", "quick.yaml")
    sizes = {"width", "n_layers", "n_heads", "ortho_dim", "encoder_hidden", "num_landmarks"}
    assert {k: v for k, v in quick.items() if k not in sizes} == {"arch": "ono", **{k: v for k, v in RELEASE_DARCY.items() if k not in sizes}}


def test_default_ono_keeps_its_structure():
    m = build_model({"arch": "ono"}, 1, 1, 2)
    assert count_parameters(m) == 1_227_649
    assert m.encoder[0].out_features == 128 and m.encoder[2].in_features == 128
    assert all(b.attn.to_q.bias is not None and b.attn.res_conv is None and not b.attn.pad_to_landmarks for b in m.blocks)
    assert all(oa.w_q.bias is None for oa in m.ortho) and isinstance(m.ortho[-1].ffn, FeedForward)


# ---------------------------------------------------------------------------------------------
# structure, one option at a time


def test_encoder_is_3_256_256():
    m = build_model({"arch": "ono", **RELEASE_DARCY}, 1, 1, 2)
    lin = [x for x in m.encoder if isinstance(x, nn.Linear)]
    assert [(x.in_features, x.out_features) for x in lin] == [(3, 256), (256, 256)]


def test_qkv_have_no_bias_and_w_q_has_one():
    m = build_model({"arch": "ono", **RELEASE_DARCY}, 1, 1, 2)
    for b in m.blocks:
        assert b.attn.to_q.bias is None and b.attn.to_kv.bias is None and b.attn.to_out.bias is not None
    for oa in m.ortho:
        assert oa.w_q.bias is not None and oa.w_q.bias.shape == (32,)
        assert isinstance(oa.w_v, nn.Identity)


def test_last_stage_is_layer_norm_then_one_linear():
    m = build_model({"arch": "ono", **RELEASE_DARCY}, 1, 1, 2)
    last = m.ortho[-1].ffn
    assert type(last) is nn.Linear and (last.in_features, last.out_features) == (128, 1)
    assert all(isinstance(oa.ffn, FeedForward) and oa.ffn[0].out_features == 256 for oa in m.ortho[:-1])
    h, psi, coeff = torch.randn(2, 5, 128), torch.randn(2, 5, 32), torch.randn(2, 32, 128)
    oa = m.ortho[-1]
    torch.testing.assert_close(oa.update(h, psi, coeff), last(oa.ln(psi @ coeff + h)))


def test_residual_convolution_shape_and_formula():
    """Conv2d(8, 8, (33, 1), padding (16, 0), groups 8, no bias) on v (B, H, N, d): 264 weights,
    out_i += sum_t w_h[t] v_{i + t - 16}, zero outside the sequence."""
    m = build_model({"arch": "ono", **RELEASE_DARCY}, 1, 1, 2)
    for b in m.blocks:
        conv = b.attn.res_conv
        assert isinstance(conv, nn.Conv2d) and conv.weight.shape == (8, 1, 33, 1) and conv.bias is None
        assert conv.groups == 8 and conv.padding == (16, 0) and conv.weight.numel() == 264
    conv = m.blocks[0].attn.res_conv
    v = torch.randn(2, 8, 40, 16)
    vp = torch.nn.functional.pad(v, (0, 0, 16, 16))
    w = conv.weight[:, 0, :, 0]  # (H, 33)
    ref = sum(w[None, :, t, None, None] * vp[:, :, t : t + 40] for t in range(33))
    torch.testing.assert_close(conv(v), ref)


def test_residual_convolution_is_added_to_the_kernel_output():
    attn = MultiHeadAttention(8, 2, "nystrom", bias=False, num_landmarks=4, residual_conv=5)
    x = torch.randn(2, 11, 8)
    plain = MultiHeadAttention(8, 2, "nystrom", bias=False, num_landmarks=4)
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if not k.startswith("res_conv")})
    v = attn._split(attn.to_kv(x).chunk(2, -1)[1])
    conv = attn.res_conv(v).transpose(1, 2).reshape(2, 11, 8)
    torch.testing.assert_close(attn(x), plain(x) + conv @ attn.to_out.weight.T)


def _zero_padded_nystrom(q, k, v, m, iters):
    """The package's algorithm, materialised: zero tokens in front, fixed segments, plain softmaxes,
    pseudo-inverse scaled over the whole batch."""
    n = q.shape[2]
    seg = math.ceil(n / m)
    pad = seg * m - n
    q, k, v = (torch.nn.functional.pad(t, (0, 0, pad, 0)) for t in (q * q.shape[-1] ** -0.5, k, v))
    ql = q.reshape(*q.shape[:2], m, seg, -1).sum(3) / seg
    kl = k.reshape(*k.shape[:2], m, seg, -1).sum(3) / seg
    a1, a2, a3 = (ql.new_tensor(0) + (x @ y.mT).softmax(-1) for x, y in ((q, kl), (ql, kl), (ql, k)))
    z = a2.mT / (a2.abs().sum(-1).max() * a2.abs().sum(-2).max())
    eye = torch.eye(m)
    for _ in range(iters):
        az = a2 @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return (a1 @ z @ (a3 @ v))[:, :, pad:]


@pytest.mark.parametrize("n, m", [(29, 8), (5, 8), (32, 8)])
def test_zero_token_padding_equals_the_materialised_package_algorithm(n, m):
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(3, 2, n, 4, generator=g) for _ in range(3))
    ours = nystrom_attention(q, k, v, num_landmarks=m, pinv_iterations=6, pad_to_landmarks=True, pinv_scale="batch")
    torch.testing.assert_close(ours, _zero_padded_nystrom(q, k, v, m, 6), rtol=1e-10, atol=1e-12)


def test_padded_landmarks_front_pad_with_zero_tokens():
    x = torch.arange(1.0, 11.0).reshape(1, 1, 10, 1)  # 10 tokens, 4 landmarks: 2 zeros in front, segments of 3
    means, pad = padded_segment_means(x, None, 4)
    assert pad.tolist() == [2]
    torch.testing.assert_close(means.flatten(), torch.tensor([1 / 3, 3.0, 6.0, 9.0]))
    mask = torch.tensor([[True] * 10 + [False] * 3])
    xm = torch.cat([x, torch.full((1, 1, 3, 1), 1e3)], 2)
    m2, p2 = padded_segment_means(xm, mask, 4)
    torch.testing.assert_close(m2, means)
    assert p2.tolist() == [2]


def test_batch_scaled_pseudo_inverse_couples_the_samples_and_matrix_scaling_does_not():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 30, 4, generator=g) for _ in range(3))
    q2 = q.clone()
    q2[1] *= 3  # another batch mate for sample 0
    for scale, coupled in (("batch", True), ("matrix", False)):
        a = nystrom_attention(q, k, v, num_landmarks=8, pinv_scale=scale, pad_to_landmarks=True)[0]
        b = nystrom_attention(q2, k, v, num_landmarks=8, pinv_scale=scale, pad_to_landmarks=True)[0]
        assert (not torch.allclose(a, b, rtol=0, atol=1e-12)) == coupled


def test_release_initialisation():
    """trunc_normal(std 0.02) on every Linear weight, zero biases, layer norms 1 / 0, mu 0; the
    residual convolution keeps PyTorch's default (the release's _init_weights skips it)."""
    torch.manual_seed(0)
    m = build_model({"arch": "ono", **RELEASE_DARCY}, 1, 1, 2).requires_grad_(False)
    lin = [x for x in m.modules() if isinstance(x, nn.Linear)]
    w = torch.cat([x.weight.flatten() for x in lin])
    assert abs(float(w.std()) - 0.02) < 5e-4 and abs(float(w.mean())) < 1e-4 and float(w.abs().max()) <= 2.0
    assert all(float(x.bias.abs().max()) == 0 for x in lin if x.bias is not None)
    lns = [x for x in m.modules() if isinstance(x, nn.LayerNorm)]
    assert all(bool((x.weight == 1).all() and (x.bias == 0).all()) for x in lns)
    assert all(float(oa.mu.abs().max()) == 0 for oa in m.ortho)
    conv = m.blocks[0].attn.res_conv.weight
    assert float(conv.abs().max()) <= 1 / math.sqrt(33) + 1e-12 and float(conv.std()) > 0.06  # U(+-1/sqrt(33)): std 0.10
    default = build_model({"arch": "ono", **RELEASE_DARCY, "init": "torch"}, 1, 1, 2)
    assert float(default.blocks[0].ffn[0].weight.detach().std()) > 0.04  # U(+-1/sqrt(128)): std 0.051


# ---------------------------------------------------------------------------------------------
# behaviour of the model with every option as released


def test_release_structure_runs_on_grids_padding_and_queries():
    m = tiny_release().train()
    coords, a = grid(6)
    assert m(coords, a).shape == (2, 36, 1)
    m.eval()
    out = m(coords, a)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[:, 36:] = False
    cp = torch.cat([coords, torch.full((2, 4, 2), 9.0)], 1)
    ap = torch.cat([a, torch.full((2, 4, 1), -1e3)], 1)
    torch.testing.assert_close(m(cp, ap, mask=mask)[:, :36], out, rtol=1e-9, atol=1e-10)  # padding changes nothing
    torch.testing.assert_close(m.forward_cross(coords, a, coords.clone()), out, rtol=1e-9, atol=1e-10)


def test_bad_release_options_are_named():
    with pytest.raises(ConfigError, match="nystrom_conv, nystrom_pad only apply to attention: nystrom"):
        build_model({"arch": "ono", "nystrom_conv": 33, "nystrom_pad": True}, 1, 1, 2)
    with pytest.raises(ConfigError, match="must be odd"):
        build_model({"arch": "ono", "attention": "nystrom", "nystrom_conv": 32}, 1, 1, 2)
    with pytest.raises(ConfigError, match="head"):
        build_model({"arch": "ono", "head": "mlp"}, 1, 1, 2)


# ---------------------------------------------------------------------------------------------
# the release's zero-shot command (space_gen.py): the linear_attention_transformer block


def test_the_zeroshot_entry_is_the_release_command_and_has_its_parameter_count():
    """README zero-shot command: 8 layers, k 16, no --attn_type (the package's linear block), width 128,
    8 heads, mlp_ratio 1 -> 1,110,401 (what space_gen.py prints); the training defaults (batch 8, relative L2)."""
    cfg = load_config_files([str(ROOT / "config/default.yaml")])
    entry = dict(cfg["models"]["ono_official_zeroshot"])
    assert "training" not in entry
    assert entry == {"arch": "ono", **RELEASE_ZEROSHOT}
    model = build_model(entry, 1, 1, 2)
    assert count_parameters(model) == 1_110_401
    assert all(b.attn.kernel == "efficient" and b.attn.efficient_scale and b.attn.res_conv is None for b in model.blocks)
    assert all(b.attn.to_q.bias is None and b.attn.to_kv.bias is None and b.attn.to_out.bias is not None for b in model.blocks)
    assert "results/darcy43_ono_official_zeroshot.json" in cfg["targets"]
    assert {k: v for k, v in RELEASE_ZEROSHOT.items() if k not in ("n_layers", "ortho_dim", "ffn_ratio", "attention", "efficient_scale")} == {
        k: v for k, v in RELEASE_DARCY.items() if not k.startswith(("nystrom", "num_landmarks", "pinv")) and k not in ("n_layers", "ortho_dim", "ffn_ratio", "attention")
    }


def test_the_quick_zeroshot_entry_only_shrinks_sizes():
    cfg = load_config_files([str(ROOT / "config/default.yaml"), str(ROOT / "config/quick.yaml")])
    quick = dict(cfg["models"]["ono_official_zeroshot"])
    sizes = {"width", "n_layers", "n_heads", "ortho_dim", "encoder_hidden"}
    assert {k: v for k, v in quick.items() if k not in sizes} == {"arch": "ono", **{k: v for k, v in RELEASE_ZEROSHOT.items() if k not in sizes}}
    assert count_parameters(build_model(quick, 1, 1, 2)) < 30_000


def test_the_package_linear_block_is_the_efficient_kernel_times_inverse_sqrt_head_width():
    """linear_attention_transformer 0.19.1, ``linear_attn``: q.softmax(-1) * d^-1/2, k.softmax(-2),
    z = q (k^T v), restated here with the module's own projections."""
    torch.manual_seed(0)
    att = MultiHeadAttention(16, 4, "efficient", bias=False, efficient_scale=True)
    x = torch.randn(2, 11, 16)
    q = att.to_q(x).view(2, 11, 4, 4).transpose(1, 2)
    k, v = (t.view(2, 11, 4, 4).transpose(1, 2) for t in att.to_kv(x).chunk(2, -1))
    z = (q.softmax(-1) * 4**-0.5) @ (k.softmax(-2).transpose(-1, -2) @ v)
    torch.testing.assert_close(att(x), att.to_out(z.transpose(1, 2).reshape(2, 11, 16)))
    plain = MultiHeadAttention(16, 4, "efficient", bias=False)
    plain.load_state_dict(att.state_dict())
    torch.testing.assert_close(plain(x) - plain.to_out.bias, 2.0 * (att(x) - att.to_out.bias))  # d^-1/2 = 1/2 at d = 4


def test_efficient_scale_is_refused_with_other_attention():
    with pytest.raises(ConfigError, match="efficient_scale only applies to attention: efficient"):
        build_model({"arch": "ono", "attention": "nystrom", "efficient_scale": True}, 1, 1, 2)
    with pytest.raises(ConfigError, match="set efficient_scale: false"):
        MultiHeadAttention(16, 4, "linear", efficient_scale=True)


# ---------------------------------------------------------------------------------------------
# the release's elasticity command (ela_example.py): Nystrom, k 8, the point's place as an input


def test_the_elasticity_entry_is_the_release_command_and_has_its_parameter_count():
    """README elasticity command: 8 layers, k 8, Nystrom, width 128, 8 heads, mlp_ratio 1, batch 8; the
    script's ONO2(space_dim=1, fun_dim=2) reads [j / 971, x, y] -> 1,104,193 (what ela_example.py prints)."""
    cfg = load_config_files([str(ROOT / "config/default.yaml")])
    entry = dict(cfg["models"]["ono_official_elasticity"])
    assert "training" not in entry  # batch 8, relative L2 of the decoded stress, clip 0.1, 500 epochs: the defaults
    assert entry == {"arch": "ono", **RELEASE_ELASTICITY}
    model = build_model(entry, 0, 1, 2)  # elasticity972: the point cloud, no input function
    assert count_parameters(model) == 1_104_193
    assert model.encoder[0].in_features == 3 and model.point_index
    assert {k: v for k, v in RELEASE_ELASTICITY.items() if k not in ("n_layers", "ortho_dim", "ffn_ratio", "point_index")} == {
        k: v for k, v in RELEASE_DARCY.items() if k not in ("n_layers", "ortho_dim", "ffn_ratio")
    }
    assert "results/elasticity972_ono_official_elasticity.json" in cfg["targets"]
    quick = dict(load_config_files([str(ROOT / "config/default.yaml"), str(ROOT / "config/quick.yaml")])["models"]["ono_official_elasticity"])
    sizes = {"width", "n_layers", "n_heads", "ortho_dim", "encoder_hidden", "num_landmarks"}
    assert {k: v for k, v in quick.items() if k not in sizes} == {"arch": "ono", **{k: v for k, v in RELEASE_ELASTICITY.items() if k not in sizes}}


def test_point_index_puts_each_point_s_place_in_front_of_its_coordinates():
    """The encoder reads [j / (M - 1), x_j, f(x_j)]: restated with the encoder's own weights."""
    torch.manual_seed(0)
    model = build_model({"arch": "ono", "width": 16, "n_layers": 1, "n_heads": 2, "ortho_dim": 4, "attention": "linear", "point_index": True}, 1, 1, 2)
    coords, a = torch.rand(2, 7, 2), torch.randn(2, 7, 1)
    place = torch.linspace(0, 1, 7).view(1, 7, 1).expand(2, 7, 1)
    torch.testing.assert_close(model._encoder_input(coords, a, None), torch.cat([place, coords, a], -1))
    plain = build_model({"arch": "ono", "width": 16, "n_layers": 1, "n_heads": 2, "ortho_dim": 4, "attention": "linear"}, 2, 1, 2)
    state = model.state_dict()
    state["encoder.0.weight"] = state["encoder.0.weight"][:, [1, 2, 3, 0]]  # plain reads [x, y, a, place]
    plain.load_state_dict(state)
    torch.testing.assert_close(model(coords, a), plain(coords, torch.cat([a, place], -1)))  # the place is an input column, nothing more


def test_point_index_is_refused_where_a_point_has_no_place():
    model = build_model({"arch": "ono", "width": 16, "n_layers": 1, "n_heads": 2, "ortho_dim": 4, "attention": "linear", "point_index": True}, 1, 1, 2)
    coords, a = torch.rand(2, 7, 2), torch.randn(2, 7, 1)
    with pytest.raises(ConfigError, match="point_index needs samples of one point count"):
        model(coords, a, mask=torch.ones(2, 7, dtype=torch.bool))
    with pytest.raises(ConfigError, match="query points other than the input points"):
        model(coords, a, query=torch.rand(2, 5, 2))


# ---------------------------------------------------------------------------------------------
# the release's NS2d and time-generalisation commands (NS_example2.py; time_gen.py is not in the release)


def test_the_ns_entries_are_the_zeroshot_network_trained_as_the_ns2d_script_trains():
    """README NS2d command: the zero-shot command's arguments (8 layers, k 16, the linear block, mlp_ratio 1,
    batch 8, clip 0.1) on 10 input frames -> 1,112,705 parameters; NS_example2.py trains 10 teacher-forced
    frames per optimiser step with no normaliser (training.unroll: truth). The time-generalisation command
    differs by k 8 and trains on frames 11-18."""
    from opflow.config import resolve_run

    cfg = load_config_files([str(ROOT / "config/default.yaml")])
    run = resolve_run(cfg, "ns_v1e-5", "ono_official_ns")
    assert run["model_config"] == {"arch": "ono", **RELEASE_ZEROSHOT}
    t = run["training"]
    assert {k: t[k] for k in ("unroll", "input_normalizer", "output_normalizer", "batch_size", "grad_clip", "loss", "loss_reduction", "lr", "weight_decay", "epochs", "scheduler", "optimizer")} == {
        "unroll": "truth", "input_normalizer": "none", "output_normalizer": "none", "batch_size": 8, "grad_clip": 0.1, "loss": "rel_l2",
        "loss_reduction": "sum", "lr": 1e-3, "weight_decay": 1e-5, "epochs": 500, "scheduler": "onecycle", "optimizer": "adamw",
    }
    assert count_parameters(build_model(run["model_config"], 10, 1, 2)) == 1_112_705
    tgen = resolve_run(cfg, "ns_v1e-5_tgen", "ono_official_tgen")
    assert tgen["model_config"] == {"arch": "ono", **RELEASE_ZEROSHOT, "ortho_dim": 8}
    assert tgen["training"] == {**t, "unroll": "truth"} and tgen["view"]["train_frames"] == [11, 18]
    assert {"results/ns_v1e-5_ono_official_ns.json", "results/ns_v1e-5_tgen_ono_official_tgen.json"} <= set(cfg["targets"])
