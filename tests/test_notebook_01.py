"""Notebook 01 runs headless, end to end, on the embedded default model."""

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_weight_heatmaps.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    sources = "\n".join(c.source for c in nb.cells)
    assert "%matplotlib inline" in sources
    assert "Qwen/Qwen2.5-7B" in sources and "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B" in sources


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("TOOLKIT_OUT", str(out))
    # the kernel starts in notebooks/; make the package importable without an install
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
    explorer_cell = next(c for c in nb.cells if "explore_model(" in c.source)
    bundles = [o.data for o in explorer_cell.outputs if o.output_type == "display_data"]
    assert len(bundles) == 1, explorer_cell.outputs  # one panel, not a second copy as the result
    assert WIDGET_VIEW in bundles[0] and "image/png" in bundles[0]  # static fallback for viewers
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 3  # explorer fallback + single heatmap + side-by-side panels
    assert not any("<Figure size" in o.get("data", {}).get("text/plain", "") and "image/png" not in o.data
                   for o in outputs if o.output_type == "display_data")
    assert (out / "weight_stats.nc").stat().st_size > 0
    assert list(out.glob("*.png"))
