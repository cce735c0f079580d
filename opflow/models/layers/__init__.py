"""Layers shared by the operator models: the attention kernel library and point-wise MLP blocks.

Models select an attention kernel by name (``KERNELS``) through :class:`MultiHeadAttention` or the
pre-LN :class:`TransformerBlock`; see :mod:`opflow.models.layers.attention` for the formulas.
"""

from .attention import (
    KERNELS,
    MultiHeadAttention,
    TransformerBlock,
    check_kernel,
    nearest_features,
)
from .mlp import ACTIVATIONS, MLP, FeedForward, activation

__all__ = [
    "ACTIVATIONS",
    "KERNELS",
    "MLP",
    "FeedForward",
    "MultiHeadAttention",
    "TransformerBlock",
    "activation",
    "check_kernel",
    "nearest_features",
]
