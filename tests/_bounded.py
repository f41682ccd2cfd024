"""Running a few lines in a fresh process whose address space is limited, to prove a read allocates no more
than the matrix it makes (a declared block size or count of 2^30 must not become a 2^30-row tensor)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

_PRELUDE = """
import json, resource, sys
import torch
import toolkit
from toolkit.errors import ToolkitError

def _vm():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))

def _limit(extra):
    resource.setrlimit(resource.RLIMIT_AS, (_vm() + extra, resource.getrlimit(resource.RLIMIT_AS)[1]))
"""


def run_bounded(body: str, *, warm: str = "", extra: int = 512 * 2**20, timeout: float = 300) -> dict:
    """Run ``warm`` (imports, a first read), limit the address space to what the process holds then plus
    ``extra`` bytes, run ``body``, and return the JSON object it prints last (``result(...)``).

    ``body`` ends by calling ``result(value)``; an exception ends it as ``{"error": type, "message": ...,
    "typed": bool}`` (a MemoryError or an allocator's RuntimeError: the read needed more than ``extra``).
    """
    code = _PRELUDE + textwrap.dedent(warm) + textwrap.dedent(f"""
def result(value):
    print(json.dumps({{"value": value}}))

_limit({int(extra)})
try:
{textwrap.indent(textwrap.dedent(body), "    ")}
except BaseException as exc:
    print(json.dumps({{"error": type(exc).__name__, "message": str(exc)[:500],
                      "typed": isinstance(exc, ToolkitError)}}))
""")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
                               "TOOLKIT_CACHE_DIR": "off"})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError(f"no result (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1])
