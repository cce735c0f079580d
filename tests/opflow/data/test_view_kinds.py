"""View kinds: one interface, a registry, a kind registered from outside the library, no import cycles."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import torch

import opflow.data
from opflow.data import views
from opflow.data.errors import ConfigError
from opflow.data.points import PointDataset
from opflow.data.torch_data import ArrayDataset, GridDataset, collate, make_loader
from opflow.data.view_spec import View
from opflow.data.views import ViewKind, get_kind, kind_of, make_dataset, parse_view, register, registered_kinds, unregister

from opflow.schema import PosInt

from import_graphs import find_cycle
from learning_helpers import grid_dataset

# --------------------------------------------------------------------------- import graph of opflow.data


def import_graph(package_dir: Path, package: str) -> dict[str, set[str]]:
    """``module -> modules of the package it imports`` (anywhere in the file: top level, functions,
    ``TYPE_CHECKING`` blocks), from the source with :mod:`ast`; packages are named by their
    ``__init__``. Implicit imports of parent packages are not edges (Python runs them first)."""
    files = {}
    for f in sorted(package_dir.rglob("*.py")):
        parts = f.relative_to(package_dir).with_suffix("").parts
        name = ".".join((package, *parts[:-1])) if parts[-1] == "__init__" else ".".join((package, *parts))
        files[name] = (f, parts[-1] == "__init__")
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, (f, is_pkg) in files.items():
        here = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                # `from pkg import sub` imports the submodule; `from mod import name` the module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            graph[mod] |= {t for t in targets if t in files and t != mod}
    return graph


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y2"}, "y2": {"y"}}) == ["y", "y2", "y"]


def test_no_module_of_opflow_data_imports_one_that_imports_it_back() -> None:
    graph = import_graph(Path(opflow.data.__file__).parent, "opflow.data")
    # the parser sees the imports this package is made of
    assert "opflow.data.torch_data" in graph["opflow.data.views.base"]  # a function-level import
    assert "opflow.data.view_spec" in graph["opflow.data.views.base"]
    assert {"opflow.data.views.grid", "opflow.data.views.trajectory", "opflow.data.views.registry"} <= graph["opflow.data.views"]
    assert "opflow.data.trajectory" in graph["opflow.data.views.trajectory"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in opflow.data: " + " -> ".join(cycle or [])
    # the dataset modules and the specification do not know the views package
    for m in ("opflow.data.torch_data", "opflow.data.trajectory", "opflow.data.points", "opflow.data.view_spec"):
        assert not {d for d in graph[m] if d.startswith("opflow.data.views")}, m


def test_importing_the_views_does_not_import_torch() -> None:
    code = "import sys, opflow.data.views as v; v.parse_view({'kind': 'window', 'history': 2}); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- the built-in kinds


@pytest.fixture(scope="module")
def grid_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grid_dataset(tmp_path_factory.mktemp("kinds") / "g.nc", n_train=6, n_test=3, s=8)


def test_builtin_kinds_are_registered_in_order() -> None:
    assert registered_kinds() == ("grid", "series", "mesh", "window", "one_step", "inverse")
    for name in registered_kinds():
        k = get_kind(name)
        assert isinstance(k, ViewKind) and k.name == name
    with pytest.raises(KeyError, match=r"no view kind 'auto'; registered: \['grid'"):
        get_kind("auto")


def test_make_dataset_records_the_kind_and_auto_resolves_it(grid_file: Path) -> None:
    ds = make_dataset(grid_file, "train")
    assert isinstance(ds, GridDataset) and kind_of(ds) is get_kind("grid") and ds.view_impl is get_kind("grid")
    assert kind_of(GridDataset(grid_file, "test")) is get_kind("grid")  # built without the factory: by its kind
    assert kind_of(make_dataset(grid_file, "test", None, "grid")).name == "grid"
    with pytest.raises(LookupError, match="was not built by opflow.data.views.make_dataset"):
        kind_of(object())


def test_a_grid_view_gives_the_models_unit_coordinates_on_request(tmp_path: Path, grid_file: Path) -> None:
    """``view: {kind: grid, coords: unit}``: every axis mapped to [0, 1), x / period on a periodic axis
    (the Burgers file on [0, 2 pi) as the published codes' [0, 1) grid), (x - x_0) / span on a node
    axis; ``coords: file`` (the default) keeps the file's values and leaves the run hash alone."""
    from solvers.burgers import Burgers
    from solvers.generate import write_shard
    from opflow.data.transforms import derive

    src = write_shard(Burgers.from_config({"resolution": 64, "dt": 0.02}), 0, 0, 4, tmp_path / "b.nc", progress=False)
    path = derive(src, tmp_path / "r32.nc", resolution=32, n_train=3, n_test=1, name="b")
    physical = make_dataset(path, "train", None, parse_view({"kind": "grid"}, "view"))
    unit = make_dataset(path, "train", None, parse_view({"kind": "grid", "coords": "unit"}, "view"))
    np.testing.assert_allclose(physical.coords[:, 0].numpy(), 2 * np.pi * np.arange(32) / 32, rtol=1e-6)
    np.testing.assert_allclose(unit.coords[:, 0].numpy(), np.arange(32) / 32, atol=1e-7)
    assert torch.equal(unit.inputs, physical.inputs) and torch.equal(unit.target, physical.target)
    nodes = make_dataset(grid_file, "train", None, parse_view({"kind": "grid", "coords": "unit"}, "view"))
    assert float(nodes.coords.min()) == 0.0 and float(nodes.coords.max()) == 1.0
    assert parse_view({"kind": "grid"}, "view").to_dict() == {"kind": "grid"}
    assert parse_view({"kind": "grid", "coords": "unit"}, "view").to_dict() == {"kind": "grid", "coords": "unit"}
    with pytest.raises(ConfigError, match="coords"):
        parse_view({"kind": "grid", "coords": "pixels"}, "view")


def test_registration_is_checked() -> None:
    class Nameless(ViewKind):
        def dataset(self, path, split, task, view, purpose="train"):  # type: ignore[override]
            raise AssertionError

    with pytest.raises(ValueError, match="already registered"):
        register(type("Grid2", (Nameless,), {"name": "grid"})())
    with pytest.raises(ValueError, match="'auto' is not a kind of its own"):
        register(type("Auto", (Nameless,), {"name": "auto"})())
    with pytest.raises(ValueError, match="must be a Python identifier"):
        register(Nameless())
    with pytest.raises(TypeError, match="must be an instance of opflow.data.views.ViewKind"):
        register(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Nameless.__bases__[0]()  # type: ignore[abstract]  # the interface itself: dataset is abstract
    with pytest.raises(KeyError, match="is not registered"):
        unregister("nope")
    assert registered_kinds() == ("grid", "series", "mesh", "window", "one_step", "inverse")


def test_unknown_kinds_name_the_registered_ones(grid_file: Path) -> None:
    with pytest.raises(ConfigError, match=r"view.kind: 'gird' is not one of \['auto', 'grid', 'series', 'mesh', 'window', 'one_step', 'inverse'\]"):
        make_dataset(grid_file, "train", None, {"kind": "gird"})
    with pytest.raises(ConfigError, match=r"datasets.d.view.kind: 'x' is not one of"):
        parse_view("x", "datasets.d.view")
    assert parse_view({"kind": "window", "history": 3}).to_dict()["history"] == 3  # built-in kinds: the specification


def test_purpose_is_checked_where_it_matters(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"purpose must be one of \['train', 'unroll', 'rollout'\], got 'test'"):
        get_kind("window").dataset(tmp_path / "never-read.nc", "test", None, parse_view("window"), "test")


# --------------------------------------------------------------------------- a kind from outside the library

TOY = "_toy_stride"


class StrideView(View):
    """The toy kind's specification: its own parameter ``stride``."""

    kind: Literal["_toy_stride"] = "_toy_stride"
    stride: PosInt = 2


class StridedDataset(ArrayDataset):
    """Every ``stride``-th point of a grid file's fields: a point cloud, no grid."""

    kind = TOY

    def __init__(self, path: Path, split: str | None, task: Any, stride: int) -> None:
        g = GridDataset(path, split, task)
        self._init_common(path, split)
        self.task, self.global_names, self.sample_index, self.units, self.attrs = g.task, g.global_names, g.sample_index, g.units, g.attrs
        self.coords, self.inputs, self.target = g.coords[::stride], g.inputs[:, ::stride], g.target[:, ::stride]


class StrideKind(ViewKind):
    """A toy kind overriding every method of the interface."""

    name = TOY

    def __init__(self) -> None:
        self.plotted: list[dict[str, Any]] = []

    spec = StrideView  # its parameters: registered with the kind

    def dataset(self, path: Any, split: str | None, task: Any, view: StrideView, purpose: str = "train") -> StridedDataset:
        return StridedDataset(path, split, task, view.stride)

    def collate(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {**super().collate(items), "toy_batch": len(items)}

    def metrics(self, e2: np.ndarray, r2: np.ndarray, dataset: Any) -> dict[str, Any]:
        return {"points": int(dataset.inputs.shape[1]), "worst_channel_sum": float(e2.sum(0).max())}

    def plot(self, samples: Sequence[Mapping[str, Any]], dataset: Any, png: Any, *, title: str = "") -> None:
        self.plotted.append({"title": title, "labels": [s["label"] for s in samples]})
        Path(png).write_text(json.dumps(self.plotted[-1]))


@pytest.fixture
def toy() -> Any:
    kind = register(StrideKind())  # the one registration line
    try:
        yield kind
    finally:
        unregister(TOY)


def test_a_kind_registered_from_a_test_module_works_through_make_dataset(toy: StrideKind, grid_file: Path) -> None:
    assert registered_kinds()[-1] == TOY
    ds = make_dataset(grid_file, "train", None, {"kind": TOY, "stride": 3})
    grid = GridDataset(grid_file, "train")
    assert isinstance(ds, StridedDataset) and kind_of(ds) is toy and len(ds) == 6
    assert ds.inputs.shape == (6, 22, 1) and ds.grid_shape is None  # ceil(64 / 3) points
    torch.testing.assert_close(ds[4]["target"], grid[4]["target"][::3])
    assert make_dataset(grid_file, "test", None, TOY).inputs.shape == (3, 32, 1)  # the kind's default stride 2
    # its parameters are its own, checked by its spec (registered with the kind: parse_view and the config know it)
    assert parse_view({"kind": TOY, "stride": 4}) == StrideView(stride=4)
    with pytest.raises(ConfigError, match=r"view\.stride: 0 must be >= 1"):
        make_dataset(grid_file, "train", None, {"kind": TOY, "stride": 0})
    with pytest.raises(ConfigError, match=rf"'gird' is not one of \[.*'one_step', 'inverse', '{TOY}'\]"):
        parse_view("gird")
    # batches: the loader takes the kind's collate
    loader, _, _ = make_loader(ds, 4, shuffle=False)
    batch = next(iter(loader))
    assert batch["toy_batch"] == 4 and batch["inputs"].shape == (4, 22, 1) and "grid_shape" not in batch
    plain, _, _ = make_loader(ds, 4, shuffle=False, collate_fn=collate)
    assert "toy_batch" not in next(iter(plain))
    # statistics and plot through the interface the evaluator uses
    e2, r2 = np.array([[1.0, 2.0], [3.0, 0.5]]), np.ones((2, 2))
    assert kind_of(ds).metrics(e2, r2, ds) == {"points": 22, "worst_channel_sum": 4.0}
    kind_of(ds).plot([{"label": "sample 0"}], ds, grid_file.parent / "toy.png", title="t")
    assert toy.plotted == [{"title": "t", "labels": ["sample 0"]}]


def test_an_unregistered_kind_is_gone(grid_file: Path) -> None:
    register(StrideKind())
    unregister(TOY)
    assert TOY not in registered_kinds()
    with pytest.raises(ConfigError, match=rf"kind: '{TOY}' is not one of"):
        make_dataset(grid_file, "train", None, {"kind": TOY})


def test_builtin_kinds_of_point_datasets(tmp_path: Path) -> None:
    from opflow.data.format import Variable, split_variable, write_dataset
    from opflow.data.provenance import provenance_attrs

    t = np.linspace(0, 1, 5)
    f = write_dataset(tmp_path / "s.nc", {
        "t": Variable(("t",), t, {"role": "coordinate", "units": "s"}),
        "split": split_variable(np.array([0, 0, 1], np.int8)),
        "a": Variable(("sample", "t"), np.ones((3, 5)), {"role": "input", "units": "1"}),
        "u": Variable(("sample", "t"), np.ones((3, 5)), {"role": "output", "units": "1"}),
    }, provenance_attrs("test-kinds", {}, 0))
    ds = make_dataset(f, "train")
    assert isinstance(ds, PointDataset) and kind_of(ds) is get_kind("series")
    assert kind_of(PointDataset(f, "train", kind="series")).name == "series"
    assert views.infer_view_kind(f) == "series"


def test_a_registered_kind_is_accepted_by_the_workflow_config(toy: StrideKind) -> None:
    from opflow.config import parse_workflow

    ds = {"source": "s", "train": 1, "test": 1}
    wf = parse_workflow({"datasets": {"d": {**ds, "view": {"kind": TOY, "stride": 3}}}})
    assert wf.datasets["d"].view == StrideView(stride=3)
    with pytest.raises(ConfigError, match=r"datasets\.d\.view\.stride: 0 must be >= 1"):
        parse_workflow({"datasets": {"d": {**ds, "view": {"kind": TOY, "stride": 0}}}})
