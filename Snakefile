"""opflow workflow: PDE parameters -> data/*.nc -> models/*.pt -> results/*.json.

    snakemake --cores 8                                       # the profile's `targets` (rule all)
    snakemake --cores 8 results/darcy_ono.json                # one paper protocol
    snakemake --cores 2 --configfile config/quick.yaml -- quick/results/darcy_ono.json
    snakemake --cores 8 report                                # results/report.md + report/index.html (rules/report.smk)
    snakemake --cores 2 published/burgers512_fno1d/record.json # a paper run's committed record (rules/publish.smk)
    snakemake --profile profiles/slurm results/darcy_ono.json # on a SLURM cluster (docs/scale_out.md)

The config (config/default.yaml, deep-merged with any --configfile) is checked as one typed tree
(opflow.config, opflow.schema), against the solvers' metadata and for every (dataset, model) pair
by the workflow layer (pipeline.config, above opflow and solvers) before any job runs; a bad key or
value stops here with one line naming it. Helpers live in rules/common.smk.
"""

import sys

from snakemake.utils import min_version

min_version("9.0")
sys.path.insert(0, workflow.basedir)
from opflow.config import BASE_CONFIG  # noqa: E402  config/default.yaml, named once (opflow train --config names it too)


configfile: f"{workflow.basedir}/{BASE_CONFIG}"


include: "rules/common.smk"


wildcard_constraints:
    source=alternatives(WF.sources),
    dataset=alternatives(WF.datasets),
    model=alternatives(WF.models),
    grid=r"r\d+|all",
    start=r"\d+",
    stop=r"\d+",


onstart:
    ignore_outputs()  # a profile's own root: a .gitignore of its own (rules/common.smk)


onerror:
    from opflow.joblogs import explain_failed_jobs

    explain_failed_jobs(log)  # each failed job's one-line reason from its log, on the terminal


rule all:
    input:
        [out(t) for t in WF.targets],
    default_target: True


include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/targets.smk"
include: "rules/report.smk"
include: "rules/publish.smk"
