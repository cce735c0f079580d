"""Grid datasets (layout, splits, tasks), the padded batch format, and reproducible loaders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from opflow.data.errors import DatasetError
from opflow.data.format import Variable, read_dataset, split_variable, write_dataset
from opflow.data.provenance import provenance_attrs
from opflow.data.torch_data import GridDataset, collate, make_loader, output_mask, resolve_task

from learning_helpers import grid_dataset


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grid_dataset(tmp_path_factory.mktemp("d") / "toy.nc", n_train=6, n_val=2, n_test=3, s=8)


def test_grid_layout_is_row_major_with_ij_coordinates(toy: Path) -> None:
    raw = read_dataset(toy)
    ds = GridDataset(toy, "train")
    assert ds.grid_shape == (8, 8) and len(ds) == 6
    assert ds.coords.dtype == torch.float32 and ds.inputs.dtype == torch.float32
    assert (ds.coord_dim, ds.in_channels, ds.out_channels) == (2, 1, 1)
    x, y = raw["x"], raw["y"]
    for ix, iy in [(0, 0), (0, 7), (3, 5), (7, 1)]:
        p = ix * 8 + iy
        np.testing.assert_allclose(ds.coords[p].numpy(), [x[ix], y[iy]], rtol=1e-6)
        assert ds.inputs[2, p, 0].item() == pytest.approx(float(raw["coeff"][2, ix, iy]))
        assert ds.target[2, p, 0].item() == pytest.approx(float(raw["sol"][2, ix, iy]))
    item = ds[4]
    assert set(item) == {"coords", "inputs", "target", "grid_shape", "index"} and item["index"] == 4


def test_splits_select_their_samples(toy: Path) -> None:
    raw = read_dataset(toy)
    for split, idx in [("train", range(0, 6)), ("val", range(6, 8)), ("test", range(8, 11))]:
        ds = GridDataset(toy, split)
        assert list(ds.sample_index) == list(idx)
        np.testing.assert_array_equal(ds.target[:, :, 0].numpy(), raw["sol"][list(idx)].reshape(len(idx), -1))
    with pytest.raises(DatasetError, match="unknown split 'dev'"):
        GridDataset(toy, "dev")


def test_task_defaults_to_roles_and_can_be_swapped(toy: Path) -> None:
    assert resolve_task(toy).to_dict() == {"inputs": ["coeff"], "outputs": ["sol"]}
    inv = GridDataset(toy, "train", {"inputs": ["sol"], "outputs": ["coeff"]})  # inverse problem
    torch.testing.assert_close(inv.inputs, GridDataset(toy, "train").target)
    with pytest.raises(DatasetError, match=r"task outputs \['pressure'\] are not variables of the file"):
        resolve_task(toy, {"outputs": ["pressure"]})


def test_non_grid_fields_are_refused_with_a_pointer(tmp_path: Path) -> None:
    n = 3
    v = {
        "sample_index": Variable(("sample",), np.arange(n)),
        "split": split_variable(np.zeros(n, np.int8)),
        "node_x": Variable(("node",), np.linspace(0, 1, 5), {"role": "coordinate"}),
        "s": Variable(("sample", "node"), np.ones((n, 5)), {"role": "input", "units": "1", "long_name": "s"}),
        "u": Variable(("sample", "node"), np.ones((n, 5)), {"role": "output", "units": "1", "long_name": "u"}),
    }
    p = write_dataset(tmp_path / "mesh.nc", v, provenance_attrs("t", {}, 0))
    with pytest.raises(DatasetError, match=r"GridDataset reads fields on \(sample, x\[, y\[, z\]\]\).*mesh and trajectory"):
        GridDataset(p, "train")


def _cloud(n: int, c_in: int = 2, c_out: int = 1, seed: int = 0, query: int | None = None) -> dict:
    g = torch.Generator().manual_seed(seed)
    item = {"coords": torch.rand(n, 2, generator=g), "inputs": torch.rand(n, c_in, generator=g), "index": seed}
    m = n if query is None else query
    item["target"] = torch.rand(m, c_out, generator=g)
    if query is not None:
        item["query"] = torch.rand(query, 2, generator=g)
    return item


def test_collate_pads_ragged_point_clouds_with_a_mask() -> None:
    items = [_cloud(5, seed=0), _cloud(3, seed=1), _cloud(4, seed=2)]
    b = collate(items)
    assert b["coords"].shape == (3, 5, 2) and b["inputs"].shape == (3, 5, 2) and b["target"].shape == (3, 5, 1)
    assert b["mask"].tolist() == [[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]]
    torch.testing.assert_close(b["inputs"][1, :3], items[1]["inputs"])
    assert torch.all(b["inputs"][1, 3:] == 0) and torch.all(b["target"][2, 4:] == 0)
    assert "grid_shape" not in b and b["index"].tolist() == [0, 1, 2]
    assert output_mask(b) is b["mask"]


def test_collate_ragged_queries_get_their_own_mask() -> None:
    items = [_cloud(5, seed=0, query=2), _cloud(5, seed=1, query=4)]
    b = collate(items)
    assert "mask" not in b  # the input clouds have equal sizes
    assert b["query"].shape == (2, 4, 2) and b["target"].shape == (2, 4, 1)
    assert b["query_mask"].tolist() == [[True, True, False, False], [True] * 4]
    assert output_mask(b) is b["query_mask"]
    with pytest.raises(ValueError, match="either every sample of a batch has query points or none"):
        collate([_cloud(5, query=2), _cloud(5)])
    bad = _cloud(4, seed=3)
    bad["target"] = bad["target"][:3]
    with pytest.raises(ValueError, match="one target row per output point"):
        collate([_cloud(5), bad])


def test_collate_grid_batches_stack_without_mask(toy: Path) -> None:
    ds = GridDataset(toy, "train")
    b = collate([ds[0], ds[3]])
    assert b["grid_shape"] == (8, 8) and "mask" not in b and b["coords"].shape == (2, 64, 2)
    torch.testing.assert_close(b["target"][1], ds.target[3])


def _orders(loader, sampler, epoch: int) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return [b["index"].tolist() for b in loader]


def test_shuffling_depends_on_seed_and_epoch_only(toy: Path) -> None:
    ds = GridDataset(toy, "train")
    l1, s1, _ = make_loader(ds, 2, shuffle=True, seed=5)
    l2, s2, _ = make_loader(ds, 2, shuffle=True, seed=5)
    e0, e1 = _orders(l1, s1, 0), _orders(l1, s1, 1)
    assert sorted(sum(e0, [])) == list(range(6)) and e0 != e1
    assert _orders(l2, s2, 1) == e1 and _orders(l2, s2, 0) == e0  # any order of calls: a resumed run replays
    l3, s3, _ = make_loader(ds, 2, shuffle=True, seed=6)
    assert _orders(l3, s3, 0) != e0


def test_ddp_shares_union_to_the_single_process_batches(toy: Path) -> None:
    ds = GridDataset(toy, "train")
    single, ss, _ = make_loader(ds, 2, shuffle=True, seed=1)
    r0, s0, _ = make_loader(ds, 1, shuffle=True, seed=1, rank=0, world_size=2)
    r1, s1, _ = make_loader(ds, 1, shuffle=True, seed=1, rank=1, world_size=2)
    for epoch in (0, 3):
        glob = _orders(single, ss, epoch)
        parts = zip(_orders(r0, s0, epoch), _orders(r1, s1, epoch), strict=True)
        assert [sorted(a + b) for a, b in parts] == [sorted(g) for g in glob]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # torch's fork workers
def test_loader_with_workers_gives_the_same_batches(toy: Path) -> None:
    ds = GridDataset(toy, "train")
    l0, s0, _ = make_loader(ds, 4, shuffle=True, seed=2)
    l2, s2, _ = make_loader(ds, 4, shuffle=True, seed=2, num_workers=2)
    s0.set_epoch(1)
    s2.set_epoch(1)
    for a, b in zip(l0, l2, strict=True):
        assert torch.equal(a["inputs"], b["inputs"]) and a["grid_shape"] == b["grid_shape"]
    with pytest.raises(DatasetError, match="split is empty"):
        make_loader(torch.utils.data.TensorDataset(torch.zeros(0)), 2, shuffle=False)
