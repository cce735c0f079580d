# Targets that no rule can make: a results or data path whose dataset/model pair is not configured,
# or one written without the profile's root (e.g. results/darcy_ono.json with config/quick.yaml).
# Instead of Snakemake's bare MissingRuleException, these stop while the DAG is built with a
# message listing the datasets, the models and the profile's root. The wildcard constraints
# exclude every path the other rules make (VALID_RESULT, VALID_DATA in rules/common.smk), so these
# rules never compete with them.


rule unknown_result:
    input:
        lambda w: explain_target(w.path),
    output:
        "{path}",
    wildcard_constraints:
        path=rf"(?!{VALID_RESULT}$)(.*/)?results/[^/]+\.json",
    log:
        "logs/unknown/{path}.log",
    localrule: True
    conda:
        "../envs/opflow.yaml"
    shell:
        "false"


rule unknown_data:
    input:
        lambda w: explain_target(w.path),
    output:
        "{path}",
    wildcard_constraints:
        path=rf"(?!{VALID_DATA}$)(.*/)?data/.+\.nc",
    log:
        "logs/unknown/{path}.log",
    localrule: True
    conda:
        "../envs/opflow.yaml"
    shell:
        "false"
