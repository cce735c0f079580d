"""Trajectory views: window pairs (teacher forcing), rollouts, one-step maps, their normalisers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from opflow.data.errors import ConfigError, DatasetError
from opflow.data.format import Variable, split_variable, write_dataset
from opflow.data.normalize import make_normalizer
from opflow.data.provenance import provenance_attrs
from opflow.data.torch_data import collate
from opflow.data.trajectory import OneStepDataset, RolloutDataset, WindowDataset, rollout
from opflow.data.view_spec import parse_view
from opflow.data.views import get_kind, kind_of, make_dataset

S, T, NX, NY = 5, 8, 4, 3  # 3 train + 2 test trajectories of 8 frames on a 4 x 3 periodic grid


def code(s, t, ix, iy):
    """The value stored at (sample s, frame t, x ix, y iy): every index readable from it."""
    return 1000.0 * s + 10.0 * t + 0.1 * (ix * NY + iy)


@pytest.fixture(scope="module")
def traj(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s, t, ix, iy = np.meshgrid(np.arange(S), np.arange(T), np.arange(NX), np.arange(NY), indexing="ij")
    w = code(s, t, ix, iy).astype(np.float32)
    grid = {"units": "1", "grid_type": "periodic", "role": "coordinate"}
    v = {
        "t": Variable(("t",), np.arange(T, dtype=np.float64), {"units": "s", "role": "coordinate"}),
        "x": Variable(("x",), np.arange(NX) / NX, grid),
        "y": Variable(("y",), np.arange(NY) / NY, grid),
        "sample_index": Variable(("sample",), np.arange(S)),
        "split": split_variable(np.array([0, 0, 0, 1, 1], np.int8)),
        "vorticity": Variable(("sample", "t", "x", "y"), w, {"role": "output", "units": "1/s", "long_name": "w"}),
    }
    return write_dataset(tmp_path_factory.mktemp("traj") / "traj.nc", v, provenance_attrs("test-traj", {}, 0))


def frame(s: int, t: int) -> np.ndarray:
    """Frame t of trajectory s as the (N,) point values in row-major order."""
    ix, iy = np.meshgrid(np.arange(NX), np.arange(NY), indexing="ij")
    return code(s, t, ix, iy).ravel()


def test_window_pairs_are_every_target_frame_with_true_inputs(traj: Path) -> None:
    ds = WindowDataset(traj, "train", None, {"kind": "window", "history": 3, "frames": [1, 7]})
    # targets 4..7 (first + history .. last) for each of the 3 training trajectories
    assert len(ds) == 3 * 4 and (ds.in_channels, ds.out_channels, ds.coord_dim) == (3, 1, 2)
    assert ds.task.inputs == ds.task.outputs == ("vorticity",)  # inputs default to the outputs
    for i, (s, j) in enumerate([(0, 4), (0, 5), (0, 6), (0, 7), (1, 4), (1, 5), (1, 6), (1, 7), (2, 4)]):
        item = ds[i]
        assert ds.pair(i) == (s, j)
        np.testing.assert_allclose(item["target"][:, 0].numpy(), frame(s, j), rtol=1e-6)
        for c, jj in enumerate((j - 3, j - 2, j - 1)):  # oldest first
            np.testing.assert_allclose(item["inputs"][:, c].numpy(), frame(s, jj), rtol=1e-6)
    np.testing.assert_allclose(ds[0]["coords"][NY + 2].numpy(), [1 / NX, 2 / NY], rtol=1e-6)  # p = ix * n_y + iy


def test_train_frames_restrict_the_targets_as_the_ono_time_split(traj: Path) -> None:
    ds = WindowDataset(traj, "train", None, {"kind": "window", "history": 3, "frames": [1, 7], "train_frames": [4, 5]})
    assert [ds.pair(i) for i in range(len(ds))] == [(0, 4), (0, 5), (1, 4), (1, 5), (2, 4), (2, 5)]
    # no pair ever touches the unseen frames 6, 7
    seen = {float(v) % 1000 // 10 for i in range(len(ds)) for v in (ds[i]["inputs"][0].tolist() + ds[i]["target"][0].tolist())}
    assert seen == {1.0, 2.0, 3.0, 4.0, 5.0}
    ro = RolloutDataset(traj, "test", None, {"kind": "window", "history": 3, "frames": [1, 7], "train_frames": [4, 5]})
    groups = ro.step_groups()
    assert groups["seen"].tolist() == [0, 1] and groups["unseen"].tolist() == [2, 3]  # frames 4, 5 | 6, 7
    with pytest.raises(ConfigError, match="train_frames"):
        parse_view({"kind": "window", "history": 3, "frames": [1, 7], "train_frames": [3, 5]})


def test_rollout_items_are_whole_trajectories_step_major(traj: Path) -> None:
    ro = RolloutDataset(traj, "test", None, {"kind": "window", "history": 3, "frames": [1, 7]})
    assert len(ro) == 2 and ro.rollout_steps == 4 and ro.predicted_frames.tolist() == [4, 5, 6, 7]
    assert ro.times.tolist() == [4.0, 5.0, 6.0, 7.0] and ro.out_channels == 1
    item = ro[1]  # test trajectory 1 = sample 4
    assert item["rollout_steps"] == 4 and int(ro.sample_index[1]) == 4
    for c, j in enumerate((1, 2, 3)):
        np.testing.assert_allclose(item["inputs"][:, c].numpy(), frame(4, j), rtol=1e-6)
    for c, j in enumerate((4, 5, 6, 7)):
        np.testing.assert_allclose(item["target"][:, c].numpy(), frame(4, j), rtol=1e-6)
    assert collate([ro[0], ro[1]])["rollout_steps"] == 4
    assert ro.channel_names() == [f"vorticity[frame {j}]" for j in (4, 5, 6, 7)]


def test_rollout_equals_feeding_predictions_back_by_hand(traj: Path) -> None:
    ro = RolloutDataset(traj, "test", None, {"kind": "window", "history": 3, "frames": [1, 7]})
    batch = collate([ro[0], ro[1]])
    w = torch.tensor([0.5, -0.25, 0.8])

    def step(b):  # a nonlinear "model" of the window
        return torch.tanh((b["inputs"] * w).sum(-1, keepdim=True) / 1000.0) * 3.0 + b["inputs"][..., -1:] * 0.5

    pred = rollout(step, batch, 4, 1)
    window = batch["inputs"].clone()
    for k in range(4):
        y = step({"inputs": window})
        torch.testing.assert_close(pred[..., k : k + 1], y)
        window = torch.cat([window[..., 1:], y], -1)
    # the first step sees only true frames; later steps see predictions, not the truth
    torch.testing.assert_close(pred[..., :1], step(batch))
    assert not torch.allclose(pred[..., 1:2], step({"inputs": torch.cat([batch["inputs"][..., 1:], batch["target"][..., :1]], -1)}))


def test_one_step_maps_one_frame_to_another(traj: Path) -> None:
    ds = OneStepDataset(traj, "test", None, {"kind": "one_step", "input_frame": 2, "output_frame": 6})
    assert len(ds) == 2 and ds.times.tolist() == [2.0, 6.0] and ds.grid_shape == (NX, NY)
    np.testing.assert_allclose(ds[0]["inputs"][:, 0].numpy(), frame(3, 2), rtol=1e-6)
    np.testing.assert_allclose(ds[0]["target"][:, 0].numpy(), frame(3, 6), rtol=1e-6)
    with pytest.raises(DatasetError, match=r"frame\(s\) \[9\] do not exist; the file has 8 frames"):
        OneStepDataset(traj, "test", None, {"kind": "one_step", "input_frame": 0, "output_frame": 9})


@pytest.mark.parametrize("kind", ["unit_gaussian", "pointwise"])
def test_channelwise_normalisers_equal_fitting_the_materialised_pairs(traj: Path, kind: str) -> None:
    ds = WindowDataset(traj, "train", None, {"kind": "window", "history": 3, "frames": [1, 7], "train_frames": [4, 6]})
    norms = ds.fit_normalizers(kind, kind)
    items = [ds[i] for i in range(len(ds))]
    x = torch.stack([it["inputs"] for it in items])
    y = torch.stack([it["target"] for it in items])
    ref_x = make_normalizer(kind).fit(x, None, ds.grid_shape).state_dict()
    ref_y = make_normalizer(kind).fit(y, None, ds.grid_shape).state_dict()
    for got, ref in ((norms.inputs.state_dict(), ref_x), (norms.outputs.state_dict(), ref_y)):
        torch.testing.assert_close(got["mean"], ref["mean"])
        torch.testing.assert_close(got["scale"], ref["scale"])
    # only the training trajectories count
    assert abs(float(norms.outputs.state_dict()["mean"].mean()) - float(y.mean())) < 1e-3 and float(y.max()) < 3000


def test_views_are_checked_and_trajectories_need_one(traj: Path) -> None:
    with pytest.raises(DatasetError, match="choose datasets.<name>.view.kind 'window'"):
        make_dataset(traj, "train")
    assert isinstance(make_dataset(traj, "train", None, {"kind": "window", "history": 2}), WindowDataset)
    assert isinstance(make_dataset(traj, "test", None, {"kind": "window", "history": 2}, purpose="rollout"), RolloutDataset)
    assert isinstance(make_dataset(traj, "test", None, "one_step"), OneStepDataset)
    # the kind that built each dataset (what the evaluator asks for statistics and plots)
    assert kind_of(make_dataset(traj, "test", None, {"kind": "window", "history": 2}, purpose="rollout")) is get_kind("window")
    assert kind_of(RolloutDataset(traj, "test", None, {"kind": "window", "history": 2})) is get_kind("window")
    assert kind_of(make_dataset(traj, "test", None, "one_step")) is get_kind("one_step")
    with pytest.raises(ValueError, match="purpose must be one of"):
        make_dataset(traj, "test", None, {"kind": "window", "history": 2}, purpose="evaluate")
    for bad, msg in [
        ({"kind": "windows"}, r"kind: 'windows' is not one of"),
        ({"kind": "one_step", "history": 3}, r"\['history'\] do not belong to view kind 'one_step'"),
        ({"kind": "window", "history": 0}, r"view\.history: 0 must be >= 1"),
        ({"kind": "window", "history": 5, "frames": [1, 5]}, r"too few for history 5"),
        ({"kind": "one_step", "input_frame": 1, "output_frame": 1}, r"must differ"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            parse_view(bad)
    with pytest.raises(DatasetError, match=r"task inputs \['x'\] must equal the outputs"):
        WindowDataset(traj, "train", {"inputs": ["x"], "outputs": ["vorticity"]}, {"kind": "window", "history": 2})


def test_unroll_items_are_whole_training_trajectories_with_the_pairs_normalisers(traj: Path) -> None:
    view = {"kind": "window", "history": 3, "frames": [1, 7], "train_frames": [4, 6]}
    un = make_dataset(traj, "train", None, view, purpose="unroll")
    pairs = WindowDataset(traj, "train", None, view)
    assert type(un).__name__ == "UnrollDataset" and kind_of(un).name == "window"
    # one item per training trajectory, the model's channels those of a pair
    assert len(un) == 3 and un.rollout_steps == 3 and (un.in_channels, un.out_channels) == (pairs.in_channels, pairs.out_channels) == (3, 1)
    for s in range(3):
        item = un[s]
        assert item["rollout_steps"] == 3 and item["target"].shape == (NX * NY, 3)
        for c, j in enumerate((1, 2, 3)):  # the first pair's window: frames a - k .. a - 1
            np.testing.assert_allclose(item["inputs"][:, c].numpy(), frame(s, j), rtol=1e-6)
        for c, j in enumerate((4, 5, 6)):  # the training frames, step-major; frame 7 is never read
            np.testing.assert_allclose(item["target"][:, c].numpy(), frame(s, j), rtol=1e-6)
    a, b = un.fit_normalizers("pointwise", "pointwise"), pairs.fit_normalizers("pointwise", "pointwise")
    x = torch.randn(2, NX * NY, 3)
    torch.testing.assert_close(a.inputs.encode(x, un.grid_shape), b.inputs.encode(x, pairs.grid_shape))
    assert collate([un[0], un[1]])["rollout_steps"] == 3
