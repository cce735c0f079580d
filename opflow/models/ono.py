"""ONO, the Orthogonal Neural Operator (Xiao, Hao, Lin, Deng, Su, "Improved operator learning by
orthogonal attention", ICML 2024; arXiv 2310.12487, Section 3.2 and Appendix A).

Two flows of ``n_layers`` stages. The encoder lifts each point ``[x_j, f(x_j)]`` to two width-``d``
states, ``g`` (bottom flow) and ``h`` (top flow). Stage ``l``:

* NN block (bottom flow, eq. 3), a pre-LN transformer block with a selectable attention kernel::

      g~ = g + Attn(LN(g)),   g <- g~ + FFN(LN(g~))

* orthogonal attention (top flow, eqs. 4-6)::

      psi = ort(g W_Q)                                   (M x k "neural eigenfunctions")
      h~  = psi diag(softplus(mu)) [q (psi^T (h W_V))]   (the kernel integral, eq. 5)
      h  <- FFN(LN(h~ + h))                              (eq. 6)

  and the last stage's FFN maps to the output channels (it is the projection ``P``).
* ``ort`` (eqs. 7-9): Cholesky whitening with the *uncentred* covariance of the projected features,
  ``C = mean over samples of (1/M) sum_j g^_j g^_j^T`` (= the paper's ``(1/(N M)) sum_i g^_i^T g^_i``
  for equal point counts; with padding, each sample's mean over its real points), ``C = L L^T``,
  ``psi = g^ L^{-T}``, so that ``(1/(N M)) sum_i psi_i^T psi_i = I`` on the batch (with the ridge
  below: ``I - delta L^{-1} L^{-T}``, i.e. directions of variance << delta are damped, not blown up
  to unit variance). Training mode whitens with the batch's ``C`` (gradient flows through it) and
  updates, without gradient, the buffer ``running_cov <- momentum * running_cov + (1 - momentum) * C`` (the convention of the
  authors' code, ``momentum`` = weight of the old value, default 0.9; the first training batch
  initialises the buffer). Evaluation mode whitens with ``running_cov``, so each sample's output is
  independent of the rest of its batch. The Cholesky factorisation (``torch.linalg.cholesky_ex``, in
  float64 except on MPS) takes jitter ``cholesky_eps * tr(C)/k * 10^j``, the smallest j = 0, 1, ... 7
  that works, when ``C`` is not numerically positive definite (rank-deficient features); the
  candidates are factorised together and the choice is made on the device, so a training step never
  waits for the GPU here (:mod:`opflow.hostsync`).
* ridge: ``C`` is factorised as ``C + delta I``, ``delta = ortho_ridge * tr(C)/k`` (default 1e-4),
  in training and evaluation alike. Not in the paper; without it, features of near-zero variance
  (the covariance of a freshly initialised ONO has condition numbers of 1e6-1e9) are amplified to
  unit variance, and because the EMA buffer never equals the last batch's covariance exactly,
  evaluation mode whitens those directions differently from training: in a small overfitting run
  (1D, 4 samples) the evaluation-mode error was 8x the training-mode error (2.5e-2 vs 3.1e-3);
  with ``ortho_ridge=1e-4`` they agree (4.7e-3 vs 4.5e-3). ``ortho_ridge=0`` is the paper's exact
  whitening.

Quadrature ``q`` of ``psi^T h``: with ``C`` normalised by ``1/(N M)``, ``psi`` has unit mean square
per point, i.e. its columns approximate functions orthonormal in ``L^2`` of a unit-measure domain;
the kernel integral ``int kappa(x, y) h(y) dy`` (eq. 12) is then discretised by the *mean*
``(1/M) sum_j psi(x_j) h(x_j)``. ``quadrature="mean"`` (default) uses that, so the operator does not
change with the number of points, which zero-shot super-resolution needs (train at 43 x 43, test up
to 421 x 421). ``quadrature="sum"`` is the paper's eq. 5 and the authors' code (a plain sum, which
grows like ``M``; after the following LN it mostly shifts the balance between ``h~`` and the
residual ``h`` when the resolution changes). At a fixed resolution the two differ only by a
reparametrisation of ``mu``. With padding, ``M`` is each sample's number of real points.

Query points other than the input points (Appendix A's cross-attention form): the model keeps a
*query stream* beside the input stream. Query tokens are lifted by the same encoder from
``[y, f(nearest input point to y)]``; in every stage they pass through the same NN block attending
to the input tokens (cross-attention with the block's weights), their eigenfunction values are
``psi(y) = g(y) W_Q L^{-T}`` with the ``L`` of the input points, and the top flow updates them by
``h(y) <- FFN(LN(psi(y) diag(softplus(mu)) q(psi(X)^T h(X) W_V) + h(y)))``. Query tokens read the
input tokens and are never read, so with ``query == coords`` this is exactly the self form (tested);
elsewhere the only local information at ``y`` is the nearest input value, everything else comes
through attention to the input points. (The paper's eq. 20 drops the residual at the first stage
instead; that cannot reproduce the self form and leaves ``g(y)`` undefined.) ``forward`` uses the
self form whenever ``query`` is ``None`` or equal to ``coords``.

Hyperparameters and where they come from. "paper" = arXiv v4 Section 4 "Implementation details";
"release" = the authors' official repository (``Orthogonal-Neural-operator`` of the zhijie-group
organisation): its README Darcy command ``--n-hidden 128 --n-heads 8 --n-layers 10 --attn_type
nystrom --orth 1 --psi_dim 32 --mlp_ratio 2 --batch-size 4 --max_grad_norm 0.1``,
``ONOmodel2.ONO2`` and the ``nystrom-attention`` package it uses. ``models.ono_official``
(:data:`RELEASE_DARCY`) is the release, 2,027,985 parameters, equal to it number for number
(``benchmarks/ono_official.py``); ``ono`` is opflow's model, and each departure below is one
option (docs/ono.md: why, and the measured ablation of the orthogonal-flow choices):

==================  ===============  ============  ===================================================
name                ``ono``          release       note
==================  ===============  ============  ===================================================
width               128              128           paper, release
n_layers            8                10            ours: the paper's ONO-8 (~1M parameters)
ortho_dim (k)       16               32            paper: 8 or 16 (Table 2 runtime uses 16)
n_heads             8                8
ffn_ratio           1                2             ours: ~1M parameters at 8 layers
attention           "linear"         "nystrom"     paper: Linear Transformer or Nystrom block;
                                                   the release's "linear" block (not used for
                                                   Darcy) is the ``efficient`` kernel times
                                                   ``d^-1/2``, not the ``linear`` (elu + 1) one
num_landmarks       256              256           package default; nystrom only
pinv_iterations     6                6             package default; nystrom only
momentum            0.9              0.9
quadrature          "mean"           "sum"         ours: resolution-independent (above)
value_proj          True             False         paper eq. 5 has ``W_V``; the release has none
ortho_ridge         1e-4             0             ours (above)
cholesky_eps        1e-6             (1e-6 abs.)   release: absolute jitter 1e-6 * 10^j, float32
encoder_hidden      None (= width)   256           MLP ``3 -> 128 -> 256`` vs ``3 -> 256 -> 256``
head                "ffn"            "linear"      release: LN then one Linear(width -> out)
init                "torch"          trunc_normal  release: N(0, 0.02^2) weights, zero biases
qkv_bias            True             False         the package's ``to_qkv`` has no bias
wq_bias             False            True          eq. 4 has none; the release's ``proj`` has one
nystrom_conv        0                33            the package's depth-wise residual conv of V
nystrom_pad         False            True          the package's zero tokens in front
nystrom_pinv        "matrix"         "batch"       the package's pseudo-inverse scaling
point_index         False            (elasticity)  ``ela_example.py`` feeds ``[j / (M - 1), x, y]``
==================  ===============  ============  ===================================================

Why ``ono`` keeps PyTorch's default (fan-in scaled) initialisation: the release's N(0, 0.02^2)
makes the first layers nearly linear in the 3 input numbers, so the covariance ``C`` starts with a
condition number near 1e9 (about 1e6-1e7 with the default), and in our small overfitting runs it
trained markedly slower. The release's training loss adds 0.1 x the relative L2 error of the
central-difference derivatives (``training.grad_weight: 0.1``, :func:`opflow.metrics.gradient_loss`).
Training recipe (not part of the model): AdamW, OneCycle peak 1e-3, weight decay 1e-5, gradient
clipping 0.1, 500 epochs, batch 4 (release Darcy) or 2-16 (paper).
"""

from __future__ import annotations

import logging
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from opflow.data.errors import ConfigError
from opflow.hostsync import add_fault_counters, checks_on

from .base import OperatorModel, register
from .hparams import OnoQuadrature, literal_values
from .layers import MLP, FeedForward, TransformerBlock, nearest_features
from .transformer import check_batch, is_self_query

QUADRATURES = tuple(literal_values(OnoQuadrature))

#: The authors' released Darcy model as ``ono`` hyperparameters (``models.ono_official`` in
#: config/default.yaml): the README command ``--n-hidden 128 --n-heads 8 --n-layers 10 --attn_type
#: nystrom --orth 1 --psi_dim 32 --mlp_ratio 2`` with ``ONOmodel2.ONO2`` and the ``nystrom-attention``
#: package's defaults (256 landmarks, 6 pseudo-inverse iterations, residual kernel 33): 2,027,985
#: parameters for one input and one output channel in 2D, the count the release prints.
RELEASE_DARCY: dict[str, object] = {
    "width": 128,
    "n_layers": 10,
    "n_heads": 8,
    "ortho_dim": 32,
    "ffn_ratio": 2.0,
    "attention": "nystrom",
    "num_landmarks": 256,
    "pinv_iterations": 6,
    "momentum": 0.9,
    "quadrature": "sum",
    "value_proj": False,
    "ortho_ridge": 0.0,
    "encoder_hidden": 256,
    "head": "linear",
    "init": "trunc_normal",
    "qkv_bias": False,
    "wq_bias": True,
    "nystrom_conv": 33,
    "nystrom_pad": True,
    "nystrom_pinv": "batch",
}

#: The authors' released zero-shot super-resolution model (README command of ``space_gen.py``:
#: ``--n-hidden 128 --n-heads 8 --n-layers 8 --orth 1 --psi_dim 16 --batch-size 8``, no
#: ``--attn_type``, so ``ONO2`` builds the ``linear_attention_transformer`` package's ``SelfAttention``
#: (0.19.1, the release's requirements): ``efficient`` attention times ``d^-1/2``, Q/K/V without
#: bias, ``mlp_ratio`` 1). The rest of ``ONO2`` is :data:`RELEASE_DARCY`'s. 1,110,401 parameters for
#: one input and one output channel in 2D, the count the release prints (``benchmarks/ono_official.py
#: --release-config zeroshot``).
RELEASE_ZEROSHOT: dict[str, object] = {
    **{k: v for k, v in RELEASE_DARCY.items() if not k.startswith(("nystrom", "num_landmarks", "pinv"))},
    "n_layers": 8,
    "ortho_dim": 16,
    "ffn_ratio": 1.0,
    "attention": "efficient",
    "efficient_scale": True,
}

#: The authors' released elasticity model (README command of ``ela_example.py``: ``--n-hidden 128
#: --attn_type nystrom --n-heads 8 --n-layers 8 --orth 1 --psi_dim 8 --batch-size 8 --max_grad_norm
#: 0.1``, ``mlp_ratio`` 1): :data:`RELEASE_DARCY`'s structure with 8 layers, k = 8, FFN ratio 1, and
#: the script's input encoding, ``point_index``: ``ONO2(space_dim=1, fun_dim=2)`` is fed
#: ``x = linspace(0, 1, 972)``, each Gauss point's place in the sample's list, as its "space"
#: coordinate and the point's (x, y) as its input function, so the encoder reads
#: ``[j / (M - 1), x_j, y_j]``. 1,104,193 parameters for the 972-point cloud with one output, the
#: count the release prints (``benchmarks/ono_official.py --release-config elasticity``).
RELEASE_ELASTICITY: dict[str, object] = {
    **RELEASE_DARCY,
    "n_layers": 8,
    "ortho_dim": 8,
    "ffn_ratio": 1.0,
    "point_index": True,
}


#: what :func:`jittered_cholesky_ex`'s ``tries`` means beyond the jitter index
CHOLESKY_FAILED_MESSAGE = "ONO orthogonalisation: Cholesky failed even with the largest jitter; the features are degenerate"
NONFINITE_COVARIANCE_MESSAGE = (
    "ONO orthogonalisation: the feature covariance has NaN/inf entries (training diverged or the "
    "inputs are not finite); lower the learning rate, clip gradients, or check the data"
)
JITTER_MESSAGE = "ONO orthogonalisation: feature covariance not positive definite; added jitter eps*tr(C)/k*10^j to its diagonal"


def jittered_cholesky_ex(c: Tensor, eps: float = 1e-6, max_tries: int = 8) -> tuple[Tensor, Tensor, Tensor]:
    """Lower Cholesky factor of the symmetric ``c (k, k)`` with jitter where needed, without a host-device wait.

    The candidates are ``c`` itself, then ``c + eps * (tr(c)/k) * 10^j I`` for j = 0..max_tries-1
    (``tr(c)/k`` replaced by 1 when it is not positive). A factorisation counts as failed when
    ``cholesky_ex`` reports it or when a pivot ``L_ii^2`` falls below the round-off level
    ``k * machine_eps * max_i c_ii`` (an exactly singular matrix often "succeeds" with such a pivot,
    and whitening would then blow rounding noise up to unit variance). All candidates are factorised
    at once, without gradient (``max_tries + 1`` small matrices), the first that succeeds is chosen on
    the device, and that one is factorised again with the gradient flowing to ``c`` (the jitter is a
    constant, as it always was). Returns ``(L, tries, nonfinite)``: ``tries`` = 0 for ``c`` itself,
    ``j + 1`` for jitter ``10^j``, ``max_tries + 1`` when every candidate failed (``L`` is then the
    last candidate's, not a valid factor); ``nonfinite`` is true when ``c`` has a NaN or inf.
    """
    k = c.shape[-1]
    eye = torch.eye(k, dtype=c.dtype, device=c.device)
    with torch.no_grad():
        cd = c.detach()
        diag = cd.diagonal()
        floor = k * torch.finfo(c.dtype).eps * diag.amax().clamp_min(0)
        trace = diag.sum() / k
        scale = torch.where(trace > 0, trace, torch.ones_like(trace))
        # (eps * scale) * 10^j, rounded as the host-side loop before it did: the same jitter to the last bit
        powers = 10.0 ** torch.arange(max_tries, dtype=c.dtype, device=c.device)
        jitter = torch.cat([torch.zeros(1, dtype=c.dtype, device=c.device), (eps * scale) * powers])  # (T,)
        L_all, info = torch.linalg.cholesky_ex(cd + jitter[:, None, None] * eye)
        ok = (info == 0) & ((L_all.diagonal(dim1=-2, dim2=-1) ** 2).amin(-1) > floor)
        any_ok = ok.any()
        first = torch.argmax(ok.to(torch.int32))  # the first True (argmax returns the first maximum)
        choice = torch.where(any_ok, first, torch.full_like(first, max_tries))
        tries = torch.where(any_ok, first, torch.full_like(first, max_tries + 1))
        nonfinite = ~torch.isfinite(cd).all()
    L, _ = torch.linalg.cholesky_ex(c + jitter.index_select(0, choice.reshape(1)) * eye)
    return L, tries, nonfinite


def jittered_cholesky(c: Tensor, eps: float = 1e-6, max_tries: int = 8) -> Tensor:
    """:func:`jittered_cholesky_ex` with its checks on the host (one wait for the device).

    Warns (``RuntimeWarning``) when jitter was added; raises ``FloatingPointError`` for a non-finite
    ``c`` and ``RuntimeError`` if every try fails.
    """
    L, tries, nonfinite = jittered_cholesky_ex(c, eps, max_tries)
    t, bad = (int(v) for v in torch.stack([tries, nonfinite.to(tries.dtype)]).tolist())
    if bad:
        raise FloatingPointError(NONFINITE_COVARIANCE_MESSAGE)
    if t > max_tries:
        raise RuntimeError(f"{CHOLESKY_FAILED_MESSAGE} ({eps * 10.0 ** (max_tries - 1):.3g} x tr(C)/k)")
    if t:
        warnings.warn(JITTER_MESSAGE, RuntimeWarning, stacklevel=2)
    return L


def _release_init(m: nn.Module) -> None:
    """The release's ``_init_weights`` (``ONO2.initialize_weights``): every Linear weight drawn from
    N(0, 0.02^2) truncated at +-2 (timm's ``trunc_normal_``, the same bounds as torch's), biases 0;
    layer norms weight 1, bias 0. Everything else (the residual convolution, ``mu``) is left alone."""
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


def _work_dtype(device: torch.device) -> torch.dtype:
    """Precision of the k x k covariance algebra: float64, except on MPS (no float64 there)."""
    return torch.float32 if device.type == "mps" else torch.float64


class CholeskyWhitening(nn.Module):
    """``ort`` of ONO (eqs. 7-9): the matrix ``W = L^{-T}`` (``C = L L^T``) such that ``psi = g^ W``.

    ``forward(g_hat (B, M, k), mask (B, M) | None) -> W (k, k)``, ``W^T (C + delta I) W = I`` with
    ``delta = ridge * tr(C)/k``. See the module docstring for the covariance, the EMA buffer
    ``running_cov`` (``momentum`` = weight of the old value) and the train/eval behaviour. ``num_batches_tracked`` counts the training batches seen; the first one
    initialises the buffer (before any, the buffer is the identity).

    The factorisation (:func:`jittered_cholesky_ex`) makes no host-device wait. Its outcome is checked
    on the host at once (a warning when jitter was added, an error when it failed) only where
    :func:`opflow.hostsync.checks_on`; in a training step it is counted on the device instead
    (``fault_counts``: jitter added, failed, non-finite covariance) and reported once per epoch.
    """

    #: jitter tries of the factorisation, 10^0 .. 10^(MAX_TRIES - 1) times eps * tr(C)/k
    MAX_TRIES = 8

    def __init__(self, dim: int, momentum: float = 0.9, eps: float = 1e-6, ridge: float = 0.0) -> None:
        super().__init__()
        self.ridge = ridge
        if not 0.0 <= momentum < 1.0:
            raise ConfigError(f"ONO momentum must be in [0, 1) (weight of the old covariance), got {momentum}")
        self.momentum, self.eps = momentum, eps
        self.register_buffer("running_cov", torch.eye(dim, dtype=torch.float64))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        add_fault_counters(
            self,
            ((logging.WARNING, JITTER_MESSAGE), (logging.ERROR, CHOLESKY_FAILED_MESSAGE), (logging.ERROR, NONFINITE_COVARIANCE_MESSAGE)),
        )

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        # ``running_cov`` stays in float64 (float32 on MPS, which has no float64) whatever dtype the
        # model is cast to: a float32 copy of a nearly singular covariance can turn indefinite, and
        # evaluation would then whiten differently from training.
        cov = self._buffers.pop("running_cov")
        try:
            super()._apply(fn, recurse)
        finally:
            device = fn(torch.zeros((), device=cov.device)).device
            self._buffers["running_cov"] = cov.to(device=device, dtype=_work_dtype(device))
        return self

    @staticmethod
    def covariance(g_hat: Tensor, mask: Tensor | None = None) -> Tensor:
        """Uncentred covariance: mean over samples of ``(1/M_b) sum_{real j} g^_bj g^_bj^T``.

        Accumulated in float64 (float32 on MPS): ``k`` is small, and float32 rounding can make a
        nearly rank-deficient covariance indefinite.
        """
        g_hat = g_hat.to(_work_dtype(g_hat.device))
        B, M, _ = g_hat.shape
        if mask is None:
            return torch.einsum("bmk,bml->kl", g_hat, g_hat) / (B * M)
        g_hat = torch.where(mask[..., None], g_hat, 0.0)
        w = mask.to(g_hat.dtype) / mask.sum(-1, keepdim=True).to(g_hat.dtype)  # (B, M), rows sum to 1
        return torch.einsum("bmk,bml,bm->kl", g_hat, g_hat, w) / B

    def forward(self, g_hat: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.training:
            c = self.covariance(g_hat, mask)
            with torch.no_grad():
                cd = c.detach()
                first = self.num_batches_tracked == 0
                self.running_cov.copy_(torch.where(first, cd, self.momentum * self.running_cov + (1 - self.momentum) * cd))
                self.num_batches_tracked += 1
        else:
            c = self.running_cov
        work = _work_dtype(c.device)
        c = c.to(work)
        c = 0.5 * (c + c.mT)
        if self.ridge > 0:
            k = c.shape[-1]
            c = c + (self.ridge * c.diagonal().sum().detach() / k) * torch.eye(k, dtype=c.dtype, device=c.device)
        if checks_on():
            L = jittered_cholesky(c, self.eps)
        else:  # counted on the device, reported at the trainer's one wait per epoch (opflow.hostsync)
            L, tries, nonfinite = jittered_cholesky_ex(c, self.eps, self.MAX_TRIES)
            failed = (tries > self.MAX_TRIES) & ~nonfinite
            jittered = (tries > 0) & (tries <= self.MAX_TRIES)
            self.fault_counts += torch.stack([jittered, failed, nonfinite]).to(self.fault_counts.dtype)
        eye = torch.eye(L.shape[-1], dtype=work, device=L.device)
        return torch.linalg.solve_triangular(L, eye, upper=False).mT.to(g_hat.dtype)


class OrthogonalAttention(nn.Module):
    """One top-flow stage of ONO (eqs. 4-6): eigenfunctions ``psi`` from ``g``, kernel integral, FFN."""

    def __init__(
        self,
        width: int,
        ortho_dim: int,
        out_dim: int,
        ffn_ratio: float = 1.0,
        momentum: float = 0.9,
        quadrature: str = "mean",
        value_proj: bool = True,
        act: str = "gelu",
        dropout: float = 0.0,
        eps: float = 1e-6,
        ridge: float = 1e-4,
        wq_bias: bool = False,
        linear_out: bool = False,
    ) -> None:
        super().__init__()
        if quadrature not in QUADRATURES:
            raise ConfigError(f"ONO quadrature must be one of {list(QUADRATURES)}, got {quadrature!r}")
        self.quadrature = quadrature
        self.w_q = nn.Linear(width, ortho_dim, bias=wq_bias)
        self.ort = CholeskyWhitening(ortho_dim, momentum, eps, ridge)
        self.mu = nn.Parameter(torch.zeros(ortho_dim))
        self.w_v = nn.Linear(width, width, bias=False) if value_proj else nn.Identity()
        self.ln = nn.LayerNorm(width)
        # the FFN of eq. 6, or (``linear_out``, the release's last stage) one Linear to the outputs
        self.ffn = nn.Linear(width, out_dim) if linear_out else FeedForward(width, ffn_ratio, out_dim, act=act, dropout=dropout)

    def eigenfunctions(self, g: Tensor, mask: Tensor | None = None, g_query: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``psi = ort(g W_Q)`` at the input points and, with ``g_query``, ``g_query W_Q L^{-T}``."""
        g_hat = self.w_q(g)
        w = self.ort(g_hat, mask)
        return g_hat @ w, (None if g_query is None else self.w_q(g_query) @ w)

    def coefficients(self, psi: Tensor, h: Tensor, mask: Tensor | None = None) -> Tensor:
        """``diag(softplus(mu)) q(psi^T (h W_V))``, ``(B, k, width)``; padded points excluded."""
        hv = self.w_v(h)
        if mask is not None:
            hv = torch.where(mask[..., None], hv, 0.0)
        c = psi.mT @ hv
        if self.quadrature == "mean":
            n = mask.sum(-1).to(c.dtype)[:, None, None] if mask is not None else h.shape[1]
            c = c / n
        return F.softplus(self.mu)[:, None] * c

    def update(self, h: Tensor, psi: Tensor, coeff: Tensor) -> Tensor:
        """``FFN(LN(psi coeff + h))`` (eq. 6)."""
        return self.ffn(self.ln(psi @ coeff + h))


@register("ono")
class ONO(OperatorModel):
    """Orthogonal Neural Operator; see the module docstring for the equations and hyperparameters."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        coord_dim: int,
        *,
        width: int,
        n_layers: int,
        ortho_dim: int,
        n_heads: int,
        ffn_ratio: float,
        attention: str,
        momentum: float,
        quadrature: str,
        value_proj: bool,
        dropout: float,
        act: str,
        num_landmarks: int,
        pinv_iterations: int,
        ortho_ridge: float,
        cholesky_eps: float,
        encoder_hidden: int | None,
        head: str,
        init: str,
        qkv_bias: bool,
        wq_bias: bool,
        nystrom_conv: int,
        nystrom_pad: bool,
        nystrom_pinv: str,
        efficient_scale: bool = False,
        point_index: bool = False,
    ) -> None:
        super().__init__(in_channels, out_channels, coord_dim)  # values checked by OnoHparams
        self.width = width
        self.point_index = point_index
        self.encoder = MLP(int(point_index) + coord_dim + in_channels, 2 * width, encoder_hidden or width, act=act)
        block_options: dict[str, object] = (
            {"residual_conv": nystrom_conv, "pad_to_landmarks": nystrom_pad, "pinv_scale": nystrom_pinv} if attention == "nystrom" else {}
        )
        if efficient_scale:
            block_options["efficient_scale"] = True
        self.blocks = nn.ModuleList(
            TransformerBlock(
                width, n_heads, attention, ffn_ratio, dropout, act,
                num_landmarks=num_landmarks, pinv_iterations=pinv_iterations, bias=qkv_bias, **block_options,
            )
            for _ in range(n_layers)
        )
        self.ortho = nn.ModuleList(
            OrthogonalAttention(
                width,
                ortho_dim,
                out_channels if i == n_layers - 1 else width,
                ffn_ratio,
                momentum,
                quadrature,
                value_proj,
                act,
                dropout,
                cholesky_eps,
                ortho_ridge,
                wq_bias,
                linear_out=head == "linear" and i == n_layers - 1,
            )
            for i in range(n_layers)
        )
        if init == "trunc_normal":
            self.apply(_release_init)

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
        g, h = self.encoder(self._encoder_input(coords, inputs, mask)).chunk(2, dim=-1)
        for block, oa in zip(self.blocks, self.ortho):
            g = block(g, mask)
            psi, _ = oa.eigenfunctions(g, mask)
            h = oa.update(h, psi, oa.coefficients(psi, h, mask))
        return h

    def _encoder_input(self, coords: Tensor, inputs: Tensor, mask: Tensor | None) -> Tensor:
        """``[x_j, f(x_j)]``, or with ``point_index`` ``[j / (M - 1), x_j, f(x_j)]`` (the release's elasticity
        script: the point's place in the list, in [0, 1], in front)."""
        if not self.point_index:
            return torch.cat([coords, inputs], -1)
        if mask is not None:
            raise ConfigError(
                "ono: point_index needs samples of one point count (a point's place j / (M - 1) would change with the "
                "padding); use a dataset whose samples share their point list, or set point_index: false"
            )
        b, m, _ = coords.shape
        place = torch.linspace(0.0, 1.0, m, device=coords.device, dtype=coords.dtype).view(1, m, 1).expand(b, m, 1)
        return torch.cat([place, coords, inputs], -1)

    def forward_cross(self, coords: Tensor, inputs: Tensor, query: Tensor, mask: Tensor | None = None) -> Tensor:
        """The query-stream form (module docstring): outputs ``(B, M, out)`` at ``query (B, M, d)``.

        Equals :meth:`forward` when ``query == coords``.
        """
        if self.point_index:
            raise ConfigError(
                "ono: point_index encodes each point by its place in the sample's list of points, which query points "
                "other than the input points do not have; evaluate at the input points, or set point_index: false"
            )
        gx, hx = self.encoder(torch.cat([coords, inputs], -1)).chunk(2, dim=-1)
        f_query = nearest_features(coords, inputs, query, mask)
        gy, hy = self.encoder(torch.cat([query, f_query], -1)).chunk(2, dim=-1)
        last = len(self.blocks) - 1
        for i, (block, oa) in enumerate(zip(self.blocks, self.ortho)):
            gy = block(gy, context=gx, context_mask=mask)
            gx = block(gx, mask)
            psi_x, psi_y = oa.eigenfunctions(gx, mask, gy)
            coeff = oa.coefficients(psi_x, hx, mask)
            hy = oa.update(hy, psi_y, coeff)
            if i < last:
                hx = oa.update(hx, psi_x, coeff)
        return hy
