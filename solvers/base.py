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
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from opflow.data.errors import ConfigError
from opflow.data.format import Variable
from opflow.schema import validate_dataclass


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


_INFRASTRUCTURE = {"base", "config", "generate", "mpi", "regenerate", "threads", "__main__"}


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


def params_classes() -> dict[str, type]:
    """Every registered solver's name -> its ``Params`` dataclass (for ``opflow schema``)."""
    return {name: get_generator(name).Params for name in available_generators()}


def params_from_dict(cls: type, values: Mapping[str, Any] | None, where: str) -> Any:
    """Build parameter dataclass ``cls`` from a config mapping, naming bad keys and values.

    The one config mechanism (:func:`opflow.schema.validate_dataclass`): unknown keys are refused
    with the allowed ones listed, values checked against the dataclass annotations (``Literal``
    choices listed), then ``__post_init__`` checks ranges.
    """
    return validate_dataclass(cls, values, where)


class Generator(ABC):
    """Base class of data generators; see the module docstring."""

    name: ClassVar[str] = ""
    Params: ClassVar[type]
    #: samples computed per :meth:`generate` call (vectorised generators use more than one)
    block_size: ClassVar[int] = 1
    #: True when a shard may run under ``mpiexec -n P`` (``sources.<name>.mpi_ranks``): the
    #: generator has a ``comm`` and only rank 0 writes (:func:`solvers.generate.write_shard`)
    supports_mpi: ClassVar[bool] = False
    #: parameters added after files were made, with the value that reproduces those files: a file
    #: whose ``opflow_params`` lacks one is regenerated with it (:mod:`solvers.regenerate`)
    legacy_params: ClassVar[dict[str, Any]] = {}

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
