"""What a cluster job asks for (opflow/resources.py): the site's limits, the data and model sizes, the formula."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from learning_helpers import grid_dataset
from opflow import resources as res
from opflow.data.errors import ConfigError


# --------------------------------------------------------------------------- the site file


def test_a_missing_site_file_means_no_limit_but_sinfo_and_no_partition(tmp_path: Path) -> None:
    site = res.load_site(tmp_path / "absent.yaml")
    assert site.max_mem_mb == "auto" and site.partition is None and site.account is None and site.min_mem_mb == 1024


def test_the_committed_site_file_loads() -> None:
    site = res.load_site(Path(__file__).resolve().parents[2] / res.SITE_FILE)
    assert site == res.SiteLimits()  # the defaults, written out: a site edits its copy


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("max_mem_mb: 0\n", ["site.yaml", "max_mem_mb", "0"]),
        ("max_mem_mb: lots\n", ["site.yaml", "max_mem_mb", "lots"]),
        ("partitoin: gpu\n", ["site.yaml", "partitoin"]),
        ("- 1\n", ["site.yaml", "must be a mapping", "max_mem_mb"]),
        ("max_mem_mb: [\n", ["site.yaml", "not valid YAML"]),
    ],
)
def test_a_bad_site_file_names_the_file_the_key_and_the_value(tmp_path: Path, text: str, words: list[str]) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        res.load_site(path)
    msg = str(e.value)
    assert all(w in msg for w in words), msg
    assert len(msg.splitlines()) <= 2


def test_gpu_jobs_go_to_the_gpu_partition_when_there_is_one() -> None:
    assert res.SiteLimits(partition="cpu", gpu_partition="gpu").partition_for(1) == "gpu"
    assert res.SiteLimits(partition="cpu").partition_for(1) == "cpu"
    assert res.SiteLimits(partition="cpu", gpu_partition="gpu").partition_for(0) == "cpu"


def _fake_sinfo(folder: Path, output: str) -> None:
    exe = folder / "sinfo"
    exe.write_text(f"#!/bin/sh\nprintf '{output}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_auto_takes_the_largest_node_that_sinfo_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sinfo(tmp_path, "8000\\n24105+\\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert res.max_mem_mb(res.SiteLimits()) == 24105
    assert res.max_mem_mb(res.SiteLimits(max_mem_mb=4000)) == 4000  # a written limit wins
    assert res.max_mem_mb(res.SiteLimits(max_mem_mb=None)) is None


def test_auto_is_no_limit_without_slurm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo here
    assert res.max_mem_mb(res.SiteLimits()) is None


# --------------------------------------------------------------------------- data and model sizes


def test_data_size_is_every_variable_uncompressed_from_the_header(tmp_path: Path) -> None:
    path = grid_dataset(tmp_path / "d.nc", n_train=12, n_test=4, s=16)
    size = res.data_bytes([path])
    n, s = 16, 16
    fields = 2 * n * s * s * 4  # coeff and sol, float32
    coords = 2 * s * 8  # x, y float64
    per_sample = 2 * n * 8 + n * 1  # sample (the coordinate the writer adds) and sample_index int64, split int8
    assert size.nbytes == fields + coords + per_sample
    assert (size.points, size.coord_dim, size.inputs, size.outputs) == (s * s, 2, 1, 1)
    assert res.data_bytes([path, path]).nbytes == 2 * size.nbytes  # the files an evaluation reads add up


def test_a_data_file_not_made_yet_is_file_not_found(tmp_path: Path) -> None:
    """Snakemake turns FileNotFoundError of an input into <TBD> in a dry run."""
    with pytest.raises(FileNotFoundError) as e:
        res.data_bytes([tmp_path / "later.nc"])
    assert e.value.filename == str(tmp_path / "later.nc")


def test_the_parameter_count_is_the_built_models(tmp_path: Path) -> None:
    from opflow.models import build_model, count_parameters

    size = res.data_bytes([grid_dataset(tmp_path / "d.nc", s=16)])
    cfg = {"arch": "ono", "width": 16, "n_layers": 1, "n_heads": 2, "ortho_dim": 4, "attention": "linear"}
    assert res.parameter_count(cfg, size) == count_parameters(build_model(cfg, 1, 1, 2)) > 0
    # the quick profile's ONO: the 21k-parameter model of the report
    quick = {"arch": "ono", "width": 32, "n_layers": 2, "n_heads": 4, "ortho_dim": 8, "attention": "linear", "training": {"epochs": 1}}
    assert res.parameter_count(quick, size) == count_parameters(build_model({k: v for k, v in quick.items() if k != "training"}, 1, 1, 2))


def test_a_model_sized_by_its_data_takes_the_points_from_the_file(tmp_path: Path) -> None:
    size = res.data_bytes([grid_dataset(tmp_path / "d.nc", s=8)])
    from_file = res.parameter_count({"arch": "deeponet"}, size)
    assert size.points == 64
    assert from_file == res.parameter_count({"arch": "deeponet", "n_points": 64}, size) > 0  # n_points = 64 from the file
    assert from_file != res.parameter_count({"arch": "deeponet", "n_points": 100}, size)  # the branch net reads n_points values


def test_a_model_that_cannot_be_built_from_the_header_counts_zero(tmp_path: Path) -> None:
    size = res.data_bytes([grid_dataset(tmp_path / "d.nc", s=8)])
    assert res.parameter_count({"arch": "no_such_arch"}, size) == 0


# --------------------------------------------------------------------------- the formula


def test_the_quick_training_asks_for_what_it_needs_not_64_gb() -> None:
    """The quick Darcy ONO: 21k parameters, 300 samples of 43 x 43 (two float32 fields)."""
    data = 300 * 43 * 43 * 2 * 4
    mb = res.train_mem_mb(21_073, data)
    assert mb == 1792  # round_up(1.5 (1024 + 3 D + 32 P), 256)
    assert mb <= 4096 < 64_000


def test_the_formula_as_documented() -> None:
    mib = 2**20
    need = res.BASE_CPU_MB + (3 * 500 * mib + 32 * 10_000_000) / mib  # 500 MiB of data, 10 M parameters
    assert res.train_mem_mb(10_000_000, 500 * mib) == 256 * -(-1.5 * need // 256)
    assert res.train_mem_mb(10_000_000, 500 * mib, gpus=1) > res.train_mem_mb(10_000_000, 500 * mib)  # the CUDA runtime
    assert res.eval_mem_mb(10_000_000, 500 * mib) < res.train_mem_mb(10_000_000, 500 * mib)  # no gradients, no optimizer
    assert res.io_mem_mb(1000 * mib) == 256 * -(-1.5 * (res.BASE_IO_MB + 2000) // 256)


def test_no_request_exceeds_the_sites_limit_or_falls_below_the_floor() -> None:
    huge = 10**12
    assert res.train_mem_mb(huge, huge, cap=24_105) == 24_105
    assert res.eval_mem_mb(huge, huge, cap=24_105) == 24_105
    assert res.io_mem_mb(huge, cap=8000) == 8000
    assert res.fixed_mem_mb(res.SHARD_MEM_MB, cap=4000) == 4000 and res.fixed_mem_mb(res.SHARD_MEM_MB) == res.SHARD_MEM_MB
    assert res.io_mem_mb(0, floor=2048) == 2048
