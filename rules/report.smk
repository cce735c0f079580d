# The reproduction report: every results JSON of this profile that exists, beside the published
# numbers of config/reference.yaml (opflow/report.py).
#
#   snakemake --cores 8 report                                              # the default profile
#   snakemake --cores 2 --configfile config/quick.yaml -- quick/report      # the quick profile
#
#   <root>/results/report.md     the summary (published numbers per paper and per model by status:
#                                reproduced, better, worse, diverged, not run and why), the rows
#                                (ours, published, ratio, source, parameters, training time, device,
#                                links to the record) and the figures by link
#   <root>/report/index.html     the same as one static page with every PNG inlined, beside the PNGs:
#                                error against resolution (zero-shot runs), training curves,
#                                prediction panels, the solver benchmarks' plots (benchmarks/results/*.png)
#
# The status of a published number without a result comes from committed records (opflow/report_status.py):
# the cost per protocol (benchmarks/results/protocol_cost*.json), the diverged runs (published/diverged.yaml)
# and the partial record folders under published/; where such a row stands in the GPU lease queue or the CPU's
# list, from config/queue.yaml (opflow/queue.py).
#
# The report reads what exists and builds nothing else: ask for results first (or `snakemake` for the
# profile's targets), then for the report. A result counts as a reproduction only when its run hash
# equals the one config/default.yaml gives the pair; quick results never get a ratio.

from glob import glob


rule report:
    input:
        # the committed records of paper runs (published/, rules/publish.smk) count in the paper profile only
        results=lambda w: sorted(glob(out("results/*.json")) + (glob("published/*/result.json") if ROOT in ("", ".") else [])),
        figures=lambda w: sorted(glob(out("results/*.png")) + glob(out("models/*/curves.png"))),
        reference=f"{workflow.basedir}/config/reference.yaml",
        bench=sorted(glob(f"{workflow.basedir}/benchmarks/results/*.png")),
        diverged=f"{workflow.basedir}/published/diverged.yaml",
        queue=f"{workflow.basedir}/config/queue.yaml",
    output:
        md=out("results/report.md"),
        site=directory(out("report")),
    params:
        py=PY,
        # a label of the profile (its root's name), not a path: a function, so the lint does not take it for a prefix
        profile=lambda w: "default" if ROOT in ("", ".") else ROOT,
        paper=f"{workflow.basedir}/config/default.yaml",
        # functions, so the lint does not take these paths for prefixes of the outputs
        published=lambda w: f"{workflow.basedir}/published",
        # a param, not an input: as an input, a path .../results/*.json would be taken for a result target (rules/targets.smk)
        cost=lambda w: " ".join(sorted(glob(f"{workflow.basedir}/benchmarks/results/protocol_cost*.json"))),
    log:
        out("logs/report.log"),
    localrule: True
    conda:
        "../envs/opflow.yaml"
    shell:
        "{params.py} -m opflow.cli report {input.results} --profile {params.profile} --md {output.md} --site {output.site} "
        "--reference {input.reference} --paper-config {params.paper} --bench-png {input.bench} --cost {params.cost} "
        "--diverged {input.diverged} --published {params.published} --queue {input.queue} 2> {log}"
