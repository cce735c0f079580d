# Shared helpers of the rules: the checked config, output paths, shard ranges, run configs, target
# explanations. Loaded first by the Snakefile; no rules here.

import json
import os
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, workflow.basedir)
from opflow.data.errors import ConfigError  # noqa: E402
from pipeline.config import check_pairs, dataset_resolution, load_workflow, source_info, unavailable_sources  # noqa: E402

try:
    # the one loader (also `opflow train --config`'s): the typed tree and the profile's targets; one
    # clear line per mistake instead of a traceback, before any job
    WF = load_workflow(config)
except ConfigError as e:  # every mistake of the config, one line each
    sys.exit("\n".join(f"opflow: config error at {p}" for p in e.problems))
if unavailable_sources():  # e.g. the FEM sources on a GPU machine without gmsh: the other targets still run
    print(
        f"opflow: sources {', '.join(sorted(unavailable_sources()))} cannot be made here (not checked); "
        f"first reason: {next(iter(unavailable_sources().values()))}",
        file=sys.stderr,
    )

from opflow.config import job_run, resolve_run  # noqa: E402
from opflow import resources as res  # noqa: E402

try:  # the cluster's limits (profiles/slurm/site.yaml; OPFLOW_SLURM_SITE names another file)
    SITE = res.load_site(os.environ.get("OPFLOW_SLURM_SITE") or Path(workflow.basedir) / res.SITE_FILE)
except ConfigError as e:
    sys.exit(f"opflow: site config error: {e}")

from opflow.data.errors import DatasetError  # noqa: E402
from opflow.data.format import default_complevel  # noqa: E402

try:  # the data files' zlib level (OPFLOW_DATA_COMPLEVEL): a bad value stops here, not in the first job
    default_complevel()
except DatasetError as e:
    sys.exit(f"opflow: {e}")

PY = shlex.quote(sys.executable)
_VENV_MPIEXEC = Path(sys.executable).parent / "mpiexec"
MPIEXEC = shlex.quote(str(_VENV_MPIEXEC)) if _VENV_MPIEXEC.exists() else "mpiexec"
ROOT = WF.root


def out(path):
    """Path of an output under this profile's root."""
    return path if ROOT in ("", ".") else f"{ROOT}/{path}"


def ignore_outputs():
    """Keep a profile's outputs out of ``git status``: its own ``root`` gets a ``.gitignore`` of ``*``
    (written once, when the workflow starts jobs). Untracked files make the provenance's commit
    ``+dirty`` (opflow.data.provenance.git_commit), so outputs that showed as untracked would mark
    every later file of the run dirty. Root ``.`` and the shipped profiles' roots are in the
    repository's ``.gitignore``."""
    if ROOT in ("", "."):
        return
    marker = Path(ROOT) / ".gitignore"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"# outputs of the opflow workflow (root: {ROOT}), written when it started; not source\n*\n")


def alternatives(names):
    """Regex matching exactly one of ``names`` (longest first), for unambiguous wildcards."""
    names = sorted(names, key=len, reverse=True)
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def _under_root(pattern):
    return pattern if ROOT in ("", ".") else f"{re.escape(ROOT)}/{pattern}"


#: every path a rule of this workflow can make; rules/targets.smk explains the others
VALID_RESULT = _under_root(rf"results/(?:{alternatives(WF.datasets)})_(?:{alternatives(WF.models)})\.json")
VALID_DATA = _under_root(
    rf"data/(?:sources/(?:{alternatives(WF.sources)})(?:/shard-\d+-\d+)?|(?:{alternatives(WF.datasets)})/(?:r\d+|all))\.nc"
)


# --------------------------------------------------------------------------- data


def shard_ranges(source):
    src = WF.sources[source]
    return [(a, min(a + src.shard_size, src.n_samples)) for a in range(0, src.n_samples, src.shard_size)]


def shard_files(wildcards):
    return [out(f"data/sources/{wildcards.source}/shard-{a}-{b}.nc") for a, b in shard_ranges(wildcards.source)]


def shard_spec(wildcards):
    """The solver's resolved parameters (defaults filled in): spelling out a default reruns nothing."""
    return shlex.quote(json.dumps(source_info(WF, wildcards.source).params, sort_keys=True))


def shard_launcher(wildcards):
    ranks = WF.sources[wildcards.source].mpi_ranks
    return f"{MPIEXEC} -n {ranks} {PY}" if ranks > 1 else PY


def source_file(source):
    return out(f"data/sources/{source}.nc")


def _has_view(dataset):
    return "view" in WF.dataset(dataset).model_fields_set


def data_owner(dataset, res):
    """The dataset whose derived file ``dataset`` reads at grid ``res`` (None: a source without a grid).

    Datasets of the same source and split sizes that train at ``res`` derive identical files, so they
    read one: a dataset without a view reads its own file (the path users know); any other reads the
    file of the first such dataset without a view, else of the first such dataset (sorted by name);
    e.g. the inverse-Darcy sets read darcy141's and darcy211's files, a zero-shot grid the file of
    a dataset training there.
    """
    ds = WF.dataset(dataset)
    if res == dataset_resolution(WF, dataset) and not _has_view(dataset):
        return dataset
    key = (ds.source, ds.train, ds.val, ds.test)
    same = [
        d for d in WF.datasets
        if (WF.dataset(d).source, WF.dataset(d).train, WF.dataset(d).val, WF.dataset(d).test) == key and dataset_resolution(WF, d) == res
    ]
    return min(same, key=lambda d: (_has_view(d), d)) if same else dataset


def dataset_file(dataset, res=None):
    """The file ``dataset`` reads at grid resolution ``res`` (its training resolution by default):
    data/<owner>/r<res>.nc, or data/<owner>/all.nc for a source without a grid (owner: data_owner)."""
    res = res if res is not None else dataset_resolution(WF, dataset)
    owner = data_owner(dataset, res)
    return out(f"data/{owner}/r{res}.nc") if res is not None else out(f"data/{owner}/all.nc")


def derive_input(wildcards):
    """The dataset's source file, once the asked grid is known to be derivable (checked while the
    DAG is built, so a bad resolution stops before any generation)."""
    ds = WF.dataset(wildcards.dataset)
    info = source_info(WF, ds.source)
    where = out(f"data/{wildcards.dataset}/{wildcards.grid}.nc")
    if wildcards.grid == "all":
        if info.grid is not None:
            stop(f"{where}: source {ds.source!r} is a grid; ask for data/{wildcards.dataset}/r<res>.nc with res in {info.resolutions()}")
    elif info.grid is None:
        stop(f"{where}: source {ds.source!r} has no grid to subsample; ask for data/{wildcards.dataset}/all.nc")
    elif int(wildcards.grid[1:]) not in info.resolutions():
        stop(
            f"{where}: {wildcards.grid[1:]} is not a strided subsample of the {info.grid}-point grid of source {ds.source!r}; "
            f"valid resolutions: {info.resolutions()}"
        )
    return source_file(ds.source)


def derive_resolution(wildcards):
    return "" if wildcards.grid == "all" else f"--resolution {wildcards.grid[1:]}"


# --------------------------------------------------------------------------- training and evaluation


def train_input(wildcards):
    """The training file of a (dataset, model) pair, once the model is known to fit the data.

    Checked while Snakemake builds the DAG, so a target given on the command line (not among the
    profile's ``targets``, which are checked at load) stops with one line before any job runs
    (:func:`pipeline.config.check_pairs`).
    """
    try:
        check_pairs(WF, [(wildcards.dataset, wildcards.model)])
    except ConfigError as e:
        sys.exit(f"opflow: config error at {e}")
    return dataset_file(wildcards.dataset)


def run_config(dataset, model):
    """The run JSON of a training job (its params: a change reruns the job); opflow.config.job_run."""
    return job_run(resolve_run(WF, dataset, model, dataset_file(dataset)))


def train_launcher(dataset, model):
    n = WF.train_config(dataset, model).nproc
    if n == 1:
        return f"{PY} -m opflow.cli"
    return f"{PY} -m torch.distributed.run --standalone --nproc_per_node {n} --module opflow.cli"


def zero_shot_files(dataset):
    return [dataset_file(dataset, r) for r in WF.dataset(dataset).zero_shot]


def eval_set_files(dataset):
    """{name: file} of the dataset's extra evaluation sets (a dataset's file or a source's file)."""
    return {name: (dataset_file(target) if kind == "dataset" else source_file(target)) for name, (kind, target) in WF.eval_sets(dataset).items()}


# --------------------------------------------------------------------------- what each job asks for


_CAPS = {}


def _on_slurm():
    """Whether the jobs go to SLURM (the plugin's executor, or its jobstep inside a job)."""
    return str(getattr(workflow.executor_plugin, "name", "")).startswith("slurm")


def mem_cap(gpus=0):
    """The site's memory limit of a job with ``gpus`` GPUs. ``auto`` asks sinfo, once, and only when
    the jobs go to SLURM: local runs and dry runs never wait on a SLURM client without a controller."""
    key = bool(gpus)
    if key not in _CAPS:
        _CAPS[key] = None if SITE.max_mem_mb == "auto" and not _on_slurm() else res.max_mem_mb(SITE, int(key))
    return _CAPS[key]


def partition(gpus=0):
    """The site's partition for a job with ``gpus`` GPUs (None: the cluster's default)."""
    return lambda wildcards: SITE.partition_for(gpus(wildcards) if callable(gpus) else gpus)


def account(wildcards):
    return SITE.account


def _estimate_wanted():
    """Whether a job's ``mem_mb`` is read by anyone: a cluster executor (the scheduler's request), a
    dry run (it shows the request), or a local run bounded by ``--resources mem_mb=...``. A plain local
    run has no use for it and is spared the estimate (it imports torch into Snakemake's own process,
    about 1.5 s per run); its jobs show the site's floor, ``min_mem_mb``."""
    return not workflow.local_exec or workflow.dryrun or "mem_mb" in workflow.global_resources


def _at_submission(estimate):
    """``estimate`` where the job is submitted and the value is used (:func:`_estimate_wanted`); inside
    the job (Snakemake's remote mode: the plugin's jobstep) the allocation's own memory, so the job's
    Snakemake neither reads headers nor imports torch."""

    def mem_mb(wildcards, input):
        if workflow.remote_exec:
            return int(os.environ.get("SLURM_MEM_PER_NODE") or SITE.min_mem_mb)
        if not _estimate_wanted():
            return SITE.min_mem_mb
        return estimate(wildcards, input)

    mem_mb.__doc__ = estimate.__doc__
    return mem_mb


def shard_mem_mb(wildcards):
    return res.fixed_mem_mb(res.SHARD_MEM_MB, mem_cap())


@_at_submission
def io_mem_mb(wildcards, input):
    """merge_shards, derive_dataset: the input (read from its headers once it exists) and the output."""
    return res.io_mem_mb(res.data_bytes(input).nbytes, mem_cap(), SITE.min_mem_mb)


def _model_size(dataset, model, files):
    data = res.data_bytes(files)
    entry = WF.model(model)
    return res.parameter_count({"arch": entry.arch, **entry.hparams()}, data), data


@_at_submission
def train_mem_mb(wildcards, input):
    """opflow.resources.train_mem_mb of the run: its model's parameters and its data file."""
    gpus = WF.train_config(wildcards.dataset, wildcards.model).gpus
    params, data = _model_size(wildcards.dataset, wildcards.model, [input[0]])
    return res.train_mem_mb(params, data.nbytes, gpus, mem_cap(gpus), SITE.min_mem_mb)


@_at_submission
def eval_mem_mb(wildcards, input):
    """opflow.resources.eval_mem_mb: the model and every data file the evaluation reads."""
    files = [input.data, *input.zero_shot, *input.eval_sets]
    params, data = _model_size(wildcards.dataset, wildcards.model, files)
    return res.eval_mem_mb(params, data.nbytes, WF.evaluate.gpus, mem_cap(WF.evaluate.gpus), SITE.min_mem_mb)


# --------------------------------------------------------------------------- targets that do not exist


def stop(message):
    """End the run with one line ``opflow: <message>`` while the DAG is built (no job started).

    Raised from an input function, a ValueError would come back wrapped in Snakemake's
    InputFunctionException with traceback lines; SystemExit is not caught there.
    """
    raise SystemExit(f"opflow: {message}")


def nearest(word, names, n=3):
    """The configured ``names`` closest to a mistyped ``word`` (difflib), closest first."""
    from difflib import get_close_matches

    return get_close_matches(word, sorted(names), n=n, cutoff=0.5)


def _guess(path):
    """'did you mean ...' for a results or data path whose dataset or model is misspelt ('' when no guess)."""
    name = Path(path).name
    if name.endswith(".json"):
        pairs = [f"{d}_{m}" for d in WF.datasets for m in WF.models]
        close = nearest(name.removesuffix(".json"), pairs)
        return f"; nearest: {', '.join(out(f'results/{c}.json') for c in close)}" if close else ""
    parts = Path(path).parts
    if "data" in parts[:-2]:  # <root>/data/<dataset>/<grid>.nc
        ds = parts[parts.index("data") + 1]
        close = nearest(ds, WF.datasets)
        if ds not in WF.datasets and ds != "sources" and close:
            return f"; no dataset {ds!r}, nearest: {', '.join(close)}"
    return ""


def explain_target(path):
    """Stop with one line naming ``path``, the nearest valid targets and what can be asked for (rules/targets.smk)."""
    root = "." if ROOT in ("", ".") else ROOT
    if root != "." and not path.startswith(f"{root}/"):
        stop(f"{path}: this profile writes everything under its root {root!r}; did you mean {out(path)}?")
    parts = Path(path).parts[-3:]
    if len(parts) == 3 and parts[0] == "data" and parts[1] in WF.datasets and re.fullmatch(r"r\d+|all", parts[2].removesuffix(".nc")):  # a configured dataset at a grid it cannot have
        from types import SimpleNamespace

        derive_input(SimpleNamespace(dataset=parts[1], grid=parts[2].removesuffix(".nc")))
    stop(
        f"{path} is not a target of this workflow{_guess(path)}; results are {out('results/<dataset>_<model>.json')} with dataset one of "
        f"{sorted(WF.datasets)} and model one of {sorted(WF.models)}; data are {out('data/<dataset>/r<res>.nc')}; "
        f"`snakemake` alone builds the profile's targets {WF.targets}"
    )
