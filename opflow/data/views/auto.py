"""View ``auto``: the kind a file's task outputs call for (``grid``, ``series`` or ``mesh``).

Trajectories ``(sample, t, x[, y])`` can be read as several kinds (``window``, ``one_step``) and
must name theirs; so must fields on other dimensions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import DatasetError
from ..format import open_dataset
from ..transforms import GRID_DIMS


def infer_view_kind(path: str | os.PathLike, task: Any | Mapping[str, Any] | None = None) -> str:
    """``grid``, ``series`` or ``mesh`` from the dimensions of the task's outputs (view ``auto``).

    ``task``: a :class:`~opflow.data.torch_data.Task`, a mapping with ``inputs`` / ``outputs``, or
    None (the file's roles).
    """
    from ..torch_data import resolve_task

    t = resolve_task(path, task, inputs_default="outputs")
    with open_dataset(path) as nc:
        missing = [n for n in (*t.inputs, *t.outputs) if n not in nc.variables]
        if missing:
            key = "outputs" if set(missing) & set(t.outputs) else "inputs"
            raise DatasetError(f"{path}: task {key} {[n for n in missing if n in getattr(t, key)]} are not variables of the file; it has {sorted(nc.variables)}")
        dims = {tuple(nc.variables[n].dimensions) for n in t.outputs}
        if len(dims) != 1:
            raise DatasetError(f"{path}: the task outputs {list(t.outputs)} lie on different dimensions {sorted(dims)}")
        fdims = dims.pop()[1:]
        if fdims and all(d in GRID_DIMS for d in fdims):
            return "grid"
        if "t" in fdims and len(fdims) > 1:
            raise DatasetError(
                f"{path}: {list(t.outputs)} are trajectories {('sample', *fdims)}; choose datasets.<name>.view.kind "
                "'window' (k frames -> next frame, rollout at test) or 'one_step' (frame -> later frame)"
            )
        if len(fdims) != 1:
            raise DatasetError(f"{path}: cannot infer a view for outputs on {('sample', *fdims)}; set datasets.<name>.view.kind")
        dim = fdims[0]
        n_coord = 1 if dim in nc.variables else sum(
            1 for v in nc.variables.values() if tuple(v.dimensions) == ("sample", dim) and getattr(v, "role", None) == "coordinate"
        )
        return "series" if n_coord <= 1 else "mesh"
