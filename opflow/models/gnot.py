"""GNOT, the General Neural Operator Transformer (Hao, Wang, Su, Ying, Dong, Liu, Cheng, Song, Zhu
2023, "GNOT: A General Neural Operator Transformer for Operator Learning", ICML; config name ``gnot``).

The network, with the paper's equation numbers (Section 3)::

    X   = MLP_q(x^q)                                      query embedding of the output points
    Y_1 = MLP_1([x_i, a(x_i)])  on the input points       one embedding MLP per input function
    Y_l = MLP_l([x^l_i, f_l(x^l_i)])  on point set l      (extra input functions, own point sets)
    Y_L = MLP_theta(theta)      one token                 the parameter vector (Sec. 3.3)
    repeat n_layers times (one block):
      X <- X + W_o [ q~ + 1/L sum_l HNA_l(q, Y_l) ]        heterogeneous cross-attention, eq. 7-8
      X <- X + LN( sum_k p_k(x^q) E_k(X) )                  gated expert FFNs, eq. 11-12
      X <- X + W_o NA(LN(X))                                normalised self-attention, eq. 9-10
      X <- X + LN( sum_k p_k(x^q) E'_k(X) )
    u(x^q) = MLP_out(X)

* **Normalised linear attention** (eq. 3-6): per head, ``q~ = softmax(q)`` and ``k~ = softmax(k)``
  over the head's features, ``z_t = sum_i (q~_t . k~_i) v_i / sum_j (q~_t . k~_j)``, computed as
  ``q~_t (sum_i k~_i v_i^T) / (q~_t . sum_j k~_j)`` in ``O((N + M) d^2)``. The kernel is that of
  :func:`opflow.models.layers.attention.normalized_attention` (its masked sums, on features
  softmaxed by :func:`feature_softmax`, which is faster on CPUs); the implied attention matrix has
  non-negative entries and rows that sum to one. Padded keys carry weight zero in both sums (the
  released code pads every input function with zeros and lets those points into the sums, so a
  sample's output depends on its batch mates' sizes; here it does not).
* **Heterogeneous cross-attention** (eq. 7-8): one query projection ``W_q``, but keys and values
  from each input function's own projections ``W_k^l, W_v^l`` (and each input's own layer norm),
  ``z_t = q~_t + 1/L sum_l alpha^l_t q~_t (sum_i k~^l_i (x) v^l_i)``. The ``q~`` skip is in the
  paper's eq. 7; the mean over the L inputs is the paper's ("mean as the aggregation function"),
  the release sums (``cross_aggregate: sum``).
* **Self-attention** (eq. 9): the same kernel over the query points, without the ``q~`` skip as
  eq. 9 writes it (the release adds it: ``self_query_skip: true``).
* **Geometric gating** (eq. 11-12, Sec. 3.5): ``p(x) = softmax(G(x))`` over ``n_experts`` expert
  FFNs, ``G`` an MLP of the *query coordinates* (two hidden layers of the FFN width, as the
  release), one gate per block shared by its two FFN stages: a soft domain decomposition.
  ``n_experts: 1`` has no gate at all (a plain FFN).
* **Query coordinates** (Sec. 3.2, ``x^q``): fed to the query embedding ``MLP_q`` and to the gate
  ``G`` as they are (``coord_norm: none``), or standardised per axis, ``(x - m) / s``, with the mean
  ``m`` and standard deviation ``s`` of the training split's query points (``coord_norm:
  unit_gaussian``, :class:`CoordinateNormalizer`), as the release does (its ``--normalize_x unit``
  fits a ``UnitTransformer`` on every training point and applies it to the points that its trunk
  and gate read; the input functions' own points stay raw). Here too only the query embedding and
  the gate see them standardised: the input function's embedding gets the raw coordinates.
* **Parameter vector** (Sec. 3.3): per-sample globals ``theta (B, g)`` (``accepts_globals``) are
  one more conditional embedding, a single token ``MLP_theta(theta)`` with its own keys and values
  (``globals_mode: token``, the paper); ``globals_mode: query`` concatenates ``theta`` to every
  query point's input instead, as the release's trunk does.
* **Input functions on their own point sets** (``accepts_input_sets``): ``forward(...,
  input_sets=[(coords_l, values_l, mask_l), ...])``, each ``(B, N_l, d_l)``, ``(B, N_l, c_l)``,
  ``(B, N_l)`` or None; the model is built with their ``(d_l, c_l)`` (``input_sets``
  hyperparameter, set from the data by the trainer). The batch key that carries them is described
  in :mod:`opflow.data.torch_data`.

Not in the paper, taken from the authors' release (each a documented fact of their code, nothing
copied): layer norms before the cross-attention (on the queries and on each input embedding) and
before the self-attention, and on each gated FFN's *output* before the residual sum (the paper's
eq. 11 names no norm); the embedding and output MLPs are ``Linear -> act`` followed by
``mlp_layers`` residual hidden layers ``h <- act(W h + b) + h`` and a last ``Linear``
(:class:`ResidualMLP`); biases on every projection; the gate MLP's width equals the FFN's.

The release itself is ``models.gnot_official`` in config/default.yaml (``cross_aggregate: sum``,
``self_query_skip: true``, ``globals_mode: query``, ``coord_norm: unit_gaussian``; 1,756,721
parameters at elasticity972); docs/gnot.md gives the release's file and line for each option and
what of its input encoding could not be inferred. ``gnot`` (the paper's equations) keeps the other
values.

Grids (Darcy, Navier-Stokes) are point sets here: ``grid_shape`` is ignored, the queries are the
grid points (``query=None``) and the input function is the field on the same points. Without input
channels (elasticity point clouds, ``task.inputs: []``) the input function is the point cloud
itself (the paper's "boundary shape" input: only the positions are embedded).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from opflow.data.errors import ConfigError
from opflow.hostsync import checks_on

from .base import OperatorModel, register
from .layers import MLP, FeedForward, activation
from .layers.attention import _feature_map_attention
from .transformer import check_batch

#: one extra input function of a batch: coordinates (B, N_l, d_l), values (B, N_l, c_l), mask (B, N_l) or None
InputSet = tuple[Tensor, Tensor, Tensor | None]


def feature_softmax(t: Tensor) -> Tensor:
    """Softmax over the last (feature) axis of ``t (B, H, N, d)``: eq. 3-4, ``q~ = softmax(q)``.

    Taken along a non-innermost axis (a transposed view): with the few features of a head PyTorch's
    CPU softmax over the innermost axis is slow (measured at 8 features, 4 x 1849 x 4 rows: about
    10x the time of the same softmax taken over an outer axis). The values are the same.
    """
    return t.transpose(-1, -2).softmax(-2).transpose(-1, -2)


def _upcast(t: Tensor) -> Tensor:
    """Half precision (bf16 autocast) is summed over the points in float32."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _zero_padding(t: Tensor, mask: Tensor | None) -> Tensor:
    """``t`` with its padded rows set to 0, so garbage (even inf / NaN) in the padding never reaches a sum."""
    if mask is None:
        return t
    return torch.where(mask[..., None], t, torch.zeros((), dtype=t.dtype, device=t.device))


class ResidualMLP(nn.Module):
    """``Linear(in, h) -> act``, then ``n_layers`` times ``h <- act(W h + b) + h``, then ``Linear(h, out)``.

    The embedding and output MLP of the GNOT release (``mlp_layers`` residual hidden layers).
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: int, n_layers: int, act: str) -> None:
        super().__init__()
        self.pre = nn.Linear(in_dim, hidden)
        self.hidden = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(n_layers))
        self.post = nn.Linear(hidden, out_dim)
        self.act = activation(act)

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.pre(x))
        for lin in self.hidden:
            h = self.act(lin(h)) + h
        return self.post(h)


class CoordinateNormalizer(nn.Module):
    """``x -> (x - m) / (s + 1e-8)`` per coordinate axis, ``m`` and ``s`` the mean and standard deviation
    of every real query point of the training split (``coord_norm: unit_gaussian``).

    The release's ``--normalize_x unit``: a ``UnitTransformer`` (one mean and standard deviation per
    column over all points of all training samples, ``+ 1e-8`` on the deviation) fitted before
    training and applied to the points its trunk and gate read. The model has no access to the
    training split before training, so it accumulates the same statistics itself: in training mode
    every forward merges the batch's real points (padding excluded) into float64 buffers (count,
    mean, sum of squared deviations; the pairwise update of Chan, Golub and LeVeque 1979) and then
    standardises with the merged statistics; in evaluation mode they are frozen. Once every training
    sample has been seen (the end of the first epoch) they are the split's statistics; later epochs
    add the same points again, which leaves them unchanged at each epoch's end (population deviation;
    the release's ``torch.std`` is the sample one, a relative difference of ``1 / (2 n)``: 5e-7 for the
    972,000 points of elasticity972). Before any training step the map is the identity.

    Under DDP the buffers of rank 0 are broadcast at every forward (torch's default), so the
    statistics are those of rank 0's share of the batches. The float64 buffers do not move to MPS.

    ``count`` has shape ``(1,)``, not ``()``: under ``torch.compile`` (inductor, CPU, torch 2.13) an
    in-place ``copy_`` or ``add_`` into a 0-dim float64 buffer is lost, while the 1-dim ``mean`` and ``m2``
    are updated, so a compiled training kept ``count = 0`` and standardised with scale 1 (found on
    the elasticity972 CPU run; ``tests/opflow/test_train_step.py`` compares compiled and plain buffers).
    A state dict with the earlier 0-dim ``count`` loads.
    """

    EPS = 1e-8

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(1, dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("m2", torch.zeros(dim, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor, mask: Tensor | None) -> None:
        """Merge the real points of ``x (B, M, d)`` (``mask (B, M)`` False at padding) into the statistics."""
        xd = x.detach().to(torch.float64).reshape(-1, x.shape[-1])
        if mask is None:
            w = torch.ones(xd.shape[0], 1, dtype=torch.float64, device=xd.device)
        else:
            w = mask.reshape(-1, 1).to(torch.float64)
        n_b = w.sum()
        mean_b = (xd * w).sum(0) / n_b
        m2_b = ((xd - mean_b) ** 2 * w).sum(0)
        n = self.count + n_b
        delta = mean_b - self.mean
        self.m2.add_(m2_b + delta**2 * (self.count * n_b / n))
        self.mean.add_(delta * (n_b / n))
        self.count.copy_(n)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        key = prefix + "count"
        if key in state_dict and state_dict[key].dim() == 0:  # written before count became (1,)
            state_dict[key] = state_dict[key].reshape(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def scale(self) -> Tensor:
        """``s + 1e-8`` per axis (1 before any update)."""
        std = (self.m2 / self.count.clamp_min(1)).sqrt() + self.EPS
        return torch.where(self.count > 0, std, torch.ones_like(std))

    def transform(self, x: Tensor) -> Tensor:
        """``(x - m) / (s + 1e-8)`` with the current statistics (no update), in ``x``'s dtype."""
        return ((x.to(torch.float64) - self.mean) / self.scale()).to(x.dtype)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """In training mode merge ``x``'s real points first; then :meth:`transform`."""
        if self.training:
            self.update(x, mask)
        return self.transform(x)


class HeterogeneousNormalizedAttention(nn.Module):
    """Normalised linear attention of queries ``x`` to ``L`` key/value sequences (eq. 7-9).

    ``z_t = [q~_t] + agg_l NA(q_t, K_l, V_l)`` per head, ``agg`` the mean (paper) or the sum
    (release) over the sequences, then the output projection ``W_o``. ``K_l = Y_l W_k^l``,
    ``V_l = Y_l W_v^l``: each sequence has its own key/value projection, the queries share ``W_q``.
    With one sequence ``Y_1 = x`` this is the self-attention of eq. 9. ``query_skip`` adds the
    normalised query ``q~_t`` (eq. 7).
    """

    def __init__(self, width: int, n_heads: int, n_inputs: int, aggregate: str = "mean", query_skip: bool = True) -> None:
        super().__init__()
        if width % n_heads:
            raise ConfigError(f"gnot: width {width} is not a multiple of n_heads {n_heads}")
        if aggregate not in ("mean", "sum"):
            raise ConfigError(f"gnot: cross_aggregate must be 'mean' or 'sum', got {aggregate!r}")
        self.n_heads, self.head_dim = n_heads, width // n_heads
        self.aggregate, self.query_skip = aggregate, query_skip
        self.to_q = nn.Linear(width, width)
        self.to_kv = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(n_inputs))
        self.to_out = nn.Linear(width, width)

    def _split(self, t: Tensor) -> Tensor:
        B, N, _ = t.shape
        return t.view(B, N, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor, ys: Sequence[Tensor], masks: Sequence[Tensor | None], query_mask: Tensor | None = None) -> Tensor:
        """``x (B, M, width)``; ``ys[l] (B, N_l, width)`` with key masks ``masks[l] (B, N_l)`` or None."""
        if len(ys) != len(self.to_kv) or len(masks) != len(ys):
            raise ValueError(f"gnot attention built for {len(self.to_kv)} input sequence(s), got {len(ys)} (and {len(masks)} masks)")
        q_t = feature_softmax(_upcast(self._split(self.to_q(x))))
        acc = None
        for y, m, proj in zip(ys, masks, self.to_kv):
            k, v = (_upcast(self._split(t)) for t in proj(y).chunk(2, dim=-1))
            # = layers.attention.normalized_attention(q, k, v, m): the shared kernel's masked sums on q~, k~
            z = _feature_map_attention(q_t, feature_softmax(k), v, m, None)
            acc = z if acc is None else acc + z
        assert acc is not None
        if self.aggregate == "mean":
            acc = acc / len(ys)
        if self.query_skip:
            acc = acc + q_t
        B, _, M, _ = acc.shape
        out = self.to_out(acc.transpose(1, 2).reshape(B, M, -1))
        if query_mask is not None:
            out = out * query_mask[..., None].to(out.dtype)
        return out


class GeometricGate(nn.Module):
    """``p(x) = softmax(G(x))`` over the experts (eq. 12); ``G`` an MLP of the query coordinates."""

    def __init__(self, coord_dim: int, n_experts: int, hidden: int, act: str) -> None:
        super().__init__()
        self.net = MLP(coord_dim, n_experts, hidden, n_hidden=2, act=act)

    def forward(self, pos: Tensor) -> Tensor:
        return self.net(pos).softmax(-1)


class MixtureOfExperts(nn.Module):
    """``sum_k p_k(x) E_k(z)`` (eq. 11) over ``n_experts`` two-layer FFNs; one expert = a plain FFN."""

    def __init__(self, width: int, ffn_ratio: float, n_experts: int, act: str) -> None:
        super().__init__()
        self.experts = nn.ModuleList(FeedForward(width, ffn_ratio, act=act) for _ in range(n_experts))

    def forward(self, z: Tensor, p: Tensor | None) -> Tensor:
        """``z (B, M, width)``, gate ``p (B, M, n_experts)`` (None with one expert)."""
        if p is None:
            if len(self.experts) != 1:
                raise ValueError(f"{len(self.experts)} experts need gate weights")
            return self.experts[0](z)
        return sum(p[..., k : k + 1] * e(z) for k, e in enumerate(self.experts))  # type: ignore[return-value]


class GnotBlock(nn.Module):
    """Cross-attention + gated FFN, self-attention + gated FFN (module docstring, eq. 7-12)."""

    def __init__(
        self,
        width: int,
        n_heads: int,
        n_inputs: int,
        coord_dim: int,
        n_experts: int,
        ffn_ratio: float,
        act: str,
        cross_aggregate: str,
        self_query_skip: bool,
    ) -> None:
        super().__init__()
        self.ln_query = nn.LayerNorm(width)
        self.ln_inputs = nn.ModuleList(nn.LayerNorm(width) for _ in range(n_inputs))
        self.cross = HeterogeneousNormalizedAttention(width, n_heads, n_inputs, cross_aggregate, query_skip=True)
        self.ln_ffn1 = nn.LayerNorm(width)
        self.ln_self = nn.LayerNorm(width)
        self.self_attn = HeterogeneousNormalizedAttention(width, n_heads, 1, "mean", query_skip=self_query_skip)
        self.ln_ffn2 = nn.LayerNorm(width)
        hidden = max(1, int(round(width * ffn_ratio)))
        self.gate = GeometricGate(coord_dim, n_experts, hidden, act) if n_experts > 1 else None
        self.ffn1 = MixtureOfExperts(width, ffn_ratio, n_experts, act)
        self.ffn2 = MixtureOfExperts(width, ffn_ratio, n_experts, act)

    def forward(self, x: Tensor, ys: Sequence[Tensor], masks: Sequence[Tensor | None], pos: Tensor, query_mask: Tensor | None) -> Tensor:
        p = self.gate(pos) if self.gate is not None else None
        x = x + self.cross(self.ln_query(x), [ln(y) for ln, y in zip(self.ln_inputs, ys)], masks, query_mask)
        x = x + self.ln_ffn1(self.ffn1(x, p))
        h = self.ln_self(x)
        x = x + self.self_attn(h, [h], [query_mask], query_mask)
        return x + self.ln_ffn2(self.ffn2(x, p))


@register("gnot")
class GNOT(OperatorModel):
    """General Neural Operator Transformer (module docstring).

    ``forward(coords, inputs, query=None, mask=None, grid_shape=None, globals=None,
    input_sets=None, query_mask=None)``: the input function ``inputs`` on the points ``coords``
    (real points ``mask``), outputs at ``query`` (default: ``coords``; ``query_mask`` marks real
    query points, default ``mask`` when ``query`` is None), the parameter vector ``globals (B, g)``
    and extra input functions ``input_sets``. Outputs at padded queries are 0.

    Hyperparameters (:class:`opflow.models.hparams.GnotHparams`): ``width`` (embedding and attention
    width n_e), ``n_layers`` blocks, ``n_heads``, ``n_experts``, ``ffn_ratio`` (expert FFN width /
    n_e), ``mlp_layers`` (residual hidden layers of the embedding and output MLPs), ``act``,
    ``cross_aggregate``, ``self_query_skip``, ``globals_mode``, ``coord_norm``; ``global_channels``
    and ``input_sets`` are set from the data.
    """

    accepts_globals = True
    accepts_input_sets = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        coord_dim: int,
        *,
        width: int,
        n_layers: int,
        n_heads: int,
        n_experts: int,
        ffn_ratio: float,
        mlp_layers: int,
        act: str,
        cross_aggregate: str,
        self_query_skip: bool,
        globals_mode: str,
        coord_norm: str,
        global_channels: int,
        input_sets: Sequence[Sequence[int]],
    ) -> None:
        super().__init__(in_channels, out_channels, coord_dim)
        if coord_norm not in ("none", "unit_gaussian"):
            raise ConfigError(f"gnot: coord_norm must be 'none' or 'unit_gaussian', got {coord_norm!r}")
        self.width, self.n_experts = width, n_experts
        # registered only when used, so that the state dict of coord_norm none is unchanged
        self.coord_norm = CoordinateNormalizer(coord_dim) if coord_norm == "unit_gaussian" else None
        self.global_channels, self.globals_mode = global_channels, globals_mode
        self.input_set_shapes = [(int(d), int(c)) for d, c in input_sets]
        query_in = coord_dim + (global_channels if globals_mode == "query" else 0)
        self.query_mlp = ResidualMLP(query_in, width, width, mlp_layers, act)
        branches = [coord_dim + in_channels] + [d + c for d, c in self.input_set_shapes]
        self.input_mlps = nn.ModuleList(ResidualMLP(n, width, width, mlp_layers, act) for n in branches)
        self.globals_mlp = ResidualMLP(global_channels, width, width, mlp_layers, act) if global_channels and globals_mode == "token" else None
        n_inputs = len(branches) + (self.globals_mlp is not None)
        self.blocks = nn.ModuleList(
            GnotBlock(width, n_heads, n_inputs, coord_dim, n_experts, ffn_ratio, act, cross_aggregate, self_query_skip) for _ in range(n_layers)
        )
        self.out_mlp = ResidualMLP(width, out_channels, width, mlp_layers, act)

    # ----------------------------------------------------------------- checks

    def _check_extra(self, coords: Tensor, globals: Tensor | None, input_sets: Sequence[InputSet] | None) -> None:
        B = coords.shape[0]
        if self.global_channels:
            if globals is None or globals.shape != (B, self.global_channels):
                got = None if globals is None else tuple(globals.shape)
                raise ValueError(f"this gnot was built with global_channels={self.global_channels}: pass globals of shape ({B}, {self.global_channels}); got {got}")
        elif globals is not None and globals.shape[-1]:
            raise ValueError(f"this gnot was built without globals; got globals {tuple(globals.shape)}: set global_channels={globals.shape[-1]}")
        sets = list(input_sets or ())
        if len(sets) != len(self.input_set_shapes):
            raise ValueError(f"this gnot was built for {len(self.input_set_shapes)} extra input set(s) (input_sets={self.input_set_shapes}); got {len(sets)}")
        for l, ((c, v, m), (d, ch)) in enumerate(zip(sets, self.input_set_shapes)):
            if c.dim() != 3 or c.shape[0] != B or c.shape[-1] != d or v.shape != (*c.shape[:2], ch):
                raise ValueError(f"input set {l}: coords must be ({B}, points, {d}) and values ({B}, points, {ch}); got {tuple(c.shape)}, {tuple(v.shape)}")
            if m is not None and (m.dtype != torch.bool or m.shape != c.shape[:2] or (checks_on() and not bool(m.any(-1).all()))):
                raise ValueError(f"input set {l}: mask must be bool {tuple(c.shape[:2])} with a real point in every sample")

    # ----------------------------------------------------------------- forward

    def gate_weights(self, pos: Tensor) -> list[Tensor]:
        """The expert weights ``p(x) (B, M, n_experts)`` of every block at points ``pos`` (eq. 12;
        standardised first with the current statistics under ``coord_norm: unit_gaussian``)."""
        if self.coord_norm is not None:
            pos = self.coord_norm.transform(pos)
        return [b.gate(pos) for b in self.blocks if b.gate is not None]  # type: ignore[misc]

    def forward(
        self,
        coords: Tensor,
        inputs: Tensor,
        query: Tensor | None = None,
        mask: Tensor | None = None,
        grid_shape: tuple[int, ...] | None = None,
        globals: Tensor | None = None,
        input_sets: Sequence[InputSet] | None = None,
        query_mask: Tensor | None = None,
    ) -> Tensor:
        check_batch(self, coords, inputs, query, mask)
        self._check_extra(coords, globals, input_sets)
        if query is None:
            query, query_mask = coords, mask
        elif query_mask is not None and (query_mask.dtype != torch.bool or query_mask.shape != query.shape[:2]):
            raise ValueError(f"query_mask must be a bool tensor of shape {tuple(query.shape[:2])}")
        pos = _zero_padding(query, query_mask)
        if self.coord_norm is not None:  # the query embedding's and the gate's coordinates (the release's normalize_x)
            pos = _zero_padding(self.coord_norm(pos, query_mask), query_mask)
        q_in = pos
        if self.globals_mode == "query" and self.global_channels:
            q_in = torch.cat([pos, globals[:, None, :].expand(-1, pos.shape[1], -1).to(pos.dtype)], -1)  # type: ignore[index]
        x = self.query_mlp(q_in)
        ys = [self.input_mlps[0](_zero_padding(torch.cat([coords, inputs], -1), mask))]
        masks: list[Tensor | None] = [mask]
        for l, (c, v, m) in enumerate(input_sets or ()):
            ys.append(self.input_mlps[l + 1](_zero_padding(torch.cat([c, v], -1), m)))
            masks.append(m)
        if self.globals_mlp is not None:
            ys.append(self.globals_mlp(globals)[:, None, :])  # type: ignore[arg-type]
            masks.append(None)
        for block in self.blocks:
            x = block(x, ys, masks, pos, query_mask)
        out = self.out_mlp(x)
        if query_mask is not None:
            out = out * query_mask[..., None].to(out.dtype)
        return out


__all__ = ["GNOT", "CoordinateNormalizer", "GeometricGate", "GnotBlock", "HeterogeneousNormalizedAttention", "MixtureOfExperts", "ResidualMLP"]
