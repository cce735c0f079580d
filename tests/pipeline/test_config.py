"""The workflow layer's config checks (load time): what each message says, one line per mistake."""

from __future__ import annotations

import pytest

from opflow.config import deep_merge, load_config_files
from opflow.data.errors import ConfigError
from solvers.config import check_config
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
    assert lines[0].startswith("sources.darcy_piecewise: 8 dataset resolutions are not strided subsamples of its 211-point grid ("), lines[0]
    assert "datasets.darcy141.resolution 141" in lines[0] and "datasets.darcy43.zero_shot[1] 85" in lines[0]
    assert lines[0].endswith("; a grid of 420 r + 1 points (421, 841, 1261, ...) fits every dataset on this source"), lines[0]


def test_a_single_resolution_off_the_grid_keeps_its_own_line_with_the_valid_resolutions() -> None:
    with pytest.raises(ConfigError) as e:
        check_config(quick({"datasets": {"darcy": {"resolution": 44}}}))
    assert e.value.problems == [
        "datasets.darcy.resolution: resolution 44 is not a strided subsample of 421 nodes; choose one of "
        "[421, 211, 141, 106, 85, 71, 61, 43, 36, 31, 29, 22, 21, 16, 15, 13, 11, 8, 7, 6, 5, 4, 3, 2] or generate at a resolution r*(44-1)+1"
    ]
