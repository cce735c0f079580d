"""The learning config: ONO-protocol defaults, merge order, early errors naming the key, run hashes."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest
import torch

from opflow.config import (
    EvalConfig,
    TrainConfig,
    check_learning_config,
    deep_merge,
    diff_keys,
    eval_config,
    job_run,
    load_config_files,
    model_entry,
    models_of,
    resolve_run,
    task_of,
    train_config,
)
from opflow.data.errors import ConfigError

from learning_helpers import TEST_ARCH, tiny_config

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_ono_protocol_with_torch_onecycle_defaults() -> None:
    c = TrainConfig()
    assert (c.epochs, c.batch_size, c.lr, c.weight_decay, c.grad_clip) == (500, 8, 1e-3, 1e-5, 0.1)
    assert (c.loss, c.input_normalizer, c.output_normalizer) == ("rel_l2", "unit_gaussian", "unit_gaussian")
    assert c.loss_reduction == "sum"  # the authors' TestLoss(size_average=False): the clip acts on the summed gradient
    # the authors call OneCycleLR(optimizer, max_lr, epochs, steps_per_epoch): everything else default
    sig = inspect.signature(torch.optim.lr_scheduler.OneCycleLR).parameters
    assert c.pct_start == sig["pct_start"].default
    assert c.div_factor == sig["div_factor"].default
    assert c.final_div_factor == sig["final_div_factor"].default


def test_merge_order_defaults_then_training_then_model_then_dataset() -> None:
    cfg = tiny_config(epochs=7)
    cfg["training"]["lr"] = 0.5
    cfg["training"]["weight_decay"] = 0.25
    cfg["models"]["mlp"]["training"] = {"lr": 0.125, "batch_size": 2}
    cfg["datasets"]["toy"]["training"] = {"batch_size": 3}
    tc = train_config(cfg, "toy", "mlp")
    assert tc.epochs == 7  # training:
    assert tc.weight_decay == 0.25  # training: (not overridden)
    assert tc.lr == 0.125  # models.mlp.training beats training:
    assert tc.batch_size == 3  # datasets.toy.training beats models.mlp.training
    assert tc.grad_clip == 0.1  # default untouched


def test_a_run_entry_sets_one_pair_and_wins_over_the_dataset_and_the_model() -> None:
    """Galerkin Transformer, App. C.1: batch 8 at n = 512 and 2048, batch 4 at n = 8192, for the same
    model: a value of one (dataset, model) pair, written in ``runs.<dataset>/<model>.training``."""
    cfg = tiny_config(epochs=7)
    cfg["models"]["mlp"]["training"] = {"batch_size": 2, "lr": 0.125}
    cfg["models"]["other"] = {"arch": TEST_ARCH, "width": 8}
    cfg["datasets"]["toy"]["training"] = {"batch_size": 3}
    cfg["runs"] = {"toy/mlp": {"training": {"batch_size": 4}}}
    assert train_config(cfg, "toy", "mlp").batch_size == 4  # the run beats datasets.toy and models.mlp
    assert train_config(cfg, "toy", "mlp").lr == 0.125  # what the run does not write comes from below
    assert train_config(cfg, "toy", "other").batch_size == 3  # another model on the same dataset: untouched
    check_learning_config(cfg)
    # the run's hash follows its settings; the other pair's does not move
    base = {k: v for k, v in cfg.items() if k != "runs"}
    assert resolve_run(cfg, "toy", "mlp")["hash"] != resolve_run(base, "toy", "mlp")["hash"]
    assert resolve_run(cfg, "toy", "other")["hash"] == resolve_run(base, "toy", "other")["hash"]


@pytest.mark.parametrize(
    "runs, message",
    [
        ({"toy-mlp": {"training": {"batch_size": 4}}}, r"runs\.toy-mlp: a run is named 'dataset/model' \(e\.g\. 'burgers/gt1d'\), got 'toy-mlp'"),
        ({"toy/mlp/x": {"training": {}}}, r"runs\.toy/mlp/x: a run is named 'dataset/model'"),
        ({"tot/mlp": {"training": {"batch_size": 4}}}, r"runs\.tot/mlp: no dataset 'tot' \(configured: \['toy'\]\)"),
        ({"toy/mpl": {"training": {"batch_size": 4}}}, r"runs\.toy/mpl: no model 'mpl' \(configured: \['mlp'\]\)"),
        ({"toy/mlp": {"training": {"batch": 4}}}, r"runs\.toy/mlp\.training: unknown key 'batch'; allowed: batch_size, "),
        ({"toy/mlp": {"train": {"batch_size": 4}}}, r"runs\.toy/mlp: unknown key 'train'; allowed: training"),
    ],
)
def test_a_run_entry_naming_no_configured_pair_or_a_bad_key_is_refused(runs: dict, message: str) -> None:
    cfg = {**tiny_config(), "runs": runs}
    with pytest.raises(ConfigError, match=message):
        check_learning_config(cfg)


def test_unknown_key_names_it_the_layer_and_the_allowed_keys() -> None:
    cfg = tiny_config()
    cfg["models"]["mlp"]["training"] = {"epoch": 3}
    with pytest.raises(ConfigError, match=r"models\.mlp\.training: unknown key 'epoch'; allowed: .*\bepochs\b"):
        train_config(cfg, "toy", "mlp")
    with pytest.raises(ConfigError, match=r"evaluate: unknown key 'n_plots'; allowed: .*\bn_plot_samples\b"):
        eval_config({"evaluate": {"n_plots": 3}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"epochs": -1}, r"training\.epochs: -1 must be >= 1"),
        ({"epochs": 2.5}, r"training\.epochs: 2\.5 is not of type int"),
        ({"epochs": True}, r"training\.epochs: True is not of type int"),
        ({"loss": "l1"}, r"training\.loss: 'l1' is not one of \['rel_l2', 'rel_h1', 'mse'\]"),
        ({"input_normalizer": "minmax"}, r"training\.input_normalizer: 'minmax' is not one of \['unit_gaussian', 'pointwise', 'none'\]"),
        ({"lr": 0}, r"training\.lr: 0 must be > 0"),
        ({"grad_clip": 0}, r"training\.grad_clip: 0 must be > 0"),
        ({"pct_start": 1.5}, r"training\.pct_start: 1\.5 must be < 1"),
        ({"device": "gpu"}, r"device: 'gpu' must be auto, cpu, mps, cuda or cuda:N"),
        ({"precision": "fp16"}, r"training\.precision: 'fp16' is not one of \['fp32', 'tf32', 'bf16'\]"),
        ({"compile": "yes"}, r"training\.compile: 'yes' is not of type bool"),
        ({"divergence_factor": 1}, r"training\.divergence_factor: 1 must be > 1"),
        ({"divergence_patience": 0}, r"training\.divergence_patience: 0 must be >= 1"),
    ],
)
def test_bad_values_are_refused_with_the_key_and_the_fix(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(values)


def test_yaml_style_exponent_strings_are_floats_and_null_disables_clipping() -> None:
    # PyYAML reads 1e-3 (no dot) as a string
    c = TrainConfig.from_dict({"lr": "1e-3", "weight_decay": "0", "grad_clip": None})
    assert c.lr == 1e-3 and isinstance(c.lr, float) and c.weight_decay == 0.0 and c.grad_clip is None
    with pytest.raises(ConfigError, match=r"lr: 'fast' is not of type float"):
        TrainConfig.from_dict({"lr": "fast"})


def test_global_batch_must_split_over_processes() -> None:
    cfg = tiny_config()
    cfg["training"].update(batch_size=6, nproc=4)
    with pytest.raises(ConfigError, match=r"batch_size: 6 is the global batch and must be a multiple of the number of processes \(4\)"):
        train_config(cfg, "toy", "mlp")
    cfg["training"]["batch_size"] = 8
    assert train_config(cfg, "toy", "mlp").nproc == 4


def test_resolve_run_is_json_and_hashes_only_what_changes_the_weights() -> None:
    cfg = tiny_config()
    run = resolve_run(cfg, "toy", "mlp", "data/toy/r16.nc")
    assert json.loads(json.dumps(run)) == run
    assert run["model_config"] == {"arch": TEST_ARCH, "width": 16}
    assert run["training"]["epochs"] == 3 and run["training"]["grad_clip"] == 0.1
    assert run["task"] == {"inputs": None, "outputs": None}
    assert run["data"] == {"source": "toy_src", "resolution": 16, "train": 12, "val": 0, "test": 4}
    assert run["paths"] == {"train_data": "data/toy/r16.nc"}
    h = run["hash"]
    assert len(h) == 16 and resolve_run(cfg, "toy", "mlp")["hash"] == h  # paths are not hashed

    for key, value in [("device", "cuda"), ("num_workers", 4), ("threads", 8), ("eval_every", 5), ("checkpoint_every", 3), ("compile", True),
                       ("divergence_factor", None), ("divergence_patience", 5)]:
        assert resolve_run(deep_merge(cfg, {"training": {key: value}}), "toy", "mlp")["hash"] == h, key
    for change in [{"training": {"lr": 2e-3}}, {"training": {"seed": 1}}, {"models": {"mlp": {"width": 8}}}, {"datasets": {"toy": {"train": 10}}},
                   {"datasets": {"toy": {"task": {"outputs": ["sol"]}}}}]:
        assert resolve_run(deep_merge(cfg, change), "toy", "mlp")["hash"] != h, change


def test_a_training_job_run_leaves_the_late_operational_keys_out_at_their_defaults() -> None:
    """So that adding the divergence check did not change the params of every training job (Snakemake
    would have retrained every model); set to another value, they are in, and the job's settings and
    hash are those of the run either way."""
    cfg = tiny_config()
    run = resolve_run(cfg, "toy", "mlp", "data/toy/r16.nc")
    job = job_run(run)
    assert {"divergence_factor", "divergence_patience"} <= set(run["training"])
    assert not {"divergence_factor", "divergence_patience"} & set(job["training"])
    assert {k: v for k, v in job.items() if k != "training"} == {k: v for k, v in run.items() if k != "training"}
    assert TrainConfig.from_dict(job["training"]) == TrainConfig.from_dict(run["training"])
    off = resolve_run(deep_merge(cfg, {"training": {"divergence_factor": None}}), "toy", "mlp")
    assert job_run(off)["training"]["divergence_factor"] is None and "divergence_patience" not in job_run(off)["training"]
    assert job_run(off)["hash"] == run["hash"]


def test_task_is_checked() -> None:
    cfg = tiny_config()
    cfg["datasets"]["toy"]["task"] = {"inputs": "coeff", "outputs": ["sol"]}
    assert task_of(cfg, "toy") == {"inputs": ["coeff"], "outputs": ["sol"]}
    cfg["datasets"]["toy"]["task"] = {"inputs": [], "outputs": ["sol"]}  # the coordinates alone are the input
    assert task_of(cfg, "toy") == {"inputs": [], "outputs": ["sol"]}
    for task, msg in [
        ({"input": ["a"]}, r"datasets\.toy\.task: unknown key 'input'; allowed: inputs, outputs"),
        ({"outputs": []}, r"datasets\.toy\.task\.outputs: \[\] needs at least 1 item"),
        ({"outputs": [3]}, r"datasets\.toy\.task\.outputs\.0: 3 is not of type str"),
        ({"inputs": ["a", "a"]}, r"names repeat"),
        ({"inputs": ["a"], "outputs": ["a"]}, r"\['a'\] are both inputs and outputs"),
    ]:
        cfg["datasets"]["toy"]["task"] = task
        with pytest.raises(ConfigError, match=msg):
            task_of(cfg, "toy")


def test_check_learning_config_catches_models_tasks_and_evaluate() -> None:
    cfg = tiny_config()
    check_learning_config(cfg)
    with pytest.raises(ConfigError, match=r"unknown model arch 'onno'; available: \[.*'ono'"):
        check_learning_config(deep_merge(cfg, {"models": {"bad": {"arch": "onno"}}}))
    with pytest.raises(ConfigError, match=r"models\.mlp: _test_point_mlp has no hyperparameter 'depth'; allowed: dropout, width"):
        check_learning_config(deep_merge(cfg, {"models": {"mlp": {"depth": 3}}}))
    with pytest.raises(ConfigError, match=r"datasets\.toy\.training\.epochs: 0 must be >= 1"):
        check_learning_config(deep_merge(cfg, {"datasets": {"toy": {"training": {"epochs": 0}}}}))
    with pytest.raises(ConfigError, match=r"evaluate\.batch_size: 0 must be >= 1"):
        check_learning_config(deep_merge(cfg, {"evaluate": {"batch_size": 0}}))
    with pytest.raises(ConfigError, match=r"models: no model 'fno'; configured: \['mlp'\]"):
        resolve_run(cfg, "toy", "fno")
    assert EvalConfig().n_plot_samples == 2


def test_diff_keys_and_config_files(tmp_path: Path) -> None:
    assert diff_keys({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}, "d": 0}) == ["a.c: 2 -> 3", "d: '<absent>' -> 0"]
    (tmp_path / "a.yaml").write_text("training:\n  epochs: 5\n  lr: 1e-3\nmodels:\n  m: {arch: x, width: 4}\n")
    (tmp_path / "b.yaml").write_text("training:\n  epochs: 2\nmodels:\n  m: {width: 8}\n")
    cfg = load_config_files([str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")])
    assert cfg == {"training": {"epochs": 2, "lr": "1e-3"}, "models": {"m": {"arch": "x", "width": 8}}}
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config_files([str(tmp_path / "missing.yaml")])


def test_the_workflow_tree_names_bad_keys_and_layers_carry_only_what_was_written() -> None:
    """One typed tree checks every section; a training layer's defaults never override an earlier layer."""
    from opflow.config import parse_workflow

    cfg = tiny_config(epochs=7)
    cfg["models"]["mlp"]["training"] = {"lr": "1e-3", "grad_clip": None}
    cfg["evaluate"] = {"n_plot_samples": 3}
    wf = parse_workflow(cfg)
    tc = wf.train_config("toy", "mlp")
    assert (tc.epochs, tc.lr, tc.grad_clip) == (7, 1e-3, None)  # epochs from training:, not the model layer's default
    assert wf.evaluate.n_plot_samples == 3
    for bad, msg in [
        ({"training": {"epoch": 3}}, r"^training: unknown key 'epoch'; allowed: .*\bepochs\b"),
        ({"models": {"mlp": {"training": {"lrate": 1}}}}, r"^models\.mlp\.training: unknown key 'lrate'"),
        ({"evaluate": {"nplots": 1}}, r"^evaluate: unknown key 'nplots'"),
        ({"training": {"loss": "l1"}}, r"^training\.loss: 'l1' is not one of \['rel_l2', 'rel_h1', 'mse'\]"),
        ({"training": {"device": "gpu"}}, r"^training\.device: 'gpu' must be auto, cpu, mps, cuda or cuda:N"),
        ({"datasets": {"toy": {"train": -1}}}, r"^datasets\.toy\.train: -1 must be >= 0"),
        ({"datasets": {"toy": {"view": {"kind": "window", "history": 0}}}}, r"^datasets\.toy\.view\.history: 0 must be >= 1"),
        ({"sources": {"s": {"solver": "x", "n_samples": 0, "seed": 0}}}, r"^sources\.s\.n_samples: 0 must be >= 1"),
        ({"sources": {"s": {"solver": "x", "seed": 0}}}, r"^sources\.s: missing required key 'n_samples'"),
        ({"rooot": "x"}, r"^<top level>: unknown key 'rooot'; allowed: datasets, evaluate, models, root, runs, sources, targets, training"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            parse_workflow(deep_merge(cfg, bad))


def test_gpus_are_a_config_choice_checked_against_device_and_processes() -> None:
    cfg = tiny_config()
    assert train_config(cfg, "toy", "mlp").gpus == 0  # CPU-only by default: no GPU partition is asked for
    assert train_config(deep_merge(cfg, {"training": {"device": "auto", "gpus": 1}}), "toy", "mlp").gpus == 1
    with pytest.raises(ConfigError, match=r"gpus: 1 but device is 'cpu'"):
        train_config(deep_merge(cfg, {"training": {"gpus": 1}}), "toy", "mlp")
    with pytest.raises(ConfigError, match=r"gpus: 1 but nproc is 2"):
        train_config(deep_merge(cfg, {"training": {"device": "cuda", "gpus": 1, "nproc": 2}}), "toy", "mlp")


def test_the_json_schema_is_generated_from_the_typed_tree() -> None:
    from opflow.config_schema import workflow_json_schema

    schema = workflow_json_schema()
    assert set(schema["properties"]) == {"root", "targets", "sources", "datasets", "models", "training", "evaluate", "runs"}
    train = schema["$defs"]["TrainConfig"]["properties"]
    assert train["epochs"]["default"] == TrainConfig().epochs and train["loss"]["enum"] == ["rel_l2", "rel_h1", "mse"]


def test_importing_config_and_cli_does_not_import_torch() -> None:
    import subprocess

    code = "import sys, opflow.config, opflow.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_optimizer_and_scheduler_choices_for_the_fno_recipe() -> None:
    """Defaults stay AdamW + OneCycle (the ONO protocol); FNO's recipe is Adam + StepLR halving
    every 100 epochs, set per model and checked like every other key."""
    d = TrainConfig()
    assert (d.optimizer, d.scheduler, d.step_size, d.gamma) == ("adamw", "onecycle", 100, 0.5)
    cfg = tiny_config()
    cfg["models"]["fno"] = {"arch": "fno", "training": {"optimizer": "adam", "scheduler": "step", "batch_size": 20, "weight_decay": 1.0e-4}}
    t = train_config(cfg, "toy", "fno")
    assert (t.optimizer, t.scheduler, t.step_size, t.gamma, t.batch_size, t.weight_decay) == ("adam", "step", 100, 0.5, 20, 1e-4)
    assert train_config(cfg, "toy", "mlp").optimizer == "adamw"  # only that model
    for bad, msg in [
        ({"optimizer": "sgd"}, r"^training\.optimizer: 'sgd' is not one of \['adamw', 'adam', 'adam_complex_legacy'\]"),
        ({"scheduler": "cosine"}, r"^training\.scheduler: 'cosine' is not one of \['onecycle', 'step'\]"),
        ({"gamma": 1.0}, r"^training\.gamma: 1\.0 must be < 1"),
        ({"step_size": 0}, r"^training\.step_size: 0 must be >= 1"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            check_learning_config(deep_merge(cfg, {"training": bad}))
    # the choices change the trained weights, so they are part of the run hash
    base = resolve_run(cfg, "toy", "mlp")
    assert resolve_run(deep_merge(cfg, {"training": {"scheduler": "step"}}), "toy", "mlp")["hash"] != base["hash"]


# --------------------------------------------------------------------------- models.<name>.extends


def _extending(**child) -> dict:
    """The tiny config with ``models.wide``, which extends ``mlp``, and ``mlp`` given a training block."""
    cfg = tiny_config()
    cfg["models"]["mlp"]["training"] = {"lr": 0.25, "batch_size": 2}
    cfg["models"]["wide"] = {"extends": "mlp", **child}
    return cfg


def test_an_entry_that_extends_another_is_that_entry_with_its_own_keys_winning_training_key_by_key() -> None:
    cfg = _extending(dropout=0.5, training={"lr": 0.125})
    assert models_of(cfg)["wide"] == {"arch": TEST_ARCH, "width": 16, "dropout": 0.5, "training": {"lr": 0.125, "batch_size": 2}}
    assert model_entry(cfg, "wide") == {"arch": TEST_ARCH, "width": 16, "dropout": 0.5}
    tc = train_config(cfg, "toy", "wide")
    assert (tc.lr, tc.batch_size) == (0.125, 2)
    check_learning_config(cfg)
    assert "extends" in cfg["models"]["wide"] and "dropout" not in cfg["models"]["mlp"]  # the raw mapping is left as it was


def test_an_extending_entry_has_the_run_hash_of_the_same_entry_written_out() -> None:
    """The expanded entry is what is hashed: rewriting a full entry as ``extends`` retrains nothing."""
    written = tiny_config()
    written["models"]["wide"] = {"arch": TEST_ARCH, "width": 16, "dropout": 0.5}
    short = _extending(dropout=0.5)
    short["models"]["mlp"].pop("training")
    assert resolve_run(short, "toy", "wide") == resolve_run(written, "toy", "wide")
    assert resolve_run(short, "toy", "wide")["hash"] != resolve_run(short, "toy", "mlp")["hash"]


def test_extends_chains_and_an_overlay_of_the_base_reaches_every_entry_extending_it() -> None:
    """Expanded after the config files are merged: the quick profile's size of ``gt`` is that of ``gt_regular`` too."""
    cfg = _extending()
    cfg["models"]["wider"] = {"extends": "wide", "dropout": 0.25}
    overlay = deep_merge(cfg, {"models": {"mlp": {"width": 4}}})
    models = models_of(overlay)
    assert models["wide"]["width"] == models["wider"]["width"] == 4 and models["wider"]["dropout"] == 0.25
    assert models_of(cfg)["wider"]["width"] == 16


@pytest.mark.parametrize(
    "extends, message",
    [
        ("mpl", "models.wide.extends: no model 'mpl' to extend (did you mean 'mlp'?); configured: ['mlp', 'wide']"),
        (["mlp"], "models.wide.extends: ['mlp'] is not a model name"),
        ("wide", "models.wide.extends: the entries extend each other in a cycle (wide -> wide)"),
    ],
    ids=["unknown base", "not a name", "itself"],
)
def test_a_bad_extends_is_named_with_the_fix(extends, message) -> None:
    cfg = tiny_config()
    cfg["models"]["wide"] = {"extends": extends}
    for check in (check_learning_config, lambda c: train_config(c, "toy", "wide")):
        with pytest.raises(ConfigError) as e:
            check(cfg)
        assert message in str(e.value)


def test_a_cycle_of_entries_is_named_whole() -> None:
    cfg = tiny_config()
    cfg["models"].update({"a": {"extends": "b"}, "b": {"extends": "c"}, "c": {"extends": "a", "width": 8}})
    with pytest.raises(ConfigError, match=r"models\.c\.extends: the entries extend each other in a cycle \(a -> b -> c -> a\)"):
        models_of(cfg)


def test_the_shipped_ablation_entries_hold_their_change_alone() -> None:
    """config/default.yaml's Galerkin ablations extend the paper network they change: each says what differs."""
    import yaml

    raw = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())["models"]
    models = models_of({"models": raw})
    assert raw["gt_regular"] == {"extends": "gt", "norm": "regular"}
    assert raw["st1d"]["extends"] == "ft1d" and models["st1d"]["attention"] == "softmax"
    for name, entry in raw.items():
        if "extends" in entry:
            base = models[entry["extends"]]
            assert all(entry[k] != base.get(k) for k in entry if k not in ("extends", "training")), name  # nothing restated
            assert all(v != (base.get("training") or {}).get(k) for k, v in (entry.get("training") or {}).items()), name
