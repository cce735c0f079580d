# Targets that no rule can make: a results or data path whose dataset/model pair is not configured,
# or one written without the profile's root (e.g. results/darcy_ono.json with config/quick.yaml).
# Instead of Snakemake's bare MissingRuleException, these stop while the DAG is built with a
# message listing the datasets, the models and the profile's root.


ruleorder: evaluate > unknown_result
ruleorder: derive_dataset > unknown_data


rule unknown_result:
    input:
        lambda w: explain_target(f"{w.prefix}results/{w.name}.json"),
    output:
        "{prefix}results/{name}.json",
    wildcard_constraints:
        prefix=r"(.*/)?",
    log:
        "{prefix}logs/unknown/{name}.log",
    localrule: True
    conda:
        "../envs/opflow.yaml"
    shell:
        "false"


rule unknown_data:
    input:
        lambda w: explain_target(f"{w.prefix}data/{w.name}.nc"),
    output:
        "{prefix}data/{name}.nc",
    wildcard_constraints:
        prefix=r"(.*/)?",
        name=r"[^/]+/[^/]+",
    log:
        "{prefix}logs/unknown/{name}.log",
    localrule: True
    conda:
        "../envs/opflow.yaml"
    shell:
        "false"
