"""Training and evaluation through the views: globals, padding masks, rollouts, extra evaluation sets, plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from opflow.config import resolve_run
from opflow.data.format import Variable, read_dataset, split_variable, write_dataset
from opflow.data.provenance import provenance_attrs
from opflow.data.torch_data import Normalizers, collate
from opflow.data.trajectory import rollout
from opflow.data.views import get_kind, kind_of, make_dataset
from opflow.data.views import register as register_view_kind
from opflow.data.views.grid import GridKind
from opflow.evaluate import evaluate
from opflow.models.base import OperatorModel, build_model, register
from opflow.models.hparams import Hparams
from opflow.schema import NonNegInt, PosInt
from opflow.train import build_for_data, forward, load_model, model_inputs, train

from learning_helpers import TEST_ARCH, grid_dataset, tiny_config, trajectory_dataset

GLOBALS_ARCH = "_test_globals_mlp"


class GlobalsMLPHparams(Hparams):
    width: PosInt = 16
    global_channels: NonNegInt = 0


@register(GLOBALS_ARCH)
class GlobalsMLP(OperatorModel):
    """A pointwise MLP that takes globals through ``forward(..., globals=)`` and remembers the last ones."""

    accepts_globals = True
    Hparams = GlobalsMLPHparams

    def __init__(self, in_channels: int, out_channels: int, coord_dim: int, *, width: int, global_channels: int) -> None:
        super().__init__(in_channels, out_channels, coord_dim)
        self.global_channels = global_channels
        self.net = nn.Sequential(nn.Linear(in_channels + coord_dim + global_channels, width), nn.GELU(), nn.Linear(width, out_channels))
        self.seen: list[torch.Tensor] = []

    def forward(self, coords, inputs, query=None, mask=None, grid_shape=None, globals=None):  # type: ignore[override]
        assert globals is not None and globals.shape == (coords.shape[0], self.global_channels)
        self.seen.append(globals.detach().clone())
        g = globals[:, None, :].expand(-1, coords.shape[1], -1)
        return self.net(torch.cat([coords, inputs, g], -1))


def series_file(path: Path, n: int = 24, n_test: int = 6, dt: float = 0.1, offset: int = 0, split: bool = True, grid: str = "uniform") -> Path:
    """y(t) = y0 cos(x(t)) + t, z(t) = x(t) + z0: needs both the input function and the globals."""
    t = np.arange(0.0, 2.0 + 1e-9, dt)
    if grid == "nonuniform":
        t = np.concatenate([t[: t.size // 2], t[t.size // 2 :: 2]])
    idx = np.arange(n) + offset
    amp, ph = 1 + (idx % 5) / 4.0, idx / 3.0
    x = amp[:, None] * np.sin(2 * t[None] + ph[:, None])
    y0, z0 = 1.0 + (idx % 3), (idx % 4) - 1.5
    v = {
        "t": Variable(("t",), t, {"role": "coordinate", "units": "1", "long_name": "time", "grid": grid, "dt": dt}),
        "sample_index": Variable(("sample",), np.arange(n)),
        "x": Variable(("sample", "t"), x, {"role": "input", "units": "1", "long_name": "x"}),
        "y0": Variable(("sample",), y0, {"role": "input", "units": "1", "long_name": "y0"}),
        "z0": Variable(("sample",), z0, {"role": "input", "units": "1", "long_name": "z0"}),
        "y": Variable(("sample", "t"), y0[:, None] * np.cos(x) + t, {"role": "output", "units": "1", "long_name": "y"}),
        "z": Variable(("sample", "t"), x + z0[:, None], {"role": "output", "units": "1", "long_name": "z"}),
    }
    if split:
        v["split"] = split_variable(np.array([0] * (n - n_test) + [1] * n_test, np.int8))
    return write_dataset(path, v, provenance_attrs("test-series", {"dt": dt, "offset": offset, "grid": grid}, 0))


def config(model: dict, epochs: int = 2, **ds) -> dict:
    return {
        "datasets": {"toy": {"source": "src", "train": 18, "test": 6, **ds}},
        "models": {"m": model},
        "training": {"epochs": epochs, "batch_size": 6, "lr": 1e-2, "seed": 0, "device": "cpu", "threads": 1, "eval_every": epochs},
    }


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("series")
    return {
        "dir": d,
        "main": series_file(d / "main.nc"),
        # the 6 test trajectories (indices 18..23) at another dt and on a non-uniform grid, no splits
        "fine": series_file(d / "fine.nc", n=6, dt=0.05, offset=18, split=False),
        "nonuniform": series_file(d / "nonu.nc", n=6, dt=0.1, offset=18, split=False, grid="nonuniform"),
    }


def test_globals_reach_the_model_normalised_on_the_training_split(series: dict, tmp_path: Path) -> None:
    run = resolve_run(config({"arch": GLOBALS_ARCH, "width": 8}, epochs=1, view={"kind": "series"}), "toy", "m", str(series["main"]))
    res = train(run, series["main"], tmp_path, progress=False)
    model, rec = load_model(res.model_path)
    assert rec["model_config"]["global_channels"] == 2 and run["model_config"].get("global_channels") is None  # set from the data
    assert rec["task"]["globals"] == ["y0", "z0"] and rec["task"]["in_channels"] == 1
    raw = read_dataset(series["main"])
    train_g = np.stack([raw["y0"][:18], raw["z0"][:18]], -1)
    g = rec["normalizers"]["globals"]
    torch.testing.assert_close(g["mean"], torch.tensor(train_g.mean(0), dtype=torch.float32))
    assert not np.allclose(g["mean"].numpy(), np.stack([raw["y0"], raw["z0"]], -1).mean(0))  # the test split is not used
    ds = make_dataset(series["main"], "test", None, {"kind": "series"})
    batch = collate([ds[0], ds[5]])
    model.seen.clear()
    with torch.no_grad():
        forward(model, batch, Normalizers.from_state(rec["normalizers"]))
    expect = (batch["globals"] - g["mean"]) / g["scale"]
    torch.testing.assert_close(model.seen[-1], expect)


def test_models_without_globals_get_them_broadcast_as_channels(series: dict) -> None:
    ds = make_dataset(series["main"], "train", None, {"kind": "series"})
    model, cfg, shape = build_for_data({"arch": TEST_ARCH, "width": 8}, ds, "models.m")
    assert shape == {"in_channels": 3, "out_channels": 2, "coord_dim": 1} and "global_channels" not in cfg
    norms = ds.fit_normalizers("unit_gaussian", "unit_gaussian")
    batch = collate([ds[1], ds[2]])
    x, extra = model_inputs(model, batch, norms)
    assert extra == {} and x.shape == (2, batch["inputs"].shape[1], 3)
    g = norms.globals.encode(batch["globals"][:, None, :])[:, 0]
    torch.testing.assert_close(x[:, 7, 1:], g)  # the same normalised globals at every point
    torch.testing.assert_close(x[:, 0, 1:], g)
    with pytest.raises(Exception, match="global_channels: 5 but the data have 2"):
        build_for_data({"arch": GLOBALS_ARCH, "global_channels": 5}, ds, "models.m")


def test_series_are_evaluated_on_every_extra_set(series: dict, tmp_path: Path) -> None:
    run = resolve_run(config({"arch": TEST_ARCH, "width": 16}, epochs=30, view={"kind": "series"}), "toy", "m", str(series["main"]))
    train(run, series["main"], tmp_path / "m", progress=False)
    sets = {"dt0.05": series["fine"], "nonuniform": series["nonuniform"], "same": series["main"]}
    r = evaluate(tmp_path / "m" / "model.pt", series["main"], tmp_path / "r.json", eval_sets=sets, png=tmp_path / "r.png",
                 config={"batch_size": 4, "warmup_batches": 0}, threads=1)
    assert set(r["eval_sets"]) == {"dt0.05", "nonuniform", "same"}
    fine, nonu, same = (r["eval_sets"][k] for k in ("dt0.05", "nonuniform", "same"))
    assert fine["n_samples"] == 6 and fine["split"] == "all" and fine["discretisation"] == "uniform dt=0.05 (41 points)"
    assert nonu["discretisation"] == "nonuniform dt=0.1 (16 points)" and same["split"] == "test"
    for k in ("rel_l2_mean", "rel_l2_median", "rel_l2_max"):
        assert same[k] == pytest.approx(r["metrics"][k], rel=1e-12)  # the main test split, read again
    # recompute the fine-grid errors by hand: decode(model(encode)) on the 41-point grid
    model, rec = load_model(tmp_path / "m" / "model.pt")
    norms = Normalizers.from_state(rec["normalizers"])
    ds = make_dataset(series["fine"], None, None, {"kind": "series"})
    b = collate([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        pred = norms.outputs.decode(forward(model, b, norms))
    err = (torch.linalg.vector_norm(pred - b["target"], dim=(1, 2)) / torch.linalg.vector_norm(b["target"], dim=(1, 2))).numpy()
    assert fine["rel_l2_median"] == pytest.approx(np.median(err), rel=1e-5)
    assert fine["rel_l2_max"] == pytest.approx(err.max(), rel=1e-5)
    assert r["metrics"]["rel_l2_mean"] < 0.3  # it learned something: measured 0.226 (the training mean gives ~1)
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk["eval_sets"]["dt0.05"]["rel_l2_max"] == pytest.approx(fine["rel_l2_max"])


def _models_for_masks() -> list[tuple[str, dict]]:
    return [
        ("ono", {"arch": "ono", "width": 16, "n_layers": 2, "ortho_dim": 4, "n_heads": 2}),
        ("ono_nystrom", {"arch": "ono", "width": 16, "n_layers": 1, "ortho_dim": 4, "n_heads": 2, "attention": "nystrom", "num_landmarks": 4}),
        ("linear_transformer", {"arch": "linear_transformer", "width": 16, "n_layers": 2, "n_heads": 2}),
        ("tno", {"arch": "tno", "width": 16, "n_layers": 2, "n_heads": 2, "ffn_dim": 16, "global_channels": 3, "globals_mode": "token"}),
    ]


@pytest.mark.parametrize(("name", "cfg"), _models_for_masks(), ids=[n for n, _ in _models_for_masks()])
def test_masked_models_ignore_padding(name: str, cfg: dict) -> None:
    """Changing the padded points changes nothing at the real points, and a padded sample's
    outputs equal those of the same sample alone (models in eval mode)."""
    torch.manual_seed(0)
    model = build_model(cfg, 1, 1, 2)
    counts = [7, 4, 6]
    n = max(counts)
    coords, inputs = torch.rand(3, n, 2), torch.randn(3, n, 1)
    mask = torch.arange(n)[None] < torch.tensor(counts)[:, None]
    kw = {"globals": torch.randn(3, 3)} if name == "tno" else {}
    model.train()
    model(coords, inputs, mask=mask, **kw)  # ONO: initialise the covariance EMA
    model.eval()
    with torch.no_grad():
        out = model(coords, inputs, mask=mask, **kw)
        junk_c, junk_x = coords.clone(), inputs.clone()
        junk_c[~mask] = 50.0
        junk_x[~mask] = -1e3
        out2 = model(junk_c, junk_x, mask=mask, **kw)
        torch.testing.assert_close(out2[mask], out[mask], rtol=1e-5, atol=1e-6)
        for b, c in enumerate(counts):
            alone = model(coords[b : b + 1, :c], inputs[b : b + 1, :c], **({"globals": kw["globals"][b : b + 1]} if kw else {}))
            torch.testing.assert_close(out[b, :c], alone[0], rtol=1e-4, atol=1e-5)


def test_window_training_and_rollout_evaluation(tmp_path: Path) -> None:
    f = trajectory_dataset(tmp_path / "w.nc")
    view = {"kind": "window", "history": 2, "frames": [1, 8], "train_frames": [3, 6]}
    cfg = config({"arch": TEST_ARCH, "width": 16}, epochs=3, view=view)
    cfg["datasets"]["toy"].update(train=6, test=4)
    run = resolve_run(cfg, "toy", "m", str(f))
    assert run["view"] == view
    res = train(run, f, tmp_path / "m", progress=False)
    model, rec = load_model(res.model_path)
    assert rec["task"]["in_channels"] == 2 and rec["view"] == view
    r = evaluate(res.model_path, f, tmp_path / "r.json", png=tmp_path / "r.png", config={"batch_size": 3, "warmup_batches": 0}, threads=1)
    m = r["metrics"]
    assert [p["frame"] for p in m["per_step"]] == [3, 4, 5, 6, 7, 8] and [p["t"] for p in m["per_step"]] == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert m["frame_groups"]["seen"]["frames"] == [3, 6] and m["frame_groups"]["unseen"]["frames"] == [7, 8]
    assert m["teacher_forced"]["n_pairs"] == 4 * 6 and r["n_test"] == 4  # every predicted frame, also those not trained on
    # the full-trajectory error equals a rollout by hand
    norms = Normalizers.from_state(rec["normalizers"])
    ds = make_dataset(f, "test", None, view, purpose="rollout")
    b = collate([ds[i] for i in range(4)])
    with torch.no_grad():
        pred = rollout(lambda bb: norms.outputs.decode(forward(model, bb, norms)), b, 6, 1)
    full = torch.linalg.vector_norm(pred - b["target"], dim=(1, 2)) / torch.linalg.vector_norm(b["target"], dim=(1, 2))
    assert m["rel_l2_mean"] == pytest.approx(float(full.mean()), rel=1e-5)
    step0 = torch.linalg.vector_norm(pred[..., 0] - b["target"][..., 0], dim=1) / torch.linalg.vector_norm(b["target"][..., 0], dim=1)
    assert m["per_step"][0]["rel_l2_mean"] == pytest.approx(float(step0.mean()), rel=1e-5)
    assert (tmp_path / "r.png").stat().st_size > 10_000


def ring_mesh_file(path: Path, n: int = 9) -> Path:
    """Annuli of 4-node quadrilaterals, 3 rings of n_theta = 8..12 cells: ragged meshes (padded)."""
    n_th = [8 + i % 5 for i in range(n)]
    nodes_max, cells_max = 4 * max(n_th), 3 * max(n_th)
    arr = {k: np.zeros((n, nodes_max)) for k in ("node_x", "node_y", "stress")}
    cell = -np.ones((n, cells_max, 4), np.int32)
    for i, m in enumerate(n_th):
        r, th = np.meshgrid(np.linspace(0.2, 0.5, 4), np.arange(m) * 2 * np.pi / m, indexing="ij")  # (4, m) node rings
        arr["node_x"][i, : 4 * m] = (0.5 + r * np.cos(th)).ravel()
        arr["node_y"][i, : 4 * m] = (0.5 + r * np.sin(th)).ravel()
        arr["stress"][i, : 4 * m] = (100 * (1 + 0.2 * i) * np.cos(2 * th) / r).ravel()
        a = np.arange(m)
        c = [[k * m + a, k * m + (a + 1) % m, (k + 1) * m + (a + 1) % m, (k + 1) * m + a] for k in range(3)]
        cell[i, : 3 * m] = np.concatenate([np.stack(q, -1) for q in c])
    v = {
        "sample_index": Variable(("sample",), np.arange(n)),
        "split": split_variable(np.array([0] * (n - 3) + [1] * 3, np.int8)),
        "node_x": Variable(("sample", "node"), arr["node_x"], {"role": "coordinate", "units": "1", "long_name": "x"}),
        "node_y": Variable(("sample", "node"), arr["node_y"], {"role": "coordinate", "units": "1", "long_name": "y"}),
        "node_count": Variable(("sample",), np.array([4 * m for m in n_th], np.int32), {"role": "auxiliary"}),
        "cell": Variable(("sample", "cell", "corner"), cell, {"role": "auxiliary"}),
        "cell_count": Variable(("sample",), np.array([3 * m for m in n_th], np.int32), {"role": "auxiliary"}),
        "stress": Variable(("sample", "node"), arr["stress"], {"role": "output", "units": "1", "long_name": "stress"}),
    }
    return write_dataset(path, v, provenance_attrs("test-ring", {}, 0))


def test_mesh_training_evaluation_and_tripcolor_plot(tmp_path: Path) -> None:
    f = ring_mesh_file(tmp_path / "mesh.nc")
    cfg = config({"arch": "ono", "width": 16, "n_layers": 1, "ortho_dim": 4, "n_heads": 2}, epochs=2,
                 task={"inputs": [], "outputs": ["stress"]}, view={"kind": "mesh"})
    cfg["datasets"]["toy"].update(train=6, test=3)
    run = resolve_run(cfg, "toy", "m", str(f))
    res = train(run, f, tmp_path / "m", progress=False)
    r = evaluate(res.model_path, f, tmp_path / "r.json", png=tmp_path / "r.png", config={"batch_size": 2, "warmup_batches": 0}, threads=1)
    assert r["view"] == {"kind": "mesh"} and r["n_test"] == 3 and np.isfinite(r["metrics"]["rel_l2_mean"])
    assert r["resolution"].endswith("points") and (tmp_path / "r.png").stat().st_size > 10_000


class SpyGridKind(GridKind):
    """The grid kind, recording what the evaluator asks of it and adding a statistic of its own."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def collate(self, items):  # type: ignore[override]
        self.calls.append(("collate", len(items)))
        return super().collate(items)

    def metrics(self, e2, r2, dataset):  # type: ignore[override]
        self.calls.append(("metrics", e2.shape))
        return {"spy_samples": int(e2.shape[0])}

    def plot(self, samples, dataset, png, *, title=""):  # type: ignore[override]
        self.calls.append(("plot", [s["index"] for s in samples]))
        assert all(s["label"].startswith("sample ") and s["pred"].shape == s["target"].shape for s in samples)
        super().plot(samples, dataset, png, title=title)


def test_evaluation_asks_the_view_kind_for_its_statistics_and_plot(tmp_path: Path) -> None:
    f = grid_dataset(tmp_path / "g.nc", n_train=6, n_test=3, s=8)
    cfg = tiny_config(epochs=1)
    cfg["datasets"]["toy"].update(train=6, test=3, resolution=8)
    res = train(resolve_run(cfg, "toy", "mlp", str(f)), f, tmp_path / "m", progress=False)
    original, spy = get_kind("grid"), SpyGridKind()
    register_view_kind(spy, replace=True)
    try:
        r = evaluate(res.model_path, f, tmp_path / "r.json", zero_shot=[f], png=tmp_path / "r.png",
                     config={"batch_size": 2, "warmup_batches": 0, "n_plot_samples": 2}, threads=1)
        assert kind_of(make_dataset(f, "test")) is spy
    finally:
        register_view_kind(original, replace=True)
    assert kind_of(make_dataset(f, "test")) is original
    # the kind's statistics land in the main metrics and in every extra set; its plot gets the samples
    assert r["metrics"]["spy_samples"] == 3 and r["zero_shot"]["8"]["spy_samples"] == 3
    assert [c for c in spy.calls if c[0] == "metrics"] == [("metrics", (3, 1)), ("metrics", (3, 1))]
    plot_calls = [c for c in spy.calls if c[0] == "plot"]
    assert len(plot_calls) == 1 and len(plot_calls[0][1]) == 2 and set(plot_calls[0][1]) <= {0, 1, 2}
    assert spy.calls.count(("collate", 1)) == 2  # one item per plotted sample
    assert (tmp_path / "r.png").stat().st_size > 10_000
