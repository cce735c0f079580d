"""Hyperparameters of every architecture: names, types, ranges, defaults and enums, defined once.

Each architecture has a pydantic model here (a :class:`~opflow.schema.StrictModel`) and an entry in
:data:`ARCHITECTURES` naming the class that implements it. The workflow checks a config entry
``models.<name>: {arch: ..., <hyperparameters>}`` against these models when it loads, without
importing torch; :func:`opflow.models.base.build_model` builds the network from the same validated
values, so a model's constructor takes its hyperparameters as keyword-only arguments without
defaults.

Adding an architecture: a model module in ``opflow/models`` and, here, its hyperparameter model
plus one :data:`ARCHITECTURES` line (README, "Adding a model").

The enumerations used by the layers (attention kernels, activations) are defined here too, so the
torch modules and the config check read the same lists.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from opflow.data.errors import ConfigError
from opflow.schema import Bool, NonNegFloat, NonNegInt, PosFloat, PosInt, StrictModel, literal_values, validate

#: attention kernels of :mod:`opflow.models.layers.attention`, name -> formula
KERNELS: dict[str, str] = {
    "softmax": "scaled dot-product softmax attention, optional quadrature weights (Vaswani 2017; Calvello et al. 2024)",
    "linear": "linear attention, phi = elu + 1 (Katharopoulos et al. 2020)",
    "normalized": "normalised linear attention, softmax of q and k over features (GNOT, Hao et al. 2023)",
    "efficient": "efficient attention, softmax of q over features and of k over points (Shen et al. 2021)",
    "galerkin": "Galerkin-type attention Q (LN(K)^T LN(V)) / n (Cao 2021)",
    "fourier": "Fourier-type attention (LN(Q) LN(K)^T) V / n (Cao 2021)",
    "nystrom": "Nystrom approximation of softmax attention with segment-mean landmarks (Xiong et al. 2021)",
}
Kernel = Literal[tuple(KERNELS)]  # type: ignore[valid-type]
#: point-wise activations of :mod:`opflow.models.layers.mlp`
Activation = Literal["gelu", "relu", "silu", "tanh", "elu", "softplus"]
#: ONO: how the orthogonal-attention integral over points is taken (mean = quadrature on [0, 1]^d)
OnoQuadrature = Literal["mean", "sum"]
#: TNO: quadrature rule of continuum attention
TnoQuadrature = Literal["trapezoid", "uniform"]
#: TNO: how per-sample global inputs enter
GlobalsMode = Literal["initial_point", "token"]


class Hparams(StrictModel):
    """Base of the hyperparameter models; ``width`` / ``n_heads`` divisibility checked where both exist."""

    @model_validator(mode="after")
    def _heads_divide_width(self) -> Hparams:
        width, heads = getattr(self, "width", None), getattr(self, "n_heads", None)
        if width is not None and heads is not None and width % heads:
            raise ValueError(f"width {width} is not a multiple of n_heads {heads}; each head takes width / n_heads features")
        return self


class TransformerHparams(Hparams):
    """``linear_transformer``: encoder MLP, pre-LN attention blocks, MLP decoder.

    The defaults equal ONO's Darcy configuration, so the two differ only by the orthogonal flow.
    """

    width: PosInt = 128
    n_layers: PosInt = 8
    n_heads: PosInt = 8
    ffn_ratio: PosFloat = 1.0
    attention: Kernel = "linear"
    dropout: NonNegFloat = Field(0.0, lt=1)
    act: Activation = "gelu"
    #: Nystrom kernel only: landmark count and Moore-Penrose iterations
    num_landmarks: PosInt = 256
    pinv_iterations: PosInt = 6


class OnoHparams(TransformerHparams):
    """``ono``: Xiao et al. 2024, "Improved Operator Learning by Orthogonal Attention" (ICML).

    ``ortho_dim`` is k, the number of orthogonal eigenfunctions; ``momentum`` weighs the old
    running covariance; ``quadrature`` mean or sum over points; ``value_proj`` the W_V of the
    orthogonal flow; ``ortho_ridge`` and ``cholesky_eps`` the whitening's ridge and jitter.
    """

    ortho_dim: PosInt = 16
    momentum: NonNegFloat = Field(0.9, lt=1)
    quadrature: OnoQuadrature = "mean"
    value_proj: Bool = True
    ortho_ridge: NonNegFloat = 1e-4
    cholesky_eps: PosFloat = 1e-6


class TnoHparams(Hparams):
    """``tno``: Calvello, Kovachki, Levine, Stuart 2024, "Continuum attention for neural operators".

    ``global_channels`` is set from the data (per-sample global inputs); leave it out of configs.
    """

    width: PosInt = 128
    n_layers: PosInt = 6
    n_heads: PosInt = 8
    ffn_dim: PosInt = 128
    act: Activation = "gelu"
    dropout: NonNegFloat = Field(0.0, lt=1)
    quadrature: TnoQuadrature = "trapezoid"
    global_channels: NonNegInt = 0
    globals_mode: GlobalsMode = "initial_point"
    global_weight: PosFloat = 1.0


#: arch name -> (hyperparameter model, "module:Class" of the implementation, imported when built)
ARCHITECTURES: dict[str, tuple[type[Hparams], str]] = {
    "ono": (OnoHparams, "opflow.models.ono:ONO"),
    "tno": (TnoHparams, "opflow.models.tno:TNO"),
    "linear_transformer": (TransformerHparams, "opflow.models.transformer:LinearTransformer"),
}


def hparams_model(arch: str) -> type[Hparams]:
    """The hyperparameter model of ``arch``: built-in, or of a class registered at run time."""
    if arch in ARCHITECTURES:
        return ARCHITECTURES[arch][0]
    from opflow.models.base import registered  # only models registered outside this table (tests, plugins)

    cls = registered(arch)
    if cls is None:
        raise ConfigError(f"unknown model arch {arch!r}; available: {available_archs()}")
    return cls.Hparams


def available_archs() -> list[str]:
    import sys

    extra: list[str] = []
    if "opflow.models.base" in sys.modules:  # runtime registrations, only if models were imported
        extra = list(sys.modules["opflow.models.base"].registered_names())
    return sorted({*ARCHITECTURES, *extra})


def check_hparams(arch: str, values: dict[str, Any], where: str = "model") -> Hparams:
    """Validate ``values`` (the entry without ``arch``) against ``arch``'s model; :class:`ConfigError` names the key."""
    model = hparams_model(arch)
    try:
        return validate(model, values, where)
    except ConfigError as e:
        msg = str(e)
        if "unknown key" in msg:  # say whose hyperparameters these are
            msg = msg.replace("unknown key", f"{arch} has no hyperparameter", 1)
        raise ConfigError(msg) from None


__all__ = [
    "ARCHITECTURES",
    "Activation",
    "Hparams",
    "KERNELS",
    "Kernel",
    "OnoHparams",
    "TnoHparams",
    "TransformerHparams",
    "available_archs",
    "check_hparams",
    "hparams_model",
    "literal_values",
]
