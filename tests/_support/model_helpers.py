"""The small overfitting task the model tests share."""

from __future__ import annotations

import math

import torch

from opflow.models import build_model


def overfit_mean_field_operator(spec: dict, steps: int = 1200, lr: float = 1e-2) -> float:
    """Train ``build_model(spec)`` on 4 samples of u = a <a> + <a^2> (<.> = mean over the domain),
    a a smooth input on 32 points of [0, 1]; return the mean relative L2 error in evaluation mode.

    Float32, seed 0, Adam with a OneCycle schedule (peak ``lr``) over ``steps`` full-batch steps.
    """
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    x = ((torch.arange(32) + 0.5) / 32)[None, :, None].repeat(4, 1, 1)
    c = torch.randn(4, 3)
    a = (torch.sin(math.pi * x * torch.arange(1.0, 4.0)) * c[:, None]).sum(-1, keepdim=True)
    u = a * a.mean(1, keepdim=True) + (a**2).mean(1, keepdim=True)
    m = build_model(spec, 1, 1, 1)
    opt = torch.optim.Adam(m.parameters(), lr=lr, foreach=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    for _ in range(steps):
        loss = ((m(x, a) - u).norm(dim=(1, 2)) / u.norm(dim=(1, 2))).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    m.eval()
    with torch.no_grad():
        return float(((m(x, a) - u).norm(dim=(1, 2)) / u.norm(dim=(1, 2))).mean())
