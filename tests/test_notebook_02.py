"""Notebook 02 runs headless on a real (short) fine-tune of SmolLM2 and shows where it changed the model."""

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "02_checkpoint_diff.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    sources = "\n".join(c.source for c in nb.cells)
    assert "%matplotlib inline" in sources
    assert "finetune(" in sources and "compare_series(" in sources and "explore(" in sources
    assert "SelectionSlider" in sources and "component_lines(" in sources
    assert "Qwen/Qwen2.5-Math-7B" in sources and "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B" in sources


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("TOOLKIT_OUT", str(out))
    monkeypatch.setenv("TOOLKIT_FINETUNE_PRESET", "short")
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)])))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    start = time.monotonic()
    client.execute()
    elapsed = time.monotonic() - start
    assert elapsed < 240, f"notebook took {elapsed:.0f} s"

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "3 checkpoints at steps [0, 2, 4]" in text and "whole model: relative change" in text
    explorer_cell = next(c for c in nb.cells if "explore(series" in c.source)
    bundles = [o.data for o in explorer_cell.outputs if o.output_type in ("display_data", "execute_result")]
    assert len(bundles) == 2  # the step slider, then the panel
    assert WIDGET_VIEW in bundles[1] and "image/png" in bundles[1]
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 5  # loss, explorer, lines, two heatmaps, GGUF heatmap
    # the real run: three bf16 checkpoints, and the last one differs from step 0
    run_dir = out / "smollm2-short"
    assert sorted(p.name for p in run_dir.glob("step-*")) == ["step-00000", "step-00002", "step-00004"]
    import toolkit

    series = toolkit.load(out / "finetune_series.nc")
    last = series.isel(checkpoint=-1)
    assert float(last.relative_change.min()) > 0 and float(last.update_sparsity.max()) < 1
    assert float(series.isel(checkpoint=0).relative_change.max()) == 0
    assert (out / "finetune_relative_change.png").stat().st_size > 0
