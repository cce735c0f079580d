"""The common face of every data generator: typed parameters, a registry, one-sample seeding.

A generator is a class registered under a name (the ``solver:`` value in the config). It takes a
parameter dataclass, declares its grid/mesh dimensions, coordinate variables and fields, and
computes a block of samples from their global indices. The driver (:mod:`solvers.generate`) seeds
sample ``i`` with :func:`opflow.data.provenance.sample_rng` ``(seed, i)``, so results do not depend
on how samples are grouped into blocks or shards.

Adding a PDE = one module with a ``Params`` dataclass and a ``Generator`` subclass decorated with
:func:`register`, plus a config entry (see README, "Adding a solver").
"""

from __future__ import annotations

import dataclasses
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from opflow.data.errors import ConfigError
from opflow.data.format import Variable


class SolverError(RuntimeError):
    """A solve failed (divergence, non-convergence); the message names the sample index and seed."""

    def __init__(self, message: str, *, index: int | None = None, seed: int | None = None) -> None:
        where = []
        if index is not None:
            where.append(f"sample {index}")
        if seed is not None:
            where.append(f"seed {seed}")
        super().__init__(f"{message}" + (f" ({', '.join(where)})" if where else ""))
        self.index, self.seed = index, seed


@dataclass(frozen=True)
class FieldSpec:
    """A per-sample field: its dimensions after 'sample', units, description and learning role."""

    dims: tuple[str, ...]
    units: str
    long_name: str
    role: str  # "input" | "output" | "auxiliary"
    dtype: str = "float32"
    #: further variable attributes, e.g. UGRID ``mesh``/``location`` on mesh fields
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


_REGISTRY: dict[str, type[Generator]] = {}


def register(cls: type[Generator]) -> type[Generator]:
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} needs a class attribute 'name'")
    _REGISTRY[cls.name] = cls
    return cls


_INFRASTRUCTURE = {"base", "config", "generate", "mpi", "threads", "__main__"}


def _load_builtin() -> None:
    """Import every solver module so its generators register. Modules import heavy packages
    (dolfinx, gmsh, torch) inside functions only, so this stays cheap."""
    import importlib
    import pkgutil

    import solvers as pkg

    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name not in _INFRASTRUCTURE:
            importlib.import_module(f"solvers.{m.name}")


def get_generator(name: str) -> type[Generator]:
    if name not in _REGISTRY:
        _load_builtin()
    if name not in _REGISTRY:
        raise ConfigError(f"unknown solver {name!r}; available: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def available_generators() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def _check_type(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_check_type(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (tuple, list):
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_check_type(v, a) for v, a in zip(value, args, strict=True))
        inner = args[0] if args else Any
        return all(_check_type(v, inner) for v in value)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def params_from_dict(cls: type, values: Mapping[str, Any] | None, where: str) -> Any:
    """Build parameter dataclass ``cls`` from a config mapping, naming bad keys and values.

    Unknown keys are rejected with the list of allowed ones; values are type-checked against the
    dataclass annotations (``Literal`` choices listed); ``__post_init__`` may check ranges.
    """
    values = dict(values or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown parameter(s) {unknown}; allowed: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    for k, v in values.items():
        tp = hints[k]
        if not _check_type(v, tp):
            if typing.get_origin(tp) is typing.Literal:
                raise ConfigError(f"{where}.{k}: {v!r} is not one of {list(typing.get_args(tp))}")
            raise ConfigError(f"{where}.{k}: {v!r} is not of type {getattr(tp, '__name__', tp)}")
        if isinstance(v, list) and typing.get_origin(tp) is tuple:
            values[k] = tuple(v)
    try:
        return cls(**values)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}: {e}") from None


class Generator(ABC):
    """Base class of data generators; see the module docstring."""

    name: ClassVar[str] = ""
    Params: ClassVar[type]
    #: samples computed per :meth:`generate` call (vectorised generators use more than one)
    block_size: ClassVar[int] = 1

    def __init__(self, params: Any) -> None:
        self.params = params

    @classmethod
    def from_config(cls, params: Mapping[str, Any] | None, where: str = "params") -> Generator:
        return cls(params_from_dict(cls.Params, params, where))

    def params_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.params)

    @abstractmethod
    def dims(self) -> dict[str, int]:
        """Sizes of the per-sample dimensions, e.g. ``{"x": 421, "y": 421}``."""

    @abstractmethod
    def coords(self) -> dict[str, Variable]:
        """Coordinate variables shared by all samples, e.g. ``x`` and ``y``."""

    @abstractmethod
    def fields(self) -> dict[str, FieldSpec]:
        """The per-sample fields this generator writes."""

    def extra_attrs(self) -> dict[str, Any]:
        """Further provenance written as ``opflow_<key>`` global attributes (e.g. a mesh file hash)."""
        return {}

    @abstractmethod
    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Arrays for samples ``indices`` (leading axis ``len(indices)``), sample ``i`` seeded by
        ``sample_rng(seed, i)``; raise :class:`SolverError` naming index and seed on failure."""
