"""View kind ``grid``: fields on a shared tensor-product grid (:class:`opflow.data.torch_data.GridDataset`).

Everything but the dataset is the interface's default: the plain statistics and input / truth /
prediction / error images (lines on 1-D grids).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .base import ViewKind

if TYPE_CHECKING:
    from ..torch_data import GridDataset


class GridKind(ViewKind):
    """``f(sample, x[, y[, z]])``: point ``p`` of the row-major grid, one channel per field."""

    name = "grid"

    def dataset(self, path: str | os.PathLike, split: str | None, task: Any, view: Any, purpose: str = "train") -> GridDataset:
        """One split of the file in memory, coordinates as ``view.coords`` says (``purpose`` changes nothing)."""
        from ..torch_data import GridDataset

        return GridDataset(path, split, task, coords=getattr(view, "coords", "file"))
