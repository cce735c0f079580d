# Sourced by scripts/device_run.sh and scripts/device_test.sh: the carried wheels on the GPU machine's Python.
#
# device_install_wheels WHEEL_DIR PROG
#   installs every WHEEL_DIR/*.whl (made by scripts/device_wheels.sh) into ${TMPDIR:-/tmp}/opflow-site, without the
#   index or dependencies (the folder holds them all), and puts that folder on PYTHONPATH; with no wheels there it
#   does nothing. Returns 2 with a line naming PROG when pip fails. PYTHON (default python3) is the interpreter.
device_install_wheels() {
    local wheels="$1" prog="$2" site="${TMPDIR:-/tmp}/opflow-site"
    compgen -G "$wheels/*.whl" >/dev/null || return 0
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl \
        || { echo "$prog: installing the carried wheels failed" >&2; return 2; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
}
