"""benchmarks/models.py: the exponent fit, the choice of each model's dataset, the peak-memory
method, and a smoke run's result layout (no timing is asserted)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.models import FAMILIES, PeakMemory, family_of, fit_exponent, main, merge_update, natural_dataset, predict_next, ratios
from opflow.config import load_config_files

ROOT = Path(__file__).resolve().parents[2]


def test_fit_exponent_recovers_a_power_law():
    pts = [43**2, 61**2, 85**2]
    fit = fit_exponent(pts, [2e-6 * n**1.5 for n in pts])
    assert fit["exponent"] == pytest.approx(1.5, rel=1e-12)
    assert fit["prefactor"] == pytest.approx(2e-6, rel=1e-9)
    assert fit_exponent([100, 400], [3.0, 12.0])["exponent"] == pytest.approx(1.0, rel=1e-12)


def test_fit_exponent_is_least_squares_in_log_log():
    # sizes equally spaced in log: a factor at the middle one moves the intercept, not the slope
    pts = [1000, 2000, 4000]
    vals = [n**2 for n in pts]
    vals[1] *= 1.7
    fit = fit_exponent(pts, vals)
    assert fit["exponent"] == pytest.approx(2.0, rel=1e-12)
    assert math.log(fit["prefactor"]) == pytest.approx(math.log(1.7) / 3, rel=1e-9)


@pytest.mark.parametrize(("pts", "vals", "msg"), [([10, 10], [1.0, 2.0], "two distinct"), ([10, 20], [1.0, 0.0], "positive"), ([10], [1.0, 2.0], "values")])
def test_fit_exponent_rejects_what_it_cannot_fit(pts, vals, msg):
    with pytest.raises(ValueError, match=msg):
        fit_exponent(pts, vals)


def test_predict_next_extrapolates_with_the_fitted_exponent_at_least_one():
    assert predict_next([100, 400], [1.0, 16.0], 800) == pytest.approx(64.0)  # exponent 2
    assert predict_next([100, 400], [1.0, 2.0], 800) == pytest.approx(4.0)  # exponent 0.5 -> 1
    assert predict_next([100], [3.0], 300) == pytest.approx(9.0)  # one size: linear


def test_each_model_of_the_paper_config_gets_its_own_dataset_family():
    config = load_config_files([str(ROOT / "config/default.yaml")])
    expect = {
        "ono": ("darcy", "darcy2d"),  # first target results/darcy_ono.json
        "tno": ("lorenz63", "lorenz63"),
        "gt": ("darcy141", "darcy2d"),
        "fno": ("darcy", "darcy2d"),  # NATURAL_DATASETS
        "gt_inverse": ("darcy_inverse141_eps0", "darcy_inverse2d"),
        "gt1d": ("burgers", "burgers1d"),
        "vitno": ("darcy_lognormal416", "darcy_continuum2d"),  # sizes multiples of its 13 patches per side
    }
    for model, (ds, fam) in expect.items():
        got, how = natural_dataset(config, model)
        assert (got, family_of(config, ds)) == (ds, fam), (model, how)
    assert natural_dataset(config, "ono")[1] == "targets: results/darcy_ono.json"
    # a model nobody mapped falls back to darcy; without a darcy dataset there is nothing to run it on
    assert natural_dataset(config, "newmodel") == ("darcy", "default (darcy)")
    no_darcy = {**config, "datasets": {k: v for k, v in config["datasets"].items() if k != "darcy"}}
    assert natural_dataset(no_darcy, "newmodel")[0] is None
    assert {FAMILIES[f].coord_dim for f in ("darcy2d", "burgers1d", "lorenz63")} == {1, 2}
    assert all(s % 13 == 0 for s in FAMILIES["darcy_continuum2d"].sizes)


def test_a_model_is_benchmarked_on_the_kind_of_data_its_published_numbers_were_measured_on():
    """The family that benchmarks/models.py runs a model on is the family of a dataset that
    config/reference.yaml pairs the model with: fno1d on the 1D Burgers grids, not on a Darcy grid
    (the first GPU run of the benchmark measured the FNO1d variants on 85^2 grids)."""
    import yaml

    config = load_config_files([str(ROOT / "config/default.yaml")])
    entries = yaml.safe_load((ROOT / "config/reference.yaml").read_text())["entries"]
    published: dict[str, set[str]] = {}
    for key in entries:
        dataset, model = key.split("/")[:2]
        if dataset in config["datasets"] and model in config["models"]:
            published.setdefault(model, set()).add(family_of(config, dataset))
    assert {"fno1d", "fno1d_fnocode", "fno1d_cao", "ono", "gt1d"} <= set(published)
    for model, families in published.items():
        dataset, how = natural_dataset(config, model)
        assert family_of(config, dataset) in families, (model, dataset, how, families)


def test_peak_memory_sees_a_transient_allocation():
    torch = pytest.importorskip("torch")
    mem = PeakMemory("cpu")
    if not mem.kind.startswith("VmHWM"):
        pytest.skip("peak RSS cannot be reset on this OS")
    mem.start()
    x = torch.ones(25_000_000, dtype=torch.float64)  # 200 MB, touched
    del x
    peak = mem.peak()
    assert 190e6 < peak < 260e6
    mem.start()  # the next phase starts from the current RSS, not the earlier peak
    assert mem.peak() < 20e6


def test_smoke_run_writes_every_requested_model(tmp_path):
    out = tmp_path / "models.json"
    assert main(["--smoke", "--models", "deeponet,tno", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["smoke"] and res["torch_threads"] == 1
    assert set(res["models"]) == {"deeponet", "tno"}
    for name, fam in (("deeponet", "darcy2d"), ("tno", "lorenz63")):
        m = res["models"][name]
        assert m["family"] == fam and [r["size"] for r in m["sizes"]] == list(FAMILIES[fam].smoke_sizes)
        for r in m["sizes"]:
            assert r["batch"] <= 2 and r["train"]["samples_per_s"] > 0 and r["inference"]["samples_per_s"] > 0
        assert {"train_time", "inference_time"} <= set(m["exponent"])
    assert res["models"]["tno"]["batch_paper"] == 32  # quick.yaml's lorenz63 training batch


def test_the_file_holds_every_finished_model_while_the_run_goes_on(tmp_path, monkeypatch):
    """A run stopped by a time-out (a GPU lease's command) keeps the models it finished: the file is rewritten,
    marked partial, after every model, and the last write is the whole result, unmarked."""
    import benchmarks.models as bm

    out = tmp_path / "models.json"
    writes: list[dict] = []
    real = bm.write_json_atomic
    monkeypatch.setattr(bm, "write_json_atomic", lambda path, data: (writes.append(json.loads(json.dumps(data))), real(path, data)))
    assert main(["--smoke", "--models", "deeponet,tno", "--out", str(out)]) == 0
    assert [(w.get("partial", False), list(w["models"])) for w in writes] == [
        (True, ["deeponet"]), (True, ["deeponet", "tno"]), (False, ["deeponet", "tno"])]
    assert "partial" not in json.loads(out.read_text())


def _model(family: str, sizes_rates: dict[int, float]) -> dict:
    rows = [{"size": s, "train": {"samples_per_s": r}, "inference": {"samples_per_s": 2 * r}} for s, r in sizes_rates.items()]
    return {"family": family, "sizes": rows}


def test_ratios_compare_same_family_at_shared_sizes_only():
    models = {"ono": _model("darcy2d", {43: 0.5, 85: 0.1}), "fno": _model("darcy2d", {43: 5.0, 211: 1.0}), "tno": _model("lorenz63", {201: 9.0})}
    assert ratios(models, "ono") == {"fno": {"43": {"train": 10.0, "inference": 10.0}}}
    assert ratios({"fno": models["fno"]}, "ono") == {}


def test_update_replaces_only_the_remeasured_models_and_records_the_later_run():
    run = {"created": "t", "configfiles": ["c"], "torch_threads": 1, "settings": {}, "wall_s": 1.0, "machine": {}, "families": {"a": 1}}
    old = {**run, "models": {"ono": {"v": 1}, "gt": {"v": 1}}, "skipped_models": {"fano": "no family"}}
    new = {**run, "created": "t2", "models": {"gt": {"v": 2}, "fano": {"v": 2}}, "skipped_models": {}, "families": {"b": 2}}
    merged = merge_update(old, new)
    assert merged["models"] == {"ono": {"v": 1}, "gt": {"v": 2}, "fano": {"v": 2}}
    assert merged["skipped_models"] == {} and merged["created"] == "t" and merged["families"] == {"a": 1, "b": 2}
    assert merged["updates"] == [{"models": ["fano", "gt"], **{k: new[k] for k in ("created", "configfiles", "torch_threads", "settings", "wall_s", "machine")}}]
