"""Notebook 03 runs headless, end to end, on the embedded model and data/prompts.txt."""

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "03_activations.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    sources = "\n".join(c.source for c in nb.cells)
    assert "%matplotlib inline" in sources and "SOURCE = None" in sources and "load_prompts()" in sources
    assert "W.Textarea" in sources  # the text box for your own prompt


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("TOOLKIT_OUT", str(out))
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
    for needle in ('"max_abs_activation"', '"attention_sink_mass"'):  # the two explorers
        cell = next(c for c in nb.cells if "explore(" in c.source and needle in c.source)
        bundles = [o.data for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        assert len(bundles) == 1 and WIDGET_VIEW in bundles[0] and "image/png" in bundles[0], cell.source
    prompt_cell = next(c for c in nb.cells if "W.Textarea" in c.source)
    assert any(WIDGET_VIEW in o.get("data", {}) for o in prompt_cell.outputs)
    summary = next(c for c in nb.cells if "largest |activation|" in c.source)
    text = "".join(o.get("text", "") for o in summary.outputs)
    assert "attention on the first token" in text and "next-token loss" in text
    assert (out / "activation_stats.nc").stat().st_size > 0
