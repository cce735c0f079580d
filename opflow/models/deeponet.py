"""DeepONet and MIONet: branch networks on the input functions at fixed sensor points, a trunk
network on the query coordinates, combined by an inner product over a learned basis.

DeepONet (Lu, Jin, Pang, Zhang, Karniadakis, "Learning nonlinear operators via DeepONet based on
the universal approximation theorem of operators", Nature Machine Intelligence 3, 218 (2021);
arXiv 1910.03193, eq. (2) and Fig. 1: the "unstacked" DeepONet with a bias)::

    G(a)(y)_c = sum_{k=1}^{p} b_{c,k}(a(x_1), ..., a(x_m)) t_{c,k}(y) + b_{0,c}

``b = branch([a(x_1), ..., a(x_m)])`` is an MLP on the input function's values at the ``m``
sensor points (all input channels, flattened), ``t = sigma(trunk(y))`` an MLP on the query
coordinates whose last layer is followed by the activation too (as in the paper: the trunk's
output is a set of nonlinear basis functions); ``p`` = ``basis``. Several output channels ``c``
each have their own ``p`` branch and trunk outputs (DeepXDE's "split both" strategy for vector
outputs: both networks output ``p * c_out`` values).

MIONet (Jin, Meng, Lu, "MIONet: Learning multiple-input operators via tensor product", SIAM J.
Sci. Comput. 44 (2022) A3490; arXiv 2202.06137, eq. (3.3), the "low-rank" form)::

    G(a^1, ..., a^n)(y)_c = sum_k ( prod_{i=1}^{n} b^i_{c,k}(a^i) ) t_{c,k}(y) + b_{0,c}

one branch per input function ``a^i``, combined by the elementwise (Hadamard) product. The input
channels are split into functions by ``input_groups``: a list of channel counts, in channel
order, summing to the number of input channels (e.g. ``[1, 2]``: channel 0 is ``a^1``, channels
1-2 are ``a^2``); by default each input channel is its own function. DeepONet is MIONet with a
single group holding every channel.

Sensors: the sensor points are the input points *by index*: the model is built for ``n_points``
points (set from the training data by :func:`opflow.train.build_for_data`), and every batch must
present the same points in the same order; DeepONet cannot change resolution. Padded batches
(``mask`` False at padding) may hold fewer points: padded and missing points enter the branches
as zeros, so padding never changes the output at real points (a first linear layer maps a zero
entry to nothing). For point clouds of different sizes this means sensor ``j`` is "the ``j``-th
node", which is only meaningful when the clouds are consistently ordered (e.g. one mesh family).
Outputs are computed at every query point, padded ones included (the loss masks those).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from opflow.data.errors import ConfigError

from .base import OperatorModel, register
from .layers import MLP, activation
from .transformer import check_batch


class _BranchTrunk(OperatorModel):
    """The shared body: ``len(groups)`` branches, one trunk, the product-sum and the bias."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        coord_dim: int,
        groups: Sequence[int],
        *,
        branch_width: int,
        branch_layers: int,
        trunk_width: int,
        trunk_layers: int,
        basis: int,
        act: str,
        n_points: int,
    ) -> None:
        super().__init__(in_channels, out_channels, coord_dim)
        name = type(self).__name__.lower()
        if n_points < 1:
            raise ConfigError(f"{name}: n_points (the number of sensor points) must be >= 1; it is set from the training data")
        if in_channels < 1:
            raise ConfigError(f"{name}: the branch reads the input function, but the data have no input channels")
        groups = [int(g) for g in groups]
        if sum(groups) != in_channels:
            raise ConfigError(f"{name}: input_groups {groups} add up to {sum(groups)} channels but the data have {in_channels} input channel(s)")
        self.groups, self.n_points, self.basis = groups, n_points, basis
        width = basis * out_channels
        self.branches = nn.ModuleList(MLP(n_points * g, width, branch_width, branch_layers, act) for g in groups)
        self.trunk = nn.Sequential(MLP(coord_dim, width, trunk_width, trunk_layers, act), activation(act))
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def sensors(self, inputs: Tensor, mask: Tensor | None) -> Tensor:
        """``(B, n_points, c_in)``: the inputs with padded points zeroed and missing points zero-filled."""
        b, n, c = inputs.shape
        if n > self.n_points or (n < self.n_points and mask is None):
            raise ValueError(
                f"{type(self).__name__.lower()} was built for {self.n_points} sensor points but got {n}; its branch needs "
                "the input function at the training points (no change of resolution; fewer points only as padding with a mask)"
            )
        if mask is not None:
            inputs = inputs * mask[..., None].to(inputs.dtype)
        if n < self.n_points:
            inputs = torch.cat([inputs, inputs.new_zeros(b, self.n_points - n, c)], 1)
        return inputs

    def forward(
        self,
        coords: Tensor,
        inputs: Tensor,
        query: Tensor | None = None,
        mask: Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
    ) -> Tensor:
        check_batch(self, coords, inputs, query, mask)
        a = self.sensors(inputs, mask)
        b = None
        for branch, part in zip(self.branches, a.split(self.groups, dim=-1)):
            out = branch(part.flatten(1))  # (B, p * c_out)
            b = out if b is None else b * out
        y = coords if query is None else query
        t = self.trunk(y.to(inputs.dtype))  # (B, M, p * c_out)
        c = self.out_channels
        return torch.einsum("bcp,bmcp->bmc", b.view(-1, c, self.basis), t.view(*t.shape[:2], c, self.basis)) + self.bias


@register("deeponet")
class DeepONet(_BranchTrunk):
    """One branch on all input channels at the ``n_points`` sensors, one trunk (module docstring)."""

    def __init__(self, in_channels: int, out_channels: int, coord_dim: int, **hparams: int | str) -> None:
        super().__init__(in_channels, out_channels, coord_dim, [in_channels], **hparams)  # type: ignore[arg-type]


@register("mionet")
class MIONet(_BranchTrunk):
    """One branch per input function (``input_groups``), combined by the Hadamard product (module docstring)."""

    def __init__(
        self, in_channels: int, out_channels: int, coord_dim: int, *, input_groups: Sequence[int] | None, **hparams: int | str
    ) -> None:
        groups = [1] * in_channels if input_groups is None else list(input_groups)
        super().__init__(in_channels, out_channels, coord_dim, groups, **hparams)  # type: ignore[arg-type]


__all__ = ["DeepONet", "MIONet"]
