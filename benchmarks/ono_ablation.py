"""Ablation of opflow's departures from the ONO release in the orthogonal flow, on the quick Darcy set.

    python -m benchmarks.ono_ablation --data quick/data/darcy/r43.nc [--seeds 0,1,2] [--epochs 40]
                                      [--settings ours,sum,no_ridge,no_wv] [--out ...]
    python -m benchmarks.ono_ablation --data x --table                 # the Markdown table of --out
    python -m benchmarks.ono_ablation --data DATA --diagnose model.pt  # whitening check of a trained model

Trains opflow's quick ONO (``config/quick.yaml`` ``models.ono`` and its ``training`` block: width
32, 2 layers, linear NN block, batch 4, lr 5e-3, clip 1, mean reduction) on the quick Darcy data
(250 / 50 samples at 43 x 43) for each setting and seed, one at a time from opflow's choices:

* ``ours``: ``quadrature: mean``, ``ortho_ridge: 1e-4``, ``value_proj: true`` (opflow's ``ono``);
* ``sum``: ``quadrature: sum`` (the release); ``no_ridge``: ``ortho_ridge: 0`` (the release);
* ``no_wv``: ``value_proj: false`` (the release); ``release``: all three as the release.

Per run: the final training loss (training mode, batch covariance), the test relative L2 in
evaluation mode (running covariance: what ``evaluate`` reports), the test relative L2 in
training mode (each test batch whitened by its own covariance, the buffers left untouched), and
the largest condition number of the running covariances. A test error far above the training loss
that disappears in training mode is the evaluation-mode whitening mismatch (docs/ono.md).
Each finished run is appended to ``--out`` (JSON), so an interrupted ablation keeps what it did.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine, loadavg, utc_timestamp, write_json_atomic

SETTINGS: dict[str, dict[str, Any]] = {
    "ours": {},
    "sum": {"quadrature": "sum"},
    "no_ridge": {"ortho_ridge": 0.0},
    "no_wv": {"value_proj": False},
    "release": {"quadrature": "sum", "ortho_ridge": 0.0, "value_proj": False},
}


def quick_config() -> dict[str, Any]:
    from opflow.config import load_config_files

    root = Path(__file__).resolve().parents[1]
    return load_config_files([str(root / "config/default.yaml"), str(root / "config/quick.yaml")])


def one_run(config: dict[str, Any], data: Path, setting: str, seed: int, epochs: int, threads: int) -> dict[str, Any]:
    from opflow.config import TrainConfig, deep_merge, resolve_run
    from opflow.runtime import init_distributed, set_threads, shutdown_distributed
    from opflow.train import Trainer

    cfg = copy.deepcopy(config)
    cfg["models"] = {"ono": deep_merge(cfg["models"]["ono"], SETTINGS[setting])}
    cfg["training"] = {**cfg.get("training", {}), "seed": seed, "epochs": epochs, "threads": threads, "device": "cpu", "eval_every": 1}
    run = resolve_run(cfg, "darcy", "ono", str(data))
    tc = TrainConfig.from_dict(run["training"], "run.training")
    set_threads(threads)
    info, dev = init_distributed("cpu")
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as out:
            tr = Trainer(run, tc, info, dev, data, out, progress=False)
            tr.setup()
            tr.resume(restart=True)
            tr.fit()
            diag = whitening_diagnosis(tr.model, tr.test_loader, tr.norms, dev)
            eval_err, train_mode_err, conds = diag["test_rel_l2_eval_mode"], diag["test_rel_l2_train_mode"], diag["running_cov_condition"]
    finally:
        shutdown_distributed(info)
    curves = tr.curves
    return {
        "setting": setting, "overrides": SETTINGS[setting], "seed": seed, "epochs": epochs,
        "final_train_loss": curves[-1]["train_loss"], "test_rel_l2_eval_mode": eval_err,
        "test_rel_l2_train_mode": train_mode_err, "max_running_cov_condition": max(conds),
        "test_over_train_last10": sum(c["test_rel_l2"] / c["train_loss"] for c in curves[-10:]) / min(10, len(curves)),
        "wall_s": time.perf_counter() - t0,
        "curves": [{k: c[k] for k in ("epoch", "train_loss", "test_rel_l2")} for c in curves],
    }


def whitening_diagnosis(model: Any, loader: Any, norms: Any, dev: Any) -> dict[str, Any]:
    """Test error in evaluation mode (running covariance) and with each test batch whitened by its
    own covariance (training mode on a copy: the buffers of ``model`` stay), and the condition
    number of every stage's running covariance."""
    import torch

    from opflow.inference import test_errors

    eval_err = float(test_errors(model, loader, norms, dev)[0].mean())
    batch_stats = copy.deepcopy(model).train()
    batch_stats.eval = batch_stats.train  # test_errors switches to eval mode: keep batch statistics
    with torch.no_grad():
        train_mode_err = float(test_errors(batch_stats, loader, norms, dev)[0].mean())
    conds = [float(torch.linalg.cond(oa.ort.running_cov)) for oa in model.ortho]
    return {"test_rel_l2_eval_mode": eval_err, "test_rel_l2_train_mode": train_mode_err, "running_cov_condition": conds}


def diagnose(model_file: Path, data: Path) -> dict[str, Any]:
    """:func:`whitening_diagnosis` of a trained ``model.pt`` on the test split of its run."""
    import torch

    from opflow.config import TrainConfig
    from opflow.inference import load_model
    from opflow.runtime import init_distributed, shutdown_distributed
    from opflow.train import Trainer

    model, rec = load_model(model_file)
    run = dict(rec.run)
    info, dev = init_distributed("cpu")
    try:
        with tempfile.TemporaryDirectory() as out:
            tr = Trainer(run, TrainConfig.from_dict(run["training"], "run.training"), info, dev, data, out, progress=False)
            tr.setup()
            with torch.no_grad():
                return {"model_file": str(model_file), **whitening_diagnosis(model, tr.test_loader, tr.norms, dev)}
    finally:
        shutdown_distributed(info)


def table(res: dict[str, Any]) -> str:
    """Markdown table of the runs: per epochs and setting, mean +- std over the seeds, and the seeds."""
    import statistics as st

    rows = ["| epochs | setting | seeds | final train loss | test rel L2 (evaluation mode) | test rel L2 (batch statistics) | eval / batch-stats | per seed (evaluation mode) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in res["runs"]:
        groups.setdefault((r["epochs"], r["setting"]), []).append(r)
    order = list(SETTINGS)

    def ms(v: list[float]) -> str:
        return f"{st.mean(v):.4f} +- {st.stdev(v):.4f}" if len(v) > 1 else f"{v[0]:.4f}"

    for (ep, name), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        rs = sorted(rs, key=lambda r: r["seed"])
        ev = [r["test_rel_l2_eval_mode"] for r in rs]
        bs = [r["test_rel_l2_train_mode"] for r in rs]
        rows.append(f"| {ep} | {name} | {','.join(str(r['seed']) for r in rs)} | {ms([r['final_train_loss'] for r in rs])} | {ms(ev)} | {ms(bs)} | "
                    f"{st.mean(e / b for e, b in zip(ev, bs)):.3f} | {', '.join(f'{e:.4f}' for e in ev)} |")
    return "\n".join(rows)


#: a full run needs the quick Darcy file (opflow bench skips it without: --extra ono_ablation='--data quick/data/darcy/r43.nc')
BENCH_REQUIRES = ["--data"]


def smoke_data(folder: Path) -> Path:
    """A tiny Darcy file for a smoke run: 12 samples of the FD solver at 15 x 15, 8 train / 4 test."""
    from opflow.data.transforms import derive
    from solvers.generate import shard_from_config

    src = shard_from_config("darcy_fd", {"resolution": 15}, 0, 0, 12, str(folder / "source.nc"), progress=False)
    return derive(src, folder / "darcy.nc", n_train=8, n_test=4, name="darcy")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="the quick Darcy file (quick/data/darcy/r43.nc); required unless --smoke")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--settings", default="ours,sum,no_ridge,no_wv")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ono_ablation.json"))
    ap.add_argument("--diagnose", type=Path, default=None, help="only diagnose this trained model.pt (prints JSON)")
    ap.add_argument("--table", action="store_true", help="only print the Markdown table of --out")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke): a 12-sample 15 x 15 set made here, one setting, one seed, one epoch")
    a = ap.parse_args(argv)
    if a.smoke:
        a.seeds, a.settings, a.epochs = "0", "ours", 1
        if a.data is None:
            tmp = tempfile.TemporaryDirectory()
            a.data = smoke_data(Path(tmp.name))
    elif a.data is None and not a.table:
        ap.error("--data is required (the quick Darcy file, quick/data/darcy/r43.nc); only --smoke runs without it")
    if a.table:
        print(table(json.loads(a.out.read_text())))
        return 0
    if a.diagnose is not None:
        print(json.dumps(diagnose(a.diagnose, a.data)))
        return 0
    config = quick_config()
    res: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {
        "benchmark": "ono_ablation", "created": utc_timestamp(), "machine": machine(loadavg()), "data": str(a.data),
        "model": config["models"]["ono"], "training": config.get("training", {}), "runs": [],
    }
    done = {(r["setting"], r["seed"], r["epochs"]) for r in res["runs"]}
    for seed in (int(s) for s in a.seeds.split(",")):
        for setting in a.settings.split(","):
            if (setting, seed, a.epochs) in done:
                continue
            r = one_run(config, a.data, setting, seed, a.epochs, a.threads)
            res["runs"].append(r)
            write_json_atomic(a.out, res)
            print(f"{setting:9s} seed {seed}: train {r['final_train_loss']:.4f}  test(eval) {r['test_rel_l2_eval_mode']:.4f}  "
                  f"test(batch stats) {r['test_rel_l2_train_mode']:.4f}  cond {r['max_running_cov_condition']:.3g}  {r['wall_s']:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
