# Training: one job per (dataset, model) pair.
#
#   <root>/models/<dataset>_<model>/model.pt        the trained model (the rule's only output)
#   <root>/models/<dataset>_<model>/checkpoint.pt   resumable state, replaced every epoch (NOT an output:
#                                                   an interrupted job resumes from it when rerun; it is
#                                                   deleted once model.pt is written)
#   <root>/models/<dataset>_<model>/curves.{csv,json,png}
#   <root>/logs/train/<dataset>_<model>.log
#
# The resolved run config (model hyperparameters + merged training settings + task + dataset
# definition, opflow.config.resolve_run) is a param, so Snakemake reruns training when it changes;
# the job then discards a checkpoint of the old config (--restart-if-changed) and resumes a
# matching one. (opflow train alone does nothing when model.pt already holds the finished run; a job
# never meets that case, because Snakemake deletes a job's outputs before it runs it.)
#
# Resources: `gpu` = training.gpus (0 unless the profile asks for GPUs: a cluster executor such as
# the SLURM plugin places jobs with gpu > 0 on GPU nodes; locally `--resources gpu=1` runs one
# training at a time on the GPU). With training.nproc > 1 the job launches
# `torchrun --standalone --nproc_per_node <nproc>` (DDP, one GPU per process).
# `mem_mb` follows the run: estimated from the model's parameter count and the data file's size
# when the job is ready, at most the site's limit (opflow/resources.py, profiles/slurm/site.yaml);
# `slurm_partition` / `slurm_account` are the site's (the GPU partition for jobs with GPUs).


rule train:
    input:
        train_input,
    output:
        out("models/{dataset}_{model}/model.pt"),
    params:
        run=lambda w: shlex.quote(json.dumps(run_config(w.dataset, w.model), sort_keys=True)),
        out_dir=lambda w: out(f"models/{w.dataset}_{w.model}"),
        launcher=lambda w: train_launcher(w.dataset, w.model),
        # each of the nproc processes takes threads // nproc (at least 1), worked out by the shell: a
        # params function taking `threads` would make Snakemake evaluate every train job's resources
        # (the memory estimate imports torch) while it builds the DAG, dry runs included
        nproc=lambda w: WF.train_config(w.dataset, w.model).nproc,
    threads: lambda w: WF.train_config(w.dataset, w.model).threads
    resources:
        gpu=lambda w: WF.train_config(w.dataset, w.model).gpus,
        mem_mb=train_mem_mb,
        slurm_partition=partition(lambda w: WF.train_config(w.dataset, w.model).gpus),
        slurm_account=account,
    log:
        out("logs/train/{dataset}_{model}.log"),
    conda:
        "../envs/opflow.yaml"
    shell:
        "{params.launcher} train --run-json {params.run} --data {input} --output {output} "
        "--out-dir {params.out_dir} --restart-if-changed --threads $(( {threads} >= {params.nproc} ? {threads} / {params.nproc} : 1 )) --no-progress 2> {log}"
