"""Shared scaffolding of the notebook tests: committed-clean check and headless execution."""

from __future__ import annotations

import os
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


class CaptureCheckingClient(NotebookClient):
    """A ``NotebookClient`` that notes each cell that captured output into an Output widget.

    Capturing (``with out:``, ``out.capture``, ``interact``) while a cell runs makes nbclient, which
    plays the widget's front end, send each captured output back to the kernel on the shell socket
    while it awaits that cell's reply there. jupyter_client sends through a blocking shadow of the
    asyncio socket, which can swallow the wake-up of a reply that has just arrived: the run then
    sleeps until the cell timeout (notebook 03's prompt cell, about one run in two, before
    ``toolkit.widgets.prompt``). Widget code sets ``out.outputs`` instead.
    """

    def __init__(self, nb, **kw):
        super().__init__(nb, on_cell_execute=self._note_cell, **kw)
        self.current_cell: int | None = None
        self.capturing_cells: list[int] = []

    def _note_cell(self, cell, cell_index: int) -> None:
        self.current_cell = cell_index

    def register_output_hook(self, msg_id, hook) -> None:
        if self.current_cell not in self.capturing_cells:
            self.capturing_cells.append(self.current_cell)
        super().register_output_hook(msg_id, hook)


def run_notebook(notebook: Path, monkeypatch, *, timeout: int, env: dict | None = None):
    """Execute the notebook headless (kernel in notebooks/, package importable from the
    checkout, ``timeout`` seconds at most per cell); assert it raised no error and captured no
    output into an Output widget while a cell ran (see :class:`CaptureCheckingClient`).
    Returns the executed notebook. (How long it takes is no test's business: timings belong
    to the benchmarks, and a shared CI machine makes any wall-clock bound flaky.)"""
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)])))
    nb = nbformat.read(notebook, as_version=4)
    client = CaptureCheckingClient(nb, timeout=timeout, kernel_name="python3",
                                   resources={"metadata": {"path": str(notebook.parent)}})
    client.execute()
    assert not client.capturing_cells, (
        f"cells {client.capturing_cells} captured output into an Output widget (`with out:`) while running: "
        "headless runs can stall on that until the cell timeout; set `out.outputs` instead")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return nb
