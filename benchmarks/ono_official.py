"""ONO at the authors' released Darcy configuration: equivalence with the release, and speed on a CPU or a GPU.

    python -m benchmarks.ono_official --release DIR [--pythonpath DIR ...] [--device cpu|cuda|auto]
                                      [--resolution 85] [--batch 4] [--repeats 5] [--threads 2]
                                      [--variants fp32,bf16,compile] [--epoch | --full-epoch] [--samples 1000]
                                      [--out ...] [--smoke]

``DIR`` is a checkout of the authors' repository (``Orthogonal-Neural-operator`` of the
zhijie-group organisation; its ``ONOmodel2.py``) made *outside* this repository, and
``--pythonpath`` the folder(s) where the ``nystrom-attention`` and ``einops`` packages are
installed (e.g. ``pip install --target /tmp/release_deps nystrom-attention einops``); nothing of
either is copied here. The release's other imports (timm, linear-attention, performer, reformer,
linformer packages) are only needed for its other blocks: they are replaced by empty stand-ins,
and timm's ``trunc_normal_`` by torch's (the same distribution).

``--release-config zeroshot``: the README's zero-shot super-resolution command (``space_gen.py``: 8
layers, 16 eigenfunctions, the ``linear_attention_transformer`` block) against
:data:`opflow.models.ono.RELEASE_ZEROSHOT` (``models.ono_official_zeroshot``); ``--pythonpath`` then
also holds ``linear-attention-transformer==0.19.1`` (the release's requirements) and the packages it
imports (``local-attention``, ``linformer``, ``product-key-memory``, ``axial-positional-embedding``;
versions of 2023). Only its Nystrom component timing (4.) is left out.

``--release-config elasticity``: ``ela_example.py`` (Nystrom, k 8, the point's place in its list as the
"space" input; ``models.ono_official_elasticity``) on 972 random points per sample. ``--release-config
ns``: ``NS_example2.py`` (the zero-shot network reading 10 frames; ``models.ono_official_ns``), and
besides the equivalence its training loop, restated (:func:`unrolled_training`: 10 teacher-forced
frames per optimiser step), against the trainer's ``training.unroll: truth``.

1. Equivalence: the release's ``ONO2`` (README Darcy command) and opflow's ``ono`` with
   :data:`opflow.models.ono.RELEASE_DARCY`, weights copied one to one (:func:`release_to_opflow`),
   in float64 on a few random Darcy-like batches, on ``--device``: output difference in training
   mode (batch covariance) and, after the covariance buffers are filled, in evaluation mode.
2. Speed: median time of a training step (forward, relative-L2 loss, backward, AdamW step) and of
   an inference forward of each model on a batch of ``--batch`` samples at ``resolution^2`` points,
   measured alternately in the same process so the ratio is fair on a shared machine (on CUDA a
   ``torch.cuda.synchronize`` closes every timed region), with samples/s. The release runs in
   float32, as its README trains; opflow's model runs once per ``--variants`` entry, each a copy
   with the same initial weights: ``fp32``; ``bf16`` = ``torch.autocast(<device>, bfloat16)``
   around forward + loss; ``compile`` = ``torch.compile(model, dynamic=False)``, whose untimed
   warm-up (first training step and first inference forward) is its compile time
   (``compile_s``); ``bf16+compile``. bf16 and compile are GPU variants: skipped on a CPU, with the
   reason in the result, unless ``--cpu-variants`` (a check of the code path, not a timing).
   ``ratios_release_over_variant``: release time / variant time (> 1: opflow faster) per training
   step, inference and measured epoch, and release / variant peak memory (> 1: opflow smaller).
   Memory of a training step per model: its parameters and AdamW state plus the growth over one
   step (:class:`benchmarks.models.PeakMemory`: ``torch.cuda.max_memory_allocated``, reset before
   each model, on CUDA; the peak resident set on a CPU).
3. Epoch (``--epoch``): the time of an epoch of ``--samples`` samples (default 1000, the paper's
   Darcy training set), ``ceil(samples / batch)`` steps: ``extrapolated_s`` from the median step,
   and with ``--full-epoch`` also ``measured_s``, a real loop over that many random samples held
   on the device, shuffled, batch by batch.
4. Components and profile: the Nystrom attention and the whitening alone, release vs opflow, and
   ``torch.profiler``'s breakdown of opflow's training step (CPU time; on CUDA the GPU time).

Writes ``benchmarks/results/ono_official.json`` (``--device cpu``, the default) or
``benchmarks/results/ono_official_cuda.json``. ``--smoke``: resolution 9, batch 2, one repeat and
an epoch of 5 samples (a smaller last batch); without ``--release`` only opflow's side, with a
one-layer model (:data:`SMOKE_MODEL`).
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, parse_variant, utc_timestamp, versions, write_json_atomic


def load_release(release_dir: Path, pythonpath: list[str]) -> types.ModuleType:
    """Import the release's ``ONOmodel2`` with stand-ins for the packages its models here do not use
    (a package found on ``pythonpath`` is imported for real: ``linear_attention_transformer`` for
    ``--release-config zeroshot``)."""
    import importlib.util

    import torch

    for p in reversed(pythonpath):
        sys.path.insert(0, p)

    class _Unused:  # the attention blocks of the other packages; never built for attn_type=nystrom
        def __init__(self, *a: Any, **k: Any) -> None:
            raise RuntimeError("stand-in of a package the released Darcy model does not use")

    stubs = {
        "timm": {}, "timm.models": {}, "timm.models.layers": {"trunc_normal_": torch.nn.init.trunc_normal_},
        "linear_attention_transformer": {}, "linear_attention_transformer.linear_attention_transformer": {"SelfAttention": _Unused},
        "performer_pytorch": {"SelfAttention": _Unused}, "reformer_pytorch": {"LSHSelfAttention": _Unused},
        "linformer": {"LinformerSelfAttention": _Unused},
    }
    real = {name for name in stubs if "." not in name and importlib.util.find_spec(name) is not None}
    for name, attrs in stubs.items():
        if name not in sys.modules and name.split(".")[0] not in real:
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            sys.modules[name] = mod
    sys.path.insert(0, str(release_dir))
    try:
        return importlib.import_module("ONOmodel2")
    finally:
        sys.path.remove(str(release_dir))


#: ``--release-config``: the README command's ``ONO2`` arguments and opflow's hyperparameters
#: (:mod:`opflow.models.ono`): ``darcy`` = ``Darcy_example.py`` (Nystrom block), ``zeroshot`` =
#: ``space_gen.py`` (no ``--attn_type``: the ``linear_attention_transformer`` block), ``elasticity`` =
#: ``ela_example.py`` (Nystrom block), ``ns`` = ``NS_example2.py`` (the zero-shot network on 10 frames)
RELEASE_COMMANDS: dict[str, dict[str, Any]] = {
    "darcy": {"n_hidden": 128, "n_layers": 10, "n_head": 8, "psi_dim": 32, "mlp_ratio": 2, "attn_type": "nystrom"},
    "zeroshot": {"n_hidden": 128, "n_layers": 8, "n_head": 8, "psi_dim": 16, "mlp_ratio": 1, "attn_type": None},
    "elasticity": {"n_hidden": 128, "n_layers": 8, "n_head": 8, "psi_dim": 8, "mlp_ratio": 1, "attn_type": "nystrom"},
    "ns": {"n_hidden": 128, "n_layers": 8, "n_head": 8, "psi_dim": 16, "mlp_ratio": 1, "attn_type": None},
}

#: NS2d's input frames (``NS_example2.py``: ``T_in = 10``) and predicted frames (``T = 10``)
NS_HISTORY = NS_STEPS = 10

#: what each script feeds ``ONO2`` (``space_dim``, ``fun_dim``): the Darcy scripts the grid point and the
#: coefficient; ``ela_example.py`` ``linspace(0, 1, 972)`` as the "space" coordinate and the point's (x, y)
#: as the input function
RELEASE_INPUTS: dict[str, tuple[int, int]] = {"darcy": (2, 1), "zeroshot": (2, 1), "elasticity": (1, 2), "ns": (2, NS_HISTORY)}

#: opflow's ``(in_channels, out_channels, coord_dim)`` of each configuration: Darcy's coefficient in, the
#: elasticity point cloud with no input function (``datasets.elasticity972``)
OPFLOW_CHANNELS: dict[str, tuple[int, int, int]] = {"darcy": (1, 1, 2), "zeroshot": (1, 1, 2), "elasticity": (0, 1, 2), "ns": (NS_HISTORY, 1, 2)}

#: the elasticity set's points per sample (the 3 x 3 Gauss points of 108 cells)
ELASTICITY_POINTS = 972


def release_hparams(config: str = "darcy") -> dict[str, Any]:
    """opflow's ``ono`` hyperparameters of a ``--release-config``."""
    from opflow.models.ono import RELEASE_DARCY, RELEASE_ELASTICITY, RELEASE_ZEROSHOT

    return {"darcy": RELEASE_DARCY, "zeroshot": RELEASE_ZEROSHOT, "elasticity": RELEASE_ELASTICITY, "ns": RELEASE_ZEROSHOT}[config]


def release_model(mod: types.ModuleType, config: str = "darcy") -> Any:
    """``ONO2`` as the release's script builds it from the README command of ``config``."""
    space_dim, fun_dim = RELEASE_INPUTS[config]
    return mod.ONO2(space_dim=space_dim, fun_dim=fun_dim, dropout=0.0, momentum=0.9, orth=1, **RELEASE_COMMANDS[config])


def as_script_calls(model: Any, config: str) -> Any:
    """The release's model called as opflow's is, ``model(coords, inputs)``, fed what its script feeds it:
    the Darcy scripts ``ONO2(coords, a)``; ``ela_example.py`` ``ONO2(linspace(0, 1, M), coords)`` (the
    point's place as the "space" coordinate, its (x, y) as the input function; opflow's ``inputs`` are
    empty there)."""
    if config != "elasticity":
        return model
    import torch

    class ElasticityScript(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        @property
        def blocks(self) -> Any:
            return self.inner.blocks

        def forward(self, coords: Any, inputs: Any) -> Any:
            b, m, _ = coords.shape
            place = torch.linspace(0, 1, m, dtype=coords.dtype, device=coords.device).view(1, m, 1).expand(b, m, 1)
            return self.inner(place, coords)

    return ElasticityScript(model)


def release_to_opflow(sd: dict[str, Any], n_layers: int, width: int) -> dict[str, Any]:
    """The release's ``ONO2`` state dict renamed to opflow's ``ono`` (``RELEASE_DARCY`` /
    ``RELEASE_ZEROSHOT``) parameters.

    ``preprocess`` -> ``encoder``; per stage ``ln_1``/``Attn``/``ln_2``/``mlp`` -> the NN block
    (the Nystrom block's ``to_qkv``, or the linear block's ``to_q``, ``to_k``, ``to_v``, as ``to_q``
    and ``to_kv``), ``proj``/``mu``/``ln_3``/``mlp2`` -> the orthogonal flow (``feature_cov`` ->
    ``running_cov``).
    """
    import torch

    out: dict[str, Any] = {}

    def mlp(src: str, dst: str) -> None:
        for a, b in (("linear_pre.0", "0"), ("linear_post", "2")):
            for p in ("weight", "bias"):
                out[f"{dst}.{b}.{p}"] = sd[f"{src}.{a}.{p}"]

    mlp("preprocess", "encoder")
    for i in range(n_layers):
        s, b, o = f"blocks.{i}.", f"blocks.{i}.", f"ortho.{i}."
        for p in ("weight", "bias"):
            out[b + "ln_attn." + p] = sd[s + "ln_1." + p]
            out[b + "ln_ffn." + p] = sd[s + "ln_2." + p]
            out[b + "attn.to_out." + p] = sd[s + "Attn.to_out.0." + p] if s + "Attn.to_qkv.weight" in sd else sd[s + "Attn.to_out." + p]
            out[o + "w_q." + p] = sd[s + "proj." + p]
            out[o + "ln." + p] = sd[s + "ln_3." + p]
        if s + "Attn.to_qkv.weight" in sd:  # nystrom-attention
            qkv = sd[s + "Attn.to_qkv.weight"]
            out[b + "attn.to_q.weight"], out[b + "attn.to_kv.weight"] = qkv[:width], qkv[width:]
            out[b + "attn.res_conv.weight"] = sd[s + "Attn.res_conv.weight"]
        else:  # linear_attention_transformer's SelfAttention
            out[b + "attn.to_q.weight"] = sd[s + "Attn.to_q.weight"]
            out[b + "attn.to_kv.weight"] = torch.cat([sd[s + "Attn.to_k.weight"], sd[s + "Attn.to_v.weight"]], 0)
        mlp(s + "mlp", b + "ffn")
        out[o + "mu"] = sd[s + "mu"]
        if i == n_layers - 1:
            out[o + "ffn.weight"], out[o + "ffn.bias"] = sd[s + "mlp2.weight"], sd[s + "mlp2.bias"]
        else:
            mlp(s + "mlp2", o + "ffn")
    return out


def darcy_batch(resolution: int, batch: int, seed: int, dtype: Any) -> tuple[Any, Any, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, resolution, dtype=dtype)
    xx, yy = torch.meshgrid(t, t, indexing="ij")
    coords = torch.stack([xx, yy], -1).reshape(1, -1, 2).repeat(batch, 1, 1)
    a = (torch.randn(batch, resolution * resolution, 1, generator=g, dtype=dtype) > 0).to(dtype).mul(9).add(3)
    a = (a - 7.5) / 4.5  # normalised as the Darcy script's UnitTransformer would
    u = torch.randn(batch, resolution * resolution, 1, generator=g, dtype=dtype)
    return coords, a, u


def elasticity_batch(batch: int, seed: int, dtype: Any) -> tuple[Any, Any, Any]:
    """``(coords, inputs, u)`` shaped as ``elasticity972``'s: a cloud of 972 random points in the unit square
    per sample, no input function, a random target."""
    import torch

    g = torch.Generator().manual_seed(seed)
    coords = torch.rand(batch, ELASTICITY_POINTS, 2, generator=g, dtype=dtype)
    return coords, coords[..., :0], torch.randn(batch, ELASTICITY_POINTS, 1, generator=g, dtype=dtype)


def ns_batch(resolution: int, batch: int, seed: int, dtype: Any) -> tuple[Any, Any, Any]:
    """``(coords, inputs, u)`` shaped as NS2d's on a ``resolution^2`` grid: 10 random input frames and 10
    random target frames (step-major channels, as ``NS_example2.py``'s ``yy`` and opflow's unrolled items)."""
    import torch

    coords, _, _ = darcy_batch(resolution, batch, seed, dtype)
    g = torch.Generator().manual_seed(seed + 1)
    frames = torch.randn(batch, resolution * resolution, NS_HISTORY + NS_STEPS, generator=g, dtype=dtype)
    return coords, frames[..., :NS_HISTORY], frames[..., NS_HISTORY:]


def config_batch(config: str, resolution: int, batch: int, seed: int, dtype: Any) -> tuple[Any, Any, Any]:
    """The batch of a ``--release-config``: Darcy-like at ``resolution^2`` grid points, NS2d's frames on that
    grid, or the elasticity cloud (972 points whatever ``resolution``); the speed runs time NS2d's single
    step, ``unrolled_training`` its script's ten."""
    if config == "elasticity":
        return elasticity_batch(batch, seed, dtype)
    if config == "ns":
        coords, a, u = ns_batch(resolution, batch, seed, dtype)
        return coords, a, u[..., :1]
    return darcy_batch(resolution, batch, seed, dtype)


def config_points(config: str, resolution: int) -> int:
    return ELASTICITY_POINTS if config == "elasticity" else resolution**2


def opflow_model(config: str, overrides: dict[str, Any] | None = None) -> Any:
    """opflow's ``ono`` with the release's hyperparameters of ``config`` (``overrides`` changed)."""
    from opflow.models import build_model

    return build_model({"arch": "ono", **release_hparams(config), **(overrides or {})}, *OPFLOW_CHANNELS[config])


def paired_models(mod: types.ModuleType, dtype: Any, seed: int = 0, config: str = "darcy") -> tuple[Any, Any]:
    import torch

    torch.manual_seed(seed)
    theirs = release_model(mod, config).to(dtype)
    ours = opflow_model(config).to(dtype)
    n_layers = RELEASE_COMMANDS[config]["n_layers"]
    missing = ours.load_state_dict(release_to_opflow(theirs.state_dict(), n_layers, 128), strict=False)
    allowed = {f"ortho.{i}.ort.{b}" for i in range(n_layers) for b in ("running_cov", "num_batches_tracked")}
    assert not missing.unexpected_keys and set(missing.missing_keys) <= allowed, missing
    return as_script_calls(theirs, config), ours


def equivalence(mod: types.ModuleType, resolution: int, batch: int, device: Any = "cpu", config: str = "darcy") -> dict[str, Any]:
    import torch

    theirs, ours = paired_models(mod, torch.float64, config=config)
    theirs, ours = theirs.to(device), ours.to(device)
    rows = []
    for step, seed in enumerate((1, 2, 3)):
        coords, a, _ = (t.to(device) for t in config_batch(config, resolution, batch, seed, torch.float64))
        theirs.train(), ours.train()
        with torch.no_grad():
            yt, yo = theirs(coords, a), ours(coords, a)
        rows.append({"mode": "train", "batch": step, "max_abs_diff_over_max_abs": float((yt - yo).abs().max() / yt.abs().max())})
    cov = max(float((blk.feature_cov - oa.ort.running_cov).abs().max() / blk.feature_cov.abs().max()) for blk, oa in zip(theirs.blocks, ours.ortho))
    coords, a, _ = (t.to(device) for t in config_batch(config, resolution, batch, 9, torch.float64))
    theirs.eval(), ours.eval()
    with torch.no_grad():
        yt, yo = theirs(coords, a), ours(coords, a)
    rows.append({"mode": "eval", "batch": 3, "max_abs_diff_over_max_abs": float((yt - yo).abs().max() / yt.abs().max())})
    return {"dtype": "float64", "device": str(device), "release_config": config, "resolution": resolution, "points": config_points(config, resolution),
            "batch": batch, "outputs": rows,
            "running_covariance_max_rel_diff": cov,
            "parameters": {"release": sum(p.numel() for p in theirs.parameters()), "opflow": sum(p.numel() for p in ours.parameters())}}


def unrolled_training(mod: types.ModuleType, resolution: int, batch: int, steps: int = 2, device: Any = "cpu") -> dict[str, Any]:
    """``NS_example2.py``'s training loop against opflow's ``training.unroll: truth``, float64, from the same weights.

    The script's loop, restated: for each of the 10 target frames, predict from the current window, add the
    relative L2 error summed over the batch to the loss, slide the *true* frame into the window; then one
    backward pass, clipping to 0.1 and AdamW (1e-3, weight decay 1e-5). opflow's side is the trainer's own
    loss (:func:`opflow.train_step.batch_loss` of an unrolled batch, no normalisers as the script has none,
    times the batch for the "sum" reduction) with the same clipping and AdamW. After each step: the two
    losses, the models' evaluation-mode outputs on a fresh batch and their running covariances (updated once
    per predicted frame).
    """
    import torch

    from opflow.config import TrainConfig
    from opflow.data.normalize import Identity
    from opflow.data.torch_data import Normalizers
    from opflow.train_step import batch_loss

    theirs, ours = paired_models(mod, torch.float64, config="ns")
    theirs, ours = theirs.to(device), ours.to(device)
    cfg = TrainConfig.from_dict({"unroll": "truth", "input_normalizer": "none", "output_normalizer": "none"})
    norms = Normalizers(Identity(), Identity(), Identity())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-5) for m in (theirs, ours)]

    def rel_l2_sum(pred: Any, y: Any) -> Any:
        b = pred.shape[0]
        return (torch.linalg.vector_norm((pred - y).reshape(b, -1), dim=1) / torch.linalg.vector_norm(y.reshape(b, -1), dim=1)).sum()

    def update(model: Any, opt: Any, loss: Any) -> None:
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        opt.step()

    rows = []
    for step in range(steps):
        coords, fx, yy = (t.to(device) for t in ns_batch(resolution, batch, 11 + step, torch.float64))
        theirs.train(), ours.train()
        loss_t, window = coords.new_zeros(()), fx
        for t in range(NS_STEPS):  # the script's loop
            y = yy[..., t : t + 1]
            loss_t = loss_t + rel_l2_sum(theirs(coords, window), y)
            window = torch.cat((window[..., 1:], y), -1)
        update(theirs, opts[0], loss_t)
        b = {"coords": coords, "inputs": fx, "target": yy, "grid_shape": (resolution, resolution), "rollout_steps": NS_STEPS}
        loss_o = batch_loss(ours, b, norms, cfg) * batch
        update(ours, opts[1], loss_o)
        coords, a, _ = (t.to(device) for t in config_batch("ns", resolution, batch, 90 + step, torch.float64))
        theirs.eval(), ours.eval()
        with torch.no_grad():
            yt, yo = theirs(coords, a), ours(coords, a)
        cov = max(float((blk.feature_cov - oa.ort.running_cov).abs().max() / blk.feature_cov.abs().max()) for blk, oa in zip(theirs.blocks, ours.ortho))
        rows.append({"step": step + 1, "loss_release": float(loss_t), "loss_opflow": float(loss_o),
                     "loss_rel_diff": abs(float(loss_t) - float(loss_o)) / abs(float(loss_t)),
                     "eval_output_max_abs_diff_over_max_abs": float((yt - yo).abs().max() / yt.abs().max()),
                     "running_covariance_max_rel_diff": cov})
    return {"dtype": "float64", "device": str(device), "resolution": resolution, "batch": batch, "frames_per_step": NS_STEPS,
            "optimizer": "AdamW lr 1e-3, weight decay 1e-5, clip 0.1", "steps": rows}


# --------------------------------------------------------------------------- speed


#: opflow variants of ``--variants``: tokens joined by ``+`` (``fp32``, ``bf16``, ``compile``, ``bf16+compile``)
VARIANT_TOKENS = ("fp32", "bf16", "compile")


def parse_variants(text: str) -> list[str]:
    """Canonical names of ``--variants`` (``fp32``, ``bf16``, ``compile`` = fp32 compiled, ``bf16+compile``),
    duplicates dropped, order kept; ValueError naming the bad entry (the grammar of
    :func:`benchmarks.common.parse_variant`, without ``ondevice``: this benchmark feeds its own batches)."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        v = parse_variant(item, VARIANT_TOKENS)
        out.append("+".join([*(["bf16"] if v["precision"] == "bf16" else []), *(["compile"] if v["compile"] else [])]) or "fp32")
    if not out:
        raise ValueError("--variants: empty; e.g. fp32,bf16,compile")
    return list(dict.fromkeys(out))


class Contender:
    """One model under test: the release (fp32, as its README trains) or an opflow variant.

    ``autocast``: bf16 autocast around forward + loss (``torch.autocast(device.type, bfloat16)``);
    ``compiled``: the model is ``torch.compile(model, dynamic=False)`` (every batch size it meets
    compiles once, in an untimed warm-up).
    """

    def __init__(self, name: str, module: Any, device: Any, *, autocast: bool = False, compiled: bool = False, lr: float = 1e-5) -> None:
        import torch

        self.name, self.module, self.device, self.autocast, self.compiled = name, module, device, autocast, compiled
        self.model = torch.compile(module, dynamic=False) if compiled else module
        self.opt = torch.optim.AdamW(module.parameters(), lr=lr)

    def _ctx(self) -> Any:
        import contextlib

        import torch

        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()

    def train_step(self, coords: Any, a: Any, u: Any) -> None:
        """Forward, relative-L2 loss, backward, AdamW step (``opflow.metrics.rel_l2_loss``, the loss in float32)."""
        from opflow.metrics import rel_l2_loss

        self.module.train()
        self.opt.zero_grad(set_to_none=True)
        with self._ctx():
            y = self.model(coords, a)
        rel_l2_loss(y.float(), u).backward()
        self.opt.step()

    def infer(self, coords: Any, a: Any) -> None:
        import torch

        self.module.eval()
        with torch.no_grad(), self._ctx():
            self.model(coords, a)

    def state_bytes(self) -> int:
        """Parameters plus optimiser state (AdamW's two moments once a step was taken)."""
        import torch

        n = sum(p.numel() * p.element_size() for p in self.module.parameters())
        for st in self.opt.state.values():
            n += sum(v.numel() * v.element_size() for v in st.values() if isinstance(v, torch.Tensor))
        return n


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def skip_reason(variant: str, device: Any, cpu_variants: bool) -> str | None:
    """Why an opflow variant is not measured on ``device`` (None: it is)."""
    if device.type == "cuda" or variant == "fp32" or cpu_variants:
        return None
    return f"{variant} is a GPU variant (bf16 autocast / torch.compile); skipped on {device.type} (--cpu-variants runs it there: code check only)"


def allow_recompiles(limit: int = 64) -> dict[str, int]:
    """Raise torch._dynamo's per-function recompile limit (default 8) to ``limit``: compiled variants
    measured side by side in one process share the model's code objects, and every autocast state,
    batch size and train / eval mode is a recompilation of them; past the limit dynamo silently runs
    them eagerly, which would time an uncompiled model as the compiled one. Returns what was set."""
    import torch._dynamo

    cfg, out = torch._dynamo.config, {}
    for name, want in (("recompile_limit", limit), ("cache_size_limit", limit), ("accumulated_recompile_limit", 8 * limit), ("accumulated_cache_size_limit", 8 * limit)):
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), want))
            out[name] = int(getattr(cfg, name))
    return out


def make_contenders(
    mod: types.ModuleType | None, variants: list[str], device: Any, overrides: dict[str, Any] | None = None, config: str = "darcy",
) -> dict[str, Contender]:
    """The release (when ``mod`` is given) and one opflow model per variant, float32 on ``device``,
    all with the same initial weights (the release's, copied; :func:`paired_models`)."""
    import copy

    import torch

    if mod is not None:
        theirs, ours = paired_models(mod, torch.float32, config=config)
        out = {"release": Contender("release", theirs.to(device), device)}
    else:
        torch.manual_seed(0)
        ours, out = opflow_model(config, overrides), {}
    if any("compile" in v.split("+") for v in variants):
        allow_recompiles()
    for v in variants:
        toks = v.split("+")
        out[v] = Contender(v, copy.deepcopy(ours).to(device), device, autocast="bf16" in toks, compiled="compile" in toks)
    return out


def _peak_step_bytes(c: Contender, batch: tuple[Any, Any, Any]) -> dict[str, Any]:
    """Memory of one training step of ``c``: its state (parameters + optimiser) plus the growth over the
    step (activations, gradients, temporaries; :class:`benchmarks.models.PeakMemory`: CUDA
    ``max_memory_allocated``, else the peak resident set)."""
    from benchmarks.models import PeakMemory

    mem = PeakMemory(str(c.device))
    c.opt.zero_grad(set_to_none=True)
    mem.start()
    c.train_step(*batch)
    step = mem.peak()
    state = c.state_bytes()
    return {"peak_memory_bytes": state + step, "state_bytes": state, "step_peak_bytes": step, "peak_memory_kind": mem.kind}


def speed(contenders: dict[str, Contender], resolution: int, batch: int, repeats: int, device: Any, config: str = "darcy") -> dict[str, Any]:
    """Median training step and inference forward of every contender on one batch of ``batch`` Darcy-like
    samples, measured alternately (repeat by repeat) in one process, a device synchronise closing
    every timed region; one untimed warm-up per contender first (its time: ``warmup_s``, for a
    compiled model the compile time ``compile_s``); then the memory of a training step."""
    coords, a, u = (t.to(device) for t in config_batch(config, resolution, batch, 0, _float32()))
    train: dict[str, list[float]] = {k: [] for k in contenders}
    infer: dict[str, list[float]] = {k: [] for k in contenders}
    warm: dict[str, float] = {}
    for name, c in contenders.items():  # warm-up: first calls, compilation, the covariance buffers for evaluation
        _sync(device)
        t0 = time.perf_counter()
        c.train_step(coords, a, u)
        c.infer(coords, a)
        _sync(device)
        warm[name] = time.perf_counter() - t0
    for _ in range(repeats):
        for name, c in contenders.items():
            _sync(device)
            t0 = time.perf_counter()
            c.train_step(coords, a, u)
            _sync(device)
            train[name].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            c.infer(coords, a)
            _sync(device)
            infer[name].append(time.perf_counter() - t0)
    out: dict[str, Any] = {}
    for name, c in contenders.items():
        tm, im = statistics.median(train[name]), statistics.median(infer[name])
        out[name] = {
            "train_step_s": {"median": tm, "all": train[name]},
            "inference_s": {"median": im, "all": infer[name]},
            "train_samples_per_s": batch / tm,
            "inference_samples_per_s": batch / im,
            "warmup_s": warm[name],
            **({"compile_s": warm[name]} if c.compiled else {}),
            **_peak_step_bytes(c, (coords, a, u)),
        }
    return out


def _float32() -> Any:
    import torch

    return torch.float32


def epoch_times(
    contenders: dict[str, Contender], medians: dict[str, Any], resolution: int, batch: int, samples: int, device: Any, full: bool, config: str = "darcy",
) -> dict[str, Any]:
    """Time of one epoch of ``samples`` samples, ``ceil(samples / batch)`` training steps, per contender:
    ``extrapolated_s`` = steps x the median step of :func:`speed`; with ``full``, ``measured_s``: a real
    loop over ``samples`` random Darcy-like samples held on ``device``, shuffled, batch by batch
    (the last batch smaller when ``batch`` does not divide ``samples``; that size is warmed up, and
    compiled, before the timing)."""
    import torch

    steps = math.ceil(samples / batch)
    out: dict[str, Any] = {"samples": samples, "batch": batch, "steps": steps}
    for name in contenders:
        out[name] = {"extrapolated_s": steps * medians[name]["train_step_s"]["median"], "how": "steps x median training step"}
    if not full:
        return out
    coords1, a_all, u_all = (t.to(device) for t in config_batch(config, resolution, samples, 1, torch.float32))
    coords1 = coords1[:1]
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(0)).to(device)
    batches = [order[i : i + batch] for i in range(0, samples, batch)]
    for name, c in contenders.items():
        rest = samples % batch
        if rest:  # untimed: the smaller last batch's first call (a compiled model compiles it here)
            idx = batches[-1]
            c.train_step(coords1.expand(rest, -1, -1), a_all[idx], u_all[idx])
        _sync(device)
        t0 = time.perf_counter()
        for idx in batches:
            c.train_step(coords1.expand(idx.numel(), -1, -1), a_all[idx], u_all[idx])
        _sync(device)
        dt = time.perf_counter() - t0
        out[name] |= {"measured_s": dt, "measured_samples_per_s": samples / dt, "measured_how": "real loop over the samples held on the device"}
    return out


def ratios(res: dict[str, Any], variants: list[str], epochs: dict[str, Any] | None) -> dict[str, Any]:
    """Release over each variant: > 1 means the variant is faster (time) or smaller (memory)."""
    out: dict[str, Any] = {}
    if "release" not in res:
        return out
    r = res["release"]
    for v in variants:
        if v not in res:
            continue
        row = {
            "train_step": r["train_step_s"]["median"] / res[v]["train_step_s"]["median"],
            "inference": r["inference_s"]["median"] / res[v]["inference_s"]["median"],
            "peak_memory": r["peak_memory_bytes"] / max(res[v]["peak_memory_bytes"], 1),
        }
        if epochs is not None and "measured_s" in epochs.get(v, {}) and "measured_s" in epochs.get("release", {}):
            row["epoch_measured"] = epochs["release"]["measured_s"] / epochs[v]["measured_s"]
        out[v] = row
    return out


def components(mod: types.ModuleType, resolution: int, batch: int, repeats: int, device: Any = None) -> dict[str, Any]:
    """Forward + backward of the two parts in question, release vs opflow, at the release's shapes:
    the Nystrom attention of one NN block, and the whitening of one orthogonal stage (opflow: float64
    covariance, Cholesky and triangular solve; release: float32 ``psd_safe_cholesky`` and inverse)."""
    import torch

    device = torch.device("cpu") if device is None else torch.device(device)
    theirs, ours = paired_models(mod, torch.float32)
    theirs, ours = theirs.to(device), ours.to(device)
    theirs.train(), ours.train()
    n = resolution * resolution
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, n, 128, generator=g).to(device)
    feats = (torch.randn(batch, n, 32, generator=g) @ torch.randn(32, 32, generator=g) + 0.3).to(device)

    def nys_release() -> None:
        theirs.blocks[0].Attn(x.requires_grad_()).sum().backward()

    def nys_opflow() -> None:
        ours.blocks[0].attn(x.requires_grad_()).sum().backward()

    def white_release() -> None:
        f = feats.clone().requires_grad_()
        cov = torch.einsum("blc, bld->cd", f, f) / f.shape[0] / f.shape[1]
        L = mod.psd_safe_cholesky(cov)
        (f @ L.inverse().transpose(-2, -1)).sum().backward()

    def white_opflow() -> None:
        f = feats.clone().requires_grad_()
        (f @ ours.ortho[0].ort(f)).sum().backward()

    fns = {"nystrom_release": nys_release, "nystrom_opflow": nys_opflow, "whitening_release": white_release, "whitening_opflow": white_opflow}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()
    for _ in range(repeats):
        for k, f in fns.items():
            _sync(device)
            t0 = time.perf_counter()
            f()
            _sync(device)
            times[k].append(time.perf_counter() - t0)
    out: dict[str, Any] = {k: {"median_s": statistics.median(v), "all": v} for k, v in times.items()}
    out["nystrom_ratio_opflow_over_release"] = out["nystrom_opflow"]["median_s"] / out["nystrom_release"]["median_s"]
    out["whitening_ratio_opflow_over_release"] = out["whitening_opflow"]["median_s"] / out["whitening_release"]["median_s"]
    return out


def _device_time_us(e: Any) -> float:
    """Self time of a profiler event on the accelerator (the attribute's name changed across torch versions)."""
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        v = getattr(e, attr, None)
        if v is not None:
            return float(v)
    return 0.0


def profile(resolution: int, batch: int, overrides: dict[str, Any] | None = None, device: Any = None, config: str = "darcy") -> dict[str, Any]:
    """Self time of the main operators of one opflow training step (forward + backward) of the
    release-configured model (``overrides``: changed hyperparameters, e.g. the smoke run's 1 layer):
    CPU time, and on CUDA the GPU time (the operators sorted by it)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    from opflow.metrics import rel_l2_loss

    device = torch.device("cpu") if device is None else torch.device(device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = opflow_model(config, overrides).to(device).train()
    coords, a, u = (t.to(device) for t in config_batch(config, resolution, batch, 0, torch.float32))
    rel_l2_loss(model(coords, a), u).backward()
    _sync(device)
    with tprofile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as prof:
        rel_l2_loss(model(coords, a), u).backward()
        _sync(device)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    key = _device_time_us if cuda else (lambda e: e.self_cpu_time_total)
    top = sorted(events, key=lambda e: -key(e))[:15]
    out: dict[str, Any] = {"device": str(device), "total_self_cpu_s": total / 1e6}
    if cuda:
        out["total_self_device_s"] = sum(_device_time_us(e) for e in events) / 1e6
    out["top_ops"] = [
        {"op": e.key, "self_cpu_s": e.self_cpu_time_total / 1e6, **({"self_device_s": _device_time_us(e) / 1e6} if cuda else {}), "calls": e.count}
        for e in top
    ]
    return out


#: a full run needs the authors' checkout (opflow bench skips it without: --extra ono_official='--release DIR')
BENCH_REQUIRES = ["--release"]
#: its GPU run (opflow bench, when torch sees CUDA): the paper's batch 8, every variant, the epoch measured
BENCH_GPU_ARGS = ["--device", "cuda", "--batch", "8", "--variants", "fp32,bf16,compile,bf16+compile", "--epoch", "--full-epoch"]
#: the smoke run's model without the release: the release's structure with 1 layer and 32 landmarks (seconds, not minutes)
SMOKE_MODEL = {"n_layers": 1, "num_landmarks": 32}


def _device(spec: str) -> Any:
    """``--device``: auto (cuda when torch sees one, else cpu), cpu, cuda, cuda:N (``opflow.runtime.choose_device``;
    the release runs on the CPU and CUDA only)."""
    import torch

    from opflow.data.errors import ConfigError
    from opflow.runtime import choose_device

    try:
        dev = choose_device(spec) if spec != "auto" else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    except ConfigError as e:
        raise SystemExit(f"ono_official: --{e}") from None
    if dev.type not in ("cpu", "cuda"):
        raise SystemExit(f"ono_official: --device {spec}: use auto, cpu, cuda or cuda:N")
    return dev


def _speed_block(mod: types.ModuleType | None, a: argparse.Namespace, dev: Any, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The ``speed`` block: every contender's step medians, samples/s and memory, the epoch times and
    the ratios; the old keys (``release``, ``opflow`` = the fp32 variant, ``*_ratio_opflow_over_release``)
    kept where both exist."""
    run = [v for v in a.variants if skip_reason(v, dev, a.cpu_variants) is None]
    skipped = {v: skip_reason(v, dev, a.cpu_variants) for v in a.variants if v not in run}
    contenders = make_contenders(mod, run, dev, overrides, a.release_config)
    res = speed(contenders, a.resolution, a.batch, a.repeats, dev, a.release_config)
    block: dict[str, Any] = {
        "device": str(dev), "resolution": a.resolution, "points": config_points(a.release_config, a.resolution), "batch": a.batch, "repeats": a.repeats,
        "release_precision": "float32 (as its README trains)" if mod is not None else None,
        "variants_measured": run, "variants_skipped": skipped,
    }
    if any(c.compiled for c in contenders.values()):
        import torch._dynamo

        block["dynamo_limits"] = {k: int(getattr(torch._dynamo.config, k)) for k in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit") if hasattr(torch._dynamo.config, k)}
    if "release" in res:
        block["release"] = res["release"]
    block["variants"] = {v: res[v] for v in run}
    if "fp32" in res:
        block["opflow"] = res["fp32"]
    if "release" in res and "fp32" in res:
        block["train_ratio_opflow_over_release"] = res["fp32"]["train_step_s"]["median"] / res["release"]["train_step_s"]["median"]
        block["inference_ratio_opflow_over_release"] = res["fp32"]["inference_s"]["median"] / res["release"]["inference_s"]["median"]
    epochs = None
    if a.epoch:
        epochs = epoch_times(contenders, res, a.resolution, a.batch, a.samples, dev, a.full_epoch, a.release_config)
        block["epoch"] = epochs
    block["ratios_release_over_variant"] = ratios(res, run, epochs)
    return block


def _print_speed(block: dict[str, Any]) -> None:
    for name in ["release", *block["variants"]]:
        r = block.get("release") if name == "release" else block["variants"][name]
        if r is None:
            continue
        ep = block.get("epoch", {}).get(name, {})
        print(
            f"{name:14s} train step {r['train_step_s']['median']:.4g} s ({r['train_samples_per_s']:.4g} samples/s)  "
            f"inference {r['inference_s']['median']:.4g} s  peak {r['peak_memory_bytes'] / 2**20:.1f} MiB  warm-up {r['warmup_s']:.3g} s"
            + (f"  epoch ~{ep['extrapolated_s']:.3g} s" if ep else "") + (f" (measured {ep['measured_s']:.3g} s)" if "measured_s" in ep else ""),
            flush=True,
        )
    for k, v in block.get("variants_skipped", {}).items():
        print(f"{k:14s} skipped: {v}", flush=True)
    if block.get("ratios_release_over_variant"):
        print("release / variant:", block["ratios_release_over_variant"], flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, default=None, help="checkout of the authors' repository (outside this one); required unless --smoke")
    ap.add_argument("--release-config", choices=sorted(RELEASE_COMMANDS), default="darcy",
                    help="which README command: darcy (Darcy_example.py, Nystrom block; models.ono_official), zeroshot "
                    "(space_gen.py, the linear_attention_transformer block; models.ono_official_zeroshot; needs that package on --pythonpath) "
                    "or elasticity (ela_example.py, Nystrom block, the point's place as an input; models.ono_official_elasticity; "
                    "972 random points per sample, --resolution unused) or ns (NS_example2.py, the zero-shot network on 10 frames; "
                    "models.ono_official_ns; also its training loop, teacher forcing over 10 frames, against training.unroll: truth)")
    ap.add_argument("--pythonpath", action="append", default=[], help="folder with nystrom_attention and einops (zeroshot: also linear_attention_transformer 0.19.1 and its imports)")
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto (cuda when present)")
    ap.add_argument("--resolution", type=int, default=85)
    ap.add_argument("--batch", type=int, default=4, help="samples per step (the release README's 4; the paper's protocol and the GPU recipe: 8)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default="fp32,bf16,compile", help="opflow variants: fp32, bf16 (autocast), compile (torch.compile), bf16+compile; "
                    "the release always runs in fp32; non-fp32 variants are skipped on a CPU unless --cpu-variants")
    ap.add_argument("--cpu-variants", action="store_true", help="run bf16 (CPU autocast) and compile on a CPU too: a check of the code path, no timing claim")
    ap.add_argument("--epoch", action="store_true", help="also the time of an epoch of --samples samples, extrapolated from the median step")
    ap.add_argument("--full-epoch", action="store_true", help="--epoch, plus a real loop over --samples random samples held on the device")
    ap.add_argument("--samples", type=int, default=1000, help="samples per epoch for --epoch (the paper's Darcy training set: 1000)")
    ap.add_argument("--equivalence-resolution", type=int, default=29)
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-components", action="store_true", help="leave out the component timing and the profile")
    ap.add_argument("--out", type=Path, default=None, help="result JSON (default benchmarks/results/ono_official.json, on CUDA ono_official_cuda.json)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke); "
                    "without --release only opflow's side (its variants, the epoch loop, the profile)")
    a = ap.parse_args(argv)
    if a.release is None and not a.smoke:
        ap.error("--release DIR (a checkout of the authors' repository) is required; only --smoke runs without it")
    try:
        a.variants = parse_variants(a.variants)
    except ValueError as e:
        ap.error(str(e))
    if a.samples < 1:
        ap.error("--samples must be at least 1")
    a.epoch = a.epoch or a.full_epoch
    if a.smoke:  # every code path at toy sizes, the epoch loop included (5 samples in batches of 2: a smaller last batch)
        a.resolution, a.batch, a.repeats, a.equivalence_resolution = 9, 2, 1, 9
        a.epoch, a.full_epoch, a.samples = True, True, 5
    import torch

    torch.set_num_threads(a.threads)
    dev = _device(a.device)
    stem = "ono_official" if a.release_config == "darcy" else f"ono_official_{a.release_config}"
    out = a.out or Path(f"benchmarks/results/{stem}.json" if dev.type == "cpu" else f"benchmarks/results/{stem}_cuda.json")
    settings = {"device": str(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
                "float32_matmul_precision": torch.get_float32_matmul_precision(), "cuda": torch.version.cuda}
    if a.release is None:  # smoke run without the release: opflow's side only
        res0: dict[str, Any] = {"benchmark": "ono_official", "release_config": a.release_config, "smoke": True, "created": utc_timestamp(), "machine": machine(loadavg()), "release": None,
                                "versions": versions("torch"), "threads": a.threads, **settings}
        res0["speed"] = {**_speed_block(None, a, dev, SMOKE_MODEL), "overrides": SMOKE_MODEL}
        _print_speed(res0["speed"])
        res0["profile_opflow"] = {"resolution": a.resolution, "batch": a.batch, "overrides": SMOKE_MODEL, **profile(a.resolution, a.batch, SMOKE_MODEL, dev, a.release_config)}
        write_json_atomic(out, res0)
        print(f"smoke run without --release: opflow's release-configured ONO only; wrote {out}")
        return 0
    mod = load_release(a.release.resolve(), a.pythonpath)
    res: dict[str, Any] = {
        "benchmark": "ono_official",
        "release_config": a.release_config,
        "smoke": a.smoke,
        "created": utc_timestamp(),
        "machine": machine(loadavg()),
        "versions": versions("torch", "nystrom-attention", "einops", *(["linear-attention-transformer"] if a.release_config in ("zeroshot", "ns") else [])),
        "threads": a.threads,
        **settings,
        "load_average_before": loadavg(),
    }
    res["equivalence"] = equivalence(mod, a.equivalence_resolution, 3, dev, a.release_config)
    print("equivalence:", res["equivalence"], flush=True)
    if a.release_config == "ns":  # the script's training loop (teacher forcing over 10 frames) against training.unroll: truth
        res["unrolled_training"] = unrolled_training(mod, a.equivalence_resolution, 3, 2, dev)
        print("unrolled training:", res["unrolled_training"], flush=True)
    if not a.skip_speed:
        res["speed"] = _speed_block(mod, a, dev, None)
        _print_speed(res["speed"])
        write_json_atomic(out, res)  # the side-by-side numbers are kept even if what follows fails
        if not a.skip_components:
            if a.release_config == "darcy":  # the Nystrom block and the whitening, side by side
                res["components"] = {"resolution": a.resolution, "batch": a.batch, **components(mod, a.resolution, a.batch, a.repeats, dev)}
                print("components:", {k: v for k, v in res["components"].items() if "ratio" in k}, flush=True)
            res["profile_opflow"] = profile(a.resolution, a.batch, device=dev, config=a.release_config)
    res["load_average_after"] = loadavg()
    write_json_atomic(out, res)
    print(f"wrote {out}")
    return 0


def summarize(result: dict[str, Any]) -> list[str]:
    """``SUMMARY.md`` lines: equivalence, the side-by-side step times, samples/s, memory and epoch times."""
    lines = [f"- device {result.get('device', 'cpu')} ({result.get('device_name') or '-'}), torch {result.get('versions', {}).get('torch', '?')}, "
             f"release config {result.get('release_config', 'darcy')}"]
    eq = result.get("equivalence")
    if eq:
        worst = max(r["max_abs_diff_over_max_abs"] for r in eq["outputs"])
        counts = eq.get("parameters")
        lines.append(f"- equivalence with the release ({eq['dtype']}): largest relative output difference {worst:.2e}"
                     + (f"; parameters {counts['release']:,} (release) / {counts['opflow']:,} (opflow)" if counts else ""))
    ut = result.get("unrolled_training")
    if ut:
        lines.append(f"- the script's training loop ({ut['frames_per_step']} teacher-forced frames per step) against training.unroll: truth, "
                     f"{ut['dtype']}, {len(ut['steps'])} steps: losses within {max(r['loss_rel_diff'] for r in ut['steps']):.1e}, "
                     f"outputs after training within {max(r['eval_output_max_abs_diff_over_max_abs'] for r in ut['steps']):.1e}, "
                     f"running covariances within {max(r['running_covariance_max_rel_diff'] for r in ut['steps']):.1e}")
    sp = result.get("speed") or {}
    for name in ["release", *sp.get("variants", {})]:
        r = sp.get("release") if name == "release" else sp["variants"][name]
        if not r:
            continue
        ep = (sp.get("epoch") or {}).get(name, {})
        lines.append(
            f"- {name}: train step {r['train_step_s']['median']:.4g} s ({r['train_samples_per_s']:.4g} samples/s, batch {sp['batch']}), "
            f"inference {r['inference_s']['median']:.4g} s, peak {r['peak_memory_bytes'] / 2**20:.0f} MiB"
            + (f", epoch of {sp['epoch']['samples']}: ~{ep['extrapolated_s']:.3g} s" if ep else "")
            + (f" (measured {ep['measured_s']:.3g} s)" if "measured_s" in ep else "")
        )
    for name, row in (sp.get("ratios_release_over_variant") or {}).items():
        lines.append(f"- release / {name}: " + ", ".join(f"{k} {v:.3g}x" for k, v in row.items()))
    return lines


if __name__ == "__main__":
    sys.exit(main())
