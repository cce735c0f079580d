"""A split held on the device gives the loader's batches: the same indices, the same tensors, bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from opflow.data import device_batches
from opflow.data.device_batches import DeviceBatches, item_nbytes, uniform_reason
from opflow.data.format import Variable, split_variable, write_dataset
from opflow.data.provenance import provenance_attrs
from opflow.data.torch_data import collate, make_loader
from opflow.data.views import make_dataset

from learning_helpers import cloud_dataset, grid_dataset


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grid_dataset(tmp_path_factory.mktemp("d") / "toy.nc", n_train=11, n_test=3, s=8)


def traj_file(path: Path, n: int = 6, frames: int = 7, s: int = 6) -> Path:
    """Random frames on an s x s grid: the window view's teacher-forced pairs."""
    x = np.arange(s) / s
    grid = {"role": "coordinate", "units": "1"}
    v = {
        "t": Variable(("t",), np.arange(frames, dtype=float), {"role": "coordinate", "units": "s"}),
        "x": Variable(("x",), x, grid),
        "y": Variable(("y",), x.copy(), grid),
        "sample_index": Variable(("sample",), np.arange(n)),
        "split": split_variable(np.array([0] * (n - 2) + [1] * 2, np.int8)),
        "w": Variable(("sample", "t", "x", "y"), np.random.default_rng(1).standard_normal((n, frames, s, s)).astype(np.float32),
                      {"role": "output", "units": "1", "long_name": "w"}),
    }
    return write_dataset(path, v, provenance_attrs("test-traj", {}, 0))


def assert_same_batch(a: Any, b: Any, where: str = "batch") -> None:
    """Equal structure, equal non-tensor values, tensors equal bit for bit (and of one dtype)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, sorted(a), sorted(b))
        for k in a:
            assert_same_batch(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_batch(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def loader_and_device_batches(ds: Any, batch: int, *, seed: int = 3, rank: int = 0, world_size: int = 1) -> tuple[Any, Any, DeviceBatches]:
    loader, sampler, gen = make_loader(ds, batch, shuffle=True, seed=seed, rank=rank, world_size=world_size)
    _, sampler2, gen2 = make_loader(ds, batch, shuffle=True, seed=seed, rank=rank, world_size=world_size)
    return loader, sampler, DeviceBatches.build(ds, sampler2, batch, "cpu", generator=gen2)


@pytest.mark.parametrize("batch", [4, 11, 16])
def test_grid_batches_equal_the_loaders_over_epochs(toy: Path, batch: int) -> None:
    ds = make_dataset(toy, "train", None, "auto", purpose="train")
    loader, sampler, dev = loader_and_device_batches(ds, batch)
    assert len(dev) == len(loader) == -(-11 // batch)
    for epoch in (0, 1, 2):
        sampler.set_epoch(epoch)
        dev.sampler.set_epoch(epoch)
        got = list(dev)
        want = list(loader)
        assert [b["index"].tolist() for b in got] == [b["index"].tolist() for b in want] == dev.epoch_indices()
        assert sorted(sum(dev.epoch_indices(), [])) == list(range(11))  # every sample once, the last batch smaller
        for g, w in zip(got, want, strict=True):
            assert_same_batch(g, w)
            assert g["grid_shape"] == (8, 8) and g["coords"].shape == (len(g["index"]), 64, 2)
    # the shuffle differs between epochs (the sampler's seed + epoch), so the test above compared real permutations
    dev.sampler.set_epoch(0)
    e0 = dev.epoch_indices()
    dev.sampler.set_epoch(1)
    assert dev.epoch_indices() != e0 or batch >= 11


def test_the_loader_generator_advances_as_a_loader_pass_does(toy: Path) -> None:
    """One draw per pass, as a loader iterator without workers: checkpoints hold the same state on both paths."""
    ds = make_dataset(toy, "train", None, "auto", purpose="train")
    loader, sampler, gen = make_loader(ds, 4, shuffle=True, seed=3)
    _, sampler2, gen2 = make_loader(ds, 4, shuffle=True, seed=3)
    dev = DeviceBatches.build(ds, sampler2, 4, "cpu", generator=gen2)
    for _ in range(2):
        list(loader)
        list(dev)
        assert torch.equal(gen.get_state(), gen2.get_state())


def test_ddp_ranks_take_the_samplers_shares(toy: Path) -> None:
    ds = make_dataset(toy, "train", None, "auto", purpose="train")
    for rank in (0, 1):
        loader, sampler, dev = loader_and_device_batches(ds, 2, rank=rank, world_size=2)
        for epoch in (0, 4):
            sampler.set_epoch(epoch)
            dev.sampler.set_epoch(epoch)
            for g, w in zip(dev, loader, strict=True):
                assert_same_batch(g, w)


def test_window_pairs_and_points_with_globals_equal_the_loaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_batches, "BUILD_CHUNK", 5)  # several build chunks, the last one short
    traj = traj_file(tmp_path / "t.nc")
    window = make_dataset(traj, "train", None, {"kind": "window", "history": 2, "frames": [0, 6]}, purpose="train")
    cloud = make_dataset(cloud_dataset(tmp_path / "c.nc", [7] * 9, code=True), "train", {"outputs": ["u"]}, "auto", purpose="train")
    assert len(window) == 4 * 5 and cloud.global_channels == 2
    for ds in (window, cloud):
        assert uniform_reason(ds) is None
        loader, sampler, dev = loader_and_device_batches(ds, 3)
        sampler.set_epoch(1)
        dev.sampler.set_epoch(1)
        n = 0
        for g, w in zip(dev, loader, strict=True):
            assert_same_batch(g, w)
            n += len(g["index"])
        assert n == len(ds)
        full = collate([ds[i] for i in range(len(ds))])
        assert dev.nbytes == sum(v.numel() * v.element_size() for v in full.values() if isinstance(v, torch.Tensor))


def test_ragged_splits_are_refused_with_the_reason(tmp_path: Path) -> None:
    ds = make_dataset(cloud_dataset(tmp_path / "r.nc", [5, 5, 7, 5], code=True), "train", {"outputs": ["u"]}, "auto", purpose="train")
    why = uniform_reason(ds)
    assert why is not None and "item 2" in why and "[7, 2]" in why and "padded per batch" in why
    _, sampler, _ = make_loader(ds, 2, shuffle=True)
    with pytest.raises(ValueError, match="items differ in shape"):
        DeviceBatches.build(ds, sampler, 2, "cpu")


def test_item_nbytes_counts_the_collated_split(toy: Path) -> None:
    ds = make_dataset(toy, "train", None, "auto", purpose="train")
    # coords (64, 2), inputs (64, 1), target (64, 1) float32 per item
    assert item_nbytes(ds) == 11 * 64 * 4 * 4
    _, sampler, _ = make_loader(ds, 4, shuffle=True)
    assert DeviceBatches.build(ds, sampler, 4, "cpu").nbytes == item_nbytes(ds) + 11 * 8  # plus the int64 index


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_batches_live_there_and_equal_the_loaders(toy: Path) -> None:
    ds = make_dataset(toy, "train", None, "auto", purpose="train")
    loader, sampler, gen = make_loader(ds, 4, shuffle=True, seed=3)
    _, sampler2, _ = make_loader(ds, 4, shuffle=True, seed=3)
    dev = DeviceBatches.build(ds, sampler2, 4, "cuda")
    for g, w in zip(dev, loader, strict=True):
        assert g["inputs"].device.type == "cuda" and g["index"].device.type == "cuda"
        assert_same_batch({k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in g.items()}, w)
