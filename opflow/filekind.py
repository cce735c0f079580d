"""What kind of file a path holds, and which ``opflow`` command reads it: for the messages of commands
handed the wrong file.

``opflow inspect results.json`` should not advise deleting the results file, and ``opflow show
data.nc`` should not crash on binary bytes: both say what the file is and name the command that
fits it (:func:`wrong_file`). The kind is sniffed from the first bytes (NetCDF-4/HDF5, classic
NetCDF and zip signatures; JSON by its first character), never from the name alone.

Standard library only: cheap to import from anywhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

_HDF5 = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class FileKind:
    """A sniffed file kind: ``name`` (short key), ``what`` (for messages) and the command that reads it."""

    name: str
    what: str
    command: str | None = None

    def advice(self, path: str | os.PathLike[str]) -> str:
        """``"<what>; read it with <command>"`` with ``FILE`` replaced by ``path``."""
        return self.what if self.command is None else f"{self.what}; {self.command.replace('FILE', str(path))}"


def file_kind(path: str | os.PathLike[str]) -> FileKind | None:
    """The kind of ``path`` (None when it does not exist or cannot be read)."""
    path = Path(path)
    if path.is_dir():
        return FileKind("directory", "a directory", f"give the files in it, e.g. `opflow validate {path}/*.nc`")
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if not head:
        return FileKind("empty", "an empty file (0 bytes), perhaps a write that never finished", "delete it and make it again")
    if head.startswith(_HDF5) or head[:4] in (b"CDF\x01", b"CDF\x02"):
        return FileKind("netcdf", "a NetCDF dataset file", "summarise it with `opflow inspect FILE`, check it with `opflow validate FILE`")
    if head.startswith(b"PK\x03\x04"):
        return FileKind("zip", "a zip archive (a model.pt written by `opflow train` is one)", "evaluate a model with `opflow evaluate FILE --data DATA.nc --out RESULT.json`")
    text = head.lstrip()
    if text[:1] in (b"{", b"["):
        return _json_kind(path)
    if path.suffix in (".yaml", ".yml"):
        return FileKind("yaml", "a YAML file (a workflow config?)", "resolve a run from it with `opflow run-config --config FILE --dataset NAME --model NAME`")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return FileKind("binary", "a binary file of unknown format")
    return FileKind("text", "a text file")


def _json_kind(path: Path) -> FileKind:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return FileKind("json", "a JSON text (not valid JSON as a whole: truncated?)")
    fmt = data.get("format") if isinstance(data, dict) else None
    if isinstance(fmt, str) and fmt.startswith("opflow-results/"):
        return FileKind("results", "an opflow results JSON (written by `opflow evaluate`)", "print it with `opflow show FILE`")
    return FileKind("json", "a JSON file", "opflow results files (from `opflow evaluate`) are read by `opflow show FILE`")


def wrong_file(path: str | os.PathLike[str], expected: str) -> str | None:
    """``"PATH: not <expected> but <what>; <command that fits>"``, or None when the file looks like
    ``expected`` could be in it (or cannot be sniffed), so the caller's own message stands."""
    kind = file_kind(path)
    if kind is None:
        return None
    wanted = {"a readable NetCDF-4 file": ("netcdf",), "an opflow results JSON": ("results", "json")}.get(expected, ())
    if kind.name in wanted:
        return None
    return f"{path}: not {expected} but {kind.advice(path)}"
