"""The protocol entries of config/default.yaml and config/quick.yaml: valid, consistent, and runnable.

* both profiles pass the schema, the generation checks and the learning checks;
* every extra evaluation set that is a generated source regenerates exactly the dataset's test
  samples (same solver and seed, ``index_offset`` = first test index), in both profiles;
* the default (paper-size) DAG of the new results resolves (dry run only);
* a tiny Lorenz-63 run goes through the whole workflow, with discretisation eval sets in the
  results JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from opflow.config import check_learning_config, eval_sets_of, load_config_files, resolve_run, view_of
from opflow.schema import validate_config
from solvers.config import check_generation_config

ROOT = Path(__file__).resolve().parents[2]
PROFILES = {"default": [ROOT / "config/default.yaml"], "quick": [ROOT / "config/default.yaml", ROOT / "config/quick.yaml"]}
NEW_RESULTS = ["ns_v1e-5_ono", "ns_v1e-5_tgen_ono", "kolmogorov_ono", "lorenz63_tno", "lorenz63_ono", "lorenz63_b_tno", "controlled_ode_tno", "elasticity_ono", "elasticity972_ono"]


@pytest.mark.parametrize("profile", list(PROFILES))
def test_profiles_are_valid(profile: str) -> None:
    cfg = load_config_files([str(p) for p in PROFILES[profile]])
    validate_config(cfg, ROOT / "config/schema.yaml")
    check_generation_config(cfg)
    check_learning_config(cfg)
    assert view_of(cfg, "ns_v1e-5").to_dict() == {"kind": "window", "history": 10, "frames": [1, 20], "train_frames": None}
    assert view_of(cfg, "ns_v1e-5_tgen").train_frames == (11, 18)
    assert resolve_run(cfg, "lorenz63", "tno", "x.nc")["task"] == {"inputs": ["x", "y0", "z0"], "outputs": ["y", "z"]}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_source_eval_sets_regenerate_the_test_samples(profile: str) -> None:
    cfg = load_config_files([str(p) for p in PROFILES[profile]])
    checked = 0
    for name, ds in cfg["datasets"].items():
        main = cfg["sources"][ds["source"]]
        for set_name, (kind, target) in eval_sets_of(cfg, name).items():
            if kind != "source":
                continue
            src = cfg["sources"][target]
            where = f"{profile}: datasets.{name}.eval_sets.{set_name} -> sources.{target}"
            assert (src["solver"], src["seed"]) == (main["solver"], main["seed"]), where
            assert src["params"].get("index_offset", 0) == main["n_samples"] - ds["test"], where
            assert src["n_samples"] == ds["test"], where
            checked += 1
    assert checked >= 14  # lorenz63 and lorenz63_b (6 each), controlled_ode (2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"datasets": {"lorenz63": {"eval_sets": {"dt": "nope"}}}}, "datasets.lorenz63.eval_sets.dt: 'nope' is neither a dataset nor a source"),
        ({"datasets": {"lorenz63": {"eval_sets": {"a b": "lorenz63"}}}}, "set name 'a b' must be"),
        ({"datasets": {"kolmogorov": {"view": {"history": 3}}}}, "['history'] do not belong to view kind 'one_step'"),
        ({"datasets": {"ns_v1e-5": {"view": {"train_frames": [5, 18]}}}}, "train_frames: [5, 18] must lie within the predicted frames [11, 20]"),
    ],
)
def test_bad_views_and_eval_sets_are_named(change: dict, message: str) -> None:
    from opflow.config import deep_merge
    from opflow.data.errors import ConfigError

    cfg = deep_merge(load_config_files([str(p) for p in PROFILES["quick"]]), change)
    with pytest.raises(ConfigError) as e:
        check_learning_config(cfg)
    assert message in str(e.value)


def test_an_evaluation_only_dataset_cannot_be_trained() -> None:
    from opflow.config import deep_merge
    from opflow.data.errors import ConfigError

    cfg = deep_merge(load_config_files([str(p) for p in PROFILES["quick"]]), {"datasets": {"lorenz63_b": {"train": 0}}})
    validate_config(cfg, ROOT / "config/schema.yaml")
    check_learning_config(cfg)
    with pytest.raises(ConfigError, match="train is 0, so it has nothing to train on"):
        resolve_run(cfg, "lorenz63_b", "tno")


def snakemake(workdir: Path, configfiles: list[Path], *targets: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "--cores", "2", *extra,
           "--configfile", *map(str, configfiles), "--", *targets]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_default_dag_of_the_protocol_results_resolves(tmp_path: Path) -> None:
    run = snakemake(tmp_path, [ROOT / "config/default.yaml"], *(f"results/{r}.json" for r in NEW_RESULTS), extra=("-n",))
    assert run.returncode == 0, run.stderr[-3000:]
    text = run.stdout + run.stderr
    for src in ("lorenz63_test_dt00075", "lorenz63_test_nonuniform", "ns_v1e-5", "kolmogorov", "elasticity"):
        assert f"data/sources/{src}.nc" in text, src
    assert "data/ns_v1e-5/r64.nc" in text and "data/lorenz63/all.nc" in text and "data/elasticity/all.nc" in text


# A tiny Lorenz-63 dataset of its own with two of the discretisation sets (fewer jobs than all six).
TINY_LORENZ = {
    "root": "out",
    "sources": {
        "lorenz63": {"n_samples": 40, "shard_size": 40},
        "lorenz63_test_dt00075": {"n_samples": 8, "params": {"index_offset": 32}},
        "lorenz63_test_dt001": {"n_samples": 8, "params": {"index_offset": 32}},
    },
    "datasets": {
        "lorenz63": {"train": 32, "test": 8},
        "lorenz63_b": {"train": 32, "test": 8},
        "lorenz_tiny": {
            "source": "lorenz63", "train": 32, "test": 8, "task": {"inputs": ["x", "y0", "z0"], "outputs": ["y", "z"]},
            "view": {"kind": "series"}, "eval_sets": {"dt0.0075": "lorenz63_test_dt00075", "dt0.01": "lorenz63_test_dt001"},
            "training": {"epochs": 1, "batch_size": 8, "threads": 1},
        },
    },
    "models": {"tno": {"width": 8, "n_layers": 1, "n_heads": 2, "ffn_dim": 8}},
    "evaluate": {"threads": 1},
}


@pytest.mark.slow
def test_tiny_lorenz_workflow_reports_the_discretisation_sets(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY_LORENZ))
    run = snakemake(tmp_path, [ROOT / "config/quick.yaml", tmp_path / "tiny.yaml"], "out/results/lorenz_tiny_tno.json")
    assert run.returncode == 0, run.stderr[-4000:]
    r = json.loads((tmp_path / "out/results/lorenz_tiny_tno.json").read_text())
    assert r["view"] == {"kind": "series"} and r["n_test"] == 8
    assert set(r["eval_sets"]) == {"dt0.0075", "dt0.01"}
    assert r["eval_sets"]["dt0.0075"]["discretisation"] == "uniform dt=0.0075 (267 points)"
    # dt = 0.01 regenerates the test split exactly
    for k in ("rel_l2_median", "rel_l2_max"):
        assert r["eval_sets"]["dt0.01"][k] == pytest.approx(r["metrics"][k], rel=1e-9)
    assert (tmp_path / "out/results/lorenz_tiny_tno.png").stat().st_size > 10_000
