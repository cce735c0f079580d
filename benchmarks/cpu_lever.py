"""The A/B of a CPU lever in the trainer's step, shared by :mod:`benchmarks.dropout` and :mod:`benchmarks.spectral`.

A lever is a switch with two settings (torch's dropout mask or opflow's; the FFT or the retained modes as matrix
products). Both settings are measured in one process, alternating ``--rounds`` times so that the machine's drift
(10-30 % between minutes on a shared CPU) falls on both, and the medians and their ratio are reported. This module
holds the alternation, the trainer's step timing, the command line and the result's head and tail; each benchmark
holds its switch and its measurement of the operation alone.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, summary, utc_timestamp, versions, write_json_atomic

__all__ = ["alternate", "alternate_children", "child_timing", "lever_arguments", "lever_finish", "lever_main", "lever_result", "pair_trainer", "step_times"]


def alternate(fn: Any, switch: Any, rounds: int) -> dict[bool, list[float]]:
    """Seconds per call of ``fn()`` after ``switch(False)`` and after ``switch(True)``, alternating ``rounds`` times
    (``switch(True)`` is left in force)."""
    out: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for setting in (False, True):
            switch(setting)
            out[setting].append(fn())
    switch(True)
    return out


def child_timing(
    module: str, pair: str, a: argparse.Namespace, env: dict[str, str], extra: tuple[str, ...] = (),
    check: tuple[str, Any] | None = None,
) -> dict[str, Any]:
    """One timing of ``pair`` in a fresh ``python -m <module> --child PAIR`` (the step options of ``a`` and ``extra``
    passed on, ``env`` added to the environment): its JSON result line. ``check = (key, value)``: the child must
    report ``value`` under ``key`` (the setting it ran with), else the benchmark stops."""
    import json
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", module, "--child", pair, "--configfile", a.configfile,
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | env)
    if proc.returncode != 0:
        raise SystemExit(f"{module}: the {env} child of {pair} failed:\n{proc.stderr[-2000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if check is not None and r[check[0]] != check[1]:
        raise SystemExit(f"{module}: the {env} child of {pair} ran with {check[0]}={r[check[0]]}")
    return r


def alternate_children(
    timing: Callable[[str], dict[str, Any]], settings: tuple[str, str], rounds: int, fields: tuple[str, ...],
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """A lever whose setting holds for a whole process: ``timing(setting)`` (one fresh child process's result, with
    its ``step_s``) for each of the two ``settings``, alternated ``rounds`` times. Returns the summary (per setting
    ``<setting>_step_s``: median and spread with ``all``, and ``<setting>_<field>``: the list of each of ``fields``;
    ``ratio``: the first setting's median step over the second's) and the children's results per setting."""
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in settings}
    for _ in range(rounds):
        for setting in settings:
            runs[setting].append(timing(setting))
    out: dict[str, Any] = {}
    for setting, rs in runs.items():
        out[f"{setting}_step_s"] = summary([r["step_s"] for r in rs]) | {"all": [r["step_s"] for r in rs]}
        out |= {f"{setting}_{field}": [r[field] for r in rs] for field in fields}
    out["ratio"] = out[f"{settings[0]}_step_s"]["median"] / out[f"{settings[1]}_step_s"]["median"]
    return out, runs


@contextlib.contextmanager
def pair_trainer(config: dict[str, Any], pair: str) -> Iterator[tuple[Any, dict[str, Any], Callable[[], None]]]:
    """The real :class:`opflow.train.Trainer` of ``pair`` (its model and training settings, fp32 on the CPU, plain) on
    a synthetic file of its shape (:func:`benchmarks.train_speed.step_pair_run`), set up and in training mode.
    Yields ``(trainer, training settings, step)``: ``step()`` runs one training step on the next batch, fetched as
    the epoch fetches it."""
    import torch

    from benchmarks.train_speed import step_pair_run, step_shape
    from opflow.config import TrainConfig
    from opflow.runtime import DistInfo
    from opflow.train import Trainer, to_device

    shape = step_shape(pair)
    if shape is None:
        raise SystemExit(f"benchmarks: no synthetic shape for {pair!r}; add its dataset to STEP_SHAPES in benchmarks/train_speed.py")
    dev = torch.device("cpu")
    with tempfile.TemporaryDirectory(prefix="opflow-cpu-step-") as tmp:
        run, path = step_pair_run(config, pair, shape, Path(tmp), batches=4)
        run = copy.deepcopy(run)
        tr = run["training"]
        tr.update({"epochs": 1000, "device": "cpu", "compile": False, "precision": "fp32", "data_on_device": False})
        trainer = Trainer(run, TrainConfig.from_dict(tr, "run.training"), DistInfo(), dev, path, Path(tmp) / "work", progress=False)
        trainer.setup()
        trainer.resume(restart=True)
        trainer.fwd_model.train()

        def batches() -> Iterator[Any]:
            while True:
                yield from trainer.train_batches

        it = batches()
        yield trainer, tr, lambda: trainer.step(to_device(next(it), dev))
        del trainer


def step_times(
    config: dict[str, Any], pairs: tuple[str, ...], rounds: int, steps: int, warmup: int, switch: Any, labels: tuple[str, str],
) -> dict[str, Any]:
    """Per pair, the trainer's step with ``switch(trainer, False)`` against ``switch(trainer, True)``, alternated
    ``rounds`` times (:func:`alternate`); ``labels`` name the two settings in the result, ``ratio`` is the first
    setting's median step over the second's. The step is :func:`pair_trainer`'s."""
    import torch

    from benchmarks.train_speed import step_shape
    from opflow.hostsync import deferred_checks

    off, on = labels
    out: dict[str, Any] = {}
    for pair in pairs:
        with pair_trainer(config, pair) as (trainer, tr, step):
            n_drop = sum(1 for m in trainer.model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0)

            def timed() -> float:
                t0 = time.perf_counter()
                for _ in range(steps):
                    step()
                return (time.perf_counter() - t0) / steps

            with deferred_checks():
                for _ in range(warmup):
                    step()
                t = alternate(timed, lambda setting: switch(trainer, setting), rounds)
            off_s, on_s = statistics.median(t[False]), statistics.median(t[True])
            out[pair] = {"dropout_modules": n_drop, "batch_size": int(tr["batch_size"]), "shape": dict(step_shape(pair) or {}),
                         f"{off}_step_s": summary(t[False]) | {"all": t[False]}, f"{on}_step_s": summary(t[True]) | {"all": t[True]},
                         "ratio": off_s / on_s, "saved_share": 1 - on_s / off_s}
            print(f"step {pair}: {off} {1e3 * off_s:.1f} ms, {on} {1e3 * on_s:.1f} ms, ratio {off_s / on_s:.3f}")
    return out


def lever_arguments(ap: argparse.ArgumentParser, pairs: tuple[str, ...], argv: list[str] | None) -> tuple[argparse.Namespace, tuple[str, ...], dict[str, Any]]:
    """The command line of a CPU-lever benchmark (``ap`` holds its ``--out`` and
    ``--smoke``): the step options added, all parsed, the threads set, and ``--smoke`` applied to the step settings
    (one pair, two rounds of one step). Returns the options (with the start's load average and clock), the pairs and
    the config."""
    import torch
    import yaml

    ap.add_argument("--pairs", default=",".join(pairs), help="comma-separated dataset/model pairs")
    ap.add_argument("--configfile", default="config/default.yaml")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="alternations of the two settings (default 5)")
    ap.add_argument("--steps", type=int, default=5, help="training steps per timing (default 5)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1, help="repeats of the step measurement, a fresh trainer each")
    a = ap.parse_args(argv)
    a.loadavg_start, a.t0 = loadavg(), time.perf_counter()
    torch.set_num_threads(a.threads)
    chosen = tuple(p for p in a.pairs.split(",") if p)
    if a.smoke:
        chosen, a.rounds, a.steps, a.warmup, a.runs = chosen[:1], 2, 1, 1, 1
    return a, chosen, yaml.safe_load(Path(a.configfile).read_text())


def lever_result(name: str, a: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    """The result's common head: name, time, the step settings, then ``fields``."""
    return {"benchmark": name, "created": utc_timestamp(), "smoke": a.smoke, "threads": a.threads, "rounds": a.rounds,
            "steps_per_timing": a.steps, **fields}


def lever_finish(result: dict[str, Any], a: argparse.Namespace) -> int:
    """Versions, wall time and machine added; the result written to ``--out``."""
    result["versions"] = versions("torch", "numpy")
    result["wall_s"] = time.perf_counter() - a.t0
    result["machine"] = machine(a.loadavg_start, torch_threads=a.threads)
    write_json_atomic(a.out, result)
    print(f"wrote {a.out}")
    return 0


def lever_main(
    name: str, ap: argparse.ArgumentParser, pairs: tuple[str, ...], argv: list[str] | None, *,
    op: Callable[[argparse.Namespace], Any], switch: Callable[[bool], None], labels: tuple[str, str], **fields: Any,
) -> int:
    """The whole run of a lever benchmark whose switch is process-wide: the command line (``ap`` holds the
    benchmark's ``--out`` and ``--smoke``), ``op(options)`` (the operation alone), the trainer's steps of ``pairs``
    under ``switch(False)`` / ``switch(True)`` (:func:`step_times`), and the result (``fields`` in its head) written."""
    a, chosen, config = lever_arguments(ap, pairs, argv)
    result = lever_result(name, a, **fields, op=op(a),
                          steps=step_times(config, chosen, a.rounds, a.steps, a.warmup, switch=lambda trainer, setting: switch(setting), labels=labels))
    return lever_finish(result, a)
