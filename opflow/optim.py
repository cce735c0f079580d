"""The optimisers of a run (``training.optimizer``), built in one place.

* ``adamw``: :class:`torch.optim.AdamW` (Loshchilov & Hutter 2019; ONO and the transformers).
* ``adam``: :class:`torch.optim.Adam` (Kingma & Ba 2015), weight decay added to the gradient (FNO's
  recipe). The FNO spectral weights are complex numbers stored as real pairs
  (:class:`opflow.models.layers.spectral.SpectralConv`), so Adam sees their real and imaginary parts
  as two real parameters: ``v = beta2 v + (1 - beta2) g^2`` per part, which is what
  ``torch.optim.Adam`` does today on a complex parameter too (it views it as real pairs; tested).
* ``adam_complex_legacy``: Adam as ``torch.optim.Adam`` applied it to *complex* parameters up to
  PyTorch 1.9 (pytorch/pytorch issue 59998, "Adam Optimizer Implemented Incorrectly for Complex
  Tensors", 2021-06-15; fixed in a later release). On a complex parameter with gradient
  ``g = dL/dRe + i dL/dIm`` it computed, with complex arithmetic::

      m = beta1 m + (1 - beta1) g
      v = beta2 v + (1 - beta2) g * g                  (the complex square, not |g|^2)
      p = p - lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)
                                                       (principal complex square root, complex division)

  so the step's size and direction are no longer Adam's: ``v`` is complex and can cancel, and the
  division rotates the step. FNO's original code stored its spectral weights as ``torch.cfloat``
  parameters from its PyTorch 1.8 version on (2021-05), and the Galerkin Transformer's retrained FNO1d
  baseline (Cao 2021, Table 2(a); his fork of that code, ``fourier_1d.py``, 2021-05-27) ran with it.
  This option applies that update to the spectral weights and plain Adam to every other parameter,
  to measure how much of a published FNO number is that optimiser. It is not a recommendation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from opflow.data.errors import ConfigError

OPTIMIZERS = ("adamw", "adam", "adam_complex_legacy")


def complex_pair_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    """The parameters that hold complex numbers as real pairs (a trailing axis of 2): the spectral
    weights of every :class:`~opflow.models.layers.spectral.SpectralConv` of ``model``."""
    from opflow.models.layers.spectral import SpectralConv

    seen: set[int] = set()
    for module in model.modules():
        if isinstance(module, SpectralConv):
            for p in module.weights:
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p


class LegacyComplexAdam(torch.optim.Optimizer):
    """Adam with PyTorch <= 1.9's update of complex parameters (module docstring) for the param
    groups marked ``complex_pairs=True`` (real tensors with a trailing axis of 2, read as complex);
    the ordinary Adam update, weight decay added to the gradient, for the others."""

    def __init__(
        self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "complex_pairs": False})
        for group in self.param_groups:
            if group["complex_pairs"] and any(p.shape[-1:] != (2,) for p in group["params"]):
                raise ValueError("LegacyComplexAdam: a complex_pairs group holds a parameter whose last axis is not 2 (real, imaginary)")

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # noqa: D102 (torch's signature)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if group["weight_decay"]:
                    grad = grad.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float64)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                t = float(state["step"])
                m, v, x = state["exp_avg"], state["exp_avg_sq"], p
                if group["complex_pairs"]:
                    m, v, x, grad = (torch.view_as_complex(a) for a in (m, v, x, grad.contiguous()))
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)  # complex pairs: g * g, not |g|^2
                denom = (v.sqrt() / math.sqrt(1 - beta2**t)).add_(group["eps"])
                x.addcdiv_(m, denom, value=-group["lr"] / (1 - beta1**t))
        return loss


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """The optimiser ``training.optimizer`` names, over every parameter of ``model``."""
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    if name == "adam_complex_legacy":
        pairs = list(complex_pair_parameters(model))
        if not pairs:
            raise ConfigError(
                f"training.optimizer: adam_complex_legacy changes only the update of complex (spectral) weights, and this "
                f"{type(model).__name__} has none; use optimizer: adam"
            )
        ids = {id(p) for p in pairs}
        rest = [p for p in model.parameters() if id(p) not in ids]
        return LegacyComplexAdam([{"params": rest}, {"params": pairs, "complex_pairs": True}], lr=lr, weight_decay=weight_decay)
    raise ConfigError(f"training.optimizer: {name!r} is not one of {list(OPTIMIZERS)}")


def graph_step_supported(optimizer: torch.optim.Optimizer) -> str | None:
    """Why :func:`adam_step_on_device` cannot stand in for ``optimizer.step()`` (None: it can)."""
    if not isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) or isinstance(optimizer, LegacyComplexAdam):
        return f"{type(optimizer).__name__} is not Adam or AdamW"
    for g in optimizer.param_groups:
        flags = [k for k in ("amsgrad", "maximize", "differentiable", "fused") if g.get(k)]
        if flags:
            return f"the options {flags} of {type(optimizer).__name__}"
        counts = {float(optimizer.state[p]["step"]) for p in g["params"] if p in optimizer.state and "step" in optimizer.state[p]}
        if len(counts) > 1:
            return "its parameters have taken different numbers of steps"
    return None


@torch.no_grad()
def adam_step_on_device(optimizer: torch.optim.Optimizer, hyper: list[tuple[dict[str, Any], torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
    """``optimizer.step()`` of an Adam / AdamW whose learning rate and betas are read from device tensors.

    For each ``(param_group, lr, beta1, beta2)`` of ``hyper`` (0-dim tensors on the parameters'
    device), with ``g`` the gradient, ``t`` the step count after this step, ``lambda`` the group's
    weight decay (Loshchilov & Hutter 2019, Algorithm 2; Kingma & Ba 2015)::

        theta <- theta (1 - lr lambda)                     (AdamW; Adam adds lambda theta to g)
        m <- beta1 m + (1 - beta1) g,   v <- beta2 v + (1 - beta2) g^2
        theta <- theta - lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)

    the update of ``torch.optim.AdamW`` / ``Adam`` (equal to it within rounding, tested), on the same
    state tensors (``step``, ``exp_avg``, ``exp_avg_sq`` of ``optimizer.state``, created as torch creates
    them), so checkpoints and a later ``optimizer.step()`` carry on from it. Every operation reads the
    hyperparameters on the device, so the step can be captured in a CUDA graph while the 1cycle schedule
    changes ``lr`` and ``beta1`` between replays (:mod:`opflow.train_step`). Written here because
    ``torch.optim.Adam(capturable=True)`` with tensor betas converts ``1 - beta1`` to a host number in
    ``_foreach_lerp_`` (PyTorch 2.11, found on an H200: "operation not permitted when stream is
    capturing"), and a float ``beta1`` would be frozen into the graph. Needs the parameters of a group
    to have taken the same number of steps (:func:`graph_step_supported`).
    """
    decoupled = isinstance(optimizer, torch.optim.AdamW)
    for group, lr, beta1, beta2 in hyper:
        decoupled = group.get("decoupled_weight_decay", decoupled)
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            continue
        grads = [p.grad for p in params]
        states = [optimizer.state[p] for p in params]
        for p, st in zip(params, states, strict=True):
            if not st:
                st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        steps = [st["step"] for st in states]
        m, v = [st["exp_avg"] for st in states], [st["exp_avg_sq"] for st in states]
        torch._foreach_add_(steps, 1)
        wd = group["weight_decay"]
        if wd and decoupled:
            torch._foreach_mul_(params, 1 - lr * wd)
        elif wd:
            grads = torch._foreach_add(grads, params, alpha=wd)
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, torch._foreach_mul(grads, 1 - beta1))
        g2 = torch._foreach_mul(grads, grads)
        torch._foreach_mul_(g2, 1 - beta2)
        torch._foreach_mul_(v, beta2)
        torch._foreach_add_(v, g2)
        t = steps[0].to(beta1.dtype)
        step_size = lr / (1 - beta1**t)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, (1 - beta2**t).sqrt())
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(m, denom)
        torch._foreach_mul_(update, -step_size)
        torch._foreach_add_(params, update)


def portable_state_dict(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` as any machine can load it: hyperparameters held as tensors (the
    CUDA-graph step's learning rate and betas, :mod:`opflow.train_step`) as numbers, ``capturable``
    off and the step counts on the CPU (their dtype kept), so that a checkpoint written by a captured run resumes on a
    CPU or without graphs (a captured run turns capturable on again after loading it)."""
    sd = optimizer.state_dict()

    def plain(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            return float(v)
        if isinstance(v, tuple):
            return tuple(plain(x) for x in v)
        return v

    groups = [{k: (v if k == "params" else plain(v)) for k, v in g.items()} for g in sd["param_groups"]]
    for g in groups:
        if "capturable" in g:
            g["capturable"] = False
    state = {
        i: {k: (v.detach().to("cpu") if k == "step" and isinstance(v, torch.Tensor) else v) for k, v in st.items()}
        for i, st in sd["state"].items()
    }
    return {"state": state, "param_groups": groups}


__all__ = [
    "OPTIMIZERS", "LegacyComplexAdam", "adam_step_on_device", "build_optimizer", "complex_pair_parameters", "graph_step_supported",
    "portable_state_dict",
]
