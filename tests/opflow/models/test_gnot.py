"""Specification of GNOT, the General Neural Operator Transformer (opflow.models.gnot), and of the
batch path of input functions on their own point sets (view ``input_sets``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from opflow.data.errors import ConfigError
from opflow.data.format import Variable, split_variable, write_dataset
from opflow.data.provenance import provenance_attrs
from opflow.data.torch_data import Normalizers, collate, make_loader
from opflow.data.views import make_dataset
from opflow.inference import forward
from opflow.models import build_model, count_parameters
from opflow.models.gnot import GNOT, HeterogeneousNormalizedAttention, MixtureOfExperts, feature_softmax
from opflow.models.layers import FeedForward
from opflow.models.layers.attention import normalized_attention
from opflow.train import build_for_data

from model_helpers import overfit_mean_field_operator


def tiny(coord_dim: int = 2, in_channels: int = 1, out: int = 1, **kw) -> GNOT:
    cfg = dict(arch="gnot", width=16, n_layers=2, n_heads=2, n_experts=3, ffn_ratio=1.0, mlp_layers=1)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_model(cfg, in_channels, out, coord_dim).double()


def cloud(b: int, n: int, seed: int = 0, c: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, n, 2, generator=g, dtype=torch.float64)
    a = torch.sin(3 * x[..., :1]) * torch.randn(b, 1, c, generator=g, dtype=torch.float64) + x[..., 1:]
    return x, a


def boundary(b: int, n: int, seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """A second input function: radii r(theta_j) at n boundary points around (1/2, 1/2)."""
    g = torch.Generator().manual_seed(seed)
    theta = 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
    r = 0.3 + 0.05 * torch.randn(b, 1, generator=g, dtype=torch.float64) * torch.cos(theta)
    xy = torch.stack([0.5 + r * torch.cos(theta), 0.5 + r * torch.sin(theta)], -1)
    return xy, r[..., None]


# ---------------------------------------------------------------------------------------------
# normalised linear attention


def test_implied_attention_matrix_has_rows_summing_to_one():
    """Eq. 5: A_ti = q~_t.k~_i / sum_j q~_t.k~_j with q~, k~ softmaxed over the features: A >= 0,
    rows sum to one, and the linear-cost kernel equals A V; masked keys get a zero column."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 4, generator=g, dtype=torch.float64) * 3 for n in (5, 7, 7))
    qt, kt = q.softmax(-1), k.softmax(-1)
    torch.testing.assert_close(feature_softmax(q), qt, rtol=0, atol=1e-15)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 4:] = False
    s = torch.einsum("bhmd,bhnd->bhmn", qt, kt) * mask[:, None, None, :]
    a = s / s.sum(-1, keepdim=True)
    assert bool((a >= 0).all())
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 3, 5, dtype=torch.float64), rtol=0, atol=1e-14)
    assert bool((a[1, :, :, 4:] == 0).all())
    torch.testing.assert_close(normalized_attention(q, k, v, key_mask=mask), a @ v, rtol=1e-12, atol=1e-13)


def test_heterogeneous_cross_attention_is_eq_7():
    """z = W_o [q~ + 1/L sum_l NA(q, Y_l W_k^l, Y_l W_v^l)] with one key/value projection per input."""
    torch.manual_seed(0)
    att = HeterogeneousNormalizedAttention(8, 2, n_inputs=2).double()
    x, y1, y2 = (torch.randn(1, n, 8) for n in (4, 6, 3))
    out = att(x, [y1, y2], [None, None])
    split = att._split
    q = split(att.to_q(x))
    z = [normalized_attention(q, *(split(t) for t in kv(y).chunk(2, -1))) for kv, y in zip(att.to_kv, (y1, y2))]
    ref = att.to_out((q.softmax(-1) + (z[0] + z[1]) / 2).transpose(1, 2).reshape(1, 4, 8))
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# geometric gating


def test_expert_gate_is_a_partition_of_unity_over_the_domain():
    m = tiny(n_experts=4)
    pos = torch.rand(3, 50, 2, dtype=torch.float64) * 4 - 2  # also outside the unit square
    gates = m.gate_weights(pos)
    assert len(gates) == 2 and gates[0].shape == (3, 50, 4)
    for p in gates:
        assert bool((p > 0).all())
        torch.testing.assert_close(p.sum(-1), torch.ones(3, 50, dtype=torch.float64), rtol=0, atol=1e-14)


def test_one_expert_is_a_plain_ffn_and_identical_experts_make_the_gate_irrelevant():
    """n_experts = 1: no gate parameters, the FFN stage is the FeedForward itself; and since the
    gate sums to one, K copies of one expert give exactly the one-expert model."""
    m1 = tiny(n_experts=1)
    assert all(b.gate is None for b in m1.blocks)
    assert not any("gate" in n for n, _ in m1.named_parameters())
    moe = MixtureOfExperts(16, 1.0, 1, "gelu").double()
    ffn = FeedForward(16, 1.0).double()
    ffn.load_state_dict(moe.experts[0].state_dict())
    z = torch.randn(2, 9, 16)
    torch.testing.assert_close(moe(z, None), ffn(z), rtol=0, atol=0)

    m3 = tiny(n_experts=3)
    state = {k: v for k, v in m1.state_dict().items()}
    with torch.no_grad():  # every expert of m3 := the single expert of m1, everything else shared
        for name, p in m3.named_parameters():
            if ".experts." in name:
                p.copy_(state[name.replace(f".experts.{name.split('.experts.')[1].split('.')[0]}.", ".experts.0.")])
            elif "gate" not in name:
                p.copy_(state[name])
    x, a = cloud(2, 30)
    torch.testing.assert_close(m3(x, a), m1(x, a), rtol=1e-12, atol=1e-12)
    assert count_parameters(m3) > count_parameters(m1)


# ---------------------------------------------------------------------------------------------
# permutations, padding, queries


def test_permutation_invariance_over_each_input_set_and_equivariance_over_queries():
    m = tiny(input_sets=[[2, 1]])
    x, a = cloud(2, 25)
    bxy, br = boundary(2, 12)
    q = torch.rand(2, 9, 2, dtype=torch.float64)
    out = m(x, a, query=q, input_sets=[(bxy, br, None)])
    p_in, p_set, p_q = (torch.randperm(n, generator=torch.Generator().manual_seed(n)) for n in (25, 12, 9))
    torch.testing.assert_close(m(x[:, p_in], a[:, p_in], query=q, input_sets=[(bxy, br, None)]), out, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(m(x, a, query=q, input_sets=[(bxy[:, p_set], br[:, p_set], None)]), out, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(m(x, a, query=q[:, p_q], input_sets=[(bxy, br, None)]), out[:, p_q], rtol=1e-12, atol=1e-13)
    # without query: the points are both the input function's and the outputs' -> equivariance
    torch.testing.assert_close(m(x[:, p_in], a[:, p_in], input_sets=[(bxy, br, None)]), m(x, a, input_sets=[(bxy, br, None)])[:, p_in], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("garbage", [1e6, float("nan"), float("inf")])
def test_padded_points_change_nothing_in_any_point_set(garbage):
    """Padding with a mask (and garbage values in it) gives the outputs of each sample alone:
    padded points enter neither the key/value sums nor the normalisation of any input set or of the
    self-attention over the queries."""
    m = tiny(input_sets=[[2, 1]], global_channels=2)
    x, a = cloud(2, 20)
    bxy, br = boundary(2, 10)
    theta = torch.randn(2, 2, dtype=torch.float64)
    n_in, n_set = [13, 20], [10, 6]
    mask = torch.arange(20)[None] < torch.tensor(n_in)[:, None]
    smask = torch.arange(10)[None] < torch.tensor(n_set)[:, None]
    xp, ap, bp, rp = x.clone(), a.clone(), bxy.clone(), br.clone()
    xp[~mask], ap[~mask], bp[~smask], rp[~smask] = garbage, garbage, garbage, garbage
    out = m(xp, ap, mask=mask, globals=theta, input_sets=[(bp, rp, smask)])
    assert bool(torch.isfinite(out).all()) and bool((out[0, 13:] == 0).all())
    for i in range(2):
        alone = m(x[i : i + 1, : n_in[i]], a[i : i + 1, : n_in[i]], globals=theta[i : i + 1], input_sets=[(bxy[i : i + 1, : n_set[i]], br[i : i + 1, : n_set[i]], None)])
        torch.testing.assert_close(out[i, : n_in[i]], alone[0], rtol=1e-11, atol=1e-12)


def test_zero_padding_without_a_mask_would_change_the_outputs():
    """The release pads with zeros and sums over them: the outputs then depend on the padding. The
    mask is what removes that dependence (this contrast shows the previous test can fail)."""
    m = tiny()
    x, a = cloud(1, 20)
    q = x[:, :5]
    xp, ap = torch.cat([x, torch.zeros(1, 8, 2)], 1), torch.cat([a, torch.zeros(1, 8, 1)], 1)
    mask = torch.arange(28)[None] < 20
    ref = m(x, a, query=q)
    torch.testing.assert_close(m(xp, ap, query=q, mask=mask), ref, rtol=1e-12, atol=1e-13)
    assert float((m(xp, ap, query=q) - ref).detach().abs().max()) > 1e-3


def test_outputs_at_arbitrary_query_points():
    m = tiny(out=2)
    x, a = cloud(2, 30)
    torch.testing.assert_close(m(x, a, query=x.clone()), m(x, a), rtol=0, atol=0)
    q = torch.rand(2, 7, 2, dtype=torch.float64)
    out = m(x, a, query=q)
    assert out.shape == (2, 7, 2)
    # a padded query set (garbage in the padding) gives the outputs of the real queries alone
    qmask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    qp = q.clone()
    qp[1, 4:] = float("nan")
    padded = m(x, a, query=qp, query_mask=qmask)
    torch.testing.assert_close(padded[1, :4], m(x[1:], a[1:], query=q[1:, :4])[0], rtol=1e-11, atol=1e-12)


def test_parameter_vector_enters_as_a_token_or_at_the_queries():
    x, a = cloud(2, 15)
    theta = torch.randn(2, 3, dtype=torch.float64)
    for mode in ("token", "query"):
        m = tiny(global_channels=3, globals_mode=mode)
        out = m(x, a, globals=theta)
        assert float((m(x, a, globals=theta + 1) - out).detach().abs().max()) > 1e-4
        with pytest.raises(ValueError, match="global_channels=3"):
            m(x, a)
    with pytest.raises(ValueError, match="without globals"):
        tiny()(x, a, globals=theta)


def test_darcy_configuration_and_bad_settings():
    """The paper's Darcy2d configuration (Table 4; our choices within its sets): 1,756,817 parameters."""
    m = build_model({"arch": "gnot"}, 1, 1, 2)
    assert m.width == 96 and len(m.blocks) == 4 and m.blocks[0].cross.n_heads == 8 and len(m.blocks[0].ffn1.experts) == 4
    assert m.blocks[0].ffn1.experts[0][0].out_features == 192
    assert count_parameters(m) == 1_756_817
    with pytest.raises(ConfigError, match="n_heads"):
        build_model({"arch": "gnot", "width": 30, "n_heads": 4}, 1, 1, 2)
    with pytest.raises(ConfigError, match="cross_aggregate"):
        build_model({"arch": "gnot", "cross_aggregate": "max"}, 1, 1, 2)
    with pytest.raises(ConfigError, match="n_experts"):
        build_model({"arch": "gnot", "n_experts": 0}, 1, 1, 2)
    m = tiny(input_sets=[[2, 1]])
    x, a = cloud(1, 5)
    with pytest.raises(ValueError, match="extra input set"):
        m(x, a)
    with pytest.raises(ValueError, match="input set 0"):
        m(x, a, input_sets=[(torch.rand(1, 4, 3), torch.rand(1, 4, 1), None)])


# ---------------------------------------------------------------------------------------------
# the authors' release (models.gnot_official) and its options


def _official() -> dict:
    from opflow.config import load_config_files, model_entry

    return model_entry(load_config_files([Path(__file__).resolve().parents[3] / "config" / "default.yaml"]), "gnot_official")


def test_release_entry_is_the_paper_size_with_the_release_options():
    """models.gnot_official: 1,756,721 parameters at elasticity972 (2-D points, no input channels, one
    output), the count of the release at that configuration; 1,756,817 at Darcy, as gnot. Its
    departures from gnot are the release's choices (docs/gnot.md)."""
    cfg = _official()
    m = build_model(cfg, 0, 1, 2)
    assert count_parameters(m) == 1_756_721
    assert count_parameters(build_model(cfg, 1, 1, 2)) == count_parameters(build_model({"arch": "gnot"}, 1, 1, 2)) == 1_756_817
    assert {k: cfg[k] for k in ("cross_aggregate", "self_query_skip", "globals_mode", "coord_norm")} == {
        "cross_aggregate": "sum",
        "self_query_skip": True,
        "globals_mode": "query",
        "coord_norm": "unit_gaussian",
    }
    b = m.blocks[0]
    assert b.cross.aggregate == "sum" and b.cross.query_skip and b.self_attn.query_skip
    assert m.coord_norm is not None and sorted(k for k in m.state_dict() if k.startswith("coord_norm.")) == ["coord_norm.count", "coord_norm.m2", "coord_norm.mean"]


def test_self_query_skip_adds_the_normalised_query_before_the_output_projection():
    """The release's self-attention: W_o [q~ + NA(q, K, V)]; eq. 9 without the q~ term. Same weights:
    the two differ by W_o q~ (no bias)."""
    torch.manual_seed(0)
    with_skip = HeterogeneousNormalizedAttention(8, 2, 1, query_skip=True).double()
    without = HeterogeneousNormalizedAttention(8, 2, 1, query_skip=False).double()
    without.load_state_dict(with_skip.state_dict())
    h = torch.randn(2, 6, 8, dtype=torch.float64)
    q_t = feature_softmax(with_skip._split(with_skip.to_q(h))).transpose(1, 2).reshape(2, 6, 8)
    diff = with_skip(h, [h], [None]) - without(h, [h], [None])
    torch.testing.assert_close(diff, q_t @ with_skip.to_out.weight.T, rtol=1e-12, atol=1e-13)


def _split_batches(n_batches: int = 3, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """A pretend training split in padded batches: (coords, inputs, mask), points of different counts."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n_batches):
        counts = torch.tensor([17, 11 + i])
        x = torch.rand(2, 17, 2, generator=g, dtype=torch.float64) * torch.tensor([2.0, 0.5], dtype=torch.float64) + torch.tensor([-1.0, 3.0], dtype=torch.float64)
        a = torch.randn(2, 17, 1, generator=g, dtype=torch.float64)
        mask = torch.arange(17)[None] < counts[:, None]
        x[~mask] = 1e6  # padding never counts
        out.append((x, a, mask))
    return out


def test_coordinate_normalisation_fits_the_training_split_and_freezes_in_evaluation():
    """coord_norm unit_gaussian: after one pass over the training split the statistics are the
    split's mean and (population) standard deviation per axis over every real point, as the
    release's UnitTransformer; another pass in another order leaves them there; evaluation mode
    never changes them, and the split's coordinates are then standardised (mean 0, std 1)."""
    m = tiny(coord_norm="unit_gaussian")
    batches = _split_batches()
    pts = torch.cat([x[mk] for x, _, mk in batches])
    mean, std = pts.mean(0), pts.std(0, correction=0)
    m.eval()
    m(*batches[0][:2], mask=batches[0][2])
    assert float(m.coord_norm.count) == 0  # evaluation mode does not fit
    m.train()
    for x, a, mk in batches:
        m(x, a, mask=mk)
    torch.testing.assert_close(m.coord_norm.mean, mean, rtol=0, atol=1e-14)
    torch.testing.assert_close(m.coord_norm.scale(), std + 1e-8, rtol=1e-13, atol=0)
    for x, a, mk in reversed(batches):  # a second epoch, shuffled
        m(x, a, mask=mk)
    torch.testing.assert_close(m.coord_norm.mean, mean, rtol=0, atol=1e-14)
    torch.testing.assert_close(m.coord_norm.scale(), std + 1e-8, rtol=1e-13, atol=0)
    m.eval()
    z = m.coord_norm.transform(pts)
    torch.testing.assert_close(z.mean(0), torch.zeros(2, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(z.std(0, correction=0), torch.ones(2, dtype=torch.float64), rtol=1e-7, atol=0)
    before = m.coord_norm.state_dict()
    m(*batches[1][:2], mask=batches[1][2])
    assert all(torch.equal(before[k], v) for k, v in m.coord_norm.state_dict().items())


def test_a_state_dict_with_the_earlier_0_dim_point_count_loads():
    """The point count became a (1,) buffer (a 0-dim one lost its updates under torch.compile); a model file or
    checkpoint written before that loads, with the same statistics."""
    m = tiny(coord_norm="unit_gaussian")
    m.train()
    for x, a, mk in _split_batches():
        m(x, a, mask=mk)
    old = {k: (v.reshape(()) if k == "coord_norm.count" else v) for k, v in m.state_dict().items()}
    assert old["coord_norm.count"].dim() == 0
    other = tiny(coord_norm="unit_gaussian")
    other.load_state_dict(old)
    assert other.coord_norm.count.shape == (1,) and float(other.coord_norm.count) == float(m.coord_norm.count) > 0
    torch.testing.assert_close(other.coord_norm.scale(), m.coord_norm.scale(), rtol=0, atol=0)


def test_standardised_coordinates_reach_the_query_embedding_and_the_gate_only():
    """With statistics (m, s), the model equals the same weights without the option evaluated with
    queries (x - m) / (s + 1e-8) at raw input points: the input function's embedding keeps the raw
    coordinates (the release normalises its trunk's and gate's points, not the input functions)."""
    on = tiny(coord_norm="unit_gaussian", self_query_skip=True, cross_aggregate="sum")
    off = tiny(self_query_skip=True, cross_aggregate="sum")
    missing, unexpected = off.load_state_dict(on.state_dict(), strict=False)
    assert missing == [] and sorted(unexpected) == ["coord_norm.count", "coord_norm.m2", "coord_norm.mean"]
    on.train()
    for x, a, mk in _split_batches():
        on(x, a, mask=mk)
    on.eval()
    x, a = cloud(2, 23)
    z = (x - on.coord_norm.mean) / on.coord_norm.scale()
    torch.testing.assert_close(on(x, a), off(x, a, query=z), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(on.gate_weights(x)[0], off.gate_weights(z)[0], rtol=1e-12, atol=1e-14)
    assert float((on(x, a) - off(x, a)).detach().abs().max()) > 1e-3  # the statistics are far from (0, 1) here


def test_coordinate_normalisation_off_is_todays_model_bit_for_bit():
    """coord_norm none (the default, gnot's) builds the same state dict and the same outputs as a
    config without the key, bit for bit; with the option on, before any training step, the map is
    the identity and the outputs are again the same."""
    x, a = cloud(2, 19)
    ref = tiny()
    off = tiny(coord_norm="none")
    assert list(off.state_dict()) == list(ref.state_dict()) and off.coord_norm is None
    assert torch.equal(off(x, a), ref(x, a))
    on = tiny(coord_norm="unit_gaussian").eval()
    assert torch.equal(on(x, a), ref(x, a))
    with pytest.raises(ConfigError, match="coord_norm"):
        build_model({"arch": "gnot", "coord_norm": "minmax"}, 1, 1, 2)


def test_overfits_a_handful_of_samples():
    """4 samples of u = a <a> + <a^2> on 32 points (tests/_support/model_helpers.py)."""
    err = overfit_mean_field_operator(dict(arch="gnot", width=32, n_layers=2, n_heads=4, n_experts=2, ffn_ratio=2.0, mlp_layers=1), steps=600, lr=3e-3)
    assert err < 0.02


# ---------------------------------------------------------------------------------------------
# input functions on their own point sets: file -> dataset -> collate -> model


def _multi_input_file(path: Path, counts: list[int], bcounts: list[int]) -> Path:
    """Ragged point clouds with stress on 'node', a 5-value radius code on 'code' and a ragged second
    set on 'bnd' (coordinates bnd_x, bnd_y; counts bnd_count); padding filled with junk."""
    rng = np.random.default_rng(2)
    n, pad, bpad = len(counts), max(counts) + 2, max(bcounts) + 1
    nx, ny, st = (np.full((n, pad), 777.0) for _ in range(3))
    bx, by, bv = (np.full((n, bpad), -555.0) for _ in range(3))
    code = rng.uniform(0.2, 0.4, (n, 5))
    for i, (c, b) in enumerate(zip(counts, bcounts)):
        xy = rng.uniform(0, 1, (c, 2))
        nx[i, :c], ny[i, :c], st[i, :c] = xy[:, 0], xy[:, 1], np.sin(3 * xy[:, 0]) * code[i].mean() + xy[:, 1]
        bx[i, :b], by[i, :b], bv[i, :b] = rng.uniform(0, 1, b), rng.uniform(0, 1, b), rng.normal(size=b)
    v = {
        "sample_index": Variable(("sample",), np.arange(n)),
        "split": split_variable(np.array([0] * (n - 2) + [1, 1], np.int8)),
        "node_count": Variable(("sample",), np.array(counts, np.int32), {"role": "auxiliary"}),
        "node_x": Variable(("sample", "node"), nx, {"role": "coordinate", "units": "1", "long_name": "x"}),
        "node_y": Variable(("sample", "node"), ny, {"role": "coordinate", "units": "1", "long_name": "y"}),
        "stress": Variable(("sample", "node"), st, {"role": "output", "units": "1", "long_name": "s"}),
        "radius_code": Variable(("sample", "code"), code, {"role": "input", "units": "1", "long_name": "r"}),
        "bnd_count": Variable(("sample",), np.array(bcounts, np.int32), {"role": "auxiliary"}),
        "bnd_x": Variable(("sample", "bnd"), bx, {"role": "auxiliary", "units": "1", "long_name": "bx"}),
        "bnd_y": Variable(("sample", "bnd"), by, {"role": "auxiliary", "units": "1", "long_name": "by"}),
        "flux": Variable(("sample", "bnd"), bv, {"role": "input", "units": "1", "long_name": "f"}),
    }
    return write_dataset(path, v, provenance_attrs("test-multi", {}, 0))


VIEW = {"kind": "mesh", "input_sets": [{"inputs": ["radius_code"], "coords": "polar", "centre": [0.5, 0.5]}, {"inputs": ["flux"]}]}
TASK = {"inputs": [], "outputs": ["stress"]}


def test_input_sets_from_a_file_through_collate_to_the_model(tmp_path: Path):
    torch.set_default_dtype(torch.float32)  # as in training (the fixture restores float64)
    f = _multi_input_file(tmp_path / "m.nc", [9, 6, 8, 7, 5, 9], [3, 4, 2, 4, 3, 1])
    ds = make_dataset(f, "train", TASK, VIEW)
    assert [s.shape for s in ds.input_sets] == [(2, 1), (2, 1)] and len(ds) == 4
    # polar points: centre + r_j (cos theta_j, sin theta_j), theta_j = 2 pi j / (n - 1)
    item = ds[1]
    r = item["input_sets"][0]["values"][:, 0].double()
    theta = 2 * math.pi * torch.arange(5, dtype=torch.float64) / 4
    torch.testing.assert_close(item["input_sets"][0]["coords"].double(), torch.stack([0.5 + r * torch.cos(theta), 0.5 + r * torch.sin(theta)], -1), rtol=1e-6, atol=1e-6)
    assert item["input_sets"][1]["coords"].shape == (4, 2)  # cut to bnd_count: no junk
    assert bool((item["input_sets"][1]["coords"] != -555.0).all())
    # collate: each set padded to the batch maximum with its own mask
    b = collate([ds[0], ds[2]])
    s1 = b["input_sets"][1]
    assert s1["coords"].shape == (2, 3, 2) and s1["mask"].tolist() == [[True] * 3, [True, True, False]]
    assert "mask" not in b["input_sets"][0]  # every sample has its 5 code points
    # normalisers: one per set, fitted on the training split's real points, saved and restored
    norms = ds.fit_normalizers("unit_gaussian", "unit_gaussian")
    assert len(norms.input_sets) == 2
    vals = torch.cat([ds.input_sets[1].values[i, : int(ds.input_sets[1].counts[i])] for i in range(4)])
    torch.testing.assert_close(norms.input_sets[1].encode(vals[None]).mean().double(), torch.tensor(0.0, dtype=torch.float64), rtol=0, atol=1e-5)
    back = Normalizers.from_state(norms.state_dict())
    torch.testing.assert_close(back.input_sets[0].encode(ds.input_sets[0].values), norms.input_sets[0].encode(ds.input_sets[0].values))
    # the trainer builds GNOT with the sets' shapes; the forward path passes them; padding changes nothing
    torch.manual_seed(0)
    model, cfg, _ = build_for_data({"arch": "gnot", "width": 16, "n_layers": 1, "n_heads": 2, "n_experts": 2, "mlp_layers": 1}, ds, "models.gnot")
    assert cfg["input_sets"] == [[2, 1], [2, 1]]
    loader, _, _ = make_loader(ds, 4, shuffle=False)
    batch = next(iter(loader))
    out = forward(model, batch, norms)
    assert out.shape == (4, 9, 1) and bool(torch.isfinite(out).all())
    for i in range(4):
        alone = forward(model, collate([ds[i]]), norms)
        n = int(ds.counts[i])
        torch.testing.assert_close(out[i, :n], alone[0], rtol=1e-5, atol=1e-6)
    # the second input function is real: changing it changes the prediction
    other = collate([ds[0]])
    other["input_sets"][1]["values"] = other["input_sets"][1]["values"] + 1.0
    assert float((forward(model, other, norms) - forward(model, collate([ds[0]]), norms)).detach().abs().max()) > 1e-4


def test_models_without_input_sets_are_refused_and_views_without_them_unchanged(tmp_path: Path):
    f = _multi_input_file(tmp_path / "m.nc", [9, 6, 8, 7], [3, 4, 2, 4])
    ds = make_dataset(f, "train", TASK, VIEW)
    with pytest.raises(ConfigError, match="input_sets"):
        build_for_data({"arch": "linear_transformer", "width": 8, "n_layers": 1, "n_heads": 2}, ds, "models.lt")
    plain = make_dataset(f, "train", TASK, "mesh")
    assert plain.input_sets == () and "input_sets" not in plain[0] and "input_sets" not in collate([plain[0], plain[1]])
    assert "input_sets" not in plain.fit_normalizers("unit_gaussian", "unit_gaussian").state_dict()
    assert "input_sets" not in plain.info()


def test_coordinate_statistics_are_trained_saved_and_resumed_with_the_model(tmp_path: Path):
    """Through the trainer: after training, the saved model holds the training split's coordinate
    statistics (the toy grid: x on [0, 1], y on [0, 2], the same 16 x 16 points in every sample), and
    a run interrupted after one epoch and resumed ends with the same weights and statistics."""
    from opflow.inference import load_model
    from opflow.train import train

    from learning_helpers import grid_dataset, toy_run

    torch.set_default_dtype(torch.float32)  # as in training (the fixture restores float64)
    data = grid_dataset(tmp_path / "toy.nc")
    run = toy_run(data, "ono", epochs=2)
    run["model"] = "gnot_official"
    run["model_config"] = {"arch": "gnot", "width": 8, "n_layers": 1, "n_heads": 2, "n_experts": 2, "ffn_ratio": 1.0, "mlp_layers": 1,
                           "cross_aggregate": "sum", "self_query_skip": True, "globals_mode": "query", "coord_norm": "unit_gaussian"}
    full = train(run, data, tmp_path / "full", progress=False)
    part = train(run, data, tmp_path / "cut", progress=False, max_epochs_this_call=1)
    assert not part.complete
    rest = train(run, data, tmp_path / "cut", progress=False)
    a, _ = load_model(full.model_path)
    b, _ = load_model(rest.model_path)
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    # the batches carry float32 coordinates (rounding 1e-8 here); the statistics are accumulated in float64
    g = torch.stack(torch.meshgrid(torch.linspace(0, 1, 16, dtype=torch.float64), torch.linspace(0, 2, 16, dtype=torch.float64), indexing="ij"), -1).reshape(-1, 2)
    torch.testing.assert_close(a.coord_norm.mean, g.mean(0), rtol=0, atol=1e-7)
    torch.testing.assert_close(a.coord_norm.scale(), g.std(0, correction=0) + 1e-8, rtol=1e-7, atol=0)
    assert float(a.coord_norm.count) == 2 * 12 * 256  # two epochs of the 12 training samples
