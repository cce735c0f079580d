"""The building blocks of opflow's typed configuration: value types, the strict base model, one error format.

Every key of the workflow config is checked by a pydantic v2 model built from these pieces: the
workflow tree (:mod:`opflow.config`), the view specifications (:mod:`opflow.data.view_spec`), the
model hyperparameters (:mod:`opflow.models.hparams`) and the solvers' ``Params`` dataclasses
(:func:`validate_dataclass`, used by :mod:`solvers.base`). There is no other checker.

Value rules (the same everywhere):

* integers are integers: ``True`` or ``2.5`` or ``"5"`` is refused where an int is expected;
* booleans are booleans: ``"yes"`` or ``1`` is refused;
* floats accept ints and numeric strings (YAML 1.1, which PyYAML and Snakemake use, reads ``1e-3``
  without a dot as a string), never booleans, and must be finite (``.inf`` / ``.nan`` refused;
  solver parameters excepted, see :data:`SolverFloat`);
* tuples accept YAML lists; mappings must be mappings;
* unknown keys are refused, naming the allowed ones.

Errors become one :class:`~opflow.data.errors.ConfigError` line naming the dotted key, the bad
value and the allowed values, e.g.::

    training.loss: 'l1' is not one of ['rel_l2', 'rel_h1', 'mse']
    sources.darcy_piecewise: unknown key 'n_sample'; allowed: mpi_ranks, n_samples, params, seed, shard_size, solver, threads
    models.ono: width 30 is not a multiple of n_heads 4

This module imports pydantic and nothing heavy (no torch, no numpy): the Snakefile uses it at load.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError, create_model, model_validator
from pydantic_core import PydanticCustomError

from opflow.data.errors import ConfigError

# --------------------------------------------------------------------------- value types


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise PydanticCustomError("float_type", "{value} is not of type float", {"value": repr(value)})
    return value


Int = Annotated[int, Strict()]
PosInt = Annotated[int, Strict(), Field(ge=1)]
NonNegInt = Annotated[int, Strict(), Field(ge=0)]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
#: ints and YAML-1.1 numeric strings are accepted, booleans refused; finite only (``.inf`` and
#: ``.nan`` are never a meant learning rate, weight or width)
Float = Annotated[float, BeforeValidator(_no_bool), Field(allow_inf_nan=False)]
PosFloat = Annotated[float, BeforeValidator(_no_bool), Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, BeforeValidator(_no_bool), Field(ge=0, allow_inf_nan=False)]
#: a solver parameter's float: infinity may be meant there (e.g. no step-size cap); each solver
#: checks its own ranges in its ``Params.__post_init__``
SolverFloat = Annotated[float, BeforeValidator(_no_bool)]

#: ``auto`` (cuda > mps > cpu), ``cpu``, ``mps``, ``cuda`` or ``cuda:N`` (the one definition)
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def _device(value: str) -> str:
    if not DEVICE_PATTERN.match(value):
        raise PydanticCustomError("device", "{value} must be auto, cpu, mps, cuda or cuda:N", {"value": repr(value)})
    return value


Device = Annotated[str, Strict(), AfterValidator(_device), Field(json_schema_extra={"pattern": DEVICE_PATTERN.pattern})]


def one_name_or_list(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of a list-of-names field whose model also takes a single name (a string)."""
    branches = schema.pop("anyOf", None)
    if branches is None:
        branches = [{k: schema.pop(k) for k in list(schema) if k not in ("default", "title", "description")}]
    schema["anyOf"] = [*branches, {"type": "string"}]


def _frame_range(value: Any) -> Any:
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if 0 <= value[0] <= value[1]:
            return tuple(value)
    raise PydanticCustomError("frame_range", "expected [first, last] frame indices with 0 <= first <= last, got {value}", {"value": repr(value)})


#: ``[first, last]`` inclusive frame indices along a file's ``t`` axis
FrameRange = Annotated[tuple[int, int], BeforeValidator(_frame_range)]


def literal_values(tp: Any) -> list[Any]:
    """The allowed values of a ``Literal`` type (for messages and docs)."""
    return list(typing.get_args(tp))


# --------------------------------------------------------------------------- the strict base


class StrictModel(BaseModel):
    """Base of every config model: frozen, unknown keys refused with the allowed ones listed.

    ``key_noun`` names what a key is in messages ("key", or "parameter" for solver parameters).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)
    key_noun: ClassVar[str] = "key"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            allowed = set(cls.model_fields)
            unknown = sorted((k for k in data if k not in allowed), key=str)
            if unknown:
                raise unknown_key_error(unknown, sorted(allowed), cls.key_noun)
        elif not isinstance(data, BaseModel):
            raise PydanticCustomError("mapping", "expected a mapping of settings, got {kind}", {"kind": type(data).__name__})
        return data

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (tuples as lists)."""
        return self.model_dump(mode="json")


def unknown_key_error(unknown: list[Any], allowed: list[str], noun: str = "key") -> PydanticCustomError:
    keys = ", ".join(repr(k) for k in unknown)
    plural = "s" if len(unknown) > 1 else ""
    return PydanticCustomError(
        "unknown_key", "unknown {noun}{plural} {keys}; allowed: {allowed}", {"noun": noun, "plural": plural, "keys": keys, "allowed": ", ".join(allowed) or "none"}
    )


# --------------------------------------------------------------------------- one error format


def _dotted(where: str, loc: tuple[Any, ...]) -> str:
    parts = [where] if where else []
    parts += [str(p) for p in loc]
    return ".".join(parts) or "<top level>"


_TYPE_NAMES = {
    "int_type": "int", "int_parsing": "int", "int_from_float": "int",
    "bool_type": "bool", "bool_parsing": "bool",
    "float_type": "float", "float_parsing": "float",
    "string_type": "str", "list_type": "list", "tuple_type": "list",
}  # fmt: skip


def problem(err: Mapping[str, Any]) -> str:
    """The text after ``key:`` for one pydantic error dict."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "literal_error":
        expected = ctx.get("expected", "").replace(" or ", ", ")
        return f"{value!r} is not one of [{expected}]"
    if kind in _TYPE_NAMES:
        return f"{value!r} is not of type {_TYPE_NAMES[kind]}"
    if kind in ("dict_type", "model_type", "dataclass_type", "model_attributes_type"):
        return f"expected a mapping, got {value!r}"
    for k, op in (("greater_than_equal", ">= {ge}"), ("greater_than", "> {gt}"), ("less_than_equal", "<= {le}"), ("less_than", "< {lt}")):
        if kind == k:
            return f"{value!r} must be " + op.format(**ctx)
    if kind == "finite_number":
        return f"{value!r} must be a finite number"
    if kind == "too_short":
        return f"{value!r} needs at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"{value!r} takes at most {ctx.get('max_length')} item(s)"
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        return msg.removeprefix("Value error, ")
    if kind == "assertion_error":
        return err["msg"].removeprefix("Assertion failed, ")
    if kind == "missing":
        return "missing required key"
    return str(err["msg"])


def format_error(e: ValidationError, where: str = "") -> str:
    """One line for the first error of ``e``: ``<where>.<loc>: <problem>``."""
    err = e.errors(include_url=False)[0]
    loc = list(err["loc"])
    if err["type"] == "missing" and loc:
        return f"{_dotted(where, tuple(loc[:-1]))}: missing required key {loc[-1]!r}"
    return f"{_dotted(where, tuple(loc))}: {problem(err)}"


M = TypeVar("M", bound=BaseModel)


def validate(cls: type[M], values: Any, where: str = "") -> M:
    """``cls.model_validate(values)``, raising :class:`ConfigError` with one line naming the key."""
    if values is None:
        values = {}
    try:
        return cls.model_validate(values)
    except ValidationError as e:
        raise ConfigError(format_error(e, where)) from None


# --------------------------------------------------------------------------- solver Params dataclasses


def _strict_type(tp: Any) -> Any:
    """``tp`` with the scalar rules of this module (int/bool strict, float without bool) applied inside."""
    if tp is bool:
        return Bool
    if tp is int:
        return Int
    if tp is float:
        return SolverFloat
    if tp is str:
        return Str
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_strict_type(a) for a in args)]  # noqa: UP007
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple[_strict_type(args[0]), ...]  # type: ignore[misc]
        return tuple[tuple(_strict_type(a) for a in args)] if args else tuple  # type: ignore[misc]
    if origin is list:
        return list[_strict_type(args[0])] if args else list  # type: ignore[misc]
    return tp


@functools.cache
def dataclass_model(cls: type) -> type[StrictModel]:
    """A strict pydantic model with the fields, types and defaults of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = Field(default_factory=f.default_factory)
        else:
            default = ...
        fields[f.name] = (_strict_type(hints[f.name]), default)
    base = type(f"_{cls.__name__}Base", (StrictModel,), {"key_noun": "parameter", "__module__": __name__})
    return create_model(f"{cls.__name__}Config", __base__=base, **fields)  # type: ignore[call-overload]


D = TypeVar("D")


def validate_dataclass(cls: type[D], values: Mapping[str, Any] | None, where: str = "params") -> D:
    """Build dataclass ``cls`` from a config mapping with the rules of this module.

    Types, ``Literal`` choices and unknown keys are checked by :func:`dataclass_model`; then the
    dataclass is built, so its ``__post_init__`` range checks run too (a ``ValueError`` there
    becomes a :class:`ConfigError` naming ``where``).
    """
    checked = validate(dataclass_model(cls), values or {}, where)
    kwargs = {f: getattr(checked, f) for f in (values or {})}
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}: {e}") from None


__all__ = [
    "Bool",
    "DEVICE_PATTERN",
    "Device",
    "Float",
    "FrameRange",
    "Int",
    "NonNegFloat",
    "NonNegInt",
    "PosFloat",
    "PosInt",
    "SolverFloat",
    "Str",
    "StrictModel",
    "dataclass_model",
    "format_error",
    "literal_values",
    "one_name_or_list",
    "validate",
    "validate_dataclass",
]
