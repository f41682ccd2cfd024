"""Shared scaffolding of the notebook tests: committed-clean check and headless execution."""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def committed_sources(notebook: Path) -> str:
    """Assert the notebook is valid and has no outputs; return all cell sources joined."""
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    return "\n".join(c.source for c in nb.cells)


def run_notebook(notebook: Path, monkeypatch, *, timeout: int, limit_s: float, env: dict | None = None):
    """Execute the notebook headless (kernel in notebooks/, package importable from the
    checkout); assert it took under ``limit_s`` seconds and raised no error. Returns the
    executed notebook."""
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)])))
    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(notebook.parent)}})
    start = time.monotonic()
    client.execute()
    elapsed = time.monotonic() - start
    assert elapsed < limit_s, f"notebook took {elapsed:.0f} s"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return nb
