#!/usr/bin/env bash
# Wall time of the quick target run locally and through SLURM, each in a fresh copy of the repository.
#
#   scripts/slurm_quick_timing.sh                       # -> benchmarks/results/slurm_quick.json
#   scripts/slurm_quick_timing.sh --extra-config tiny.yaml --target out/results/darcy_ono.json --out /tmp/t.json
#
# Runs `snakemake --cores 2 --configfile config/quick.yaml -- quick/results/darcy_ono.json` (as
# `make quick`) in one copy and the same with `--profile profiles/slurm` in another, one after the
# other, and writes (atomically) the wall seconds of each, the load average before and after each,
# the SLURM, Snakemake and plugin versions, the commit and the date. The copies hold the working
# tree's tracked and untracked (not ignored) files, so no data, model or Snakemake state is reused;
# the interpreter is $PYTHON (default: the repository's .venv). The SLURM run uses the profile as it
# is (the plugin's first status poll after 40 s included). A cluster's compute nodes must see the
# copies: put them on a shared file system with --workdir DIR. Nothing is written when a run fails.
# --extra-config adds a config file after config/quick.yaml (a tiny config checks the script itself;
# the JSON then records it, so such a file is not taken for the quick target's timing).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
TARGET=quick/results/darcy_ono.json
EXTRA=""
OUT=$ROOT/benchmarks/results/slurm_quick.json
WORKDIR=""
CORES=2
KEEP=0

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
    case $1 in
        --extra-config) EXTRA=$(realpath "$2"); shift 2 ;;
        --target) TARGET=$2; shift 2 ;;
        --out) OUT=$(realpath -m "$2"); shift 2 ;;
        --workdir) WORKDIR=$2; shift 2 ;;
        --cores) CORES=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h | --help) usage ;;
        *) echo "slurm_quick_timing: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ -x $PY ]] || { echo "slurm_quick_timing: no interpreter at $PY; run scripts/bootstrap.sh or set PYTHON" >&2; exit 2; }
[[ -z $EXTRA || -f $EXTRA ]] || { echo "slurm_quick_timing: --extra-config $EXTRA does not exist" >&2; exit 2; }
command -v sinfo >/dev/null && sinfo -h >/dev/null 2>&1 || {
    echo "slurm_quick_timing: no SLURM cluster answers (sinfo); start one as root with scripts/slurm_local.sh up" >&2
    exit 2
}

BASE=$(mktemp -d "${WORKDIR:-${TMPDIR:-/tmp}}/opflow-slurm-timing.XXXXXX")
[[ $KEEP == 1 ]] || trap 'rm -rf "$BASE"' EXIT

copy_repo() {  # a fresh copy of the working tree: tracked and untracked, not ignored
    mkdir -p "$1"
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$1" 2>/dev/null || true)
    [[ -f $1/Snakefile ]] || { echo "slurm_quick_timing: could not copy the repository into $1" >&2; exit 1; }
}

loadavg() { cut -d ' ' -f 1-3 /proc/loadavg; }

run_timed() {  # run_timed NAME DIR ARGS...: "<seconds> <load before> <load after>" on stdout
    local name=$1 dir=$2 t0 t1 before after
    shift 2
    local configs=(--configfile config/quick.yaml)
    [[ -n $EXTRA ]] && configs+=("$EXTRA")
    before=$(loadavg)
    t0=$(date +%s.%N)
    if ! (cd "$dir" && "$PY" -m snakemake "$@" "${configs[@]}" -- "$TARGET") >"$BASE/$name.log" 2>&1; then
        echo "slurm_quick_timing: the $name run failed; its log: $BASE/$name.log (kept)" >&2
        tail -n 30 "$BASE/$name.log" >&2
        trap - EXIT
        exit 1
    fi
    t1=$(date +%s.%N)
    after=$(loadavg)
    [[ -f $dir/$TARGET ]] || { echo "slurm_quick_timing: the $name run made no $TARGET" >&2; exit 1; }
    echo "$t0 $t1 $before $after"
}

copy_repo "$BASE/local"
copy_repo "$BASE/slurm"
echo "slurm_quick_timing: local run in $BASE/local" >&2
LOCAL=$(run_timed local "$BASE/local" --cores "$CORES")
echo "slurm_quick_timing: SLURM run in $BASE/slurm" >&2
SLURM=$(run_timed slurm "$BASE/slurm" --profile profiles/slurm)

LOCAL="$LOCAL" SLURM="$SLURM" TARGET="$TARGET" EXTRA="$EXTRA" OUT="$OUT" CORES="$CORES" ROOT="$ROOT" \
SLURM_VERSION=$(sinfo --version) NODES=$(sinfo -h -o '%D nodes, %c CPUs, %m MB' | head -n 1) \
COMMIT=$(git -C "$ROOT" rev-parse HEAD) DIRTY=$(git -C "$ROOT" status --porcelain | head -c 1 | wc -c) \
    "$PY" - <<'EOF'
import datetime, importlib.metadata as md, json, os, sys
sys.path.insert(0, os.environ["ROOT"])
from opflow.atomic import atomic_write_text

def run(key, how):
    t0, t1, *load = os.environ[key].split()
    return {"how": how, "wall_s": round(float(t1) - float(t0), 1), "loadavg_before": [float(x) for x in load[:3]], "loadavg_after": [float(x) for x in load[3:]]}

extra = os.environ["EXTRA"]
record = {
    "what": "wall time of one workflow target run locally and through profiles/slurm, each in a fresh copy of the repository",
    "target": os.environ["TARGET"],
    "configfiles": ["config/quick.yaml"] + ([os.path.basename(extra)] if extra else []),
    "quick_target": not extra,
    "local": run("LOCAL", f"snakemake --cores {os.environ['CORES']}"),
    "slurm": run("SLURM", "snakemake --profile profiles/slurm"),
    "slurm_version": os.environ["SLURM_VERSION"],
    "cluster": os.environ["NODES"],
    "snakemake": md.version("snakemake"),
    "snakemake_executor_plugin_slurm": md.version("snakemake-executor-plugin-slurm"),
    "cpus": os.cpu_count(),
    "commit": os.environ["COMMIT"] + ("+dirty" if os.environ["DIRTY"] != "0" else ""),
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
}
atomic_write_text(os.environ["OUT"], json.dumps(record, indent=2) + "\n")
print(f"slurm_quick_timing: local {record['local']['wall_s']} s, SLURM {record['slurm']['wall_s']} s -> {os.environ['OUT']}", file=sys.stderr)
EOF
