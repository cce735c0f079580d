"""The one-line reason of each failed job of a Snakemake run, for the terminal.

Every job of the workflow writes its errors to its own log (``2> {log}`` in the rules), and
Snakemake names that log but does not show it: a full disk, a solver that did not converge or a
damaged checkpoint was found only by opening the file. The Snakefile's ``onerror`` handler calls
:func:`explain_failed_jobs` with Snakemake's own log of the run; it finds the failed jobs there
(their ``Error in rule R:`` blocks and ``log:`` lines) and prints the last line of each job's
log, which is the one-line message of the ``opflow`` and ``solvers`` command lines.

The rules' shell commands stay as they are: Snakemake reruns every job whose command text changed
(its ``code`` trigger), so the reason is shown from here rather than by the commands. Standard
library only.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

_ERROR = re.compile(r"Error in rule (\S+):$")
_LOG = re.compile(r"\s+log: (.+?) \(check log file\(s\) for error details\)$")


def failed_job_logs(snakemake_logs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None) -> list[tuple[str, list[str]]]:
    """``[(rule name, [job log, ...]), ...]`` of every job that Snakemake's log(s) of a run (a path, or
    a list of them: ``onerror``'s ``log``) report as failed."""
    paths = [snakemake_logs] if isinstance(snakemake_logs, str | os.PathLike) else list(snakemake_logs or [])
    failed: list[tuple[str, list[str]]] = []
    for p in paths:
        try:
            text = Path(p).read_text(errors="replace")
        except OSError:
            continue
        name = None
        for line in text.splitlines():
            m = _ERROR.match(line)
            if m:
                name = m[1]
                continue
            if name is not None and not line.startswith(" "):
                name = None
            m = _LOG.match(line) if name else None
            if m:
                failed.append((name, [f.strip() for f in m[1].split(",") if f.strip()]))
    return failed


def last_line(path: str | os.PathLike[str]) -> str | None:
    """The last non-empty line of a job's log (progress bars rewrite a line with carriage returns)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", text) if ln.strip()]
    return lines[-1] if lines else None


def explain_failed_jobs(snakemake_logs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None, stream: TextIO | None = None) -> list[str]:
    """Print (to ``stream``, default stderr) and return one line per failed job:
    ``opflow: rule R failed: <last line of its log> (log: PATH)``."""
    lines = []
    for name, logs in failed_job_logs(snakemake_logs):
        for path in logs:
            why = last_line(path)
            if why:
                lines.append(f"opflow: rule {name} failed: {why.removeprefix('opflow: ')} (log: {path})")
    for line in lines:
        print(line, file=stream or sys.stderr)
    return lines
