"""The workflow layer's config checks (load time): what each message says, one line per mistake."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import solvers.base as base
from opflow.data.format import Variable
from solvers.base import FieldSpec, Generator, register

from opflow.config import deep_merge, load_config_files
from opflow.data.errors import ConfigError
from pipeline.config import check_config
from workflow_helpers import PROFILES


def quick(change: dict) -> dict:
    return deep_merge(load_config_files([str(p) for p in PROFILES["quick"]]), change)


def test_a_source_regenerated_at_a_new_grid_gets_one_line_naming_the_grids_that_fit_every_dataset_on_it() -> None:
    """Quick Darcy regenerated at 211 for its r43 set: before, nine lines, one per other dataset
    resolution on the source (darcy141, the inverse sets, the zero-shot grids); now one line whose
    fix fits them all: (n - 1) a multiple of lcm(140, 60, 84, 420, 42) = 420."""
    with pytest.raises(ConfigError) as e:
        check_config(quick({"sources": {"darcy_piecewise": {"params": {"resolution": 211}}}}))
    lines = [p for p in e.value.problems if "darcy_piecewise" in p or "strided" in p]
    assert len(lines) == 1, e.value.problems
    listed = lines[0].split(" grid (", 1)[1].split(");", 1)[0].split("; ")  # one item per dataset resolution off the grid
    assert lines[0].startswith(f"sources.darcy_piecewise: {len(listed)} dataset resolutions are not strided subsamples of its 211-point grid ("), lines[0]
    assert len(listed) >= 8 and all(" 141" in x or "zero_shot" in x for x in listed), listed
    assert "datasets.darcy141.resolution 141" in lines[0] and "datasets.darcy43.zero_shot[1] 85" in lines[0]
    assert lines[0].endswith("; a grid of 420 r + 1 points (421, 841, 1261, ...) fits every dataset on this source"), lines[0]


def test_a_single_resolution_off_the_grid_keeps_its_own_line_with_the_valid_resolutions() -> None:
    with pytest.raises(ConfigError) as e:
        check_config(quick({"datasets": {"darcy": {"resolution": 44}}}))
    assert e.value.problems == [
        "datasets.darcy.resolution: resolution 44 is not a strided subsample of 421 nodes; choose one of "
        "[421, 211, 141, 106, 85, 71, 61, 43, 36, 31, 29, 22, 21, 16, 15, 13, 11, 8, 7, 6, 5, 4, 3, 2] or generate at a resolution r*(44-1)+1"
    ]


def test_an_unknown_solver_names_its_key() -> None:
    """Before: ``config error at unknown solver 'heat1'; available: ...``, no key."""
    with pytest.raises(ConfigError) as e:
        check_config(quick({"sources": {"darcy_piecewise": {"solver": "heat1"}}}))
    assert e.value.problems[0].startswith("sources.darcy_piecewise.solver: unknown solver 'heat1'; available: ['burgers', "), e.value.problems


@dataclass(frozen=True)
class RingParams:
    resolution: int = 8
    periodic: bool = False


class Ring(Generator):
    """A 1-D generator that keeps the contract for its defaults only: no range check on
    ``resolution``, and its periodic variant forgets the ``period`` attribute."""

    name = "test-config-ring"
    Params = RingParams

    def dims(self) -> dict[str, int]:
        return {"x": self.params.resolution}

    def coords(self) -> dict[str, Variable]:
        n = max(self.params.resolution, 0)
        attrs = {"units": "1", "long_name": "x", **({"grid_type": "periodic"} if self.params.periodic else {})}
        return {"x": Variable(("x",), np.arange(n) / max(n, 1), attrs)}

    def fields(self) -> dict[str, FieldSpec]:
        return {"a": FieldSpec(("x",), "1", "input", "input"), "u": FieldSpec(("x",), "1", "output", "output")}

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        n = self.params.resolution
        return {"a": np.zeros((len(indices), n)), "u": np.zeros((len(indices), n))}


@pytest.fixture
def ring(monkeypatch: pytest.MonkeyPatch) -> str:
    base._load_builtin()
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_LAYOUT_UNCHECKED", set(base._LAYOUT_UNCHECKED))
    return register(Ring).name


def ring_config(params: dict) -> dict:
    return {
        "sources": {"ring": {"solver": "test-config-ring", "n_samples": 4, "seed": 0, "params": params}},
        "datasets": {"ring": {"source": "ring", "train": 2, "test": 2}},
        "models": {},
    }


@pytest.mark.parametrize(
    ("params", "message"),
    [
        # before: both loaded; the negative size failed in the writer, after the solve
        ({"resolution": -3}, f"sources.ring.params: with these parameters, {__name__}.Ring: dims()['x'] is -3; dimension sizes are ints >= 0"),
        # before: loaded as a node grid; a dataset at resolution 4 then failed as "not a strided subsample of 8 nodes"
        ({"periodic": True}, f"sources.ring.params: with these parameters, {__name__}.Ring: periodic coordinate 'x' needs a 'period' attribute > 0"),
    ],
)
def test_the_layout_contract_is_checked_for_the_declared_parameters_not_only_the_defaults(ring: str, params: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        check_config(ring_config(params))
    assert any(p.startswith(message) for p in e.value.problems), e.value.problems
