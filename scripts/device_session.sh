#!/usr/bin/env bash
# A whole GPU lease in one command, in the order of the GPU issue, each step under its own time limit so that one
# failing step costs only its own minutes:
#   1. the datasets of results/darcy_ono.json on half of the cores (Snakemake, --omit-from train), in the background,
#      beside the test suite on the other half (pytest -n, the CUDA-only tests included; the FEM files are left out
#      as in scripts/device_test.sh), then the failures alone again, one process, to tell a real failure from an
#      interaction of parallel workers;
#   2. ONO beside the authors' release (benchmarks/ono_official.py, batch 8, the full epoch of 1000 samples): fp32
#      and bf16 first, then the compiled variants in a second file when time is left;
#   3. the Darcy ONO paper run (scripts/device_run.sh) with the time that is left, packed into $OUT with its
#      checkpoint for scripts/device_pull.sh.
# The logs of steps 1-2 come back as one archive ($OUT/session-logs.tgz): at most 8 files come back from a command.
#
# Usage (repository root, on the GPU machine; carry .whl and .release, see docs/gpu.md):
#   scripts/device_session.sh [--deadline SECONDS] [--rehearse]
# --deadline (default 560): seconds from the start by which everything is packed (the tool's limit is 600).
# --rehearse: the same steps at toy size (one test file, the benchmark's smoke run, the quick profile's target), to
# check the script on a CPU machine; no number it prints means anything.
set -uo pipefail
deadline=560
rehearse=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --deadline) deadline="$2"; shift 2 ;;
        --rehearse) rehearse=1; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "device_session: unknown argument '$1' (use --deadline SECONDS, --rehearse)" >&2; exit 2 ;;
    esac
done
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "device_session: --deadline must be whole seconds, got '$deadline'" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
out="${OUT:-logs/device}"
logs="$(mktemp -d)"
mkdir -p "$out"
py="${PYTHON:-python3}"
t0=$SECONDS
say() { printf '[device_session %4ds] %s\n' "$((SECONDS - t0))" "$*"; }
left() { echo $((deadline - (SECONDS - t0))); }

source "$root/scripts/device_env.sh"
device_install_wheels .whl device_session || exit 2
device_install_wheels .release device_session || exit 2
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi -L 2>/dev/null
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())'
say "wheels installed"

cores="$(nproc)"
half=$(( cores > 1 ? cores / 2 : 1 ))
lo="0-$(( half - 1 ))"; hi="$half-$(( cores - 1 ))"; [[ $cores -gt 1 ]] || hi="0"
pin_lo=(); pin_hi=()
if command -v taskset >/dev/null; then pin_lo=(taskset -c "$lo"); pin_hi=(taskset -c "$hi"); fi
if [[ $rehearse -eq 1 ]]; then
    target=(--configfile config/quick.yaml -- quick/results/darcy_ono.json)
    tests=(tests/opflow/test_metrics.py)
    bench=(--smoke)
else
    target=(-- results/darcy_ono.json)
    tests=(tests)
    bench=(--device cuda --batch 8 --repeats 10 --threads 8 --full-epoch --samples 1000 --skip-components)
fi

# 1. data (background, upper half of the cores) beside the tests (lower half)
( "${pin_hi[@]}" "$py" -m snakemake -s Snakefile --cores "$half" --resources gpu=1 --scheduler greedy \
      --omit-from train "${target[@]}" >"$logs/data.log" 2>&1; echo "data exit $?" >>"$logs/data.log" ) &
data_pid=$!
device_pytest_skips
xdist=(); "$py" -c 'import xdist' 2>/dev/null && xdist=(-n "$half")
cache="$(mktemp -d)"
say "tests on cores $lo (${xdist[*]:-one process}), data on cores $hi"
timeout 200 "${pin_lo[@]}" "$py" -m pytest -q -rs -o cache_dir="$cache" "${DEVICE_PYTEST_SKIPS[@]}" "${xdist[@]}" \
    --junitxml "$logs/junit.xml" "${tests[@]}" >"$logs/pytest.log" 2>&1
say "tests: exit $? ($(tail -n 1 "$logs/pytest.log"))"
timeout 60 "$py" -m pytest -q -rs -o cache_dir="$cache" "${DEVICE_PYTEST_SKIPS[@]}" --lf --lfnf=none "${tests[@]}" \
    >"$logs/pytest-failed-again.log" 2>&1
say "the failures again, one process: exit $? ($(tail -n 1 "$logs/pytest-failed-again.log"))"
wait "$data_pid"
say "$(tail -n 1 "$logs/data.log")"

# 2. ONO beside the release: fp32 and bf16, then the compiled variants if at least 4 minutes stay for the run
timeout "$(( $(left) > 330 ? 120 : 60 ))" "$py" -m benchmarks.ono_official --release .release --variants fp32,bf16 "${bench[@]}" \
    --out "$out/ono_official_cuda.json" >"$logs/ono_official.log" 2>&1
say "ono_official fp32,bf16: exit $?"
if [[ $(left) -gt 420 ]]; then
    timeout "$(( $(left) - 300 ))" "$py" -m benchmarks.ono_official --release .release --variants compile,bf16+compile \
        "${bench[@]}" --out "$out/ono_official_compile_cuda.json" >"$logs/ono_official_compile.log" 2>&1
    say "ono_official compile: exit $?"
fi
tar -czf "$out/session-logs.tgz" -C "$logs" .

# 3. the paper run with what is left (device_run.sh packs its state into $OUT)
minutes="$(awk -v s="$(left)" 'BEGIN { m = (s - 75) / 60; printf "%.1f", (m < 0.5 ? 0.5 : m) }')"
say "darcy ONO: $minutes minutes of training"
scripts/device_run.sh --minutes "$minutes" "${target[@]}"
rc=$?
tar -czf "$out/session-logs.tgz" -C "$logs" .
say "done (device_run exit $rc)"
exit 0
