# Sourced by the other scripts: sets UV to a working uv command (installed from PyPI when
# missing) and keeps uv from downloading Python builds (it uses the machine's python3).
if command -v uv >/dev/null 2>&1; then
    UV=(uv)
else
    if ! python3 -m uv --version >/dev/null 2>&1; then
        echo "installing uv from PyPI..." >&2
        python3 -m pip install --quiet --disable-pip-version-check "uv>=0.5" >&2
    fi
    UV=(python3 -m uv)
fi
export UV_PYTHON_DOWNLOADS=never
