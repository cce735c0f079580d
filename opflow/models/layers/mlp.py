"""Point-wise networks shared by the models: activations, MLPs and the transformer feed-forward.

Every block here acts on the last (feature) axis of a ``(..., features)`` tensor, point by point, so
it commutes with any permutation or padding of the points.
"""

from __future__ import annotations

from torch import nn

from opflow.data.errors import ConfigError

from .dropout import Dropout

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "gelu": nn.GELU,
    "relu": nn.ReLU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "softplus": nn.Softplus,
}


def activation(name: str) -> nn.Module:
    """A fresh activation module by config name; :class:`ConfigError` names the allowed ones."""
    if name not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}; allowed: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


class MLP(nn.Sequential):
    """``Linear -> act -> (Linear -> act) x (n_hidden - 1) -> Linear``: ``in_dim -> out_dim``.

    ``n_hidden`` counts the hidden layers (>= 1), all ``hidden_dim`` wide; ``dropout`` follows
    every activation. Used as the point-wise lifting (encoder) and projection (decoder) of the
    operator models.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_dim: int,
        n_hidden: int = 1,
        act: str = "gelu",
        dropout: float = 0.0,
    ) -> None:
        if n_hidden < 1:
            raise ConfigError(f"MLP needs n_hidden >= 1 hidden layers, got {n_hidden}")
        layers: list[nn.Module] = []
        dims = [in_dim] + [hidden_dim] * n_hidden
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), activation(act)]
            if dropout > 0:
                layers.append(Dropout(dropout))
        layers.append(nn.Linear(dims[-1], out_dim))
        super().__init__(*layers)


class FeedForward(MLP):
    """The two-layer transformer FFN: ``Linear(dim, ratio * dim) -> act -> Linear(., out_dim)``.

    ``out_dim`` defaults to ``dim``; ONO's last orthogonal-attention layer sets it to the number of
    output channels so that its FFN is the projection ``P`` (ONO paper, eq. 6 and the sentence after).
    """

    def __init__(self, dim: int, ratio: float = 1.0, out_dim: int | None = None, act: str = "gelu", dropout: float = 0.0) -> None:
        hidden = int(round(dim * ratio))
        if hidden < 1:
            raise ConfigError(f"FFN ratio {ratio} gives no hidden units for width {dim}; use ratio >= {1 / dim:.3g}")
        super().__init__(dim, dim if out_dim is None else out_dim, hidden, n_hidden=1, act=act, dropout=dropout)

