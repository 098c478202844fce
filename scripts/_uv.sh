# Sourced by the other scripts: makes `uv` available (installed from PyPI when missing).
if ! command -v uv >/dev/null 2>&1; then
    if ! python3 -m uv --version >/dev/null 2>&1; then
        echo "installing uv from PyPI..." >&2
        python3 -m pip install --quiet --disable-pip-version-check "uv>=0.5" >&2
    fi
    uv() { python3 -m uv "$@"; }
fi
export UV_PYTHON_DOWNLOADS=never
