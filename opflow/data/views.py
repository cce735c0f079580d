"""Dataset views: how one dataset file becomes (input function, output function) pairs.

A *view* is chosen per dataset in the workflow config (``datasets.<name>.view``) and recorded in
the run config, so training and evaluation read a file the same way. :func:`make_dataset` is the
single factory that ``opflow.train`` and ``opflow.evaluate`` call.

==========  =====================================================================================
kind        what it reads (module holding the class)
==========  =====================================================================================
auto        the default: ``grid`` for fields on ``(sample, x[, y[, z]])``, ``series`` / ``mesh``
            for fields on one point dimension (1-D or more coordinates); a trajectory
            ``(sample, t, x, y)`` must name its view
grid        fields on a shared tensor-product grid (:class:`opflow.data.torch_data.GridDataset`)
series      fields on one point dimension with 1-D coordinates, e.g. ``x(sample, t)`` on ``t(t)``
            or on per-sample grids ``t(sample, t)`` (:class:`opflow.data.points.PointDataset`)
mesh        fields on per-sample point clouds, e.g. ``stress(sample, node)`` at
            ``node_x, node_y (sample, node)`` cut to ``node_count`` (the same class)
window      trajectories ``f(sample, t, x, y)``: ``history`` frames as channels -> next frame,
            rollout at test (:mod:`opflow.data.trajectory`)
one_step    trajectories: frame ``input_frame`` -> frame ``output_frame`` (same module)
==========  =====================================================================================

Parameters (only those of the chosen kind are accepted):

* ``window``: ``history`` (k, default 10); ``frames: [first, last]``, the inclusive range of frame
  indices (positions along the file's ``t`` axis) the task uses (default: all frames);
  ``train_frames: [a, b]``, the target frames of the training pairs (default: every frame from
  ``first + k`` to ``last``). See :mod:`opflow.data.trajectory` for the index mapping of the FNO
  "10 -> 10" protocol and the ONO time-generalisation split.
* ``one_step``: ``input_frame`` (default 0) and ``output_frame`` (default 1).

Per-sample inputs without the point dimension (scalars such as Lorenz-63's ``y0, z0`` or vectors
such as the elasticity ``radius_code``) become the batch's ``globals (B, g)`` in every view that
has inputs on points (grid, series, mesh).

This module imports neither torch nor numpy at module level: the Snakefile checks views at load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .errors import ConfigError

VIEW_KINDS = ("auto", "grid", "series", "mesh", "window", "one_step")
_PARAMS: dict[str, tuple[str, ...]] = {
    "auto": (),
    "grid": (),
    "series": (),
    "mesh": (),
    "window": ("history", "frames", "train_frames"),
    "one_step": ("input_frame", "output_frame"),
}


def _frame_range(value: Any, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    ok = isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if not ok or value[0] < 0 or value[1] < value[0]:
        raise ConfigError(f"{where}: expected [first, last] frame indices with 0 <= first <= last, got {value!r}")
    return int(value[0]), int(value[1])


@dataclass(frozen=True)
class View:
    """A parsed ``datasets.<name>.view`` (module docstring)."""

    kind: str = "auto"
    history: int = 10
    frames: tuple[int, int] | None = None
    train_frames: tuple[int, int] | None = None
    input_frame: int = 0
    output_frame: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Only the kind and the parameters that belong to it (what the run hash covers)."""
        d = asdict(self)
        out: dict[str, Any] = {"kind": self.kind}
        for k in _PARAMS[self.kind]:
            v = d[k]
            out[k] = list(v) if isinstance(v, tuple) else v
        return out

    @property
    def trajectory(self) -> bool:
        return self.kind in ("window", "one_step")


def parse_view(value: Mapping[str, Any] | str | None, where: str = "view") -> View:
    """Check a view config (a mapping with ``kind`` and its parameters, or just the kind's name)."""
    if value is None:
        return View()
    if isinstance(value, View):
        return value
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping with 'kind' (one of {list(VIEW_KINDS)}) and its parameters")
    kind = value.get("kind", "auto")
    if kind not in VIEW_KINDS:
        raise ConfigError(f"{where}.kind: {kind!r} is not one of {list(VIEW_KINDS)}")
    unknown = sorted(set(value) - {"kind", *_PARAMS[kind]})
    if unknown:
        raise ConfigError(f"{where}: key(s) {unknown} do not belong to view kind {kind!r}; it takes {sorted(_PARAMS[kind]) or 'no parameters'}")
    kw: dict[str, Any] = {"kind": kind}
    for key in ("history", "input_frame", "output_frame"):
        if key in value:
            v = value[key]
            low = 1 if key == "history" else 0
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{key}: expected an integer >= {low}, got {v!r}")
            kw[key] = v
    for key in ("frames", "train_frames"):
        if key in value:
            kw[key] = _frame_range(value[key], f"{where}.{key}")
    view = View(**kw)
    if kind == "one_step" and view.input_frame == view.output_frame:
        raise ConfigError(f"{where}: input_frame and output_frame are both {view.input_frame}; they must differ")
    if kind == "window" and view.frames is not None:
        first, last = view.frames
        if last - first < view.history:
            raise ConfigError(
                f"{where}: frames {list(view.frames)} hold {last - first + 1} frames, too few for history {view.history} "
                "plus one predicted frame"
            )
        if view.train_frames is not None:
            a, b = view.train_frames
            if a < first + view.history or b > last:
                raise ConfigError(
                    f"{where}.train_frames: {list(view.train_frames)} must lie within the predicted frames "
                    f"[{first + view.history}, {last}] (frames {list(view.frames)}, history {view.history})"
                )
    return view


def make_dataset(
    path: str | os.PathLike,
    split: str | None,
    task: Any = None,
    view: View | Mapping[str, Any] | str | None = None,
    *,
    purpose: str = "train",
) -> Any:
    """The torch dataset of ``split`` of ``path`` under ``view`` (the one factory; module docstring).

    ``split=None`` reads every sample (a file without a split variable, e.g. a generated source
    used as an extra evaluation set). ``purpose`` matters for ``window`` views only: ``"train"``
    gives the teacher-forced pairs, ``"rollout"`` whole trajectories for autoregressive testing.
    """
    from .torch_data import GridDataset, infer_view_kind

    v = parse_view(view)
    kind = v.kind if v.kind != "auto" else infer_view_kind(path, task)
    if kind == "grid":
        return GridDataset(path, split, task)
    if kind in ("series", "mesh"):
        from .points import PointDataset

        return PointDataset(path, split, task, kind=kind)
    from .trajectory import OneStepDataset, RolloutDataset, WindowDataset

    if kind == "one_step":
        return OneStepDataset(path, split, task, v)
    if purpose == "rollout":
        return RolloutDataset(path, split, task, v)
    if purpose != "train":
        raise ValueError(f"purpose must be 'train' or 'rollout', got {purpose!r}")
    return WindowDataset(path, split, task, v)
