#!/usr/bin/env bash
# Installs what tests/end_to_end/test_browser.py needs: Debian's chromium, and voila + playwright + jupyterlab
# in the project venv. Playwright drives the system browser (/usr/bin/chromium);
# never run `playwright install` (it downloads its own browser, which fails offline).
set -euo pipefail
cd "$(dirname "$0")/.."
# Optional argument: the pip of the venv to install into (the Makefile passes .venv/bin/pip).
if [ $# -ge 1 ]; then PY="$(dirname "$1")/python"; else PY="${PYTHON:-.venv/bin/python}"; fi

if [ ! -x /usr/bin/chromium ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium
fi
"$PY" -m pip install --quiet voila playwright jupyterlab
"$PY" - <<'PYEOF'
import importlib.util, pathlib
missing = [m for m in ("voila", "playwright", "jupyterlab") if importlib.util.find_spec(m) is None]
assert not missing, f"not installed: {missing}"
assert pathlib.Path("/usr/bin/chromium").exists(), "/usr/bin/chromium missing"
print("browser test dependencies ready")
PYEOF
