#!/usr/bin/env bash
# Installs what tests/sources/test_sources_remote.py and benchmarks/bench_remote.py need: Debian's nginx
# (the loopback HTTP server the remote-reading tests start and stop themselves; no service is enabled).
set -euo pipefail
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends nginx-light
    # the package starts a system nginx on port 80; the tests run their own
    $SUDO service nginx stop >/dev/null 2>&1 || true
fi
{ command -v nginx || ls /usr/sbin/nginx; } >/dev/null
echo "server test dependencies ready (nginx)"
