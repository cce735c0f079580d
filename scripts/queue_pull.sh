#!/usr/bin/env bash
# After a lease of the queue (scripts/device_session.sh --queue): take its state back, publish what finished, and
# keep the checkpoints of the rest for the next lease (out of the tree and in git's history, with a pointer in published/;
# then commit published/).
#
# Usage (repository root, on the CPU machine): scripts/queue_pull.sh FILES_AT [NOTE]
#   FILES_AT: the folder of the device reply's files (files_at); NOTE: circumstances for the records (default:
#   "trained on a lent GPU by the lease queue").
# 1. scripts/device_pull.sh FILES_AT: the state into .device-state, unpacked into .device-tree;
# 2. every results/<pair>.json there: `opflow publish` into published/<pair>/ (which removes the checkpoint, its
#    pointer and the page of the run in progress that an earlier lease left);
# 3. every models/<pair>/checkpoint.pt there without a result: train.log and curves.* into published/<pair>/, the
#    checkpoint kept for the next lease out of the tree (`opflow queue --keep`: .lease-state/<pair>/checkpoint.pt,
#    ignored, and its pointer published/<pair>/checkpoint.json; 15-29 MB each, opflow/lease_state.py says why not in
#    the tree), and a README.md where there is none, whose table of where the run stands `opflow docs` then writes;
# 4. `opflow queue --save-state`: those checkpoints kept in git's history too (two commits of their own; a later
#    session on a new machine restores them: opflow/history.py), so nothing may be staged before this script;
# 5. `opflow queue`: the queue's new state. Commit published/; the next lease carries what `opflow queue --next M
#    --carry` names.
set -euo pipefail
src="${1:?usage: scripts/queue_pull.sh FILES_AT [NOTE]}"
note="${2:-trained on a lent GPU by the lease queue (scripts/device_session.sh --queue)}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
opflow_cmd=(opflow); command -v opflow >/dev/null || opflow_cmd=(python3 -m opflow.cli)
scripts/device_pull.sh "$src"
tree=.device-tree
shopt -s nullglob
for r in "$tree"/results/*.json; do
    pair="$(basename "$r" .json)"
    [[ -f "$tree/models/$pair/model.pt" ]] || { echo "queue_pull: $r has no model beside it; not published" >&2; continue; }
    # also removes the checkpoint and the in-progress page an earlier lease left there
    "${opflow_cmd[@]}" publish "$r" --out "published/$pair" --model-dir "$tree/models/$pair" --note "$note"
    echo "queue_pull: published published/$pair"
done
pages=()
for c in "$tree"/models/*/checkpoint.pt; do
    pair="$(basename "$(dirname "$c")")"
    [[ -f "$tree/results/$pair.json" ]] && continue
    mkdir -p "published/$pair"
    for f in train.log curves.csv curves.json curves.png; do
        [[ -f "$tree/models/$pair/$f" ]] && cp "$tree/models/$pair/$f" "published/$pair/$f"
    done
    "${opflow_cmd[@]}" queue --keep "$c" "published/$pair"  # after curves.json: the pointer records its epochs
    pages+=(--progress-page "published/$pair" "Trained by the lease queue on borrowed GPUs (\`opflow queue\`, docs/gpu.md); \`checkpoint.json\` points to the checkpoint the next lease resumes, kept out of the tree (\`.lease-state/$pair/\`) and in git's history (its \`git\`; opflow/lease_state.py).")
done
"${opflow_cmd[@]}" docs "${pages[@]}"  # a README.md for a folder without one (opflow.doc_tables.progress_page), then every table
"${opflow_cmd[@]}" queue --save-state  # the new checkpoints into git's history (two commits of their own)
"${opflow_cmd[@]}" queue
