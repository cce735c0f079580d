#!/usr/bin/env bash
# Run Snakemake targets on a borrowed GPU machine in commands of at most ~10 minutes, resuming across commands.
#
# The GPU machines lent to this project run one command at a time (10 minutes at most), start bare, have torch but
# not netCDF4, pydantic, pyamg or snakemake, and send back at most 8 files (16 MiB each, 64 MiB in all) from $OUT.
# So one command here:
#   1. installs the carried wheels (.whl/, made by scripts/device_wheels.sh) into a temporary folder;
#   2. makes the targets' datasets with the project's numpy/torch solvers (Snakemake, every core; `--omit-from
#      train`): the Darcy source took 2 min 6 s on 2 cores (about 1 min on 16, estimated), and most derived
#      files are over the 64 MiB carried per command (darcy43/r421.nc 515 MB), see docs/gpu.md; uncompressed
#      (OPFLOW_DATA_COMPLEVEL=0 unless set: same values, 30 s less for the Darcy source on 2 cores);
#   3. unpacks the state of earlier commands (.device-state/state.tgz.part-*: checkpoints, finished models,
#      curves, logs, results), with the current time as modification time, so that Snakemake sees the restored
#      models as newer than the regenerated data and does not retrain them;
#   4. runs the targets: every training job gets the wall-time budget OPFLOW_TRAIN_MAX_MINUTES (`--minutes`); a
#      job that reaches it stops with a checkpoint (exit status 75, so Snakemake counts the job as failed and
#      goes on with the others: --keep-going) and the next command resumes it bit for bit;
#   5. packs the state again into $OUT/state.tgz.part-* (15 MiB pieces) with the Snakemake log, whatever the
#      outcome. scripts/device_pull.sh copies them back for the next command.
#
# Usage (in the workflow directory, normally the repository root, on the GPU machine):
#   scripts/device_run.sh [--minutes M] [--gpu-jobs G] [--state DIR] [--wheels DIR] [--] SNAKEMAKE_ARGS_AND_TARGETS...
# e.g.
#   scripts/device_run.sh --minutes 7 -- results/darcy_ono.json
# G (default 1) is how many GPU jobs share the one GPU at a time (Snakemake's `--resources gpu=G`); their recorded
# epoch times are then those of a shared GPU. Worth it for small models only: GT and FT at n = 8192 already keep an
# H200 at 97-100 %, and two of them side by side gained 1.13x over one after the other (docs/gpu.md).
# M (default 7) leaves about 3 minutes of the 10 for the wheels, the data, evaluation and packing. The state
# comes from DIR (default .device-state) and goes to $OUT (or DIR if OUT is unset: a local trial run).
# The wheels come from --wheels (default .whl of the repository; an empty folder installs none). PYTHON (default
# python3) is the interpreter with torch.
set -uo pipefail

minutes=7
gpu_jobs=1
state_in=".device-state"
wheels=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --gpu-jobs) gpu_jobs="$2"; shift 2 ;;
        --state) state_in="$2"; shift 2 ;;
        --wheels) wheels="$2"; shift 2 ;;
        --) shift; break ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) break ;;
    esac
done
if [[ $# -eq 0 ]]; then
    echo "device_run: name the Snakemake targets, e.g. scripts/device_run.sh --minutes 7 -- results/darcy_ono.json" >&2
    exit 2
fi
if ! [[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] || [[ "$minutes" =~ ^0+([.]0+)?$ ]]; then
    echo "device_run: --minutes must be a positive number of minutes, got '$minutes'" >&2
    exit 2
fi
if ! [[ "$gpu_jobs" =~ ^[1-9][0-9]*$ ]]; then
    echo "device_run: --gpu-jobs must be a whole number of jobs, 1 or more, got '$gpu_jobs'" >&2
    exit 2
fi
out="${OUT:-$state_in}"
py="${PYTHON:-python3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wheels="${wheels:-$root/.whl}"
t0=$SECONDS
say() { printf '[device_run %4ds] %s\n' "$((SECONDS - t0))" "$*"; }

# 1. wheels
source "$root/scripts/device_env.sh"
device_install_wheels "$wheels" device_run || exit 2
compgen -G "$wheels/*.whl" >/dev/null && say "installed $(ls "$wheels"/*.whl | wc -l) carried wheels"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c 'import torch, netCDF4, pydantic, snakemake
print("device_run: torch", torch.__version__, "cuda" if torch.cuda.is_available() else "NO CUDA",
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")' \
    || { echo "device_run: torch, netCDF4, pydantic or snakemake missing: carry .whl (scripts/device_wheels.sh)" >&2; exit 2; }

cores="$(nproc)"
smk=("$py" -m snakemake -s "$root/Snakefile" --cores "$cores" --resources gpu="$gpu_jobs" --scheduler greedy --keep-going --printshellcmds)

# 2. data (no training): the state's models must be restored after it, see 3.
# Written uncompressed (the same values; the data fingerprint is unchanged): the files live minutes on this machine,
# and zlib was most of the Darcy source's merge and derive (26 + 6 s at level 4, 8 + 2 s at 0: docs/gpu.md)
export OPFLOW_DATA_COMPLEVEL="${OPFLOW_DATA_COMPLEVEL:-0}"
say "making the datasets of: $*"
mkdir -p logs/device
# `--omit-from=train`, not `--omit-from train`: the option takes one or more values, so in the second form the
# targets that follow would be read as more rules to omit from, and Snakemake would make the data of `rule all`
"${smk[@]}" --omit-from=train "$@" >logs/device/data.log 2>&1
data_rc=$?
say "datasets: exit $data_rc (log: logs/device/data.log)"

# 3. state of earlier commands
if compgen -G "$state_in/state.tgz.part-*" >/dev/null; then
    cat "$state_in"/state.tgz.part-* | tar -xzm -f - || { echo "device_run: the carried state is damaged" >&2; exit 2; }
    say "restored: $(tar -tzf <(cat "$state_in"/state.tgz.part-*) | grep -c -v '/$') files from $state_in"
fi

# 4. the targets, every training job under the budget
export OPFLOW_TRAIN_MAX_MINUTES="$minutes"
say "running (training budget $minutes min per job)"
"${smk[@]}" "$@" >logs/device/run.log 2>&1
rc=$?
say "snakemake exit $rc (log: logs/device/run.log)"
# what the state holds, in the profile's root (. for the default profile, quick/ for the quick one, ...)
src_dirs=(benchmarks opflow pipeline solvers meshes tests docs rules config scripts envs profiles .git .whl .release)
prune=(); for d in "${src_dirs[@]}"; do prune+=(-path "./$d" -prune -o); done
mapfile -t keep < <(find . "${prune[@]}" -path ./.snakemake -prune -o -path ./.device-state -prune -o -path ./.device-tree -prune -o -path "./$state_in" -prune -o -type f \( \
    -path '*/models/*/checkpoint.pt' -o -path '*/models/*/model.pt' -o -path '*/models/*/curves.*' \
    -o -path '*/models/*/train.log' -o -path '*/results/*.json' -o -path '*/results/*.png' \
    -o -path '*/logs/train/*' -o -path '*/logs/evaluate/*' -o -path './logs/device/*' \) -print | sort)
grep -h -E "stopped after epoch|wrote .*model.pt" $(printf '%s\n' "${keep[@]}" | grep 'train.log$') 2>/dev/null | tail -n 8

# 5. pack the state (also after a failure: nothing is lost)
mkdir -p "$out"
rm -f "$out"/state.tgz.part-*
tar -czf - "${keep[@]}" | split -b 15M -d -a 1 - "$out/state.tgz.part-"
parts=("$out"/state.tgz.part-*)
say "packed ${#keep[@]} paths into ${#parts[@]} piece(s) of $out ($(du -ch "${parts[@]}" | tail -n1 | cut -f1))"
if [[ ${#parts[@]} -gt 7 ]]; then
    echo "device_run: the state needs ${#parts[@]} pieces; at most 8 files come back: keep fewer runs per command" >&2
fi
cp logs/device/run.log "$out/snakemake.log" 2>/dev/null
exit "$rc"
