"""The generator contract (solvers/contract.py): a generator that breaks it is refused when it
registers (name, Params, methods) or when it is first looked up (its layout), with one line naming
the class, what is wrong and the fix; every shipped generator keeps it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import solvers.base as base
from opflow.data.format import Variable
from solvers.base import FieldSpec, Generator, available_generators, get_generator, register
from solvers.contract import GeneratorContractError, check_generator


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test do not outlive it."""
    base._load_builtin()
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_LAYOUT_UNCHECKED", set(base._LAYOUT_UNCHECKED))


@dataclass(frozen=True)
class GoodParams:
    resolution: int = 8
    nu: float = 0.1


class Good(Generator):
    """A 2-D periodic grid generator keeping the contract."""

    name = "test-contract-good"
    Params = GoodParams

    def dims(self) -> dict[str, int]:
        return {"x": self.params.resolution, "y": self.params.resolution}

    def coords(self) -> dict[str, Variable]:
        x = np.arange(self.params.resolution) / self.params.resolution
        attrs = {"units": "1", "long_name": "x", "grid_type": "periodic", "period": 1.0}
        return {"x": Variable(("x",), x, attrs), "y": Variable(("y",), x.copy(), {**attrs, "long_name": "y"})}

    def fields(self) -> dict[str, FieldSpec]:
        return {"a": FieldSpec(("x", "y"), "1", "input", "input"), "u": FieldSpec(("x", "y"), "1", "output", "output")}

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        n = self.params.resolution
        return {"a": np.zeros((len(indices), n, n)), "u": np.zeros((len(indices), n, n))}


def variant(name: str | None = "test-contract-bad", **members: Any) -> type:
    """A subclass of :class:`Good` with ``members`` replaced (``name=None``: no name of its own)."""
    ns: dict[str, Any] = {"__module__": __name__, **members}
    if name is not None:
        ns["name"] = name
    return type("Bad", (Good,), ns)


@dataclass
class Unfrozen:
    resolution: int = 8


@dataclass(frozen=True)
class Untyped:
    resolution: "NoSuchType" = 8  # type: ignore[name-defined]  # noqa: F821


@dataclass(frozen=True)
class NoDefault:
    resolution: int


class NoGenerate(Generator):
    name = "test-contract-abstract"
    Params = GoodParams
    dims, coords, fields = Good.dims, Good.coords, Good.fields


def grid(attrs: dict[str, Any], y_attrs: dict[str, Any] | None = None):
    def coords(self) -> dict[str, Variable]:
        x = np.arange(8) / 8.0
        return {"x": Variable(("x",), x, attrs), "y": Variable(("y",), x, attrs if y_attrs is None else y_attrs)}

    return coords


# refused by @register (the class itself)
AT_REGISTER = [
    ("no name", lambda: variant(name=""), r"needs a class attribute name = '<solver>' \(the sources\.<name>\.solver value.*got ''"),
    ("a name with a space", lambda: variant(name="my solver"), r"needs a class attribute name = .*got 'my solver'"),
    ("an inherited name", lambda: type("Sub", (base._REGISTRY["darcy_fd"],), {"__module__": __name__}), r"inherits name 'darcy_fd' from solvers\.darcy\.DarcyFD; give it a name of its own"),
    ("a name taken", lambda: variant(name="burgers"), r"name 'burgers' is already registered by solvers\.burgers\.Burgers; choose another name"),
    ("Params not a dataclass", lambda: variant(Params=dict), r"Params must be a dataclass of typed parameters with defaults .*got <class 'dict'>"),
    ("Params missing", lambda: variant(Params=None), r"Params must be a dataclass"),
    ("Params not frozen", lambda: variant(Params=Unfrozen), r"Params must be frozen, @dataclass\(frozen=True\)"),
    ("a Params type the config cannot check", lambda: variant(Params=Untyped), r"the fields of Params need types the config mechanism checks .*NoSuchType"),
    ("a parameter without default", lambda: variant(Params=NoDefault), r"Params fields \['resolution'\] have no default; give every parameter a default"),
    ("a method missing", lambda: NoGenerate, r"does not implement generate\(\); a generator defines dims\(\), coords\(\), fields\(\) and generate\(\)"),
    ("not a generator", lambda: type("Plain", (), {"name": "x"}), r"@register takes a subclass of solvers\.base\.Generator"),
]  # fmt: skip


@pytest.mark.parametrize("make, message", [c[1:] for c in AT_REGISTER], ids=[c[0] for c in AT_REGISTER])
def test_register_refuses_a_class_that_breaks_the_contract(make, message: str) -> None:
    cls = make()
    with pytest.raises(GeneratorContractError, match=rf"^\S*{re.escape(cls.__qualname__)}: {message}"):
        register(cls)
    assert base._REGISTRY.get(getattr(cls, "name", None)) is not cls


# refused when first looked up (the layout of the default instance)
AT_LOOKUP = [
    ("coords not Variables", dict(coords=lambda self: {"x": np.zeros(8), "y": np.zeros(8)}),
     r"coords\(\)\['x'\] is a ndarray; coords\(\) must return \{name: opflow\.data\.format\.Variable\(dims, data, attrs\)\}"),
    ("fields not FieldSpecs", dict(fields=lambda self: {"u": ("x", "y")}), r"fields\(\)\['u'\] is a tuple; fields\(\) must return \{name: FieldSpec"),
    ("a grid axis under another name", dict(
        dims=lambda self: {"i": 8}, coords=lambda self: {"i": Variable(("i",), np.zeros(8))}, fields=lambda self: {"u": FieldSpec(("i",), "1", "u", "output")}),
     r"coordinate 'i' on its own dimension 'i' is an axis: name a grid axis x, y or z \(the only dimensions the resolution subsampling strides\) and time t"),
    ("a grid axis without its coordinate", dict(coords=lambda self: {}),
     r"grid axis 'x' needs its coordinate variable x\(x\) in coords\(\)"),
    ("a periodic axis without period", dict(coords=grid({"grid_type": "periodic"})),
     r"periodic coordinate 'x' needs a 'period' attribute > 0 \(the domain length\), got None"),
    # before: accepted, read as a node grid; a coarser resolution failed as "not a strided subsample of 8 nodes"
    ("a period without grid_type periodic", dict(coords=grid({"period": 1.0})),
     r"coordinate 'x' has a 'period' but no grid_type 'periodic', so it is read as a node grid"),
    ("mixed periodic and node axes", dict(coords=grid({"grid_type": "periodic", "period": 1.0}, {})),
     r"grid axes mix periodic and node grids \(\{'x': 'periodic', 'y': 'nodes'\}\)"),
    ("a coordinate without units", dict(coords=grid({"long_name": "x"})),
     r"coordinate 'x' has no units attribute; give every coordinate its CF units \(\"1\" on a nondimensional axis\) and a long_name"),
    ("a coordinate without units or long_name", dict(coords=grid({})), r"coordinate 'x' has no units and no long_name attribute"),
    ("a field on an undeclared dimension", dict(fields=lambda self: {"u": FieldSpec(("x", "z"), "1", "u", "output")}),
     r"field 'u' is on dimensions \('x', 'z'\), but \['z'\] are not in dims\(\) \['x', 'y'\]"),
    ("grid axes out of order", dict(fields=lambda self: {"u": FieldSpec(("y", "x"), "1", "u", "output")}),
     r"field 'u' is on dimensions \('y', 'x'\); list t first, then the grid axes in the order x, y, z"),
    ("an unknown role", dict(fields=lambda self: {"u": FieldSpec(("x", "y"), "1", "u", "target")}),
     r"field 'u' has role 'target'; roles are \['input', 'output', 'auxiliary', 'coordinate'\]"),
    ("a sample dimension", dict(dims=lambda self: {"sample": 3, "x": 8, "y": 8}), r"dims\(\) has dimension 'sample'"),
    ("a layout that fails for the defaults", dict(dims=lambda self: 1 / 0),
     r"built with the default Params, dims\(\) / coords\(\) / fields\(\) raised ZeroDivisionError: division by zero"),
]  # fmt: skip


@pytest.mark.parametrize("members, message", [c[1:] for c in AT_LOOKUP], ids=[c[0] for c in AT_LOOKUP])
def test_the_layout_is_checked_when_the_generator_is_first_looked_up(members: dict, message: str) -> None:
    cls = register(variant(**members))  # the module may define helpers below the class: checked on lookup
    with pytest.raises(GeneratorContractError, match=rf"^\S*Bad: {message}"):
        get_generator(cls.name)
    with pytest.raises(GeneratorContractError):
        available_generators()


def test_a_generator_keeping_the_contract_registers_and_is_found() -> None:
    assert register(Good) is Good and get_generator("test-contract-good") is Good
    assert register(Good) is Good  # registering the same class again (a module reload) is fine


def test_every_shipped_generator_keeps_the_contract() -> None:
    names = available_generators()
    assert {"burgers", "darcy_fd", "darcy_fem", "elasticity", "kolmogorov", "lorenz63", "navier_stokes"} <= set(names)
    for name in names:
        check_generator(get_generator(name), {})
