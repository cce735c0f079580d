"""Specification of the Fourier attention neural operator (``fano``).

Calvello, Kovachki, Levine, Stuart, "Continuum attention for neural operators": Section 4.4,
Appendix B.3 (eqs. 68-70), Remark 21. The patch machinery is specified in test_vitno.py.
"""

from __future__ import annotations

import torch

from opflow.models import build_model, count_parameters
from opflow.models.continuum import FANO, PatchSpectralConv
from continuum_helpers import patch_counts, periodic_grid, refinement_order, small, smooth


def test_patch_count_does_not_depend_on_resolution():
    model = small("fano", patches_per_side=4)
    for n in (16, 32, 64):
        assert patch_counts(model, n) == [16, 16]


def test_refining_a_smooth_input_converges_at_first_order():
    """As ViTNO: outputs on n x n grids approach the 512 x 512 output at the same points at first order
    (observed ~1.15 against the finite reference)."""
    errs, order = refinement_order(small("fano"))
    assert all(b < a for a, b in zip(errs, errs[1:])), errs
    assert 0.9 < order < 1.4, (errs, order)
    assert errs[-1] < 1e-2


def test_qkv_are_fourier_integral_operators_and_lift_is_pointwise():
    """Q, K, V are spectral convolutions on each patch (eq. 68); the lifting W_in is pointwise (eq. 30)."""
    model = small("fano")
    attn = model.layers[0].attn
    assert all(isinstance(f, PatchSpectralConv) for f in (attn.q, attn.k, attn.v))
    assert isinstance(model.lift_in, torch.nn.Linear)
    c = periodic_grid(8)
    u_in = torch.cat([smooth(c), c], -1)
    assert torch.allclose(model.lift(u_in), model.lift_in(u_in))


def test_paper_configuration_parameter_count():
    """d_model 128, 6 layers, Q/K/V with 9 modes per axis (two corner blocks each, real and imaginary parts),
    W_MultiHead, FFN 128, two layer norms, W_in (3 -> 128), W_out, final 64-mode layer."""
    model = build_model({"arch": "fano"}, 1, 1, 2)
    assert isinstance(model, FANO)
    layer = 3 * (2 * 128 * 128 * 9 * 9 * 2) + (128 * 128 + 128) + 2 * (128 * 128 + 128) + 4 * 128
    assert count_parameters(model) == 3 * 128 + 128 + 6 * layer + 129 + 2 * 64 * 64 * 2 == 95868801
