# Evaluation: test errors at the training resolution, zero-shot at datasets.<name>.zero_shot
# resolutions (the same test samples, strided from the same solve), the extra evaluation sets of
# datasets.<name>.eval_sets (a dataset's test split, or every sample of a source, e.g. Lorenz-63 test
# trajectories at other time steps), inference time, peak memory. The view (grid, series, mesh,
# window with rollout, one_step) is recorded in the model and applied again here.
#
#   <root>/results/<dataset>_<model>.json    metrics + run config + data checksums + provenance
#   <root>/results/<dataset>_<model>.png     truth / prediction / error of test samples
#   <root>/logs/evaluate/<dataset>_<model>.log
#
# Resources: `gpu` = 1 unless evaluate.device is cpu or mps (see rules/train.smk).

from opflow.config import eval_config, eval_sets_of  # noqa: E402


def zero_shot_files(dataset):
    return [dataset_file(dataset, r) for r in config["datasets"][dataset].get("zero_shot", [])]


def eval_set_files(dataset):
    """{name: file} of the dataset's extra evaluation sets (a dataset's file or a source's file)."""
    return {
        name: (dataset_file(target) if kind == "dataset" else source_file(target))
        for name, (kind, target) in eval_sets_of(config, dataset).items()
    }


rule evaluate:
    input:
        model=out("models/{dataset}_{model}/model.pt"),
        data=lambda w: dataset_file(w.dataset),
        zero_shot=lambda w: zero_shot_files(w.dataset),
        eval_sets=lambda w: list(eval_set_files(w.dataset).values()),
    output:
        json=out("results/{dataset}_{model}.json"),
        png=out("results/{dataset}_{model}.png"),
    params:
        settings=lambda w: shlex.quote(json.dumps(eval_config(config).to_dict(), sort_keys=True)),
        zero_shot=lambda w, input: " ".join(input.zero_shot),
        eval_sets=lambda w: " ".join(f"--eval-set {shlex.quote(f'{n}={f}')}" for n, f in eval_set_files(w.dataset).items()),
    threads: lambda w: eval_config(config).threads
    resources:
        gpu=lambda w: 0 if eval_config(config).device in ("cpu", "mps") else 1,
    log:
        out("logs/evaluate/{dataset}_{model}.log"),
    shell:
        "{PY} -m opflow.cli evaluate {input.model} --data {input.data} --zero-shot {params.zero_shot} {params.eval_sets} "
        "--out {output.json} --png {output.png} --eval-config {params.settings} --threads {threads} 2> {log}"
