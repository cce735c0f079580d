"""training.data_on_device: the split held on the device trains to the loader's weights bit for bit;
ragged splits are refused (true) or left to the loader (auto); an operational key (same run hash)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import opflow.train
from opflow.config import OPERATIONAL_KEYS, TrainConfig, deep_merge, resolve_run
from opflow.data.device_batches import DeviceBatches
from opflow.data.errors import ConfigError
from opflow.inference import load_model
from opflow.train import CHECKPOINT_NAME, LOG_NAME, Trainer, train

from learning_helpers import cloud_dataset, grid_dataset, tiny_config, toy_run



@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grid_dataset(tmp_path_factory.mktemp("data") / "toy.nc")


def run_of(data: Path, model: str = "mlp", **training) -> dict:
    return toy_run(data, model, dropout=0.2 if model == "mlp" else None, **training)


def ragged_run(path: Path, **training) -> dict:
    cfg = tiny_config(**training)
    cfg["datasets"]["toy"] = {"source": "toy_src", "train": 6, "test": 2, "task": {"inputs": [], "outputs": ["u"]}}
    return resolve_run(cfg, "toy", "mlp", str(path))


def final(res) -> tuple[dict[str, torch.Tensor], list[dict]]:
    return load_model(res.model_path)[0].state_dict(), res.curves


@pytest.mark.parametrize("model", ["mlp", "ono"])
def test_training_on_device_batches_equals_the_loader_bit_for_bit(data: Path, tmp_path: Path, model: str) -> None:
    """3 epochs of 3 shuffled batches each (12 samples, batch 4); test errors every epoch."""
    loader_res = train(run_of(data, model, epochs=3, data_on_device=False), data, tmp_path / "loader", progress=False)
    dev_res = train(run_of(data, model, epochs=3, data_on_device=True), data, tmp_path / "device", progress=False)
    (wa, ca), (wb, cb) = final(loader_res), final(dev_res)
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    for a, b in zip(ca, cb, strict=True):
        assert (a["train_loss"], a["test_rel_l2"], a["lr"]) == (b["train_loss"], b["test_rel_l2"], b["lr"])
    log = (tmp_path / "device" / LOG_NAME).read_text()
    assert "toy_" + model + ": training split and test split held on cpu (" in log and "batched by index (training.data_on_device: True)" in log
    assert "held on" not in (tmp_path / "loader" / LOG_NAME).read_text()


def test_the_trainer_picks_device_batches_only_when_asked(data: Path, tmp_path: Path) -> None:
    for want, kind in ((True, DeviceBatches), (False, torch.utils.data.DataLoader), ("auto", torch.utils.data.DataLoader)):  # auto: off on the CPU
        run = run_of(data, data_on_device=want)
        cfg = TrainConfig.from_dict(run["training"])
        info, dev = opflow.train.init_distributed("cpu")
        t = Trainer(run, cfg, info, dev, data, tmp_path / str(want), progress=False)
        t.setup()
        assert isinstance(t.train_batches, kind) and isinstance(t.test_batches, kind), want
        assert len(t.train_batches) == len(t.loader) == 3


def test_a_resumed_run_may_switch_between_loader_and_device(data: Path, tmp_path: Path) -> None:
    """The key is operational: a checkpoint written with the loader resumes on device batches, exactly."""
    full = train(run_of(data, epochs=4), data, tmp_path / "full", progress=False)
    part = train(run_of(data, epochs=4, data_on_device=False), data, tmp_path / "cut", progress=False, max_epochs_this_call=2)
    state = torch.load(tmp_path / "cut" / CHECKPOINT_NAME, weights_only=False)["loader_generator"]
    rest = train(run_of(data, epochs=4, data_on_device=True), data, tmp_path / "cut", progress=False, max_epochs_this_call=1)
    assert part.epochs_done == 2 and rest.resumed_from == 2
    after = torch.load(tmp_path / "cut" / CHECKPOINT_NAME, weights_only=False)["loader_generator"]
    assert not torch.equal(state, after)  # advanced by one pass, as the loader would
    rest = train(run_of(data, epochs=4, data_on_device=False), data, tmp_path / "cut", progress=False)
    wa, wb = final(full)[0], final(rest)[0]
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def test_the_key_does_not_change_the_run_hash_and_bad_values_are_named() -> None:
    assert "data_on_device" in OPERATIONAL_KEYS and TrainConfig().data_on_device == "auto"
    cfg = tiny_config()
    h = resolve_run(cfg, "toy", "mlp")["hash"]
    for value in (True, False, "auto"):
        assert resolve_run(deep_merge(cfg, {"training": {"data_on_device": value}}), "toy", "mlp")["hash"] == h
    for bad in ("yes", 1, None):
        with pytest.raises(ConfigError, match=rf"^training\.data_on_device: {bad!r} must be auto, true or false$"):
            TrainConfig.from_dict({"data_on_device": bad})


def test_ragged_data_true_is_refused_naming_the_key_auto_uses_the_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = cloud_dataset(tmp_path / "r.nc", [5, 7, 5, 6, 5, 5, 6, 6], n_test=2)
    with pytest.raises(ConfigError, match=r"^training\.data_on_device: true, but the training split cannot be held on the device: .*item 1.*"
                                          r"padded per batch.*set training\.data_on_device: auto or false"):
        train(ragged_run(f, data_on_device=True), f, tmp_path / "true", progress=False)
    # auto where it would be on (the CPU counted as such here): the loader, and one line saying why
    monkeypatch.setattr(opflow.train, "_AUTO_DEVICE_TYPES", frozenset({"cpu"}))
    monkeypatch.setattr(opflow.train, "_free_device_memory", lambda dev: 10**12)
    res = train(ragged_run(f, epochs=2, data_on_device="auto"), f, tmp_path / "auto", progress=False)
    assert res.complete
    lines = [ln for ln in (tmp_path / "auto" / LOG_NAME).read_text().splitlines() if "data_on_device" in ln]
    assert len(lines) == 1 and "training.data_on_device auto: the data loader feeds the training split: its items differ in shape" in lines[0]


def test_auto_holds_a_split_under_a_quarter_of_the_free_memory(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opflow.train, "_AUTO_DEVICE_TYPES", frozenset({"cpu"}))
    need = 12 * 256 * 4 * 4  # 12 samples of 256 points: coords (2), input and target channels, float32
    monkeypatch.setattr(opflow.train, "_free_device_memory", lambda dev: 4 * need + 4)
    train(run_of(data, epochs=1), data, tmp_path / "fits", progress=False)
    assert "training split and test split held on cpu" in (tmp_path / "fits" / LOG_NAME).read_text()
    monkeypatch.setattr(opflow.train, "_free_device_memory", lambda dev: 4 * need)
    train(run_of(data, epochs=1), data, tmp_path / "big", progress=False)
    log = (tmp_path / "big" / LOG_NAME).read_text()
    assert "held on" not in log and f"the data loader feeds the training split: it takes {need / 2**20:.1f} MiB, not under 25% of the free" in log


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_auto_holds_the_split_and_training_steps_never_wait_for_the_gpu(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto picks the device batches on CUDA; with CUDA's sync debug mode set to "error" from the first
    batch of an epoch to the end of its last step, no step waits for the GPU (the epoch's one wait,
    for the summed loss, comes after the loop)."""
    real_iter, real_epoch = DeviceBatches.__iter__, Trainer.epoch
    epochs_checked = []

    def strict_iter(batches: DeviceBatches):
        if batches.generator is None:  # the test split's batches: evaluation copies each batch's errors to the host
            yield from real_iter(batches)
            return
        it = real_iter(batches)
        batch = next(it)  # the epoch's indices are copied to the device before this
        while True:
            torch.cuda.set_sync_debug_mode("error")
            try:
                yield batch  # one training step runs here
                batch = next(it)  # the next batch is cut on the device
            except StopIteration:
                return
            finally:
                torch.cuda.set_sync_debug_mode("default")

    def epoch(self: Trainer, e: int) -> dict:
        try:
            return real_epoch(self, e)
        finally:
            torch.cuda.set_sync_debug_mode("default")
            epochs_checked.append(e)

    monkeypatch.setattr(DeviceBatches, "__iter__", strict_iter)
    monkeypatch.setattr(Trainer, "epoch", epoch)
    res = train(run_of(data, epochs=2, device="cuda", data_on_device="auto"), data, tmp_path, progress=False)
    assert res.complete and epochs_checked == [0, 1]
    assert "training split and test split held on cuda" in (tmp_path / LOG_NAME).read_text()
