"""Typed, versioned records of the files a run leaves behind: ``model.pt`` and the results JSON.

:class:`ModelRecord` is what ``opflow train`` saves in ``model.pt`` (a ``torch.save`` of
:meth:`ModelRecord.to_dict`) and everything ``opflow evaluate`` needs to rebuild the model;
:class:`Results` is what ``opflow evaluate`` writes to ``results/<dataset>_<model>.json`` and what
``opflow show`` reads. Each has a ``FORMAT_VERSION`` (an int) written beside the ``format`` string
as ``format_version``; the keys of the files are exactly the dataclass fields plus those two, so
the files read as before by anything that indexes them (``rec["task"]``, ``r["metrics"]``).

Reading (``from_dict``, ``load``) is strict: a file of another version, with a missing or an
unknown key, or that is not a record at all fails with one :class:`RecordError` line naming the
file, the version found and expected, the missing and the unknown keys, and what to do. A file
written before ``format_version`` existed counts as version 1 and is refused, which says to
retrain or re-evaluate: there is no silent reading of what an older opflow meant.

Also here: :func:`file_sha256` and :func:`data_fingerprint`, how the records identify the data
files they were made from (training and evaluation both use them).

Standard library only at import time (torch and netCDF4 are imported by the functions that need
them), so ``opflow show`` stays fast.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from opflow.atomic import atomic_path, atomic_write_text
from opflow.data.errors import DatasetError

R = TypeVar("R", bound="_Record")


class RecordError(DatasetError):
    """A model or results file is missing, damaged, foreign or of another format version."""


# --------------------------------------------------------------------------- data fingerprints


def file_sha256(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


FINGERPRINT_ATTRS = ("opflow_params_hash", "opflow_source_params_hash", "opflow_stride", "opflow_resolution", "opflow_split_rule", "opflow_dataset")


#: the key of :func:`data_fingerprint` that holds :func:`training_split_digest`
TRAIN_SPLIT_KEY = "train_split"


def data_fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What identifies a dataset file's content: its provenance attributes and its training split.

    Derived files carry the source's parameter hash, the stride/resolution and the split rule; to
    those goes :data:`TRAIN_SPLIT_KEY`: the :func:`training_split_digest` of what training reads,
    because the attributes alone say what the file was made as, not what it holds now (a file with
    every split relabelled ``train`` kept them). A file without provenance attributes is identified
    by its SHA-256, which covers everything.

    Records written before the digest existed lack the key: :func:`fingerprint_differences` then
    compares the attributes alone, as before, so their checkpoints still resume and their finished
    models still count as trained (nothing records the digest of the data they were trained on).
    """
    from opflow.data.format import open_dataset

    with open_dataset(path) as nc:
        attrs = {k[7:]: _plain(nc.getncattr(k)) for k in FINGERPRINT_ATTRS if k in nc.ncattrs()}
    if "params_hash" not in attrs:
        return {"sha256": file_sha256(path)}
    attrs[TRAIN_SPLIT_KEY] = training_split_digest(path)
    return attrs


def training_split_digest(path: str | os.PathLike[str], block: int = 64) -> dict[str, Any]:
    """``{"n": training samples, "sha256": ...}`` of the file's training split, as training reads it.

    The hash covers every variable (sorted by name, each with its dtype and the shape read): of the
    per-sample ones the rows of the training split (which includes their global ``sample_index``),
    of the others all values (coordinates, connectivity). It is read ``block`` samples at a time,
    so memory stays small; the cost is one read of the split, which training reads anyway. A file
    without a ``split`` variable has no training split: ``{"n": 0, ...}`` of its other variables.
    """
    import numpy as np

    from opflow.data.format import SPLITS, open_dataset

    h = hashlib.sha256()
    with open_dataset(path) as nc:
        split = np.asarray(nc.variables["split"][:]) if "split" in nc.variables else np.empty(0, np.int8)
        idx = np.flatnonzero(split == SPLITS["train"])
        try:
            for name in sorted(nc.variables):
                v = nc.variables[name]
                per_sample = v.dimensions[:1] == ("sample",)
                shape = (idx.size, *v.shape[1:]) if per_sample else v.shape
                h.update(f"{name}|{np.dtype(v.dtype).str}|{shape}\n".encode())
                if not per_sample:
                    h.update(np.ascontiguousarray(np.ma.getdata(v[...])).tobytes())
                    continue
                for b in range(0, idx.size, block):
                    rows = idx[b : b + block]
                    data = v[int(rows[0]) : int(rows[-1]) + 1] if rows[-1] - rows[0] == rows.size - 1 else v[rows]
                    h.update(np.ascontiguousarray(np.ma.getdata(data)).tobytes())
        except (OSError, RuntimeError, IndexError) as e:
            raise DatasetError(f"{path}: reading failed ({e}); the file is damaged, regenerate it") from None
    return {"n": int(idx.size), "sha256": h.hexdigest()}


def fingerprint_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The keys in which the data a run recorded (``recorded``) differ from the file now (``current``).

    ``train_split`` is compared when the record has it; a record written before it existed is
    compared on the provenance attributes alone (:func:`data_fingerprint`).
    """
    recorded, current = dict(recorded), dict(current)
    if TRAIN_SPLIT_KEY not in recorded:
        current.pop(TRAIN_SPLIT_KEY, None)
    out = []
    for k in sorted(set(recorded) | set(current)):
        a, b = recorded.get(k, "<absent>"), current.get(k, "<absent>")
        if a == b:
            continue
        if k == TRAIN_SPLIT_KEY and isinstance(a, Mapping) and isinstance(b, Mapping):
            what = f"{a.get('n')} -> {b.get('n')} training samples" if a.get("n") != b.get("n") else "the same count, other contents"
            out.append(f"{k}: {what}")
        else:
            out.append(f"{k}: {a!r} -> {b!r}")
    return out


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


# --------------------------------------------------------------------------- records


def _names(keys: set[str], limit: int = 6) -> str:
    listed = sorted(keys)
    more = f" (+{len(listed) - limit} more)" if len(listed) > limit else ""
    return "[" + ", ".join(listed[:limit]) + "]" + more


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


class _Record:
    """What the two records share: the format header, strict reading, shallow ``to_dict``."""

    FORMAT_VERSION: ClassVar[int]
    FORMAT_NAME: ClassVar[str]  # "opflow-model": the ``format`` key holds "<name>/<version>"
    WHAT: ClassVar[str]  # "opflow model file", for messages
    FIX: ClassVar[str]  # what to do about a refused file

    @classmethod
    def format(cls) -> str:
        """The ``format`` string this version writes, e.g. ``opflow-model/2``."""
        return f"{cls.FORMAT_NAME}/{cls.FORMAT_VERSION}"

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def keys_written(cls) -> tuple[str, ...]:
        """Every key of the file, in the order written."""
        return ("format", "format_version", *cls.field_names())

    def to_dict(self) -> dict[str, Any]:
        """The file's content: ``format``, ``format_version`` and every field (values not copied)."""
        return {"format": self.format(), "format_version": self.FORMAT_VERSION, **{n: getattr(self, n) for n in self.field_names()}}

    @classmethod
    def from_dict(cls: type[R], data: Any, source: str | os.PathLike[str] = "<dict>") -> R:
        """The record in ``data`` (what :meth:`to_dict` returned), or :class:`RecordError` naming ``source``."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{source}: not an {cls.WHAT} (it holds a {type(data).__name__}, not a mapping of keys); {cls.FIX}")
        version = data.get("format_version")
        fmt = data.get("format")
        expected = set(cls.keys_written())
        missing, unknown = expected - set(data), {str(k) for k in data} - expected
        if version == cls.FORMAT_VERSION and fmt == cls.format() and not missing and not unknown:
            return cls(**{n: data[n] for n in cls.field_names()})
        if version is not None:
            found = f"format_version {version!r}"
        elif isinstance(fmt, str) and fmt.startswith(cls.FORMAT_NAME + "/"):
            found = f"no format_version (format {fmt!r}: written by an older opflow)"
        else:
            found = "no format_version"
        if version == cls.FORMAT_VERSION and fmt != cls.format():
            found += f" but format {fmt!r}"
        parts = [f"{source}: not an {cls.WHAT} of format version {cls.FORMAT_VERSION} ({cls.format()}): found {found}"]
        if missing:
            parts.append(f"missing keys {_names(missing)}")
        if unknown:
            parts.append(f"unknown keys {_names(unknown)}")
        raise RecordError("; ".join(parts) + f"; {cls.FIX}")


@dataclass(eq=False)
class ModelRecord(_Record, Mapping[str, Any]):
    """Everything ``model.pt`` holds: the weights and all that evaluation needs to use them.

    It also reads as a read-only mapping with the file's keys (``rec["task"]``, ``"epochs" in
    rec``), so code written against the plain dict that ``model.pt`` used to be keeps working.
    """

    FORMAT_VERSION: ClassVar[int] = 2
    FORMAT_NAME: ClassVar[str] = "opflow-model"
    WHAT: ClassVar[str] = "opflow model file"
    FIX: ClassVar[str] = "retrain it (delete it and rerun opflow train, or its snakemake target)"

    dataset: str
    """Dataset name in the workflow config (``datasets.<name>``)."""
    model: str
    """Model name in the workflow config (``models.<name>``)."""
    arch: str
    """Registered architecture (``opflow.models`` registry key), e.g. ``ono``."""
    model_config: dict[str, Any]
    """Effective hyperparameters the model was built with (the configured ones, plus those set from
    the data such as ``global_channels``)."""
    model_build: dict[str, int]
    """``in_channels``, ``out_channels``, ``coord_dim`` the model was built with."""
    state_dict: dict[str, Any] = field(repr=False)
    """The weights (``model.state_dict()``, tensors on the CPU after loading)."""
    normalizers: dict[str, Any] = field(repr=False)
    """State of the input, output and globals normalisers, fitted on the training split only
    (:meth:`opflow.data.torch_data.Normalizers.state_dict`)."""
    task: dict[str, Any]
    """What the model maps: input, output and global variable names (the channel names), view
    kind, channel counts, coordinate dimension and training grid shape
    (:meth:`opflow.data.torch_data.ArrayDataset.info`)."""
    view: dict[str, Any] | None
    """The view spec the model was trained with (``None``: the dataset's default view)."""
    run: dict[str, Any] = field(repr=False)
    """The resolved run config (training settings, model config, task, dataset) with its ``hash``."""
    run_hash: str
    """Hash of the run's identity (:func:`opflow.config.run_hash`)."""
    data_fingerprint: dict[str, Any]
    """What identifies the training data file (:func:`data_fingerprint`)."""
    train_time_s: float
    """Seconds of training (sum of epoch times, over all resumed calls)."""
    epochs: int
    """Epochs trained."""
    device: str
    """Training device, e.g. ``cpu`` or ``cuda:0``."""
    device_name: str
    """Human name of the training device (the GPU's name, or the device type)."""
    world_size: int
    """Number of DDP processes that trained it."""
    parameters: int
    """Number of trainable parameters."""
    curves: list[dict[str, Any]] = field(repr=False)
    """One row per epoch: epoch, train_loss, test_rel_l2 (or None), lr, epoch_time_s, elapsed_s."""
    final_train_loss: float
    """Training loss of the last epoch (NaN when no epoch ran)."""
    final_test_rel_l2: float | None
    """Test relative L2 of the last epoch (always evaluated at the last epoch)."""
    created: str
    """UTC time the file was written, ISO 8601."""

    def trained_view(self) -> dict[str, Any] | None:
        """The view to read data with as the model was trained: :attr:`view`, or for a file written before views
        were recorded, the view kind its task names (``None``: the dataset's default view)."""
        if self.view is None and self.task.get("view_kind"):
            return {"kind": self.task["view_kind"]}
        return self.view

    # read-only mapping over the file's keys
    def __getitem__(self, key: str) -> Any:
        if key == "format":
            return self.format()
        if key == "format_version":
            return self.FORMAT_VERSION
        if key in self.field_names():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_written())

    def __len__(self) -> int:
        return len(self.keys_written())

    def save(self, path: str | os.PathLike[str]) -> Path:
        """``torch.save`` of :meth:`to_dict` to ``path`` atomically (never a partial file)."""
        import torch

        path = Path(path)
        with atomic_path(path) as tmp:
            torch.save(self.to_dict(), tmp)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModelRecord:
        """Read ``model.pt`` (tensors on the CPU); :class:`RecordError` for a missing, damaged or foreign file."""
        import torch

        path = Path(path)
        if not path.is_file():
            raise RecordError(f"{path}: no such model file; train it first (snakemake {path})")
        try:
            data = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # truncated, not a torch file, unpicklable: say so, do not guess
            raise RecordError(f"{path}: cannot be read as a model file, it is damaged or truncated ({_first_line(e)}); {cls.FIX}") from None
        return cls.from_dict(data, path)


@dataclass(eq=False)
class Results(_Record):
    """The results JSON of ``opflow evaluate`` (statistics are over test samples; see :mod:`opflow.evaluate`)."""

    FORMAT_VERSION: ClassVar[int] = 2
    FORMAT_NAME: ClassVar[str] = "opflow-results"
    WHAT: ClassVar[str] = "opflow results file"
    FIX: ClassVar[str] = "re-evaluate (delete it and rerun opflow evaluate, or its snakemake target)"

    dataset: str
    """Dataset name."""
    model: str
    """Model name."""
    arch: str
    """Architecture."""
    view: dict[str, Any]
    """View the model was trained and evaluated with (``{"kind": "grid"}`` by default)."""
    run: dict[str, Any]
    """The resolved run config of the training, with its ``hash``."""
    run_hash: str
    """Hash of the run's identity."""
    data_files: dict[str, dict[str, Any]]
    """Per data file read (keyed by path): ``sha256``, ``role`` (test, zero_shot, eval_set:NAME),
    ``grid_shape``, ``n_test``, ``split``."""
    training_data_fingerprint: dict[str, Any] | None
    """The training data's fingerprint recorded in ``model.pt``."""
    parameters: int
    """Number of trainable parameters."""
    epochs: int
    """Epochs trained."""
    train_time_s: float
    """Seconds of training."""
    train_device: str | None
    """Training device."""
    train_device_name: str | None
    """Human name of the training device."""
    train_world_size: int
    """DDP processes of the training."""
    final_train_loss: float | None
    """Training loss of the last epoch."""
    n_test: int
    """Test samples evaluated."""
    resolution: str
    """Discretisation of the test set (``"16"``, ``"16x32"``, ``"points"``, or the view's label)."""
    metrics: dict[str, Any]
    """Relative L2 statistics on the test split: ``rel_l2_mean/median/std/max``, ``n_samples``,
    ``per_channel``; ``rel_l2_normalised_mean/median/std/max``, the same error in the units of the
    run's output normaliser (not for rollouts); for rollouts also ``per_step``, ``frame_groups``,
    ``teacher_forced``."""
    zero_shot: dict[str, Any]
    """The same statistics per zero-shot resolution, keyed by resolution."""
    eval_sets: dict[str, Any]
    """The same statistics per extra evaluation set, keyed by its name."""
    inference_time_per_sample_s: float
    """Median over test batches of batch time / batch size."""
    inference: dict[str, Any]
    """How the inference time was measured: ``statistic``, ``batch_size``, ``warmup_batches``, ``timed_batches``."""
    peak_memory: dict[str, Any]
    """Peak memory of the timed pass: ``bytes``, ``mib``, ``kind``, ``device``."""
    device: str
    """Evaluation device."""
    device_name: str
    """Human name of the evaluation device."""
    threads: int
    """Torch CPU threads."""
    versions: dict[str, Any]
    """Package versions."""
    git_commit: str | None
    """Git commit of the code, when known."""
    created: str
    """UTC time of the evaluation, ISO 8601."""
    plot: str | None
    """The prediction/error PNG, or ``None``."""
    model_file: str
    """The ``model.pt`` evaluated."""

    def save(self, path: str | os.PathLike[str], *, default: Any = None) -> Path:
        """Write the JSON atomically (``default``: the encoder for numpy values and paths)."""
        path = Path(path)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1, default=default))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Results:
        """Read a results JSON; :class:`RecordError` for a missing, truncated or foreign file (one of
        another kind, a NetCDF dataset or a model file, named with the command that reads it)."""
        from opflow.filekind import wrong_file

        path = Path(path)
        other = wrong_file(path, "an opflow results JSON")  # a dataset, a model, a directory: say so
        if other is not None:
            raise RecordError(other)
        try:
            text = path.read_text()
        except OSError as e:
            raise RecordError(f"{path}: cannot read it ({e.strerror or _first_line(e)})") from None
        except UnicodeDecodeError as e:
            raise RecordError(f"{path}: not an opflow results JSON: not UTF-8 text ({e.reason} at byte {e.start}); {cls.FIX}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}: not valid JSON, truncated or damaged ({e.msg} at line {e.lineno} column {e.colno}); {cls.FIX}") from None
        return cls.from_dict(data, path)

