#!/usr/bin/env bash
# Take back what scripts/device_run.sh left in $OUT on the GPU machine, for the next command and for reading.
#
# Usage: scripts/device_pull.sh FILES_AT [DEST]
#   FILES_AT: the folder where the device tool put the command's files (its reply's files_at).
#   DEST: the state folder (default .device-state of the repository).
# Replaces DEST/state.tgz.part-* (carried by the next command: name .device-state in carry) and unpacks a copy
# into .device-tree/ beside DEST (outside it: DEST travels): checkpoints, finished models, curves, results
# JSON/PNG and logs, to read and to copy finished runs into published/. Refuses a folder without state pieces,
# so a failed command never wipes the state of the last good one.
set -euo pipefail
src="${1:?usage: scripts/device_pull.sh FILES_AT (files_at of the device reply)}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${2:-$root/.device-state}"
shopt -s nullglob
parts=("$src"/state.tgz.part-*)
if [[ ${#parts[@]} -eq 0 ]]; then
    echo "device_pull: no state.tgz.part-* in $src; the state in $dest is left as it was" >&2
    exit 1
fi
cat "${parts[@]}" | tar -tzf - >/dev/null || { echo "device_pull: the pieces in $src do not make a whole archive" >&2; exit 1; }
mkdir -p "$dest"
tmp="$(mktemp -d "$dest/.pull.XXXXXX")"
cp "${parts[@]}" "$tmp/"
rm -f "$dest"/state.tgz.part-*
mv "$tmp"/state.tgz.part-* "$dest/"
rmdir "$tmp"
tree="$(dirname "$dest")/.device-tree"
rm -rf "$tree"
mkdir -p "$tree"
cat "$dest"/state.tgz.part-* | tar -xzf - -C "$tree"
echo "device_pull: $(ls "$dest"/state.tgz.part-* | wc -l) piece(s) in $dest; unpacked into $tree:"
(cd "$tree" && find . -path ./.device-tree -prune -o -type f \( -path '*/results/*.json' -o -path '*/models/*/checkpoint.pt' -o -path '*/models/*/model.pt' \) -print \
    | sort | sed 's/^[.][/]/  /')
