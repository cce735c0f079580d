"""View kinds ``window`` and ``one_step``: trajectories ``f(sample, t, x[, y])`` (:mod:`opflow.data.trajectory`).

``window`` trains on teacher-forced pairs (:class:`~opflow.data.trajectory.WindowDataset`) and is
evaluated by rolling whole trajectories out (:class:`~opflow.data.trajectory.RolloutDataset`,
purpose ``"rollout"``). Its statistics add to the full-trajectory errors:

* ``per_step``: the error of each predicted frame (``frame``, its time ``t``, ``rel_l2_*``);
* ``frame_groups``: the ONO "seen" / "unseen" frames (``frames: [first, last]``, ``rel_l2_*``) when
  training used only some of the predicted frames (``train_frames``); empty otherwise;

and its plot shows truth, prediction and error of the first field at the first, middle and last
predicted frames (:func:`opflow.plots.plot_rollout`). ``one_step`` is a plain frame -> frame map:
the interface's default statistics and plot.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .base import PURPOSES, ViewKind, plot_predictions, summary_stats

if TYPE_CHECKING:
    import numpy as np

    from ..trajectory import OneStepDataset, RolloutDataset, UnrollDataset, WindowDataset


class WindowKind(ViewKind):
    """``history`` frames as channels -> the next frame; autoregressive rollout at test time."""

    name = "window"

    def dataset(
        self, path: str | os.PathLike, split: str | None, task: Any, view: Any, purpose: str = "train"
    ) -> WindowDataset | UnrollDataset | RolloutDataset:
        """Teacher-forced pairs (``purpose="train"``), whole training trajectories for unrolled
        training (``"unroll"``) or whole trajectories to roll out (``"rollout"``)."""
        from ..trajectory import RolloutDataset, UnrollDataset, WindowDataset

        if purpose == "rollout":
            return RolloutDataset(path, split, task, view)
        if purpose == "unroll":
            return UnrollDataset(path, split, task, view)
        if purpose != "train":
            raise ValueError(f"purpose must be one of {list(PURPOSES)}, got {purpose!r}")
        return WindowDataset(path, split, task, view)

    def metrics(self, e2: np.ndarray, r2: np.ndarray, dataset: Any) -> dict[str, Any]:
        """``per_step`` and ``frame_groups`` of a rollout (module docstring); nothing for pairs."""
        if not getattr(dataset, "rollout_steps", 0):
            return {}
        from opflow.metrics import relative_l2_groups

        ds = dataset
        f = ds.n_fields
        per_step = [
            {"frame": int(j), "t": float(t), **{f"rel_l2_{k}": v for k, v in summary_stats(relative_l2_groups(e2, r2, range(i * f, (i + 1) * f))).items()}}
            for i, (j, t) in enumerate(zip(ds.predicted_frames, ds.times, strict=True))
        ]
        groups = {}
        for name, ch in ds.step_groups().items():
            frames = sorted({int(ds.predicted_frames[c // f]) for c in ch})
            groups[name] = {"frames": [frames[0], frames[-1]], **{f"rel_l2_{k}": v for k, v in summary_stats(relative_l2_groups(e2, r2, ch)).items()}}
        return {"per_step": per_step, "frame_groups": groups}

    def plot(self, samples: Sequence[Mapping[str, Any]], dataset: Any, png: str | os.PathLike, *, title: str = "") -> None:
        """Truth / prediction / error of the first field at the first, middle and last predicted frames."""
        ds = dataset
        if not getattr(ds, "rollout_steps", 0):
            plot_predictions(samples, ds, png, title=title)
            return
        from opflow import plots

        steps = ds.rollout_steps
        cols = sorted({0, steps // 2, steps - 1}) if steps > 1 else [0]
        f = ds.n_fields
        samples = [{**s, "target": s["target"][:, ::f], "pred": s["pred"][:, ::f]} for s in samples]  # the first field of every step
        labels = [f"frame {int(ds.predicted_frames[c])} (t={ds.times[c]:g})" for c in cols]
        plots.plot_rollout(samples, png, frames=cols, frame_labels=labels, title=f"{title}  [{list(ds.task.outputs)[0]}]")


class OneStepKind(ViewKind):
    """Frame ``input_frame`` -> frame ``output_frame`` of every trajectory."""

    name = "one_step"

    def dataset(self, path: str | os.PathLike, split: str | None, task: Any, view: Any, purpose: str = "train") -> OneStepDataset:
        """The frame pairs of ``split`` (``purpose`` changes nothing)."""
        from ..trajectory import OneStepDataset

        return OneStepDataset(path, split, task, view)
