"""The generator face: typed parameters with clear errors, and sharding that does not change data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from opflow.data.errors import ConfigError
from opflow.data.format import Variable, read_dataset, validate
from opflow.data.provenance import sample_rng
from opflow.data.shards import merge_shards
from solvers.base import FieldSpec, Generator, SolverError, params_from_dict
from solvers.generate import write_shard


@dataclass(frozen=True)
class NoiseParams:
    resolution: int = 8
    scale: float = 1.0
    kind: Literal["gauss", "uniform"] = "gauss"
    fail_at: int = -1

    def __post_init__(self) -> None:
        if self.resolution < 2:
            raise ValueError(f"resolution must be >= 2, got {self.resolution}")


class Noise(Generator):
    """A test generator: white noise input, its cumulative sum as output."""

    name = "test-noise"
    Params = NoiseParams
    block_size = 3

    def dims(self) -> dict[str, int]:
        return {"x": self.params.resolution}

    def coords(self) -> dict[str, Variable]:
        return {"x": Variable(("x",), np.linspace(0, 1, self.params.resolution), {"units": "1", "long_name": "x"})}

    def fields(self) -> dict[str, FieldSpec]:
        return {
            "f": FieldSpec(("x",), "1", "noise", "input"),
            "u": FieldSpec(("x",), "1", "cumulative sum", "output", "float64"),
        }

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        if self.params.fail_at in indices:
            raise SolverError("diverged", index=self.params.fail_at, seed=seed)
        f = np.stack([sample_rng(seed, i).standard_normal(self.params.resolution) for i in indices]) * self.params.scale
        return {"f": f, "u": np.cumsum(f, axis=1)}


def test_params_from_dict_types_defaults_and_literals() -> None:
    p = params_from_dict(NoiseParams, {"resolution": 16, "scale": 2}, "sources.n.params")
    assert p == NoiseParams(16, 2.0, "gauss")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"resolutoin": 16}, r"sources\.n\.params: unknown parameter 'resolutoin'; allowed: fail_at, kind, resolution, scale"),
        ({"kind": "cauchy"}, r"sources.n.params.kind: 'cauchy' is not one of \['gauss', 'uniform'\]"),
        ({"resolution": 2.5}, r"sources\.n\.params\.resolution: 2\.5 is not of type int"),
        ({"resolution": 1}, r"sources.n.params: resolution must be >= 2, got 1"),
    ],
)
def test_params_errors_name_the_key_and_the_fix(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        params_from_dict(NoiseParams, values, "sources.n.params")


def test_shards_of_any_size_give_the_same_samples(tmp_path: Path) -> None:
    gen = Noise(NoiseParams())
    whole = write_shard(gen, 11, 0, 10, tmp_path / "whole.nc", progress=False)
    parts = [write_shard(gen, 11, a, b, tmp_path / f"p{a}.nc", progress=False) for a, b in [(0, 1), (1, 5), (5, 10)]]
    merged = merge_shards(parts, tmp_path / "merged.nc")
    a, b = read_dataset(whole), read_dataset(merged)
    np.testing.assert_array_equal(a["u"], b["u"])
    np.testing.assert_array_equal(a["f"], b["f"])
    assert a["f"].dtype == np.float32 and a["u"].dtype == np.float64
    assert validate(merged) == []
    assert b.attrs["opflow_generator"] == "test-noise"
    assert b.attrs["opflow_seed"] == 11


def test_solver_failure_names_sample_and_seed_and_leaves_no_file(tmp_path: Path) -> None:
    gen = Noise(NoiseParams(fail_at=4))
    with pytest.raises(SolverError, match=r"diverged \(sample 4, seed 11\)"):
        write_shard(gen, 11, 0, 10, tmp_path / "s.nc", progress=False)
    assert list(tmp_path.iterdir()) == []


class NanNoise(Noise):
    """Noise whose output of sample 61 is NaN: a solver that diverged without noticing."""

    def generate(self, seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        out = super().generate(seed, indices)
        out["u"][indices == 61] = np.nan
        return out


def test_non_finite_output_names_the_global_sample_and_the_seed(tmp_path: Path) -> None:
    """Before: the writer's ``non-finite values in 'u' for samples 0:3`` (positions in the shard's
    file, samples 60-62 of the source). The job log's last line is what the terminal shows."""
    with pytest.raises(SolverError) as e:
        write_shard(NanNoise(NoiseParams()), 11, 60, 120, tmp_path / "s.nc", progress=False)
    assert str(e.value) == (
        "generator 'test-noise' returned non-finite values (NaN or inf) in 'u' for sample(s) 61; nothing was saved (sample 61, seed 11)"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_shard_without_room_is_refused_before_any_solve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before (issue 39): every sample of a shard was solved, then the write failed."""
    import opflow.atomic as atomic
    from opflow.data.errors import DiskFullError

    solved = []
    monkeypatch.setattr(Noise, "generate", lambda self, seed, idx: solved.append(len(idx)) or {})
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 100)
    out = tmp_path / "s" / "shard-0-10.nc"
    with pytest.raises(DiskFullError) as e:
        write_shard(Noise(NoiseParams()), 11, 0, 10, out, progress=False)
    assert str(e.value).startswith(f"{out}: no space left on device: the file system {atomic.mount_point(out)} has 100 bytes free; "
                                   "its first 3 sample(s) take up to 288 bytes; nothing was solved (samples 0:10); free space on "), str(e.value)
    assert solved == []
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_a_shard_whose_rest_will_not_fit_stops_after_its_first_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compressed size is known from the first block: 3 of 10 samples solved, not 10."""
    import opflow.atomic as atomic
    from opflow.data.errors import DiskFullError

    calls = []
    real = Noise.generate
    monkeypatch.setattr(Noise, "generate", lambda self, seed, idx: calls.append(len(idx)) or real(self, seed, idx))
    gen = Noise(NoiseParams(resolution=20_000))  # 240 kB per sample uncompressed, white noise: barely compresses
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 1_200_000)  # the first block fits, the other 7 samples do not
    out = tmp_path / "shard-0-10.nc"
    with pytest.raises(DiskFullError, match=r"at the compressed size of the first 3, the other 7 samples would take about \d+ bytes .*; "
                                            r"stopped before solving them \(samples 0:10: 3 solved, nothing kept\)"):
        write_shard(gen, 11, 0, 10, out, progress=False)
    assert calls == [3] and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 2**40)
    assert read_dataset(write_shard(gen, 11, 0, 10, out, progress=False))["u"].shape == (10, 20_000)


def test_empty_shard_range_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="empty or negative"):
        write_shard(Noise(NoiseParams()), 0, 5, 5, tmp_path / "s.nc", progress=False)


def test_every_generator_uses_the_dimensionless_unit_for_its_nondimensional_pdes() -> None:
    """All built-in PDEs are nondimensional: time, space and every field carry CF's unit "1"
    (no mix of "s"/"m" and "1")."""
    from solvers.base import available_generators, get_generator

    cheap_coords = {"controlled_ode": {}, "darcy_fd": {"resolution": 5}, "kolmogorov": {}, "lorenz63": {}, "navier_stokes": {}}
    for name in available_generators():
        gen = get_generator(name).from_config(cheap_coords.get(name, {}))
        units = {f"field {k}": f.units for k, f in gen.fields().items()}
        if name in cheap_coords:
            units |= {f"coordinate {k}": v.attrs.get("units") for k, v in gen.coords().items()}
        assert units and set(units.values()) == {"1"}, (name, units)


def test_shards_carry_cf_attributes_and_the_sample_coordinate(tmp_path: Path) -> None:
    f = write_shard(Noise(NoiseParams()), 11, 3, 7, tmp_path / "s.nc", progress=False)
    ds = read_dataset(f)
    np.testing.assert_array_equal(ds["sample"], np.arange(3, 7))
    assert ds.attrs["Conventions"] == "CF-1.10"
    assert ds.attrs["title"] == "test-noise samples generated by opflow"
    from opflow.data.provenance import command_line

    assert len(ds.attrs["history"].splitlines()) == 1 and ds.attrs["history"].endswith(": " + command_line())
    assert validate(f) == []


def test_history_records_the_command_as_typed(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "l.nc"
    cmd = ["-m", "solvers", "shard", "--solver", "lorenz63", "--params", '{"T": 0.1}', "--seed", "0", "--start", "0", "--stop", "2", "--no-progress", str(out)]
    subprocess.run([sys.executable, *cmd], check=True, capture_output=True)
    (line,) = read_dataset(out).attrs["history"].splitlines()
    assert line.split(": ", 1)[1] == f"python -m solvers shard --solver lorenz63 --params '{{\"T\": 0.1}}' --seed 0 --start 0 --stop 2 --no-progress {out}"


#: what differs between the machines a run may resume on: numpy's SIMD dispatch (down to its X86_V2 baseline) and
#: OpenBLAS's kernels (this workplace sets OPENBLAS_CORETYPE=Haswell on some processors; a machine that does not lets
#: OpenBLAS choose)
MACHINES = {
    "this machine": {},
    "numpy baseline, OpenBLAS Nehalem": {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Nehalem"},
    "OpenBLAS's own choice": {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None},
}


@pytest.mark.parametrize("source, n", [("darcy_piecewise", 2), ("darcy_lognormal64", 2), ("burgers", 2), ("lorenz63", 10)])
def test_grid_data_is_the_same_bit_for_bit_whatever_the_machines_instruction_set(tmp_path, source, n):
    """A checkpoint resumes only on data with its training-split digest, and the grid data are made anew on each
    machine (the GPU leases make theirs): the first samples of the paper profile's grid sources, made under each CPU
    dispatch of ``MACHINES``, are identical bit for bit. (The FEM elasticity source is not: its coordinates moved by
    an ulp with OpenBLAS's Nehalem kernels, on 2026-11-27, which is why a CPU run keeps that file in git's history,
    opflow/lease_state.py.)"""
    import json
    import os
    import subprocess
    import sys

    import yaml

    root = Path(__file__).resolve().parents[2]
    src = yaml.safe_load((root / "config/default.yaml").read_text())["sources"][source]
    made = {}
    for name, env in MACHINES.items():
        e = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
        out = tmp_path / f"{len(made)}.nc"
        subprocess.run([sys.executable, "-m", "solvers", "shard", "--solver", src["solver"], "--params", json.dumps(src.get("params", {})),
                        "--seed", str(src["seed"]), "--start", "0", "--stop", str(n), "--threads", "1", "--no-progress", str(out)],
                       cwd=root, env=e, check=True, capture_output=True, timeout=300)
        made[name] = read_dataset(out).variables
    first, *others = made
    for name in others:
        assert list(made[name]) == list(made[first])
        differing = [v for v in made[first] if made[first][v].data.tobytes() != made[name][v].data.tobytes()]
        assert differing == [], f"{source}: {name} made other bits in {differing}"
