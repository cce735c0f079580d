"""Layers shared by the operator models: the attention kernel library, point-wise MLP blocks,
dropout whose mask is cheap on the CPU (:class:`Dropout`) and the FNO spectral convolution
(:class:`SpectralConv`, :mod:`opflow.models.layers.spectral`).

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
from .dropout import Dropout
from .mlp import ACTIVATIONS, MLP, FeedForward, activation
from .spectral import SpectralConv

__all__ = [
    "ACTIVATIONS",
    "Dropout",
    "KERNELS",
    "MLP",
    "FeedForward",
    "MultiHeadAttention",
    "SpectralConv",
    "TransformerBlock",
    "activation",
    "check_kernel",
    "nearest_features",
]
