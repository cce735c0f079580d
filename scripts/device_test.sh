#!/usr/bin/env bash
# The test suite on a borrowed GPU machine: the CUDA-only tests run there and nowhere else.
#
# Usage (repository root, on the GPU machine; carry .whl, made here by scripts/device_wheels.sh):
#   scripts/device_test.sh [PYTEST_ARGS...]
# Installs the carried wheels, then runs pytest without the test files that import the FEM stack (dolfinx, gmsh:
# not on those machines; FEM datasets are made on a CPU machine) and without the tests marked `fem` (they need it at
# run time), and writes the JUnit XML and the log to $OUT
# (or logs/device/ when OUT is unset). PYTHON (default python3) is the interpreter with torch.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
py="${PYTHON:-python3}"
out="${OUT:-logs/device}"
mkdir -p "$out"
source "$root/scripts/device_env.sh"
device_install_wheels .whl device_test || exit 2
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
device_pytest_skips
"$py" -c 'import torch; print("device_test: torch", torch.__version__, "CUDA:", torch.cuda.is_available(),
          torch.cuda.get_device_name() if torch.cuda.is_available() else "")'
"$py" -m pytest -q -rs -p no:cacheprovider "${DEVICE_PYTEST_SKIPS[@]}" --junitxml "$out/junit.xml" "$@" 2>&1 | tee "$out/pytest.log"
exit "${PIPESTATUS[0]}"
