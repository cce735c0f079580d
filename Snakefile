"""opflow workflow: PDE parameters -> data/*.nc -> models/*.pt -> results/*.json.

    snakemake --cores 8 results/darcy_ono.json                          # paper protocol
    snakemake --cores 2 --configfile config/quick.yaml quick/results/darcy_ono.json

The config (config/default.yaml, deep-merged with any --configfile) is validated against
config/schema.yaml and then by the solvers' and models' own checks before any job runs.
"""

import json
import shlex
import sys

configfile: f"{workflow.basedir}/config/default.yaml"

sys.path.insert(0, workflow.basedir)
from opflow.data.errors import ConfigError  # noqa: E402
from opflow.schema import validate_config  # noqa: E402
from solvers.config import check_generation_config, dataset_resolution  # noqa: E402
from opflow.config import check_learning_config  # noqa: E402

try:
    validate_config(config, f"{workflow.basedir}/config/schema.yaml")
    check_generation_config(config)
    check_learning_config(config)
except ConfigError as e:  # one clear line instead of a traceback, before any job runs
    sys.exit(f"opflow: {e}")

PY = shlex.quote(sys.executable)
ROOT = config.get("root", ".")


def out(path):
    """Path of an output under this profile's root."""
    return path if ROOT in ("", ".") else f"{ROOT}/{path}"


def alternatives(names):
    """Regex matching exactly one of ``names`` (longest first), for unambiguous wildcards."""
    names = sorted(names, key=len, reverse=True)
    return "|".join(names) if names else "(?!)"


wildcard_constraints:
    source=alternatives(config.get("sources", {})),
    dataset=alternatives(config.get("datasets", {})),
    model=alternatives(config.get("models", {})),
    res=r"\d+",
    start=r"\d+",
    stop=r"\d+",


include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
