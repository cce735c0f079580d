"""Checks of the generation half of the workflow config, run before any Snakemake job starts.

JSON-schema validation (config/schema.yaml) catches misspelt keys and wrong types; this adds what a
schema cannot know: that each source's solver exists and accepts its parameters (the solver's Params
dataclass), that every dataset's source exists, that its split sizes fit in the source, and that its
resolutions are strided subsamples of the source grid.
"""

from __future__ import annotations

from typing import Any

from opflow.data.errors import ConfigError, DatasetError
from opflow.data.transforms import GRID_DIMS, is_periodic, stride_for
from solvers.base import get_generator


def check_generation_config(config: dict[str, Any]) -> None:
    sources = config.get("sources") or {}
    grids: dict[str, int | None] = {}
    periodic: dict[str, bool] = {}
    for name, src in sources.items():
        where = f"sources.{name}"
        gen = get_generator(src["solver"]).from_config(src.get("params"), where=f"{where}.params")
        dims = gen.dims()
        sizes = {dims[d] for d in GRID_DIMS if d in dims}
        grids[name] = sizes.pop() if len(sizes) == 1 else None
        if grids[name] is not None:  # coords() of a grid generator is cheap
            coords = gen.coords()
            periodic[name] = any(is_periodic(coords[d].attrs) for d in GRID_DIMS if d in coords)
    for name, ds in (config.get("datasets") or {}).items():
        where = f"datasets.{name}"
        src = ds["source"]
        if src not in sources:
            raise ConfigError(f"{where}.source: no source {src!r}; defined sources: {sorted(sources)}")
        need = ds["train"] + ds.get("val", 0) + ds["test"]
        have = sources[src]["n_samples"]
        if need > have:
            raise ConfigError(
                f"{where}: train + val + test = {need} samples but sources.{src}.n_samples is {have}; "
                "raise n_samples or shrink the splits"
            )
        for res in [ds.get("resolution"), *ds.get("zero_shot", [])]:
            if res is None:
                continue
            if grids[src] is None:
                raise ConfigError(f"{where}: resolution given but source {src!r} has no square grid to subsample")
            try:
                stride_for(grids[src], res, periodic=periodic[src])
            except DatasetError as e:
                raise ConfigError(f"{where}: {e}") from None


def dataset_resolution(config: dict[str, Any], name: str) -> int | None:
    """The training resolution of dataset ``name`` (its source's grid when not given)."""
    ds = config["datasets"][name]
    if ds.get("resolution") is not None:
        return int(ds["resolution"])
    src = config["sources"][ds["source"]]
    dims = get_generator(src["solver"]).from_config(src.get("params")).dims()
    sizes = {dims[d] for d in GRID_DIMS if d in dims}
    return sizes.pop() if len(sizes) == 1 else None
