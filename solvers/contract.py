"""The generator contract, checked when a generator registers (:func:`solvers.base.register`).

Two steps, because the decorator runs before the rest of its module (helpers and constants
defined below the class do not exist yet): :func:`check_class` at ``@register`` (name, ``Params``,
abstract methods), :func:`check_layout` when the generator is first looked up
(:func:`solvers.base.get_generator`, :func:`solvers.base.available_generators`: loading the
workflow, ``python -m solvers list``, ``opflow schema``), once its module is complete.

What the workflow relies on, beyond the abstract methods (the contract is stated in
:class:`solvers.base.Generator`'s docstring and in docs/adding-a-solver.md):

* ``name``: a non-empty class attribute of letters, digits and ``_ . + -`` (the
  ``sources.<name>.solver`` value), not taken by another class;
* ``Params``: a frozen dataclass whose fields all have a type the config mechanism checks
  (:func:`opflow.schema.dataclass_model`) and a default;
* ``dims()``, ``coords()``, ``fields()`` of the generator built with the default ``Params``, and
  again with each source's own ``params`` when the workflow loads (:func:`check_instance`):
  dimension sizes are ints >= 0 under names other than ``sample``; ``coords()`` maps names to
  :class:`opflow.data.format.Variable` and ``fields()`` to :class:`solvers.base.FieldSpec`, on
  dimensions of ``dims()``, roles among :data:`ROLES`; grid axes are named ``x``, ``y``, ``z``
  (the only dimensions the resolution subsampling strides), time ``t``, and each grid axis has
  its coordinate variable ``x(x)`` ... with ``grid_type = "periodic"`` and a ``period`` > 0 on a
  periodic grid (no repeated endpoint; absent or ``"nodes"`` on a node grid with both
  boundaries), the same kind on every axis; fields list ``t`` before the grid axes, in the order
  ``x, y, z``.

A generator whose ``dims()`` / ``coords()`` need a package that is not installed here
(``ModuleNotFoundError``: gmsh on the GPU machines) is checked for its name and ``Params`` only.
Every violation is a :class:`GeneratorContractError` (a ``TypeError``) of one line naming the class,
what is wrong and the fix. This module imports nothing heavy and solves nothing: the default
layouts of the shipped generators take milliseconds.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np

from opflow.data.format import Variable
from opflow.data.transforms import GRID_DIMS, is_periodic

if TYPE_CHECKING:
    from solvers.base import Generator

#: what a ``sources.<name>.solver`` value may hold
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
#: the learning roles of a field (docs/format.md)
ROLES = ("input", "output", "auxiliary", "coordinate")
#: dimension names with a meaning, in the order a field lists them
ORDERED_DIMS = ("t", *GRID_DIMS)


class GeneratorContractError(TypeError):
    """A generator class breaks the contract (module docstring); the message names class and fix."""


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def check_generator(cls: type, registry: Mapping[str, type] | None = None) -> None:
    """:func:`check_class` then :func:`check_layout` (a class whose module is complete)."""
    check_class(cls, registry)
    check_layout(cls)


def check_class(cls: type, registry: Mapping[str, type] | None = None) -> None:
    """The class-level contract (name, ``Params``, abstract methods); :class:`GeneratorContractError` on the first breach.

    ``registry``: the generators registered so far (name -> class), to refuse a name taken by
    another class (the same class registered again, e.g. on a module reload, is accepted).
    """
    from solvers.base import Generator

    who = _where(cls)
    if not (isinstance(cls, type) and issubclass(cls, Generator)):
        raise GeneratorContractError(f"{who}: @register takes a subclass of solvers.base.Generator")
    _check_name(cls, who, registry or {})
    _check_params(cls, who)
    if inspect.isabstract(cls):
        missing = ", ".join(f"{m}()" for m in sorted(cls.__abstractmethods__))
        raise GeneratorContractError(f"{who}: does not implement {missing}; a generator defines dims(), coords(), fields() and generate()")


def _check_name(cls: type[Generator], who: str, registry: Mapping[str, type]) -> None:
    name = cls.__dict__.get("name", getattr(cls, "name", None))
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise GeneratorContractError(
            f"{who}: needs a class attribute name = '<solver>' (the sources.<name>.solver value: letters, digits, _ . + -), got {name!r}"
        )
    if "name" not in cls.__dict__:
        raise GeneratorContractError(f"{who}: inherits name {name!r} from {_where(_owner(cls, 'name'))}; give it a name of its own")
    other = registry.get(name)
    if other is not None and _where(other) != who:
        raise GeneratorContractError(f"{who}: name {name!r} is already registered by {_where(other)}; choose another name")


def _owner(cls: type, attr: str) -> type:
    return next(c for c in cls.__mro__ if attr in c.__dict__)


def _check_params(cls: type[Generator], who: str) -> None:
    from opflow.schema import dataclass_model

    params = getattr(cls, "Params", None)
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        raise GeneratorContractError(
            f"{who}: Params must be a dataclass of typed parameters with defaults (@dataclass(frozen=True) class Params: ...), got {params!r}"
        )
    if not params.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise GeneratorContractError(f"{who}: Params must be frozen, @dataclass(frozen=True): a generator's parameters are its files' provenance")
    try:
        dataclass_model(params)
    except Exception as e:  # an unresolvable annotation, a type pydantic cannot check
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GeneratorContractError(
            f"{who}: the fields of Params need types the config mechanism checks (int, float, bool, str, Literal, tuples, lists, None unions): {first}"
        ) from None
    bare = [f.name for f in dataclasses.fields(params) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if bare:
        raise GeneratorContractError(f"{who}: Params fields {bare} have no default; give every parameter a default (a config may leave any out)")


def check_layout(cls: type[Generator]) -> None:
    """``dims()``, ``coords()``, ``fields()`` of ``cls`` built with its default ``Params`` (module docstring)."""
    check_instance(cls(cls.Params()), "the default Params")


def check_instance(gen: Generator, built_with: str = "these Params") -> None:
    """The layout contract of one generator instance: :func:`check_layout` for the defaults at
    lookup, and for the parameters a config declares when the workflow loads
    (``source_info`` of the workflow's config checks), so that sizes or coordinates that break the contract
    only for other values (a negative size, a periodic axis without ``period``) are refused there
    too, not found by the writer or the subsampling after the solve."""
    from solvers.base import FieldSpec

    who = _where(type(gen))
    try:
        dims, coords, fields = gen.dims(), gen.coords(), gen.fields()
    except ModuleNotFoundError:  # its stack is not installed here: checked where it is
        return
    except Exception as e:
        raise GeneratorContractError(
            f"{who}: built with {built_with}, dims() / coords() / fields() raised {type(e).__name__}: {e}; "
            + ("they must work for the defaults" if built_with == "the default Params" else "refuse such values in Params.__post_init__ (ValueError)")
        ) from None

    if not isinstance(dims, Mapping):
        raise GeneratorContractError(f"{who}: dims() must return {{dimension name: size}}, got {type(dims).__name__}")
    for d, n in dims.items():
        if not isinstance(d, str) or not d.isidentifier() or d == "sample":
            raise GeneratorContractError(f"{who}: dims() has dimension {d!r}; name per-sample dimensions with identifiers other than 'sample' (x, y, t, node, ...)")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise GeneratorContractError(f"{who}: dims()[{d!r}] is {n!r}; dimension sizes are ints >= 0")

    def on_dims(what: str, var_dims: Any) -> None:
        unknown = [x for x in var_dims if x not in dims]
        if unknown:
            raise GeneratorContractError(f"{who}: {what} is on dimensions {tuple(var_dims)}, but {unknown} are not in dims() {sorted(dims)}")
        known = [x for x in var_dims if x in ORDERED_DIMS]
        if known != sorted(known, key=ORDERED_DIMS.index):
            raise GeneratorContractError(f"{who}: {what} is on dimensions {tuple(var_dims)}; list t first, then the grid axes in the order x, y, z")

    if not isinstance(coords, Mapping):
        raise GeneratorContractError(f"{who}: coords() must return {{name: opflow.data.format.Variable}}, got {type(coords).__name__}")
    for name, v in coords.items():
        if not isinstance(v, Variable):
            raise GeneratorContractError(f"{who}: coords()[{name!r}] is a {type(v).__name__}; coords() must return {{name: opflow.data.format.Variable(dims, data, attrs)}}")
        on_dims(f"coordinate {name!r}", v.dims)
        if v.dims == (name,) and name not in ORDERED_DIMS:
            raise GeneratorContractError(
                f"{who}: coordinate {name!r} on its own dimension {name!r} is an axis: name a grid axis x, y or z (the only dimensions "
                "the resolution subsampling strides) and time t; a coordinate of another kind takes a name other than its dimension's"
            )
    if not isinstance(fields, Mapping):
        raise GeneratorContractError(f"{who}: fields() must return {{name: solvers.base.FieldSpec}}, got {type(fields).__name__}")
    for name, f in fields.items():
        if not isinstance(f, FieldSpec):
            raise GeneratorContractError(f"{who}: fields()[{name!r}] is a {type(f).__name__}; fields() must return {{name: FieldSpec(dims, units, long_name, role)}}")
        if name in coords:
            raise GeneratorContractError(f"{who}: {name!r} is both a coordinate and a field; give each variable one name")
        if f.role not in ROLES:
            raise GeneratorContractError(f"{who}: field {name!r} has role {f.role!r}; roles are {list(ROLES)}")
        on_dims(f"field {name!r}", f.dims)
    _check_grid(who, dims, coords)
    for name, v in coords.items():  # positions (grid axes, times, mesh nodes); not a topology's integer variables
        missing = [a for a in ("units", "long_name") if not str(v.attrs.get(a, "")).strip()]
        if missing and np.issubdtype(np.asarray(v.data).dtype, np.floating):
            raise GeneratorContractError(
                f"{who}: coordinate {name!r} has no {' and no '.join(missing)} attribute; give every coordinate its CF units "
                "(\"1\" on a nondimensional axis) and a long_name in its Variable attrs"
            )


def _check_grid(who: str, dims: Mapping[str, int], coords: Mapping[str, Variable]) -> None:
    """Each grid axis has its coordinate variable, periodic or node, the same on every axis."""
    kinds = {}
    for d in (a for a in GRID_DIMS if a in dims):
        v = coords.get(d)
        if v is None or v.dims != (d,):
            raise GeneratorContractError(
                f"{who}: grid axis {d!r} needs its coordinate variable {d}({d}) in coords() (the resolution subsampling reads "
                "from it whether the grid is periodic)"
            )
        grid_type = v.attrs.get("grid_type", "nodes")
        if grid_type not in ("nodes", "periodic"):
            raise GeneratorContractError(f"{who}: coordinate {d!r} has grid_type {grid_type!r}; use 'periodic' (no repeated endpoint) or leave it out (node grid)")
        if is_periodic(v.attrs):
            period = v.attrs.get("period")
            if isinstance(period, bool) or not isinstance(period, Real) or not period > 0:
                raise GeneratorContractError(f"{who}: periodic coordinate {d!r} needs a 'period' attribute > 0 (the domain length), got {period!r}")
        elif "period" in v.attrs:
            raise GeneratorContractError(
                f"{who}: coordinate {d!r} has a 'period' but no grid_type 'periodic', so it is read as a node grid (both ends: stride "
                "(n - 1) / (m - 1)); a periodic axis carries grid_type = 'periodic' and period, a node axis neither"
            )
        kinds[d] = grid_type
    if len(set(kinds.values())) > 1:
        raise GeneratorContractError(f"{who}: grid axes mix periodic and node grids ({kinds}); give every axis the same grid_type")


__all__ = ["NAME_PATTERN", "ROLES", "GeneratorContractError", "check_class", "check_generator", "check_instance", "check_layout"]
