"""The view specification: which (input, output) pairs a dataset file is read as (``datasets.<name>.view``).

A view is chosen per dataset in the workflow config and recorded in the run config, so training and
evaluation read a file the same way. This module holds only the *specification* (kinds, their
parameters, checks) as typed models of the one config mechanism (:mod:`opflow.schema`); the torch
datasets that implement each kind live in :mod:`opflow.data.views`. It imports neither torch nor
numpy: the workflow checks views when it loads.

==========  ======================================================================================
kind        parameters (defaults)
==========  ======================================================================================
auto        none: ``grid`` for fields on ``(sample, x[, y])``, ``series``/``mesh`` on one point dim
grid        none
series      none
mesh        none
window      ``history`` (10), ``frames`` ([first, last], default all), ``train_frames`` (default
            every frame from ``first + history`` to ``last``)
one_step    ``input_frame`` (0), ``output_frame`` (1)
==========  ======================================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from opflow.schema import FrameRange, NonNegInt, PosInt, StrictModel, format_error

from .errors import ConfigError


class View(StrictModel):
    """Base of the view kinds: ``kind`` plus the parameters that belong to it."""

    kind: str = "auto"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(k for k in data if k not in cls.model_fields)
            if unknown:
                takes = sorted(k for k in cls.model_fields if k != "kind")
                raise PydanticCustomError(
                    "unknown_key",
                    "key(s) {unknown} do not belong to view kind {kind}; it takes {takes}",
                    {"unknown": str(unknown), "kind": repr(data.get("kind", "auto")), "takes": str(takes) if takes else "no parameters"},
                )
        return data

    @property
    def trajectory(self) -> bool:
        """Whether this kind reads trajectories ``f(sample, t, x[, y])``."""
        return self.kind in ("window", "one_step")


class AutoView(View):
    kind: Literal["auto"] = "auto"


class GridView(View):
    kind: Literal["grid"] = "grid"


class SeriesView(View):
    kind: Literal["series"] = "series"


class MeshView(View):
    kind: Literal["mesh"] = "mesh"


class WindowView(View):
    """``history`` frames as channels -> the next frame (teacher forcing); rollout at test time."""

    kind: Literal["window"] = "window"
    history: PosInt = 10
    frames: FrameRange | None = None
    train_frames: FrameRange | None = None

    @model_validator(mode="after")
    def _frames_fit(self) -> WindowView:
        if self.frames is None:
            return self
        first, last = self.frames
        if last - first < self.history:
            raise ValueError(
                f"frames {list(self.frames)} hold {last - first + 1} frames, too few for history {self.history} plus one predicted frame"
            )
        if self.train_frames is not None:
            a, b = self.train_frames
            if a < first + self.history or b > last:
                raise ValueError(
                    f"train_frames: {list(self.train_frames)} must lie within the predicted frames "
                    f"[{first + self.history}, {last}] (frames {list(self.frames)}, history {self.history})"
                )
        return self


class OneStepView(View):
    """Frame ``input_frame`` -> frame ``output_frame`` of every trajectory."""

    kind: Literal["one_step"] = "one_step"
    input_frame: NonNegInt = 0
    output_frame: NonNegInt = 1

    @model_validator(mode="after")
    def _frames_differ(self) -> OneStepView:
        if self.input_frame == self.output_frame:
            raise ValueError(f"input_frame and output_frame are both {self.input_frame}; they must differ")
        return self


_KINDS: dict[str, type[View]] = {
    "auto": AutoView,
    "grid": GridView,
    "series": SeriesView,
    "mesh": MeshView,
    "window": WindowView,
    "one_step": OneStepView,
}
VIEW_KINDS = tuple(_KINDS)


def _kind_of(value: Any) -> str | None:
    if isinstance(value, View):
        return value.kind
    if isinstance(value, Mapping):
        return value.get("kind", "auto")
    return None


#: the config type of ``datasets.<name>.view``: one model per kind, chosen by ``kind``
ViewConfig = Annotated[
    Annotated[AutoView, Tag("auto")]
    | Annotated[GridView, Tag("grid")]
    | Annotated[SeriesView, Tag("series")]
    | Annotated[MeshView, Tag("mesh")]
    | Annotated[WindowView, Tag("window")]
    | Annotated[OneStepView, Tag("one_step")],
    Discriminator(_kind_of),
]
_ADAPTER: TypeAdapter[View] = TypeAdapter(ViewConfig)
#: union tags pydantic puts into error locations after a ``view`` key
DROP_TAGS = {"view": set(VIEW_KINDS)}


def parse_view(value: Mapping[str, Any] | str | View | None, where: str = "view") -> View:
    """Check a view config (a mapping with ``kind`` and its parameters, or just the kind's name)."""
    if value is None:
        return AutoView()
    if isinstance(value, View):
        return value
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping with 'kind' (one of {list(VIEW_KINDS)}) and its parameters")
    try:
        return _ADAPTER.validate_python(value)
    except ValidationError as e:
        raise ConfigError(format_error(e, where, {"": set(VIEW_KINDS), **DROP_TAGS})) from None


__all__ = ["DROP_TAGS", "VIEW_KINDS", "View", "ViewConfig", "parse_view"]
