"""opflow/optim.py: the optimisers of ``training.optimizer``, and PyTorch <= 1.9's Adam on complex weights.

``adam`` on our real-pair spectral weights is today's ``torch.optim.Adam`` on complex parameters;
``adam_complex_legacy`` is the update of pytorch/pytorch issue 59998 (the complex square of the
gradient in the second moment), written out here with complex tensors as that issue states it.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from opflow.data.errors import ConfigError
from opflow.models.layers.spectral import SpectralConv
from opflow.optim import LegacyComplexAdam, build_optimizer, complex_pair_parameters

LR, BETAS, EPS, WD = 1e-2, (0.9, 0.999), 1e-8, 1e-3


def _grads(shape: tuple[int, ...], steps: int, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=g, dtype=dtype) for _ in range(steps)]


def _run(opt: torch.optim.Optimizer, p: torch.Tensor, grads: list[torch.Tensor]) -> torch.Tensor:
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return p.detach().clone()


def test_on_real_parameters_it_is_torch_adam() -> None:
    x0, grads = torch.randn(7, 3, dtype=torch.float64), _grads((7, 3), 25)
    ours, ref = nn.Parameter(x0.clone()), nn.Parameter(x0.clone())
    got = _run(LegacyComplexAdam([ours], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD), ours, grads)
    want = _run(torch.optim.Adam([ref], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD), ref, grads)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_today_torch_adam_on_a_complex_parameter_is_adam_on_its_real_pairs() -> None:
    """So ``optimizer: adam`` on our real-pair spectral weights is the corrected complex Adam."""
    z0 = torch.randn(4, 5, dtype=torch.complex128)
    grads = _grads((4, 5, 2), 25)
    pc, pr = nn.Parameter(z0.clone()), nn.Parameter(torch.view_as_real(z0).clone())
    got = _run(torch.optim.Adam([pc], lr=LR, weight_decay=WD), pc, [torch.view_as_complex(g) for g in grads])
    want = _run(torch.optim.Adam([pr], lr=LR, weight_decay=WD), pr, grads)
    torch.testing.assert_close(torch.view_as_real(got), want, rtol=1e-12, atol=1e-14)


def test_on_complex_pairs_it_is_the_pytorch_1_8_update_with_the_complex_square() -> None:
    """Issue 59998: ``exp_avg_sq`` accumulated ``grad * grad`` (complex), ``denom = sqrt(v)/sqrt(bc2) + eps``."""
    z0 = torch.randn(3, 4, dtype=torch.complex128)
    grads = _grads((3, 4, 2), 30)
    p = nn.Parameter(torch.view_as_real(z0).clone())
    got = torch.view_as_complex(_run(LegacyComplexAdam([{"params": [p], "complex_pairs": True}], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD), p, grads))
    z, m, v = z0.clone(), torch.zeros_like(z0), torch.zeros_like(z0)
    for t, gr in enumerate(grads, start=1):
        g = torch.view_as_complex(gr) + WD * z
        m = BETAS[0] * m + (1 - BETAS[0]) * g
        v = BETAS[1] * v + (1 - BETAS[1]) * g * g
        z = z - LR / (1 - BETAS[0] ** t) * m / (torch.sqrt(v) / math.sqrt(1 - BETAS[1] ** t) + EPS)
    torch.testing.assert_close(got, z, rtol=1e-10, atol=1e-12)
    # and it is not today's Adam
    q = nn.Parameter(torch.view_as_real(z0).clone())
    modern = torch.view_as_complex(_run(torch.optim.Adam([q], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD), q, grads))
    assert (modern - got).abs().max() > 1e-3


def test_the_legacy_update_can_fail_to_converge_where_adam_converges() -> None:
    """The complex square cancels: v = beta2 v + (1 - beta2) g^2 of a gradient that turns by 90 degrees."""
    target = torch.tensor([1.0 + 1.0j], dtype=torch.complex128)

    def fit(opt_for) -> float:
        p = nn.Parameter(torch.view_as_real(torch.tensor([-1.0 - 1.0j], dtype=torch.complex128)).clone())
        opt = opt_for(p)
        for _ in range(2000):
            opt.zero_grad()
            (torch.view_as_complex(p) - target).abs().pow(2).sum().backward()
            opt.step()
        return float((torch.view_as_complex(p.detach()) - target).abs().max())

    assert fit(lambda p: torch.optim.Adam([p], lr=1e-2)) < 1e-3
    assert fit(lambda p: LegacyComplexAdam([{"params": [p], "complex_pairs": True}], lr=1e-2)) > 1e-2


def test_build_gives_the_spectral_weights_the_legacy_update_and_the_rest_plain_adam() -> None:
    model = nn.Sequential(nn.Linear(2, 4), SpectralConv(4, 4, (3,)), SpectralConv(4, 4, (2, 2)))
    opt = build_optimizer(model, "adam_complex_legacy", 1e-3, 1e-4)
    plain, pairs = opt.param_groups
    assert not plain["complex_pairs"] and pairs["complex_pairs"]
    assert {id(p) for p in pairs["params"]} == {id(p) for p in complex_pair_parameters(model)}
    assert len(pairs["params"]) == 3 and len(plain["params"]) == 2  # 1 + 2 corner blocks; weight and bias
    assert isinstance(build_optimizer(model, "adam", 1e-3, 0.0), torch.optim.Adam)
    assert isinstance(build_optimizer(model, "adamw", 1e-3, 0.0), torch.optim.AdamW)


def test_the_legacy_update_on_a_model_without_spectral_weights_is_refused() -> None:
    with pytest.raises(ConfigError, match="adam_complex_legacy changes only the update of complex .* this Linear has none; use optimizer: adam"):
        build_optimizer(nn.Linear(2, 2), "adam_complex_legacy", 1e-3, 0.0)


def test_the_legacy_state_survives_a_checkpoint() -> None:
    """Training resumes from a checkpoint: 3 steps, state_dict into a new optimiser, 2 more = 5 steps straight."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 4), SpectralConv(4, 4, (3,)))

    def steps(m: nn.Module, opt: torch.optim.Optimizer, n: int, start: int) -> None:
        for i in range(start, start + n):
            g = torch.Generator().manual_seed(i)
            opt.zero_grad()
            for p in m.parameters():
                p.grad = torch.randn(p.shape, generator=g)
            opt.step()

    straight = model()
    opt = build_optimizer(straight, "adam_complex_legacy", 1e-2, 1e-4)
    steps(straight, opt, 5, 0)
    first = model()
    opt1 = build_optimizer(first, "adam_complex_legacy", 1e-2, 1e-4)
    steps(first, opt1, 3, 0)
    resumed = model()
    resumed.load_state_dict(first.state_dict())
    opt2 = build_optimizer(resumed, "adam_complex_legacy", 1e-2, 1e-4)
    opt2.load_state_dict(opt1.state_dict())
    steps(resumed, opt2, 2, 3)
    for a, b in zip(straight.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["adamw", "adam"])
def test_the_on_device_adam_step_is_torchs_step_with_the_1cycle_schedule_changing_lr_and_beta1(kind):
    """opflow.optim.adam_step_on_device (the CUDA-graph step's update) against torch.optim.AdamW / Adam
    over 6 steps of a OneCycle schedule that cycles lr and beta1, in float64: the same parameters
    and state, and a torch step afterwards carries on from its state."""
    from opflow.optim import adam_step_on_device, graph_step_supported

    torch.manual_seed(0)
    shapes = [(3, 4), (4,), (2, 2, 2)]
    init = [torch.randn(s, dtype=torch.float64) for s in shapes]
    grads = [[torch.randn(s, dtype=torch.float64) for s in shapes] for _ in range(7)]
    opt_cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    runs = []
    for ours in (False, True):
        ps = [torch.nn.Parameter(t.clone()) for t in init]
        opt = opt_cls(ps, lr=1e-2, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=10)
        g = opt.param_groups[0]
        hyper = [(g, *(torch.tensor(float(v), dtype=torch.float64) for v in (g["lr"], *g["betas"])))]
        assert graph_step_supported(opt) is None
        for k in range(6):
            for p, gr in zip(ps, grads[k]):
                p.grad = gr.clone()
            if ours:
                for (grp, lr_t, b1_t, b2_t) in hyper:
                    lr_t.fill_(grp["lr"]), b1_t.fill_(grp["betas"][0]), b2_t.fill_(grp["betas"][1])
                adam_step_on_device(opt, hyper)
                opt._opt_called = True  # what optimizer.step() marks for the scheduler (as opflow.train_step does)
            else:
                opt.step()
            sched.step()
        for p, gr in zip(ps, grads[6]):  # then torch's own step, from whichever state
            p.grad = gr.clone()
        opt.step()
        runs.append([p.detach().clone() for p in ps] + [opt.state[p][k] for p in ps for k in ("exp_avg", "exp_avg_sq")])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_the_on_device_step_refuses_what_it_does_not_implement():
    from opflow.optim import LegacyComplexAdam, graph_step_supported

    p = torch.nn.Parameter(torch.ones(2))
    assert "amsgrad" in graph_step_supported(torch.optim.AdamW([p], amsgrad=True))
    assert "SGD" in graph_step_supported(torch.optim.SGD([p], lr=0.1))
    assert "not Adam" in graph_step_supported(LegacyComplexAdam([{"params": [p]}]))
