"""Published reproductions: the committed record of a finished paper-protocol run.

A run of the paper profile (``config/default.yaml``) whose run hash is the one that profile gives
its (dataset, model) pair is a reproduction of the published protocol. ``opflow publish`` copies
its artefacts into ``published/<dataset>_<model>/``, the folder that is committed to the
repository, and writes ``record.json`` beside them:

==================  ==============================================================================
file                what
==================  ==============================================================================
result.json         the results JSON of ``opflow evaluate`` (metrics, run config and hash, data checksums)
prediction.png      its figure (median and worst test samples)
curves.csv/.json    the training curves; curves.png their plot (when the trainer drew one)
train.log           the trainer's log (every epoch, resumes marked)
record.json         target, run hash (= the paper profile's, checked), our numbers beside every
                    published one of ``config/reference.yaml`` with the ratio, the machine (CPU, cores,
                    torch), the configured training threads (Snakemake caps them at --cores), the median
                    epoch time, training time and device, a free-text note, the git commit, date
==================  ==============================================================================

A run whose hash is not the paper profile's is refused (exit 2): it is not the published protocol.
Everything is written to temporary names and renamed when complete (:mod:`opflow.atomic`).
``rules/publish.smk`` runs it: ``snakemake --cores 2 published/<dataset>_<model>/record.json``
regenerates the data, trains, evaluates and publishes in one command; ``opflow report`` reads the
records as results (``published/*/result.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

from opflow.atomic import atomic_path, atomic_write_text
from opflow.doc_tables import PROGRESS_BLOCK
from opflow.data.errors import ConfigError
from opflow.records import Results
from opflow.reference import DEFAULT_REFERENCE, RefEntry, load_reference
from opflow.report import DEFAULT_PAPER_CONFIG, paper_hashes, statistic_of

__all__ = ["ARTEFACTS", "machine", "publish"]

#: (source relative to the run's model folder or results file, name in the record folder)
ARTEFACTS = ("curves.csv", "curves.json", "curves.png", "train.log")


def machine() -> dict[str, Any]:
    """What ran it: the processor, logical cores, OS, Python and torch versions."""
    import torch

    from opflow.runtime import cpu_identity

    cpu = cpu_identity().get("model_name") or platform.processor() or platform.machine()
    return {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _copy(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def publish(
    results: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    model_dir: str | os.PathLike[str] | None = None,
    paper_config: str | os.PathLike[str] = DEFAULT_PAPER_CONFIG,
    reference: str | os.PathLike[str] = DEFAULT_REFERENCE,
    git_commit: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """Write the record of the run behind ``results`` into ``out_dir``; return ``record.json``'s content.

    ``model_dir``: the run's ``models/<dataset>_<model>`` folder (its curves and log are copied; default:
    ``<results>/../../models/<dataset>_<model>``). Raises :class:`ConfigError` when the run is not the
    paper protocol (its run hash differs from the one ``paper_config`` gives the pair). ``note``: the
    circumstances a reader needs (threads actually used, load, resumes), stored as given.
    """
    results = Path(results)
    res = Results.load(results)
    pair = (res.dataset, res.model)
    paper = paper_hashes(paper_config, [pair])[pair]
    if paper is None:
        raise ConfigError(f"{results}: the paper profile {paper_config} has no dataset {res.dataset!r} with model {res.model!r}; nothing to publish")
    if paper != res.run_hash:
        raise ConfigError(
            f"{results}: run hash {res.run_hash} is not the paper profile's {paper} for {res.dataset}_{res.model}: not the published "
            "protocol (a reduced or changed run), so it is not published; rerun it with the paper profile"
        )
    model_dir = Path(model_dir) if model_dir is not None else results.parent.parent / "models" / f"{res.dataset}_{res.model}"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _copy(results, out / "result.json")
    png = results.with_suffix(".png")
    copied = ["result.json"]
    if png.exists():
        _copy(png, out / "prediction.png")
        copied.append("prediction.png")
    for name in ARTEFACTS:
        if (model_dir / name).exists():
            _copy(model_dir / name, out / name)
            copied.append(name)
    published = []
    for e in load_reference(reference):
        if (e.dataset, e.model) != pair:
            continue
        ours = statistic_of(res, e.statistic, e.where, e.metric)
        ratio, meets = e.compare(ours)  # a bound ("<"): ours / bound and whether ours is below it
        published.append(
            {"key": e.key, "published": e.value, "relation": e.relation, "ours": ours, "ratio": ratio, "meets": meets, "paper": e.paper, "table": e.table}
        )
    training = (res.run.get("training") or {}) if isinstance(res.run, dict) else {}
    epoch_times = []
    if (model_dir / "curves.json").exists():
        curves = json.loads((model_dir / "curves.json").read_text())
        rows = curves if isinstance(curves, list) else curves.get("epochs", curves.get("curves", []))
        epoch_times = sorted(float(r["epoch_time_s"]) for r in rows if isinstance(r, dict) and "epoch_time_s" in r)
    record = {
        "target": f"results/{res.dataset}_{res.model}.json",
        "dataset": res.dataset,
        "model": res.model,
        "run_hash": res.run_hash,
        "paper_hash": paper,
        "parameters": res.parameters,
        "epochs": res.epochs,
        "n_test": res.n_test,
        "train_time_s": res.train_time_s,
        "train_device": res.train_device,
        "train_device_name": res.train_device_name,
        "train_threads_configured": training.get("threads"),
        "epoch_time_s_median": epoch_times[len(epoch_times) // 2] if epoch_times else None,
        "note": note,
        "train_world_size": res.train_world_size,
        "published": published,
        "machine": machine(),
        "git_commit": git_commit,
        "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": copied,
        "rerun": f"snakemake --cores 2 published/{res.dataset}_{res.model}/record.json",
    }
    atomic_write_text(out / "record.json", json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def drop_progress(folder: str | os.PathLike[str]) -> list[str]:
    """Remove what a record folder held while its run was in progress: the pointer to the checkpoint a lease resumed
    from and that checkpoint (:mod:`opflow.lease_state`, in this repository's ``.lease-state/``), and a README.md that
    says where the run stands (it holds the ``run-progress`` block); the names removed. A README without that block
    is kept. The record and the report say everything of a finished run."""
    from opflow import lease_state

    folder = Path(folder)
    dropped = lease_state.drop(Path(__file__).resolve().parents[1], folder)
    page = folder / "README.md"
    if page.exists() and f"<!-- generated: {PROGRESS_BLOCK} -->" in page.read_text():
        page.unlink()
        dropped.append("README.md")
    return dropped


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``opflow publish``."""
    p.add_argument("results", help="results JSON of a paper-profile run (results/<dataset>_<model>.json)")
    p.add_argument("--out", required=True, help="record folder to write (published/<dataset>_<model>)")
    p.add_argument("--model-dir", default=None, help="the run's models/<dataset>_<model> folder (default: beside the results folder)")
    p.add_argument("--paper-config", default=str(DEFAULT_PAPER_CONFIG), help="the paper profile (default: config/default.yaml)")
    p.add_argument("--reference", default=str(DEFAULT_REFERENCE), help="published numbers (default: config/reference.yaml)")
    p.add_argument("--note", default="", help="circumstances of the run to record (threads used, machine load, resumes)")


def run(a: argparse.Namespace) -> int:
    """``opflow publish``: write the record; one line per published number."""
    from opflow.data.provenance import git_commit

    try:
        rec = publish(a.results, a.out, model_dir=a.model_dir, paper_config=a.paper_config, reference=a.reference, git_commit=git_commit(), note=a.note)
    except ConfigError as e:
        print(f"opflow publish: {e}")
        return 2
    for p in rec["published"]:
        ratio = "-" if p["ratio"] is None else f"{p['ratio']:.3g}"
        if p.get("meets") is not None:
            ratio = RefEntry.bound_text(p["ratio"], p["meets"])
        ours = "not in the results" if p["ours"] is None else f"{p['ours']:.4g}"
        print(f"{a.out}: {p['key']}: ours {ours}, published {p['relation']} {p['published']:.4g} ({p['paper']}, {p['table']}), ratio {ratio}")
    if not rec["published"]:
        print(f"{a.out}: {rec['dataset']}_{rec['model']}: no published number in the reference")
    gone = drop_progress(a.out)  # the record is written: what the run in progress left goes
    if gone:
        names = gone[0] if len(gone) == 1 else f"{', '.join(gone[:-1])} and {gone[-1]}"
        print(f"{a.out}: removed {names} of the run in progress (the record says the rest)")
    return 0
