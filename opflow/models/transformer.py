"""A plain pre-LN linear-attention transformer operator (config name ``linear_transformer``).

The baseline of the ONO cost comparison: the same width, depth, heads, FFN ratio and attention
kernel as ONO's bottom flow (the NN blocks, ONO paper eq. 3), without the orthogonal-attention top
flow::

    x_j = MLP([coords_j, inputs_j])                         (point-wise lifting to ``width``)
    x  <- x + Attn(LN(x));  x <- x + FFN(LN(x))              (``n_layers`` pre-LN blocks)
    y_j = MLP(LN(x_j))                                       (point-wise projection to the outputs)

Attention is linear attention (Katharopoulos et al. 2020) by default; any kernel of
:data:`opflow.models.layers.KERNELS` can be chosen.

Query points other than the input points (``query != coords``) are handled as a *query stream*
(the same design as :class:`opflow.models.ono.ONO`): query tokens are lifted by the same encoder from
``[y, f(nearest input point to y)]`` and pass through every block, attending to the input tokens of
that layer (cross-attention with the block's own weights) and never attended to. With
``query == coords`` this reproduces the self-attention model exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from opflow.hostsync import checks_on

from .base import OperatorModel, register
from .layers import MLP, TransformerBlock, nearest_features


def check_batch(
    model: OperatorModel,
    coords: Tensor,
    inputs: Tensor,
    query: Tensor | None,
    mask: Tensor | None,
) -> None:
    """Raise ``ValueError`` naming the problem when a batch does not fit the model interface."""
    if coords.dim() != 3 or coords.shape[-1] != model.coord_dim:
        raise ValueError(f"coords must be (batch, points, {model.coord_dim}); got {tuple(coords.shape)}")
    if inputs.dim() != 3 or inputs.shape[:2] != coords.shape[:2] or inputs.shape[-1] != model.in_channels:
        raise ValueError(
            f"inputs must be (batch, points, {model.in_channels}) matching coords {tuple(coords.shape[:2])}; got {tuple(inputs.shape)}"
        )
    if query is not None and (query.dim() != 3 or query.shape[0] != coords.shape[0] or query.shape[-1] != model.coord_dim):
        raise ValueError(f"query must be (batch={coords.shape[0]}, points, {model.coord_dim}); got {tuple(query.shape)}")
    if mask is not None:
        if mask.dtype != torch.bool or mask.shape != coords.shape[:2]:
            raise ValueError(f"mask must be a bool tensor of shape {tuple(coords.shape[:2])}; got {mask.dtype} {tuple(mask.shape)}")
        if checks_on() and not bool(mask.any(-1).all()):
            raise ValueError("mask: every sample needs at least one real point (a row of the mask is all False)")


def grid_of(arch: str, coord_dim: int, n_points: int, grid_shape: Sequence[int] | None) -> tuple[int, ...]:
    """The regular grid the points of a batch form: ``grid_shape``, or ``(N,)`` for a 1D series
    without one; ``ValueError`` naming ``arch`` when a grid model gets points that are not a grid."""
    if grid_shape is None:
        if coord_dim == 1:
            return (n_points,)
        raise ValueError(f"{arch} in {coord_dim}D needs grid_shape (the points must be a row-major regular grid)")
    grid = tuple(int(s) for s in grid_shape)
    if len(grid) != coord_dim or math.prod(grid) != n_points:
        raise ValueError(f"grid_shape={grid} does not match {n_points} points in {coord_dim} dimension(s)")
    return grid


def is_self_query(coords: Tensor, query: Tensor | None) -> bool:
    """True when the outputs are wanted at the input points (``query`` absent or equal to ``coords``).

    The comparison of the values waits for the device, so it is made only where
    :func:`opflow.hostsync.checks_on`; elsewhere (a training step) a distinct ``query`` tensor takes
    the query-stream form, which gives the same outputs when the points are equal.
    """
    if query is None or query is coords:
        return True
    return checks_on() and query.shape == coords.shape and torch.equal(query, coords)


def require_full_grid(arch: str, coords: Tensor, query: Tensor | None, mask: Tensor | None) -> None:
    """Raise ``ValueError`` unless the batch is whole grids answered at their own points: the grid-only
    models (FNO, ViTNO, FANO) have no query decoder and no masked points."""
    if query is not None and query is not coords and checks_on() and not is_self_query(coords, query):
        raise ValueError(f"{arch} predicts at its input grid points: query must be None or equal to coords")
    if mask is not None and checks_on() and not bool(mask.all()):
        raise ValueError(f"{arch} needs every grid point: the mask has padded points (use a point-cloud model for meshes)")


@register("linear_transformer")
class LinearTransformer(OperatorModel):
    """Encoder MLP + ``n_layers`` pre-LN transformer blocks + MLP decoder (see module docstring).

    Hyperparameters (defaults match :class:`opflow.models.ono.ONO`'s Darcy configuration so that
    the two differ only by the orthogonal-attention flow): ``width`` 128, ``n_layers`` 8,
    ``n_heads`` 8, ``ffn_ratio`` 1, ``attention`` "linear", ``dropout`` 0, ``act`` "gelu";
    ``num_landmarks``/``pinv_iterations`` only matter for ``attention="nystrom"``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        coord_dim: int,
        *,
        width: int,
        n_layers: int,
        n_heads: int,
        ffn_ratio: float,
        attention: str,
        dropout: float,
        act: str,
        num_landmarks: int,
        pinv_iterations: int,
    ) -> None:
        super().__init__(in_channels, out_channels, coord_dim)  # values checked by TransformerHparams
        self.encoder = MLP(coord_dim + in_channels, width, width, act=act)
        self.blocks = nn.ModuleList(
            TransformerBlock(width, n_heads, attention, ffn_ratio, dropout, act, num_landmarks=num_landmarks, pinv_iterations=pinv_iterations)
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(width)
        self.decoder = MLP(width, out_channels, width, act=act)

    def forward(
        self,
        coords: Tensor,
        inputs: Tensor,
        query: Tensor | None = None,
        mask: Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
    ) -> Tensor:
        check_batch(self, coords, inputs, query, mask)
        if not is_self_query(coords, query):
            return self.forward_cross(coords, inputs, query, mask)
        x = self.encoder(torch.cat([coords, inputs], -1))
        for block in self.blocks:
            x = block(x, mask)
        return self.decoder(self.norm(x))

    def forward_cross(self, coords: Tensor, inputs: Tensor, query: Tensor, mask: Tensor | None = None) -> Tensor:
        """The query-stream form: outputs at ``query`` (equals :meth:`forward` when ``query == coords``)."""
        x = self.encoder(torch.cat([coords, inputs], -1))
        y = self.encoder(torch.cat([query, nearest_features(coords, inputs, query, mask)], -1))
        for i, block in enumerate(self.blocks):
            y = block(y, context=x, context_mask=mask)
            if i < len(self.blocks) - 1:
                x = block(x, mask)
        return self.decoder(self.norm(y))
