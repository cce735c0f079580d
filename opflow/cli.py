"""The ``opflow`` console script.

    opflow inspect FILE            summary of a dataset file
    opflow validate FILE...        schema and finite-value check (exit 1 on problems)
    opflow merge OUT SHARD...      join generation shards
    opflow derive SRC OUT ...      strided subsample + split selection
    opflow show RESULT.json        print a results file as a short table

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
        for res, v in (r.get("zero_shot") or {}).items():
            print(f"  zero-shot {res}: rel L2 mean {v.get('rel_l2_mean', float('nan')):.5g}")
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
