"""The ``opflow`` console script.

    opflow inspect FILE            summary of a dataset file
    opflow validate FILE...        schema and finite-value check (exit 1 on problems)
    opflow merge OUT SHARD...      join generation shards
    opflow derive SRC OUT ...      strided subsample + split selection
    opflow show RESULT.json        print a results file as a short table
    opflow run-config ...          the resolved run config (training + model + task) of a dataset/model pair
    opflow train ...               train (or resume) a model on a dataset file; torchrun-aware
    opflow evaluate MODEL ...      test errors, zero-shot errors, speed and memory -> results JSON + PNG

Commands that need torch import it inside their function, so the data commands stay fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, add_args: Callable[[argparse.ArgumentParser], None]):
    def deco(fn: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = (add_args, fn)
        return fn

    return deco


@command("inspect", lambda p: p.add_argument("file"))
def _inspect(a: argparse.Namespace) -> int:
    from opflow.data.format import summary

    print(summary(a.file))
    return 0


@command("validate", lambda p: p.add_argument("files", nargs="+"))
def _validate(a: argparse.Namespace) -> int:
    from opflow.data.format import validate

    status = 0
    for f in a.files:
        problems = validate(f)
        if problems:
            status = 1
            print(f"{f}: INVALID")
            for pr in problems:
                print(f"  - {pr}")
        else:
            print(f"{f}: ok")
    return status


def _merge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("out")
    p.add_argument("shards", nargs="+")


@command("merge", _merge_args)
def _merge(a: argparse.Namespace) -> int:
    from opflow.data.shards import merge_shards

    merge_shards(a.shards, a.out)
    return 0


def _derive_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("source")
    p.add_argument("out")
    p.add_argument("--resolution", type=int)
    p.add_argument("--train", type=int, required=True)
    p.add_argument("--test", type=int, required=True)
    p.add_argument("--val", type=int, default=0)
    p.add_argument("--name", default="")


@command("derive", _derive_args)
def _derive(a: argparse.Namespace) -> int:
    from opflow.data.transforms import derive

    derive(a.source, a.out, resolution=a.resolution, n_train=a.train, n_test=a.test, n_val=a.val, name=a.name)
    return 0


@command("show", lambda p: p.add_argument("files", nargs="+"))
def _show(a: argparse.Namespace) -> int:
    for f in a.files:
        with open(f) as fh:
            r = json.load(fh)
        print(f"{f}:")
        for k in ("dataset", "model", "device", "epochs", "parameters", "train_time_s"):
            if k in r:
                print(f"  {k}: {r[k]}")
        m = r.get("metrics", {})
        for k, v in m.items():
            if isinstance(v, int | float):
                print(f"  {k}: {v:.5g}")
        for name, v in (m.get("frame_groups") or {}).items():
            print(f"  frames {v['frames'][0]}-{v['frames'][1]} ({name}): rel L2 mean {v['rel_l2_mean']:.5g}")
        for res, v in (r.get("zero_shot") or {}).items():
            print(f"  zero-shot {res}: rel L2 mean {v.get('rel_l2_mean', float('nan')):.5g}")
        for name, v in (r.get("eval_sets") or {}).items():
            print(f"  eval set {name}: rel L2 mean {v['rel_l2_mean']:.5g} median {v['rel_l2_median']:.5g} max {v['rel_l2_max']:.5g}")
    return 0


def _stderr_handler() -> "logging.Handler":
    """A logging handler writing to whatever ``sys.stderr`` is at the time of each message."""
    import logging

    class Handler(logging.StreamHandler):
        @property  # type: ignore[override]
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, value) -> None:
            pass

    return Handler()


def _learning_command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Log to stderr and turn configuration mistakes into one-line errors (exit 2)."""

    def wrapped(a: argparse.Namespace) -> int:
        import logging

        from opflow.data.errors import ConfigError

        logger = logging.getLogger("opflow")
        if not logger.handlers:
            handler = _stderr_handler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        try:
            return fn(a)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    wrapped.__doc__ = fn.__doc__
    return wrapped


def _json_arg(text: str) -> dict:
    """A JSON object given inline or as @path."""
    from opflow.data.errors import ConfigError

    try:
        if text.startswith("@"):
            with open(text[1:]) as fh:
                return json.load(fh)
        return json.loads(text)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read the JSON argument {text[:60]!r}: {e}") from None


def _run_from_args(a: argparse.Namespace) -> dict:
    from opflow.config import load_config_files, resolve_run
    from opflow.data.errors import ConfigError

    if a.run_json:
        return _json_arg(a.run_json)
    if not (a.config and a.dataset and a.model):
        raise ConfigError("give either --run-json RUN or --config FILE... --dataset NAME --model NAME")
    return resolve_run(load_config_files(a.config), a.dataset, a.model, getattr(a, "data", None))


def _run_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-json", help="resolved run config as JSON or @file (what the workflow passes)")
    p.add_argument("--config", nargs="+", metavar="YAML", help="workflow config file(s), merged in order, instead of --run-json")
    p.add_argument("--dataset", help="dataset name (with --config)")
    p.add_argument("--model", help="model name (with --config)")


def _run_config_args(p: argparse.ArgumentParser) -> None:
    _run_source_args(p)
    p.add_argument("--data", help="training data file recorded in the run's paths")


@command("run-config", _run_config_args)
@_learning_command
def _run_config(a: argparse.Namespace) -> int:
    print(json.dumps(_run_from_args(a), indent=1, sort_keys=True))
    return 0


def _train_args(p: argparse.ArgumentParser) -> None:
    _run_source_args(p)
    p.add_argument("--data", required=True, help="dataset file (train and test splits)")
    p.add_argument("--output", help="final model file (default OUT_DIR/model.pt)")
    p.add_argument("--out-dir", help="folder for checkpoint and curves (default: the output's folder, or models/DATASET_MODEL)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--restart", action="store_true", help="discard an existing checkpoint and train from scratch")
    g.add_argument("--restart-if-changed", action="store_true", help="resume a matching checkpoint, discard one of another run")
    p.add_argument("--device", help="override training.device (auto, cpu, cuda, cuda:N, mps)")
    p.add_argument("--threads", type=int, help="CPU threads (default training.threads)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when stderr is not a terminal)")
    p.add_argument("--max-epochs-this-call", type=int, help="stop after this many epochs, leaving a checkpoint to resume from")


@command("train", _train_args)
@_learning_command
def _train(a: argparse.Namespace) -> int:
    from pathlib import Path

    from opflow.train import train

    run = _run_from_args(a)
    out_dir = a.out_dir or (str(Path(a.output).parent) if a.output else f"models/{run['dataset']}_{run['model']}")
    res = train(
        run,
        a.data,
        out_dir,
        output=a.output,
        restart=a.restart,
        restart_if_changed=a.restart_if_changed,
        progress=False if a.no_progress else None,
        max_epochs_this_call=a.max_epochs_this_call,
        threads=a.threads,
        device=a.device,
    )
    if not res.complete:
        print(f"stopped after epoch {res.epochs_done}; resume with the same command ({res.checkpoint_path})", file=sys.stderr)
    return 0


def _eval_set_arg(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, got {text!r}")
    return name, path


def _evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_file", help="model.pt written by opflow train")
    p.add_argument("--data", required=True, help="dataset file whose test split is evaluated")
    p.add_argument("--zero-shot", nargs="*", default=[], metavar="FILE", help="the same dataset at other resolutions")
    p.add_argument("--eval-set", action="append", default=[], type=_eval_set_arg, metavar="NAME=FILE", help="an extra evaluation set (repeatable)")
    p.add_argument("--out", required=True, help="results JSON")
    p.add_argument("--png", help="prediction/error figure (default: the JSON path with .png)")
    p.add_argument("--no-png", action="store_true", help="skip the figure")
    p.add_argument("--eval-config", help="the evaluate: section as JSON or @file")
    p.add_argument("--config", nargs="+", metavar="YAML", help="workflow config file(s) to read evaluate: from")
    p.add_argument("--device", help="override evaluate.device")
    p.add_argument("--threads", type=int, help="CPU threads (default evaluate.threads)")


@command("evaluate", _evaluate_args)
@_learning_command
def _evaluate(a: argparse.Namespace) -> int:
    from pathlib import Path

    from opflow.config import eval_config, load_config_files
    from opflow.data.errors import ConfigError
    from opflow.evaluate import evaluate

    if a.eval_config:
        cfg = eval_config({"evaluate": _json_arg(a.eval_config)})
    else:
        cfg = eval_config(load_config_files(a.config) if a.config else {})
    names = [n for n, _ in a.eval_set]
    if len(set(names)) != len(names):
        raise ConfigError(f"--eval-set names repeat: {names}; give each evaluation set its own name")
    png = None if a.no_png else (a.png or str(Path(a.out).with_suffix(".png")))
    evaluate(a.model_file, a.data, a.out, zero_shot=a.zero_shot, eval_sets=dict(a.eval_set), png=png, config=cfg, device=a.device, threads=a.threads)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="opflow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, (add_args, _) in COMMANDS.items():
        add_args(sub.add_parser(name))
    a = ap.parse_args(argv)
    from opflow.data.format import DatasetError

    try:
        return COMMANDS[a.cmd][1](a)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
