"""The SLURM profile (profiles/slurm/config.yaml, snakemake-executor-plugin-slurm) by dry runs.

`snakemake --profile profiles/slurm -n` builds the jobs it would submit without a cluster; the
resources Snakemake prints for each job are what the plugin turns into sbatch options (mem_mb ->
--mem, runtime -> -t, threads -> --cpus-per-task, gpu -> --gpus, tasks -> --ntasks, slurm_partition
-> -p, slurm_account -> -A). Checked: each rule's time from the profile, its memory from the run
(opflow/resources.py: `<TBD>` until its inputs exist, then the estimate) capped at the site's limit
(profiles/slurm/site.yaml), the site's partitions and account, GPUs from the config
(training.gpus / evaluate.gpus: none in the quick profile, one in the paper profile), threads from
the config, MPI ranks as tasks, and one job per shard for a 10,000-sample source.
The same workflow on a real cluster: tests/pipeline/test_slurm.py.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from opflow import resources as res
from workflow_helpers import ROOT

PROFILE = ROOT / "profiles" / "slurm"


def dry_run_process(workdir: Path, configs: list[Path], *targets: str, site: dict | None = None, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """A dry run with the SLURM profile; ``site``: the site limits (default: no limit, no partition)."""
    site_file = workdir / "site.yaml"
    site_file.write_text(yaml.safe_dump(site if site is not None else {"max_mem_mb": None}))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--profile", str(PROFILE), "--directory", str(workdir), "-n", *extra]
    cmd += [*(["--configfile", *map(str, configs)] if configs else []), "--", *targets]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OPFLOW_SLURM_SITE": str(site_file)})


def dry_run(workdir: Path, configs: list[Path], *targets: str, site: dict | None = None, extra: tuple[str, ...] = ()) -> list[dict]:
    """The jobs of a dry run with the SLURM profile: rule, resources, threads, shell command."""
    run = dry_run_process(workdir, configs, *targets, site=site, extra=extra)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    jobs: list[dict] = []
    for line in run.stdout.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            jobs.append({"rule": m[1], "threads": 1, "resources": {}, "shell": ""})
        elif jobs and (m := re.match(r"^\s+resources: (.*)$", line)):
            jobs[-1]["resources"] = dict(kv.split("=", 1) for kv in m[1].split(", "))
        elif jobs and (m := re.match(r"^\s+threads: (\d+)$", line)):
            jobs[-1]["threads"] = int(m[1])
        elif jobs and line.startswith("Shell command: "):
            jobs[-1]["shell"] = line
    return jobs


QUICK = [ROOT / "config/quick.yaml"]
PROFILE_RESOURCES = yaml.safe_load((PROFILE / "config.yaml").read_text())["set-resources"]


def test_the_plugin_is_pinned_and_installed() -> None:
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    for pkg in ("snakemake-executor-plugin-slurm", "snakemake-executor-plugin-slurm-jobstep"):
        pins = [ln for ln in lock if ln.startswith(pkg + "==")]
        assert len(pins) == 1, pkg
        assert pins[0] == f"{pkg}=={importlib.metadata.version(pkg)}"
    assert yaml.safe_load((PROFILE / "config.yaml").read_text())["executor"] == "slurm"


def test_quick_profile_jobs_ask_for_memory_time_and_cpus_but_no_gpu(tmp_path: Path) -> None:
    jobs = dry_run(tmp_path, QUICK, "quick/results/darcy_ono.json")
    assert Counter(j["rule"] for j in jobs) == {"shard": 4, "merge_shards": 1, "derive_dataset": 1, "train": 1, "evaluate": 1}
    for j in jobs:
        resources = j["resources"]
        assert int(resources["runtime"]) == PROFILE_RESOURCES[j["rule"]]["runtime"], j["rule"]
        # a shard's memory is the solver's (fixed); the others follow their inputs, not there yet
        assert resources["mem_mb"] == (str(res.SHARD_MEM_MB) if j["rule"] == "shard" else "<TBD>"), j
        assert "slurm_partition" not in resources and "slurm_account" not in resources  # the cluster's defaults
    by_rule = {j["rule"]: j for j in jobs}
    assert by_rule["train"]["resources"]["gpu"] == "0" and by_rule["evaluate"]["resources"]["gpu"] == "0"
    assert by_rule["train"]["threads"] == 2 and by_rule["evaluate"]["threads"] == 2  # training.threads, evaluate.threads
    assert all(j["resources"]["tasks"] == "1" for j in jobs if j["rule"] == "shard")


def test_paper_profile_training_asks_for_a_gpu(tmp_path: Path) -> None:
    jobs = dry_run(tmp_path, [], "results/darcy_ono.json")
    by_rule = {j["rule"]: j for j in jobs}
    assert by_rule["train"]["resources"]["gpu"] == "1" and by_rule["evaluate"]["resources"]["gpu"] == "1"
    assert int(by_rule["train"]["resources"]["runtime"]) == PROFILE_RESOURCES["train"]["runtime"]
    assert sum(j["rule"] == "shard" for j in jobs) == 24  # 1224 samples in shards of 51


def test_a_10000_sample_source_is_one_job_per_shard(tmp_path: Path) -> None:
    jobs = dry_run(tmp_path, [], "data/sources/kolmogorov.nc")  # 10,000 samples, shard_size 50
    shards = [j for j in jobs if j["rule"] == "shard"]
    assert Counter(j["rule"] for j in jobs) == {"shard": 200, "merge_shards": 1}
    ranges = sorted(tuple(map(int, re.search(r"--start (\d+) --stop (\d+)", j["shell"]).groups())) for j in shards)
    assert ranges == [(a, a + 50) for a in range(0, 10_000, 50)]


@pytest.mark.mpi
def test_mpi_ranks_become_tasks_and_the_shard_runs_under_mpiexec(tmp_path: Path) -> None:
    cfg = tmp_path / "mpi.yaml"
    src = {"solver": "darcy_fem", "n_samples": 8, "seed": 7, "shard_size": 4, "params": {"resolution": 17}}
    cfg.write_text(yaml.safe_dump({"root": "mpi", "sources": {"fem4": {**src, "mpi_ranks": 4}}}))
    jobs = dry_run(tmp_path, [*QUICK, cfg], "mpi/data/sources/fem4.nc")
    shards = [j for j in jobs if j["rule"] == "shard"]
    assert len(shards) == 2 and all(j["resources"]["tasks"] == "4" and "mpiexec -n 4 " in j["shell"] for j in shards)


def test_the_profile_leaves_memory_to_the_rules() -> None:
    """A fixed mem_mb in set-resources would override every estimate (and the site's cap)."""
    assert all("mem_mb" not in r for r in PROFILE_RESOURCES.values())
    assert "mem_mb" not in yaml.safe_load((PROFILE / "config.yaml").read_text())["default-resources"]


def test_the_quick_training_asks_what_it_needs_once_its_data_exist(tiny_run: tuple[Path, subprocess.CompletedProcess]) -> None:
    """Not 64 GB: the estimate from the model's parameters and the data file (opflow/resources.py)."""
    from workflow_helpers import TINY

    work, _ = tiny_run
    tiny = work / "slurm-test-config.yaml"  # the shared run's config (other tests rewrite test-config.yaml)
    tiny.write_text(yaml.safe_dump(dict(TINY)))
    configs = [ROOT / "config/quick.yaml", tiny]
    jobs = dry_run(work, configs, "out/results/darcy43_ono.json", extra=("--forcerun", "train"))
    by_rule = {j["rule"]: j for j in jobs}
    data = res.data_bytes([work / "out/data/darcy43/r43.nc"])
    params = res.parameter_count({"arch": "ono", **TINY["models"]["ono"]}, data)
    assert int(by_rule["train"]["resources"]["mem_mb"]) == res.train_mem_mb(params, data.nbytes) <= 4096
    assert int(by_rule["evaluate"]["resources"]["mem_mb"]) <= 4096
    # capped at the site's limit
    jobs = dry_run(work, configs, "out/results/darcy43_ono.json", site={"max_mem_mb": 1100, "min_mem_mb": 512}, extra=("--forcerun", "train"))
    assert {j["rule"]: int(j["resources"]["mem_mb"]) for j in jobs} == {"train": 1100, "evaluate": 1100}


def test_the_sites_limit_partitions_and_account_reach_every_job(tmp_path: Path) -> None:
    site = {"max_mem_mb": 2000, "partition": "cpu", "gpu_partition": "gpu", "account": "proj7"}
    jobs = dry_run(tmp_path, [], "results/darcy_ono.json", site=site)  # the paper profile: GPU training
    for j in jobs:
        gpu = j["resources"].get("gpu", "0") != "0"
        assert j["resources"]["slurm_partition"] == ("gpu" if gpu else "cpu"), j
        assert j["resources"]["slurm_account"] == "proj7", j
        assert j["resources"]["mem_mb"] in ("2000", "<TBD>"), j  # a shard's 8000 MB capped at the node's 2000
    assert {j["rule"] for j in jobs if j["resources"].get("gpu", "0") != "0"} == {"train", "evaluate"}


def test_a_bad_site_file_stops_before_any_job_naming_the_file_and_key(tmp_path: Path) -> None:
    run = dry_run_process(tmp_path, QUICK, "quick/results/darcy_ono.json", site={"max_mem_mb": "lots"})
    assert run.returncode != 0
    err = run.stderr + run.stdout
    assert "site.yaml" in err and "max_mem_mb" in err and "lots" in err, err[-2000:]
    assert "Traceback" not in err
