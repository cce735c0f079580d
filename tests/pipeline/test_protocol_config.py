"""The protocol entries of config/default.yaml and config/quick.yaml: valid, consistent, and runnable.

* both profiles pass the typed config and the generation checks;
* every extra evaluation set that is a generated source regenerates exactly the dataset's test
  samples (same solver and seed, ``index_offset`` = first test index), in both profiles;
* the default (paper-size) DAG of the new results and of `rule all` resolves (dry run only).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from opflow.config import check_learning_config, deep_merge, eval_sets_of, load_config_files, resolve_run, view_of
from pipeline.config import check_config
from workflow_helpers import PROFILES, snakemake

NEW_RESULTS = ["ns_v1e-5_ono", "ns_v1e-5_tgen_ono", "kolmogorov_ono", "lorenz63_tno", "lorenz63_ono", "lorenz63_b_tno", "controlled_ode_tno", "elasticity_ono", "elasticity972_ono"]


@pytest.mark.parametrize("profile", list(PROFILES))
def test_profiles_are_valid(profile: str) -> None:
    cfg = load_config_files([str(p) for p in PROFILES[profile]])
    check_config(cfg)
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
    from opflow.data.errors import ConfigError

    cfg = deep_merge(load_config_files([str(p) for p in PROFILES["quick"]]), change)
    with pytest.raises(ConfigError) as e:
        check_learning_config(cfg)
    assert message in str(e.value)


def test_an_evaluation_only_dataset_cannot_be_trained() -> None:
    from opflow.data.errors import ConfigError

    cfg = deep_merge(load_config_files([str(p) for p in PROFILES["quick"]]), {"datasets": {"lorenz63_b": {"train": 0}}})
    check_config(cfg)
    with pytest.raises(ConfigError, match="train is 0, so it has nothing to train on"):
        resolve_run(cfg, "lorenz63_b", "tno")


@pytest.mark.fem  # rule all includes the FEM sources (meshed by gmsh while the DAG is built)
def test_default_dag_of_the_protocol_results_resolves(tmp_path: Path) -> None:
    """The paper profile: the protocol results and `rule all` (the profile's targets) resolve."""
    run = snakemake(tmp_path, None, "all", *(f"results/{r}.json" for r in NEW_RESULTS), profile="default", extra=("-n",))
    assert run.returncode == 0, run.stderr[-3000:]
    text = run.stdout + run.stderr
    for src in ("lorenz63_test_dt00075", "lorenz63_test_nonuniform", "ns_v1e-5", "kolmogorov", "elasticity"):
        assert f"data/sources/{src}.nc" in text, src
    assert "data/ns_v1e-5/r64.nc" in text and "data/lorenz63/all.nc" in text and "data/elasticity/all.nc" in text
    assert "Error" not in text and "not a target" not in text  # the explaining rules never compete with real ones
    for target in load_config_files([str(p) for p in PROFILES["default"]])["targets"]:
        assert f"output: {target}" in text, target


@pytest.mark.parametrize("path", sorted({str(p) for files in PROFILES.values() for p in files}))
def test_config_files_have_no_repeated_keys(path: str) -> None:
    """YAML keeps the last of two equal keys silently: a repeated block would override the first."""
    import yaml

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
        keys = [loader.construct_object(k) for k, _ in node.value]
        repeated = sorted({k for k in keys if keys.count(k) > 1}, key=str)
        assert not repeated, f"{path}: keys {repeated} repeat at line {node.start_mark.line + 1}"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    with open(path) as fh:
        assert isinstance(yaml.load(fh, Loader=Strict), dict)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_burgers_source_is_the_published_map(profile: str) -> None:
    """Every profile's Burgers source declares the physics of the published file: its four read
    rows, integrated under that source's parameters, match the published u(., 1) (measured 4.4e-5 -
    1.5e-4 relative L2; the reading before, period 1, missed by 0.98)."""
    from solvers.burgers import Burgers, published_rows_error

    cfg = load_config_files([str(p) for p in PROFILES[profile]])
    params = Burgers.from_config(cfg["sources"]["burgers"].get("params")).params
    assert params.resolution == {"default": 8192, "quick": 1024}[profile]
    assert max(published_rows_error(params)) < 3e-4


DIAGNOSTICS = sorted((PROFILES["default"][0].parent / "diagnostics").glob("*.yaml"))


def _pair(cfg: dict, target: str) -> tuple[str, str]:
    """(dataset, model) of ``results/<dataset>_<model>.json`` (dataset names may hold '_')."""
    stem = Path(target).stem
    pairs = [(stem[: -len(m) - 1], m) for m in cfg["models"] if stem.endswith(f"_{m}") and stem[: -len(m) - 1] in cfg["datasets"]]
    assert len(pairs) == 1, f"{target}: names no single (dataset, model) pair: {pairs}"
    return pairs[0]


@pytest.mark.parametrize("path", DIAGNOSTICS, ids=lambda p: p.stem)
def test_a_diagnostic_config_is_the_paper_run_changed_only_where_it_says(path: Path) -> None:
    """A diagnostic (config/diagnostics/*.yaml, layered on the paper profile) is valid, writes under
    diag/, never has a paper run's hash, and differs from the paper run in the training and model keys
    it writes and nothing else: the data and the task stay the paper's, and so does every model key it
    does not write (the Galerkin K^T V dropout diagnostics set ``kv_dropout`` alone)."""
    paper = load_config_files([str(PROFILES["default"][0])])
    written = load_config_files([str(path)])
    cfg = load_config_files([str(PROFILES["default"][0]), str(path)])
    check_learning_config(cfg)
    assert str(cfg["root"]).startswith("diag/")
    assert cfg["targets"]
    for target in cfg["targets"]:
        dataset, model = _pair(cfg, target)
        ours, theirs = resolve_run(cfg, dataset, model), resolve_run(paper, dataset, model)
        assert ours["hash"] != theirs["hash"]
        for key in ("data", "task"):
            assert ours[key] == theirs[key], key
        entry = written.get("models", {}).get(model, {})
        keys = set(ours["model_config"]) | set(theirs["model_config"])
        model_changed = {k for k in keys if ours["model_config"].get(k) != theirs["model_config"].get(k)}
        assert model_changed <= set(entry) - {"training"}, model_changed
        changed = {k for k in ours["training"] if ours["training"][k] != theirs["training"][k]}
        assert changed or model_changed
        if not changed:
            continue
        stated = set(entry.get("training", {})) | set(written.get("training", {}))
        stated |= set(written.get("datasets", {}).get(dataset, {}).get("training", {}))
        stated |= set(written.get("runs", {}).get(f"{dataset}/{model}", {}).get("training", {}))
        assert changed <= stated, (changed, stated)


@pytest.mark.parametrize(("overlay", "key", "value"), [("cuda_graphs.yaml", "cuda_graphs", True), ("compile.yaml", "compile", True),
                                                     ("eval_every5.yaml", "eval_every", 5)])
def test_an_operational_overlay_sets_its_key_for_every_queued_pair_without_changing_its_run(overlay: str, key: str, value: object) -> None:
    """config/cuda_graphs.yaml (scripts/device_session.sh --graphs), config/compile.yaml and config/eval_every5.yaml
    (scripts/cpu_training.sh): each queued pair's training job gets the key's value, and its run hash, so its
    checkpoint and published identity, stays the same."""
    from opflow.config import job_run
    from opflow.queue import load_queue

    root = PROFILES["default"][0].parent
    plain = load_config_files([str(p) for p in PROFILES["default"]])
    overlaid = load_config_files([*(str(p) for p in PROFILES["default"]), str(root / overlay)])
    check_config(overlaid)
    for e in load_queue():
        before, after = resolve_run(plain, e.dataset, e.model, "x.nc"), resolve_run(overlaid, e.dataset, e.model, "x.nc")
        assert job_run(before)["training"].get(key) != value and job_run(after)["training"][key] == value, e.pair
        assert after["hash"] == before["hash"], e.pair
