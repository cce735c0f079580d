"""One direction of imports (``opflow/__init__.py``, "Direction of imports"): no cycle inside
``opflow``, and the packages above and beside it keep their places.

The graph is read from the source with :mod:`ast`, not from what importing loads: every ``import``
and ``from ... import`` anywhere in a module counts, inside functions too (a lazy import that
avoids the cycle at import time is still the cycle), except those under ``if TYPE_CHECKING:``.
``from a.b import c`` is an edge to the module ``a.b.c`` when that is a module, else to ``a.b``.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from import_graphs import find_cycle

ROOT = Path(__file__).resolve().parents[2]


def modules(package: str) -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (file, is a package)}`` of every module of ``package`` (a folder under the root)."""
    out = {}
    for f in sorted((ROOT / package).rglob("*.py")):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` at any depth, the bodies of ``if TYPE_CHECKING:`` left out (their ``else:`` kept)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                if isinstance(child, ast.Import | ast.ImportFrom):
                    yield child
                yield from import_nodes(child)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from import_nodes(node)


def _source(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    """The module a ``from X import ...`` of ``module`` reads from, relative imports resolved."""
    here = module.split(".") if is_pkg else module.split(".")[:-1]
    base = here[: len(here) - node.level + 1] if node.level else []
    return ".".join([*base, *([node.module] if node.module else [])])


def resolve(name: str, known: Collection[str]) -> str | None:
    """The known module ``name`` is, or lies in (``a.b.C`` -> ``a.b``); None outside them."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def module_imports(module: str, is_pkg: bool, tree: ast.AST, known: Collection[str]) -> set[str]:
    """The ``known`` modules that ``module`` imports: ``import a.b`` -> ``a.b``; ``from a.b import c``
    -> ``a.b.c`` when that is a module, else ``a.b`` (a name defined there)."""
    out: set[str] = set()
    for node in import_nodes(tree):
        if isinstance(node, ast.Import):
            out |= {resolve(a.name, known) for a in node.names}
            continue
        source = _source(node, module, is_pkg)
        out |= {f"{source}.{a.name}" if f"{source}.{a.name}" in known else resolve(source, known) for a in node.names}
    out.discard(None)
    out.discard(module)
    return out  # type: ignore[return-value]


def import_graph(*packages: str) -> dict[str, set[str]]:
    """``{module: modules of packages it imports}`` over the folders ``packages`` under the root."""
    known: dict[str, tuple[Path, bool]] = {}
    for p in packages:
        known |= modules(p)
    return {mod: module_imports(mod, is_pkg, ast.parse(f.read_text(), str(f)), known) for mod, (f, is_pkg) in known.items()}


# --------------------------------------------------------------------------- the reader


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y2"}, "y2": {"y"}}) == ["y", "y2", "y"]


def test_the_graph_counts_imports_inside_functions_and_leaves_out_type_checking_ones() -> None:
    code = """
from typing import TYPE_CHECKING
from . import sibling
from .pkg import sub, Name
if TYPE_CHECKING:
    from opflow.hidden import X
else:
    import opflow.shown
def f():
    from ..up import thing
    import opflow.lazy.deep
"""
    known = {"opflow.a.mod", "opflow.a.sibling", "opflow.a.pkg", "opflow.a.pkg.sub", "opflow.up", "opflow.lazy.deep", "opflow.shown", "opflow.hidden"}
    assert module_imports("opflow.a.mod", False, ast.parse(code), known) == {
        "opflow.a.sibling", "opflow.a.pkg.sub", "opflow.a.pkg", "opflow.up", "opflow.lazy.deep", "opflow.shown"
    }
    graph = import_graph("opflow")
    assert "opflow.models.hparams" in graph["opflow.compat"]  # a module-level import
    assert "opflow.data.torch_data" in graph["opflow.data.views.base"]  # a function-level one
    assert "opflow.data.views.base" in graph["opflow.data.views.grid"]  # relative
    assert "opflow.models.base" in graph["opflow.models"]  # inside the package's __getattr__


# --------------------------------------------------------------------------- the rules


def test_no_module_of_opflow_imports_one_that_imports_it_back() -> None:
    """Before: twelve modules in two cycles, config -> data.views -> metrics -> config and
    compat -> models.hparams -> compat (models.base -> hparams -> base)."""
    cycle = find_cycle(import_graph("opflow"))
    assert cycle is None, "import cycle in opflow: " + " -> ".join(cycle or [])


def _imports(graph: Mapping[str, set[str]], sources: str, targets: tuple[str, ...]) -> list[str]:
    """``"a -> b"`` for every edge from a module under ``sources`` to one under any of ``targets``."""
    def under(m: str, p: str) -> bool:
        return m == p or m.startswith(p + ".")

    return sorted(f"{a} -> {b}" for a, bs in graph.items() if under(a, sources) for b in bs if any(under(b, t) for t in targets))


def test_data_and_models_import_neither_each_other_nor_the_layers_above() -> None:
    """The data side and the models are siblings: what relates them (compat) and the settings
    (config) sit above both; the leaves they share are errors, schema, atomic, hostsync, metrics, plots."""
    graph = import_graph("opflow")
    above = ("opflow.config", "opflow.config_schema", "opflow.compat", "opflow.train", "opflow.evaluate", "opflow.inference", "opflow.cli")
    assert _imports(graph, "opflow.data", ("opflow.models", *above)) == []
    models_to_data = [e for e in _imports(graph, "opflow.models", ("opflow.data", *above)) if not e.endswith("-> opflow.data.errors")]
    assert models_to_data == []
    assert _imports(graph, "opflow.config", ("opflow.compat", "opflow.metrics", "opflow.train", "opflow.evaluate", "opflow.cli")) == []
    for leaf in ("opflow.metrics", "opflow.losses", "opflow.models.needs", "opflow.plots", "opflow.hostsync", "opflow.schema"):
        assert _imports(graph, leaf, ("opflow.config", "opflow.compat", "opflow.models.hparams", "opflow.models.base", "opflow.data.views")) == [], leaf


def test_the_workflow_layer_is_above_both_halves() -> None:
    """``pipeline`` (the config Snakemake loads and checks, regenerate) imports ``opflow`` and
    ``solvers``; of ``opflow`` only the console script imports it, and nothing imports ``solvers``
    from ``opflow``. ``solvers`` and ``meshes`` import the file format and the small leaves of
    ``opflow`` only. Before: solvers.config imported opflow.config and opflow.compat, and
    opflow.cli imported solvers (regenerate, the params classes, the loader)."""
    graph = import_graph("opflow", "solvers", "meshes", "pipeline")
    assert _imports(graph, "opflow", ("solvers", "meshes")) == []
    assert [e for e in _imports(graph, "opflow", ("pipeline",)) if not e.startswith("opflow.cli ->")] == []
    leaves = ("opflow.data", "opflow.schema", "opflow.atomic")
    for half in ("solvers", "meshes"):
        beyond = [e for e in _imports(graph, half, ("opflow",)) if not any(e.endswith(f"-> {l}") or f"-> {l}." in e for l in leaves)]
        assert beyond == [], half
        assert _imports(graph, half, ("pipeline",)) == [], half
    assert _imports(graph, "pipeline", ("opflow.cli",)) == []
    # the packages, with the console script on its own, in one direction (cycles inside solvers are its own business)
    def part(m: str) -> str:
        return "opflow.cli" if m == "opflow.cli" else m.partition(".")[0]

    parts: dict[str, set[str]] = {}
    for a, bs in graph.items():
        parts.setdefault(part(a), set()).update(part(b) for b in bs if part(b) != part(a))
    assert find_cycle(parts) is None, parts
