"""Specification of the ViT neural operator (``vitno``) and of the patch machinery it shares with FANO.

Calvello, Kovachki, Levine, Stuart, "Continuum attention for neural operators": Section 3
(Definitions 13-14), Section 4.3, Appendix B.2 (eqs. 60-67), Remark 21.
"""

from __future__ import annotations

import pytest
import torch
from continuum_helpers import patch_counts, periodic_grid, refinement_order, small, smooth

from opflow.models import build_model, count_parameters
from opflow.models.continuum import PatchAttention, ViTNO, cell_volume, from_patches, patch_size, to_patches


def test_patches_are_fixed_in_physical_space():
    """The number of patches is the hyperparameter's, whatever the resolution; the patch size grows with n."""
    model = small("vitno", patches_per_side=4)
    for n in (16, 32, 64):
        assert patch_counts(model, n) == [16, 16]
        assert model.patch_layout((n, n)) == (16, (n // 4, n // 4))


def test_patching_round_trip_and_layout():
    """Patch j = (a, b) holds the grid block [a p1, (a+1) p1) x [b p2, (b+1) p2), row-major in (a, b)."""
    v = torch.arange(2 * 6 * 8 * 3, dtype=torch.float64).reshape(2, 6, 8, 3)
    p = to_patches(v, (3, 2))
    assert p.shape == (2, 6, 2, 4, 3)
    assert torch.equal(p[:, 1 * 2 + 1], v[:, 2:4, 4:8])
    assert torch.equal(from_patches(p, (3, 2)), v)


def test_resolution_not_divisible_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"multiples of 13, e.g. \[39, 52, 65, 78\].*divisors of 64"):
        patch_size((64, 64), (13, 13), "vitno")
    model = small("vitno", patches_per_side=4)
    c = periodic_grid(30)
    with pytest.raises(ValueError, match=r"vitno: patches_per_side=4.*n = 30.*\[24, 28, 32, 36\]"):
        model(c, smooth(c), grid_shape=(30, 30))


def test_cell_volume_reads_the_grid_spacing():
    c = periodic_grid(8) * torch.tensor([2.0, 3.0])
    assert torch.allclose(cell_volume(c, (8, 8)), torch.tensor([6.0 / 64]))


def test_patch_attention_is_the_l2_inner_product_softmax():
    """Definitions 13-14 with eq. 62: p(k; j) = softmax_k(sum_x |cell| q_j(x).k_k(x)), A(j)(x) = sum_k p(k; j) v_k(x),
    per head, then W_MultiHead; computed explicitly here."""
    torch.manual_seed(1)
    B, P, p, width, H = 2, 4, (3, 5), 6, 2
    attn = PatchAttention(width, H)
    x = torch.randn(B, P, *p, width)
    cell = torch.tensor([0.01, 0.3])
    got = attn(x, cell)
    q, k, v = (f(x).reshape(B, P, *p, H, width // H) for f in (attn.q, attn.k, attn.v))
    scores = torch.einsum("bjxyhd,bkxyhd->bhjk", q, k) * cell[:, None, None, None]
    z = torch.einsum("bhjk,bkxyhd->bjxyhd", scores.softmax(-1), v).reshape(B, P, *p, width)
    assert torch.allclose(got, attn.out(z), atol=1e-12, rtol=1e-12)


def test_refining_a_smooth_input_converges_at_first_order():
    """Discretisation invariance: the outputs on n x n grids approach the 512 x 512 output at the same points;
    the per-patch DFTs and the patch inner products are rectangle rules of non-periodic patch functions,
    first order (observed ~1.1 against the finite reference)."""
    errs, order = refinement_order(small("vitno"))
    assert all(b < a for a, b in zip(errs, errs[1:])), errs
    assert 0.9 < order < 1.4, (errs, order)
    assert errs[-1] < 2e-3


def test_lift_is_a_fourier_integral_operator_per_patch():
    """ViTNO's lifting is F^-1(R F u) on each patch (eq. 60): a patch-local operator. Changing the input on one
    patch changes the lifted function on that patch only."""
    model = small("vitno", patches_per_side=2)
    c = periodic_grid(16)
    u = smooth(c).reshape(1, 16, 16, 1)
    u_in = torch.cat([u, c.reshape(1, 16, 16, 2)], -1)
    u2 = u_in.clone()
    u2[:, :8, :8, 0] += 1.0
    with torch.no_grad():
        a, b = model.lift(to_patches(u_in, (2, 2))), model.lift(to_patches(u2, (2, 2)))
    changed = (a - b).abs().flatten(2).amax(-1)[0]
    assert changed[0] > 1e-3 and torch.all(changed[1:] == 0)


def test_paper_configuration_parameter_count():
    """Defaults = the paper's 416 runs (d_model 128, 6 layers, 8 heads, FFN 128, 13 patches per side, lifting 12
    modes, final spectral layer 64 modes). Counted: lifting 2 * 3 * 128 * 12 * 12 * 2 (two corner blocks, real and
    imaginary parts), 6 layers of 4 (128^2 + 128) + 2 (128^2 + 128) + 4 * 128, W_out 129, final layer 2 * 64 * 64 * 2."""
    model = build_model({"arch": "vitno"}, 1, 1, 2)
    assert isinstance(model, ViTNO)
    lift = 2 * 3 * 128 * 12 * 12 * 2
    layer = 4 * (128 * 128 + 128) + 2 * (128 * 128 + 128) + 4 * 128
    assert count_parameters(model) == lift + 6 * layer + 129 + 2 * 64 * 64 * 2 == 835201


@pytest.mark.parametrize("arch", ["vitno", "fano"])
def test_grid_models_refuse_other_query_points_and_padded_points(arch: str) -> None:
    """ViTNO and FANO answer at their own grid points only, and need every grid point (no mesh padding)."""
    model = small(arch, patches_per_side=4)
    c = periodic_grid(16)
    a = smooth(c)
    full = model(c, a, grid_shape=(16, 16))
    assert torch.equal(model(c, a, query=c.clone(), grid_shape=(16, 16)), full)
    assert torch.equal(model(c, a, mask=torch.ones(c.shape[:2], dtype=torch.bool), grid_shape=(16, 16)), full)
    with pytest.raises(ValueError, match=f"{arch} predicts at its input grid points"):
        model(c, a, query=c[:, :10], grid_shape=(16, 16))
    mask = torch.ones(c.shape[:2], dtype=torch.bool)
    mask[:, -3:] = False
    with pytest.raises(ValueError, match=f"{arch} needs every grid point"):
        model(c, a, mask=mask, grid_shape=(16, 16))
