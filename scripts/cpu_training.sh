#!/usr/bin/env bash
# The one long training of the CPU machine: in the background between GPU leases, resumed across sessions.
#
# The pair is the first of the `cpu:` list of config/queue.yaml that is neither done nor in progress on a GPU (`opflow queue
# --cpu-targets` prints its target). Snakemake trains and evaluates it on every core, `snapshot` publishes it, and the
# next pair of the list follows in the same background run. The trainer keeps a checkpoint after each epoch, so `start`
# in a later session (after the machine stopped everything) goes on from the last finished epoch. A later session may
# find a new machine, its work tree laid anew from git: so `keep`, at a session's end, keeps the checkpoint (and, for a
# FEM pair, the data file the run reads) in git's history, and `start` brings them back where they are not here.
#
# Usage (repository root, with the project's .venv):
#   scripts/cpu_training.sh start    start it, or resume it from its checkpoint; refuses while it runs. On a new machine
#                                    it first makes .venv (scripts/bootstrap.sh) and brings back from git's history what
#                                    `keep` kept there (`opflow queue --restore-state`). A Snakemake lock left by a
#                                    killed run is removed when no Snakemake process runs on this machine
#   scripts/cpu_training.sh keep     at a session's end: keep its checkpoint as it is now, and the data it reads, in git's
#                                    history (`opflow queue --save-state`: two commits, the files out of the tree again;
#                                    nothing else may be staged). The training goes on meanwhile. Run `snapshot` and
#                                    commit it first: `start` on a new machine puts that train.log beside the restored
#                                    checkpoint, and the log goes on from it
#   scripts/cpu_training.sh status   running, paused or not running, the last line of each target's train.log, and the
#                                    checkpoints of its earlier runs kept aside (checkpoint.discarded-<time>.pt)
#   scripts/cpu_training.sh pause    stop it where it is (SIGSTOP) before a timing that must have the cores alone
#   scripts/cpu_training.sh resume   let it go on (SIGCONT)
#   scripts/cpu_training.sh stop     end it (SIGINT; the last finished epoch's checkpoint stays); `start` resumes it
#   scripts/cpu_training.sh aside -- COMMAND...
#                                    run COMMAND with the training paused, and resume it afterwards (also when COMMAND
#                                    fails or is interrupted); COMMAND's exit status. For anything heavy, tests too:
#                                    beside the training, multi-threaded torch work on the 2 cores runs 10-50x slower
#                                    (the quick ONO epoch 37 s with 2 threads, 113 s with 4, against 2.2 s alone; each
#                                    process's OpenMP barriers wait for threads that the other one holds off the cores),
#                                    and so does the training's epoch (400 s instead of 80 s)
#   scripts/cpu_training.sh snapshot where it stands, for the repository: train.log and curves.csv/json of
#                                    models/<pair>/ into published/<pair>/ with curves.png, and `opflow docs`, which
#                                    rewrites the '<!-- generated: run-progress -->' block of published/<pair>/README.md
#                                    (a page with that block is written for a pair that has none) and the table of the
#                                    runs not finished in README.md and docs/reproductions.md ('runs-in-progress')
#                                    (the checkpoint stays in models/: `keep` puts it in git's history); once
#                                    results/<pair>.json exists, `opflow publish` instead: the record. Then commit
#                                    published/<pair>/
# It trains with the overlay config/eval_every5.yaml (the curves' test pass every 5th epoch: it took 6 % of GNOT's epoch)
# and, for the pairs whose cpu: entry says `compile: true`, config/compile.yaml (torch.compile: 1.10x for GNOT on 2 cores,
# but 1.34-1.55x slower for the GT / FT pairs: benchmarks/results/train_speed_compile_cpu*.json). Both are operational:
# the run and its weights are the same. CPU_TRAINING_COMPILE=1 compiles every pair, =0 none (default: the list's
# choice); CPU_TRAINING_EVAL_EVERY5=0 leaves the second out. Keep the same choice until the pair is evaluated: the
# overlays are in the training job's params, so Snakemake reruns a finished training whose params changed.
# CPU_TRAINING_STATE (default logs/) is the folder of its process-group file and log; CORES (default all) its cores;
# CPU_TRAINING_SNAKEMAKE (tests) a command that the list runs instead of `python -m snakemake`;
# CPU_TRAINING_COMMAND (tests) a shell command that `start` runs instead of the training.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
state="${CPU_TRAINING_STATE:-logs}"
pidfile="$state/cpu_training.pgid"
py="$root/.venv/bin/python"; [[ -x "$py" ]] || py=python3
usage() { echo "usage: scripts/cpu_training.sh start|status|pause|resume|stop|snapshot|keep, or aside -- COMMAND..." >&2; exit 2; }
[[ $# -ge 1 ]] || usage
[[ "$1" == aside || $# -eq 1 ]] || usage

pgid() { [[ -s "$pidfile" ]] && tr -d ' \n' <"$pidfile"; }
alive() { local g; g="$(pgid)" && [[ -n "$g" ]] && kill -0 -- "-$g" 2>/dev/null; }
paused() { local g; g="$(pgid)" && ps -eo pgid=,stat= | awk -v g="$g" '$1 == g && $2 ~ /^T/ { found = 1 } END { exit !found }'; }
signal() {  # SIGNAL VERB MESSAGE: signal the whole process group (Snakemake and its training job)
    alive || { echo "cpu_training: not running (nothing to $2)" >&2; exit 1; }
    kill "-$1" -- "-$(pgid)" && echo "cpu_training: $3 (process group $(pgid))"
}
targets() { "$py" -m opflow.cli queue --cpu-targets; }

case "$1" in
    start)
        if alive; then echo "cpu_training: already running (process group $(pgid)); 'status' says where it stands" >&2; exit 1; fi
        mkdir -p "$state"
        if [[ -n "${CPU_TRAINING_COMMAND:-}" ]]; then  # the tests' stand-in for the training: a shell command
            cmd=(bash -c "$CPU_TRAINING_COMMAND"); what="'$CPU_TRAINING_COMMAND'"
        else
            if [[ -z "${CPU_TRAINING_SNAKEMAKE:-}" ]]; then  # a new machine has no .venv: make it (at once when it is there)
                "$root/scripts/bootstrap.sh" || exit 2
                py="$root/.venv/bin/python"
            fi
            "$py" -m opflow.cli queue --restore-state || exit 2  # a new machine: the checkpoint and data from git's history
            t="$(targets)" || exit 2
            [[ -n "$t" ]] || { echo "cpu_training: every pair of the cpu: list of config/queue.yaml is done or in progress on a GPU; add the next one there" >&2; exit 2; }
            if compgen -G ".snakemake/locks/*" >/dev/null; then
                if pgrep -f "snakemake" >/dev/null; then
                    echo "cpu_training: the working directory is locked and a Snakemake process runs on this machine: wait for it," \
                         "or run 'snakemake --unlock' if it works elsewhere" >&2
                    exit 1
                fi
                "$py" -m snakemake --unlock >/dev/null 2>&1 && echo "cpu_training: removed the lock of an earlier, killed Snakemake run"
            fi
            cmd=("$root/scripts/cpu_training.sh" _list); what="$t, then the next pairs of the cpu: list"
        fi
        # A session and process group of its own (setsid), so that pause / resume / stop reach Snakemake and its jobs
        # together. SIGINT back to its default (env --default-signal): bash starts a background command of a script with
        # SIGINT ignored, Snakemake and the trainer would inherit that, and `stop` (SIGINT) would do nothing.
        setsid nohup env --default-signal=INT "${cmd[@]}" >"$state/cpu_training.log" 2>&1 </dev/null &
        pid=$!
        sleep 1
        ps -o pgid= -p "$pid" | tr -d ' ' >"$pidfile"
        alive || { echo "cpu_training: it stopped at once; see $state/cpu_training.log" >&2; tail -n 5 "$state/cpu_training.log" >&2; exit 1; }
        echo "cpu_training: training $what in the background (process group $(pgid), log $state/cpu_training.log)"
        ;;
    status)
        if alive && paused; then echo "cpu_training: paused (process group $(pgid))"
        elif alive; then echo "cpu_training: running (process group $(pgid))"
        else echo "cpu_training: not running"; fi
        for t in $(targets); do
            log="models/$(basename "$t" .json)/train.log"
            [[ -f "$log" ]] && echo "  $(tail -n 1 "$log")" || echo "  $t: no training log yet"
            for k in "models/$(basename "$t" .json)"/checkpoint.discarded-*.pt; do  # set aside by a changed run (train.log says why)
                if [[ -e "$k" ]]; then echo "  kept aside: $k, a checkpoint of the run before a change of its settings or data (train.log says which)"; fi
            done
            pointer="published/$(basename "$t" .json)/cpu_checkpoint.json"  # what a new machine would resume from
            if [[ -f "$pointer" ]]; then
                read -r epoch commit < <("$py" -c 'import json, sys; p = json.load(open(sys.argv[1])); print(p["epochs_done"], p["git"][:7])' "$pointer")
                echo "  in git's history: its checkpoint of epoch $epoch (commit $commit); 'keep' at the session's end keeps the newer one"
            else
                echo "  not in git's history yet: run 'scripts/cpu_training.sh keep' before the session ends (a new machine would start it from scratch)"
            fi
        done
        ;;
    keep) "$py" -m opflow.cli queue --save-state ;;
    pause) signal STOP pause "paused" ;;
    resume) signal CONT resume "resumed" ;;
    stop) alive && kill -CONT -- "-$(pgid)"; signal INT stop "stopped; 'start' resumes it from its last checkpoint" ;;
    _list)  # what `start` runs in the background: the cpu: list's pairs one after the other, each published when done
        smk=("$py" -m snakemake)
        # shellcheck disable=SC2206  # the tests' stand-in for Snakemake: a command line
        [[ -n "${CPU_TRAINING_SNAKEMAKE:-}" ]] && smk=($CPU_TRAINING_SNAKEMAKE)
        while t="$(targets)" && [[ -n "$t" ]]; do
            # the operational overlays (the run is the same): torch.compile where the pair's cpu: entry says so, the
            # curves' test pass every 5th epoch
            compile="${CPU_TRAINING_COMPILE:-$("$py" -m opflow.cli queue --cpu-compile)}"
            files=()
            [[ "$compile" == 1 ]] && files+=(config/compile.yaml)
            [[ "${CPU_TRAINING_EVAL_EVERY5:-1}" == 1 ]] && files+=(config/eval_every5.yaml)
            overlay=(); [[ ${#files[@]} -gt 0 ]] && overlay=(--configfile "${files[@]}")  # one option: a second one replaces the first
            echo "cpu_training: $(date -u +%FT%TZ) training $t${files:+ (with ${files[*]})}"
            # shellcheck disable=SC2086  # the target is one word
            "${smk[@]}" --cores "${CORES:-$(nproc)}" --rerun-incomplete "${overlay[@]}" -- $t || exit $?
            "$0" snapshot || exit $?  # trained and evaluated: published, and the next pair's turn
            pair="$(basename "$t" .json)"
            [[ -f "published/$pair/record.json" ]] || { echo "cpu_training: $t ended without a record in published/$pair/; stopping here" >&2; exit 1; }
        done
        echo "cpu_training: $(date -u +%FT%TZ) every pair of the cpu: list is done or in progress on a GPU"
        ;;
    aside)
        shift; [[ "${1:-}" == -- ]] && shift
        [[ $# -ge 1 ]] || { echo "cpu_training: aside needs a command: scripts/cpu_training.sh aside -- make test" >&2; exit 2; }
        held=0
        if alive && ! paused; then
            kill -STOP -- "-$(pgid)" && held=1 && echo "cpu_training: paused (process group $(pgid)) while: $*"
        fi
        # resume also when COMMAND fails or this script is interrupted
        trap '[[ $held -eq 1 ]] && kill -CONT -- "-$(pgid)" 2>/dev/null && echo "cpu_training: resumed (process group $(pgid))"; held=0' EXIT
        trap 'exit 130' INT TERM
        "$@"
        exit $?
        ;;
    snapshot)
        pages=()
        for t in $(targets); do
            pair="$(basename "$t" .json)"; src="models/$pair"; dst="published/$pair"
            if [[ -f "$t" ]]; then  # trained and evaluated: the record (it removes the page of the run in progress)
                note="$("$py" -m opflow.cli queue --cpu-note)"  # its line of the cpu: list: since when, its pace
                "$py" -m opflow.cli publish "$t" --out "$dst" --note "trained on the development machine's CPU in the background between GPU leases (scripts/cpu_training.sh), resumed across sessions${note:+; $note}" || exit 1
                continue
            fi
            [[ -f "$src/curves.json" ]] || { echo "cpu_training: $t has no finished epoch yet; nothing to snapshot"; continue; }
            mkdir -p "$dst"
            cp "$src/train.log" "$src/curves.csv" "$src/curves.json" "$dst/"
            pages+=(--progress-page "$dst" "Trained in the background on the development machine's CPU between GPU leases (the \`cpu:\` list of \`config/queue.yaml\`, \`scripts/cpu_training.sh\`), resumed across sessions; its checkpoint and the data it reads are kept in git's history at each session's end (\`scripts/cpu_training.sh keep\`, \`cpu_checkpoint.json\` here names them).")
            "$py" -c 'import json, sys; from opflow.plots import plot_curves; plot_curves(json.load(open(sys.argv[1])), sys.argv[2], title=sys.argv[3])' \
                "$dst/curves.json" "$dst/curves.png" "$pair (in progress)" || exit 1
            echo "cpu_training: $dst: epoch $("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))[-1]["epoch"])' "$dst/curves.json")"
        done
        "$py" -m opflow.cli docs "${pages[@]}"  # a page for a pair without one (opflow.doc_tables.progress_page), then every table
        ;;
    *) usage ;;
esac
