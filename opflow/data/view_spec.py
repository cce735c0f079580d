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
grid        ``coords`` (``file``; ``unit``: every axis mapped to [0, 1))
series      none
mesh        ``input_sets`` ([]): more input functions on their own point sets (:class:`InputSetSpec`)
window      ``history`` (10), ``frames`` ([first, last], default all), ``train_frames`` (default
            every frame from ``first + history`` to ``last``)
one_step    ``input_frame`` (0), ``output_frame`` (1)
==========  ======================================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SerializeAsAny, TypeAdapter, ValidationError, create_model, model_validator
from pydantic_core import PydanticCustomError

from opflow.schema import Float, FrameRange, NonNegInt, PosInt, Str, StrictModel, format_error, one_name_or_list

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
    """Fields on a tensor-product grid. ``coords``: the coordinates the model sees: ``file`` (the
    file's own, physical units) or ``unit`` (each axis mapped to [0, 1): x / period on a periodic
    axis, (x - x_0) / (x_last - x_0) on a node axis), the grid of the published codes whatever the
    physical domain (the Burgers file's [0, 2 pi) is [0, 1) in the FNO / Galerkin Transformer
    code: their coordinate features and the grid spacing h of the H1 regulariser)."""

    kind: Literal["grid"] = "grid"
    coords: Literal["file", "unit"] = "file"

    def to_dict(self) -> dict[str, Any]:
        """Without ``coords`` when it is ``file``, so the run hashes of plain grid datasets stay as they were."""
        d = super().to_dict()
        if self.coords == "file":
            d.pop("coords", None)
        return d


class SeriesView(View):
    kind: Literal["series"] = "series"


class InputSetSpec(StrictModel):
    """One more input function on its own point set (``view.input_sets`` of a ``mesh`` view).

    ``inputs``: variables on one point dimension ``(sample, D)`` (their values are the function's
    channels). ``coords``: where the points are: ``auto`` = the coordinate variables of ``D`` (role
    ``coordinate`` on ``(sample, D)``, or ``D_x, D_y``, or ``D`` itself); a list of variable names
    on ``(D,)`` or ``(sample, D)``; ``index`` = the 1-D position ``j / (n - 1)`` along ``D``;
    ``polar`` = the 2-D points ``centre + r_j (cos theta_j, sin theta_j)``, ``theta_j = 2 pi j / (n - 1)``
    with ``r`` the first input (a star-shaped boundary given by its radii at equally spaced angles
    over [0, 2 pi], endpoint repeated, as the elasticity ``radius_code``). ``centre``: polar only.
    """

    inputs: list[Str] = Field(min_length=1, json_schema_extra=one_name_or_list)
    coords: list[Str] | Literal["auto", "index", "polar"] = "auto"
    centre: tuple[Float, Float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _single_name(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("inputs"), str):
            data = {**data, "inputs": [data["inputs"]]}
        return data

    @model_validator(mode="after")
    def _centre_polar(self) -> InputSetSpec:
        if self.centre is not None and self.coords != "polar":
            raise ValueError(f"centre is only used with coords: polar (got coords: {self.coords})")
        if len(set(self.inputs)) != len(self.inputs):
            raise ValueError(f"inputs: variable names repeat in {self.inputs}")
        return self


class MeshView(View):
    """Per-sample point clouds; ``input_sets``: more input functions, each on its own point set
    (the batch key ``input_sets`` of :mod:`opflow.data.torch_data`; models with ``accepts_input_sets``)."""

    kind: Literal["mesh"] = "mesh"
    input_sets: list[InputSetSpec] = Field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Without ``input_sets`` when there are none, so the run hashes of plain mesh datasets stay as they were."""
        d = super().to_dict()
        if not self.input_sets:
            d.pop("input_sets", None)
        return d


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


_SPECS: dict[str, type[View]] = {}


def register_spec(model: type[View]) -> type[View]:
    """Make ``model`` (a :class:`View` subclass whose ``kind`` field defaults to its name) the
    specification of that kind: the workflow config and :func:`parse_view` then accept it.
    A view kind registered with :func:`opflow.data.views.register` registers its ``spec`` here."""
    kind = model.model_fields["kind"].default
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"{model.__name__}: the 'kind' field needs a default (the kind's name)")
    _SPECS[kind] = model
    return model


def unregister_spec(kind: str) -> None:
    _SPECS.pop(kind, None)


def spec_of(kind: str) -> type[View] | None:
    return _SPECS.get(kind)


def view_kinds() -> tuple[str, ...]:
    """The kinds the config accepts, built-in first."""
    return tuple(_SPECS)


for _m in (AutoView, GridView, SeriesView, MeshView, WindowView, OneStepView):
    register_spec(_m)
VIEW_KINDS = view_kinds()  # the built-in kinds


def _validate(value: Any) -> View:
    """``None`` -> auto; a kind's name or a mapping with ``kind`` -> that kind's model."""
    if value is None:
        return AutoView()
    if isinstance(value, View):
        return value
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, Mapping):
        raise PydanticCustomError("view", "expected a mapping with 'kind' (one of {kinds}) and its parameters", {"kinds": str(list(_SPECS))})
    kind = value.get("kind", "auto")
    if kind not in _SPECS:  # a one-field model, so that the error sits at .kind with the allowed values
        create_model("ViewKind", kind=(Literal[tuple(_SPECS)], ...)).model_validate({"kind": kind})
    return _SPECS[kind].model_validate(value)


#: the config type of ``datasets.<name>.view``: the registered model of the ``kind`` asked for
ViewConfig = Annotated[SerializeAsAny[View], BeforeValidator(_validate)]
def parse_view(value: Mapping[str, Any] | str | View | None, where: str = "view") -> View:
    """Check a view config (a mapping with ``kind`` and its parameters, or just the kind's name)."""
    try:
        return TypeAdapter(ViewConfig).validate_python(value)
    except ValidationError as e:
        raise ConfigError(format_error(e, where)) from None


__all__ = ["VIEW_KINDS", "InputSetSpec", "View", "ViewConfig", "parse_view", "register_spec", "spec_of", "unregister_spec", "view_kinds"]
