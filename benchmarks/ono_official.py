"""ONO at the authors' released Darcy configuration: equivalence with the release, and speed on a CPU.

    python -m benchmarks.ono_official --release DIR [--pythonpath DIR ...] [--resolution 85]
                                      [--batch 4] [--repeats 5] [--threads 2] [--out ...]

``DIR`` is a checkout of the authors' repository (``Orthogonal-Neural-operator`` of the
zhijie-group organisation; its ``ONOmodel2.py``) made *outside* this repository, and
``--pythonpath`` the folder(s) where the ``nystrom-attention`` and ``einops`` packages are
installed (e.g. ``pip install --target /tmp/release_deps nystrom-attention einops``); nothing of
either is copied here. The release's other imports (timm, linear-attention, performer, reformer,
linformer packages) are only needed for its other blocks: they are replaced by empty stand-ins,
and timm's ``trunc_normal_`` by torch's (the same distribution).

1. Equivalence: the release's ``ONO2`` (README Darcy command) and opflow's ``ono`` with
   :data:`opflow.models.ono.RELEASE_DARCY`, weights copied one to one (:func:`release_to_opflow`),
   in float64 on a few random Darcy-like batches: output difference in training mode (batch
   covariance) and, after the covariance buffers are filled, in evaluation mode.
2. Speed (float32, ``--threads`` threads): median time of a training step (forward, relative-L2
   loss, backward, AdamW step) and of an inference forward of each model on a batch of
   ``--batch`` samples at ``resolution^2`` points, measured alternately in the same process so the
   ratio is fair on a shared machine; plus a breakdown of opflow's model (Nystrom attention, the
   k x k covariance algebra) by ``torch.profiler``.

Writes ``benchmarks/results/ono_official.json``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, utc_timestamp, versions, write_json_atomic


def load_release(release_dir: Path, pythonpath: list[str]) -> types.ModuleType:
    """Import the release's ``ONOmodel2`` with stand-ins for the packages its Darcy model does not use."""
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
    for name, attrs in stubs.items():
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            sys.modules[name] = mod
    sys.path.insert(0, str(release_dir))
    try:
        return importlib.import_module("ONOmodel2")
    finally:
        sys.path.remove(str(release_dir))


def release_model(mod: types.ModuleType) -> Any:
    """``ONO2`` as the release's Darcy script builds it from the README command."""
    return mod.ONO2(n_hidden=128, n_layers=10, space_dim=2, fun_dim=1, dropout=0.0, n_head=8, momentum=0.9, orth=1, psi_dim=32,
                    mlp_ratio=2, attn_type="nystrom")


def release_to_opflow(sd: dict[str, Any], n_layers: int, width: int) -> dict[str, Any]:
    """The release's ``ONO2`` state dict renamed to opflow's ``ono`` (``RELEASE_DARCY``) parameters.

    ``preprocess`` -> ``encoder``; per stage ``ln_1``/``Attn``/``ln_2``/``mlp`` -> the NN block
    (``to_qkv`` split into ``to_q`` and ``to_kv``), ``proj``/``mu``/``ln_3``/``mlp2`` -> the
    orthogonal flow (``feature_cov`` -> ``running_cov``).
    """
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
            out[b + "attn.to_out." + p] = sd[s + "Attn.to_out.0." + p]
            out[o + "w_q." + p] = sd[s + "proj." + p]
            out[o + "ln." + p] = sd[s + "ln_3." + p]
        qkv = sd[s + "Attn.to_qkv.weight"]
        out[b + "attn.to_q.weight"], out[b + "attn.to_kv.weight"] = qkv[:width], qkv[width:]
        out[b + "attn.res_conv.weight"] = sd[s + "Attn.res_conv.weight"]
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


def paired_models(mod: types.ModuleType, dtype: Any, seed: int = 0) -> tuple[Any, Any]:
    import torch

    from opflow.models import build_model
    from opflow.models.ono import RELEASE_DARCY

    torch.manual_seed(seed)
    theirs = release_model(mod).to(dtype)
    ours = build_model({"arch": "ono", **RELEASE_DARCY}, 1, 1, 2).to(dtype)
    missing = ours.load_state_dict(release_to_opflow(theirs.state_dict(), 10, 128), strict=False)
    assert not missing.unexpected_keys and set(missing.missing_keys) <= {f"ortho.{i}.ort.{b}" for i in range(10) for b in ("running_cov", "num_batches_tracked")}, missing
    return theirs, ours


def equivalence(mod: types.ModuleType, resolution: int, batch: int) -> dict[str, Any]:
    import torch

    theirs, ours = paired_models(mod, torch.float64)
    rows = []
    for step, seed in enumerate((1, 2, 3)):
        coords, a, _ = darcy_batch(resolution, batch, seed, torch.float64)
        theirs.train(), ours.train()
        with torch.no_grad():
            yt, yo = theirs(coords, a), ours(coords, a)
        rows.append({"mode": "train", "batch": step, "max_abs_diff_over_max_abs": float((yt - yo).abs().max() / yt.abs().max())})
    cov = max(float((blk.feature_cov - oa.ort.running_cov).abs().max() / blk.feature_cov.abs().max()) for blk, oa in zip(theirs.blocks, ours.ortho))
    coords, a, _ = darcy_batch(resolution, batch, 9, torch.float64)
    theirs.eval(), ours.eval()
    with torch.no_grad():
        yt, yo = theirs(coords, a), ours(coords, a)
    rows.append({"mode": "eval", "batch": 3, "max_abs_diff_over_max_abs": float((yt - yo).abs().max() / yt.abs().max())})
    return {"dtype": "float64", "resolution": resolution, "batch": batch, "outputs": rows, "running_covariance_max_rel_diff": cov}


def _train_step(model: Any, opt: Any, coords: Any, a: Any, u: Any, release: bool) -> None:
    from opflow.metrics import rel_l2_loss

    opt.zero_grad(set_to_none=True)
    y = model(coords, a) if release else model(coords, a)
    rel_l2_loss(y, u).backward()
    opt.step()


def speed(mod: types.ModuleType, resolution: int, batch: int, repeats: int) -> dict[str, Any]:
    import torch

    theirs, ours = paired_models(mod, torch.float32)
    coords, a, u = darcy_batch(resolution, batch, 0, torch.float32)
    opts = {"release": torch.optim.AdamW(theirs.parameters(), lr=1e-5), "opflow": torch.optim.AdamW(ours.parameters(), lr=1e-5)}
    models = {"release": theirs, "opflow": ours}
    train: dict[str, list[float]] = {k: [] for k in models}
    infer: dict[str, list[float]] = {k: [] for k in models}
    for name, m in models.items():  # warm-up (also fills the covariance buffers for evaluation)
        m.train()
        _train_step(m, opts[name], coords, a, u, name == "release")
    for _ in range(repeats):
        for name, m in models.items():
            m.train()
            t0 = time.perf_counter()
            _train_step(m, opts[name], coords, a, u, name == "release")
            train[name].append(time.perf_counter() - t0)
            m.eval()
            with torch.no_grad():
                t0 = time.perf_counter()
                m(coords, a)
                infer[name].append(time.perf_counter() - t0)
    out: dict[str, Any] = {}
    for name in models:
        out[name] = {
            "train_step_s": {"median": statistics.median(train[name]), "all": train[name]},
            "inference_s": {"median": statistics.median(infer[name]), "all": infer[name]},
        }
    out["train_ratio_opflow_over_release"] = out["opflow"]["train_step_s"]["median"] / out["release"]["train_step_s"]["median"]
    out["inference_ratio_opflow_over_release"] = out["opflow"]["inference_s"]["median"] / out["release"]["inference_s"]["median"]
    return out


def components(mod: types.ModuleType, resolution: int, batch: int, repeats: int) -> dict[str, Any]:
    """Forward + backward of the two parts in question, release vs opflow, at the release's shapes:
    the Nystrom attention of one NN block, and the whitening of one orthogonal stage (opflow: float64
    covariance, Cholesky and triangular solve; release: float32 ``psd_safe_cholesky`` and inverse)."""
    import torch

    theirs, ours = paired_models(mod, torch.float32)
    theirs.train(), ours.train()
    n = resolution * resolution
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, n, 128, generator=g)
    feats = torch.randn(batch, n, 32, generator=g) @ torch.randn(32, 32, generator=g) + 0.3

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
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    out: dict[str, Any] = {k: {"median_s": statistics.median(v), "all": v} for k, v in times.items()}
    out["nystrom_ratio_opflow_over_release"] = out["nystrom_opflow"]["median_s"] / out["nystrom_release"]["median_s"]
    out["whitening_ratio_opflow_over_release"] = out["whitening_opflow"]["median_s"] / out["whitening_release"]["median_s"]
    return out


def profile(resolution: int, batch: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Self CPU time of the main operators of one opflow training step (forward + backward) of the
    release-configured model (``overrides``: changed hyperparameters, e.g. the smoke run's 1 layer)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    from opflow.metrics import rel_l2_loss
    from opflow.models import build_model
    from opflow.models.ono import RELEASE_DARCY

    torch.manual_seed(0)
    model = build_model({"arch": "ono", **RELEASE_DARCY, **(overrides or {})}, 1, 1, 2).train()
    coords, a, u = darcy_batch(resolution, batch, 0, torch.float32)
    rel_l2_loss(model(coords, a), u).backward()
    with tprofile(activities=[ProfilerActivity.CPU]) as prof:
        rel_l2_loss(model(coords, a), u).backward()
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    return {"total_self_cpu_s": total / 1e6, "top_ops": [{"op": e.key, "self_cpu_s": e.self_cpu_time_total / 1e6, "calls": e.count} for e in top]}


#: a full run needs the authors' checkout (opflow bench skips it without: --extra ono_official='--release DIR')
BENCH_REQUIRES = ["--release"]
#: the smoke run's model without the release: the release's structure with 1 layer and 32 landmarks (seconds, not minutes)
SMOKE_MODEL = {"n_layers": 1, "num_landmarks": 32}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, default=None, help="checkout of the authors' repository (outside this one); required unless --smoke")
    ap.add_argument("--pythonpath", action="append", default=[], help="folder with nystrom_attention and einops")
    ap.add_argument("--resolution", type=int, default=85)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--equivalence-resolution", type=int, default=29)
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ono_official.json"))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke); without --release only opflow's model is profiled")
    a = ap.parse_args(argv)
    if a.release is None and not a.smoke:
        ap.error("--release DIR (a checkout of the authors' repository) is required; only --smoke runs without it")
    if a.smoke:
        a.resolution, a.batch, a.repeats, a.equivalence_resolution = 9, 1, 1, 9
    import torch

    torch.set_num_threads(a.threads)
    if a.release is None:  # smoke run without the release: opflow's side only
        res0 = {"benchmark": "ono_official", "smoke": True, "created": utc_timestamp(), "machine": machine(loadavg()), "release": None,
                "profile_opflow": {"resolution": a.resolution, "batch": a.batch, "overrides": SMOKE_MODEL, **profile(a.resolution, a.batch, SMOKE_MODEL)}}
        write_json_atomic(a.out, res0)
        print(f"smoke run without --release: profiled opflow's release-configured ONO only; wrote {a.out}")
        return 0
    mod = load_release(a.release.resolve(), a.pythonpath)
    res: dict[str, Any] = {
        "benchmark": "ono_official",
        "smoke": a.smoke,
        "created": utc_timestamp(),
        "machine": machine(loadavg()),
        "versions": versions("torch", "nystrom-attention", "einops"),
        "threads": a.threads,
        "load_average_before": loadavg(),
    }
    res["equivalence"] = equivalence(mod, a.equivalence_resolution, 3)
    print("equivalence:", res["equivalence"], flush=True)
    if not a.skip_speed:
        res["speed"] = {"resolution": a.resolution, "points": a.resolution**2, "batch": a.batch, "repeats": a.repeats,
                        **speed(mod, a.resolution, a.batch, a.repeats)}
        print("speed:", {k: v for k, v in res["speed"].items() if "ratio" in k}, flush=True)
        res["components"] = {"resolution": a.resolution, "batch": a.batch, **components(mod, a.resolution, a.batch, a.repeats)}
        print("components:", {k: v for k, v in res["components"].items() if "ratio" in k}, flush=True)
        res["profile_opflow"] = profile(a.resolution, a.batch)
    res["load_average_after"] = loadavg()
    write_json_atomic(a.out, res)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
