"""The GPU-machine scripts (docs/gpu.md): a training stopped by its time budget is carried back and resumed.

``scripts/device_run.sh`` runs Snakemake targets in one command of a borrowed GPU machine: datasets first, then the
state of the last command restored, then the targets with every training job under ``OPFLOW_TRAIN_MAX_MINUTES``,
then the state packed into ``$OUT``; ``scripts/device_pull.sh`` takes it back for the next command. Here the
whole cycle runs on the CPU on a tiny Lorenz-63 target whose 2 epochs need two commands.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from workflow_helpers import ROOT, TINY

SCRIPTS = ROOT / "scripts"
TARGET = "out/results/lorenz_tiny_tno.json"


def _config(tmp: Path) -> Path:
    cfg = {k: v for k, v in TINY.items() if k not in ("sources", "datasets")}
    cfg["sources"] = {k: v for k, v in TINY["sources"].items() if k.startswith("lorenz63")}
    datasets = dict(TINY["datasets"])
    lt = dict(datasets["lorenz_tiny"])
    lt["training"] = {**lt["training"], "epochs": 2}
    cfg["datasets"] = {"lorenz_tiny": lt, **{k: v for k, v in datasets.items() if k.startswith("lorenz63")}}
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _device_command(work: Path, out: Path, state: Path, config: Path, wheels: Path) -> subprocess.CompletedProcess:
    """One 'command on the GPU machine': a fresh $OUT, the state carried in, a budget far below one epoch."""
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable}
    cmd = [
        str(SCRIPTS / "device_run.sh"), "--minutes", "0.0001", "--state", str(state), "--wheels", str(wheels), "--",
        TARGET, "--configfile", str(ROOT / "config/quick.yaml"), str(config),
    ]  # fmt: skip  (the target first, as in docs/gpu.md: no option may read it as one of its values)
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)


def _pull(out: Path, state: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPTS / "device_pull.sh"), str(out), str(state)], capture_output=True, text=True, timeout=120)


def test_a_budget_stopped_training_is_carried_back_and_resumed(tmp_path: Path) -> None:
    config, wheels, state = _config(tmp_path), tmp_path / "no-wheels", tmp_path / "carry" / ".device-state"
    wheels.mkdir()

    # command 1 (a bare machine): the data are made, epoch 1 runs, the budget stops the job with its checkpoint
    (tmp_path / "machine1").mkdir()
    first = _device_command(tmp_path / "machine1", tmp_path / "out1", state, config, wheels)
    assert first.returncode != 0, first.stdout + first.stderr
    # the data step made the target's datasets alone (not those of `rule all`) and succeeded
    assert "datasets: exit 0" in first.stdout, first.stdout + (tmp_path / "machine1/logs/device/data.log").read_text()
    log1 = (tmp_path / "machine1/out/models/lorenz_tiny_tno/train.log").read_text()
    assert "stopped after epoch 1 of 2" in log1, log1
    assert not (tmp_path / "machine1" / TARGET).exists()
    # made there uncompressed (OPFLOW_DATA_COMPLEVEL=0): the files live minutes, and zlib was most of a merge
    import netCDF4

    made = sorted((tmp_path / "machine1/out/data").rglob("*.nc"))
    assert made
    for path in made:
        with netCDF4.Dataset(path) as nc:
            assert not any(v.filters()["zlib"] for v in nc.variables.values()), path
    parts = sorted((tmp_path / "out1").glob("state.tgz.part-*"))
    assert parts and all(p.stat().st_size <= 15 * 2**20 for p in parts)
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
        members = tar.getnames()
    assert "./out/models/lorenz_tiny_tno/checkpoint.pt" in members
    assert all(m.startswith(("./out/models/", "./out/results/", "./out/logs/train/", "./out/logs/evaluate/", "./logs/device/")) for m in members), members
    assert not any("/data/" in m for m in members)  # datasets are regenerated, never carried
    pulled = _pull(tmp_path / "out1", state)
    assert pulled.returncode == 0, pulled.stderr
    tree = state.parent / ".device-tree"
    assert (tree / "out/models/lorenz_tiny_tno/checkpoint.pt").is_file()

    # command 2 (another bare machine): data regenerated, checkpoint restored, epoch 2 resumed, then evaluation
    (tmp_path / "machine2").mkdir()
    second = _device_command(tmp_path / "machine2", tmp_path / "out2", state, config, wheels)
    assert second.returncode == 0, second.stdout + second.stderr
    log2 = (tmp_path / "machine2/out/models/lorenz_tiny_tno/train.log").read_text()
    assert re.search(r"--- resumed at epoch 1 ", log2), log2
    assert "started from scratch" in log2 and log2.count("started from scratch") == 1  # command 1's marker, carried
    result = json.loads((tmp_path / "machine2" / TARGET).read_text())
    assert result["epochs"] == 2
    assert _pull(tmp_path / "out2", state).returncode == 0

    # command 3: the finished model is restored and nothing is trained again
    (tmp_path / "machine3").mkdir()
    third = _device_command(tmp_path / "machine3", tmp_path / "out3", state, config, wheels)
    assert third.returncode == 0, third.stdout + third.stderr
    log3 = (tmp_path / "machine3/out/models/lorenz_tiny_tno/train.log").read_text()
    assert log3 == log2
    assert "Nothing to be done" in (tmp_path / "machine3/logs/device/run.log").read_text()


def test_pull_refuses_a_folder_without_state_and_keeps_the_last_state(tmp_path: Path) -> None:
    state = tmp_path / ".device-state"
    state.mkdir()
    (state / "state.tgz.part-0").write_bytes(b"last good state")
    empty = tmp_path / "files"
    empty.mkdir()
    r = _pull(empty, state)
    assert r.returncode == 1 and "no state.tgz.part-*" in r.stderr
    assert (state / "state.tgz.part-0").read_bytes() == b"last good state"


def test_device_run_names_missing_targets_and_bad_budgets(tmp_path: Path) -> None:
    run = SCRIPTS / "device_run.sh"
    no_target = subprocess.run([str(run), "--minutes", "7"], cwd=tmp_path, capture_output=True, text=True)
    assert no_target.returncode == 2 and "name the Snakemake targets" in no_target.stderr
    bad = subprocess.run([str(run), "--minutes", "0", "--", "x"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 2 and "--minutes must be a positive number" in bad.stderr
    for jobs in ("0", "two", "1.5"):
        shared = subprocess.run([str(run), "--gpu-jobs", jobs, "--", "x"], cwd=tmp_path, capture_output=True, text=True)
        assert shared.returncode == 2 and f"--gpu-jobs must be a whole number of jobs, 1 or more, got '{jobs}'" in shared.stderr


def _imports_fem_stack(path: Path) -> bool:
    """Whether a test file imports dolfinx, gmsh or basix, or the modules built on them, at module level."""
    fem = ("dolfinx", "gmsh", "basix", "meshes", "solvers.darcy_fem", "solvers.elasticity")
    for node in ast.parse(path.read_text()).body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n == f or n.startswith(f + ".") for n in names for f in fem):
            return True
    return False


def test_the_test_files_left_out_on_the_gpu_machine_are_those_importing_the_fem_stack() -> None:
    env = (SCRIPTS / "device_env.sh").read_text()
    listed = set(re.search(r"DEVICE_FEM_TEST_FILES=\(([^)]*)\)", env).group(1).split())
    assert all((ROOT / f).is_file() for f in listed)
    importing = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if _imports_fem_stack(p)}
    assert importing <= listed, importing - listed
    assert '-m "not fem"' in env  # the tests that need the stack only at run time carry the fem marker
    for script in ("device_test.sh", "device_session.sh"):  # both runs of the suite there leave them out, the same way
        text = (SCRIPTS / script).read_text()
        assert "device_pytest_skips" in text and '"${DEVICE_PYTEST_SKIPS[@]}"' in text, script


def test_the_skips_are_the_listed_files_and_the_fem_marker() -> None:
    done = subprocess.run(["bash", "-c", f'source "{SCRIPTS / "device_env.sh"}"; device_pytest_skips; printf "%s\\n" "${{DEVICE_PYTEST_SKIPS[@]}}"'],
                          capture_output=True, text=True, timeout=60)
    args = done.stdout.splitlines()
    assert args[:2] == ["-m", "not fem"]
    assert args[2::2] == ["--ignore"] * len(args[2::2]) and "tests/solvers/test_darcy_fem.py" in args[3::2]


def test_the_lease_script_refuses_bad_arguments_before_any_work(tmp_path: Path) -> None:
    session = SCRIPTS / "device_session.sh"
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    bad = subprocess.run([str(session), "--deadline", "9m"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--deadline must be whole seconds" in bad.stderr
    unknown = subprocess.run([str(session), "--minutes", "7"], env=env, capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "unknown argument '--minutes'" in unknown.stderr
    both = subprocess.run([str(session), "--steps", "train,queue"], env=env, capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "train and queue both take the time that is left" in both.stderr
    graphs = subprocess.run([str(session), "--steps", "step", "--graphs"], env=env, capture_output=True, text=True, timeout=60)
    assert graphs.returncode == 2 and "--graphs applies to the trainings of the steps precision, queue and train" in graphs.stderr
    compiled = subprocess.run([str(session), "--steps", "precision,step", "--compile"], env=env, capture_output=True, text=True, timeout=60)
    assert compiled.returncode == 2 and "--compile applies to the trainings of the steps queue and train" in compiled.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was started or written
    usage = subprocess.run([str(session), "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "--rehearse" in usage.stdout and "set -uo" not in usage.stdout


def test_a_step_the_deadline_leaves_no_time_for_is_skipped_not_run_without_a_limit(tmp_path: Path) -> None:
    """Each step runs under `timeout min(cap, time left)`; with no second left the step is skipped with one line
    (GNU `timeout 0` would run it with no limit, past the lease's command limit, and the logs would be lost)."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    done = subprocess.run([str(SCRIPTS / "device_session.sh"), "--steps", "capture", "--rehearse", "--deadline", "15"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "skipped, no time left before the deadline: " in done.stdout and "graph_capture: exit 124" in done.stdout
    assert (tmp_path / "out" / "session-logs.tgz").exists()
    assert not (tmp_path / "out" / "graph_capture_cuda.json").exists()


def test_a_deadline_past_the_command_limit_is_brought_under_it(tmp_path: Path) -> None:
    """The tool kills a command at 600 s: a longer --deadline would let the trainings run past the packing.
    (The unknown step then stops the script before any work.)"""
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    done = subprocess.run([str(SCRIPTS / "device_session.sh"), "--deadline", "900", "--steps", "nosuch"], env=env, capture_output=True, text=True, timeout=60)
    assert "--deadline 900 is past what one command may run (600 s, less 30 s for the packing); using 570" in done.stderr
    assert done.returncode == 2 and "unknown step 'nosuch'" in done.stderr


def test_help_prints_the_usage_header_and_nothing_of_the_code() -> None:
    done = subprocess.run([str(SCRIPTS / "device_run.sh"), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "Usage" in done.stdout and "--minutes M" in done.stdout
    assert "set -uo" not in done.stdout and not any(line.startswith("#") for line in done.stdout.splitlines())


def _tiny_wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel (module ``opflow_tiny_probe``), as pip installs any other."""
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "opflow_tiny_probe-1.0-py3-none-any.whl"
    info = "opflow_tiny_probe-1.0.dist-info"
    files = {
        "opflow_tiny_probe.py": "VALUE = 42\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: opflow-tiny-probe\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(name, text)
    return path


def _source_env(wheels: Path, tmp: Path) -> subprocess.CompletedProcess:
    script = (
        f'source "{SCRIPTS / "device_env.sh"}"; device_install_wheels "{wheels}" probe || exit $?; '
        '"$PYTHON" -c "import opflow_tiny_probe as m; print(m.VALUE)"'
    )
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp), "PYTHONPATH": ""}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)


def test_the_carried_wheels_are_installed_onto_the_path_and_a_broken_one_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "none"
    empty.mkdir()
    assert _source_env(empty, tmp_path).returncode == 1  # no wheels: nothing installed, the import fails
    ok = _source_env(_tiny_wheel(tmp_path / "good").parent, tmp_path)
    assert ok.returncode == 0 and ok.stdout.strip() == "42", ok.stderr
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    bad = _source_env(tmp_path / "bad", tmp_path)
    assert bad.returncode == 2 and "probe: installing the carried wheels failed" in bad.stderr
