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


__all__ = ["OPTIMIZERS", "LegacyComplexAdam", "build_optimizer", "complex_pair_parameters", "portable_state_dict"]
