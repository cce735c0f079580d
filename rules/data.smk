# Data generation: sharded solver runs -> merged source -> strided subsample + splits per dataset.
#
#   <root>/data/sources/<source>/shard-<start>-<stop>.nc   one job per shard (temporary)
#   <root>/data/sources/<source>.nc                        all samples at the solver's resolution
#   <root>/data/<dataset>/r<res>.nc                        a dataset at grid resolution <res>
#   <root>/data/<dataset>/all.nc                           a dataset of a mesh or series source
#
# Any resolution that is a strided subsample of the source grid can be asked for by path, e.g.
# `snakemake --cores 4 data/darcy/r106.nc`; any other stops while the DAG is built, naming the
# valid ones. A new solver resolution is one config value (sources.<name>.params.resolution).
# Shards depend on the solver's resolved parameters, so writing a default out changes nothing;
# a source with mpi_ranks > 1 runs each shard under `mpiexec -n <mpi_ranks>`.


rule shard:
    output:
        temp(out("data/sources/{source}/shard-{start}-{stop}.nc")),
    params:
        launcher=shard_launcher,
        solver=lambda w: WF.sources[w.source].solver,
        seed=lambda w: WF.sources[w.source].seed,
        spec=shard_spec,
    threads: lambda w: WF.sources[w.source].threads
    resources:
        tasks=lambda w: WF.sources[w.source].mpi_ranks,
        mem_mb=shard_mem_mb,
        slurm_partition=partition(),
        slurm_account=account,
    log:
        out("logs/shard/{source}-{start}-{stop}.log"),
    conda:
        "../envs/opflow.yaml"
    shell:
        "{params.launcher} -m solvers shard --solver {params.solver} --params {params.spec} --seed {params.seed} "
        "--start {wildcards.start} --stop {wildcards.stop} --threads {threads} {output} 2> {log}"


rule merge_shards:
    input:
        shard_files,
    output:
        out("data/sources/{source}.nc"),
    params:
        py=PY,
    resources:
        mem_mb=io_mem_mb,
        slurm_partition=partition(),
        slurm_account=account,
    log:
        out("logs/merge/{source}.log"),
    conda:
        "../envs/opflow.yaml"
    shell:
        "{params.py} -m opflow.cli merge {output} {input} 2> {log} && {params.py} -m opflow.cli validate {output} >> {log}"


rule derive_dataset:
    input:
        derive_input,
    output:
        out("data/{dataset}/{grid}.nc"),
    params:
        py=PY,
        resolution=derive_resolution,
        train=lambda w: WF.datasets[w.dataset].train,
        val=lambda w: WF.datasets[w.dataset].val,
        test=lambda w: WF.datasets[w.dataset].test,
    resources:
        mem_mb=io_mem_mb,
        slurm_partition=partition(),
        slurm_account=account,
    log:
        out("logs/derive/{dataset}-{grid}.log"),
    conda:
        "../envs/opflow.yaml"
    shell:
        "{params.py} -m opflow.cli derive {input} {output} {params.resolution} --name {wildcards.dataset} "
        "--train {params.train} --val {params.val} --test {params.test} 2> {log} "
        "&& {params.py} -m opflow.cli inspect {output} >> {log}"
