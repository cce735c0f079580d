"""Model / data compatibility and impossible values, refused when the config loads (opflow.compat).

Every (dataset, model) pair a run asks for is checked against what the dataset view will look like,
known from the config alone (pipeline.config.view_shape), before any data are generated: the
message names the pair, the reason and the fix. The shipped profiles pass for all their targets.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import numpy as np
import pytest
import yaml

from opflow.compat import DataShape, check_pair, pairs_of_targets, spectral_mode_caps
from opflow.config import deep_merge, load_config_files
from opflow.data.errors import ConfigError, DatasetError
from opflow.models.hparams import ARCHITECTURES, check_hparams
from pipeline.config import check_config, view_shape

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = [str(ROOT / "config/default.yaml")]
QUICK = [*DEFAULT, str(ROOT / "config/quick.yaml")]


@functools.cache
def _config(files: tuple[str, ...]) -> dict:
    return load_config_files(list(files))


def quick(**override: dict) -> dict:
    """The quick profile with ``override`` deep-merged over it."""
    return deep_merge(copy.deepcopy(_config(tuple(QUICK))), override)


def refused(config: dict, target: str) -> str:
    """The message of the ConfigError that loading ``config`` for ``target`` raises."""
    with pytest.raises(ConfigError) as e:
        check_config(config, targets=[target])
    return str(e.value)


# --------------------------------------------------------------------------- the shipped profiles


@pytest.mark.parametrize("files", [DEFAULT, QUICK], ids=["default", "quick"])
def test_the_shipped_profiles_load_for_all_their_targets(files: list[str]) -> None:
    wf = check_config(_config(tuple(files)))  # checks the profile's own targets
    assert len(pairs_of_targets(wf.targets, wf.datasets, wf.models)) == len(wf.targets)


#: published pairs (config/reference.yaml) whose configured model cannot train on the configured data
CANNOT_TRAIN = {("elasticity972", "gt"): "needs a regular grid"}  # GNOT's GK-Transformer ran on the point cloud; our gt is grid-only


def test_every_published_pair_of_the_paper_profile_fits_its_data_but_the_declared_ones() -> None:
    """Not only the profile's targets: each (dataset, model) with a published number can be asked for."""
    from benchmarks.protocol_cost import published_protocols
    from pipeline.config import check_targets

    cfg = _config(tuple(DEFAULT))
    wf = check_config(cfg)
    refused = {}
    for p in published_protocols(cfg, ROOT / "config/reference.yaml"):
        try:
            check_targets(wf, [f"results/{p['dataset']}_{p['model']}.json"])
        except ConfigError as e:
            refused[(p["dataset"], p["model"])] = str(e)
    assert set(refused) == set(CANNOT_TRAIN), refused
    assert all(CANNOT_TRAIN[pair] in why for pair, why in refused.items())


# --------------------------------------------------------------------------- section 1: model / data mismatches


@pytest.mark.parametrize("model", ["fno", "vitno", "gt"])
def test_grid_models_on_a_point_cloud_are_refused_with_the_point_cloud_models_named(model: str) -> None:
    msg = refused(quick(), f"quick/results/elasticity_{model}.json")
    assert msg.startswith(f"elasticity_{model}: models.{model} ({model}) on datasets.elasticity: {model} needs a regular grid")
    assert "a 2-D point cloud (view mesh)" in msg and "train a point-cloud model on it (deeponet, gnot, linear_transformer, mionet, ono, tno)" in msg


def test_config_targets_are_checked_at_load_and_paths_relative_to_the_root_too() -> None:
    cfg = quick(targets=["results/darcy_ono.json", "results/elasticity_fno.json"])
    with pytest.raises(ConfigError, match=r"^elasticity_fno: models.fno \(fno\) on datasets.elasticity: fno needs a regular grid"):
        check_config(cfg)


def test_patches_that_do_not_divide_the_grid_are_refused_with_valid_sides_and_divisors() -> None:
    msg = refused(quick(models={"vitno": {"patches_per_side": 5}}), "quick/results/darcy_lognormal416_vitno.json")
    assert msg == (
        "darcy_lognormal416_vitno: models.vitno (vitno) on datasets.darcy_lognormal416: patches_per_side 5 does not divide the 64 points "
        "of grid axis 0 (a patch has n / 5 points); use a grid side that is a multiple of 5 (e.g. 60 or 65) or patches_per_side among "
        "[1, 2, 4, 8, 16, 32, 64]"
    )


def test_a_416_set_generated_at_63_does_not_fit_four_patches() -> None:
    cfg = quick(sources={"darcy_lognormal416": {"params": {"resolution": 63}}})
    msg = refused(cfg, "quick/results/darcy_lognormal416_fano.json")
    assert msg.startswith("darcy_lognormal416_fano: models.fano (fano) on datasets.darcy_lognormal416: patches_per_side 4 does not divide the 63 points")
    assert "multiple of 4 (e.g. 60 or 64)" in msg and "[1, 3, 7, 9, 21, 63]" in msg


def test_fano_on_the_201_points_of_a_series() -> None:
    msg = refused(quick(), "quick/results/lorenz63_fano.json")
    assert msg.startswith("lorenz63_fano: models.fano (fano) on datasets.lorenz63: patches_per_side 4 does not divide the 201 points")


def test_zero_shot_grids_and_eval_sets_are_checked_for_failures() -> None:
    msg = refused(quick(), "quick/results/darcy_lognormal64_vitno.json")  # trains at 64, evaluated zero-shot at 22
    assert msg.startswith("darcy_lognormal64_vitno: models.vitno (vitno) on datasets.darcy_lognormal64 at resolution 22: patches_per_side 4")


@pytest.mark.parametrize(
    "training, reason",
    [
        ({"grad_weight": 0.1, "grad_form": "h1"}, "training.grad_weight: 0.1 needs derivatives on a grid"),
        ({"loss": "rel_h1"}, "training.loss: rel_h1 needs derivatives on a grid"),
    ],
)
def test_derivative_losses_on_a_mesh_are_refused(training: dict, reason: str) -> None:
    msg = refused(quick(datasets={"elasticity": {"training": training}}), "quick/results/elasticity_ono.json")
    assert msg == (
        f"elasticity_ono: models.ono (ono) on datasets.elasticity: {reason}, but it is a 2-D point cloud (view mesh); "
        "set loss: rel_l2 (or mse) and grad_weight: 0 for this dataset"
    )


def test_unrolled_training_off_a_window_view_is_refused_at_load() -> None:
    """training.unroll trains whole trajectories: a grid dataset is refused before any data is made."""
    msg = refused(quick(datasets={"darcy": {"training": {"unroll": "truth"}}}), "quick/results/darcy_ono.json")
    assert msg == (
        "darcy_ono: models.ono (ono) on datasets.darcy: training.unroll: truth predicts whole trajectories frame by frame, but it is "
        "a 2-D grid of 43 x 43 points (view grid); unrolled training needs a window view (view: {kind: window, ...}): set "
        "training.unroll: none for this dataset"
    )
    check_config(quick(datasets={"ns_v1e-5": {"training": {"unroll": "prediction"}}}), targets=["quick/results/ns_v1e-5_fno.json"])


@pytest.mark.parametrize("dataset, view", [("elasticity_multi", "[[2, 1]]"), ("elasticity", "none")])
def test_a_hand_set_gnot_input_sets_must_be_the_views(dataset: str, view: str) -> None:
    msg = refused(quick(models={"gnot": {"input_sets": [[2, 3]]}}), f"quick/results/{dataset}_gnot.json")
    assert msg == (
        f"{dataset}_gnot: models.gnot (gnot) on datasets.{dataset}: input_sets [[2, 3]] but the view's input sets are {view} "
        "([coordinate dim, channels] each); remove input_sets from the model (it is set from the data)"
    )
    check_config(quick(models={"gnot": {"input_sets": [[2, 1]]}}), targets=["quick/results/elasticity_multi_gnot.json"])  # the view's own: harmless


def test_input_sets_need_a_model_that_takes_them() -> None:
    msg = refused(quick(), "quick/results/elasticity_multi_ono.json")
    assert "ono takes no input functions on their own point sets, but the view declares 1 (view.input_sets); use a model that does (gnot)" in msg


# --------------------------------------------------------------------------- section 2: values that cannot be meant


def test_fno_modes_above_the_training_grids_nyquist() -> None:
    msg = refused(quick(models={"fno": {"modes": 1000, "padding": 0}}), "quick/results/darcy_fno.json")
    assert msg == (
        "darcy_fno: models.fno (fno) on datasets.darcy: modes 1000 exceeds the Fourier modes of the training grid 43 x 43 ([21, 22] per axis: "
        "n // 2, n // 2 + 1 on the last), so the extra weights would never be used; set modes <= 21"
    )
    check_config(quick(models={"fno": {"modes": [21, 22], "padding": 0}}), targets=["quick/results/darcy_fno.json"])


def test_fano_qkv_modes_above_the_patchs() -> None:
    msg = refused(quick(models={"fano": {"qkv_modes": 12}}), "quick/results/darcy_lognormal416_fano.json")
    assert "qkv_modes 12 exceeds the Fourier modes of a patch 16 x 16 ([8, 9] per axis" in msg and msg.endswith("set qkv_modes <= 8")


def test_vitno_smoothing_modes_above_the_grids() -> None:
    msg = refused(quick(models={"vitno": {"smoothing_modes": 1000}}), "quick/results/darcy_lognormal416_vitno.json")
    assert "smoothing_modes 1000 exceeds the Fourier modes of the training grid 64 x 64" in msg and msg.endswith("set smoothing_modes <= 32")


@pytest.mark.parametrize("text", ["lr: .inf", "lr: .nan", "weight_decay: .inf"])
def test_non_finite_numbers_are_refused_naming_the_key(text: str) -> None:
    key = text.split(":")[0]
    with pytest.raises(ConfigError, match=rf"^training\.{key}: (inf must be a finite number|nan must be > 0|nan must be a finite number)$"):
        check_config(quick(training=yaml.safe_load(text)), targets=[])


def test_h1_coeff_needs_a_darcy_coefficient_as_first_input() -> None:
    cfg = quick(models={"gt1d": {"training": {"grad_form": "h1_coeff"}}})
    msg = refused(cfg, "quick/results/burgers512_gt1d.json")
    assert msg == (
        "burgers512_gt1d: models.gt1d (gt) on datasets.burgers512: grad_form h1_coeff weights the H1 term by the Darcy coefficient "
        "(first input, one of ['coeff']), but the first input is 'u0'; use grad_form: h1 (unweighted)"
    )
    cfg = quick(models={"gt": {"training": {"grad_weight": 0.7, "grad_form": "h1_coeff"}}})
    check_config(cfg, targets=["quick/results/darcy141_gt.json"])  # Darcy: its first input is the coefficient


def test_nan_in_a_training_file_is_refused_when_read_naming_file_variable_count_and_first_sample(tmp_path: Path) -> None:
    from learning_helpers import grid_dataset
    from netCDF4 import Dataset as NC

    from opflow.data.views import make_dataset

    path = grid_dataset(tmp_path / "d.nc", n_train=6, n_test=2, s=8)
    with NC(path, "a") as nc:
        coeff = nc.variables["coeff"][:]
        coeff[3, 2, 1] = np.nan
        coeff[4, 0, :2] = np.inf
        nc.variables["coeff"][:] = coeff
    with pytest.raises(DatasetError) as e:
        make_dataset(path, "train")
    assert str(e.value) == (
        f"{path}: variable 'coeff' has 3 non-finite value(s) in 2 of 6 samples of the train split, the first at position 3, "
        "global sample index 3; the data are unusable: regenerate the file (`opflow validate` lists every such sample)"
    )
    assert len(make_dataset(path, "test")) == 2  # the clean split still reads


# --------------------------------------------------------------------------- the pieces


def test_every_architecture_declares_its_needs_beside_its_hyperparameters() -> None:
    grid_only = sorted(a for a, (hp, _) in ARCHITECTURES.items() if hp.needs.grid)
    assert grid_only == ["fano", "fno", "ft", "gt", "vitno"]
    assert [a for a, (hp, _) in ARCHITECTURES.items() if hp.needs.input_sets] == ["gnot"]


def test_a_view_shape_is_known_from_the_config_alone() -> None:
    from pipeline.config import parse_workflow

    wf = parse_workflow(quick())
    assert view_shape(wf, "darcy").describe() == "a 2-D grid of 43 x 43 points (view grid)"
    assert view_shape(wf, "darcy43", resolution=85, training=False).grid == (85, 85)
    assert view_shape(wf, "kolmogorov").describe() == "a 2-D grid of 32 x 32 points (view one_step)"
    assert view_shape(wf, "lorenz63").describe() == "a 1-D grid of 201 points (view series)"
    el = view_shape(wf, "elasticity")
    assert (el.layout, el.coord_dim, el.n_points) == ("points", 2, None)  # node count varies per sample: not known from the config
    assert view_shape(wf, "elasticity_multi").input_sets == ((2, 1),)
    inv = view_shape(wf, "darcy_inverse141_eps0")
    assert (inv.grid, inv.targets_on_grid, inv.first_input) == ((141, 141), False, "pressure")


def test_check_pair_refuses_the_trainers_own_view_of_the_data_the_same_way() -> None:
    shape = DataShape(label="datasets.d (file d.nc)", view="mesh", layout="points", coord_dim=2, n_points=50)
    with pytest.raises(ConfigError, match=r"^d_f: models.f \(fno\) on datasets.d \(file d.nc\): fno needs a regular grid, but it is a 2-D point cloud \(view mesh, 50 points\)"):
        check_pair("d", "f", "fno", check_hparams("fno", {}), None, [shape])


def test_spectral_mode_caps_are_the_spectral_layers() -> None:
    from opflow.models.layers import SpectralConv

    conv = SpectralConv(1, 1, (100, 100))
    for grid in [(43, 43), (16, 9), (7, 64)]:
        assert conv.effective_modes(grid) == spectral_mode_caps(grid)
