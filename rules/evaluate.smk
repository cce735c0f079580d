# Evaluation: test errors at the training resolution and zero-shot at datasets.<name>.zero_shot
# resolutions (the same test samples, strided from the same solve), inference time, peak memory.
#
#   <root>/results/<dataset>_<model>.json    metrics + run config + data checksums + provenance
#   <root>/results/<dataset>_<model>.png     input / truth / prediction / error of test samples
#   <root>/logs/evaluate/<dataset>_<model>.log
#
# Resources: `gpu` = 1 unless evaluate.device is cpu or mps (see rules/train.smk).

from opflow.config import eval_config  # noqa: E402


def zero_shot_files(dataset):
    return [dataset_file(dataset, r) for r in config["datasets"][dataset].get("zero_shot", [])]


rule evaluate:
    input:
        model=out("models/{dataset}_{model}/model.pt"),
        data=lambda w: dataset_file(w.dataset),
        zero_shot=lambda w: zero_shot_files(w.dataset),
    output:
        json=out("results/{dataset}_{model}.json"),
        png=out("results/{dataset}_{model}.png"),
    params:
        settings=lambda w: shlex.quote(json.dumps(eval_config(config).to_dict(), sort_keys=True)),
        zero_shot=lambda w, input: " ".join(input.zero_shot),
    threads: lambda w: eval_config(config).threads
    resources:
        gpu=lambda w: 0 if eval_config(config).device in ("cpu", "mps") else 1,
    log:
        out("logs/evaluate/{dataset}_{model}.log"),
    shell:
        "{PY} -m opflow.cli evaluate {input.model} --data {input.data} --zero-shot {params.zero_shot} "
        "--out {output.json} --png {output.png} --eval-config {params.settings} --threads {threads} 2> {log}"
