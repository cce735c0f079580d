#!/usr/bin/env bash
# Create or update the project's virtual environment (.venv) from requirements.lock.
# Idempotent: when .venv already matches requirements.lock and pyproject.toml it returns at once.
# Usage: scripts/bootstrap.sh            (prints nothing when up to date)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.opflow-stamp"
want="$(cat "$root/requirements.lock" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi

ok_python() {  # $1: candidate interpreter; true when it runs and is >= 3.12
    [[ -n "$1" ]] && "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1
}

find_python() {
    local c prefix
    for c in "${OPFLOW_PYTHON:-}" python3.12 python3.13 python3; do
        if ok_python "$c"; then command -v "$c"; return 0; fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        for v in 3.12 3.13; do
            prefix="$(pyenv prefix "$v" 2>/dev/null | head -n1 || true)"
            for c in "$prefix/bin/python$v" "$prefix/bin/python3"; do
                if ok_python "$c"; then echo "$c"; return 0; fi
            done
        done
    fi
    return 1
}

if [[ ! -x "$venv/bin/python" ]] || ! ok_python "$venv/bin/python"; then
    if ! py="$(find_python)"; then
        cat >&2 <<'MSG'
opflow needs Python >= 3.12 (dolfinx-solver-real has no wheel for older Pythons) and none was found.
Install one, then rerun:
  pyenv install 3.12        (or: apt-get install python3.12 python3.12-venv)
or point to it:  OPFLOW_PYTHON=/path/to/python3.12 make test
MSG
        exit 1
    fi
    echo "opflow: creating .venv with $py ($("$py" --version 2>&1))" >&2
    rm -rf "$venv"
    "$py" -m venv "$venv"
fi

# A first install (torch with its CUDA libraries, dolfinx, PETSc) fills about 6 GB, plus pip's unpacking room:
# refuse at once, with the numbers, rather than fail half-way with "No space left on device".
need_gb="${OPFLOW_MIN_FREE_GB:-8}"
if ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
    for dir in "$venv" "${TMPDIR:-/tmp}"; do
        free_kb="$(df -Pk "$dir" | awk 'NR == 2 {print $4}')"
        if [[ -n "$free_kb" ]] && (( free_kb < need_gb * 1024 * 1024 )); then
            cat >&2 <<MSG
opflow: the first install needs about $need_gb GB free, and $dir has $(( free_kb / 1024 / 1024 )) GB.
Free some space there (or point TMPDIR at a roomier disk), then rerun.
To try anyway: OPFLOW_MIN_FREE_GB=0 make test
MSG
            exit 1
        fi
    done
fi

log="$venv/install.log"
echo "opflow: installing pinned dependencies into .venv (first run downloads a few GB: torch, dolfinx; log: .venv/install.log)" >&2
if ! { "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$root/requirements.lock" \
       && "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e "$root"; } >"$log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 40 >&2
    echo "opflow: dependency installation failed (full log: .venv/install.log)" >&2
    exit 1
fi
# Every heavy dependency must import (mpi4py.MPI first: dolfinx/petsc4py need MPI initialised by it).
"$venv/bin/python" - <<'PY'
import mpi4py.MPI  # noqa: F401  (must precede dolfinx)
import dolfinx, gmsh, netCDF4, torch, snakemake, scipy, pyamg  # noqa: F401
PY
echo "$want" >"$stamp"
echo "opflow: .venv ready" >&2
