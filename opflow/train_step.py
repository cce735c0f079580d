"""One training step of :mod:`opflow.train`, made so that the host never waits for the GPU inside it.

The step, for a batch ``b`` (``B`` samples, ``P`` DDP processes)::

    loss  = L(decode(model(b)), target) + grad_weight * R(...)        (:func:`batch_loss`)
    grads = d(loss * B * P)/d(theta)   ("sum" reduction) or d(loss)/d(theta)   ("mean")
    grads <- grads * min(1, grad_clip / ||grads||)                    (global norm clipping)
    theta <- AdamW(theta, grads, lr_t, beta1_t)                       (lr, beta1 of the schedule)

Three ways to run it, chosen by the training settings, all computing the same step:

* **eager** (default): PyTorch ops launched one by one. No ``.item()``, ``float()`` or ``bool()`` of a
  device value happens inside (the model's value checks are deferred, :mod:`opflow.hostsync`), so the
  host runs ahead of the GPU and is limited by kernel launches only.
* **compiled** (``training.compile``): ``torch.compile`` of :func:`batch_loss` (forward, decode and
  loss in one graph; the backward is compiled from it). Where the first step fails to compile, the run
  goes on with the plain step after one warning line.
* **CUDA graph** (``training.cuda_graphs``, CUDA only): the whole step, AdamW and clipping included,
  captured once into a ``torch.cuda.CUDAGraph`` and replayed per batch; the batch is copied into the
  captured input tensors. The captured Adam(W) update (:func:`opflow.optim.adam_step_on_device`) reads
  its learning rate and betas from device tensors, which are set from the schedule after each step
  (the 1cycle schedule cycles both). The capture runs three warm-up steps first (on a side stream, as CUDA graphs need);
  every parameter, buffer, optimizer state and RNG state is restored afterwards, so the run is the
  one the eager step would train. A batch of another shape (the last, smaller batch of an epoch) takes
  the eager step. Where the capture fails (an operation that cannot be captured, DDP), the run goes on
  with the eager step after one warning line; for a model with dropout it stops with an error instead
  (after an aborted capture PyTorch cannot draw random numbers on the GPU any more).

The step returns the batch's loss as a device tensor; the trainer sums it over the epoch and reads
it once per epoch (:meth:`opflow.train.Trainer.epoch`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from opflow.data.torch_data import Normalizers, output_mask
from opflow.data.trajectory import slide
from opflow.inference import forward
from opflow.metrics import training_loss
from opflow.optim import adam_step_on_device, graph_step_supported

log = logging.getLogger("opflow.train")

#: warm-up steps before a CUDA graph capture (PyTorch's recipe uses a few, on a side stream)
GRAPH_WARMUP_STEPS = 3
#: the device types whose batches the step tries to capture (the CPU tests emulate a capture with ``cpu`` added)
CAPTURE_DEVICES: tuple[str, ...] = ("cuda",)


def batch_loss(model: nn.Module, batch: Mapping[str, Any], norms: Normalizers, cfg: Any, *, autocast: bool = False) -> Tensor:
    """The training loss of one batch, the mean over its samples (module docstring, first line).

    ``loss_space: physical`` compares the decoded prediction with the target in physical units,
    ``normalized`` the raw prediction with the encoded target. A batch of whole trajectories
    (``rollout_steps`` P > 0: ``training.unroll``) is unrolled: with the window ``w_0`` of its
    inputs and its frames ``u_1 .. u_P``,

        loss = sum_{p=1..P} L(model(w_{p-1}), u_p),   w_p = (w_{p-1} without its oldest frame, v_p),

    ``v_p = u_p`` (``unroll: truth``, teacher forcing: the ONO release's ``NS_example2.py``) or the
    decoded prediction itself, not detached (``unroll: prediction``: the FNO code's
    ``fourier_2d_time.py``, backpropagation through the unroll). Per sample it is the sum, not the
    mean, of the P step losses, as both scripts sum them.
    """
    steps = int(batch.get("rollout_steps") or 0)
    if steps:
        return _unrolled_loss(model, batch, norms, cfg, steps, autocast=autocast)
    return _step_loss(model, batch, norms, cfg, batch["target"], autocast=autocast)[0]


def _step_loss(
    model: nn.Module, batch: Mapping[str, Any], norms: Normalizers, cfg: Any, target: Tensor, *, autocast: bool = False, want_pred: bool = False
) -> tuple[Tensor, Tensor | None]:
    """The loss of one forward pass on ``batch`` against ``target`` (physical units), and the decoded
    prediction where the loss decoded it or ``want_pred`` asks for it (else None)."""
    gs = batch.get("grid_shape")
    out = forward(model, batch, norms, autocast=autocast)
    decoded = norms.outputs.decode(out, gs) if cfg.loss_space == "physical" or want_pred else None
    if cfg.loss_space == "physical":
        pred, tgt = decoded, target
    else:
        pred, tgt = out, norms.outputs.encode(target, gs)
    loss = training_loss(
        cfg.loss, pred, tgt, mask=output_mask(batch), coords=batch.get("query", batch["coords"]), grid_shape=gs,
        grad_weight=cfg.grad_weight, grad_form=cfg.grad_form, inputs=batch["inputs"],
    )
    return loss, decoded


def _unrolled_loss(model: nn.Module, batch: Mapping[str, Any], norms: Normalizers, cfg: Any, steps: int, *, autocast: bool = False) -> Tensor:
    """:func:`batch_loss` of a batch of whole trajectories: ``steps`` one-step losses, summed."""
    if cfg.unroll not in ("truth", "prediction"):
        raise ValueError(f"a batch of whole trajectories ({steps} frames) is trained unrolled; training.unroll is {cfg.unroll!r}")
    target = batch["target"]
    if target.shape[-1] % steps:
        raise ValueError(f"the target's {target.shape[-1]} channels are not {steps} frames of equal width")
    width = target.shape[-1] // steps
    own = cfg.unroll == "prediction"
    window = batch["inputs"]
    total: Tensor | None = None
    for p in range(steps):
        frame = target[..., p * width : (p + 1) * width]
        loss, pred = _step_loss(model, {**batch, "inputs": window}, norms, cfg, frame, autocast=autocast, want_pred=own)
        total = loss if total is None else total + loss
        window = slide(window, pred if own else frame)  # type: ignore[arg-type]  # pred is set when own
    assert total is not None
    return total


# ----------------------------------------------------------------------------------- batch trees


def _tree_map(value: Any, fn: Callable[[Tensor], Any]) -> Any:
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, Mapping):
        return {k: _tree_map(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple) and any(isinstance(v, Tensor | Mapping | list | tuple) for v in value):
        return type(value)(_tree_map(v, fn) for v in value)
    return value


def _signature(value: Any) -> Any:
    """What a captured graph is specific to: the tree, each tensor's shape, dtype and device, the other leaves."""
    if isinstance(value, Tensor):
        return ("T", tuple(value.shape), value.dtype, value.device)
    if isinstance(value, Mapping):
        return tuple((k, _signature(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_signature(v) for v in value))
    return value


def _tree_copy_(dst: Any, src: Any) -> None:
    if isinstance(dst, Tensor):
        dst.copy_(src, non_blocking=True)
    elif isinstance(dst, Mapping):
        for k in dst:
            _tree_copy_(dst[k], src[k])
    elif isinstance(dst, list | tuple):
        for d, s in zip(dst, src, strict=True):
            _tree_copy_(d, s)


# ----------------------------------------------------------------------------------- the step


class TrainStep:
    """The training step of a :class:`~opflow.train.Trainer` (module docstring).

    ``model`` is the bare model (clipping, state snapshots), ``fwd_model`` what the forward calls (the
    model, its DDP wrapper). Call it with a batch on the device: it runs the step and the scheduler's
    step and returns ``(loss, B)``, the batch's loss as a detached 0-dim device tensor (valid until the
    next call) and its number of samples. :attr:`lr_used` is the learning rate of the last step.
    """

    def __init__(
        self,
        model: nn.Module,
        fwd_model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        cfg: Any,
        norms: Normalizers,
        *,
        world_size: int = 1,
        autocast: bool = False,
        compile: bool = False,
        cuda_graphs: bool = False,
        note: Callable[[int, str], None] | None = None,
    ) -> None:
        self.model, self.fwd_model, self.optimizer, self.scheduler = model, fwd_model, optimizer, scheduler
        self.cfg, self.norms, self.world_size, self.autocast = cfg, norms, world_size, autocast
        self.note = note or (lambda level, msg: log.log(level, msg))
        self.lr_used: float = float(optimizer.param_groups[0]["lr"])

        def loss_fn(b: Mapping[str, Any]) -> Tensor:
            return batch_loss(self.fwd_model, b, self.norms, self.cfg, autocast=self.autocast)

        self._plain_loss_fn = loss_fn
        self.loss_fn: Callable[[Mapping[str, Any]], Tensor] = torch.compile(loss_fn) if compile else loss_fn
        #: compiled, and no step has run through the compiled loss yet: the first one may fail to compile
        self._compile_unproven = compile
        #: the captured graph and what it reads and writes (set by the first full batch)
        self.graph: torch.cuda.CUDAGraph | None = None
        self._static_batch: Any = None
        self._static_loss: Tensor | None = None
        self._signature: Any = None
        self._hyper: list[tuple[dict[str, Any], Tensor, Tensor, Tensor]] = []
        self.graphs_wanted = cuda_graphs
        if cuda_graphs and world_size > 1:
            self.note(logging.WARNING, "training.cuda_graphs: not with DDP (several processes); the plain step runs")
            self.graphs_wanted = False

    # ------------------------------------------------------------------ one step

    def _scaled(self, loss: Tensor, n: int) -> Tensor:
        # "sum": gradient of the global batch sum of per-sample losses (DDP averages over ranks)
        return loss * (n * self.world_size) if self.cfg.loss_reduction == "sum" else loss

    def _update(self) -> None:
        if self.cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()

    def _loss_and_grads(self, b: Mapping[str, Any]) -> Tensor:
        loss = self.loss_fn(b)
        # with a graph captured, the gradients are its tensors: zero them in place, do not drop them
        self.optimizer.zero_grad(set_to_none=self.graph is None)
        self._scaled(loss, b["inputs"].shape[0]).backward()
        return loss

    def _eager(self, b: Mapping[str, Any]) -> Tensor:
        if self._compile_unproven:
            self._compile_unproven = False
            # what a failed try may have written before it failed (a graph break runs the part before it: BatchNorm's
            # running statistics, ONO's covariance, the dropout's random numbers), put back before the plain step
            snap = self._snapshot(cuda=b["inputs"].is_cuda)
            try:  # torch.compile builds the forward at the first call and the backward at the first backward
                loss = self._loss_and_grads(b)
            except Exception as e:  # noqa: BLE001 - a failure to compile: the plain step, said once (a real error raises again there)
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                self.note(logging.WARNING, f"training.compile: the step could not be compiled ({type(e).__name__}: {first}); the plain step runs")
                self.loss_fn = self._plain_loss_fn
                self._restore(snap, [])
                loss = self._loss_and_grads(b)  # zero_grad first: nothing of the failed try is kept
        else:
            loss = self._loss_and_grads(b)
        self._update()
        return loss.detach()

    def __call__(self, b: Mapping[str, Any]) -> tuple[Tensor, int]:
        n = int(b["inputs"].shape[0])
        if self.graphs_wanted and self.graph is None:
            self._try_capture(b)
        if self.graph is not None and _signature(b) == self._signature:
            _tree_copy_(self._static_batch, b)
            self.graph.replay()
            self.optimizer._opt_called = True  # type: ignore[attr-defined]  # what optimizer.step() marks: the scheduler then knows it stepped
            loss = self._static_loss
        else:
            loss = self._eager(b)
        self.lr_used = float(self.optimizer.param_groups[0]["lr"])
        self.scheduler.step()
        for group, lr_t, b1_t, b2_t in self._hyper:  # the schedule's values into the graph's tensors (fill kernels, no copy)
            lr_t.fill_(group["lr"])
            b1_t.fill_(group["betas"][0])
            b2_t.fill_(group["betas"][1])
        assert loss is not None
        return loss, n

    # ------------------------------------------------------------------ CUDA graph

    def _snapshot(self, cuda: bool = True) -> tuple[list[tuple[Tensor, Tensor]], list[tuple[Tensor, Tensor | None]], Any]:
        """Copies of every parameter, buffer and optimizer state tensor, and the RNG states (CUDA's where ``cuda``)."""
        tensors = [(t, t.detach().clone()) for t in [*self.model.parameters(), *self.model.buffers()]]
        opt = [(t, t.detach().clone()) for st in self.optimizer.state.values() for t in st.values() if isinstance(t, Tensor)]
        rng = (torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None)
        return tensors, opt, rng

    def _restore(self, snap: Any, fresh_states: list[dict[str, Any]]) -> None:
        tensors, opt, rng = snap
        with torch.no_grad():
            for t, c in [*tensors, *opt]:
                t.copy_(c)
            for st in fresh_states:  # states created by the warm-up: back to AdamW's initial zeros
                for t in st.values():
                    if isinstance(t, Tensor):
                        t.zero_()
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state(rng[1])

    def _make_capturable(self, dev: torch.device) -> None:
        """The step counts on the device (what a captured step increments, and what
        ``torch.optim.AdamW(capturable=True)`` takes for an eager step afterwards), and the device tensors
        that the captured step reads its learning rate and betas from."""
        for group in self.optimizer.param_groups:
            group["capturable"] = True
            for p in group["params"]:
                st = self.optimizer.state.get(p)
                if st and "step" in st and isinstance(st["step"], Tensor):
                    st["step"] = st["step"].to(device=p.device, dtype=torch.float32)
            lr_t, b1_t, b2_t = (torch.tensor(float(v), dtype=torch.float32, device=dev) for v in (group["lr"], *group["betas"]))
            self._hyper.append((group, lr_t, b1_t, b2_t))

    def _graph_body(self, b: Mapping[str, Any]) -> Tensor:
        loss = self.loss_fn(b)
        self._scaled(loss, b["inputs"].shape[0]).backward()
        if self.cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        adam_step_on_device(self.optimizer, self._hyper)
        return loss.detach()

    def _uses_dropout(self) -> bool:
        return any(isinstance(m, nn.Dropout) and m.p > 0 for m in self.model.modules())

    def _try_capture(self, b: Mapping[str, Any]) -> None:
        """Capture the step for batches shaped like ``b``; on failure warn once and stay eager."""
        self.graphs_wanted = False  # one try per run
        dev = b["inputs"].device
        if dev.type not in CAPTURE_DEVICES:
            self.note(logging.WARNING, f"training.cuda_graphs: the batch is on {dev}, not CUDA; the plain step runs")
            return
        why = graph_step_supported(self.optimizer)
        if why is not None:
            self.note(logging.WARNING, f"training.cuda_graphs: {why} cannot be captured; the plain step runs")
            return
        self._make_capturable(dev)  # before the snapshot: it moves the step counts to new tensors
        snap = self._snapshot()
        had_state = {id(p) for p in self.optimizer.state}
        try:
            static = _tree_map(b, lambda t: t.clone())
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(GRAPH_WARMUP_STEPS):
                    self.optimizer.zero_grad(set_to_none=True)
                    self._graph_body(static)
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
            fresh = [st for p, st in self.optimizer.state.items() if id(p) not in had_state]
            self._restore(snap, fresh)
            graph = torch.cuda.CUDAGraph()
            self.optimizer.zero_grad(set_to_none=True)
            # thread_local: CUDA calls of other threads (the DataLoader's pin-memory thread pins the next
            # batch meanwhile) are not part of the capture and do not invalidate it
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                static_loss = self._graph_body(static)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - any failure of the capture: fall back, say why
            torch.cuda.synchronize()
            self._hyper = []
            fresh = [st for p, st in self.optimizer.state.items() if id(p) not in had_state]
            self._restore(snap, fresh)
            self.optimizer.zero_grad(set_to_none=True)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if self._uses_dropout():
                # an aborted capture leaves PyTorch's CUDA random-number state in capture mode: the next
                # dropout would fail with "Offset increment outside graph capture" (seen on an H200)
                raise RuntimeError(
                    f"training.cuda_graphs: the step could not be captured ({type(e).__name__}: {first}), and this model "
                    "uses dropout, whose random numbers cannot be drawn after a failed capture; set training.cuda_graphs: false"
                ) from e
            self.note(logging.WARNING, f"training.cuda_graphs: the step could not be captured ({type(e).__name__}: {first}); the plain step runs")
            return
        self.graph, self._static_batch, self._static_loss, self._signature = graph, static, static_loss, _signature(b)
        self.note(logging.INFO, "training.cuda_graphs: the training step is captured as one CUDA graph")


__all__ = ["CAPTURE_DEVICES", "GRAPH_WARMUP_STEPS", "TrainStep", "batch_loss"]
