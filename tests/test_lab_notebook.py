"""Notebook 04 (attention-activation lab) is committed clean and runs headless."""

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "04_attention_norms.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    text = "\n".join(c.source for c in nb.cells)
    assert "%matplotlib inline" in text and "load_result()" in text and "lab_explorer(" in text
    assert "\\sqrt N" in text and 'ACTIVATION = "x²/4"' in text


@pytest.mark.slow
def test_notebook_runs_headless_and_draws_the_grid(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_OUT", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)])))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    start = time.monotonic()
    client.execute()
    elapsed = time.monotonic() - start
    assert elapsed < 120, f"notebook took {elapsed:.0f} s"

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    grid_cell = next(c for c in nb.cells if c.source.startswith('fig = layer_grid(ds, "attention_norm")'))
    assert [o for o in grid_cell.outputs if "image/png" in o.get("data", {})]  # the 3 x 4 grid
    panel_cell = next(c for c in nb.cells if "lab_explorer(" in c.source)
    bundles = [o.data for o in panel_cell.outputs if o.output_type == "display_data"]
    assert len(bundles) == 1 and WIDGET_VIEW in bundles[0] and "image/png" in bundles[0]
    fresh_cell = next(c for c in nb.cells if "run_experiment(" in c.source)
    assert [o for o in fresh_cell.outputs if "image/png" in o.get("data", {})]
    assert (tmp_path / "attention_lab_fresh.nc").stat().st_size > 0
