"""The ``opflow`` console script.

    opflow inspect FILE            summary of a dataset file
    opflow validate FILE...        schema and finite-value check (exit 1 on problems)
    opflow merge OUT SHARD...      join generation shards
    opflow derive SRC OUT ...      strided subsample + split selection
    opflow regenerate FILE         rebuild a dataset from its attributes, report per variable if identical
    opflow show RESULT.json        print a results file as a short table
    opflow curves LABEL=CURVES.json ... --out PNG
                                   several runs' training curves on shared axes (a seed study)
    opflow schema [--out FILE]     the JSON schema of the workflow config (opflow.config_schema)
    opflow run-config ...          the resolved run config (training + model + task) of a dataset/model pair
    opflow train ...               train (or resume) a model on a dataset file; torchrun-aware
    opflow evaluate MODEL ...      test errors, zero-shot errors, speed and memory -> results JSON + PNG
    opflow report RESULT.json ...  results beside the published numbers -> Markdown + HTML page
    opflow bench [--smoke]         every benchmarks/*.py -> benchmarks/results/*.json + SUMMARY.md
    opflow docs [--check]          rewrite the tables of README.md and docs/*.md made from committed records
    opflow scales CKPT --data FILE each block's output scale on a few test samples (a collapsed run: where
                                   its output stopped depending on the input)

Commands that need torch import it inside their function, so the data commands stay fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, add_args: Callable[[argparse.ArgumentParser], None]):
    def deco(fn: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = (add_args, fn)
        return fn

    return deco


@command("inspect", lambda p: p.add_argument("file", help="dataset file (NetCDF) to summarise"))
def _inspect(a: argparse.Namespace) -> int:
    """Print the summary; an unreadable or damaged file raises DatasetError (one line from main)."""
    from opflow.data.format import summary

    print(summary(a.file))
    return 0


@command("validate", lambda p: p.add_argument("files", nargs="+", help="dataset file(s) (NetCDF) to check"))
def _validate(a: argparse.Namespace) -> int:
    """Check each file (docs/format.md); one line per problem, ``FILE: INVALID: problem``; exit 1 on any.

    Besides the schema: the split contract, and the variables against those the file's generator
    declares (:mod:`opflow.data.contract`; the generators are imported from ``solvers`` when present).

    A damaged file (a chunk that does not decompress) is such a problem line, never a traceback.
    Files of an older format version pass with a ``FILE: warning: ...`` line (see docs/format.md).
    """
    from opflow.data.format import check_file

    try:  # the generators declare their variables: asked through the workflow layer (see _regenerate on this import)
        from pipeline.regenerate import declared_variables
    except ImportError as e:
        declared_variables, why = None, f"variables not checked against their generator: the solvers package cannot be imported here ({e})"
    status = 0
    for f in a.files:
        report = check_file(f, declared=declared_variables)
        if declared_variables is None:
            report.warnings.append(why)
        for w in report.warnings:
            print(f"{f}: warning: {w}")
        for pr in report.problems:
            print(f"{f}: INVALID: {pr.removeprefix(f'{f}: ')}")
        if report.problems:
            status = 1
        else:
            print(f"{f}: ok")
    return status


def _merge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="merged dataset file to write")
    p.add_argument("shards", nargs="+", help="shard files written by the generation jobs, in any order")


@command("merge", _merge_args)
def _merge(a: argparse.Namespace) -> int:
    from opflow.data.shards import merge_shards

    merge_shards(a.shards, a.out)
    return 0


def _derive_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="source dataset file (all samples of a solver run)")
    p.add_argument("out", help="derived dataset file to write")
    p.add_argument("--resolution", type=int)
    p.add_argument("--train", type=int, required=True)
    p.add_argument("--test", type=int, required=True)
    p.add_argument("--val", type=int, default=0)
    p.add_argument("--name", default="")


@command("derive", _derive_args)
def _derive(a: argparse.Namespace) -> int:
    from opflow.data.transforms import derive

    derive(a.source, a.out, resolution=a.resolution, n_train=a.train, n_test=a.test, n_val=a.val, name=a.name)
    return 0


_REGENERATE_HELP = """Rebuild FILE from its own provenance attributes (generator, parameters, seed, and for a
derived file its stride, split rule and name) and report, per variable, whether the rebuilt
data are identical to the original, bit for bit (values, dtype, dimensions and attributes).
The rebuilt file is not byte-identical: its history, creation time (opflow_created), git
commit, package versions and shard attributes record the new run and are not compared; all
other global attributes are. Exit 0 when everything compared is identical, 1 when not
(the last line says what differs), 2 when FILE cannot be regenerated. See docs/format.md."""


def _regenerate_args(p: argparse.ArgumentParser) -> None:
    p.description = _REGENERATE_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("file", help="dataset file written by the solvers, by merge or by derive")
    p.add_argument("--out", help="keep the rebuilt file here (must not exist); default: a temporary file, deleted")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when stderr is not a terminal)")


@command("regenerate", _regenerate_args)
def _regenerate(a: argparse.Namespace) -> int:
    """Rebuild a dataset from its attributes and compare (exit 0 identical, 1 not, 2 cannot).

    Regenerating data means running the generator that wrote it: :mod:`pipeline.regenerate`, the
    workflow layer above ``opflow`` and ``solvers`` (``opflow/__init__.py``, "Direction of
    imports"). The import happens here, inside the command, so importing ``opflow.cli`` (and every
    other command) still works where ``solvers`` or its heavy dependencies are absent, e.g. on a
    GPU machine with torch but no dolfinx.
    """
    from opflow.data.errors import ConfigError

    try:
        from pipeline.regenerate import SolverError, regenerate
    except ImportError as e:
        print(f"opflow: regenerate needs the solvers package and its dependencies ({e})", file=sys.stderr)
        return 2
    try:
        report = regenerate(a.file, a.out, progress=not a.no_progress and sys.stderr.isatty())
    except (ConfigError, SolverError) as e:
        print(f"opflow: {a.file}: cannot regenerate: {e}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 0 if report.identical else 1


@command("show", lambda p: p.add_argument("files", nargs="+", help="results JSON file(s) written by opflow evaluate"))
def _show(a: argparse.Namespace) -> int:
    """Print each results file; one ``opflow: FILE: problem`` line (exit 2) for an unreadable or foreign one.

    A file of another kind (a dataset, a model) is named as such with the command that reads it.
    """
    from opflow.records import RecordError, Results

    status = 0
    for f in a.files:
        try:
            lines = _results_lines(f, Results.load(f).to_dict())
        except RecordError as e:
            print(f"opflow: {e}", file=sys.stderr)
            status = 2
            continue
        print("\n".join(lines))
    return status


def _curves_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="LABEL=CURVES.json", help="a label and the curves.json that training wrote next to the model, split at the last '='")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--title", default="")


@command("curves", _curves_args)
def _curves(a: argparse.Namespace) -> int:
    """Draw the runs' curves (:func:`opflow.plots.plot_runs`); a malformed argument or a file that is
    not a curves list is one ``opflow: ...`` line and exit 2, before anything is drawn."""
    from pathlib import Path

    runs: dict[str, list] = {}
    for arg in a.runs:
        label, sep, file = arg.rpartition("=")  # at the last '=': a label may hold one (n=2048)
        if not sep or not label or not file:
            print(f"opflow: curves: {arg!r} is not LABEL=FILE (e.g. seed0=models/burgers_ft1d/curves.json)", file=sys.stderr)
            return 2
        if label in runs:
            print(f"opflow: curves: the label {label!r} is given twice; give each run its own", file=sys.stderr)
            return 2
        try:
            curves = json.loads(Path(file).read_text())
        except (OSError, ValueError) as e:
            print(f"opflow: curves: {file}: cannot read it as JSON ({e})", file=sys.stderr)
            return 2
        need = {"epoch", "train_loss", "lr"}
        if not isinstance(curves, list) or not curves or not all(isinstance(c, dict) and need <= c.keys() for c in curves):
            print(f"opflow: curves: {file}: not a training curves file (a list of epochs with {sorted(need)}); "
                  "use the curves.json that opflow train writes beside the model", file=sys.stderr)
            return 2
        runs[label] = curves
    from opflow.plots import plot_runs

    print(f"wrote {plot_runs(runs, a.out, a.title)}")
    return 0


def _results_lines(f: str, r: dict) -> list[str]:
    """The lines ``opflow show`` prints for results ``r`` of file ``f``; RecordError when a section
    that holds numbers is not a mapping (a damaged or hand-edited file)."""
    from collections.abc import Mapping

    from opflow.records import RecordError, Results

    def section(value: object, key: str) -> Mapping:
        if value is None and key != "metrics":
            return {}
        if not isinstance(value, Mapping):
            kind = "null" if value is None else type(value).__name__
            raise RecordError(f"{f}: {key!r} is {kind}, not a mapping of metric values: the file is damaged or was edited; {Results.FIX}")
        return value

    def number(values: Mapping, name: str, key: str) -> float:
        """``values[name]``, a statistic (``rel_l2_*``, ``n_samples``): a number (NaN allowed) or the refusal."""
        v = values.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float):
            json_type = {str: "a string", bool: "a boolean", list: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)
            kind = "missing" if name not in values else "null" if v is None else f"{json.dumps(v)[:40]} ({json_type})"
            raise RecordError(f"{f}: {key}.{name} is {kind}, not a number: the file is damaged or was edited; {Results.FIX}")
        return v

    lines = [f"{f}:"]
    for k in ("dataset", "model", "device", "epochs", "parameters", "train_time_s"):
        if k in r:
            lines.append(f"  {k}: {r[k]}")
    m = section(r.get("metrics"), "metrics")
    not_shown = []
    for k, v in m.items():
        if k.startswith("rel_l2_") or k == "n_samples":  # statistics: numbers, whatever else a file may note
            lines.append(f"  {k}: {number(m, k, 'metrics'):.5g}")
        elif isinstance(v, bool) or isinstance(v, str):
            lines.append(f"  {k}: {v}")
        elif isinstance(v, int | float):
            lines.append(f"  {k}: {v:.5g}")
        elif k != "frame_groups":
            not_shown.append(k)
    for name, v in section(m.get("frame_groups"), "metrics.frame_groups").items():
        g = section(v, f"metrics.frame_groups.{name}")
        frames = g.get("frames")
        if not (isinstance(frames, list | tuple) and len(frames) == 2):
            raise RecordError(f"{f}: metrics.frame_groups.{name}.frames is {frames!r}, not [first, last]: the file is damaged or was edited; {Results.FIX}")
        lines.append(f"  frames {frames[0]}-{frames[1]} ({name}): rel L2 mean {number(g, 'rel_l2_mean', f'metrics.frame_groups.{name}'):.5g}")
    for res, v in section(r.get("zero_shot"), "zero_shot").items():
        lines.append(f"  zero-shot {res}: rel L2 mean {number(section(v, f'zero_shot.{res}'), 'rel_l2_mean', f'zero_shot.{res}'):.5g}")
    for name, v in section(r.get("eval_sets"), "eval_sets").items():
        e, key = section(v, f"eval_sets.{name}"), f"eval_sets.{name}"
        stats = " ".join(f"{label} {number(e, f'rel_l2_{label}', key):.5g}" for label in ("mean", "median", "max"))
        lines.append(f"  eval set {name}: rel L2 {stats}")
    if not_shown:
        lines.append(f"  (in the file, not shown: metrics {', '.join(not_shown)})")
    return lines


def _stderr_handler() -> "logging.Handler":
    """A logging handler writing to whatever ``sys.stderr`` is at the time of each message."""
    import logging

    class Handler(logging.StreamHandler):
        @property  # type: ignore[override]
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, value) -> None:
            pass

    return Handler()


def _learning_command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Log to stderr and turn configuration mistakes into one-line ``opflow: ...`` errors (exit 2)."""

    def wrapped(a: argparse.Namespace) -> int:
        import logging

        from opflow.data.errors import ConfigError

        logger = logging.getLogger("opflow")
        if not logger.handlers:
            handler = _stderr_handler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        try:
            return fn(a)
        except ConfigError as e:  # every problem of the config, one line each
            print("\n".join(f"opflow: {p}" for p in e.problems), file=sys.stderr)
            return 2

    wrapped.__doc__ = fn.__doc__
    return wrapped


def _json_arg(text: str) -> dict:
    """A JSON object given inline or as @path (errors name the file)."""
    from opflow.data.errors import ConfigError

    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path) as fh:
                value = json.load(fh)
        except OSError as e:
            raise ConfigError(f"{path}: cannot read it ({e.strerror or e})") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON, truncated or damaged ({e.msg} at line {e.lineno} column {e.colno})") from None
        where = path
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"cannot read the JSON argument {text[:60]!r}: {e}") from None
        where = f"the JSON argument {text[:60]!r}"
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def _run_from_args(a: argparse.Namespace) -> dict:
    """The resolved run of ``--run-json``, or of ``--config FILE... --dataset --model``.

    Config files go through the workflow's own loader (:func:`pipeline.config.load_workflow`, the one
    rules/common.smk calls), so a config Snakemake refuses is refused here with the same lines,
    before any data is read. Like ``regenerate``, this imports the workflow layer inside the
    command: the generators' metadata are part of the checks (split sizes, resolutions, variables,
    frames).
    """
    from opflow.config import resolve_run
    from opflow.data.errors import ConfigError

    if a.run_json:
        return _json_arg(a.run_json)
    if not (a.config and a.dataset and a.model):
        raise ConfigError("give either --run-json RUN or --config FILE... --dataset NAME --model NAME")
    try:
        from pipeline.config import load_workflow
    except ImportError as e:
        raise ConfigError(
            f"--config needs the solvers package to check the config as the workflow does ({e}); "
            "give the resolved run instead (--run-json, from `opflow run-config` where solvers is installed)"
        ) from None
    wf = load_workflow(a.config, pairs=[(a.dataset, a.model)])
    return resolve_run(wf, a.dataset, a.model, getattr(a, "data", None))


def _run_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-json", help="resolved run config as JSON or @file (what the workflow passes)")
    p.add_argument("--config", nargs="+", metavar="YAML", help="workflow config file(s), merged in order, instead of --run-json")
    p.add_argument("--dataset", help="dataset name (with --config)")
    p.add_argument("--model", help="model name (with --config)")


def _run_config_args(p: argparse.ArgumentParser) -> None:
    _run_source_args(p)
    p.add_argument("--data", help="training data file recorded in the run's paths")


@command("schema", lambda p: p.add_argument("--out", help="write to this file instead of standard output"))
def _schema(a: argparse.Namespace) -> int:
    """The JSON schema of the workflow config, generated from the models the loader uses
    (:mod:`opflow.config_schema`), for editors and for checking a config with a JSON-schema validator.

    Like ``regenerate``, it imports the workflow layer here, inside the command, to type each
    solver's ``params`` (:func:`pipeline.config.workflow_schema`); where that import fails, a
    warning says so and ``params`` stay open mappings.
    """
    try:
        from pipeline.config import workflow_schema

        schema = workflow_schema()
    except ImportError as e:
        from opflow.config_schema import workflow_json_schema

        print(f"opflow: warning: sources.<name>.params are left untyped: the solvers package cannot be imported here ({e})", file=sys.stderr)
        schema = workflow_json_schema(None)
    text = json.dumps(schema, indent=1, sort_keys=True) + "\n"
    if a.out:
        from opflow.atomic import atomic_write_text

        atomic_write_text(a.out, text)
    else:
        sys.stdout.write(text)
    return 0


@command("run-config", _run_config_args)
@_learning_command
def _run_config(a: argparse.Namespace) -> int:
    print(json.dumps(_run_from_args(a), indent=1, sort_keys=True))
    return 0


_TRAIN_HELP = """Train (or resume) a model on a dataset file (opflow.train); run under torchrun for DDP.

A checkpoint is written every training.checkpoint_every epochs; the same command resumes from it.
When the output folder already holds this run's finished model (same run hash and data), the
command does nothing and says so (exit 0); one of another run is refused, naming what differs
(exit 2). --restart trains from scratch in either case, replacing the model when it completes
(until then its curves are checkpoint-curves.csv/json/png, beside the checkpoint; a call of it
that stops early is resumed without --restart, and the command to do so is printed).
For machines lent in short commands, give each call a time budget with --max-minutes-this-call M
or the environment variable OPFLOW_TRAIN_MAX_MINUTES=M (the flag wins): the call stops before an
epoch that would end past M minutes (estimated from the longest epoch of the call x 1.25; the
first epoch of a call always runs), leaves a checkpoint and exits with status 75 (EX_TEMPFAIL):
rerun the same command to resume. Exit status: 0 done, already trained, or stopped by
--max-epochs-this-call, 75 stopped by the time budget (under torchrun: each worker's, torchrun's
own is 1), 2 bad configuration or data (or a model or checkpoint of another run)."""


def _train_args(p: argparse.ArgumentParser) -> None:
    p.description = _TRAIN_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    _run_source_args(p)
    p.add_argument("--data", required=True, help="dataset file (train and test splits)")
    p.add_argument("--output", help="final model file (default OUT_DIR/model.pt)")
    p.add_argument("--out-dir", help="folder for checkpoint and curves (default: the output's folder, or models/DATASET_MODEL)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--restart", action="store_true", help="discard an existing checkpoint or finished model and train from scratch")
    g.add_argument(
        "--restart-if-changed", action="store_true",
        help="resume a matching checkpoint (or do nothing for a matching finished model), train from scratch over one of another run",
    )
    p.add_argument("--device", help="override training.device (auto, cpu, cuda, cuda:N, mps)")
    p.add_argument("--threads", type=int, help="CPU threads (default training.threads)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when stderr is not a terminal)")
    p.add_argument("--max-epochs-this-call", type=int, help="stop after this many epochs, leaving a checkpoint to resume from")
    p.add_argument(
        "--max-minutes-this-call", type=float, metavar="M",
        help="time budget of this call in minutes (> 0; default: $OPFLOW_TRAIN_MAX_MINUTES, else none): stop with a checkpoint "
        "before an epoch that would end later, exit status 75; rerun to resume",
    )


@command("train", _train_args)
@_learning_command
def _train(a: argparse.Namespace) -> int:
    from pathlib import Path

    from opflow.train import EX_TEMPFAIL, budget_seconds, train

    budget = budget_seconds(a.max_minutes_this_call)  # a bad budget is refused before anything is read
    run = _run_from_args(a)
    out_dir = a.out_dir or (str(Path(a.output).parent) if a.output else f"models/{run['dataset']}_{run['model']}")
    try:
        res = train(
            run,
            a.data,
            out_dir,
            output=a.output,
            restart=a.restart,
            restart_if_changed=a.restart_if_changed,
            progress=False if a.no_progress else None,
            max_epochs_this_call=a.max_epochs_this_call,
            max_seconds_this_call=budget,
            threads=a.threads,
            device=a.device,
        )
    except FloatingPointError as e:  # a non-finite loss or a divergence: the message says what to change
        print(f"opflow: {e}", file=sys.stderr)
        return 1
    if res.already_finished:  # a finished run is a no-op (--restart trains it again)
        print(f"opflow: {res.message}", file=sys.stderr)
        return 0
    resume = _resume_command(a)
    if res.stopped_by == "time_budget":  # its line (stopped after epoch N of M ..., rerun to resume) is logged
        if a.restart:
            print(f"opflow: resume with: {resume}", file=sys.stderr)
        return EX_TEMPFAIL
    if not res.complete:
        how = f"resume without --restart: {resume}" if a.restart else "resume with the same command"
        print(f"stopped after epoch {res.epochs_done}; {how} ({res.checkpoint_path})", file=sys.stderr)
    return 0


def _resume_command(a: argparse.Namespace) -> str:
    """The command that resumes a call stopped early: this call's, without ``--restart`` (which
    would discard the checkpoint the call just wrote)."""
    import shlex

    args = list(getattr(a, "argv", None) or [])
    return shlex.join(["opflow", *(x for x in args if x != "--restart")])


def _eval_set_arg(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, got {text!r}")
    return name, path


def _evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_file", help="model.pt written by opflow train")
    p.add_argument("--data", required=True, help="dataset file whose test split is evaluated")
    p.add_argument("--zero-shot", nargs="*", default=[], metavar="FILE", help="the same dataset at other resolutions")
    p.add_argument("--eval-set", action="append", default=[], type=_eval_set_arg, metavar="NAME=FILE", help="an extra evaluation set (repeatable)")
    p.add_argument("--out", required=True, help="results JSON")
    p.add_argument("--png", help="prediction/error figure (default: the JSON path with .png)")
    p.add_argument("--no-png", action="store_true", help="skip the figure")
    p.add_argument("--eval-config", help="the evaluate: section as JSON or @file")
    p.add_argument("--config", nargs="+", metavar="YAML", help="workflow config file(s) to read evaluate: from")
    p.add_argument("--device", help="override evaluate.device")
    p.add_argument("--threads", type=int, help="CPU threads (default evaluate.threads)")


@command("evaluate", _evaluate_args)
@_learning_command
def _evaluate(a: argparse.Namespace) -> int:
    from pathlib import Path

    from opflow.config import eval_config, load_config_files
    from opflow.data.errors import ConfigError
    from opflow.evaluate import evaluate

    if a.eval_config:
        cfg = eval_config({"evaluate": _json_arg(a.eval_config)})
    else:
        cfg = eval_config(load_config_files(a.config) if a.config else {})
    names = [n for n, _ in a.eval_set]
    if len(set(names)) != len(names):
        raise ConfigError(f"--eval-set names repeat: {names}; give each evaluation set its own name")
    png = None if a.no_png else (a.png or str(Path(a.out).with_suffix(".png")))
    evaluate(a.model_file, a.data, a.out, zero_shot=a.zero_shot, eval_sets=dict(a.eval_set), png=png, config=cfg, device=a.device, threads=a.threads)
    return 0


def _report_args(p: argparse.ArgumentParser) -> None:
    from opflow.report import add_arguments

    add_arguments(p)


@command("report", _report_args)
def _report(a: argparse.Namespace) -> int:
    """The reproduction report (:mod:`opflow.report`)."""
    from opflow.report import run

    return run(a)


def _publish_args(p: argparse.ArgumentParser) -> None:
    from opflow.publish import add_arguments

    add_arguments(p)


@command("publish", _publish_args)
def _publish(a: argparse.Namespace) -> int:
    """Record a finished paper-protocol run under published/ (:mod:`opflow.publish`)."""
    from opflow.publish import run

    return run(a)


def _queue_args(p: argparse.ArgumentParser) -> None:
    from opflow.queue import add_arguments

    add_arguments(p)


@command("queue", _queue_args)
def _queue(a: argparse.Namespace) -> int:
    """The GPU lease queue and what the next lease trains (:mod:`opflow.queue`)."""
    from opflow.queue import run

    return run(a)


def _bench_args(p: argparse.ArgumentParser) -> None:
    from opflow.bench import add_arguments

    add_arguments(p)


@command("bench", _bench_args)
def _bench(a: argparse.Namespace) -> int:
    """Run the benchmarks (:mod:`opflow.bench`); exit 1 when one failed."""
    from opflow.bench import run

    return run(a)


def _docs_args(p: argparse.ArgumentParser) -> None:
    from opflow.doc_tables import add_arguments

    add_arguments(p)


@command("docs", _docs_args)
def _docs(a: argparse.Namespace) -> int:
    """The generated tables of the README and docs/ (:mod:`opflow.doc_tables`); --check: exit 1 when one is stale."""
    from opflow.doc_tables import run

    return run(a)


def _scales_args(p: argparse.ArgumentParser) -> None:
    from opflow.layer_scales import add_arguments

    add_arguments(p)


@command("scales", _scales_args)
@_learning_command
def _scales(a: argparse.Namespace) -> int:
    """Each block's output scale on a few test samples (:mod:`opflow.layer_scales`): where a collapsed run lost its input."""
    from opflow.layer_scales import run

    return run(a)


def build_parser() -> argparse.ArgumentParser:
    """The ``opflow`` argument parser: one subcommand per entry of :data:`COMMANDS`."""
    ap = argparse.ArgumentParser(prog="opflow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, (add_args, _) in COMMANDS.items():
        add_args(sub.add_parser(name))
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; a bad file or value is one ``opflow: ...`` line on stderr and exit 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    a.argv = argv  # what the user typed, for the hints that print a command
    from opflow.data.format import DatasetError

    try:
        status = COMMANDS[a.cmd][1](a)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
        return status
    except DatasetError as e:
        print(f"opflow: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `opflow show FILE | head -5`: the reader has all it wanted
        return _stdout_closed()


#: the exit status of a command whose standard output was closed by its reader (128 + SIGPIPE, as
#: a shell reports ``cat FILE | head -1``'s cat)
EX_PIPE_CLOSED = 141


def _stdout_closed() -> int:
    """Point standard output at /dev/null, so that the interpreter's last flush does not fail again,
    and return :data:`EX_PIPE_CLOSED`: no traceback, no message (the reader closed the pipe on purpose)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a replaced sys.stdout): nothing left to flush
        pass
    return EX_PIPE_CLOSED


if __name__ == "__main__":
    sys.exit(main())
