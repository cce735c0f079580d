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
# Resources: `gpu` = evaluate.gpus, `mem_mb` from the model and every file read (see rules/train.smk).


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
        py=PY,
        settings=shlex.quote(json.dumps(WF.evaluate.to_dict(), sort_keys=True)),
        zero_shot=lambda w, input: " ".join(input.zero_shot),
        eval_sets=lambda w: " ".join(f"--eval-set {shlex.quote(f'{n}={f}')}" for n, f in eval_set_files(w.dataset).items()),
    threads: WF.evaluate.threads
    resources:
        gpu=WF.evaluate.gpus,
        mem_mb=eval_mem_mb,
        slurm_partition=partition(WF.evaluate.gpus),
        slurm_account=account,
    log:
        out("logs/evaluate/{dataset}_{model}.log"),
    conda:
        "../envs/opflow.yaml"
    shell:
        "{params.py} -m opflow.cli evaluate {input.model} --data {input.data} --zero-shot {params.zero_shot} {params.eval_sets} "
        "--out {output.json} --png {output.png} --eval-config {params.settings} --threads {threads} 2> {log}"
