"""The view specification: which (input, output) pairs a dataset file is read as (``datasets.<name>.view``).

A view is chosen per dataset in the workflow config and recorded in the run config, so training and
evaluation read a file the same way. This module holds only the *specification* (kinds, their
parameters, checks); the torch datasets that implement each kind live in :mod:`opflow.data.views`.
It imports neither torch nor numpy: the workflow checks views when it loads.
"""

from __future__ import annotations

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
