"""Notebook 06 runs headless: a real (short) Trainer fine-tune of SmolLM2 watched by toolkit.watch."""

import re

import pytest

from _notebooks import ROOT, WIDGET_VIEW, committed_sources, run_notebook

NOTEBOOK = ROOT / "notebooks" / "06_watch_training.ipynb"


def test_notebook_is_committed_without_outputs():
    sources = committed_sources(NOTEBOOK)
    assert "toolkit.watch(" in sources and "WatchCallback(" in sources and "explore(monitor" in sources
    assert "layer_lines(" in sources


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    env = {"TOOLKIT_OUT": tmp_path / "out", "TOOLKIT_WATCH_PRESET": "short", "TOOLKIT_CACHE_DIR": tmp_path / "cache",
           "OMP_NUM_THREADS": 1}
    nb = run_notebook(NOTEBOOK, monkeypatch, timeout=600, env=env)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "watching 210 matrices of a llama model (30 layers) every 2 steps" in text
    assert "5 records at steps [0, 2, 4, 6, 8]" in text and "0 skipped" in text
    assert re.search(r"alpha measured at steps \[0, 4, 8\]", text)
    view_cell = next(c for c in nb.cells if c.cell_type == "code" and "explore(monitor" in c.source)
    bundles = [o.data for o in view_cell.outputs if o.output_type in ("display_data", "execute_result")]
    assert bundles and WIDGET_VIEW in bundles[-1]
    import toolkit

    ds = toolkit.load(tmp_path / "out" / "smollm2-watch-short")
    assert ds.step.values.tolist() == [0, 2, 4, 6, 8]
    assert float(ds.relative_change_since_start.isel(step=-1).min()) > 0
