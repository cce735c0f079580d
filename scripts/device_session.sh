#!/usr/bin/env bash
# A whole GPU lease in one command, each step under its own time limit so that one failing step costs only its own
# minutes. The steps (--steps, in this order whatever the order given):
#   tests    the test suite on half of the cores (pytest -n, the CUDA-only tests included; the FEM files are left
#            out as in scripts/device_test.sh), then the failures alone again, one process, to tell a real failure
#            from an interaction of parallel workers;
#   ono      ONO beside the authors' release (benchmarks/ono_official.py, batch 8, fp32 and bf16, the epoch of 1000);
#   compile  the same with torch.compile (compile, bf16+compile), in a second file;
#   speed    the real Trainer on the Darcy ONO run (benchmarks/train_speed.py: fp32, bf16, bf16+compile, data on
#            the GPU, 3 epochs each);
#   models   every model's training and inference samples/s and peak memory (benchmarks/models.py --device cuda);
#   capture  which parts of a step capture as a CUDA graph, one process per probe (benchmarks/graph_capture.py:
#            forward, backward, clipping, torch's AdamW, opflow's Adam step, the Cholesky of ONO's whitening);
#   cudatests  only the CUDA tests of the training step (tests/opflow/test_train_step.py and the device-data
#            tests): no host-device wait in a step (PyTorch's sync detector), the captured step's weights;
#   precision  (runs before step: the timings get the GPU alone) fp32 against tf32 and bf16 on ONO darcy43
#            (data/darcy43/r43.nc, carried), 3 seeds each, side by side on the GPU (benchmarks/precision.py);
#   step     single training steps, wall time against the GPU's kernel time (benchmarks/train_speed.py --steps):
#            ONO on Darcy in every precision / compile / CUDA-graph setting, then FNO, GT, GNOT, ViTNO (one process each);
#   queue    the lease queue (config/queue.yaml, `opflow queue`): the next pairs that fit the time left, the
#            checkpoints of those an earlier lease left unfinished restored into models/ (carried: the command's
#            carry is what `opflow queue --next M --carry` prints on the CPU machine; a pair whose checkpoint did not
#            come is not chosen), and the data made on the CPU machine (FEM) copied from .lease-state/data/ into
#            data/ (carried as subsets; a pair whose data did not come is not chosen), trained by scripts/device_run.sh with every training stopped by one deadline
#            (OPFLOW_TRAIN_DEADLINE) so that evaluation and packing still fit; back on the CPU, scripts/queue_pull.sh
#            publishes what finished and keeps the checkpoints of the rest. --queue is --steps queue;
#   train    the Darcy ONO paper run (scripts/device_run.sh) with the time that is left (at least 5 minutes are kept
#            for it), packed into $OUT with its checkpoint for scripts/device_pull.sh. Its datasets are made first,
#            in the background on the other half of the cores, while the steps before it run.
# The logs come back as one archive ($OUT/session-logs.tgz): at most 8 files come back from a command.
#
# Usage (repository root, on the GPU machine; carry .whl and .release, see docs/gpu.md):
#   scripts/device_session.sh [--steps LIST] [--deadline SECONDS] [--rehearse]
# --steps (default tests,ono,compile,train, the first lease's): a comma-separated subset of the steps above.
# --deadline (default 560): seconds from the start by which everything is packed (the tool's limit is 600).
# --rehearse: the same steps at toy size (one test file, the benchmarks' smoke runs, the quick profile's target), to
# check the script on a CPU machine; no number it prints means anything.
# --graphs: the trainings of the steps precision, queue and train capture their step as one CUDA graph (the overlay
# config/cuda_graphs.yaml; operational, the run hashes do not change). Use it once the cudatests step has passed
# on that kind of machine: a model with dropout whose capture fails stops instead of training. With the cudatests step
# in the same command, the graphs are used only if it passed.
# --compile: the trainings of the steps queue and train compile their loss (the overlay config/compile.yaml;
# operational; a step that fails to compile trains plain after one warning line). The contingency when the captured
# step does not work on the machine: torch.compile took the host's part of ONO's bf16 step from 139 to 71 ms (fifth
# lease). Each training job compiles at its start (tens of seconds, not measured per model).
set -uo pipefail
deadline=560
rehearse=0
graphs=0
compile=0
steps="tests,ono,compile,train"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --deadline) deadline="$2"; shift 2 ;;
        --steps) steps="$2"; shift 2 ;;
        --rehearse) rehearse=1; shift ;;
        --graphs) graphs=1; shift ;;
        --compile) compile=1; shift ;;
        --queue) steps="queue"; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "device_session: unknown argument '$1' (use --steps LIST, --queue, --deadline SECONDS, --graphs, --compile, --rehearse)" >&2; exit 2 ;;
    esac
done
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "device_session: --deadline must be whole seconds, got '$deadline'" >&2; exit 2; }
if (( deadline > 570 )); then  # the tool kills a command at 600 s, and the packing must come before that
    echo "device_session: --deadline $deadline is past what one command may run (600 s, less 30 s for the packing); using 570" >&2
    deadline=570
fi
known=" tests ono compile speed models capture cudatests precision step queue train "
for s in ${steps//,/ }; do
    [[ "$known" == *" $s "* ]] || { echo "device_session: unknown step '$s' in --steps (known:$known)" >&2; exit 2; }
done
want() { [[ ",$steps," == *",$1,"* ]]; }
if want train && want queue; then echo "device_session: the steps train and queue both take the time that is left; pick one" >&2; exit 2; fi
if [[ $graphs -eq 1 ]] && ! want train && ! want queue && ! want precision; then
    echo "device_session: --graphs applies to the trainings of the steps precision, queue and train, and --steps '$steps' has none of them" >&2; exit 2
fi
if [[ $compile -eq 1 ]] && ! want train && ! want queue; then
    echo "device_session: --compile applies to the trainings of the steps queue and train, and --steps '$steps' has none of them" >&2; exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
out="${OUT:-logs/device}"
logs="$(mktemp -d)"
mkdir -p "$out"
py="${PYTHON:-python3}"
t0=$SECONDS
say() { printf '[device_session %4ds] %s\n' "$((SECONDS - t0))" "$*"; }
left() { echo $((deadline - (SECONDS - t0))); }
reserve=20; { want train || want queue; } && reserve=300   # seconds the steps before the training leave to it (or to the packing)
budget() { local b=$(( $(left) - reserve )); (( b > $1 )) && b=$1; echo $(( b > 0 ? b : 0 )); }  # min(cap, left - reserve)
exec 3>&1  # the console, for the lines of a step that is skipped while its own output goes to its log
# capped SECONDS COMMAND...: COMMAND under `timeout SECONDS`, or skipped (status 124, one line) when no second is left:
# `timeout 0` would run it with no limit at all
capped() {
    local b="$1"; shift
    if (( b <= 0 )); then say "skipped, no time left before the deadline: ${*:1:4} ..." >&3; return 124; fi
    timeout "$b" "$@"
}
pack_logs() { tar -czf "$out/session-logs.tgz" -C "$logs" .; }

source "$root/scripts/device_env.sh"
device_install_wheels .whl device_session || exit 2
device_install_wheels .release device_session || exit 2
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi -L 2>/dev/null
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())'
say "wheels installed; steps: $steps$([[ $graphs -eq 1 ]] && echo ', trainings with CUDA graphs')$([[ $compile -eq 1 ]] && echo ', trainings compiled')"

cores="$(nproc)"
half=$(( cores > 1 ? cores / 2 : 1 ))
lo="0-$(( half - 1 ))"; hi="$half-$(( cores - 1 ))"; [[ $cores -gt 1 ]] || hi="0"
pin_lo=(); pin_hi=()
if command -v taskset >/dev/null; then pin_lo=(taskset -c "$lo"); pin_hi=(taskset -c "$hi"); fi
cudatests_rc=""
graphs_refused() { [[ $graphs -eq 1 && -n "$cudatests_rc" && "$cudatests_rc" != 0 ]]; }  # --graphs, cudatests failed
# TARGETS...: the Snakemake arguments of training targets in $args: the profile's files (the rehearsal's quick profile)
# and the overlays in effect now, in ONE --configfile option (a second --configfile replaces the first). The CUDA-graph
# overlay is left out once the cudatests step has failed.
train_args() {
    local files=(); [[ $rehearse -eq 1 ]] && files+=(config/quick.yaml)
    [[ $graphs -eq 1 ]] && ! graphs_refused && files+=(config/cuda_graphs.yaml)
    [[ $compile -eq 1 ]] && files+=(config/compile.yaml)
    args=(); [[ ${#files[@]} -gt 0 ]] && args=(--configfile "${files[@]}")
    args+=(-- "$@")
}
if [[ $rehearse -eq 1 ]]; then
    train_args quick/results/darcy_ono.json; target=("${args[@]}")
    tests=(tests/opflow/test_metrics.py)
    bench=(--smoke); smoke=(--smoke)
else
    train_args results/darcy_ono.json; target=("${args[@]}")
    tests=(tests)
    bench=(--device cuda --batch 8 --repeats 10 --threads 8 --epoch --samples 1000 --skip-components); smoke=()
fi

data_pid=""
if want train; then  # the training's datasets, in the background on the upper half of the cores
    ( "${pin_hi[@]}" "$py" -m snakemake -s Snakefile --cores "$half" --resources gpu=1 --scheduler greedy \
          --omit-from=train "${target[@]}" >"$logs/data.log" 2>&1; echo "data exit $?" >>"$logs/data.log" ) &
    data_pid=$!
    say "datasets on cores $hi"
fi

if want tests; then
    device_pytest_skips
    xdist=(); "$py" -c 'import xdist' 2>/dev/null && xdist=(-n "$half")
    cache="$(mktemp -d)"
    say "tests on cores $lo (${xdist[*]:-one process})"
    capped "$(budget 200)" "${pin_lo[@]}" "$py" -m pytest -q -rs -o cache_dir="$cache" "${DEVICE_PYTEST_SKIPS[@]}" "${xdist[@]}" \
        --junitxml "$logs/junit.xml" "${tests[@]}" >"$logs/pytest.log" 2>&1
    say "tests: exit $? ($(tail -n 1 "$logs/pytest.log"))"
    capped "$(budget 60)" "$py" -m pytest -q -rs -o cache_dir="$cache" "${DEVICE_PYTEST_SKIPS[@]}" --lf --lfnf=none "${tests[@]}" \
        >"$logs/pytest-failed-again.log" 2>&1
    say "the failures again, one process: exit $? ($(tail -n 1 "$logs/pytest-failed-again.log"))"
fi
if want ono; then
    capped "$(budget 120)" "$py" -m benchmarks.ono_official --release .release --variants fp32,bf16 "${bench[@]}" \
        --out "$out/ono_official_cuda.json" >"$logs/ono_official.log" 2>&1
    say "ono_official fp32,bf16: exit $?"
fi
if want compile; then
    capped "$(budget 240)" "$py" -m benchmarks.ono_official --release .release --variants compile,bf16+compile "${bench[@]}" \
        --out "$out/ono_official_compile_cuda.json" >"$logs/ono_official_compile.log" 2>&1
    say "ono_official compile, bf16+compile: exit $?"
fi
if want speed; then  # the JSON is rewritten after every variant: a time-out keeps the finished ones
    speed=(--device cuda --variants fp32+ondevice,bf16+ondevice,bf16+compile+ondevice --epochs 3); [[ $rehearse -eq 1 ]] && speed=(--smoke)
    capped "$(budget 300)" "$py" -m benchmarks.train_speed "${speed[@]}" --out "$out/train_speed_cuda.json" >"$logs/train_speed.log" 2>&1
    say "train_speed: exit $?"
fi
if want models; then
    models=(--device cuda --phase-s 1 --timeout-s 60); [[ $rehearse -eq 1 ]] && models=(--smoke --models ono,fno)
    capped "$(budget 400)" "$py" -m benchmarks.models "${models[@]}" --out "$out/models_cuda.json" >"$logs/models.log" 2>&1
    say "models: exit $?"
fi
if want capture; then
    capargs=(); [[ $rehearse -eq 1 ]] && capargs=(--smoke)
    capped "$(budget 90)" "$py" -m benchmarks.graph_capture "${capargs[@]}" --out "$out/graph_capture_cuda.json" >"$logs/graph_capture.log" 2>&1
    say "graph_capture: exit $? ($(tail -n 1 "$logs/graph_capture.log"))"
fi
if want cudatests; then
    capped "$(budget 120)" "$py" -m pytest -q -rs -p no:cacheprovider tests/opflow/test_train_step.py tests/opflow/test_train_device_data.py \
        -k "cuda" >"$logs/cudatests.log" 2>&1
    cudatests_rc=$?
    say "cudatests: exit $cudatests_rc ($(tail -n 1 "$logs/cudatests.log"))"
    cp "$logs/cudatests.log" "$out/cudatests.log"
fi
if want precision; then
    precargs=(--data data/darcy43/r43.nc --dataset darcy43 --model ono --epochs "${PRECISION_EPOCHS:-10}" --parallel 9 --threads 1)
    [[ $rehearse -eq 1 ]] && precargs=(--smoke)
    [[ $graphs -eq 1 ]] && ! graphs_refused && precargs+=(--cuda-graphs)
    b="$(budget "${PRECISION_CAP:-200}")"
    capped "$b" "$py" -m benchmarks.precision "${precargs[@]}" --budget-s "$(( b > 40 ? b - 30 : 10 ))" \
        --out "$out/precision_cuda.json" >"$logs/precision.log" 2>&1
    say "precision: exit $? ($(tail -n 1 "$logs/precision.log"))"
fi
if want step; then  # the JSON is rewritten after every variant: a time-out keeps the finished ones
    stepargs=(--steps --device cuda --warmup 3 --step-count 10 --step-repeats 5); [[ $rehearse -eq 1 ]] && stepargs=(--steps --device cpu --step-count 1 --step-repeats 1 --warmup 1 --step-batches 2)
    # in the order of what the targets need, since a time-out keeps only the variants done: the fp32 baseline, the fast
    # setting (bf16, <= 25 ms), the fp32 target with TF32 (<= 8 s per epoch), then the rest; the fifth lease measured
    # tf32, bf16 and bf16+compile eagerly already
    ono_variants="${STEP_ONO_VARIANTS:-fp32,bf16+compile+graphs,tf32+compile+graphs,tf32+graphs,bf16+graphs,tf32,bf16,bf16+compile}"
    other_variants="${STEP_OTHER_VARIANTS:-fp32,tf32+graphs,bf16+graphs}"
    ono_pairs=darcy/ono; other_pairs=darcy/fno,darcy141/gt,elasticity972/gnot,darcy_lognormal416/vitno
    [[ $rehearse -eq 1 ]] && { ono_variants=fp32; other_variants=fp32; ono_pairs=darcy/fno; other_pairs=elasticity972/gnot,darcy/fno; }
    capped "$(budget "${STEP_ONO_CAP:-200}")" "$py" -m benchmarks.train_speed "${stepargs[@]}" --pairs "$ono_pairs" --variants "$ono_variants" \
        --out "$out/train_step_ono_cuda.json" >"$logs/train_step_ono.log" 2>&1
    say "train_step ono: exit $?"
    capped "$(budget "${STEP_OTHER_CAP:-150}")" "$py" -m benchmarks.train_speed "${stepargs[@]}" \
        --pairs "$other_pairs" --variants "$other_variants" \
        --out "$out/train_step_models_cuda.json" >"$logs/train_step_models.log" 2>&1
    say "train_step models: exit $?"
fi
pack_logs

if want train; then  # the paper run with what is left (device_run.sh packs its state into $OUT)
    wait "$data_pid"
    say "$(tail -n 1 "$logs/data.log")"
    minutes="$(awk -v s="$(left)" 'BEGIN { m = (s - 75) / 60; printf "%.1f", (m < 0.5 ? 0.5 : m) }')"
    if graphs_refused; then train_args "${target[@]: -1}"; target=("${args[@]}"); say "darcy ONO: without CUDA graphs, the cudatests step did not pass"; fi
    say "darcy ONO: $minutes minutes of training"
    scripts/device_run.sh --minutes "$minutes" "${target[@]}"
    say "device_run exit $?"
    pack_logs
fi
if want queue; then  # the queue's next pairs with what is left, all trainings stopped by one deadline
    # minutes of training to choose pairs for: what is left less the wheels, the data (25-50 s uncompressed, estimated;
    # docs/gpu.md), the job starts and the 60 s after the deadline for evaluation and packing, rounded up to 150 s
    minutes="$(awk -v s="$(left)" 'BEGIN { m = (s - 150) / 60; printf "%.1f", (m < 0.5 ? 0.5 : m) }')"
    # data made on the CPU machine (FEM), carried as subsets (`opflow queue --carry`), into data/: never over a whole file there
    "$py" -m opflow.cli queue --place-data | while IFS= read -r l; do say "$l"; done
    mapfile -t chosen < <("$py" -m opflow.cli queue --next "$minutes" --targets | tr ' ' '\n' | grep .)
    jobs="$("$py" -m opflow.cli queue --next "$minutes" --share-gpu)"
    "$py" -m opflow.cli queue --next "$minutes" >"$logs/queue.md" 2>&1
    say "queue: ${chosen[*]:-nothing} (${minutes} min, $jobs GPU job(s) at a time)"
    graphs_refused && say "queue: without CUDA graphs, the cudatests step did not pass"
    train_args "${chosen[@]}"; queue_targets=("${args[@]}")
    [[ $rehearse -eq 1 ]] && { train_args quick/results/darcy_ono.json; queue_targets=("${args[@]}"); }  # the rehearsal: the quick profile's target instead
    if [[ ${#chosen[@]} -gt 0 ]]; then
        for t in "${chosen[@]}"; do  # a pair left unfinished by an earlier lease: its checkpoint, carried (`opflow queue --carry`)
            pair="$(basename "$t" .json)"  # the queue chose it only with the checkpoint here, its pointer's size and hash
            if [[ -f "published/$pair/checkpoint.json" ]]; then
                mkdir -p "models/$pair"
                # a copy renamed into place: a checkpoint there may share its file with checkpoint.lowest-loss.pt (a hard link)
                cp ".lease-state/$pair/checkpoint.pt" "models/$pair/.checkpoint.pt.restoring" && mv -f "models/$pair/.checkpoint.pt.restoring" "models/$pair/checkpoint.pt" \
                    || { say "queue: .lease-state/$pair/checkpoint.pt missing"; exit 1; }
                for f in train.log curves.csv curves.json; do [[ -f "published/$pair/$f" ]] && cp "published/$pair/$f" "models/$pair/"; done
                say "restored .lease-state/$pair/checkpoint.pt"
            fi
        done
        export OPFLOW_TRAIN_DEADLINE=$(( $(date +%s) + $(left) - 60 ))
        scripts/device_run.sh --minutes "$minutes" --gpu-jobs "$jobs" --state "$logs/no-state" "${queue_targets[@]}"
        say "device_run exit $?"
    fi
    cp "$logs/queue.md" "$out/queue.md" 2>/dev/null
    pack_logs
fi
say "done"
exit 0
