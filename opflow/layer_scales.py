"""Where a trained network loses its input: the scale of each block's output on a few test samples.

A run that collapses to a constant output (the loss flat at the value of predicting the training mean)
has a layer whose output no longer depends on the input; a run whose activations grow layer by layer
ends there. For each module of a model (to ``depth`` levels of its module tree, in the order the
forward pass calls them) this measures, on the first ``samples`` test samples of a dataset file:

* ``mean_abs``: the mean of |y| over every entry of the module's output y;
* ``across_samples``: the mean over entries of the standard deviation across the samples, how much the
  output at one point and channel changes with the input;
* ``dependence``: ``across_samples / mean_abs`` (0 where the output is the same for every input).

Every entry counts, the padding of point clouds of unequal sizes too (where it is zero, a smaller mean and a
larger spread); the samples are the file's first, so two checkpoints of one run are compared on the same inputs.

The model is rebuilt from a training checkpoint (``checkpoint.pt``: its weights, normalisers and run) or
a finished ``model.pt``, in eval mode (no dropout), on the CPU. ``opflow scales`` prints the table, and
writes it as JSON (``--json``) and draws it (``--png``, :func:`opflow.plots.plot_scales`). Found with it (docs/reproductions.md, "Not there yet"): the inverse-problem GT on Darcy
141, collapsed in epoch 26, had a residual stream growing 5-25x per encoder layer, from 0.24 after the first to
7.8e4 after the last (5e6 by epoch 32), and a decoder whose 192 hidden SiLU units were all far negative, so that its output was
the last bias alone.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opflow.data.errors import ConfigError


def load_trained(path: str | os.PathLike[str], data: str | os.PathLike[str]) -> tuple[Any, Any, Any]:
    """``(model in eval mode on the CPU, its normalisers, the test split of data)`` for a checkpoint or model file.

    A file that is neither (or whose weights do not fit the model it names) is a ConfigError naming it.
    """
    import torch

    from opflow.data.torch_data import Normalizers, Task
    from opflow.data.views import make_dataset
    from opflow.inference import load_model, load_normalizers
    from opflow.records import RecordError
    from opflow.train import CHECKPOINT_FORMAT, build_for_data

    path = Path(path)
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same one-line error
        raise ConfigError(f"{path}: not a torch file ({type(e).__name__}); give a training checkpoint (checkpoint.pt) or a model file (model.pt)") from None
    if isinstance(ck, Mapping) and ck.get("format") == CHECKPOINT_FORMAT:  # a training checkpoint
        run = ck["run"]
        ds = make_dataset(data, "test", run.get("task"), run.get("view"), purpose="rollout")  # as the trainer reads it
        model, _, _ = build_for_data(run["model_config"], ds, f"models.{run['model']}")
        try:
            model.load_state_dict(ck["model"])
        except RuntimeError as e:
            raise ConfigError(f"{path}: the weights do not fit the model its run names ({str(e).strip().splitlines()[0]})") from None
        return model.eval(), Normalizers.from_state(ck["normalizers"]), ds
    try:
        model, rec = load_model(path)
    except RecordError as e:
        raise ConfigError(f"{e}; or give a training checkpoint (checkpoint.pt)") from None
    t = rec.task
    ds = make_dataset(data, "test", Task(tuple(t["inputs"]), tuple(t["outputs"])), rec.trained_view(), purpose="rollout")
    return model, load_normalizers(rec), ds


def block_scales(model: Any, batch: Mapping[str, Any], norms: Any, depth: int = 3) -> list[dict[str, Any]]:
    """One row per module (``depth`` levels of the module tree, forward order) whose output is a tensor of
    batch-first shape: ``{"module", "mean_abs", "across_samples", "dependence"}`` (module docstring)."""
    import torch

    from opflow.inference import forward

    rows: list[dict[str, Any]] = []

    def hook(name: str):
        def record(_m: Any, _i: Any, out: Any) -> None:
            if not isinstance(out, torch.Tensor) or out.dim() < 2 or out.shape[0] != n:
                return
            y = out.detach().double().reshape(n, -1)
            mean_abs = float(y.abs().mean())
            across = float(y.std(0).mean()) if n > 1 else 0.0
            rows.append({"module": name, "mean_abs": mean_abs, "across_samples": across,
                         "dependence": across / mean_abs if mean_abs > 0 else 0.0})
        return record

    n = int(batch["inputs"].shape[0])
    handles = [m.register_forward_hook(hook(name)) for name, m in model.named_modules() if name and name.count(".") < depth]
    try:
        with torch.no_grad():
            forward(model, batch, norms)
    finally:
        for h in handles:
            h.remove()
    return rows


def scales(path: str | os.PathLike[str], data: str | os.PathLike[str], samples: int = 8, depth: int = 3) -> dict[str, Any]:
    """:func:`block_scales` of the model in ``path`` on the first ``samples`` test samples of ``data``."""
    from opflow.data.torch_data import collate

    if samples < 2:
        raise ConfigError(f"--samples {samples}: the spread across samples needs at least 2")
    model, norms, ds = load_trained(path, data)
    k = min(samples, len(ds))
    if k < 2:
        raise ConfigError(f"{data}: {len(ds)} test sample(s); the spread across samples needs at least 2")
    rows = block_scales(model, collate([ds[i] for i in range(k)]), norms, depth)
    return {"file": str(path), "data": str(data), "samples": k, "depth": depth, "modules": rows}


def table(result: Mapping[str, Any]) -> str:
    """The rows as aligned text, one module a line."""
    rows = result["modules"]
    w = max([len("module")] + [len(r["module"]) for r in rows])
    lines = [f"{result['file']}: {result['samples']} test samples of {result['data']}",
             f"{'module':<{w}}  {'mean |y|':>10}  {'across samples':>14}  {'dependence':>10}"]
    for r in rows:
        lines.append(f"{r['module']:<{w}}  {r['mean_abs']:>10.3g}  {r['across_samples']:>14.3g}  {r['dependence']:>10.3g}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.split("\n\n")[0]
    p.add_argument("files", nargs="+", help="training checkpoint(s) (checkpoint.pt) or model file(s) (model.pt)")
    p.add_argument("--data", required=True, help="the dataset file the model was trained on (its test split is read)")
    p.add_argument("--samples", type=int, default=8, help="test samples (default 8, at least 2)")
    p.add_argument("--depth", type=int, default=3, help="levels of the module tree (default 3)")
    p.add_argument("--json", default=None, help="also write the tables as JSON (a list, one per file) here")
    p.add_argument("--png", default=None, help="also draw them (mean |output| per module, one line per file) here")
    p.add_argument("--labels", nargs="+", default=None, help="the files' names in the figure (default: the file names)")
    p.add_argument("--title", default="", help="the figure's title")


def run(a: argparse.Namespace) -> int:
    """``opflow scales``: print each file's table; ``--json`` writes them (atomically)."""
    import json

    if a.depth < 1:
        raise ConfigError(f"--depth {a.depth}: at least 1 (the model's direct children)")
    if a.labels is not None and len(a.labels) != len(a.files):
        raise ConfigError(f"--labels: {len(a.labels)} label(s) for {len(a.files)} file(s); give one per file or none")
    results = [scales(f, a.data, a.samples, a.depth) for f in a.files]
    print("\n\n".join(table(r) for r in results))
    if a.json:
        out = Path(a.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        os.replace(tmp, out)
    if a.png:
        from opflow.plots import plot_scales

        plot_scales(results, a.png, a.labels, a.title)
    return 0 if all(math.isfinite(r["mean_abs"]) for res in results for r in res["modules"]) else 1
