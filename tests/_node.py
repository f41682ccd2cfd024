"""Run the widgets' pure JavaScript helpers under node (tests skip where node is missing)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from toolkit.widgets._assets import module as bundled

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


def run_js(body: str, *, module: str = "common.js", timeout: float = 30):
    """Evaluate ``body`` after ``module`` (its top-level functions in scope: a front end's whole bundle,
    :data:`toolkit.widgets._assets.BUNDLES`, or a part after ``common.js``) and return what it prints as JSON
    (``console.log(JSON.stringify(...))``)."""
    source = bundled(module).replace("export default", "const __default =")
    out = subprocess.run([NODE, "--input-type=module", "-e", source + "\n" + body], capture_output=True,
                         text=True, timeout=timeout, check=True)
    return json.loads(out.stdout)
