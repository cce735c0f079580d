"""Command line of the generators: ``python -m solvers shard|list``."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m solvers", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sh = sub.add_parser("shard", help="generate samples start:stop into one shard file")
    sh.add_argument("--solver", required=True)
    sh.add_argument("--params", default="{}", help="JSON object of solver parameters")
    sh.add_argument("--seed", type=int, required=True)
    sh.add_argument("--start", type=int, required=True)
    sh.add_argument("--stop", type=int, required=True)
    sh.add_argument("--threads", type=int, default=1)
    sh.add_argument("--no-progress", action="store_true")
    sh.add_argument("out")
    sub.add_parser("list", help="list registered solvers")
    a = ap.parse_args(argv)

    # Thread limits must be in the environment before numpy/OpenBLAS load, so set them first.
    from solvers.threads import limit_threads

    limit_threads(getattr(a, "threads", 1))
    from solvers.base import ConfigError, SolverError, available_generators

    if a.cmd == "list":
        print("\n".join(available_generators()))
        return 0
    from opflow.data.format import DatasetError
    from solvers.generate import shard_from_config
    try:
        shard_from_config(a.solver, json.loads(a.params), a.seed, a.start, a.stop, a.out, progress=not a.no_progress)
    except (ConfigError, SolverError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
