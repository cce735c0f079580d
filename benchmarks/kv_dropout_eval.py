"""The test error of a Galerkin Transformer trained with kv_dropout, with and without the dropout in evaluation.

The Galerkin authors' code (Cao 2021, ``libs/layers.py``, ``linear_attention``) drops entries of each head's
``K^T V / n`` with p = 0.5 at every call, in evaluation too, so each of their reported test errors is one draw of
a random network. A model trained with ``kv_dropout`` (:class:`opflow.models.layers.MultiHeadAttention`) is
evaluated here on the test split of its data file once with the dropout off in evaluation (as ``opflow evaluate``
does) and ``--repeats`` times with ``kv_dropout_eval`` switched on, pass ``i`` with the masks of seed ``i``: the
mean relative L2 over the test samples of each pass, and their spread. Nothing is trained; only the JSON is written.

    python -m benchmarks.kv_dropout_eval --model diag/.../models/burgers512_gt1d_regular/model.pt \\
        --data diag/.../data/burgers512/r512.nc --out benchmarks/results/diagnostics/NAME.json
    python -m benchmarks.kv_dropout_eval --smoke --out /tmp/k.json    # a tiny fresh network on random data
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

from benchmarks.common import loadavg, machine, utc_timestamp, write_json_atomic

OUT = "benchmarks/results/kv_dropout_eval.json"
#: a full run needs a trained model and its data file (``make bench`` skips it without them)
BENCH_REQUIRES = ["--model", "--data"]


def kv_dropout_layers(model) -> list:
    """The model's attention modules that drop entries of ``K^T V`` (``kv_dropout > 0``)."""
    from opflow.models.layers import MultiHeadAttention

    return [m for m in model.modules() if isinstance(m, MultiHeadAttention) and m.kv_dropout > 0]


def compare(model, mean_error: Callable[[], float], repeats: int) -> dict:
    """``mean_error()`` of ``model`` (in eval mode) once with ``kv_dropout`` off in evaluation, then ``repeats``
    times with it on, pass ``i`` after ``torch.manual_seed(i)``; the layers are left as they were."""
    import torch

    layers = kv_dropout_layers(model)
    if not layers:
        raise SystemExit("benchmarks.kv_dropout_eval: the model has no attention layer with kv_dropout > 0; this compares a model trained with it")
    before = [m.kv_dropout_eval for m in layers]
    model.eval()
    try:
        for m in layers:
            m.kv_dropout_eval = False
        deterministic = mean_error()
        for m in layers:
            m.kv_dropout_eval = True
        draws = []
        for i in range(repeats):
            torch.manual_seed(i)
            draws.append(mean_error())
    finally:
        for m, b in zip(layers, before, strict=True):
            m.kv_dropout_eval = b
    return {
        "kv_dropout": sorted({m.kv_dropout for m in layers}),
        "deterministic": deterministic,
        "with_eval_dropout": {
            "repeats": repeats, "seeds": list(range(repeats)), "values": draws,
            "median": statistics.median(draws), "mean": statistics.fmean(draws),
            "stdev": statistics.stdev(draws) if len(draws) > 1 else 0.0, "min": min(draws), "max": max(draws),
        },
    }


def trained(model_path: str, data_path: str, batch_size: int) -> tuple[object, Callable[[], float], dict]:
    """The model of ``model.pt``, the mean test relative L2 on ``data_path``'s test split (opflow's inference path)."""
    import torch
    from torch.utils.data import DataLoader

    from opflow.data.torch_data import Task, collate
    from opflow.data.views import make_dataset
    from opflow.inference import load_model, load_normalizers, test_errors

    model, rec = load_model(model_path)
    norms = load_normalizers(rec)
    t = rec.task
    ds = make_dataset(data_path, "test", Task(tuple(t["inputs"]), tuple(t["outputs"])), rec.trained_view(), purpose="rollout")
    loader = DataLoader(ds, batch_size=batch_size, shuffle=False, collate_fn=collate)

    def mean_error() -> float:
        return float(test_errors(model, loader, norms, torch.device("cpu"))[0].mean())

    return model, mean_error, {"model": model_path, "data": data_path, "run_hash": rec.run_hash, "n_test": len(ds)}


def tiny() -> tuple[object, Callable[[], float], dict]:
    """A fresh 1D GT with ``kv_dropout: 0.5`` and random inputs and targets (the smoke run)."""
    import torch

    from opflow.models import build_model

    torch.manual_seed(0)
    model = build_model({"arch": "gt", "sampler": "none", "width": 8, "n_layers": 1, "n_heads": 1, "ffn_dim": 16, "decoder_width": 8,
                         "modes": 4, "proj_width": 8, "norm": "regular", "kv_dropout": 0.5}, 1, 1, 1)
    x = torch.linspace(0, 1, 32)[None, :, None].repeat(4, 1, 1)
    a, u = torch.randn(4, 32, 1), torch.randn(4, 32, 1)

    def mean_error() -> float:
        with torch.no_grad():
            return float(((model(x, a) - u).norm(dim=(1, 2)) / u.norm(dim=(1, 2))).mean())

    return model, mean_error, {"model": "a fresh 1D GT (smoke)", "data": "random", "run_hash": None, "n_test": 4}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model.pt of a run trained with kv_dropout > 0")
    ap.add_argument("--data", help="the data file it was trained on (its test split is evaluated)")
    ap.add_argument("--out", default=OUT, help=f"result JSON (default {OUT})")
    ap.add_argument("--repeats", type=int, default=10, help="evaluation passes with the dropout on (default 10)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--smoke", action="store_true", help="a tiny fresh network on random data, 2 passes (no claim about the numbers)")
    a = ap.parse_args(argv)
    if not a.smoke and not (a.model and a.data):
        ap.error("a full run needs --model MODEL.pt and --data DATA.nc (or --smoke)")
    start = loadavg()
    model, mean_error, what = tiny() if a.smoke else trained(a.model, a.data, a.batch_size)
    out = {
        "benchmark": "kv_dropout_eval", "created": utc_timestamp(), "smoke": a.smoke, **what,
        "statistic": "mean relative L2 over the test samples of one evaluation pass",
        **compare(model, mean_error, 2 if a.smoke else a.repeats),
        "machine": machine(start),
    }
    write_json_atomic(a.out, out)
    d = out["with_eval_dropout"]
    print(f"deterministic {out['deterministic']:.4g}; with the evaluation dropout median {d['median']:.4g} "
          f"(min {d['min']:.4g}, max {d['max']:.4g}, {d['repeats']} passes) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
