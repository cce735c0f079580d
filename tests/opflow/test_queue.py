"""The GPU lease queue (opflow/queue.py): a checked file, state and value derived from the records, and the
pairs a lease of given minutes takes."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from opflow import lease_state
from opflow.cli import main
from opflow.data.errors import ConfigError
from opflow.queue import DEFAULT_QUEUE, carry_plan, cpu_state, derive, load_queue, next_pairs, protocol_epochs, standing, table
from opflow.reference import load_reference


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "queue.yaml"
    p.write_text(text)
    return p


class Ref:
    def __init__(self, dataset: str, model: str) -> None:
        self.dataset, self.model = dataset, model


QUEUE = """
queue:
  - {pair: a/m, gpu_minutes: 10, source: measured}
  - {pair: b/m, gpu_minutes: 5, source: measured}
  - {pair: c/m, gpu_minutes: 100, source: estimate}
  - {pair: d/m, gpu_minutes: 4, source: estimate, blocked: "no data"}
  - {pair: e/m, gpu_minutes: 8, source: measured}
"""


def test_the_committed_queue_loads_and_names_only_pairs_of_the_paper_profile():
    entries = load_queue(DEFAULT_QUEUE)
    assert entries and all(e.gpu_minutes > 0 and e.source for e in entries)
    epochs = protocol_epochs([Path(DEFAULT_QUEUE).parent / "default.yaml"], entries)
    assert set(epochs) == {e.pair for e in entries}
    derived = derive(entries, load_reference())
    assert all(e.numbers >= 0 for e in derived)


@pytest.mark.parametrize("text, msg", [
    ("queue: 3", "top-level 'queue:' list"),
    ("queue: [{pair: a, gpu_minutes: 1, source: x}]", "pair must be 'dataset/model'"),
    ("queue: [{pair: a/m, gpu_minutes: 0, source: x}]", "gpu_minutes must be a number of minutes > 0"),
    ("queue: [{pair: a/m, gpu_minutes: 1}]", "source must say where"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x, when: now}]", r"unknown key\(s\) \['when'\]"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x}, {pair: a/m, gpu_minutes: 2, source: y}]", "queued twice"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x}]\ncpu: [{pair: a/m, note: ''}]", r"cpu\[0\]: an entry is \{pair, note, compile\?\}"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x}]\ncpu: [{pair: a/m, note: x, compile: yes please}]", r"cpu\[0\]: compile is true or false"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x}]\ncpu: [{pair: a/m, note: x, threads: 2}]", r"cpu\[0\]: an entry is \{pair, note, compile\?\}"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x}]\ncpu: [{pair: b/m, note: soon}]", "'b/m' is not a pair of the queue"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x}]\ncpu: [{pair: a/m, note: x}, {pair: a/m, note: y}]", r"cpu\[1\]: a/m is listed twice"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x, blocked: why}]\ncpu: [{pair: a/m, note: x}]", r"the pair is blocked \(why\)"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x}]\ncpu: {pair: a/m}", "cpu, when given, is a list"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x, data: ../elsewhere/a.nc}]", r"data, when given, is the path of the file the pair reads"),
    ("queue: [{pair: a/m, gpu_minutes: 1, source: x, data: data/a/all.zarr}]", r"\(data/<dataset>/<file>.nc\), got 'data/a/all.zarr'"),
])
def test_a_bad_queue_entry_is_named(tmp_path, text, msg):
    with pytest.raises(ConfigError, match=msg):
        load_queue(write(tmp_path, text))


def unfinished(root: Path, pair: str, epochs: int, size: int = 1000) -> Path:
    """What scripts/queue_pull.sh leaves of a pair a lease did not finish: published/<pair>/ with its curves and the
    pointer, the checkpoint in root/.lease-state/<pair>/."""
    folder = root / "published" / pair
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "curves.json").write_text(json.dumps([{"epoch": i} for i in range(1, epochs + 1)]))
    pulled = root / "pulled" / pair / "checkpoint.pt"
    pulled.parent.mkdir(parents=True, exist_ok=True)
    pulled.write_bytes(b"x" * size)
    lease_state.keep(root, folder, pulled, epochs)
    return folder


def test_state_value_and_order_come_from_the_records_and_the_reference(tmp_path):
    pub = tmp_path / "published"
    (pub / "a_m").mkdir(parents=True)
    (pub / "a_m" / "record.json").write_text("{}")  # done
    unfinished(tmp_path, "c_m", 40)  # in progress: 40 of 100 epochs
    refs = [Ref("a", "m"), Ref("b", "m"), Ref("c", "m"), Ref("c", "m"), Ref("c", "m"), Ref("c", "m"), Ref("c", "m"), Ref("e", "m")]
    entries = derive(load_queue(write(tmp_path, QUEUE)), refs, pub, {"c/m": 100}, root=tmp_path)
    by = {e.pair: e for e in entries}
    assert [by[p].state for p in ("a/m", "b/m", "c/m", "d/m", "e/m")] == ["done", "pending", "in progress", "blocked", "pending"]
    assert by["c/m"].epochs_done == 40 and by["c/m"].remaining_minutes == pytest.approx(60.0)
    assert by["c/m"].numbers == 5 and by["a/m"].remaining_minutes == 0 and by["c/m"].ready and by["c/m"].checkpoint_bytes == 1000
    # value per GPU minute: b 1/5, e 1/8, c 5/100; then done and blocked last
    assert [e.pair for e in entries] == ["b/m", "e/m", "c/m", "a/m", "d/m"]
    assert [e.pair for e in next_pairs(entries, 14)] == ["b/m", "e/m"]  # 5 + 8 <= 14, and 1 minute left: nothing more
    assert [e.pair for e in next_pairs(entries, 2)] == ["b/m"]  # the first is taken even when it does not fit
    assert [e.pair for e in next_pairs(entries, 11)] == ["b/m", "e/m"]  # b fits; 6 minutes left (>= 3): e for the rest
    assert [e.pair for e in next_pairs(entries, 7.9)] == ["b/m"]  # 2.9 minutes left: not worth a start
    assert next_pairs([e for e in entries if e.state in ("done", "blocked")], 100) == []


def test_the_command_prints_the_table_and_the_next_targets(tmp_path, capsys):
    assert main(["queue"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| # | pair | state |") and "darcy/ono" in out
    assert main(["queue", "--next", "1", "--targets"]) == 0
    targets = capsys.readouterr().out.split()
    assert len(targets) == 1 and targets[0].startswith("results/") and targets[0].endswith(".json")
    assert main(["queue", "--next", "1", "--share-gpu"]) == 0
    assert capsys.readouterr().out.strip() == "1"
    assert main(["queue", "--next", "0"]) == 2
    assert "--next" in capsys.readouterr().err


def test_a_pair_trained_on_the_cpu_is_kept_out_of_the_leases_with_its_epochs_from_the_working_tree(tmp_path, capsys):
    text = QUEUE + "  - {pair: f/m, gpu_minutes: 1, source: measured}\ncpu:\n  - {pair: f/m, note: since today}\n"
    models = tmp_path / "models"
    (models / "f_m").mkdir(parents=True)
    (models / "f_m" / "curves.json").write_text(json.dumps([{"epoch": i, "epoch_time_s": 60.0} for i in range(1, 11)]))
    entries = derive(load_queue(write(tmp_path, text)), [Ref("f", "m")] * 3, tmp_path / "published", {"f/m": 40}, models)
    f = next(e for e in entries if e.pair == "f/m")
    assert f.state == "on the CPU" and f.epochs_done == 10 and f.remaining_minutes == pytest.approx(0.75)
    assert "| f/m | on the CPU (10 of 40 epochs, ~30 min left at its pace): since today |" in table(entries)  # 30 x 60 s
    assert f not in next_pairs(entries, 1000)  # the most valuable pair, but not a lease's
    assert main(["queue", "--cpu-targets", "--queue", str(write(tmp_path, text))]) == 2  # its pairs are not the paper profile's: named before anything runs
    assert "is not a dataset/model pair of the paper profile" in capsys.readouterr().err
    assert main(["queue", "--cpu-targets"]) == 0  # the committed queue's CPU training
    assert all(t.startswith("results/") and t.endswith(".json") for t in capsys.readouterr().out.split())
    assert main(["queue", "--cpu-note"]) == 0  # its line of the cpu: list (the record's note once it is published)
    current = [e.cpu_note for e in derive(load_queue(DEFAULT_QUEUE), load_reference()) if e.state == "on the CPU"]
    assert capsys.readouterr().out.strip() == " ".join(current) and all(current)
    assert main(["queue", "--cpu-compile"]) == 0  # whether it trains compiled: its cpu: entry's compile
    compiled = [e.cpu_compile for e in derive(load_queue(DEFAULT_QUEUE), load_reference()) if e.state == "on the CPU"]
    assert capsys.readouterr().out.strip() == str(int(any(compiled)))


def test_the_cpu_compiles_exactly_the_pairs_of_its_list_that_measured_faster_compiled():
    """config/queue.yaml's ``compile:`` of each cpu: entry is the decision of the committed CPU measurement of that
    pair (benchmarks/results/train_speed_compile_cpu*.json: the trainer's step plain against compiled, 2 cores, the
    median of the rounds): compiled where that step was faster, plain otherwise. The inverse problem's three noise
    levels train one model on one grid, so the measured one stands for the others; any other pair needs its own."""
    measured: dict[str, float] = {}
    for path in sorted((Path(DEFAULT_QUEUE).parents[1] / "benchmarks" / "results").glob("train_speed_compile_cpu*.json")):
        for pair, m in json.loads(path.read_text())["pairs"].items():
            assert m["compiled_over_plain_median"] == pytest.approx(statistics.median(m["compiled_over_plain_per_round"]))
            measured[pair] = m["compiled_over_plain_median"]
    listed = [e for e in load_queue(DEFAULT_QUEUE) if e.cpu_rank is not None]
    ratio = {e.pair: measured.get(e.pair, measured.get(e.pair.split("_eps")[0] + "_eps0/" + e.model)) for e in listed}
    assert None not in ratio.values(), f"no CPU compile measurement for {[p for p, r in ratio.items() if r is None]}"
    assert {e.pair: e.cpu_compile for e in listed} == {p: r < 1.0 for p, r in ratio.items()}
    assert any(e.cpu_compile for e in listed) and not all(e.cpu_compile for e in listed)  # GNOT compiled, GT / FT plain


def test_the_cpu_trains_its_list_in_order_skipping_what_a_lease_finished_or_started(tmp_path):
    """Only the CPU's pair now is out of the leases; the later ones stay open to them until their turn."""
    text = QUEUE + "cpu:\n  - {pair: e/m, note: first}\n  - {pair: b/m, note: second}\n  - {pair: a/m, note: third}\n"
    pub = tmp_path / "published"

    def states() -> dict[str, str]:
        return {e.pair: e.state for e in derive(load_queue(write(tmp_path, text)), [], pub, {})}

    assert states()["e/m"] == "on the CPU" and states()["b/m"] == "pending"
    line = next(ln for ln in table(derive(load_queue(write(tmp_path, text)), [], pub, {})).splitlines() if "| b/m |" in ln)
    assert "pending (on the CPU's list, place 2: second)" in line
    (pub / "e_m").mkdir(parents=True)
    (pub / "e_m" / "record.json").write_text("{}")  # the CPU's first pair published: the second one's turn
    assert states()["e/m"] == "done" and states()["b/m"] == "on the CPU"
    unfinished(tmp_path, "b_m", 2)  # a lease had started it (hypothetically): the GPU keeps it
    s = states()
    assert s["b/m"] == "in progress" and s["a/m"] == "on the CPU"


def test_where_each_pair_stands_in_words_for_the_report(tmp_path):
    """opflow.queue.standing: the open pairs numbered in the order the leases take them, with their GPU minutes left
    and their place in the CPU's list; the CPU's pair; a blocked pair's reason; nothing for a done pair."""
    text = QUEUE + "cpu:\n  - {pair: e/m, note: first}\n  - {pair: c/m, note: second}\n"
    pub = tmp_path / "published"
    (pub / "a_m").mkdir(parents=True)
    (pub / "a_m" / "record.json").write_text("{}")
    refs = [Ref("b", "m"), Ref("c", "m"), Ref("e", "m")]
    where = standing(derive(load_queue(write(tmp_path, text)), refs, pub, {}))
    assert where == {
        ("b", "m"): "queued for the GPU leases: place 1 of 2, about 5 GPU minutes left (opflow queue)",
        ("c", "m"): "queued for the GPU leases: place 2 of 2, about 100 GPU minutes left (opflow queue); place 2 in the CPU list",
        ("e", "m"): "training on the CPU now, in the background (the cpu: list of config/queue.yaml)",
        ("d", "m"): "queued for the GPU leases but blocked: no data",
    }


def test_a_pair_in_progress_is_taken_only_with_its_checkpoint_here_and_within_what_a_command_carries(tmp_path):
    """On the GPU machine, a pair in progress whose checkpoint did not come (or is not the one of its pointer) is
    not trained: it would start again from scratch. On the CPU machine the checkpoints chosen must fit the carry."""
    text = "queue:\n" + "".join(f"  - {{pair: {p}/m, gpu_minutes: 10, source: measured}}\n" for p in "abc")
    refs = [Ref("a", "m"), Ref("b", "m"), Ref("c", "m")]
    unfinished(tmp_path, "a_m", 90, size=3000)
    unfinished(tmp_path, "b_m", 90, size=2000)

    def chosen(minutes: float, budget: int | None = None) -> list[str]:
        entries = derive(load_queue(write(tmp_path, text)), refs, tmp_path / "published", {f"{p}/m": 100 for p in "abc"}, root=tmp_path)
        return [e.pair for e in next_pairs(entries, minutes, carry_budget=budget)]

    assert chosen(5) == ["a/m", "b/m", "c/m"]  # 1 + 1 minute left of each, then c for the 3 minutes left
    assert chosen(5, budget=4000) == ["a/m", "c/m"]  # b's checkpoint does not fit beside a's: it waits
    assert chosen(5, budget=2500) == ["b/m", "c/m"]
    (tmp_path / ".lease-state/a_m/checkpoint.pt").write_bytes(b"y" * 3000)  # another file of the same size
    assert chosen(5) == ["b/m", "c/m"]
    (tmp_path / ".lease-state/b_m/checkpoint.pt").unlink()  # not carried
    assert chosen(5) == ["c/m"]
    entries = derive(load_queue(write(tmp_path, text)), refs, tmp_path / "published", {f"{p}/m": 100 for p in "abc"}, root=tmp_path)
    assert "| b/m | in progress (90 of 100 epochs), its checkpoint is not here" in table(entries)
    (tmp_path / "published/c_m").mkdir()
    (tmp_path / "published/c_m/checkpoint.pt").write_bytes(b"x")  # the old way: a checkpoint among the tracked files
    with pytest.raises(ConfigError, match=r"c_m/checkpoint.pt: a lease checkpoint in the tracked files; keep it out of the tree with `opflow queue --keep"):
        derive(load_queue(write(tmp_path, text)), refs, tmp_path / "published", root=tmp_path)


def test_the_carry_of_a_lease_is_the_wheels_and_the_checkpoints_it_resumes(tmp_path, monkeypatch):
    text = "queue:\n" + "".join(f"  - {{pair: {p}/m, gpu_minutes: 10, source: measured}}\n" for p in "ab")
    unfinished(tmp_path, "b_m", 50, size=3000)
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl/x-1-py3-none-any.whl").write_bytes(b"w" * 100)
    monkeypatch.setattr("opflow.queue.tracked_bytes", lambda root: 5000)
    entries = derive(load_queue(write(tmp_path, text)), [Ref("a", "m"), Ref("b", "m")], tmp_path / "published", {"a/m": 100, "b/m": 100}, root=tmp_path)
    paths, line = carry_plan(entries, 8, root=tmp_path)
    assert paths == [".whl", ".lease-state/b_m"]  # b (5 minutes left) resumes, then a starts for the 3 minutes left
    assert line == "carry: the tree 0.0 MB + the wheels 0.0 MB + 1 checkpoint(s) 0.0 MB = 0.0 MB of 67.1 MB; the lease trains b/m a/m"
    monkeypatch.setattr("opflow.queue.tracked_bytes", lambda root: lease_state.CARRY_LIMIT - 3000)  # no room for it
    paths, line = carry_plan(entries, 8, root=tmp_path)
    assert paths == [".whl"] and line.splitlines()[0].endswith("the lease trains a/m")
    assert line.splitlines()[1] == ("warning: b/m is in progress and would resume, but its checkpoint (0.0 MB) does not fit the 0.0 MB left "
                                    "beside the tree and the wheels; carry the wheels in an earlier command of the lease and choose with "
                                    "--wheels-there, or make the tracked files smaller (git ls-files)")


def test_wheels_carried_by_an_earlier_command_of_the_lease_leave_their_room_to_the_checkpoints(tmp_path, monkeypatch):
    """The held machine keeps an ignored path that a later command does not name: with --wheels-there the queue's
    command carries no wheels, and a checkpoint that did not fit beside them does."""
    text = "queue:\n  - {pair: b/m, gpu_minutes: 10, source: measured}\n"
    unfinished(tmp_path, "b_m", 50, size=3000)
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl/x-1-py3-none-any.whl").write_bytes(b"w" * 2000)
    monkeypatch.setattr("opflow.queue.tracked_bytes", lambda root: lease_state.CARRY_LIMIT - 2**20 - 4000)  # 4000 bytes beside the tree
    entries = derive(load_queue(write(tmp_path, text)), [Ref("b", "m")], tmp_path / "published", {"b/m": 100}, root=tmp_path)
    paths, _ = carry_plan(entries, 8, root=tmp_path)
    assert paths == [".whl"]  # 2000 bytes of wheels + 3000 of checkpoint > 4000: it waits
    paths, line = carry_plan(entries, 8, root=tmp_path, wheels_there=True)
    assert paths == [".lease-state/b_m"]
    assert "+ the wheels already on the machine (an earlier command of the lease carried them) + 1 checkpoint(s)" in line and line.endswith("the lease trains b/m")


def test_data_made_here_travels_as_a_subset_and_its_pair_is_taken_only_where_the_data_is(tmp_path, monkeypatch):
    """A pair whose data the GPU machine cannot make (``data:``, a FEM set) is taken where the file is present (there:
    carried and copied into data/), and on this machine its subset, once per file, counts in what the command carries."""
    text = ("queue:\n  - {pair: a/m, gpu_minutes: 2, source: measured, data: data/fem/all.nc}\n"
            "  - {pair: b/m, gpu_minutes: 2, source: measured, data: data/fem/all.nc}\n  - {pair: c/m, gpu_minutes: 2, source: measured}\n")
    refs = [Ref(p, "m") for p in "abc"]
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl/x-1-py3-none-any.whl").write_bytes(b"w" * 100)
    monkeypatch.setattr("opflow.queue.tracked_bytes", lambda root: 5000)
    written = []

    def subset(entries, root, config_files):  # stands for opflow.data.subset.write_subset (tests/opflow/data/test_subset.py)
        for data in {e.data for e in entries if e.data and e.data_here}:
            lease_state.carried_data(root, data).parent.mkdir(parents=True, exist_ok=True)
            lease_state.carried_data(root, data).write_bytes(b"s" * 700)
            written.append(data)
        for e in entries:
            e.data_bytes = 700 if e.data else 0

    monkeypatch.setattr("opflow.queue.carried_data", subset)

    def entries():
        return derive(load_queue(write(tmp_path, text)), refs, tmp_path / "published", {f"{p}/m": 10 for p in "abc"}, root=tmp_path)

    assert [e.pair for e in next_pairs(entries(), 10)] == ["c/m"]  # not made here yet (nor carried there)
    assert "| a/m | pending, its data data/fem/all.nc is not here (made on a CPU machine, carried: opflow queue --carry) |" in table(entries())
    paths, line = carry_plan(entries(), 10, root=tmp_path)
    assert paths == [".whl"] and not written
    assert "warning: a/m reads data/fem/all.nc, made on this machine and not here: make it with `snakemake --cores 2 data/fem/all.nc`" in line
    (tmp_path / "data/fem").mkdir(parents=True)
    (tmp_path / "data/fem/all.nc").write_bytes(b"f" * 4000)
    assert lease_state.carried_data(tmp_path, "data/fem/all.nc") == tmp_path / ".lease-state/data/fem/all.nc"
    paths, line = carry_plan(entries(), 10, root=tmp_path)
    assert paths == [".whl", ".lease-state/data"] and written == ["data/fem/all.nc"]
    assert line.startswith("carry: the tree 0.0 MB + the wheels 0.0 MB + 0 checkpoint(s) 0.0 MB + 1 data subset(s) 0.0 MB = 0.0 MB of 67.1 MB;")
    assert line.endswith("the lease trains a/m b/m c/m")  # the subset counted once for both pairs
    monkeypatch.setattr("opflow.queue.tracked_bytes", lambda root: lease_state.CARRY_LIMIT - 2**20 - 100 - 500)  # 500 bytes left
    paths, line = carry_plan(entries(), 10, root=tmp_path)
    assert paths == [".whl"] and line.splitlines()[0].endswith("the lease trains c/m")
    assert "warning: a/m would train, but its data subset (0.0 MB) does not fit the 0.0 MB left beside the tree, the wheels and the checkpoints" in line


def _nc(path: Path, value: float, subset_of: str | None = None) -> bytes:
    """A small dataset file; ``subset_of``: the SHA-256 that a carried subset names (opflow_subset_of_sha256)."""
    import numpy as np

    from opflow.data.format import Variable, write_dataset
    from opflow.data.provenance import provenance_attrs

    path.parent.mkdir(parents=True, exist_ok=True)
    attrs = {**provenance_attrs("test-place", {"value": value}, 0), **({"opflow_subset_of_sha256": subset_of} if subset_of else {})}
    write_dataset(path, {"u": Variable(("sample",), np.array([value]), {"role": "output", "long_name": "u", "units": "1"})}, attrs)
    return path.read_bytes()


def test_carried_data_is_placed_in_data_but_never_over_a_whole_file_there(tmp_path, monkeypatch, capsys):
    """On the GPU machine the carried subsets go to data/. A whole file already there (on the machine that made the data,
    the file the subset was cut from) is kept as it is, since a run's checkpoint names the file it trained on; an older
    subset there (an earlier command of the same lease) is replaced."""
    carried = tmp_path / lease_state.DATA_DIR
    a, b, c = (_nc(carried / rel, k, subset_of="f" * 64) for k, rel in enumerate(["fem/all.nc", "fem2/deep/b.nc", "old/c.nc"]))
    whole = _nc(tmp_path / "data/fem/all.nc", 9.0)
    _nc(tmp_path / "data/old/c.nc", 7.0, subset_of="e" * 64)  # an older subset
    monkeypatch.setattr("opflow.queue.ROOT", tmp_path)
    assert main(["queue", "--place-data"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "queue: carried data data/fem2/deep/b.nc",
        "queue: carried data data/old/c.nc",
        "queue: data/fem/all.nc is here already, kept (the carried subset not copied over it)",
    ]
    assert (tmp_path / "data/fem/all.nc").read_bytes() == whole != a
    assert (tmp_path / "data/fem2/deep/b.nc").read_bytes() == b and (tmp_path / "data/old/c.nc").read_bytes() == c
    assert lease_state.place_data(tmp_path) == ([], ["data/fem/all.nc", "data/fem2/deep/b.nc", "data/old/c.nc"])  # again: nothing copied
    assert lease_state.place_data(tmp_path / "elsewhere") == ([], [])  # nothing carried: nothing to do


def test_what_a_later_session_needs_of_the_cpu_run_is_its_checkpoint_and_the_data_file_it_reads_as_it_is(tmp_path):
    """opflow queue --save-state keeps the CPU run's checkpoint and, for a FEM pair, the very file it trains on (a
    checkpoint resumes only on its own data: a subset cut again would be another file)."""
    text = "queue:\n  - {pair: f/m, gpu_minutes: 1, source: x, data: data/fem/all.nc}\n  - {pair: g/m, gpu_minutes: 1, source: x}\ncpu:\n  - {pair: f/m, note: now}\n"

    def entries():
        return derive(load_queue(write(tmp_path, text)), [], tmp_path / "published", {}, tmp_path / "models", root=tmp_path)

    assert cpu_state(entries(), tmp_path, tmp_path / "published") is None  # no checkpoint yet: nothing to keep
    (tmp_path / "models/f_m").mkdir(parents=True)
    (tmp_path / "models/f_m/checkpoint.pt").write_bytes(b"c")
    with pytest.raises(ConfigError, match=r"data/fem/all.nc: the data the CPU's run f/m reads is not here"):
        cpu_state(entries(), tmp_path, tmp_path / "published")
    (tmp_path / "data/fem").mkdir(parents=True)
    (tmp_path / "data/fem/all.nc").write_bytes(b"d")
    assert cpu_state(entries(), tmp_path, tmp_path / "published") == (
        tmp_path / "published/f_m", tmp_path / "models/f_m/checkpoint.pt", [("data/fem/all.nc", tmp_path / "data/fem/all.nc")])
