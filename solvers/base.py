"""The common face of every data generator: typed parameters, a registry, one-sample seeding.

A generator is a class registered under a name (the ``solver:`` value in the config). It takes a
parameter dataclass, declares its grid/mesh dimensions, coordinate variables and fields, and
computes a block of samples from their global indices. The driver (:mod:`solvers.generate`) seeds
sample ``i`` with :func:`opflow.data.provenance.sample_rng` ``(seed, i)``, so results do not depend
on how samples are grouped into blocks or shards.

Adding a PDE = one module with a ``Params`` dataclass and a ``Generator`` subclass decorated with
:func:`register`, plus a config entry (docs/adding-a-solver.md); :func:`register` checks the
class against the contract stated in :class:`Generator` (:mod:`solvers.contract`).
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
    """Class decorator: make ``cls`` the generator of ``sources.<name>.solver: <cls.name>``.

    The class is checked against the contract (:mod:`solvers.contract`): its name, ``Params`` and
    methods here, when its module is imported; its layout (``dims()``, ``coords()``, ``fields()``
    with the default ``Params``) when it is first looked up, once its module is complete. A breach
    raises :class:`solvers.contract.GeneratorContractError` naming the class, what is wrong and the fix.
    """
    from solvers.contract import check_class

    check_class(cls, _REGISTRY)
    _REGISTRY[cls.name] = cls
    _LAYOUT_UNCHECKED.add(cls.name)
    return cls


#: registered generators whose layout :func:`_checked` has not checked yet
_LAYOUT_UNCHECKED: set[str] = set()


def _checked(name: str) -> type[Generator]:
    """The registered generator ``name``, its layout checked on first use (:func:`register`)."""
    cls = _REGISTRY[name]
    if name in _LAYOUT_UNCHECKED:
        from solvers.contract import check_layout

        check_layout(cls)
        _LAYOUT_UNCHECKED.discard(name)
    return cls


_INFRASTRUCTURE = {"base", "contract", "generate", "mpi", "threads", "__main__"}


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
    return _checked(name)


def available_generators() -> list[str]:
    """The names of every registered generator (the built-in ones imported), each checked."""
    _load_builtin()
    for name in list(_REGISTRY):
        _checked(name)
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
    """Base class of data generators: subclass it, decorate the subclass with :func:`register`.

    The contract (checked by :func:`register`, see :mod:`solvers.contract`):

    * ``name``: class attribute, the ``sources.<name>.solver`` value (letters, digits, ``_ . + -``),
      its own (not inherited) and not taken by another class;
    * ``Params``: a ``@dataclass(frozen=True)`` whose fields all have a type (int, float, bool,
      str, ``Literal``, tuples, lists, ``X | None``) and a default; range checks in
      ``__post_init__`` raising ``ValueError``. The config's ``params`` are checked against it
      (:func:`params_from_dict`) and it is recorded in every file (provenance);
    * ``dims()``: the per-sample dimensions ``{name: size}`` (not ``sample``, which the writer
      adds). Grid axes are ``x``, ``y`` (``z``), the only dimensions the resolution subsampling
      strides; time is ``t``; meshes use ``node``, ``cell``, ``corner`` (docs/format.md);
    * ``coords()``: ``{name: opflow.data.format.Variable(dims, data, attrs)}``, the coordinate
      variables shared by every sample, with ``units`` and ``long_name``. Each grid axis ``d``
      has its ``d(d)``: a periodic axis (no repeated endpoint) carries ``grid_type = "periodic"``
      and ``period`` (the domain length), a node axis (both boundaries) neither; that is how a
      coarser resolution is derived (stride ``n / m`` or ``(n - 1) / (m - 1)``);
    * ``fields()``: ``{name: FieldSpec(dims, units, long_name, role)}`` on dimensions of
      ``dims()`` (``t`` first, then ``x, y, z`` in that order), role ``input``, ``output``,
      ``auxiliary`` or ``coordinate`` (a per-sample coordinate);
    * ``generate(seed, indices)``: the fields' arrays for a block of samples (below).

    ``dims()``, ``coords()`` and ``fields()`` are read when the workflow loads and when the generator is
    first looked up (with the default ``Params``: :func:`get_generator` checks the layout then), so they must be cheap: import heavy packages inside functions.
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type]
    #: samples computed per :meth:`generate` call (vectorised generators use more than one)
    block_size: ClassVar[int] = 1
    #: True when a shard may run under ``mpiexec -n P`` (``sources.<name>.mpi_ranks``): the
    #: generator has a ``comm`` and only rank 0 writes (:func:`solvers.generate.write_shard`)
    supports_mpi: ClassVar[bool] = False
    #: parameters added after files were made, with the value that reproduces those files: a file
    #: whose ``opflow_params`` lacks one is regenerated with it (:mod:`pipeline.regenerate`)
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
