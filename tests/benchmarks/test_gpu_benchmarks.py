"""The GPU-ready speed benchmarks, run at smoke size on the CPU: benchmarks/ono_official.py (opflow's
side without the authors' checkout: its variants, the epoch loop, the profile) and
benchmarks/train_speed.py (the real Trainer per precision / compile / data placement). What is
specified: the variants each script accepts and refuses, what a CPU run skips and says why, the
fields of the JSON a GPU session will read, and the synthetic Darcy file. No timing is asserted.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import ono_official, train_speed
from opflow.bench import discover
from opflow.runtime import compile_unsupported

torch = pytest.importorskip("torch")


# --------------------------------------------------------------------------- ono_official


def test_ono_official_variants_are_canonical_and_bad_ones_are_named():
    assert ono_official.parse_variants("fp32,bf16,compile") == ["fp32", "bf16", "compile"]
    assert ono_official.parse_variants("compile+bf16, fp32+compile,bf16+compile") == ["bf16+compile", "compile"]
    for bad in ("fp16", "bf16+fp32", "compile+compile", "", "fp32+ondevice"):
        with pytest.raises(ValueError, match="--variants"):
            ono_official.parse_variants(bad)


def test_ono_official_device_is_cpu_or_cuda_and_a_missing_gpu_is_named():
    assert ono_official._device("cpu") == torch.device("cpu")
    assert ono_official._device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(SystemExit, match="--device"):
        ono_official._device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="--device: 'cuda' asked for but torch sees no CUDA device"):
            ono_official._device("cuda")


def test_ono_official_gpu_variants_are_skipped_on_a_cpu_with_the_reason():
    cpu = torch.device("cpu")
    assert ono_official.skip_reason("fp32", cpu, cpu_variants=False) is None
    assert "skipped on cpu" in ono_official.skip_reason("bf16+compile", cpu, cpu_variants=False)
    assert ono_official.skip_reason("bf16", cpu, cpu_variants=True) is None  # the code-path check


def test_ono_official_contenders_start_from_the_same_weights_and_count_their_state():
    cs = ono_official.make_contenders(None, ["fp32", "bf16"], torch.device("cpu"), ono_official.SMOKE_MODEL)
    assert list(cs) == ["fp32", "bf16"] and cs["bf16"].autocast and not cs["fp32"].autocast
    for p, q in zip(cs["fp32"].module.parameters(), cs["bf16"].module.parameters(), strict=True):
        assert torch.equal(p, q) and p.data_ptr() != q.data_ptr()  # copies, not shared tensors
    n_params = sum(p.numel() for p in cs["fp32"].module.parameters())
    assert cs["fp32"].state_bytes() == 4 * n_params  # float32 parameters, no AdamW moments before a step
    coords, a, u = ono_official.darcy_batch(9, 2, 0, torch.float32)
    cs["fp32"].train_step(coords, a, u)
    n_tensors = len(list(cs["fp32"].module.parameters()))
    # + exp_avg and exp_avg_sq (AdamW), and its step count, one scalar tensor per parameter tensor
    assert cs["fp32"].state_bytes() == 3 * 4 * n_params + 4 * n_tensors


def test_ono_official_epoch_counts_steps_and_extrapolates_from_the_median():
    medians = {"fp32": {"train_step_s": {"median": 0.5}}}
    cs = {"fp32": None}
    ep = ono_official.epoch_times(cs, medians, 9, 8, 1000, torch.device("cpu"), full=False)  # type: ignore[arg-type]
    assert ep["steps"] == 125 and ep["fp32"]["extrapolated_s"] == pytest.approx(62.5) and "measured_s" not in ep["fp32"]
    assert ono_official.epoch_times(cs, medians, 9, 8, 1001, torch.device("cpu"), full=False)["steps"] == 126  # type: ignore[arg-type]


def test_ono_official_ratios_are_release_over_variant():
    res = {
        "release": {"train_step_s": {"median": 3.0}, "inference_s": {"median": 1.0}, "peak_memory_bytes": 200},
        "fp32": {"train_step_s": {"median": 2.0}, "inference_s": {"median": 2.0}, "peak_memory_bytes": 100},
    }
    epochs = {"release": {"measured_s": 30.0}, "fp32": {"measured_s": 10.0}}
    assert ono_official.ratios(res, ["fp32", "bf16"], epochs) == {"fp32": {"train_step": 1.5, "inference": 0.5, "peak_memory": 2.0, "epoch_measured": 3.0}}
    assert ono_official.ratios({"fp32": res["fp32"]}, ["fp32"], None) == {}


def test_ono_official_smoke_without_the_release_writes_the_gpu_fields(tmp_path):
    out = tmp_path / "ono_official.json"
    assert ono_official.main(["--smoke", "--threads", "1", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["benchmark"] == "ono_official" and r["smoke"] and r["release"] is None
    assert r["device"] == "cpu" and r["device_name"] is None and "torch" in r["versions"]
    sp = r["speed"]
    assert sp["variants_measured"] == ["fp32"] and set(sp["variants_skipped"]) == {"bf16", "compile"}
    fp32 = sp["variants"]["fp32"]
    assert sp["opflow"] == fp32  # the old key: opflow's fp32 model
    assert fp32["train_samples_per_s"] == pytest.approx(sp["batch"] / fp32["train_step_s"]["median"])
    assert fp32["peak_memory_bytes"] == fp32["state_bytes"] + fp32["step_peak_bytes"] and fp32["state_bytes"] > 0
    ep = sp["epoch"]
    assert (ep["samples"], ep["batch"], ep["steps"]) == (5, 2, 3)  # 5 samples in batches of 2: the last one smaller
    assert ep["fp32"]["measured_s"] > 0 and ep["fp32"]["extrapolated_s"] > 0
    assert sp["ratios_release_over_variant"] == {}  # nothing to compare without the release
    assert r["profile_opflow"]["top_ops"] and r["profile_opflow"]["device"] == "cpu"
    assert any("fp32" in line for line in ono_official.summarize(r))


# --------------------------------------------------------------------------- train_speed


def test_train_speed_variants_parse_to_settings_and_back():
    assert train_speed.parse_variant("bf16+compile+ondevice") == {"precision": "bf16", "compile": True, "data_on_device": True, "cuda_graphs": False}
    assert train_speed.parse_variant("compile") == {"precision": "fp32", "compile": True, "data_on_device": False, "cuda_graphs": False}
    assert train_speed.parse_variant("graphs+tf32") == {"precision": "tf32", "compile": False, "data_on_device": False, "cuda_graphs": True}
    assert train_speed.variant_name(train_speed.parse_variant("graphs+compile+bf16")) == "bf16+compile+graphs"
    assert train_speed.parse_variants("ondevice+bf16,bf16+ondevice,fp32") == ["bf16+ondevice", "fp32"]
    all_ = train_speed.parse_variants("all")
    assert len(all_) == 8 == len(set(all_)) and all_[0] == "fp32"  # the DataLoader fp32 baseline first
    assert {train_speed.variant_name(train_speed.parse_variant(n)) for n in all_} == set(all_)
    for bad in ("fp16", "fp32+bf16", "tf32+bf16", "bf16+bf16", "+"):
        with pytest.raises(ValueError, match="--variants"):
            train_speed.parse_variant(bad)


def test_train_speed_skips_what_a_cpu_or_this_config_cannot_do():
    v = train_speed.parse_variant
    assert train_speed.skip_reason(v("fp32"), "cpu", True) is None
    assert train_speed.skip_reason(v("fp32+ondevice"), "cpu", True) is None
    assert "CUDA" in train_speed.skip_reason(v("bf16"), "cpu", True)
    assert "CUDA" in train_speed.skip_reason(v("fp32+compile"), "mps", True)
    # compile runs on a CPU with a C++ compiler (the Trainer compiles there too), but not in a smoke run
    why_cpu = compile_unsupported(torch.device("cpu"))
    assert train_speed.skip_reason(v("fp32+compile"), "cpu", True) == why_cpu
    smoke_why = train_speed.skip_reason(v("fp32+compile"), "cpu", True, smoke=True)
    assert smoke_why == why_cpu if why_cpu else "smoke run on the CPU does not compile" in smoke_why
    assert "CUDA" in train_speed.skip_reason(v("tf32"), "cpu", True) and "CUDA graphs" in train_speed.skip_reason(v("fp32+graphs"), "cpu", True)
    assert "data_on_device" in train_speed.skip_reason(v("fp32+ondevice"), "cuda", False)
    assert train_speed.skip_reason(v("bf16+compile+ondevice"), "cuda", True) is None


def test_synthetic_darcy_file_has_the_darcy_shapes_and_values(tmp_path):
    from opflow.data.format import read_dataset

    path = train_speed.synthetic_darcy(tmp_path / "s.nc", train=6, test=3, resolution=13, seed=1)
    ds = read_dataset(path)
    a, u = ds.variables["coeff"].data, ds.variables["pressure"].data
    assert a.shape == u.shape == (9, 13, 13)
    assert set(np.unique(a)) == {3.0, 12.0}  # the piecewise-constant coefficient's two values
    # sin(pi x) sin(pi y) times a field: zero on the boundary (up to sin(pi) in floating point), not inside
    assert np.allclose(u[:, [0, -1], :], 0, atol=1e-6) and np.allclose(u[:, :, [0, -1]], 0, atol=1e-6)
    assert np.abs(u[:, 1:-1, 1:-1]).min() > 0
    assert list(np.asarray(ds.variables["split"].data)) == [0] * 6 + [1] * 3
    # deterministic in the seed
    again = read_dataset(train_speed.synthetic_darcy(tmp_path / "t.nc", train=6, test=3, resolution=13, seed=1))
    assert np.array_equal(again.variables["pressure"].data, u)


def test_train_speed_smoke_trains_with_the_real_trainer_and_writes_the_fields(tmp_path):
    out = tmp_path / "train_speed_cpu.json"
    assert train_speed.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["benchmark"] == "train_speed" and r["smoke"] and r["device"] == "cpu" and r["epochs"] == 2
    assert r["run"]["dataset"] == "darcy" and r["run"]["model"] == "ono"
    assert r["run"]["model_config"]["width"] == train_speed.SMOKE_MODEL["width"] and r["data"]["synthetic"]
    assert "torch" in r["versions"] and r["torch_threads"] == 1
    has = train_speed.data_on_device_supported()
    assert r["data_on_device_supported"] == has
    measured = {"fp32", "fp32+ondevice"} if has else {"fp32"}
    assert set(r["variants"]) == measured
    assert set(r["skipped_variants"]) == set(train_speed.ALL_VARIANTS) - measured
    fp32 = r["variants"]["fp32"]
    assert fp32["train_samples"] == 8 and fp32["steps_per_epoch"] == 2 and len(fp32["train_loss"]) == 2
    assert fp32["epoch_s"]["median"] == fp32["epoch_s"]["all"][1]  # the first epoch is the warm-up
    assert fp32["samples_per_s"] == pytest.approx(8 / fp32["epoch_s"]["median"])
    assert math.isfinite(fp32["final_train_loss"]) and fp32["final_test_rel_l2"] is not None
    assert fp32["peak_memory_kind"] and fp32["effective"] == {
        "autocast_bf16": False, "tf32": False, "compile": False, "cuda_graph": False, "train_data_on_device": False, "test_data_on_device": False,
    }
    if has:  # the same batches in the same order: the same losses, bit for bit
        on = r["variants"]["fp32+ondevice"]
        assert on["effective"]["train_data_on_device"] and on["train_loss"] == fp32["train_loss"]
    assert any(line.startswith("- fp32:") for line in train_speed.summarize(r))


def test_train_speed_steps_time_single_steps_of_each_pair_and_record_the_kernel_fields(tmp_path):
    """--steps: the real Trainer's step on a synthetic file of the pair's shape; on a CPU no kernel time."""
    out = tmp_path / "steps.json"
    args = ["--steps", "--device", "cpu", "--threads", "1", "--pairs", "elasticity972/gnot", "--variants", "fp32,bf16+graphs",
            "--step-count", "2", "--step-repeats", "2", "--warmup", "1", "--step-batches", "2", "--out", str(out)]
    assert train_speed.main(args) == 0
    r = json.loads(out.read_text())
    pair = r["pairs"]["elasticity972/gnot"]
    assert r["benchmark"] == "train_step" and pair["shape"] == {"points": 972} and pair["batch_size"] == 4
    assert pair["paper_train"] == 1000 and pair["steps_per_paper_epoch"] == 250
    assert pair["model_config"]["width"] == 96 and pair["model_config"]["n_layers"] == 4  # the paper configuration
    fp32 = pair["variants"]["fp32"]
    assert len(fp32["step_wall_all_s"]) == 2 and fp32["step_wall_s"] > 0 and fp32["step_kernel_s"] is None and fp32["gpu_bound"] is None
    assert any(k["name"] in ("aten::mm", "aten::addmm") for k in fp32["top_kernels"])  # on a CPU its ATen operations with the most time
    assert fp32["paper_epoch_train_s_estimate"] == pytest.approx(250 * fp32["step_wall_s"])
    assert fp32["aten_ops_per_step"] > 1000  # 4 GNOT blocks forward and backward, and AdamW over its parameters
    assert "CUDA" in r["skipped"]["elasticity972/gnot bf16+graphs"]
    with pytest.raises(SystemExit, match="--pairs"):
        train_speed.main(["--steps", "--device", "cpu", "--pairs", "darcy/nothing", "--out", str(out)])
    # any model on a dataset of the default pairs: the dataset sets the synthetic data's shape
    assert train_speed.step_shape("elasticity972/gnot_official") == {"points": 972} and train_speed.step_shape("burgers/gt1d") is None


def test_the_pairs_of_the_cpu_list_are_timed_on_their_own_task_and_view(tmp_path):
    """The CPU's background list (config/queue.yaml ``cpu:``) is timed plain against compiled with these pairs: the
    inverse problem keeps its task (pressure -> coefficient) and its view (the output coarsened 4x, 141 -> 36)."""
    from opflow.config import load_config_files

    config = load_config_files([str(train_speed.ROOT / "config" / "default.yaml")])
    assert train_speed.step_shape("darcy_inverse141_eps0/gt_inverse") == {"resolution": 141}
    assert train_speed.step_shape("darcy_lognormal64/ft") == {"resolution": 64}
    run, path = train_speed.step_pair_run(config, "darcy_inverse141_eps0/gt_inverse", {"resolution": 141}, tmp_path, batches=1)
    assert run["task"] == {"inputs": ["pressure"], "outputs": ["coeff"]} and run["view"]["kind"] == "inverse"
    assert run["view"]["factor"] == 4 and path.exists()


def test_top_kernels_are_the_operations_with_the_most_time_per_step():
    """On CUDA the kernels of a profiled step; here the same summary of a CPU profile (the ATen operations)."""
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(256, 256)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(4):  # 4 "steps" of 3 products and one addition each
            b = a @ a @ a
            (b + 1.0).sum()
    top = train_speed.top_kernels(prof, steps=4, k=3, device="cpu")
    assert top[0]["name"] == "aten::mm" and top[0]["calls_per_step"] == 2 and top[0]["ms_per_step"] > 0
    assert len(top) <= 3 and [t["ms_per_step"] for t in top] == sorted((t["ms_per_step"] for t in top), reverse=True)


def test_train_speed_steps_measure_each_pair_in_a_process_of_its_own(tmp_path):
    """A failed CUDA-graph capture spoils its process's GPU random numbers: with several pairs, each pair
    runs in a process of its own (this module again, one pair) and the JSONs are merged as they end."""
    out = tmp_path / "steps.json"
    args = ["--steps", "--device", "cpu", "--pairs", "elasticity972/gnot,darcy/fno", "--variants", "bf16+graphs", "--out", str(out)]
    assert train_speed.main(args) == 1  # nothing measured: graphs need CUDA
    r = json.loads(out.read_text())
    assert r["benchmark"] == "train_step" and r["processes"] == "one per pair"
    assert {k: "CUDA" in v for k, v in r["skipped"].items()} == {"elasticity972/gnot bf16+graphs": True, "darcy/fno bf16+graphs": True}
    assert train_speed._argv_without(["--steps", "--pairs", "a,b", "--out=x", "--warmup", "1"], ("--pairs", "--out")) == ["--steps", "--warmup", "1"]


def test_precision_smoke_trains_runs_in_parallel_processes_and_decides_against_fp32(tmp_path):
    from benchmarks import precision

    out = tmp_path / "p.json"
    assert precision.main(["--smoke", "--seeds", "0,1", "--cuda-graphs", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["cuda_graphs"] is True  # the runs ask for a captured step (ignored on the CPU, with a warning)
    assert set(r["runs"]["fp32"]) == {"0", "1"} and all(v["complete"] and v["epochs_done"] == 1 for v in r["runs"]["fp32"].values())
    vals = [v["test_rel_l2"] for v in r["runs"]["fp32"].values()]
    assert r["decision"]["fp32"]["mean"] == pytest.approx(sum(vals) / 2) and r["decision"]["fp32"]["range"] == pytest.approx(abs(vals[0] - vals[1]))
    assert vals[0] != vals[1]  # the seeds differ
    runs = {"fp32": {0: {"test_rel_l2": 0.10}, 1: {"test_rel_l2": 0.12}}, "bf16": {0: {"test_rel_l2": 0.115}, 1: {"test_rel_l2": 0.125}},
            "tf32": {0: {"test_rel_l2": 0.20}, 1: {"test_rel_l2": 0.21}}}
    d = precision.decide(runs)
    assert d["bf16"]["equal_within_seed_spread"] and not d["tf32"]["equal_within_seed_spread"]
    assert d["tf32"]["ratio_of_means"] == pytest.approx(0.205 / 0.11)
    assert precision.decide({"fp32": runs["fp32"], "bf16": {0: {"test_rel_l2": None}}})["bf16"]["equal_within_seed_spread"] is None
    with pytest.raises(SystemExit):
        precision.main(["--precisions", "fp16", "--smoke"])


def test_the_gpu_benchmarks_declare_their_gpu_runs():
    found = {b.name: b for b in discover()}
    assert found["train_speed"].gpu_args == ["--device", "cuda"]
    assert found["models"].gpu_args == ["--device", "cuda"]
    assert found["ono_official"].requires == ["--release"]
    assert found["ono_official"].gpu_args[:2] == ["--device", "cuda"] and "--full-epoch" in found["ono_official"].gpu_args


def test_train_speed_full_run_on_a_cpu_shrinks_the_synthetic_split_and_says_so(tmp_path):
    out = tmp_path / "ts.json"
    args = ["--configfile", "config/default.yaml", "--configfile", "config/quick.yaml", "--device", "cpu", "--threads", "1",
            "--variants", "fp32", "--train-samples", "4", "--out", str(out)]
    assert train_speed.main(args) == 0
    r = json.loads(out.read_text())
    assert not r["smoke"] and r["epochs"] == 2  # the CPU default
    assert r["data"] | {"write_s": 0} == {**r["data"], "synthetic": True, "train": 4, "test": train_speed.CPU_DATA["test"], "resolution": 43, "write_s": 0}
    assert any("not the dataset's 250 / 50" in n for n in r["notes"])
    assert r["run"]["model_config"]["width"] == 32 and r["variants"]["fp32"]["train_samples"] == 4  # quick.yaml's ONO, unchanged


def test_bad_options_are_refused_naming_them(capsys):
    cases = [
        (train_speed.main, ["--variants", "fp16"], "--variants"),
        (train_speed.main, ["--epochs", "0"], "--epochs"),
        (train_speed.main, ["--train-samples", "0"], "--train-samples"),
        (ono_official.main, ["--smoke", "--variants", "fp16"], "--variants"),
        (ono_official.main, ["--smoke", "--samples", "0"], "--samples"),
        (ono_official.main, [], "--release DIR"),
    ]
    for main, args, msg in cases:
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 2 and msg in capsys.readouterr().err, args


def test_step_pairs_of_one_dataset_get_a_file_of_their_own_split(tmp_path):
    """Found counting FNO after ONO in one process: both read darcy's synthetic file, made for ONO's batch of 8."""
    from opflow.config import load_config_files

    config = load_config_files([str(train_speed.ROOT / "config" / "default.yaml")])
    runs = {pair: train_speed.step_pair_run(config, pair, {"resolution": 11}, tmp_path, batches=2) for pair in ("darcy/ono", "darcy/fno")}
    (ono, ono_file), (fno, fno_file) = runs["darcy/ono"], runs["darcy/fno"]
    assert ono_file != fno_file and ono["data"]["train"] == 2 * ono["training"]["batch_size"] and fno["data"]["train"] == 2 * fno["training"]["batch_size"]


def test_step_flops_counts_the_products_of_a_step_and_the_floor_at_each_peak(tmp_path):
    from benchmarks import step_flops

    out = tmp_path / "flops.json"
    assert step_flops.main(["--smoke", "--out", str(out)]) == 0
    fno = json.loads(out.read_text())["pairs"]["darcy/fno"]
    assert fno["batch_size"] == 20 and fno["flop_per_step"] == sum(fno["flop_by_op"].values()) > 0
    assert fno["floor_ms"]["fp32"] == pytest.approx(fno["flop_per_step"] / 67e12 * 1e3)
    assert fno["floor_ms"]["bf16"] < fno["floor_ms"]["tf32"] < fno["floor_ms"]["fp32"]
    fp32 = fno["measured_h200"]["fp32"]  # the fifth lease's kernel time of the same step (committed JSON)
    assert fp32["precision"] == "fp32" and fp32["tflops"] == pytest.approx(fno["flop_per_step"] / (fp32["kernel_ms"] / 1e3) / 1e12)
    assert any(line.startswith("- darcy/fno: ") for line in step_flops.summarize(json.loads(out.read_text())))


def test_ono_official_maps_the_release_linear_block_onto_q_and_kv():
    """--release-config zeroshot: the linear_attention_transformer block's to_q, to_k, to_v, to_out
    land on opflow's to_q, to_kv = [to_k; to_v], to_out; every parameter of the model is covered."""
    from opflow.models import build_model
    from opflow.models.ono import RELEASE_ZEROSHOT

    width, layers = 128, 2
    ours = build_model({"arch": "ono", **RELEASE_ZEROSHOT, "n_layers": layers}, 1, 1, 2)
    g = torch.Generator().manual_seed(0)
    sd: dict[str, torch.Tensor] = {}
    shapes = {"preprocess.linear_pre.0": (256, 3), "preprocess.linear_post": (256, 256)}
    for i in range(layers):
        s = f"blocks.{i}."
        shapes.update({s + "ln_1": (width,), s + "ln_2": (width,), s + "ln_3": (width,), s + "Attn.to_out": (width, width),
                       s + "mlp.linear_pre.0": (width, width), s + "mlp.linear_post": (width, width), s + "proj": (16, width)})
        for name in ("to_q", "to_k", "to_v"):
            sd[s + f"Attn.{name}.weight"] = torch.randn(width, width, generator=g)
        sd[s + "mu"] = torch.randn(16, generator=g)
        if i == layers - 1:
            shapes[s + "mlp2"] = (1, width)
        else:
            shapes.update({s + "mlp2.linear_pre.0": (width, width), s + "mlp2.linear_post": (width, width)})
    for name, shape in shapes.items():
        sd[name + ".weight"] = torch.randn(*shape, generator=g)
        if len(shape) == 2 or name.split(".")[-1].startswith("ln"):
            sd[name + ".bias"] = torch.randn(shape[0], generator=g)
    missing = ours.load_state_dict(ono_official.release_to_opflow(sd, layers, width), strict=False)
    assert not missing.unexpected_keys and all(k.endswith(("running_cov", "num_batches_tracked")) for k in missing.missing_keys)
    attn = ours.blocks[1].attn
    assert torch.equal(attn.to_q.weight, sd["blocks.1.Attn.to_q.weight"])
    assert torch.equal(attn.to_kv.weight, torch.cat([sd["blocks.1.Attn.to_k.weight"], sd["blocks.1.Attn.to_v.weight"]]))
    assert torch.equal(attn.to_out.bias, sd["blocks.1.Attn.to_out.bias"])
    assert ono_official.RELEASE_COMMANDS["zeroshot"]["attn_type"] is None  # no --attn_type in the README command


def test_ono_official_feeds_the_release_what_its_elasticity_script_feeds_it():
    """--release-config elasticity: ONO2 is called with linspace(0, 1, 972) as its "space" coordinate and the
    points' (x, y) as its input function (ela_example.py); opflow's side is the 972-point cloud with no input
    function, the release's hyperparameters (RELEASE_ELASTICITY) and its parameter count."""
    seen = {}

    class Recorder(torch.nn.Module):
        blocks = ["the release's blocks"]

        def forward(self, x, fx):
            seen["x"], seen["fx"] = x, fx
            return fx[..., :1]

    coords, inputs, u = ono_official.config_batch("elasticity", 29, 3, 0, torch.float64)
    assert coords.shape == (3, 972, 2) and inputs.shape == (3, 972, 0) and u.shape == (3, 972, 1)
    wrapped = ono_official.as_script_calls(Recorder(), "elasticity")
    wrapped(coords, inputs)
    assert torch.equal(seen["x"], torch.linspace(0, 1, 972, dtype=torch.float64).view(1, 972, 1).expand(3, 972, 1))
    assert seen["fx"] is coords and wrapped.blocks == Recorder.blocks
    assert ono_official.as_script_calls(Recorder(), "darcy").__class__ is Recorder  # the Darcy scripts call ONO2(coords, a)
    assert ono_official.config_points("elasticity", 29) == 972 and ono_official.config_points("darcy", 29) == 841
    assert sum(p.numel() for p in ono_official.opflow_model("elasticity").parameters()) == 1_104_193
    assert ono_official.RELEASE_INPUTS["elasticity"] == (1, 2) and ono_official.RELEASE_COMMANDS["elasticity"]["attn_type"] == "nystrom"


def test_ono_official_ns_batches_are_the_script_s_ten_frames_in_and_out():
    """--release-config ns: ONO2(space_dim 2, fun_dim 10) on the grid, the zero-shot command's network
    (NS_example2.py's README command has the same arguments); the forward checks take the first target
    frame, the unrolled-training check all ten (step-major, as opflow's unrolled items)."""
    coords, a, u = ono_official.config_batch("ns", 8, 3, 0, torch.float64)
    assert coords.shape == (3, 64, 2) and a.shape == (3, 64, 10) and u.shape == (3, 64, 1)
    coords2, a2, frames = ono_official.ns_batch(8, 3, 0, torch.float64)
    assert torch.equal(coords2, coords) and torch.equal(a2, a) and frames.shape == (3, 64, 10) and torch.equal(frames[..., :1], u)
    assert ono_official.RELEASE_INPUTS["ns"] == (2, 10) and ono_official.RELEASE_COMMANDS["ns"] == ono_official.RELEASE_COMMANDS["zeroshot"]
    assert ono_official.as_script_calls(torch.nn.Identity(), "ns").__class__ is torch.nn.Identity  # NS_example2.py calls ONO2(pos, fx)
    assert sum(p.numel() for p in ono_official.opflow_model("ns").parameters()) == 1_112_705  # what the release's ONO2 counts (the benchmark's result)
