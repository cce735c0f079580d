# Data generation: sharded solver runs -> merged source -> strided subsample + splits per dataset.
#
#   <root>/data/sources/<source>/shard-<start>-<stop>.nc   one job per shard (temporary)
#   <root>/data/sources/<source>.nc                        all samples at the solver's resolution
#   <root>/data/<dataset>/r<res>.nc                        a dataset at grid resolution <res>
#
# Any resolution that is a strided subsample of the source grid can be asked for by path, e.g.
# `snakemake --cores 4 data/darcy/r106.nc`; a new solver resolution is one config value
# (sources.<name>.params.resolution).


def shard_ranges(source):
    src = config["sources"][source]
    n, size = src["n_samples"], src.get("shard_size", 100)
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def source_file(source):
    return out(f"data/sources/{source}.nc")


def dataset_file(dataset, res=None):
    """The file of ``dataset`` at grid resolution ``res`` (its training resolution by default)."""
    res = res if res is not None else dataset_resolution(config, dataset)
    return out(f"data/{dataset}/r{res}.nc") if res is not None else out(f"data/{dataset}/all.nc")


rule shard:
    output:
        temp(out("data/sources/{source}/shard-{start}-{stop}.nc")),
    params:
        solver=lambda w: config["sources"][w.source]["solver"],
        seed=lambda w: config["sources"][w.source]["seed"],
        spec=lambda w: shlex.quote(json.dumps(config["sources"][w.source].get("params", {}), sort_keys=True)),
    threads: lambda w: config["sources"][w.source].get("threads", 1)
    resources:
        mpi_ranks=lambda w: config["sources"][w.source].get("mpi_ranks", 1),
    log:
        out("logs/shard/{source}-{start}-{stop}.log"),
    shell:
        "{PY} -m solvers shard --solver {params.solver} --params {params.spec} --seed {params.seed} "
        "--start {wildcards.start} --stop {wildcards.stop} --threads {threads} {output} 2> {log}"


rule merge_shards:
    input:
        lambda w: [out(f"data/sources/{w.source}/shard-{a}-{b}.nc") for a, b in shard_ranges(w.source)],
    output:
        out("data/sources/{source}.nc"),
    log:
        out("logs/merge/{source}.log"),
    shell:
        "{PY} -m opflow.cli merge {output} {input} 2> {log} && {PY} -m opflow.cli validate {output} >> {log}"


rule derive_dataset:
    input:
        lambda w: source_file(config["datasets"][w.dataset]["source"]),
    output:
        out("data/{dataset}/r{res}.nc"),
    params:
        train=lambda w: config["datasets"][w.dataset]["train"],
        val=lambda w: config["datasets"][w.dataset].get("val", 0),
        test=lambda w: config["datasets"][w.dataset]["test"],
    log:
        out("logs/derive/{dataset}-r{res}.log"),
    shell:
        "{PY} -m opflow.cli derive {input} {output} --resolution {wildcards.res} --name {wildcards.dataset} "
        "--train {params.train} --val {params.val} --test {params.test} 2> {log} "
        "&& {PY} -m opflow.cli inspect {output}"


rule derive_dataset_nogrid:
    input:
        lambda w: source_file(config["datasets"][w.dataset]["source"]),
    output:
        out("data/{dataset}/all.nc"),
    params:
        train=lambda w: config["datasets"][w.dataset]["train"],
        val=lambda w: config["datasets"][w.dataset].get("val", 0),
        test=lambda w: config["datasets"][w.dataset]["test"],
    log:
        out("logs/derive/{dataset}-all.log"),
    shell:
        "{PY} -m opflow.cli derive {input} {output} --name {wildcards.dataset} "
        "--train {params.train} --val {params.val} --test {params.test} 2> {log}"
