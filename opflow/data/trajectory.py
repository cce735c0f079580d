"""Trajectory views over fields ``f(sample, t, x[, y])``: windows with teacher forcing, rollouts, one-step maps.

Frames are positions along the file's ``t`` axis. For the ``navier_stokes`` generator frame ``j``
is the vorticity at time ``t = j`` (frame 0 is the initial field ``w0``; records every time unit),
so *frame index = time*. The published FNO files kept ``w0`` apart (``a``) and stored
``u[..., k] = w(t = k + 1)``, k = 0..19; the FNO/ONO/GNOT "NS2d" task maps the first 10 stored
steps ``u[..., 0:10]`` (t = 1..10) to the next 10, ``u[..., 10:20]`` (t = 11..20). Here that is
``view: {kind: window, history: 10, frames: [1, 20]}``: frames 1..10 in, 11..20 out, ``w0`` unused.

``window`` (:class:`WindowDataset`, training): ``history`` = k frames as input channels (oldest
first; with several fields, field fastest: channel ``c = i F + f`` is field ``f`` at frame
``j - k + i``) -> frame ``j``, one pair for every target frame ``j`` in ``train_frames`` (default
``first + k .. last``) of every trajectory, the inputs always being *true* frames (teacher forcing).
Pair ``p`` of trajectory ``s`` is item ``s P + p`` (``P`` pairs per trajectory). One epoch thus
makes as many one-step predictions as an epoch of the FNO's autoregressive training (10 per
trajectory for NS2d), but each step learns from true inputs.

Rollout (:class:`RolloutDataset`, testing): item = a whole trajectory; inputs = frames
``first .. first + k - 1`` (``(N, k F)``), target = frames ``first + k .. last`` as channels
``(N, steps F)`` (step-major). :func:`rollout` predicts one frame at a time and feeds each
prediction back as the newest input frame: the FNO "10 -> 10" evaluation. The per-channel relative
L2 errors of the target are then the per-step errors, and the joint error over all channels is
the full-trajectory error ``||pred - true||_2 / ||true||_2`` over all predicted frames and points
(the FNO code's ``test_l2_full``; what the papers report for NS2d).

ONO time-generalisation split (Xiao et al. 2024, Sec. 4.2, Table 4: "train the model to predict
timesteps 11-18 and evaluate it on ... timesteps 11-18 ('Seen') and timesteps 19-20
('Unseen')"): ``view: {kind: window, history: 10, frames: [1, 20], train_frames: [11, 18]}``.
Training pairs have targets 11..18 (inputs 1..17 at most, so frames 19 and 20 are never seen);
testing rolls out from frames 1..10 to 20 as usual and reports, besides per-step and full errors,
the full-trajectory error restricted to the seen frames 11..18 and to the unseen frames 19..20.

Unrolled training (:class:`UnrollDataset`, purpose ``"unroll"``, chosen by ``training.unroll``):
item = a whole training trajectory, its ``train_frames`` predicted one by one in one optimiser step,
their losses summed, as the FNO code (``fourier_2d_time.py``: the model's own predictions fed back)
and the ONO release (``NS_example2.py``: the true frames fed back) train NS2d.

``one_step`` (:class:`OneStepDataset`): frame ``input_frame`` -> frame ``output_frame`` of every
trajectory, e.g. the Kolmogorov flow task ``w(11) -> w(11.1)`` of the continuum-attention paper
(the ``kolmogorov`` generator stores exactly those two frames: 0 -> 1).

Points are the grid points of ``x, y`` in row-major order (as :class:`~opflow.data.torch_data.
GridDataset`); trajectory views take no globals.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from .errors import DatasetError
from .format import open_dataset
from .normalize import Identity
from .torch_data import ArrayDataset, Normalizers, Task, concat_normalizers, fit_normalizer, resolve_task
from .transforms import GRID_DIMS
from .view_spec import View, parse_view


class _Frames:
    """The task's fields of one split as ``(S, T, N, F)`` float32 plus grid and time axes."""

    def __init__(self, owner: ArrayDataset, path: str | os.PathLike, split: str | None, task: Task | Mapping[str, Any] | None) -> None:
        owner._init_common(path, split)
        owner.task = resolve_task(owner.path, task, inputs_default="outputs")
        t = owner.task
        if tuple(t.inputs) != tuple(t.outputs):
            raise DatasetError(
                f"{owner.path}: trajectory views map frames of the same fields; task inputs {list(t.inputs)} "
                f"must equal the outputs {list(t.outputs)} (leave task.inputs unset)"
            )
        with open_dataset(owner.path) as nc:
            dims = {tuple(nc.variables[n].dimensions) for n in t.outputs}
        fdims = dims.pop() if len(dims) == 1 else None
        if fdims is None or fdims[:2] != ("sample", "t") or len(fdims) < 3 or any(d not in GRID_DIMS for d in fdims[2:]):
            raise DatasetError(f"{owner.path}: trajectory views read fields on (sample, t, x[, y]); {list(t.outputs)} have dims {fdims or 'that differ'}")
        grid = fdims[2:]
        ds = owner._read(owner.path, [*t.outputs, "t", *grid], split)
        s, n_t = ds[t.outputs[0]].shape[:2]
        owner.grid_shape = tuple(int(ds[d].shape[0]) for d in grid)
        axes = np.meshgrid(*[np.asarray(ds[d], np.float64) for d in grid], indexing="ij")
        owner.coords = torch.from_numpy(np.stack([a.ravel() for a in axes], -1).astype(np.float32))
        n_pts = int(np.prod(owner.grid_shape))
        fields = [np.asarray(ds[f], np.float32).reshape(s, n_t, n_pts) for f in t.outputs]
        # one field (the usual case): a view, no copy (a 9000-sample 416^2 Kolmogorov split is 12 GB)
        self.data = torch.from_numpy(fields[0][..., None] if len(fields) == 1 else np.stack(fields, -1))
        self.times = np.asarray(ds["t"], dtype=np.float64)
        self.n_fields = len(t.outputs)
        owner.sample_index = np.asarray(ds["sample_index"]) if "sample_index" in ds.variables else np.arange(s)
        owner.units = {f: ds.variables[f].attrs.get("units", "") for f in t.outputs}
        owner.attrs = ds.attrs

    @property
    def n_frames(self) -> int:
        return int(self.data.shape[1])

    def check(self, path: Any, *frames: int) -> None:
        bad = [f for f in frames if not 0 <= f < self.n_frames]
        if bad:
            raise DatasetError(f"{path}: frame(s) {bad} do not exist; the file has {self.n_frames} frames (0..{self.n_frames - 1})")

    def window(self, s: int | slice, j: int, k: int) -> torch.Tensor:
        """Frames ``j - k .. j - 1`` of trajectory/ies ``s`` as channels ``(..., N, k F)`` (field fastest)."""
        w = self.data[s, j - k : j]  # (..., k, N, F)
        w = w.movedim(-3, -2)  # (..., N, k, F)
        return w.reshape(*w.shape[:-2], k * self.n_fields)


def _frame_range(view: View, frames: _Frames, path: Any) -> tuple[int, int]:
    first, last = view.frames if view.frames is not None else (0, frames.n_frames - 1)
    frames.check(path, first, last)
    if last - first < view.history:
        raise DatasetError(f"{path}: frames {first}..{last} are too few for history {view.history} plus one predicted frame")
    return first, last


class WindowDataset(ArrayDataset):
    """Teacher-forced training pairs of the ``window`` view (module docstring)."""

    kind = "window"

    def __init__(self, path: str | os.PathLike, split: str | None, task: Task | Mapping[str, Any] | None, view: View | Mapping[str, Any]) -> None:
        v = parse_view(view)
        self.view = v
        self._frames = _Frames(self, path, split, task)
        first, last = _frame_range(v, self._frames, self.path)
        a, b = v.train_frames if v.train_frames is not None else (first + v.history, last)
        if a < first + v.history or b > last:
            raise DatasetError(f"{self.path}: train_frames {a}..{b} must lie within the predicted frames {first + v.history}..{last}")
        self.targets = np.arange(a, b + 1)  # target frame of each pair position
        self.history = v.history
        n_traj = self._frames.data.shape[0]
        n_pts, f = self._frames.data.shape[2:]
        # inputs/target as zero-copy shapes for the properties; items are built lazily
        self.inputs = torch.empty(0, n_pts, self.history * f)
        self.target = torch.empty(0, n_pts, f)
        self._len = n_traj * len(self.targets)

    def __len__(self) -> int:
        return self._len

    @property
    def in_channels(self) -> int:
        return self.history * self._frames.n_fields

    @property
    def out_channels(self) -> int:
        return self._frames.n_fields

    def pair(self, i: int) -> tuple[int, int]:
        """``(trajectory, target frame)`` of item ``i``."""
        s, p = divmod(int(i), len(self.targets))
        return s, int(self.targets[p])

    def __getitem__(self, i: int) -> dict[str, Any]:
        s, j = self.pair(i)
        return {
            "coords": self.coords,
            "inputs": self._frames.window(s, j, self.history),
            "target": self._frames.data[s, j],
            "grid_shape": self.grid_shape,
            "index": int(i),
        }

    def fit_normalizers(self, input_kind: str, output_kind: str) -> Normalizers:
        """Channel by channel over every training pair, without materialising the pairs.

        Input channel ``i F + f`` of the pairs with targets ``a..b`` is field ``f`` at frames
        ``a - k + i .. b - k + i`` of every trajectory; the output is field ``f`` at ``a..b``.
        """
        d = self._frames.data
        a, b = int(self.targets[0]), int(self.targets[-1])
        k, F = self.history, self._frames.n_fields
        gs = self.grid_shape

        def frames(lo: int, f: int) -> torch.Tensor:
            x = d[:, lo : lo + (b - a + 1), :, f]  # (S, P, N)
            return x.reshape(-1, x.shape[-1], 1)

        x_parts = [fit_normalizer(input_kind, frames(a - k + i, f), None, gs) for i in range(k) for f in range(F)]
        y_parts = [fit_normalizer(output_kind, frames(a, f), None, gs) for f in range(F)]
        return Normalizers(concat_normalizers(x_parts), concat_normalizers(y_parts), Identity())

    def info(self) -> dict[str, Any]:
        return {**super().info(), "view": self.view.to_dict()}


class UnrollDataset(WindowDataset):
    """Whole training trajectories of the ``window`` view, for unrolled training (``training.unroll``).

    Item ``s`` = trajectory ``s``: inputs = frames ``a - k .. a - 1`` (``(N, k F)``), target = the
    training frames ``a .. b`` as channels ``(N, P F)``, step-major like a rollout's, and
    ``rollout_steps = P`` (``a .. b`` = ``train_frames``, the pairs' targets). The trainer predicts the
    ``P`` frames one by one and sums their losses (:func:`opflow.train_step.batch_loss`): the FNO
    and ONO NS2d scripts' training, one optimiser step per batch of trajectories. The model, its
    channels and its normalisers are those of the teacher-forced pairs (:class:`WindowDataset`).
    """

    kind = "unroll"

    def __init__(self, path: str | os.PathLike, split: str | None, task: Task | Mapping[str, Any] | None, view: View | Mapping[str, Any]) -> None:
        super().__init__(path, split, task, view)
        self.rollout_steps = len(self.targets)
        self._len = int(self._frames.data.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        s = int(i)
        a, b = int(self.targets[0]), int(self.targets[-1])
        tgt = self._frames.data[s, a : b + 1]  # (P, N, F)
        return {
            "coords": self.coords,
            "inputs": self._frames.window(s, a, self.history),
            "target": tgt.movedim(0, 1).reshape(tgt.shape[1], -1),
            "grid_shape": self.grid_shape,
            "index": s,
            "rollout_steps": self.rollout_steps,
        }


class RolloutDataset(ArrayDataset):
    """Whole trajectories for autoregressive testing of a ``window`` view (module docstring)."""

    kind = "rollout"

    def __init__(self, path: str | os.PathLike, split: str | None, task: Task | Mapping[str, Any] | None, view: View | Mapping[str, Any]) -> None:
        v = parse_view(view)
        self.view = v
        fr = _Frames(self, path, split, task)
        first, last = _frame_range(v, fr, self.path)
        k = v.history
        self.history, self.n_fields = k, fr.n_fields
        self.first_frame = first
        self.predicted_frames = np.arange(first + k, last + 1)
        self.times = fr.times[self.predicted_frames]
        self.rollout_steps = len(self.predicted_frames)
        s = fr.data.shape[0]
        self.inputs = fr.window(slice(None), first + k, k)  # (S, N, k F)
        tgt = fr.data[:, first + k : last + 1]  # (S, steps, N, F)
        self.target = tgt.movedim(1, 2).reshape(s, tgt.shape[2], -1).contiguous()  # (S, N, steps F), step-major
        self.seen_frames = v.train_frames
        del fr

    @property
    def out_channels(self) -> int:
        """The model's output channels (one frame); the target holds ``rollout_steps`` of them."""
        return self.n_fields

    def channel_names(self) -> list[str]:
        return [f"{f}[frame {j}]" for j in self.predicted_frames for f in self.task.outputs]

    def step_groups(self) -> dict[str, np.ndarray]:
        """Target channels of the ONO seen / unseen frames (empty when training used every frame)."""
        if self.seen_frames is None:
            return {}
        a, b = self.seen_frames
        ch = np.arange(self.target.shape[-1])
        frame = self.predicted_frames[ch // self.n_fields]
        seen = (frame >= a) & (frame <= b)
        out = {"seen": ch[seen], "unseen": ch[~seen]}
        return {k: v for k, v in out.items() if v.size}


class OneStepDataset(ArrayDataset):
    """Frame ``input_frame`` -> frame ``output_frame`` of every trajectory (module docstring)."""

    kind = "one_step"

    def __init__(self, path: str | os.PathLike, split: str | None, task: Task | Mapping[str, Any] | None, view: View | Mapping[str, Any]) -> None:
        v = parse_view(view)
        self.view = v
        fr = _Frames(self, path, split, task)
        fr.check(self.path, v.input_frame, v.output_frame)
        self.inputs = fr.data[:, v.input_frame]  # views of the frames: no copy
        self.target = fr.data[:, v.output_frame]
        self.times = fr.times[[v.input_frame, v.output_frame]]
        del fr

    def info(self) -> dict[str, Any]:
        return {**super().info(), "view": self.view.to_dict()}


def slide(window: torch.Tensor, frame: torch.Tensor) -> torch.Tensor:
    """The next input window: ``window`` ``(..., k F)`` without its oldest frame, ``frame`` ``(..., F)`` as its newest."""
    return torch.cat([window[..., frame.shape[-1] :], frame.to(window.dtype)], -1)


def rollout(step: Callable[[dict[str, Any]], torch.Tensor], batch: Mapping[str, Any], steps: int, n_fields: int) -> torch.Tensor:
    """Autoregressive prediction: ``steps`` frames from the ``(B, N, k F)`` window in ``batch["inputs"]``.

    ``step(b)`` returns the next frame ``(B, N, F)`` in physical units for the batch ``b`` whose
    inputs are the current window; the prediction becomes the newest frame of the next window
    (the oldest drops out). Returns ``(B, N, steps F)``, step-major like the rollout targets.
    """
    window = batch["inputs"]
    preds = []
    for _ in range(steps):
        y = step({**batch, "inputs": window})
        if y.shape[-1] != n_fields:
            raise ValueError(f"a rollout step must return {n_fields} channel(s), got {y.shape[-1]}")
        preds.append(y)
        window = slide(window, y)
    return torch.cat(preds, -1)
