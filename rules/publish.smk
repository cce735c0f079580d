# Published reproductions: the committed record of a finished paper-protocol run (opflow/publish.py).
#
#   snakemake --cores 2 published/burgers512_fno1d/record.json   # data -> train -> evaluate -> record
#
#   published/<dataset>_<model>/   result.json, prediction.png, curves.csv/json/png, train.log, and
#                                  record.json (run hash = the paper profile's, published numbers with
#                                  ratios, machine, threads, training time and device, git commit)
#
# published/ is not under the profile's root: it is committed, and only a run of the paper profile
# (config/default.yaml, root ".") can be published; any other run is refused by its run hash.


rule publish:
    input:
        json=out("results/{dataset}_{model}.json"),
        png=out("results/{dataset}_{model}.png"),
        model=out("models/{dataset}_{model}/model.pt"),
    output:
        "published/{dataset}_{model}/record.json",
    params:
        py=PY,
        folder=lambda w: f"published/{w.dataset}_{w.model}",
        model_dir=lambda w: out(f"models/{w.dataset}_{w.model}"),
        paper=f"{workflow.basedir}/config/default.yaml",
        reference=f"{workflow.basedir}/config/reference.yaml",
    log:
        out("logs/publish/{dataset}_{model}.log"),
    localrule: True
    conda:
        "../envs/opflow.yaml"
    shell:
        "{params.py} -m opflow.cli publish {input.json} --out {params.folder} --model-dir {params.model_dir} "
        "--paper-config {params.paper} --reference {params.reference} > {log} 2>&1 || (cat {log} >&2; exit 2)"
