"""The training step never makes the host wait for the device, and each model's forward and loss
compile to one graph (opflow.train_step, opflow.hostsync).

On a CPU there is no device to wait for, so the waits are counted where they would happen: every
conversion of a tensor value to a Python value (``item``, ``bool``, ``float``, ``int``, ``tolist``,
``numpy``, ``cpu``) and ``torch.equal``, called from opflow's own code during one training step of a
real :class:`~opflow.train.Trainer` on a small file, for every model family. The CUDA tests at the
end check the same on a GPU with PyTorch's own sync detector, and that the captured step trains the
same weights as the plain one.
"""

from __future__ import annotations

import contextlib
import math
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import opflow.train
from opflow.config import TrainConfig, resolve_run, run_hash, run_identity
from opflow.data.torch_data import collate
from opflow.data.trajectory import WindowDataset, rollout
from opflow.hostsync import deferred_checks
from opflow.runtime import compile_unsupported
from opflow.train import Trainer
from opflow.train_step import batch_loss

from learning_helpers import TEST_ARCH, cloud_dataset, grid_dataset, tiny_config, trajectory_dataset

#: every model family at a tiny size, on the 16 x 16 grid file (grid) or ragged point clouds (cloud)
FAMILIES: dict[str, tuple[str, dict]] = {
    "ono": ("grid", {"arch": "ono", "width": 16, "n_layers": 2, "ortho_dim": 4, "n_heads": 2, "attention": "nystrom", "num_landmarks": 8}),
    "ono_cloud": ("cloud", {"arch": "ono", "width": 16, "n_layers": 2, "ortho_dim": 4, "n_heads": 2}),
    "linear_transformer": ("cloud", {"arch": "linear_transformer", "width": 16, "n_layers": 1, "n_heads": 2}),
    "gnot": ("cloud", {"arch": "gnot", "width": 16, "n_layers": 1, "n_heads": 2, "n_experts": 2}),
    # the authors' release (models.gnot_official): the query skip, and coordinate statistics kept in buffers in training
    "gnot_official": ("cloud", {"arch": "gnot", "width": 16, "n_layers": 1, "n_heads": 2, "n_experts": 2, "self_query_skip": True,
                                "coord_norm": "unit_gaussian"}),
    "gt": ("grid", {"arch": "gt", "width": 16, "n_layers": 1, "n_heads": 2, "ffn_dim": 16, "modes": 4, "decoder_width": 8, "proj_width": 8}),
    "ft": ("grid", {"arch": "ft", "width": 16, "n_layers": 1, "n_heads": 2, "ffn_dim": 16, "modes": 4, "decoder_width": 8, "proj_width": 8}),
    "fno": ("grid", {"arch": "fno", "modes": 4, "width": 8, "n_layers": 2, "proj_width": 8}),
    # the FNO code's NS2d network (models.fno2d_time): a BatchNorm after each Fourier layer, its statistics kept in buffers
    "fno_batchnorm": ("grid", {"arch": "fno", "modes": 4, "width": 8, "n_layers": 2, "proj_width": 8, "norm": "batch"}),
    "vitno": ("grid", {"arch": "vitno", "patches_per_side": 4, "width": 16, "n_layers": 1, "n_heads": 2, "ffn_dim": 16, "smoothing_modes": 4, "lift_modes": 2}),
    "fano": ("grid", {"arch": "fano", "patches_per_side": 4, "width": 16, "n_layers": 1, "n_heads": 2, "ffn_dim": 16, "smoothing_modes": 4, "qkv_modes": 2}),
    "tno": ("grid", {"arch": "tno", "width": 16, "n_layers": 1, "n_heads": 2, "ffn_dim": 16}),
    "deeponet": ("grid", {"arch": "deeponet", "branch_width": 16, "trunk_width": 16, "basis": 8, "branch_layers": 2, "trunk_layers": 2}),
}

#: the Tensor methods through which a value reaches the host
CONVERSIONS = ("item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy", "cpu")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("data")
    return {"grid": grid_dataset(d / "grid.nc"), "cloud": cloud_dataset(d / "cloud.nc", [20, 17, 23, 19, 15, 21, 18], n_test=1)}


def family_run(kind: str, spec: dict, data: Path, **training) -> dict:
    cfg = tiny_config(**{"epochs": 2, **training})
    cfg["models"]["m"] = spec
    if kind == "cloud":
        cfg["datasets"]["toy"] = {"source": "toy_src", "train": 6, "test": 1, "task": {"inputs": [], "outputs": ["u"]}}
    return resolve_run(cfg, "toy", "m", str(data))


def trainer_for(run: dict, data: Path, out: Path) -> Trainer:
    cfg = TrainConfig.from_dict(run["training"])
    info, dev = opflow.train.init_distributed("cpu")
    tr = Trainer(run, cfg, info, dev, data, out, progress=False)
    tr.setup()
    tr.resume()
    return tr


@contextlib.contextmanager
def count_host_reads(where: str = "opflow") -> Iterator[list[str]]:
    """Record every tensor-to-host conversion (and ``torch.equal``) called from a module of ``where``:
    ``file:line method`` per call."""
    calls: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in CONVERSIONS}
    saved_equal = torch.equal

    def wrap(name: str, real):  # noqa: ANN001
        def counted(*args, **kwargs):  # noqa: ANN002, ANN003
            frame = sys._getframe(1)
            if frame.f_globals.get("__name__", "").startswith(where):
                calls.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {name}")
            return real(*args, **kwargs)

        return counted

    for name, real in saved.items():
        setattr(torch.Tensor, name, wrap(name, real))
    torch.equal = wrap("torch.equal", saved_equal)
    try:
        yield calls
    finally:
        for name, real in saved.items():
            setattr(torch.Tensor, name, real)
        torch.equal = saved_equal


@contextlib.contextmanager
def count_aten_value_reads() -> Iterator[list[str]]:
    """Record every read of a tensor's value into a host number at the ATen level (``aten._local_scalar_dense``),
    whoever makes it, PyTorch's own code included: a 0-dim tensor passed where an op takes a Python number is read
    so. On a GPU each read waits for the device, and inside a CUDA-graph capture it is an error ("operation not
    permitted when stream is capturing"). Per read, the innermost frames: ``file:line function`` joined by " < "."""
    from torch.utils._python_dispatch import TorchDispatchMode

    reads: list[str] = []

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            if func is torch.ops.aten._local_scalar_dense.default:
                frames = traceback.extract_stack()[-6:-1][::-1]
                reads.append(" < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames))
            return func(*args, **(kwargs or {}))

    with Reads():
        yield reads


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_step_a_cuda_graph_captures_reads_no_value_even_inside_torch(files: dict, tmp_path: Path, family: str) -> None:
    """The body that ``training.cuda_graphs`` captures (forward, loss, backward, clipping and the on-device Adam(W)
    update, opflow.train_step) makes no ATen value read, for every model family: the CPU check of the failure that
    stopped the fifth lease's capture (torch's capturable AdamW read its tensor betas; docs/gpu.md)."""
    kind, spec = FAMILIES[family]
    tr = trainer_for(family_run(kind, spec, files[kind]), files[kind], tmp_path)
    step = tr.step
    batch = opflow.train.to_device(next(iter(tr.train_batches)), tr.dev)
    step._make_capturable(tr.dev)  # the device tensors that the captured update reads lr and betas from
    with deferred_checks():
        step._graph_body(batch)  # the warm-up before a capture: it creates the optimizer state
        step.optimizer.zero_grad(set_to_none=True)
        with count_aten_value_reads() as reads:
            loss = step._graph_body(batch)
    assert reads == [], f"{family}: the captured step would read device values on the host at {reads}"
    assert torch.isfinite(loss) and all(float(st["step"]) == 2 for st in step.optimizer.state.values())


def test_the_aten_counter_sees_the_read_that_stopped_the_fifth_leases_capture() -> None:
    """The instrument: torch.optim.Adam(capturable=True)'s update with tensor betas called ``_foreach_lerp_`` with
    ``1 - beta1``, a tensor where the op takes a number (PyTorch 2.11, on an H200); the Tensor overload of
    ``_foreach_mul_`` that the on-device update uses reads nothing."""
    params, grads, beta1 = [torch.ones(3)], [torch.zeros(3)], torch.tensor(0.9)
    with count_aten_value_reads() as reads:
        torch._foreach_lerp_(params, grads, 1 - beta1)
    assert len(reads) == 1 and "test_train_step.py" in reads[0]
    with count_aten_value_reads() as reads:
        torch._foreach_mul_(params, 1 - beta1)
        torch._foreach_add_(params, grads)
    assert reads == []


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_training_step_of_every_model_family_reads_nothing_back_from_the_device(files: dict, tmp_path: Path, family: str) -> None:
    kind, spec = FAMILIES[family]
    tr = trainer_for(family_run(kind, spec, files[kind]), files[kind], tmp_path)
    batch = next(iter(tr.train_batches))
    with deferred_checks(), count_host_reads() as calls:
        loss, n = tr.step(opflow.train.to_device(batch, tr.dev))
        loss_sum = loss.double() * n
    assert calls == [], f"{family}: the step read device values on the host at {calls}"
    assert torch.isfinite(loss_sum)


def test_the_counter_sees_the_conversions_it_is_meant_to_see() -> None:
    """The instrument itself: a check of a value in opflow's code is counted, torch's own are not."""
    from opflow.models.transformer import check_batch, is_self_query

    class M:
        coord_dim, in_channels = 2, 1

    coords, inputs, mask = torch.zeros(2, 5, 2), torch.zeros(2, 5, 1), torch.ones(2, 5, dtype=torch.bool)
    with count_host_reads() as calls:
        check_batch(M(), coords, inputs, None, mask)  # type: ignore[arg-type]
        is_self_query(coords, coords.clone())
        torch.ones(3).sum().item()  # from this test module: not opflow's
    assert [c.split()[-1] for c in calls] == ["__bool__", "torch.equal"]
    with deferred_checks(), count_host_reads() as calls:
        check_batch(M(), coords, inputs, None, mask)  # type: ignore[arg-type]
        assert not is_self_query(coords, coords.clone())  # the query-stream form, which gives the same outputs
    assert calls == []


def test_the_epoch_reads_the_device_once_and_reports_a_failed_whitening_there(files: dict, tmp_path: Path) -> None:
    """A Cholesky failure inside a step is counted on the device and raised after the epoch, naming it."""
    kind, spec = FAMILIES["ono"]
    tr = trainer_for(family_run(kind, spec, files[kind]), files[kind], tmp_path)
    ort = tr.model.ortho[0].ort
    ort.fault_counts[1] += 1  # as a failed factorisation in this epoch's first step would
    with pytest.raises(FloatingPointError, match=r"toy_m epoch 1: ONO orthogonalisation: Cholesky failed .* \(1 time\(s\)\)"):
        tr.epoch(0)
    assert int(ort.fault_counts.sum()) == 0  # read and reset


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_forward_and_loss_of_every_model_family_trace_as_one_graph(files: dict, tmp_path: Path, family: str) -> None:
    """``torch.compile(fullgraph=True)`` refuses any graph break; the eager backend checks the trace
    without generating code (seconds), and the traced loss equals the eager one."""
    kind, spec = FAMILIES[family]
    tr = trainer_for(family_run(kind, spec, files[kind]), files[kind], tmp_path)
    b = opflow.train.to_device(next(iter(tr.train_batches)), tr.dev)
    torch._dynamo.reset()

    def loss_of(batch: dict) -> torch.Tensor:
        return batch_loss(tr.model, batch, tr.norms, tr.cfg)

    tr.model.eval()  # no running-statistics update: both calls see the same model
    compiled = torch.compile(loss_of, backend="eager", fullgraph=True)
    assert torch.allclose(compiled(b), loss_of(b), rtol=1e-5, atol=1e-7)


def test_training_settings_of_the_step_are_checked_and_operational() -> None:
    from opflow.config import OPERATIONAL_KEYS, job_run, run_hash

    assert TrainConfig.from_dict({"precision": "tf32"}).precision == "tf32"
    with pytest.raises(Exception, match="precision"):
        TrainConfig.from_dict({"precision": "fp16"})
    cfg = tiny_config()
    base = resolve_run(cfg, "toy", "mlp")
    graphs = resolve_run({**cfg, "training": {**cfg["training"], "cuda_graphs": True}}, "toy", "mlp")
    tf32 = resolve_run({**cfg, "training": {**cfg["training"], "precision": "tf32"}}, "toy", "mlp")
    assert "cuda_graphs" in OPERATIONAL_KEYS and run_hash(graphs) == run_hash(base)
    assert run_hash(tf32) != run_hash(base)  # TF32 products change the trained weights
    assert "cuda_graphs" not in job_run(base)["training"] and job_run(graphs)["training"]["cuda_graphs"] is True


def test_cpu_ignores_the_gpu_settings_with_a_warning(files: dict, tmp_path: Path) -> None:
    run = family_run("grid", FAMILIES["ono"][1], files["grid"], precision="tf32", cuda_graphs=True)
    with pytest.warns(RuntimeWarning) as seen:
        tr = trainer_for(run, files["grid"], tmp_path)
    text = " ".join(str(w.message) for w in seen)
    assert "precision tf32" in text and "cuda_graphs" in text
    assert not tr.tf32 and not tr.cuda_graphs and tr.step.graph is None


def test_a_checkpoint_of_a_capturable_optimizer_loads_anywhere() -> None:
    from opflow.optim import portable_state_dict

    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([p], lr=1e-3)
    p.grad = torch.ones(3)
    opt.step()
    g = opt.param_groups[0]
    g["lr"], g["betas"], g["capturable"] = torch.tensor(2e-3), (torch.tensor(0.85), torch.tensor(0.99)), True
    sd = portable_state_dict(opt)
    assert sd["param_groups"][0]["lr"] == pytest.approx(2e-3) and sd["param_groups"][0]["betas"] == pytest.approx((0.85, 0.99))
    assert sd["param_groups"][0]["capturable"] is False and sd["state"][0]["step"].device.type == "cpu"
    fresh = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=1e-3)
    fresh.load_state_dict(sd)
    fresh.param_groups[0]["params"][0].grad = torch.ones(3)
    fresh.step()  # a plain CPU AdamW steps from it


# ------------------------------------------------------------- a CUDA graph's replay, emulated on the CPU


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


#: ATen operations that write arguments their schema does not mark as written: native_batch_norm updates its running
#: mean and variance in training (its schema types them ``Tensor?``, not ``Tensor(a!)?``)
UNDECLARED_WRITES: dict = {torch.ops.aten.native_batch_norm.default: (3, 4)}


class ReplayedGraph:
    """A CUDA graph as the CPU can emulate one, in place of ``torch.cuda.CUDAGraph`` for opflow.train_step: the ATen
    operations that ran inside the capture, recorded once with their Python arguments as they were then and their
    tensors by identity (a graph's fixed memory). :meth:`replay` runs them again in order and writes each result into
    the tensor that the capture made. What a real capture freezes is frozen here too: a Python number taken from the
    schedule, the step count or a tensor's value while capturing stays that number in every replay, and only what the
    step writes into the graph's tensors between replays (the batch, the learning rate and betas) changes."""

    def __init__(self) -> None:
        self.ops: list[tuple] = []
        self.replays = 0

    def replay(self) -> None:
        from torch.utils._pytree import tree_leaves

        with torch.no_grad():  # the backward's operations are among the recorded ones
            for func, args, kwargs, out in self.ops:
                new = func(*args, **kwargs)
                inputs = {_storage(a) for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
                for o, n in zip(tree_leaves(out), tree_leaves(new), strict=True):
                    if isinstance(o, torch.Tensor) and o is not n and _storage(o) not in inputs:  # views and in-place results are there already
                        o.copy_(n)
        self.replays += 1


@contextlib.contextmanager
def emulated_cuda_graphs() -> Iterator[list[ReplayedGraph]]:
    """``training.cuda_graphs`` on the CPU: the capture path of opflow.train_step as it runs on CUDA (warm-up,
    restore, capture, the batch copied into the captured tensors, replay), with torch.cuda's streams, RNG state and
    graph replaced by CPU stand-ins; the graphs made, for the test to inspect."""
    from torch.utils._python_dispatch import TorchDispatchMode

    graphs: list[ReplayedGraph] = []

    from torch.utils._pytree import tree_leaves

    class Record(TorchDispatchMode):
        """Records the operations; keeps the first value of every tensor they write, for :func:`capture` to put back."""

        def __init__(self, graph: ReplayedGraph) -> None:
            super().__init__()
            self.graph, self.before = graph, {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            kwargs = kwargs or {}
            for i, a in enumerate(func._schema.arguments):
                if (a.alias_info is not None and a.alias_info.is_write) or i in UNDECLARED_WRITES.get(func, ()):
                    value = args[i] if i < len(args) else kwargs.get(a.name)
                    for t in tree_leaves(value):
                        if isinstance(t, torch.Tensor) and id(t) not in self.before:
                            self.before[id(t)] = (t, t.detach().clone())
            out = func(*args, **kwargs)
            self.graph.ops.append((func, args, kwargs, out))
            return out

    class Stream:
        def wait_stream(self, other: object) -> None:
            pass

    def new_graph() -> ReplayedGraph:
        graphs.append(ReplayedGraph())
        return graphs[-1]

    @contextlib.contextmanager
    def capture(graph: ReplayedGraph, **kwargs: object) -> Iterator[None]:
        """A capture records kernels without running them: what the recording ran is undone (every tensor written,
        the random-number state), so that the first replay is the step's first run, as on a GPU."""
        rng = torch.get_rng_state()
        with Record(graph) as rec:
            yield
        with torch.no_grad():
            for t, value in rec.before.values():
                t.copy_(value)
        torch.set_rng_state(rng)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("opflow.train_step.CAPTURE_DEVICES", ("cuda", "cpu"))
        for name, value in {"Stream": Stream, "current_stream": Stream, "stream": lambda s: contextlib.nullcontext(),
                            "synchronize": lambda *a: None, "get_rng_state": lambda *a: None, "set_rng_state": lambda *a: None,
                            "CUDAGraph": new_graph, "graph": capture}.items():
            mp.setattr(torch.cuda, name, value)
        yield graphs


def _train_steps(family: str, files: dict, out: Path, graphs: bool, freeze_schedule: bool = False) -> tuple[dict[str, torch.Tensor], list]:
    """The weights and buffers after the run's TrainStep calls (plain, or with the step captured), and the learning
    rates."""
    kind, spec = FAMILIES[family]
    # every batch of one shape (the 6 clouds, padded to 23 points, in one batch): a batch of another shape takes the
    # eager step, and torch's AdamW runs its capturable (on-device) update on CUDA only; the CUDA test below covers that
    run = family_run(kind, spec, files[kind], **({"batch_size": 6, "epochs": 3} if kind == "cloud" else {"epochs": 1}))
    tr = trainer_for(run, files[kind], out)
    step, lrs = tr.step, []
    step.graphs_wanted = graphs
    batches = [opflow.train.to_device(b, tr.dev) for b in tr.train_batches]
    with deferred_checks():
        for _ in range(run["training"]["epochs"]):
            for b in batches:
                step(b)
                lrs.append(step.lr_used)
                if freeze_schedule:
                    step._hyper = []  # what a graph with the schedule's numbers baked in would train
    return {k: t.detach().clone().double() for k, t in step.model.state_dict().items()}, lrs  # the parameters and the buffers


#: parameters whose gradient is zero but for round-off: the biases added just before a BatchNorm, which its centring
#: removes. Adam turns a round-off gradient into a step of about lr of either sign, so two exact runs differ there
#: at the scale of the learning rate, not of float32's rounding.
NULL_GRADIENT: dict[str, tuple[str, ...]] = {"fno_batchnorm": ("lift.bias", "layers.0.pointwise.bias", "layers.1.pointwise.bias")}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_captured_step_replayed_trains_the_weights_of_the_plain_step(files: dict, tmp_path: Path, family: str) -> None:
    """``training.cuda_graphs`` through the real capture and replay code of opflow.train_step, with the CUDA graph
    emulated on the CPU (:class:`ReplayedGraph`: every value the capture took stays frozen, as on a GPU): the replays
    of a whole 1cycle run (3 steps, the learning rate changing by orders of magnitude between them) train the weights
    of the plain step, for every model family (measured: at most 2.3e-6 apart, ONO; with the schedule frozen into the
    graph 5.5e-4, the next test). The CUDA test below checks the same on a GPU."""
    plain, lrs = _train_steps(family, files, tmp_path / "plain", graphs=False)
    with emulated_cuda_graphs() as graphs:
        captured, lrs_captured = _train_steps(family, files, tmp_path / "captured", graphs=True)
    assert len(graphs) == 1 and graphs[0].ops and graphs[0].replays >= 3, family
    assert lrs_captured == lrs and max(lrs) / min(lrs) > 100
    assert plain.keys() == captured.keys()
    worst = max(float((plain[k] - captured[k]).abs().max()) for k in plain if k not in NULL_GRADIENT.get(family, ()))
    assert worst < 2e-5, f"{family}: the replayed step trained other weights (max difference {worst:.3g})"
    for k in NULL_GRADIENT.get(family, ()):  # Adam moves each by at most about lr per step, whatever its (round-off) gradient
        assert float((plain[k] - captured[k]).abs().max()) <= 2 * sum(lrs), (family, k)


#: the families whose forward writes buffers in training: ONO's running covariance and batch count, the released GNOT's
#: coordinate statistics, BatchNorm's running mean, variance and batch count
WRITE_BUFFERS = ("fno_batchnorm", "gnot_official", "ono", "ono_cloud")


def test_the_families_whose_training_step_writes_buffers_are_those_listed(files: dict, tmp_path: Path) -> None:
    """The list the compiled-buffers test below runs on is complete: one plain step of every family changes a
    persistent buffer exactly where WRITE_BUFFERS says so (a new model that keeps statistics joins the list)."""
    writes = set()
    for family, (kind, spec) in FAMILIES.items():
        tr = trainer_for(family_run(kind, spec, files[kind], epochs=1), files[kind], tmp_path / family)
        names = [k for k, _ in tr.model.named_buffers() if k in tr.model.state_dict()]
        before = {k: tr.model.state_dict()[k].clone() for k in names}
        with deferred_checks():
            tr.step(opflow.train.to_device(next(iter(tr.train_batches)), tr.dev))
        if any(not torch.equal(before[k], tr.model.state_dict()[k]) for k in names):
            writes.add(family)
    assert writes == set(WRITE_BUFFERS)


@pytest.mark.parametrize("family", WRITE_BUFFERS)
def test_a_compiled_step_writes_the_buffers_of_the_plain_step(files: dict, tmp_path: Path, family: str) -> None:
    """``training.compile`` is operational: after an epoch of compiled steps, the weights and every buffer equal the
    plain step's. Under inductor (CPU, torch 2.13) an in-place update of a 0-dim float64 buffer was lost: GNOT's point
    count stayed 0, so a compiled run standardised its coordinates with scale 1 (the elasticity972 CPU run, 2026-11-27)."""
    reason = compile_unsupported(torch.device("cpu"))
    if reason is not None:
        pytest.skip(reason)
    kind, spec = FAMILIES[family]
    states = []
    for compile in (False, True):
        torch._dynamo.reset()
        run = family_run(kind, spec, files[kind], compile=compile, epochs=1)
        tr = trainer_for(run, files[kind], tmp_path / f"compile{compile}")
        lrs = []
        with deferred_checks():
            for b in tr.train_batches:
                tr.step(opflow.train.to_device(b, tr.dev))
                lrs.append(tr.step.lr_used)
        assert (tr.step.loss_fn is tr.step._plain_loss_fn) is not compile, f"{family}: compile={compile}, but the step ran {'plain' if compile else 'compiled'}"
        states.append({k: v.detach().clone() for k, v in tr.model.state_dict().items()})
    plain, compiled = states
    buffers = {k for k, _ in tr.model.named_buffers()} & set(plain)
    assert buffers and any(float(plain[k].double().abs().max()) > 0 for k in buffers), family
    reach = 2 * sum(lrs)  # how far Adam can move a parameter in the epoch, whatever its gradient
    for k in plain:
        # the weights: float32 rounding of the compiled kernels, which AdamW's normalised update turns into up to 3e-5
        # (ONO) after an epoch; the buffers (statistics of what the model saw): to rounding. Where some parameters have
        # a null gradient (NULL_GRADIENT), those and the statistics that see them (BatchNorm's running mean and
        # variance of their sums) agree to Adam's reach; the batch counts exactly
        if not plain[k].is_floating_point():
            rtol, atol = 0.0, 0.0
        elif family in NULL_GRADIENT and (k in buffers or k in NULL_GRADIENT[family]):
            rtol, atol = 0.0, reach
        else:
            rtol, atol = (1e-4, 1e-5) if k in buffers else (0.0, 1e-3)
        worst = float((compiled[k].double() - plain[k].double()).abs().max())
        assert compiled[k].shape == plain[k].shape and torch.allclose(compiled[k].double(), plain[k].double(), rtol=rtol, atol=atol), (
            f"{family}: {k} after compiled steps differs from the plain step's (max {worst:.3g})")


@pytest.mark.parametrize("family", ["fno_batchnorm", "gt"])
def test_a_compile_that_fails_after_part_of_the_forward_ran_leaves_the_plain_steps_run(
    files: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str
) -> None:
    """Where the first compiled step fails after some of it ran (a graph break runs the graph before it, then a later
    graph fails to compile), what that part wrote is put back before the plain step runs: BatchNorm's running statistics
    (fno_batchnorm) and the random numbers the dropouts drew (gt). The run equals the plain one, bit for bit."""
    import opflow.train_step as train_step

    def fails_late(fn, *a, **k):  # noqa: ANN001, ANN202 - torch.compile's stand-in: the forward runs, then the compile fails
        def compiled(*args, **kwargs):  # noqa: ANN202
            fn(*args, **kwargs)
            raise RuntimeError("InductorError: a later graph")
        return compiled

    kind, spec = FAMILIES[family]
    states = []
    for compile in (False, True):
        with monkeypatch.context() as mp:
            mp.setattr(train_step.torch, "compile", fails_late)
            tr = trainer_for(family_run(kind, spec, files[kind], compile=compile, epochs=1), files[kind], tmp_path / f"c{compile}")
        torch.manual_seed(1)
        with deferred_checks():
            for b in tr.train_batches:
                tr.step(opflow.train.to_device(b, tr.dev))
        if compile:
            assert tr.step.loss_fn is tr.step._plain_loss_fn  # it fell back to the plain step
        states.append(tr.model.state_dict())
    for k, v in states[0].items():
        assert torch.equal(v, states[1][k]), f"{family}: {k} differs after the failed compile"


def test_the_replay_comparison_sees_a_schedule_frozen_into_the_graph(files: dict, tmp_path: Path) -> None:
    """The instrument: with the learning rate and betas not written into the graph's tensors between replays, the
    replayed step trains weights far from the plain step's."""
    plain, _ = _train_steps("fno", files, tmp_path / "plain", graphs=False)
    with emulated_cuda_graphs():
        frozen, _ = _train_steps("fno", files, tmp_path / "frozen", graphs=True, freeze_schedule=True)
    assert max(float((plain[k] - frozen[k]).abs().max()) for k in plain) > 2e-4  # 10x the tolerance above


# ------------------------------------------------------------------------------------------ CUDA

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("family", ["ono", "gt", "gnot", "fno", "vitno"])
def test_on_cuda_an_epoch_makes_no_synchronising_call_inside_its_steps(files: dict, tmp_path: Path, family: str) -> None:
    kind, spec = FAMILIES[family]
    run = family_run(kind, spec, files[kind], device="cuda", data_on_device="auto")
    cfg = TrainConfig.from_dict(run["training"])
    info, dev = opflow.train.init_distributed("cuda")
    tr = Trainer(run, cfg, info, dev, files[kind], tmp_path, progress=False)
    tr.setup()
    tr.resume()
    batches = [opflow.train.to_device(b, dev) for b in tr.train_batches]
    tr.step(batches[0])  # first call: lazy optimizer state, cuBLAS handles
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with deferred_checks():
            for b in batches[1:]:
                tr.step(b)
    finally:
        torch.cuda.set_sync_debug_mode(0)


#: GT without its default dropouts: the weights are compared with the plain step's, and a captured graph
#: may draw other (equally valid) random numbers than the eager step
NO_DROPOUT = {"gt": {"dropout": 0.0, "ffn_dropout": 0.0}}


@cuda
@pytest.mark.parametrize("family", ["ono", "gt", "fno", "gnot"])
def test_on_cuda_the_captured_step_trains_the_weights_of_the_plain_step(files: dict, tmp_path: Path, family: str) -> None:
    kind, spec = FAMILIES[family]
    spec = {**spec, **NO_DROPOUT.get(family, {})}
    weights = {}
    for graphs in (False, True):
        run = family_run(kind, spec, files[kind], device="cuda", data_on_device=True, cuda_graphs=graphs, epochs=3)
        res = opflow.train.train(run, files[kind], tmp_path / str(graphs), progress=False)
        weights[graphs] = opflow.train.load_model(res.model_path)[0].state_dict()
        if graphs:
            assert "captured as one CUDA graph" in (tmp_path / str(graphs) / "train.log").read_text()
    for k, v in weights[False].items():
        if v.is_floating_point():
            assert torch.allclose(v, weights[True][k], rtol=1e-3, atol=1e-5), k


@cuda
def test_on_cuda_a_model_with_dropout_is_captured_and_trains(files: dict, tmp_path: Path) -> None:
    kind, spec = FAMILIES["gt"]  # dropout 0.1, FFN dropout 0.05 (the hyperparameters' defaults)
    losses = {}
    for graphs in (False, True):
        run = family_run(kind, spec, files[kind], device="cuda", data_on_device=True, cuda_graphs=graphs, epochs=3)
        res = opflow.train.train(run, files[kind], tmp_path / str(graphs), progress=False)
        losses[graphs] = [c["train_loss"] for c in res.curves]
    assert "captured as one CUDA graph" in (tmp_path / "True" / "train.log").read_text()
    captured, plain = losses[True], losses[False]
    assert all(math.isfinite(x) for x in captured) and len(set(captured)) > 1, captured  # the replays update the weights
    assert captured == pytest.approx(plain, rel=0.05), (captured, plain)  # other dropout masks, the same training


# ----------------------------------------------------------------------------------- unrolled training

UNROLL_VIEW = {"kind": "window", "history": 2, "frames": [1, 8], "train_frames": [3, 6]}  # 4 training frames per trajectory


def unroll_run(data: Path, unroll: str, model: dict | None = None, **training) -> dict:
    cfg = {
        "datasets": {"toy": {"source": "src", "train": 6, "test": 4, "view": UNROLL_VIEW}},
        "models": {"m": model or {"arch": TEST_ARCH, "width": 16}},
        "training": {"epochs": 2, "batch_size": 4, "seed": 0, "device": "cpu", "threads": 1, "unroll": unroll,
                     "input_normalizer": "pointwise", "output_normalizer": "pointwise", **training},
    }
    return resolve_run(cfg, "toy", "m", str(data))


@pytest.fixture(scope="module")
def traj(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trajectory_dataset(tmp_path_factory.mktemp("traj") / "w.nc")


@pytest.mark.parametrize("loss_space", ["physical", "normalized"])
def test_unrolled_on_the_truth_the_loss_is_the_sum_of_the_teacher_forced_pair_losses(traj: Path, tmp_path: Path, loss_space: str) -> None:
    tr = trainer_for(unroll_run(traj, "truth", loss_space=loss_space), traj, tmp_path / "m")
    model, cfg, norms = tr.model.eval(), tr.cfg, tr.norms
    b = collate([tr.train_ds[s] for s in range(3)])
    assert b["rollout_steps"] == 4 and b["inputs"].shape[-1] == 2
    pairs = WindowDataset(traj, "train", None, UNROLL_VIEW)  # pair s * 4 + p: trajectory s, training frame 3 + p
    by_hand = sum(batch_loss(model, collate([pairs[s * 4 + p] for s in range(3)]), norms, cfg) for p in range(4))
    with torch.no_grad():
        torch.testing.assert_close(batch_loss(model, b, norms, cfg), by_hand)


def test_unrolled_on_predictions_the_loss_follows_the_model_and_backpropagates_through_the_unroll(traj: Path, tmp_path: Path) -> None:
    tr = trainer_for(unroll_run(traj, "prediction"), traj, tmp_path / "m")
    model, cfg, norms = tr.model.eval(), tr.cfg, tr.norms
    b = collate([tr.train_ds[s] for s in range(3)])

    def step(bb):
        return norms.outputs.decode(opflow.train.forward(model, bb, norms), bb.get("grid_shape"))

    pred = rollout(step, b, 4, 1)  # the evaluation's rollout: each prediction fed back
    rel = torch.linalg.vector_norm(pred - b["target"], dim=1) / torch.linalg.vector_norm(b["target"], dim=1)  # (B, steps)
    loss = batch_loss(model, b, norms, cfg)
    torch.testing.assert_close(loss, rel.sum(1).mean())
    # the gradient of the last step's loss reaches the first step's prediction: the unroll is not detached
    last = list(model.parameters())[0]
    g_pred = torch.autograd.grad(loss, last)[0]
    cfg_truth = TrainConfig.from_dict({**tr.run["training"], "unroll": "truth"})
    g_truth = torch.autograd.grad(batch_loss(model, b, norms, cfg_truth), last)[0]
    assert not torch.allclose(g_pred, g_truth)


def test_unrolled_training_takes_one_optimiser_step_per_batch_of_trajectories_and_one_forward_per_frame(traj: Path, tmp_path: Path) -> None:
    onos = {"arch": "ono", "width": 16, "n_layers": 2, "ortho_dim": 4, "n_heads": 2}
    tr = trainer_for(unroll_run(traj, "truth", onos, batch_size=3), traj, tmp_path / "m")
    assert len(tr.train_ds) == 6 and len(tr.loader) == 2  # 6 trajectories, batch 3: 2 steps per epoch (pairs: 8)
    assert tr.scheduler.total_steps == 2 * 2
    calls = []
    hook = tr.model.register_forward_hook(lambda m, a, out: calls.append(out.shape))
    steps = []
    step_hook = tr.optimizer.register_step_post_hook(lambda opt, a, k: steps.append(1))
    tr.epoch(0)
    hook.remove()
    step_hook.remove()
    assert len(steps) == 2
    # 4 frames predicted per optimiser step (each updates ONO's running covariance, as the release's loop does),
    # then the test rollout: 4 trajectories, 6 frames each, one batch of 3 and one of 1
    assert len(calls) == 2 * 4 + 2 * 6


def test_unrolled_training_needs_a_window_view_and_leaves_the_pair_runs_hash_alone(traj: Path, files: dict, tmp_path: Path) -> None:
    from opflow.data.errors import ConfigError

    run = resolve_run(tiny_config(unroll="truth"), "toy", "mlp", str(files["grid"]))
    with pytest.raises(ConfigError, match=r"training.unroll: truth .* but it is a 2-D grid .* needs a window view .* set training.unroll: none"):
        trainer_for(run, files["grid"], tmp_path / "m")
    plain = unroll_run(traj, "none")
    assert "unroll" not in run_identity(plain)["training"]
    assert run_identity(unroll_run(traj, "truth"))["training"]["unroll"] == "truth"
    assert run_hash(plain) != run_hash(unroll_run(traj, "truth"))
