#!/usr/bin/env bash
# Download the wheels a GPU machine lacks into .whl/ (ignored by git), for Python 3.12 on x86-64 Linux.
#
# The machine's image has torch, numpy, scipy, xarray, matplotlib, mpi4py, ... (envs/device-image.txt);
# it lacks netCDF4/cftime (the file format), pydantic (the typed config), pyamg (the Darcy FD solver's
# fallback) and snakemake with its dependencies. Every version comes from requirements.lock. The FEM
# stack (dolfinx, basix, ffcx, ufl, gmsh, mpich, meshio, cffi) is left out: FEM datasets are made on a CPU
# machine. PuLP (16 MB, a quarter of the 64 MiB a call may carry) is left out too: Snakemake imports it
# only for its ILP scheduler, so device runs pass --scheduler greedy. Usage: scripts/device_wheels.sh [DEST]   (default .whl; prints the total size)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/.whl}"
py="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$py" ]] || py=python3
norm() { tr '[:upper:]' '[:lower:]' | sed -E 's/[-_.]+/-/g'; }
skip="$(grep -v '^#' "$root/envs/device-image.txt" | tr ' ' '\n' | grep -v '^$' | norm)
dolfinx-solver-real
fenics-basix
fenics-ffcx
fenics-ufl
gmsh
mpich
meshio
pulp
cffi
pycparser"
mkdir -p "$dest"
want=()
while IFS= read -r line; do
    line="${line%%#*}"; line="${line// /}"
    [[ "$line" == *==* ]] || continue
    name="$(printf '%s' "${line%%==*}" | norm)"
    grep -qxF "$name" <<<"$skip" || want+=("$line")
done <"$root/requirements.lock"
plats=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do plats+=(--platform "$p"); done
built=()
for req in "${want[@]}"; do
    if ! "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            "${plats[@]}" -d "$dest" "$req" 2>/dev/null; then
        # no wheel published (a pure-Python sdist such as connection_pool): build one here
        "$py" -m pip wheel -q --no-deps -w "$dest" "$req"
        built+=("$req")
    fi
done
[[ ${#built[@]} -eq 0 ]] || echo "built from source here: ${built[*]}"
echo "device wheels: ${#want[@]} packages, $(du -sh "$dest" | cut -f1) in $dest"
