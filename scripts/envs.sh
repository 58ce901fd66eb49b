# Sourced by the scripts here: builds the virtual environments under .venvs/ (idempotent).
#   make_env NAME EXTRAS [PACKAGES...]   ->  .venvs/NAME with parallel-steps[EXTRAS] installed (editable)
# Airflow and Prefect cannot share one environment (their FastAPI ranges do not overlap).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENVS="$ROOT/.venvs"
PYTHON=${PYTHON:-python3}

uv_bin() {
    if [ ! -x "$VENVS/uv/bin/uv" ]; then
        mkdir -p "$VENVS"
        "$PYTHON" -m venv "$VENVS/uv"
        "$VENVS/uv/bin/pip" install --quiet --disable-pip-version-check uv
    fi
    echo "$VENVS/uv/bin/uv"
}

make_env() {
    local name=$1 extras=$2
    shift 2
    local uv
    uv=$(uv_bin)
    [ -x "$VENVS/$name/bin/python" ] || "$uv" venv --quiet --python "$(command -v "$PYTHON")" "$VENVS/$name"
    VIRTUAL_ENV="$VENVS/$name" "$uv" pip install --quiet -e "$ROOT[$extras]" "$@"
}
