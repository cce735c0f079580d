"""Inference: the one path from a trained model and a batch to predictions and their errors.

Training (the test curve of every ``eval_every`` epoch) and evaluation (the results JSON) both go
through here, so the numbers they report are computed the same way:

* :func:`load_model` rebuilds the model of a ``model.pt`` (:class:`opflow.records.ModelRecord`)
  and :func:`load_normalizers` its normalisers on a device;
* :func:`model_inputs` encodes a batch's inputs (and its per-sample ``globals``: passed as
  ``globals=`` to a model with ``accepts_globals = True``, else broadcast to every point as extra
  input channels); :func:`forward` runs the model on them (bf16 autocast on CUDA if asked) and
  returns normalised outputs;
* :func:`predict_batch` decodes them to physical units, one step or, when the batch asks for
  ``rollout_steps``, an autoregressive rollout (:func:`opflow.data.trajectory.rollout`);
  :func:`predict` does it over a loader, model in eval mode;
* :func:`batch_squared_sums` gives per sample and channel ``sum (p - u)^2`` and ``sum u^2`` over the
  real points (:func:`opflow.metrics.squared_sums`, padding masked out); :func:`test_errors` turns
  them into per-sample relative L2 errors.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from opflow.data.torch_data import Normalizers, output_mask, to_device
from opflow.data.trajectory import rollout
from opflow.metrics import squared_sums
from opflow.records import ModelRecord, RecordError

# --------------------------------------------------------------------------- loading


def load_model(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> tuple[torch.nn.Module, ModelRecord]:
    """Rebuild a trained model from ``model.pt``: ``(model in eval mode on device, its record)``.

    The record also reads like the dict ``model.pt`` holds (``rec["task"]``). A missing, damaged,
    foreign or old file, or weights that do not fit the recorded model, give a
    :class:`~opflow.records.RecordError` naming the file.
    """
    from opflow.models.base import build_model

    rec = ModelRecord.load(path)
    t = rec.model_build
    model = build_model(rec.model_config, t["in_channels"], t["out_channels"], t["coord_dim"], where=f"models.{rec.model}")
    try:
        model.load_state_dict(rec.state_dict)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RecordError(f"{path}: the weights do not fit the recorded {rec.arch} model ({first}); {ModelRecord.FIX}") from None
    model.to(device).eval()
    return model, rec


def load_normalizers(rec: ModelRecord, device: torch.device | str = "cpu") -> Normalizers:
    """The record's input, output and globals normalisers, on ``device``."""
    return Normalizers.from_state(rec.normalizers).to(device)


# --------------------------------------------------------------------------- forward


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP / torch.compile wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module):
            return model
        model = inner


def accepts_globals(model: torch.nn.Module) -> bool:
    """Whether the (possibly wrapped) model takes the globals as ``forward(..., globals=)``."""
    return bool(getattr(unwrap(model), "accepts_globals", False))


def accepts_input_sets(model: torch.nn.Module) -> bool:
    """Whether the (possibly wrapped) model takes input functions on their own point sets (``input_sets=``)."""
    return bool(getattr(unwrap(model), "accepts_input_sets", False))


def _input_sets(model: torch.nn.Module, batch: Mapping[str, Any], norms: Normalizers) -> dict[str, Any]:
    """``{"input_sets": [(coords, encoded values, mask), ...]}`` for a batch that has input sets, else ``{}``."""
    sets = batch.get("input_sets")
    if not sets:
        return {}
    if not accepts_input_sets(model):
        raise ValueError(f"{type(unwrap(model)).__name__} does not take input functions on their own point sets (the batch has {len(sets)})")
    if len(norms.input_sets) != len(sets):
        raise ValueError(f"the batch has {len(sets)} input set(s) but the normalisers were fitted on {len(norms.input_sets)}")
    return {"input_sets": [(s["coords"], n.encode(s["values"]), s.get("mask")) for s, n in zip(sets, norms.input_sets)]}


def model_inputs(model: torch.nn.Module, batch: Mapping[str, Any], norms: Normalizers) -> tuple[torch.Tensor, dict[str, Any]]:
    """Encoded input features and extra forward keywords: the globals (passed or broadcast) and
    the input sets (:mod:`opflow.data.torch_data`, "Input sets"; only to models that accept them)."""
    gs = batch.get("grid_shape")
    x = norms.inputs.encode(batch["inputs"], gs)
    extra = _input_sets(model, batch, norms)
    g = batch.get("globals")
    if g is None:
        return x, extra
    g = norms.globals.encode(g[:, None, :])[:, 0]
    if accepts_globals(model):
        return x, {"globals": g, **extra}
    return torch.cat([x, g[:, None, :].expand(-1, x.shape[1], -1).to(x.dtype)], -1), extra


def forward(model: torch.nn.Module, batch: Mapping[str, Any], norms: Normalizers, *, autocast: bool = False) -> torch.Tensor:
    """Model output in normalised units for a batch already on the model's device: float32 (a bf16
    autocast output is cast up), or float64 for a model held in float64 (the equivalence benchmarks)."""
    x, extra = model_inputs(model, batch, norms)
    # no cast cache: inside a captured CUDA graph (opflow.train_step) cached casts would outlive the step
    ctx = torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False) if autocast else contextlib.nullcontext()
    with ctx:
        out = model(batch["coords"], x, query=batch.get("query"), mask=batch.get("mask"), grid_shape=batch.get("grid_shape"), **extra)
    return out if out.dtype == torch.float64 else out.float()


def predict_batch(model: torch.nn.Module, batch: Mapping[str, Any], norms: Normalizers, *, autocast: bool = False) -> torch.Tensor:
    """Prediction in physical units: one forward pass, or a rollout when the batch asks for one."""
    gs = batch.get("grid_shape")

    def step(b: Mapping[str, Any]) -> torch.Tensor:
        return norms.outputs.decode(forward(model, b, norms, autocast=autocast), gs)

    steps = int(batch.get("rollout_steps") or 0)
    if not steps:
        return step(batch)
    n_fields = batch["target"].shape[-1] // steps
    return rollout(step, batch, steps, n_fields)


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    loader: Any,
    norms: Normalizers,
    device: torch.device,
    *,
    autocast: bool = False,
) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
    """Yield ``(batch on device, prediction in physical units)`` over a loader, model in eval mode."""
    was_training = model.training
    model.eval()
    try:
        for batch in loader:
            b = to_device(batch, device)
            yield b, predict_batch(model, b, norms, autocast=autocast)
    finally:
        model.train(was_training)


# --------------------------------------------------------------------------- errors


def batch_squared_sums(pred: torch.Tensor, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample and channel ``(sum (p - u)^2, sum u^2)`` in float64 over the batch's real points, each (B, C)."""
    return squared_sums(pred.double(), batch["target"].double(), output_mask(batch))


def _ratio(e2: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(e2) / torch.sqrt(r2.clamp_min(torch.finfo(r2.dtype).tiny))


def test_errors(model: torch.nn.Module, loader: Any, norms: Normalizers, device: torch.device, *, autocast: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample relative L2 over all channels (S,) and per channel (S, C), physical units.

    For rollouts the channels are the predicted steps: per-step errors, and the joint error is the
    full-trajectory error.
    """
    joint, per = [], []
    for b, pred in predict(model, loader, norms, device, autocast=autocast):
        e2, r2 = batch_squared_sums(pred, b)
        joint.append(_ratio(e2.sum(dim=1), r2.sum(dim=1)).cpu())
        per.append(_ratio(e2, r2).cpu())
    return torch.cat(joint), torch.cat(per)


test_errors.__test__ = False  # type: ignore[attr-defined]  # a library function, not a pytest test
