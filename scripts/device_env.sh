# Sourced by scripts/device_run.sh and scripts/device_test.sh: the carried wheels on the GPU machine's Python.
#
# device_install_wheels WHEEL_DIR PROG
#   installs every WHEEL_DIR/*.whl (made by scripts/device_wheels.sh) into ${TMPDIR:-/tmp}/opflow-site, without the
#   index or dependencies (the folder holds them all), and puts that folder on PYTHONPATH; with no wheels there it
#   does nothing. Returns 2 with a line naming PROG when pip fails. PYTHON (default python3) is the interpreter.
device_install_wheels() {
    local wheels="$1" prog="$2" site="${TMPDIR:-/tmp}/opflow-site" want
    compgen -G "$wheels/*.whl" >/dev/null || return 0
    # the same wheels already installed there (device_session.sh, then device_run.sh in the same command): no second pip run
    want="$(cd "$wheels" && for w in *.whl; do printf '%s %s\n' "$w" "$(wc -c <"$w")"; done)"
    if [[ ! -f "$site/.opflow-wheels-$(basename "$wheels")" || "$(cat "$site/.opflow-wheels-$(basename "$wheels")")" != "$want" ]]; then
        "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl \
            || { echo "$prog: installing the carried wheels failed" >&2; return 2; }
        printf '%s\n' "$want" >"$site/.opflow-wheels-$(basename "$wheels")"
    fi
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
}

# The test files that import the FEM stack (dolfinx, gmsh) as a whole: not on the GPU machines, whose runs leave them
# out (with the tests marked `fem`, which need it at run time). tests/pipeline/test_device_scripts.py checks that
# every test file importing the stack is listed here.
DEVICE_FEM_TEST_FILES=(tests/solvers/test_darcy_fem.py tests/solvers/test_elasticity.py tests/meshes/test_domains.py
                       tests/meshes/test_elasticity_cell.py tests/pipeline/test_mpi_shard.py tests/pipeline/test_irregular_darcy.py)
# device_pytest_skips: pytest's options that leave them out, in the array DEVICE_PYTEST_SKIPS
device_pytest_skips() {
    DEVICE_PYTEST_SKIPS=(-m "not fem")
    local f
    for f in "${DEVICE_FEM_TEST_FILES[@]}"; do DEVICE_PYTEST_SKIPS+=(--ignore "$f"); done
}
