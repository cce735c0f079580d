"""Specification of the Transformer Neural Operator with continuum attention (``tno``).

Calvello, Kovachki, Levine, Stuart, "Continuum attention for neural operators": Sections 4.2, 6.1,
Appendix B.1 (trapezoidal attention), Appendix C.1 (parameter count).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from opflow.data.errors import ConfigError
from opflow.models import build_model, count_parameters
from opflow.models.layers.attention import softmax_attention
from opflow.models.tno import TNO, interpolate_1d, quadrature_weights, trapezoid_weights

T = 2.0  # the Lorenz-63 horizon (PROTOCOLS)


def tno(out: int = 1, coord_dim: int = 1, seed: int = 0, **kw) -> TNO:
    torch.manual_seed(seed)
    return build_model({"arch": "tno", **kw}, 1, out, coord_dim).eval()


def small(**kw) -> dict:
    return dict(width=32, n_layers=2, n_heads=4, ffn_dim=32, **kw)


def u_of(t: torch.Tensor) -> torch.Tensor:
    """A smooth, non-periodic input function on [0, T]."""
    return torch.sin(2 * math.pi * t / T) + 0.5 * torch.cos(3 * t) + 0.2 * t


def uniform_grid(n_intervals: int) -> torch.Tensor:
    return torch.linspace(0, T, n_intervals + 1)


def piecewise_grid(m: int) -> torch.Tensor:
    """The paper's non-uniform test grid (PROTOCOLS): step T/m on [0, T/2], 2 T/m on [T/2, T]."""
    return torch.cat([torch.linspace(0, T / 2, m // 2 + 1), torch.linspace(T / 2, T, m // 4 + 1)[1:]])


def random_grid(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.zeros(1), torch.rand(n - 2, generator=g).sort().values * T, torch.full((1,), T)])


def run(model: TNO, t: torch.Tensor, globals: torch.Tensor | None = None) -> torch.Tensor:
    t = t[None, :, None]
    with torch.no_grad():
        return model(t, u_of(t), globals=globals)[0]


def at(t: torch.Tensor, pts: torch.Tensor) -> torch.Tensor:
    """Mask of the entries of ``t`` that are (to round-off) among ``pts``."""
    return torch.isclose(t[:, None], pts[None], atol=1e-12, rtol=0).any(1)


def order(ns: list[int], errs: list[float]) -> float:
    """Observed convergence order: minus the least-squares slope of log err against log n."""
    return -float(np.polyfit(np.log(ns), np.log(errs), 1)[0])


# ------------------------------------------------------------------------------------------------
# configuration and parameter count


def test_defaults_are_the_paper_configuration_and_parameter_count_matches_the_published_one():
    darcy = tno(coord_dim=2)
    assert isinstance(darcy, TNO) and len(darcy.layers) == 6
    layer = darcy.layers[0]
    assert layer.attn.n_heads == 8 and layer.attn.head_dim == 16 and layer.attn.kernel == "softmax"
    assert layer.norm_attn.normalized_shape == (128,) and layer.ffn[0].out_features == 128
    assert darcy.lift.in_features == 1 + 2  # input concatenated with the coordinates (eq. 14)
    # 2D Darcy TNO, c_in = 1, d = 2, c_out = 1: the paper's 598,145 parameters (Table 1), exactly
    assert count_parameters(darcy) == 598_145 == 6 * (6 * 128**2 + 10 * 128) + (1 + 2 + 1) * 128 + 129
    # Lorenz task A (x, y(0), z(0)) -> (y, z) with the paper's W_in0; task B x -> y; token variant
    assert count_parameters(tno(out=2, global_channels=2)) == 598_786
    assert count_parameters(tno(out=1)) == 598_017
    assert count_parameters(tno(out=2, global_channels=2, globals_mode="token")) == 598_530
    assert TNO.accepts_globals is True


def test_bad_configuration_and_bad_batches_are_named():
    with pytest.raises(ConfigError, match="quadrature"):
        tno(quadrature="simpson")
    with pytest.raises(ConfigError, match="globals_mode"):
        tno(global_channels=2, globals_mode="prefix")
    with pytest.raises(ConfigError, match="n_heads"):
        tno(width=30, n_heads=8)
    with pytest.raises(ConfigError, match="token"):
        tno(coord_dim=2, global_channels=2)  # initial point needs a 1D trajectory
    with pytest.raises(ConfigError, match="global_weight"):
        tno(global_channels=2, globals_mode="token", global_weight=0.0)
    with pytest.raises(ConfigError, match="n_layerz"):
        build_model({"arch": "tno", "n_layerz": 2}, 1, 1, 1)
    m = tno(**small(global_channels=2))
    t = uniform_grid(20)[None, :, None]
    with pytest.raises(ValueError, match="global_channels=2"):
        m(t, u_of(t))
    with pytest.raises(ValueError, match=r"globals must be \(batch=1, 2\)"):
        m(t, u_of(t), globals=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="set global_channels=2"):
        tno(**small())(t, u_of(t), globals=torch.zeros(1, 2))
    with pytest.raises(ValueError, match="two distinct real points"):
        mask = torch.zeros(1, 21, dtype=torch.bool)
        mask[0, 3] = True
        tno(**small())(t, u_of(t), mask=mask)


# ------------------------------------------------------------------------------------------------
# quadrature weights


def test_trapezoid_weights_on_uniform_nonuniform_permuted_and_padded_grids():
    t = uniform_grid(10)[None]
    h = T / 10
    expected = torch.full((1, 11), h)
    expected[0, [0, -1]] = h / 2
    torch.testing.assert_close(trapezoid_weights(t), expected, rtol=0, atol=1e-15)
    s = random_grid(17, seed=1)[None]
    w = trapezoid_weights(s)
    ref = torch.cat([(s[:, 1:2] - s[:, :1]) / 2, (s[:, 2:] - s[:, :-2]) / 2, (s[:, -1:] - s[:, -2:-1]) / 2], 1)
    torch.testing.assert_close(w, ref, rtol=0, atol=1e-15)
    # exact for linear functions; second order for smooth ones on the non-uniform grids
    torch.testing.assert_close((w * (3 * s - 1)).sum(), torch.tensor(1.5 * T**2 - T), rtol=1e-14, atol=0)
    ns = [20, 40, 80, 160]
    errs = [abs(float((trapezoid_weights(piecewise_grid(n)[None]) * torch.exp(piecewise_grid(n))).sum()) - (math.exp(T) - 1)) for n in ns]
    assert order(ns, errs) == pytest.approx(2.0, abs=0.05)
    # any point order: weights follow their points
    perm = torch.randperm(17, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(trapezoid_weights(s[:, perm]), w[:, perm], rtol=0, atol=0)
    # padding (with garbage coordinates) gets weight 0 and leaves the real weights unchanged
    padded = torch.cat([s[:, perm], torch.tensor([[-5.0, 1.0, 99.0]])], 1)
    mask = torch.cat([torch.ones(1, 17, dtype=torch.bool), torch.zeros(1, 3, dtype=torch.bool)], 1)
    wp = trapezoid_weights(padded, mask)
    torch.testing.assert_close(wp[:, :17], w[:, perm], rtol=0, atol=0)
    assert torch.equal(wp[:, 17:], torch.zeros(1, 3))


def test_grid_weights_are_the_tensor_product_and_point_clouds_get_uniform_weights():
    x = torch.tensor([0.0, 0.1, 0.3, 0.6, 1.0])
    y = torch.linspace(0, 2, 4)
    X, Y = torch.meshgrid(x, y, indexing="ij")
    coords = torch.stack([X, Y], -1).reshape(1, -1, 2)
    w = quadrature_weights(coords, grid_shape=(5, 4))
    outer = trapezoid_weights(x[None])[0][:, None] * trapezoid_weights(y[None])[0][None, :]
    torch.testing.assert_close(w, outer.reshape(1, -1), rtol=0, atol=1e-15)
    # bilinear functions are integrated exactly over [0, 1] x [0, 2]
    f = (1 + 2 * coords[..., 0]) * (3 - coords[..., 1])
    torch.testing.assert_close((w * f).sum(), torch.tensor(2.0 * 4.0), rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="not a row-major"):
        quadrature_weights(coords[:, torch.randperm(20, generator=torch.Generator().manual_seed(0))], grid_shape=(5, 4))
    with pytest.raises(ValueError, match="does not match"):
        quadrature_weights(coords, grid_shape=(4, 4))
    with pytest.raises(ValueError, match="does not match"):
        quadrature_weights(coords, grid_shape=(20,))
    # point clouds in 2D (no grid_shape): Monte Carlo weights 1/n, 0 at padding
    mask = torch.tensor([[True] * 15 + [False] * 5])
    torch.testing.assert_close(quadrature_weights(coords, mask), mask / 15.0, rtol=0, atol=0)
    with pytest.raises(ConfigError, match="quadrature"):
        quadrature_weights(coords, rule="gauss")


# ------------------------------------------------------------------------------------------------
# continuum attention against standard attention and the paper's formulas


def _qkv(n: int, m: int = 7, heads: int = 2, d: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads, m, d, generator=g), torch.randn(1, heads, n, d, generator=g), torch.randn(1, heads, n, 3, generator=g))


def test_uniform_rectangle_weights_give_standard_softmax_attention_exactly():
    q, k, v = _qkv(12)
    plain = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1) @ v
    for w in (torch.full((1, 12), T / 11), quadrature_weights(uniform_grid(11)[None, :, None], rule="uniform")):
        torch.testing.assert_close(softmax_attention(q, k, v, weights=w), plain, rtol=0, atol=1e-14)


def test_trapezoid_weights_on_a_uniform_grid_only_halve_the_end_points():
    """Weights h (1/2, 1, ..., 1, 1/2) = standard attention over the keys with every interior key
    listed twice (weights proportional to 1, 2, ..., 2, 1), and not standard attention itself."""
    n = 12
    q, k, v = _qkv(n)
    w = quadrature_weights(uniform_grid(n - 1)[None, :, None])
    ours = softmax_attention(q, k, v, weights=w)
    dup = torch.tensor([0] + [j for j in range(1, n - 1) for _ in range(2)] + [n - 1])
    doubled = torch.softmax(q @ k[:, :, dup].mT / math.sqrt(q.shape[-1]), -1) @ v[:, :, dup]
    torch.testing.assert_close(ours, doubled, rtol=0, atol=1e-14)
    plain = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1) @ v
    assert (ours - plain).abs().max() > 1e-3


def test_trapezoid_attention_is_the_papers_pairwise_formula_on_a_nonuniform_grid():
    """Appendix B.1 eqs. 58-59: (1/2) sum_k (f_k + f_{k-1}) dx_k in numerator and normaliser."""
    t = random_grid(15, seed=3)
    q, k, v = _qkv(15)
    e = torch.exp(q @ k.mT / math.sqrt(q.shape[-1]))  # (1, H, M, N)
    dx = t[1:] - t[:-1]
    ev = e[..., None] * v[:, :, None]  # (1, H, M, N, c)
    num = 0.5 * ((ev[..., 1:, :] + ev[..., :-1, :]) * dx[:, None]).sum(-2)
    den = 0.5 * ((e[..., 1:] + e[..., :-1]) * dx).sum(-1, keepdim=True)
    ours = softmax_attention(q, k, v, weights=quadrature_weights(t[None, :, None]))
    torch.testing.assert_close(ours, num / den, rtol=1e-13, atol=1e-14)


def _reference_forward(m: TNO, t: torch.Tensor, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Paper eqs. 14-19 and 57-59 written out for one sample with plain tensor operations."""
    x = torch.cat([u, t], -1) @ m.lift.weight.T + m.lift.bias  # eq. 15
    for layer in m.layers:
        a = layer.attn
        q = x @ a.to_q.weight.T + a.to_q.bias
        k, v = (x @ a.to_kv.weight.T + a.to_kv.bias).chunk(2, -1)
        heads = []
        for h in range(a.n_heads):
            sl = slice(h * a.head_dim, (h + 1) * a.head_dim)
            s = q[:, sl] @ k[:, sl].T / math.sqrt(a.head_dim)
            e = torch.exp(s - s.max(1, keepdim=True).values) * w[None, :]
            heads.append(e @ v[:, sl] / e.sum(1, keepdim=True))
        att = torch.cat(heads, -1) @ a.to_out.weight.T + a.to_out.bias  # eq. 57
        x = F.layer_norm(x + att, (x.shape[-1],), layer.norm_attn.weight, layer.norm_attn.bias)  # eqs. 10a-b
        l1, l2 = layer.ffn[0], layer.ffn[-1]
        ffn = F.gelu(x @ l1.weight.T + l1.bias) @ l2.weight.T + l2.bias  # eq. 18
        x = F.layer_norm(x + ffn, (x.shape[-1],), layer.norm_ffn.weight, layer.norm_ffn.bias)  # eqs. 10c-d
    return x @ m.proj.weight.T + m.proj.bias  # eq. 19


def test_model_is_the_post_ln_encoder_of_the_paper():
    t = random_grid(23, seed=5)[:, None]
    u = u_of(t)
    m = tno(out=2, **small())
    w = torch.cat([(t[1] - t[0]) / 2, (t[2:, 0] - t[:-2, 0]) / 2, (t[-1] - t[-2]) / 2])
    with torch.no_grad():
        torch.testing.assert_close(m(t[None], u[None])[0], _reference_forward(m, t, u, w), rtol=1e-12, atol=1e-12)
        mu = tno(out=2, quadrature="uniform", **small())
        torch.testing.assert_close(mu(t[None], u[None])[0], _reference_forward(mu, t, u, torch.ones(23)), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# discretisation invariance


def test_outputs_converge_at_second_order_under_refinement_and_nonuniform_grids_share_the_limit():
    """Random-weight default TNO (eval, float64) on N = 50..800 uniform intervals, compared at the
    N = 50 points. Observed: trapezoid order 2.00 on uniform
    grids, 2.00 on the piecewise grids against the Richardson limit of the uniform ones; standard
    softmax attention (same parameters) order 0.97, and its piecewise-grid limit is off by 5e-2."""
    m = tno()
    plain = tno(quadrature="uniform")
    plain.load_state_dict(m.state_dict())
    common = uniform_grid(50)
    ns, ms = [50, 100, 200, 400, 800], [100, 200, 400, 800]
    result = {}
    for name, model in (("trapezoid", m), ("plain", plain)):
        outs = {n: run(model, uniform_grid(n))[at(uniform_grid(n), common)] for n in ns}
        diffs = [float((outs[n] - outs[2 * n]).abs().max()) for n in ns[:-1]]
        limit = outs[800] + (outs[800] - outs[400]) / 3  # Richardson, second order
        nonuni = [float((run(model, piecewise_grid(k))[at(piecewise_grid(k), common)] - limit).abs().max()) for k in ms]
        result[name] = (order(ns[:-1], diffs), diffs, order(ms, nonuni), nonuni)
    p_uni, d_uni, p_non, e_non = result["trapezoid"]
    assert p_uni > 1.8 and all(b < a for a, b in zip(d_uni, d_uni[1:])), result["trapezoid"]
    assert p_non > 1.8 and e_non[-1] < 2e-6, result["trapezoid"]
    # standard attention: first order on the same grids, and a different limit on the piecewise grid
    p_plain, _, _, e_plain = result["plain"]
    assert p_plain < 1.3 and e_plain[-1] > 1e-2 > 1e3 * e_non[-1], result["plain"]


def test_globals_influence_vanishes_with_the_initial_point_lift_and_persists_with_the_token():
    """The paper's W_in0 lift gives the initial condition the quadrature weight dt/2, so its effect
    on outputs at t >= T/2 decays like 1/N (observed slope -1.00); the global token has a fixed
    mass and its effect converges (observed: 0.3268, successive changes order 2)."""
    g1, g2 = torch.tensor([[1.0, -2.0]]), torch.tensor([[-1.5, 3.0]])
    ns = [50, 100, 200, 400]
    effect = {}
    for mode in ("initial_point", "token"):
        m = tno(out=2, global_channels=2, globals_mode=mode)
        eff = []
        for n in ns:
            t = uniform_grid(n)
            eff.append(float((run(m, t, g1) - run(m, t, g2))[t >= T / 2].abs().max()))
        effect[mode] = eff
    assert order(ns, effect["initial_point"]) == pytest.approx(1.0, abs=0.1), effect
    tok = effect["token"]
    assert tok[-1] > 0.05 and abs(tok[-1] - tok[-2]) < 1e-3 * tok[-1], effect


# ------------------------------------------------------------------------------------------------
# masks, globals, permutations


@pytest.mark.parametrize("kw", [{}, {"global_channels": 2}, {"global_channels": 2, "globals_mode": "token"}])
def test_padded_batch_equals_the_unpadded_samples(kw):
    m = tno(out=2, **small(**kw))
    ta, tb = random_grid(37, seed=1), random_grid(50, seed=2)
    g = torch.tensor([[0.5, -1.0], [2.0, 0.3]]) if kw else None
    coords = torch.stack([torch.cat([ta, torch.tensor([-7.0] * 6 + [55.0] * 7)]), tb])[..., None]
    inputs = u_of(coords)
    inputs[0, 37:] = 1e3  # garbage at the padding
    mask = torch.ones(2, 50, dtype=torch.bool)
    mask[0, 37:] = False
    with torch.no_grad():
        out = m(coords, inputs, mask=mask, globals=g)
        alone_a = m(ta[None, :, None], u_of(ta[None, :, None]), globals=None if g is None else g[:1])
        alone_b = m(tb[None, :, None], u_of(tb[None, :, None]), globals=None if g is None else g[1:])
    torch.testing.assert_close(out[0, :37], alone_a[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[1], alone_b[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(out[0, 37:], torch.zeros(13, 2))


@pytest.mark.parametrize("mode", ["initial_point", "token"])
def test_globals_change_the_output_and_a_permutation_of_the_points_permutes_it(mode):
    m = tno(out=2, **small(global_channels=2, globals_mode=mode))
    t = random_grid(40, seed=4)[None, :, None]
    u = u_of(t)
    g = torch.tensor([[1.0, -2.0]])
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = m(t, u, globals=g)
        changed = m(t, u, globals=g + torch.tensor([[0.5, 0.0]]))
        permuted = m(t[:, perm], u[:, perm], globals=g)
    torch.testing.assert_close(permuted, out[:, perm], rtol=1e-12, atol=1e-12)
    change = (changed - out)[0].abs().amax(-1)  # per point
    if mode == "initial_point":
        assert change[0] > 1e-2  # the initial point t = 0 (first in random_grid) carries y(0), z(0)
    else:
        assert change.amin() > 1e-3, change  # the global token reaches every point


# ------------------------------------------------------------------------------------------------
# queries other than the input points


@pytest.mark.parametrize("kw", [{}, {"global_channels": 2}, {"global_channels": 2, "globals_mode": "token"}])
def test_query_stream_reproduces_the_self_form_and_converges_off_grid(kw):
    m = tno(**kw)
    g = torch.tensor([[0.3, -0.7]]) if kw else None
    t = random_grid(30, seed=6)[None, :, None]
    with torch.no_grad():
        full = m(t, u_of(t), globals=g)
        torch.testing.assert_close(m.forward_cross(t, u_of(t), t.clone(), globals=g), full, rtol=1e-12, atol=1e-12)
        sub = torch.tensor([0, 3, 17, 29])
        torch.testing.assert_close(m(t, u_of(t), query=t[:, sub].clone(), globals=g), full[:, sub], rtol=1e-12, atol=1e-12)
    if kw and kw.get("globals_mode") != "token":
        return  # (with the W_in0 lift the limit loses the globals at first order; see the test above)
    q = torch.rand(1, 13, 1, generator=torch.Generator().manual_seed(3)) * T
    ns = [50, 100, 200, 400]
    with torch.no_grad():
        outs = [m(uniform_grid(n)[None, :, None], u_of(uniform_grid(n)[None, :, None]), query=q, globals=g) for n in ns]
    diffs = [float((a - b).abs().max()) for a, b in zip(outs, outs[1:])]
    assert order(ns[:-1], diffs) > 1.6, diffs


def test_linear_interpolation_of_the_inputs_at_query_points():
    t = random_grid(12, seed=7)[None, :, None]
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    f = torch.cat([3 * t - 1, -t], -1)
    q = torch.tensor([[[-1.0], [0.0], [0.77], [1.5], [T], [3.0]]])
    got = interpolate_1d(t[:, perm], f[:, perm], q)
    qc = q.clamp(0, T)
    torch.testing.assert_close(got, torch.cat([3 * qc - 1, -qc], -1), rtol=0, atol=1e-14)


# ------------------------------------------------------------------------------------------------
# 2D use


def test_two_dimensional_grids_and_point_clouds():
    m = tno(coord_dim=2, **small())
    plain = tno(coord_dim=2, quadrature="uniform", **small())
    X, Y = torch.meshgrid(torch.linspace(0, 1, 9), torch.linspace(0, 1, 7), indexing="ij")
    coords = torch.stack([X, Y], -1).reshape(1, -1, 2)
    a = torch.sin(3 * coords[..., :1]) * torch.cos(2 * coords[..., 1:])
    with torch.no_grad():
        on_grid = m(coords, a, grid_shape=(9, 7))
        as_cloud = m(coords, a)
        assert on_grid.shape == (1, 63, 1) and torch.isfinite(on_grid).all()
        # a point cloud gets Monte Carlo weights: standard softmax attention
        torch.testing.assert_close(as_cloud, plain(coords, a), rtol=1e-12, atol=1e-12)
        # the grid's trapezoidal weights differ from those only by the boundary halving
        assert (on_grid - as_cloud).abs().max() > 1e-4


# ------------------------------------------------------------------------------------------------
# training


def test_overfits_a_tiny_antiderivative_batch_with_finite_gradients():
    """u -> int_0^t u on [0, 1], 4 samples of 32 points, width 32, 2 layers, 4 heads; Adam with
    OneCycle (peak 2e-2), 500 steps, float32. Observed final rel L2 4.4e-3 and 6.2e-3 (seeds 0, 1)."""
    torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(1)
    t = torch.linspace(0, 1, 32)[None, :, None].repeat(4, 1, 1)
    a, k = torch.randn(4, 1, 3, generator=g), torch.arange(1, 4)[None, None]
    u = (a * torch.cos(math.pi * k * t)).sum(-1, keepdim=True)
    y = (a * torch.sin(math.pi * k * t) / (math.pi * k)).sum(-1, keepdim=True)
    m = tno(**small()).train()
    steps = 500
    opt = torch.optim.Adam(m.parameters(), lr=2e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-2, total_steps=steps)
    for _ in range(steps):
        opt.zero_grad()
        loss = ((m(t, u) - y).norm(dim=(1, 2)) / y.norm(dim=(1, 2))).mean()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in m.parameters())
        opt.step()
        sched.step()
    with torch.no_grad():
        rel = ((m.eval()(t, u) - y).norm(dim=(1, 2)) / y.norm(dim=(1, 2))).mean()
    assert rel < 1e-2, float(rel)


# ----------------------------------------------------------------------------------------------
# fused attention: the quadrature log-weights folded into an extra query/key channel


def _explicit_weighted_softmax(q, k, v, w, mask=None, scale=None):
    """``z_i = sum_j w_j exp(s q_i.k_j) v_j / sum_j w_j exp(s q_i.k_j)`` over the real keys, materialised."""
    s = q.shape[-1] ** -0.5 if scale is None else scale
    e = torch.exp(s * q @ k.mT - (s * q @ k.mT).amax(-1, keepdim=True)) * w[:, None, None, :]
    if mask is not None:
        e = e * mask[:, None, None, :]
    return (e @ v) / e.sum(-1, keepdim=True)


@pytest.mark.parametrize("scale", [None, 0.7])
def test_folded_bias_equals_the_explicit_weighted_softmax_with_padding(scale):
    """``softmax_attention`` folds log w_j into q' = [q, 1], k' = [k, log w_j / s]; the outputs and the gradients
    equal the explicit weighted softmax (float64), padded keys included (masked and with weight 0)."""
    torch.manual_seed(3)
    B, H, M, N, d = 2, 3, 6, 9, 5
    q, k, v = (torch.randn(B, H, n, d, requires_grad=True) for n in (M, N, N))
    w = torch.rand(B, N) + 0.05
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 6:] = False
    ref = _explicit_weighted_softmax(q, k, v, w, mask, scale)
    g_ref = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for mode in ("fold", "mask"):
        out = softmax_attention(q, k, v, mask, w, scale=scale, bias_mode=mode)
        g = torch.autograd.grad(out.square().sum(), (q, k, v))
        assert torch.allclose(out, ref, atol=1e-13, rtol=1e-12), mode
        for a, b in zip(g, g_ref):
            assert torch.isfinite(a).all() and torch.allclose(a, b, atol=1e-12, rtol=1e-11), mode


def test_tno_fold_and_mask_paths_agree_on_a_grid():
    """The whole 2D TNO (tensor-product trapezoid weights) gives the same outputs with either bias path."""
    from opflow.models.layers.attention import MultiHeadAttention

    model = tno(coord_dim=2, **small())
    n = 9
    x = torch.linspace(0, 1, n)
    X, Y = torch.meshgrid(x, x, indexing="ij")
    coords = torch.stack([X, Y], -1).reshape(1, -1, 2)
    u = torch.sin(3 * coords[..., :1]) * coords[..., 1:]
    with torch.no_grad():
        folded = model(coords, u, grid_shape=(n, n))
        for m in model.modules():
            if isinstance(m, MultiHeadAttention):
                m.softmax_bias = "mask"
        masked = model(coords, u, grid_shape=(n, n))
    assert torch.allclose(folded, masked, atol=1e-12, rtol=1e-12)
