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
# definition, see opflow/config.py) is a param, so Snakemake reruns training when it changes; the
# job then discards a checkpoint of the old config (--restart-if-changed) and resumes a matching one.
#
# Resources: `gpu` = GPUs the job asks for (training.nproc unless training.device is cpu or mps:
# with `auto` the job uses a GPU when its node has one), the key Snakemake's cluster executors (e.g. the SLURM plugin) use to place jobs on GPU nodes;
# locally, `snakemake --resources gpu=1` runs one training at a time on the GPU. With training.nproc
# > 1 the job launches `torchrun --standalone --nproc_per_node <nproc>` (DDP, one GPU per process).

from opflow.config import resolve_run, train_config  # noqa: E402


def run_config(dataset, model):
    return resolve_run(config, dataset, model, dataset_file(dataset))


def train_gpus(dataset, model):
    tc = train_config(config, dataset, model)
    return 0 if tc.device in ("cpu", "mps") else tc.nproc


def train_launcher(dataset, model):
    n = train_config(config, dataset, model).nproc
    if n == 1:
        return f"{PY} -m opflow.cli"
    return f"{PY} -m torch.distributed.run --standalone --nproc_per_node {n} --module opflow.cli"


rule train:
    input:
        lambda w: dataset_file(w.dataset),
    output:
        out("models/{dataset}_{model}/model.pt"),
    params:
        run=lambda w: shlex.quote(json.dumps(run_config(w.dataset, w.model), sort_keys=True)),
        out_dir=lambda w: out(f"models/{w.dataset}_{w.model}"),
        launcher=lambda w: train_launcher(w.dataset, w.model),
        proc_threads=lambda w, threads: max(1, threads // train_config(config, w.dataset, w.model).nproc),
    threads: lambda w: train_config(config, w.dataset, w.model).threads
    resources:
        gpu=lambda w: train_gpus(w.dataset, w.model),
    log:
        out("logs/train/{dataset}_{model}.log"),
    shell:
        "{params.launcher} train --run-json {params.run} --data {input} --output {output} "
        "--out-dir {params.out_dir} --restart-if-changed --threads {params.proc_threads} --no-progress 2> {log}"
