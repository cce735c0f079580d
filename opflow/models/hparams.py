"""Hyperparameters of every architecture: names, types, ranges, defaults and enums, defined once.

Each architecture has a pydantic model here (a :class:`~opflow.schema.StrictModel`) and an entry in
:data:`ARCHITECTURES` naming the class that implements it. The workflow checks a config entry
``models.<name>: {arch: ..., <hyperparameters>}`` against these models when it loads, without
importing torch; :func:`opflow.models.base.build_model` builds the network from the same validated
values, so a model's constructor takes its hyperparameters as keyword-only arguments without
defaults.

Adding an architecture: a model module in ``opflow/models`` and, here, its hyperparameter model
plus one :data:`ARCHITECTURES` line (docs/models.md, "Adding a model"). Beside its hyperparameters a model
declares what it needs of the data (:mod:`opflow.models.needs`, checked by :mod:`opflow.compat`): ``needs`` (grid or point cloud,
dimensions, input sets, outputs elsewhere than the inputs) and, for requirements that depend on
its values (patches dividing the grid, Fourier modes the grid has), a ``misfits(data)`` method;
the workflow checks every (dataset, model) pair of a run against them when it loads.

The enumerations used by the layers (attention kernels, activations) are defined here too, so the
torch modules and the config check read the same lists.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from opflow.models.needs import DataNeeds, DataShape, modes_misfit, per_axis
from opflow.data.errors import ConfigError
from opflow.schema import Bool, NonNegFloat, NonNegInt, PosFloat, PosInt, StrictModel, literal_values, validate

#: attention kernels of :mod:`opflow.models.layers.attention`, name -> formula
KERNELS: dict[str, str] = {
    "softmax": "scaled dot-product softmax attention, optional quadrature weights (Vaswani 2017; Calvello et al. 2024)",
    "linear": "linear attention, phi = elu + 1 (Katharopoulos et al. 2020)",
    "normalized": "normalised linear attention, softmax of q and k over features (GNOT, Hao et al. 2023)",
    "efficient": "efficient attention, softmax of q over features and of k over points (Shen et al. 2021)",
    "cao_linear": "efficient attention divided by the number of points n: the 'linear' attention of Cao 2021's code",
    "galerkin": "Galerkin-type attention Q (LN(K)^T LN(V)) / n (Cao 2021)",
    "fourier": "Fourier-type attention (LN(Q) LN(K)^T) V / n (Cao 2021)",
    "nystrom": "Nystrom approximation of softmax attention with segment-mean landmarks (Xiong et al. 2021)",
}
Kernel = Literal[tuple(KERNELS)]  # type: ignore[valid-type]
#: point-wise activations of :mod:`opflow.models.layers.mlp`
Activation = Literal["gelu", "relu", "silu", "tanh", "elu", "softplus"]
#: ONO: how the orthogonal-attention integral over points is taken (mean = quadrature on [0, 1]^d)
OnoQuadrature = Literal["mean", "sum"]
#: ONO: the last stage's output map after its layer norm (the FFN, or one Linear as the release)
OnoHead = Literal["ffn", "linear"]
#: ONO: initialisation (PyTorch's defaults, or the release's truncated normal, std 0.02, zero biases)
OnoInit = Literal["torch", "trunc_normal"]
#: Nystrom pseudo-inverse initial scaling: per matrix, or over the batch (nystrom-attention package)
NystromPinv = Literal["matrix", "batch"]
#: TNO: quadrature rule of continuum attention
TnoQuadrature = Literal["trapezoid", "uniform"]
#: TNO: how per-sample global inputs enter
GlobalsMode = Literal["initial_point", "token"]
#: per-head layer norms of :class:`~opflow.models.layers.attention.MultiHeadAttention`: the
#: kernel's own pair (galerkin: K, V; fourier: Q, K; others none), none, or a named pair
HeadNorm = Literal["auto", "none", "qk", "kv"]
HEAD_NORMS: tuple[str, ...] = tuple(literal_values(HeadNorm))
#: Galerkin/Fourier Transformer normalisation: "head" = the kernel's per-head pair (Cao 2021 eqs.
#: 4-6), "qk" / "kv" = that pair for any kernel (the paper's softmax ablations), "regular" = the
#: post-LN block of eq. 7 without per-head norms
GtNorm = Literal["head", "qk", "kv", "regular"]
#: GNOT: the query coordinates of the query embedding and the gate, raw or standardised with the
#: training split's statistics (the release's ``--normalize_x unit``)
GnotCoordNorm = Literal["none", "unit_gaussian"]
#: FNO: a normalisation after each Fourier layer's sum (``batch``: BatchNorm, as the FNO code's NS2d script)
FnoNorm = Literal["none", "batch"]


class Hparams(StrictModel):
    """Base of the hyperparameter models; ``width`` / ``n_heads`` divisibility checked where both exist.

    ``needs``: what the architecture requires of every dataset (default: any point set in 1 to 3
    dimensions); :meth:`misfits`: what its hyperparameter values require of one dataset.
    """

    needs: ClassVar[DataNeeds] = DataNeeds()

    def misfits(self, data: DataShape) -> list[str]:
        """Why ``data`` does not fit these values, each reason with its fix (none in the base).

        Called by :func:`opflow.compat.check_pair` once ``data`` meets :attr:`needs`; checks of waste
        (not of failure) run only when ``data.training``.
        """
        return []

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

    Structural options (defaults: opflow's ONO; ``models.ono_official`` in config/default.yaml sets
    the authors' release, docs/ono.md lists each): ``encoder_hidden`` the encoder MLP's hidden
    width (None = ``width``; release ``2 width``); ``head`` the last stage's output map after its
    layer norm (``ffn``, or ``linear``: one Linear, the release); ``init`` (``torch`` defaults, or
    ``trunc_normal``: every Linear weight N(0, 0.02^2) truncated at +-2, biases 0, the release);
    ``qkv_bias`` biases of the NN block's Q/K/V (release: none); ``wq_bias`` bias of the orthogonal
    flow's W_Q (release: one); ``nystrom_conv`` kernel size of the ``nystrom-attention`` package's
    residual depth-wise convolution of V (0 = none; release 33), ``nystrom_pad`` its zero-token
    front padding to a multiple of ``num_landmarks``, ``nystrom_pinv`` its pseudo-inverse scaling
    (``matrix`` per matrix, ``batch`` over the batch as the package); the three ``nystrom_*`` need
    ``attention: nystrom``. ``efficient_scale``: the ``linear_attention_transformer`` package's
    ``d^-1/2`` on the query softmax, the release's "linear" block (needs ``attention: efficient``;
    ``models.ono_official_zeroshot``). ``point_index``: the encoder also reads each point's place in the
    sample's list, ``j / (M - 1)``, the release's elasticity script's "space" coordinate (samples of one
    point count whose lists correspond point by point; ``models.ono_official_elasticity``).
    """

    ortho_dim: PosInt = 16
    momentum: NonNegFloat = Field(0.9, lt=1)
    quadrature: OnoQuadrature = "mean"
    value_proj: Bool = True
    ortho_ridge: NonNegFloat = 1e-4
    cholesky_eps: PosFloat = 1e-6
    encoder_hidden: PosInt | None = None
    head: OnoHead = "ffn"
    init: OnoInit = "torch"
    qkv_bias: Bool = True
    wq_bias: Bool = False
    nystrom_conv: NonNegInt = 0
    nystrom_pad: Bool = False
    nystrom_pinv: NystromPinv = "matrix"
    efficient_scale: Bool = False
    point_index: Bool = False

    @model_validator(mode="after")
    def _efficient_scale(self) -> OnoHparams:
        if self.efficient_scale and self.attention != "efficient":
            raise ValueError(f"efficient_scale only applies to attention: efficient (got attention: {self.attention})")
        return self

    @model_validator(mode="after")
    def _nystrom_options(self) -> OnoHparams:
        if self.nystrom_conv % 2 == 0 and self.nystrom_conv:
            raise ValueError(f"nystrom_conv {self.nystrom_conv} must be odd (the convolution keeps the sequence length) or 0 (none)")
        set_ = [k for k, off in (("nystrom_conv", 0), ("nystrom_pad", False), ("nystrom_pinv", "matrix")) if getattr(self, k) != off]
        if set_ and self.attention != "nystrom":
            raise ValueError(f"{', '.join(set_)} only apply to attention: nystrom (got attention: {self.attention})")
        return self


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


class FnoHparams(Hparams):
    """``fno``: Li et al. 2021, "Fourier Neural Operator for Parametric PDEs" (ICLR; arXiv 2010.08895).

    Defaults: the 2D Darcy network of the authors' released code (12 modes, width 32, 4 Fourier
    layers, projection 128, GELU): 2,368,001 parameters, the count in Table 5 of the Galerkin
    Transformer paper (Cao 2021). ``modes`` is one count per grid axis, or one int for every axis;
    ``padding`` appends that many zero points to the end of every grid axis after the lifting and
    crops them before the projection (the released code pads non-periodic Darcy by 9, not Burgers' 2).
    """

    needs: ClassVar[DataNeeds] = DataNeeds(grid=True, query=False)

    modes: PosInt | list[PosInt] = 12
    width: PosInt = 32
    n_layers: PosInt = 4
    proj_width: PosInt = 128
    act: Activation = "gelu"
    padding: NonNegInt = 0
    #: ``batch``: a BatchNorm after each Fourier layer's sum, before its activation (the FNO code's NS2d
    #: script ``fourier_2d_time.py``); ``none``: the Darcy and Burgers networks
    norm: FnoNorm = "none"
    #: the hidden width of a two-layer lifting ``[a, x] -> lift_width -> width`` (activation between); 0: one linear map
    #: (the FNO code). The NeuralOperator library lifts with 2 x width
    lift_width: NonNegInt = 0
    #: the NeuralOperator library's block: after each Fourier layer's sum a channel MLP ``width -> channel_mlp x width
    #: -> width`` beside a soft-gating skip of the block's input (:class:`~opflow.models.fno.FNO`); 0: none (the FNO code)
    channel_mlp: NonNegFloat = 0.0

    def misfits(self, data: DataShape) -> list[str]:
        """``modes``: one per grid axis, at most the Fourier modes of the training grid (padding included)."""
        assert data.grid is not None
        m = per_axis(self.modes, len(data.grid), "modes")
        if isinstance(m, str):
            return [m]
        padded = tuple(n + self.padding for n in data.grid)
        why = modes_misfit("modes", self.modes, padded, f"the training grid (padded by {self.padding})" if self.padding else "the training grid")
        return [why] if why and data.training else []


class DeepONetHparams(Hparams):
    """``deeponet``: Lu, Jin, Pang, Zhang, Karniadakis 2021, "Learning nonlinear operators via
    DeepONet" (Nature Machine Intelligence 3, 218).

    Branch MLP on the input function at the ``n_points`` sensor points (``branch_layers`` hidden
    layers of ``branch_width``), trunk MLP on the query coordinates, ``basis`` terms per output
    channel. ``n_points`` is set from the data when the model is trained (leave it out of configs).
    """

    branch_width: PosInt = 128
    branch_layers: PosInt = 3
    trunk_width: PosInt = 128
    trunk_layers: PosInt = 3
    basis: PosInt = 128
    act: Activation = "gelu"
    n_points: NonNegInt = 0

    def misfits(self, data: DataShape) -> list[str]:
        """A hand-set ``n_points`` must be the data's (it is set from them)."""
        if self.n_points and data.training and data.n_points is not None and self.n_points != data.n_points:
            return [f"n_points {self.n_points} but the data have {data.n_points} input points; remove n_points (it is set from the data)"]
        return []


class MionetHparams(DeepONetHparams):
    """``mionet``: Jin, Meng, Lu 2022, "MIONet: learning multiple-input operators via tensor
    product" (SIAM J. Sci. Comput. 44, A3490).

    ``input_groups`` lists the channel count of each input function, in the order of the input
    channels (their sum must equal the input channels); one branch per group. ``None``: one group
    per input channel.
    """

    input_groups: list[PosInt] | None = None


class GtHparams(Hparams):
    """``gt``: the Galerkin Transformer, Cao 2021, "Choose a Transformer: Fourier or Galerkin" (NeurIPS).

    Defaults: the paper's 2D Darcy network (Appendix B, Table 5, Table 7; the authors' ``ex2_darcy``
    configuration): interpolation-CNN down-sampler to the coarse attention grid, 6 encoder layers
    (``width`` 128, 4 heads, FFN 256, coordinates concatenated in every head, init
    ``W = 1e-2 U + 1e-2 I``), up-sampler, spectral decoder (2 layers, 12 modes, width 32), point-wise
    head (128): 2,220,829 parameters for one input and one output channel.

    The coarse (attention) grid follows the input grid: ``coarse_sizes`` lists explicit
    ``[fine, coarse]`` sizes per axis (the paper's two configurations, 141 -> 43 and 211 -> 61, do
    not share one ratio); any other fine size n gets ``round(coarse_ratio * (n - 1)) + 1`` (0.3:
    141 -> 43, 85 -> 26). The intermediate grid of the CNNs is ``round(sqrt(fine * coarse))``.
    ``sampler: none`` runs the encoder on the input points themselves after a point-wise linear
    lift (the paper's 1D Burgers network); ``decoder: pointwise`` is the inverse-problem decoder.
    ``decoder_coords`` concatenates the coordinates before the decoder's first linear map.
    ``output_grid: coarse`` runs the up-sampler's convolution and the decoder on the attention grid
    (the inverse problem: its target lives on the coarse grid, Example 3); outputs at other points
    are interpolated from the decoder's grid. ``kv_dropout`` (``attention: galerkin``) drops entries of
    each head's ``K^T V / n`` in training, ``kv_dropout_eval`` in evaluation too: the authors' code does
    both with p = 0.5 in every run (a slip: the paper describes none; off by default).
    """

    width: PosInt = 128
    n_layers: PosInt = 6
    n_heads: PosInt = 4
    ffn_dim: PosInt = 256
    attention: Kernel = "galerkin"
    norm: GtNorm = "head"
    init_gain: NonNegFloat = 1e-2
    init_diagonal: NonNegFloat = 1e-2
    ffn_act: Activation = "relu"
    dropout: NonNegFloat = Field(0.1, lt=1)
    ffn_dropout: NonNegFloat = Field(0.05, lt=1)
    sampler: Literal["cnn", "none"] = "cnn"
    coarse_ratio: PosFloat = Field(0.3, le=1)
    coarse_sizes: list[tuple[PosInt, PosInt]] = [(141, 43), (211, 61)]
    down_act: Activation = "relu"
    down_dropout: NonNegFloat = Field(0.05, lt=1)
    up_act: Activation = "silu"
    up_dropout: NonNegFloat = Field(0.0, lt=1)
    decoder: Literal["spectral", "pointwise"] = "spectral"
    decoder_layers: PosInt = 2
    decoder_width: PosInt = 32
    modes: PosInt = 12
    proj_width: PosInt = 128
    decoder_coords: Bool = True
    decoder_act: Activation = "silu"
    decoder_dropout: NonNegFloat = Field(0.0, lt=1)
    output_grid: Literal["input", "coarse"] = "input"
    kv_dropout: NonNegFloat = Field(0.0, lt=1)
    kv_dropout_eval: Bool = False

    needs: ClassVar[DataNeeds] = DataNeeds(grid=True, dims=(1, 2))

    def misfits(self, data: DataShape) -> list[str]:
        """``sampler: cnn`` needs a 2-D grid; the spectral decoder's ``modes`` at most the training grid's."""
        assert data.grid is not None
        if self.sampler == "cnn" and len(data.grid) != 2:
            return [f"sampler cnn (the 2-D interpolation CNN) needs a 2-D grid, but it is {data.describe()}; set sampler: none"]
        if self.decoder == "spectral" and self.output_grid == "input" and data.training:
            why = modes_misfit("modes", self.modes, data.grid, "the training grid")
            return [why] if why else []
        return []

    @model_validator(mode="after")
    def _coarse_sizes(self) -> GtHparams:
        fine = [f for f, _ in self.coarse_sizes]
        if len(set(fine)) != len(fine):
            raise ValueError(f"coarse_sizes: fine size listed twice in {[list(p) for p in self.coarse_sizes]}")
        if any(c < 2 for _, c in self.coarse_sizes):
            raise ValueError(f"coarse_sizes: every coarse size must be >= 2, got {[list(p) for p in self.coarse_sizes]}")
        if self.kv_dropout and self.attention != "galerkin":
            raise ValueError(
                f"kv_dropout drops entries of K^T V, which only attention: galerkin forms (the Galerkin authors' code); "
                f"attention {self.attention!r} has none: set kv_dropout: 0"
            )
        if self.kv_dropout_eval and not self.kv_dropout:
            raise ValueError("kv_dropout_eval keeps kv_dropout on in evaluation, but kv_dropout is 0: set kv_dropout (0.5 in the authors' code) or drop kv_dropout_eval")
        return self


class FtHparams(GtHparams):
    """``ft``: the Fourier Transformer of Cao 2021: :class:`GtHparams` with the Fourier-type kernel
    (layer norms on Q and K) and its Darcy dropouts (Table 7: attention 0.1, FFN 0.1)."""

    attention: Kernel = "fourier"
    ffn_dropout: NonNegFloat = Field(0.1, lt=1)


class GnotHparams(Hparams):
    """``gnot``: Hao et al. 2023, "GNOT: A General Neural Operator Transformer for Operator Learning" (ICML).

    Defaults: the paper's Darcy2d column of Appendix B, Table 4: GELU, attention and embedding width
    96, expert FFN width 192 (``ffn_ratio`` 2), embedding / output MLPs with 3 layers
    (``mlp_layers``: residual hidden layers, as the release's ``--mlp-layers``); where the table gives
    a set the choice is ours: 4 blocks (of "3~4"; Sec. 4.3 calls 4 "an efficient choice"), 8 heads
    (of {4, 8}), 4 experts (of {1, 4}). ``n_experts: 1`` disables the geometric gate.
    ``cross_aggregate``: mean (the paper, eq. 7) or sum (the release) over the input functions;
    ``self_query_skip``: the release's ``q~`` skip in the self-attention (eq. 9 has none);
    ``globals_mode``: the parameter vector as its own token (``token``, the paper Sec. 3.3) or
    concatenated to the query points (``query``, the release); ``coord_norm``: the query
    coordinates fed to the query embedding and the gate as they are (``none``) or standardised per
    axis with the training split's mean and standard deviation (``unit_gaussian``, the release's
    ``--normalize_x unit``; :class:`opflow.models.gnot.CoordinateNormalizer`). ``global_channels``
    and ``input_sets`` (``[coordinate dim, channels]`` of each extra input point set) are set from
    the data. ``models.gnot_official`` in config/default.yaml is the release (docs/gnot.md).
    """

    width: PosInt = 96
    n_layers: PosInt = 4
    n_heads: PosInt = 8
    n_experts: PosInt = 4
    ffn_ratio: PosFloat = 2.0
    mlp_layers: NonNegInt = 3
    act: Activation = "gelu"
    cross_aggregate: Literal["mean", "sum"] = "mean"
    self_query_skip: Bool = False
    globals_mode: Literal["token", "query"] = "token"
    coord_norm: GnotCoordNorm = "none"
    global_channels: NonNegInt = 0
    input_sets: list[tuple[PosInt, NonNegInt]] = []

    needs: ClassVar[DataNeeds] = DataNeeds(input_sets=True)

    def misfits(self, data: DataShape) -> list[str]:
        """A hand-set ``input_sets`` must be the view's (it is set from the data)."""
        if not self.input_sets or not data.training:
            return []
        mine = [tuple(s) for s in self.input_sets]
        theirs = list(data.input_sets)
        known = None not in theirs
        if len(mine) != len(theirs) or (known and mine != theirs):
            view = [list(s) if s else "?" for s in theirs] if theirs else "none"
            return [
                f"input_sets {[list(s) for s in mine]} but the view's input sets are {view} ([coordinate dim, channels] each); "
                "remove input_sets from the model (it is set from the data)"
            ]
        return []


class _PatchHparams(Hparams):
    """Shared by ``vitno`` and ``fano`` (Calvello et al. 2024, Sections 3-4.4, Appendix B.2-B.3).

    Defaults: the paper's 416 x 416 runs (Section 6.2; the authors' run scripts
    ``paper_run_scripts/2d_experiments_{ViTNO,FANO}``): 13 patches per side (patch size 32 at 416),
    d_model 128, 6 post-LN layers, 8 heads, FFN 128, GELU, a final 64-mode spectral layer.
    ``smoothing_modes: 0`` drops that layer.
    """

    patches_per_side: PosInt | list[PosInt] = 13
    width: PosInt = 128
    n_layers: PosInt = 6
    n_heads: PosInt = 8
    ffn_dim: PosInt = 128
    act: Activation = "gelu"
    dropout: NonNegFloat = Field(0.0, lt=1)
    smoothing_modes: NonNegInt = 64

    needs: ClassVar[DataNeeds] = DataNeeds(grid=True, query=False)
    #: the per-patch Fourier modes of the subclass (``lift_modes`` / ``qkv_modes``)
    _patch_modes: ClassVar[str] = ""

    def misfits(self, data: DataShape) -> list[str]:
        """``patches_per_side`` divides every grid side (any grid the model runs on); on the training
        grid the per-patch modes fit the patch and ``smoothing_modes`` the grid."""
        assert data.grid is not None
        pps = per_axis(self.patches_per_side, len(data.grid), "patches_per_side")
        if isinstance(pps, str):
            return [pps]
        for a, (n, k) in enumerate(zip(data.grid, pps)):
            if n % k:
                divisors = [d for d in range(1, n + 1) if n % d == 0]
                return [
                    f"patches_per_side {k} does not divide the {n} points of grid axis {a} (a patch has n / {k} points); "
                    f"use a grid side that is a multiple of {k} (e.g. {(n // k) * k or k} or {(n // k + 1) * k}) or patches_per_side among {divisors}"
                ]
        if not data.training:
            return []
        patch = tuple(n // k for n, k in zip(data.grid, pps))
        out = [modes_misfit(self._patch_modes, getattr(self, self._patch_modes), patch, "a patch")]
        if self.smoothing_modes:
            out.append(modes_misfit("smoothing_modes", self.smoothing_modes, data.grid, "the training grid"))
        return [m for m in out if m]


class VitnoHparams(_PatchHparams):
    """``vitno``: ViT neural operator; ``lift_modes``: Fourier modes per axis of the per-patch lifting (12)."""

    lift_modes: PosInt | list[PosInt] = 12

    _patch_modes: ClassVar[str] = "lift_modes"


class FanoHparams(_PatchHparams):
    """``fano``: Fourier attention neural operator; ``qkv_modes``: modes per axis of the Fourier Q, K, V (9)."""

    qkv_modes: PosInt | list[PosInt] = 9

    _patch_modes: ClassVar[str] = "qkv_modes"


#: arch name -> (hyperparameter model, "module:Class" of the implementation, imported when built)
ARCHITECTURES: dict[str, tuple[type[Hparams], str]] = {
    "ono": (OnoHparams, "opflow.models.ono:ONO"),
    "tno": (TnoHparams, "opflow.models.tno:TNO"),
    "linear_transformer": (TransformerHparams, "opflow.models.transformer:LinearTransformer"),
    "gt": (GtHparams, "opflow.models.galerkin:GalerkinTransformer"),
    "ft": (FtHparams, "opflow.models.galerkin:FourierTransformer"),
    "fno": (FnoHparams, "opflow.models.fno:FNO"),
    "vitno": (VitnoHparams, "opflow.models.continuum:ViTNO"),
    "fano": (FanoHparams, "opflow.models.continuum:FANO"),
    "deeponet": (DeepONetHparams, "opflow.models.deeponet:DeepONet"),
    "mionet": (MionetHparams, "opflow.models.deeponet:MIONet"),
    "gnot": (GnotHparams, "opflow.models.gnot:GNOT"),
}


#: model classes registered at run time under their arch name (tests, plugins), filled by
#: :func:`opflow.models.base.register`. Kept here, torch-free, so that the lookups below need not
#: import :mod:`opflow.models.base` (which imports this module: no cycle)
REGISTERED: dict[str, type[Any]] = {}


def hparams_model(arch: str) -> type[Hparams]:
    """The hyperparameter model of ``arch``: built-in, or of a class registered at run time."""
    if arch in ARCHITECTURES:
        return ARCHITECTURES[arch][0]
    cls = REGISTERED.get(arch)
    if cls is None:
        raise ConfigError(f"unknown model arch {arch!r}; available: {available_archs()}")
    return cls.Hparams


def available_archs() -> list[str]:
    return sorted({*ARCHITECTURES, *REGISTERED})


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
    "FtHparams",
    "GnotCoordNorm",
    "GnotHparams",
    "GtHparams",
    "GtNorm",
    "HEAD_NORMS",
    "HeadNorm",
    "DeepONetHparams",
    "FnoHparams",
    "Hparams",
    "KERNELS",
    "Kernel",
    "MionetHparams",
    "OnoHparams",
    "REGISTERED",
    "TnoHparams",
    "TransformerHparams",
    "available_archs",
    "check_hparams",
    "hparams_model",
    "literal_values",
]
