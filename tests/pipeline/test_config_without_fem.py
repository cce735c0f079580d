"""The workflow loads on a machine without the FEM stack (the GPU machines: torch, no gmsh or dolfinx).

Sources whose solver needs gmsh to size their data are left unchecked there and named; a target that needs one
stops with the missing module named; every other source and dataset is checked as usual.
"""

from __future__ import annotations

import sys

import pytest

from opflow.config import deep_merge, load_config_files
from opflow.data.errors import ConfigError, MissingStackError
from pipeline import config as pipeline_config
from pipeline.config import check_config, source_info, unavailable_sources
from workflow_helpers import PROFILES


@pytest.fixture
def without_gmsh(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "gmsh", None)  # `import gmsh` now raises ModuleNotFoundError
    pipeline_config._info.cache_clear()
    yield
    pipeline_config._info.cache_clear()


@pytest.mark.parametrize("profile", ["default", "quick"])
def test_the_profiles_load_and_name_the_sources_that_need_gmsh(profile: str, without_gmsh: None) -> None:
    wf = check_config(load_config_files([str(p) for p in PROFILES[profile]]))
    skipped = unavailable_sources()
    assert {"darcy_lshape", "darcy_perforated"} <= set(skipped)
    assert all("'gmsh'" in why and "FEM stack" in why for why in skipped.values())
    assert "darcy_piecewise" not in skipped and source_info(wf, "darcy_piecewise").grid == 421
    with pytest.raises(MissingStackError, match="needs the module 'gmsh'"):
        source_info(wf, "darcy_lshape")


def test_grid_datasets_are_still_checked_without_gmsh(without_gmsh: None) -> None:
    cfg = deep_merge(load_config_files([str(p) for p in PROFILES["quick"]]), {"datasets": {"darcy": {"resolution": 44}}})
    with pytest.raises(ConfigError, match="datasets.darcy"):
        check_config(cfg)
