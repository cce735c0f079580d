"""The GPU lease queue: which paper-protocol pairs the next borrowed-GPU command trains.

The GPU comes as 15-minute leases to some sessions: one command of at most 10 minutes after a start
of about a minute. ``config/queue.yaml`` lists the pairs to train there, each with its estimated GPU
minutes for the whole protocol and where that estimate comes from. Nothing else is written by hand:

* **value**: the number of published numbers the pair's results give (the rows of
  ``config/reference.yaml`` with its dataset and model), per GPU minute; the queue runs in order of
  value, highest first (ties: cheapest first);
* **state**, from ``published/<dataset>_<model>/``: ``done`` when ``record.json`` is there (published
  with :mod:`opflow.publish`), ``in progress`` when ``checkpoint.json`` is (the pointer to the checkpoint a
  lease left, kept out of the tree: :mod:`opflow.lease_state`; its epochs from ``curves.json``), else ``pending``;
  ``blocked`` when the entry says why;
  ``on the CPU`` for the CPU machine's one long training between leases (``scripts/cpu_training.sh``; its
  epochs from ``models/<dataset>_<model>/curves.json`` of the working tree): the first pair of the
  file's ``cpu:`` list that is neither done nor in progress on a GPU. The CPU trains that list one pair
  at a time, in its order; a later pair of it stays open to the leases until its turn. Neither
  ``blocked`` nor ``on the CPU`` is given to a lease;
* **remaining minutes** = the estimate times the share of epochs still to train.

:func:`next_pairs` picks what a lease of ``minutes`` of training trains: the first open pair (even
when it does not fit: it trains part of its epochs and resumes in the next lease), then every
following pair while the sum of remaining minutes fits, then, where :data:`FILL_MINUTES` or more are
still free, the next pair for the rest of the lease. A pair in progress is taken only where its
checkpoint is ready (carried to the GPU machine, its size and hash those of the pointer) and, on the
CPU side, while the checkpoints fit what a command carries. A pair whose entry names its ``data`` (a file
the GPU machine cannot make: FEM) is taken only where that file is present, and on the CPU side while its
subset (:mod:`opflow.data.subset`, counted once per file) fits too. ``opflow queue`` prints the table;
``opflow queue --next M --carry`` the paths the lease's command carries (the wheels, those
checkpoints and ``.lease-state/data``, the subsets it writes: :func:`carried_data`); ``opflow queue --next M --targets`` the Snakemake targets that ``scripts/device_session.sh
--queue`` trains. After the lease, ``scripts/queue_pull.sh`` publishes what finished and keeps the
checkpoints of the rest (:mod:`opflow.lease_state`).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from opflow import lease_state
from opflow.data.errors import ConfigError
from opflow.progress import time_left

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_QUEUE = ROOT / "config" / "queue.yaml"
#: the paper profile the queued pairs are trained with
DEFAULT_CONFIG = (ROOT / "config" / "default.yaml",)
DEFAULT_PUBLISHED = ROOT / "published"
STATES = ("done", "in progress", "pending", "blocked", "on the CPU")
#: the states a lease does not train
CLOSED = ("done", "blocked", "on the CPU")
#: a lease with at least this many minutes free after the pairs that fit starts the next pair for the rest of its time
FILL_MINUTES = 3.0


@dataclass
class QueueEntry:
    """One pair of the queue with what :mod:`opflow.queue` derives for it."""

    dataset: str
    model: str
    gpu_minutes: float
    source: str
    share_gpu: bool
    blocked: str | None
    #: the note of its place in the file's ``cpu:`` list (where, since when, at what cost), and that place
    cpu_note: str | None = None
    cpu_rank: int | None = None
    #: whether the CPU trains it with ``torch.compile`` (the ``cpu:`` entry's ``compile``; config/compile.yaml): only
    #: where it measured faster there (benchmarks/results/train_speed_compile_cpu*.json)
    cpu_compile: bool = False
    numbers: int = 0
    state: str = "pending"
    epochs_done: int = 0
    epochs: int | None = None
    #: the per-epoch rows of a pair training on the CPU (its time left at its pace)
    curves: list[dict[str, Any]] = field(default_factory=list)
    #: in progress: the size of the checkpoint a lease left, and whether it is here with the pointer's size and hash
    checkpoint_bytes: int = 0
    ready: bool = False
    #: in progress: whether the pointer names where git's history keeps the checkpoint (opflow/history.py)
    kept_in_history: bool = False
    #: the data file the pair reads where the GPU machine cannot make it (a FEM set), carried as a subset
    #: (:mod:`opflow.data.subset`, :func:`opflow.lease_state.carried_data`); whether it is here; the subset's size
    data: str | None = None
    data_here: bool = True
    data_bytes: int = 0

    @property
    def pair(self) -> str:
        return f"{self.dataset}/{self.model}"

    @property
    def target(self) -> str:
        return f"results/{self.dataset}_{self.model}.json"

    @property
    def folder(self) -> str:
        return f"{self.dataset}_{self.model}"

    @property
    def remaining_minutes(self) -> float:
        if self.state == "done":
            return 0.0
        if self.epochs and self.epochs_done:
            return self.gpu_minutes * max(0.0, 1.0 - self.epochs_done / self.epochs)
        return self.gpu_minutes

    @property
    def value(self) -> float:
        """Published numbers per GPU minute."""
        return self.numbers / self.gpu_minutes


def load_queue(path: str | Path = DEFAULT_QUEUE) -> list[QueueEntry]:
    """The entries of ``path`` (``queue:`` list of ``{pair, gpu_minutes, source, share_gpu?, blocked?, data?}``; ``cpu:``
    list of ``{pair, note, compile?}``, the CPU's order), each checked: a :class:`ConfigError` names the entry and the key."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read the queue ({e})") from e
    if not isinstance(doc, Mapping) or not isinstance(doc.get("queue"), list):
        raise ConfigError(f"{path}: the queue file needs a top-level 'queue:' list of entries")
    out, seen = [], set()
    allowed = {"pair", "gpu_minutes", "source", "share_gpu", "blocked", "data"}
    for i, e in enumerate(doc["queue"]):
        where = f"{path.name}: queue[{i}]"
        if not isinstance(e, Mapping):
            raise ConfigError(f"{where}: an entry is a mapping with pair, gpu_minutes and source")
        unknown = sorted(set(e) - allowed)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        pair = e.get("pair")
        if not isinstance(pair, str) or pair.count("/") != 1 or not all(pair.split("/")):
            raise ConfigError(f"{where}: pair must be 'dataset/model', got {pair!r}")
        if pair in seen:
            raise ConfigError(f"{where}: {pair} is queued twice")
        seen.add(pair)
        minutes = e.get("gpu_minutes")
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not math.isfinite(minutes) or minutes <= 0:
            raise ConfigError(f"{where} ({pair}): gpu_minutes must be a number of minutes > 0, got {minutes!r}")
        if not isinstance(e.get("source"), str) or not e["source"].strip():
            raise ConfigError(f"{where} ({pair}): source must say where the GPU minutes come from (a measurement or an estimate)")
        blocked = e.get("blocked")
        if blocked is not None and not (isinstance(blocked, str) and blocked.strip()):
            raise ConfigError(f"{where} ({pair}): blocked, when given, is the reason (text)")
        data = e.get("data")
        if data is not None and not (isinstance(data, str) and data.startswith("data/") and data.endswith(".nc") and ".." not in data.split("/")):
            raise ConfigError(f"{where} ({pair}): data, when given, is the path of the file the pair reads (data/<dataset>/<file>.nc), got {data!r}")
        dataset, model = pair.split("/")
        out.append(QueueEntry(dataset, model, float(minutes), e["source"].strip(), bool(e.get("share_gpu", False)), blocked, data=data))
    _cpu_order(doc.get("cpu", []), path, {e.pair: e for e in out})
    return out


def _cpu_order(cpu: Any, path: Path, entries: Mapping[str, QueueEntry]) -> None:
    """Mark the pairs of the ``cpu:`` list with their place, note and whether they train compiled there
    (:attr:`QueueEntry.cpu_rank`, ``cpu_note``, ``cpu_compile``)."""
    if not isinstance(cpu, list):
        raise ConfigError(f"{path.name}: cpu, when given, is a list of {{pair, note, compile?}} in the order the CPU trains them")
    for i, c in enumerate(cpu):
        where = f"{path.name}: cpu[{i}]"
        if (not isinstance(c, Mapping) or not {"pair", "note"} <= set(c) <= {"pair", "note", "compile"}
                or not isinstance(c["note"], str) or not c["note"].strip()):
            raise ConfigError(f"{where}: an entry is {{pair, note, compile?}}: the pair, where, since when or at what cost it "
                              "trains on the CPU, and (optional, default false) whether it trains compiled there")
        if not isinstance(c.get("compile", False), bool):
            raise ConfigError(f"{where}: compile is true or false (train with torch.compile on the CPU: only where that measured faster), got {c['compile']!r}")
        e = entries.get(c["pair"])
        if e is None:
            raise ConfigError(f"{where}: {c['pair']!r} is not a pair of the queue: add it to queue: (with its GPU minutes) first")
        if e.cpu_rank is not None:
            raise ConfigError(f"{where}: {e.pair} is listed twice")
        if e.blocked:
            raise ConfigError(f"{where} ({e.pair}): the pair is blocked ({e.blocked}); remove it from cpu: or unblock it")
        e.cpu_rank, e.cpu_note, e.cpu_compile = i, c["note"].strip(), c.get("compile", False)


def cpu_pair(entries: Sequence[QueueEntry], published: str | Path = DEFAULT_PUBLISHED) -> QueueEntry | None:
    """The CPU's pair now: the first of the ``cpu:`` list that is neither done (``record.json``) nor in progress on a
    GPU (the pointer ``checkpoint.json`` a lease left) in ``published``."""
    for e in sorted((e for e in entries if e.cpu_rank is not None), key=lambda e: e.cpu_rank):
        folder = Path(published) / e.folder
        if not (folder / "record.json").exists() and not (folder / lease_state.POINTER).exists():
            return e
    return None


def _curves(path: Path) -> list[dict[str, Any]]:
    try:
        return list(json.loads(path.read_text()))
    except (OSError, ValueError):
        return []


def derive(entries: Sequence[QueueEntry], reference: Sequence[Any], published: str | Path = DEFAULT_PUBLISHED,
           epochs: Mapping[str, int] | None = None, models: str | Path = ROOT / "models", root: str | Path = ROOT) -> list[QueueEntry]:
    """Fill in numbers (from ``reference``, :func:`opflow.reference.load_reference`'s rows), state and epochs
    (from ``published``, and ``models`` for a pair on the CPU; ``epochs``: the protocol's epochs per pair,
    for the remaining share), whether an unfinished pair's checkpoint is ready under ``root``
    (:func:`opflow.lease_state.ready`), and sort by value (module docstring). Closed pairs go last, in queue order."""
    published = Path(published)
    current = cpu_pair(entries, published)
    for e in entries:
        e.numbers = sum(1 for r in reference if (r.dataset, r.model) == (e.dataset, e.model))
        folder = published / e.folder
        e.epochs = (epochs or {}).get(e.pair)
        if (folder / "checkpoint.pt").exists():
            raise ConfigError(f"{folder / 'checkpoint.pt'}: a lease checkpoint in the tracked files; keep it out of the tree with "
                              f"`opflow queue --keep {folder / 'checkpoint.pt'} {folder}`, then `git rm {folder / 'checkpoint.pt'}` "
                              "(opflow/lease_state.py says why)")
        pointer = lease_state.read_pointer(folder)
        e.data_here = e.data is None or (Path(root) / e.data).is_file()
        if (folder / "record.json").exists():
            e.state = "done"
        elif e.blocked:
            e.state = "blocked"
        elif e is current:
            e.state = "on the CPU"
            e.curves = _curves(Path(models) / e.folder / "curves.json")
            e.epochs_done = len(e.curves)
        elif pointer is not None:
            e.state = "in progress"
            e.epochs_done = len(_curves(folder / "curves.json"))
            e.checkpoint_bytes, e.ready = int(pointer["bytes"]), lease_state.ready(root, folder)
            e.kept_in_history = bool(pointer.get("git"))
        else:
            e.state = "pending"
    order = {id(e): i for i, e in enumerate(entries)}
    return sorted(entries, key=lambda e: (e.state in CLOSED, -e.value, e.remaining_minutes, order[id(e)]))


def next_pairs(entries: Sequence[QueueEntry], minutes: float, carry_budget: int | None = None) -> list[QueueEntry]:
    """What a lease with ``minutes`` of training takes, in the order of ``entries`` (module docstring): the first
    open pair, then the following ones while the remaining minutes add up to at most ``minutes``, then, with
    :data:`FILL_MINUTES` or more still free, the next one for the rest. A pair in progress counts only where its
    checkpoint is ready, a pair with ``data`` only where that file is here and, with ``carry_budget`` (bytes:
    choosing on the CPU what to carry), while the checkpoints and data subsets taken fit in it."""
    chosen: list[QueueEntry] = []
    used, carried = 0.0, 0
    files: set[str] = set()

    def cost(e: QueueEntry) -> int:  # the bytes it adds to the carry: its checkpoint, its data once per file
        return (e.checkpoint_bytes if e.state == "in progress" else 0) + (e.data_bytes if e.data and e.data not in files else 0)

    def usable(e: QueueEntry) -> bool:
        if not e.data_here or not (e.state == "pending" or (e.state == "in progress" and e.ready)):
            return False
        return carry_budget is None or carried + cost(e) <= carry_budget

    def take(e: QueueEntry) -> None:
        nonlocal used, carried
        chosen.append(e)
        used += e.remaining_minutes
        carried += cost(e)
        files.update([e.data] if e.data else [])

    for e in entries:
        if usable(e) and (not chosen or used + e.remaining_minutes <= minutes):
            take(e)
    if chosen and minutes - used >= FILL_MINUTES:
        rest = [e for e in entries if e not in chosen and usable(e)]
        if rest:
            take(rest[0])
    return chosen


def tracked_bytes(root: str | Path = ROOT) -> int:
    """The bytes of what a command to the GPU machine sends of the working tree: the tracked files and the untracked
    ones git does not ignore (``git ls-files -co --exclude-standard``)."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise ConfigError(f"{root}: cannot list the files a command carries with git ({e})") from None
    return sum((Path(root) / n).stat().st_size for n in out.decode().split("\0") if n and (Path(root) / n).is_file())


def carry_plan(entries: Sequence[QueueEntry], minutes: float, root: str | Path = ROOT, wheels: str = ".whl",
               config_files: Sequence[str | Path] = DEFAULT_CONFIG, wheels_there: bool = False) -> tuple[list[str], str]:
    """The ``carry`` of a lease's queue command, ``[wheels, .lease-state/<pair> ..., .lease-state/data]``: the
    checkpoints of the pairs in progress that :func:`next_pairs` takes for ``minutes``, and the subsets of the data
    files the GPU machine cannot make (:func:`carried_data`), within what the command may carry beside the working tree
    and the wheels; and a line that adds the bytes up (with a warning for each pair that would be taken but is not).

    ``wheels_there``: an earlier command of the same lease carried the wheels, and the held machine keeps an ignored
    path that a later command does not name: they are neither carried again nor counted, which leaves the checkpoints
    the room the wheels took (25 MB)."""
    root = Path(root)
    wheel_bytes = sum(p.stat().st_size for p in (root / wheels).glob("*.whl"))
    if not wheel_bytes:
        raise ConfigError(f"{root / wheels}: no wheels; make them first with scripts/device_wheels.sh")
    if wheels_there:
        wheel_bytes = 0
    carried_data(entries, root, config_files)
    tree = tracked_bytes(root)
    budget = lease_state.CARRY_LIMIT - tree - wheel_bytes - 2**20  # a MiB to spare
    chosen = next_pairs(entries, minutes, carry_budget=max(budget, 0))
    resumed = [e for e in chosen if e.state == "in progress"]
    data = sorted({e.data for e in chosen if e.data})
    paths = [*([] if wheels_there else [wheels]), *(lease_state.state_file(root, e.folder).parent.relative_to(root).as_posix() for e in resumed)]
    paths += [lease_state.DATA_DIR] if data else []
    ckpt = sum(e.checkpoint_bytes for e in resumed)
    data_bytes = sum({e.data: e.data_bytes for e in chosen if e.data}.values())  # once per file
    mb = 1e6
    wheel_text = "the wheels already on the machine (an earlier command of the lease carried them)" if wheels_there else f"the wheels {wheel_bytes / mb:.1f} MB"
    line = (f"carry: the tree {tree / mb:.1f} MB + {wheel_text} + {len(resumed)} checkpoint(s) {ckpt / mb:.1f} MB"
            + (f" + {len(data)} data subset(s) {data_bytes / mb:.1f} MB" if data else "")
            + f" = {(tree + wheel_bytes + ckpt + data_bytes) / mb:.1f} MB of {lease_state.CARRY_LIMIT / mb:.1f} MB;"
            f" the lease trains {' '.join(e.pair for e in chosen) or 'nothing'}")
    for e in next_pairs(entries, minutes):  # what the lease would take if everything fitted
        if e in chosen:
            continue
        if e.state == "in progress":  # it would resume first, but does not fit: the lease starts other pairs, and it waits
            line += (f"\nwarning: {e.pair} is in progress and would resume, but its checkpoint ({e.checkpoint_bytes / mb:.1f} MB)"
                     + (f" and its data ({e.data_bytes / mb:.1f} MB) do" if e.data else " does")
                     + f" not fit the {max(budget, 0) / mb:.1f} MB left beside the tree and the wheels; carry the wheels in an earlier command of the"
                     " lease and choose with --wheels-there, or make the tracked files smaller (git ls-files)")
        elif e.data:
            line += (f"\nwarning: {e.pair} would train, but its data subset ({e.data_bytes / mb:.1f} MB) does not fit the {max(budget, 0) / mb:.1f} MB"
                     " left beside the tree, the wheels and the checkpoints")
    for e in entries:
        if e.state in ("pending", "in progress") and not e.data_here:
            line += f"\nwarning: {e.pair} reads {e.data}, made on this machine and not here: make it with `snakemake --cores 2 {e.data}`"
    return paths, line


def carried_data(entries: Sequence[QueueEntry], root: str | Path = ROOT,
                 config_files: Sequence[str | Path] = DEFAULT_CONFIG) -> dict[str, dict[str, Any]]:
    """Write (or keep, when it is the subset of the file here now for what the pairs read now) the subset of each data file that open entries name
    (``data:``), for every pair of the queue that names it (:func:`opflow.data.subset.write_subset`, their runs in the
    paper profile ``config_files``), as :func:`opflow.lease_state.carried_data`; set each entry's ``data_bytes``.
    Returns what was written, by file."""
    from opflow.config import load_config_files, resolve_run
    from opflow.data.subset import is_current, write_subset

    root = Path(root)
    wanted = {e.data for e in entries if e.data and e.data_here and e.state in ("pending", "in progress")}
    config = load_config_files([str(f) for f in config_files]) if wanted else {}
    written: dict[str, dict[str, Any]] = {}
    for data in sorted(wanted):
        src, dst = root / data, lease_state.carried_data(root, data)
        runs = [resolve_run(config, e.dataset, e.model, data) for e in entries if e.data == data]
        if not is_current(src, dst, runs):
            written[data] = write_subset(src, dst, runs)
        for e in entries:
            if e.data == data:
                e.data_bytes = dst.stat().st_size
    return written


def cpu_state(entries: Sequence[QueueEntry], root: str | Path = ROOT, published: str | Path = DEFAULT_PUBLISHED) -> tuple[Path, Path, list[tuple[str, Path]]] | None:
    """What of the CPU's run now (a derived queue's pair ``on the CPU``) a later session on a new machine needs, for
    :func:`opflow.lease_state.save`: its record folder, its checkpoint ``models/<pair>/checkpoint.pt`` and, where its
    entry names ``data`` (FEM: no other machine makes it), that file as the run reads it. Exactly that file: a checkpoint
    resumes only on the data it was trained on (its training-split digest), and a subset's is its own
    (:mod:`opflow.data.subset`). So a FEM pair should train on its subset from its first epoch (docs/usage.md): 11.6 MB
    kept instead of 40.5 MB, and a lease, which carries the subset, can take the run over. None when the CPU has no
    pair or its run no checkpoint yet."""
    root = Path(root)
    e = next((e for e in entries if e.state == "on the CPU"), None)
    checkpoint = root / "models" / (e.folder if e else "") / "checkpoint.pt"
    if e is None or not checkpoint.is_file():
        return None
    if e.data and not (root / e.data).is_file():
        raise ConfigError(f"{root / e.data}: the data the CPU's run {e.pair} reads is not here")
    return Path(published) / e.folder, checkpoint, [(e.data, root / e.data)] if e.data else []


def protocol_epochs(config_files: Sequence[str | Path], pairs: Sequence[QueueEntry]) -> dict[str, int]:
    """``training.epochs`` of each pair in the paper profile (the merged training settings)."""
    from opflow.config import load_config_files, parse_workflow

    wf = parse_workflow(load_config_files([str(f) for f in config_files]))
    out = {}
    for e in pairs:
        try:
            out[e.pair] = int(wf.train_config(e.dataset, e.model).epochs)
        except Exception as err:  # noqa: BLE001 - named below
            raise ConfigError(f"queue: {e.pair} is not a dataset/model pair of the paper profile ({err})") from err
    return out


def standing(entries: Sequence[QueueEntry]) -> dict[tuple[str, str], str]:
    """Where each pair of a derived queue (:func:`derive`) stands, in a few words (the report's rows without a result):
    an open pair's place in the order the leases take them and its GPU minutes left (and its place in the CPU's list),
    the CPU's pair, a blocked pair's reason. Done pairs have none (their record speaks)."""
    open_ = [e for e in entries if e.state in ("pending", "in progress")]
    out: dict[tuple[str, str], str] = {}
    for e in entries:
        if e in open_:
            text = f"queued for the GPU leases: place {open_.index(e) + 1} of {len(open_)}, about {e.remaining_minutes:.0f} GPU minutes left (opflow queue)"
            text += f"; place {e.cpu_rank + 1} in the CPU list" if e.cpu_rank is not None else ""
        elif e.state == "on the CPU":
            text = "training on the CPU now, in the background (the cpu: list of config/queue.yaml)"
        elif e.state == "blocked":
            text = f"queued for the GPU leases but blocked: {e.blocked}"
        else:
            continue
        out[(e.dataset, e.model)] = text
    return out


def table(entries: Sequence[QueueEntry]) -> str:
    """The queue as a Markdown table."""
    lines = ["| # | pair | state | published numbers | GPU minutes (whole / left) | numbers per GPU hour | source |",
             "| ---: | --- | --- | ---: | ---: | ---: | --- |"]
    for i, e in enumerate(entries, 1):
        left = time_left(e.curves, e.epochs) if e.state == "on the CPU" and e.epochs else ""
        state = e.state + (f" ({e.epochs_done} of {e.epochs} epochs{', ' + left + ' at its pace' if left else ''})"
                           if e.state in ("in progress", "on the CPU") else "")
        state += (", its checkpoint is not here" + (" (in git's history: opflow queue --restore-state)" if e.kept_in_history else " (opflow/lease_state.py)")
                  if e.state == "in progress" and not e.ready else "")
        state += f", its data {e.data} is not here (made on a CPU machine, carried: opflow queue --carry)" if (
            e.state in ("pending", "in progress") and not e.data_here) else ""
        state += f": {e.blocked}" if e.blocked else f": {e.cpu_note}" if e.state == "on the CPU" else ""
        state += f" (on the CPU's list, place {e.cpu_rank + 1}: {e.cpu_note})" if e.state == "pending" and e.cpu_note else ""
        lines.append(f"| {i} | {e.pair} | {state} | {e.numbers} | {e.gpu_minutes:.0f} / {e.remaining_minutes:.0f} | "
                     f"{60 * e.value:.2f} | {e.source} |")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--queue", default=str(DEFAULT_QUEUE), help="the queue file (default config/queue.yaml)")
    p.add_argument("--published", default=str(DEFAULT_PUBLISHED), help="the records folder (default published/)")
    p.add_argument("--config", nargs="+", default=[str(f) for f in DEFAULT_CONFIG], help="the paper profile")
    p.add_argument("--reference", default=None, help="published numbers (default config/reference.yaml)")
    p.add_argument("--next", type=float, default=None, metavar="MINUTES", help="only the pairs a lease with MINUTES of training takes")
    p.add_argument("--targets", action="store_true", help="print the Snakemake targets (with --next), one line")
    p.add_argument("--share-gpu", action="store_true", help="with --next: print 2 when every chosen pair may share the GPU, else 1")
    p.add_argument("--cpu-targets", action="store_true", help="print the Snakemake target of the CPU's pair now (the cpu: list; scripts/cpu_training.sh)")
    p.add_argument("--cpu-note", action="store_true", help="print the note of the CPU's pair now in the cpu: list (its record's note when published)")
    p.add_argument("--cpu-compile", action="store_true",
                   help="print 1 when the CPU's pair now trains with torch.compile (its cpu: entry's compile), else 0")
    p.add_argument("--carry", action="store_true", help="with --next: print the paths the lease's command carries (the wheels, the checkpoints it resumes, .lease-state/data: the subsets of the data made here that it reads)")
    p.add_argument("--wheels-there", action="store_true",
                   help="with --carry: an earlier command of this lease carried .whl (the held machine keeps it): leave it out of the carry and its 25 MB to the checkpoints")
    p.add_argument("--place-data", action="store_true",
                   help="on the GPU machine: copy the carried subsets (.lease-state/data/<x>) to data/<x>; a whole file there is kept, an older subset replaced")
    p.add_argument("--save-state", action="store_true",
                   help="keep in git's history (two commits) what a later session on a new machine needs: the CPU run's checkpoint and data, "
                        "and the lease checkpoints not kept there yet (opflow/history.py); at a session's end, nothing else staged")
    p.add_argument("--restore-state", action="store_true",
                   help="bring back from git's history each checkpoint (and CPU run's data) a pointer in published/ names that is not here")
    p.add_argument("--keep", nargs=2, metavar=("CHECKPOINT", "FOLDER"), default=None,
                   help="keep a lease's unfinished checkpoint for the next lease: into .lease-state/, with its pointer in FOLDER (published/<pair>/)")


def run(a: argparse.Namespace) -> int:
    """``opflow queue``: a bad queue file or option is one line on stderr and exit 2."""
    import sys

    try:
        return _run(a)
    except ConfigError as e:
        print(f"opflow queue: {e}", file=sys.stderr)
        return 2


def _run(a: argparse.Namespace) -> int:
    import sys

    from opflow.reference import DEFAULT_REFERENCE, load_reference

    if a.keep:
        checkpoint, folder = (Path(x) for x in a.keep)
        if not checkpoint.is_file():
            raise ConfigError(f"--keep: {checkpoint} is not a file")
        pointer = lease_state.keep(ROOT, folder, checkpoint, len(_curves(folder / "curves.json")))
        print(f"kept {checkpoint} as {pointer['file']} ({pointer['bytes'] / 1e6:.1f} MB, epoch {pointer['epochs_done']}); pointer {folder / lease_state.POINTER}")
        return 0
    if a.place_data:
        copied, kept = lease_state.place_data(ROOT)
        for path in copied:
            print(f"queue: carried data {path}")
        for path in kept:
            print(f"queue: {path} is here already, kept (the carried subset not copied over it)")
        return 0
    if a.carry and a.next is None:
        raise ConfigError("--carry needs --next MINUTES: the minutes of training the lease has")
    if a.restore_state or a.carry:  # a lease carries the checkpoints it resumes: from the history where they are not here
        restored, lost = lease_state.restore(ROOT, a.published)
        for path in restored:
            print(f"queue: restored {path} from git's history", file=sys.stderr)
        for line in lost:
            print(f"queue: {line}", file=sys.stderr)
        if a.restore_state:
            return 0
    entries = load_queue(a.queue)
    entries = derive(entries, load_reference(a.reference or DEFAULT_REFERENCE), a.published, protocol_epochs(a.config, entries))
    if a.save_state:
        kept = lease_state.save(ROOT, a.published, cpu_state(entries, ROOT, a.published))
        print(f"queue: kept {', '.join(kept)} in git's history (two commits)" if kept else "queue: everything is kept in git's history already")
        return 0
    if a.cpu_targets or a.cpu_note:
        print(" ".join(e.target if a.cpu_targets else (e.cpu_note or "") for e in entries if e.state == "on the CPU"))
        return 0
    if a.cpu_compile:
        print(int(any(e.cpu_compile for e in entries if e.state == "on the CPU")))
        return 0
    if a.next is not None:
        if not (math.isfinite(a.next) and a.next > 0):
            raise ConfigError(f"--next: {a.next!r} must be a number of minutes > 0")
        if a.carry:
            paths, line = carry_plan(entries, a.next, config_files=a.config, wheels_there=a.wheels_there)
            print(line, file=sys.stderr)
            print(" ".join(paths))
            return 0
        entries = next_pairs(entries, a.next)
        if a.share_gpu:
            print(2 if len(entries) > 1 and all(e.share_gpu for e in entries) else 1)
            return 0
    if a.targets:
        print(" ".join(e.target for e in entries))
        return 0
    print(table(entries))
    return 0


__all__ = ["FILL_MINUTES", "QueueEntry", "carried_data", "carry_plan", "cpu_pair", "cpu_state", "derive", "load_queue", "next_pairs", "protocol_epochs", "standing", "table",
           "tracked_bytes"]
