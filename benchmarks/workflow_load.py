"""How long the workflow takes to load: `snakemake -n` of the quick target, and the config check alone.

    python -m benchmarks.workflow_load                          # this checkout
    python -m benchmarks.workflow_load --repo OTHER --label before --out benchmarks/results/workflow_load.json

Each checkout is measured the same way, in a fresh process per repeat (medians of ``--repeats``):

* ``dry_run_s``: ``snakemake -n --cores 2 --configfile config/quick.yaml -- quick/results/darcy_ono.json``
  (startup, config checks, DAG) in a scratch working directory;
* ``check_s``: the load-time checks alone, timed in a subprocess from the first opflow import to
  the checked config, with whether torch was imported on the way.

Several labels (e.g. ``before`` at the commit preceding the typed configuration, ``after`` here)
accumulate in one JSON, so that their ratio is read from measurements on the same machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import loadavg, machine, summary, utc_timestamp, write_json_atomic

HERE = Path(__file__).resolve().parents[1]
TARGET = "quick/results/darcy_ono.json"

# The load-time checks of a checkout, whichever API it has (the typed config, or the schema era).
_CHECK = r"""
import sys, time
sys.path.insert(0, {repo!r})
t0 = time.perf_counter()
from opflow.config import load_config_files
cfg = load_config_files([{repo!r} + "/config/default.yaml", {repo!r} + "/config/quick.yaml"])
try:
    from pipeline.config import check_config
    check_config(cfg)
except ImportError:
    from opflow.schema import validate_config
    from pipeline.config import check_generation_config
    from opflow.config import check_learning_config
    validate_config(cfg, {repo!r} + "/config/schema.yaml")
    check_generation_config(cfg)
    check_learning_config(cfg)
print(time.perf_counter() - t0, "torch" in sys.modules)
"""


def measure(repo: Path, repeats: int) -> dict[str, Any]:
    dry, check, torch_loaded = [], [], set()
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as work:
            t0 = time.perf_counter()
            run = subprocess.run(
                [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "--directory", work, "-n", "--cores", "2",
                 "--configfile", str(repo / "config/quick.yaml"), "--", TARGET],
                capture_output=True, text=True,
            )  # fmt: skip
            dry.append(time.perf_counter() - t0)
            if run.returncode != 0:
                raise SystemExit(f"snakemake -n failed in {repo}:\n{run.stderr[-2000:]}")
        out = subprocess.run([sys.executable, "-c", _CHECK.format(repo=str(repo))], capture_output=True, text=True, check=True).stdout.split()
        check.append(float(out[0]))
        torch_loaded.add(out[1] == "True")
    return {"dry_run_s": summary(dry), "check_s": summary(check), "imports_torch": sorted(torch_loaded) == [True], "repeats": repeats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", type=Path, default=HERE, help="checkout to measure (default: this one)")
    ap.add_argument("--label", default="after", help="name of this measurement in the JSON")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "benchmarks/results/workflow_load.json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; checks that it runs, asserts nothing about timings (opflow bench --smoke)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.repeats, a.label = 1, "smoke"
    start = loadavg()
    git = subprocess.run(["git", "-C", str(a.repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"commit": git, **measure(a.repo.resolve(), a.repeats), "created": utc_timestamp(), "machine": machine(start, packages=["snakemake", "pydantic", "torch"])}
    doc = json.loads(a.out.read_text()) if a.out.exists() else {"benchmark": "workflow_load", "target": TARGET, "runs": {}}
    doc["runs"][a.label] = result
    runs = doc["runs"]
    if {"before", "after"} <= set(runs):
        doc["speedup_dry_run"] = round(runs["before"]["dry_run_s"]["median"] / runs["after"]["dry_run_s"]["median"], 2)
        doc["speedup_check"] = round(runs["before"]["check_s"]["median"] / runs["after"]["check_s"]["median"], 2)
    write_json_atomic(a.out, doc)
    print(json.dumps({a.label: {k: result[k] for k in ("dry_run_s", "check_s", "imports_torch")}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
