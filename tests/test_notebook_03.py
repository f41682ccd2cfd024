"""Notebook 03 runs headless, end to end, on the embedded model and data/prompts.txt."""

import pytest

from _notebooks import ROOT, WIDGET_VIEW, committed_sources, run_notebook

NOTEBOOK = ROOT / "notebooks" / "03_activations.ipynb"


def test_notebook_is_committed_without_outputs():
    sources = committed_sources(NOTEBOOK)
    assert "%matplotlib inline" in sources and "SOURCE = None" in sources and "load_prompts()" in sources
    assert "W.Textarea" in sources  # the text box for your own prompt


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    # One torch thread: on 2 shared, busy cores, two intra-op threads wait on each other at every
    # operation and the forward/backward passes run 2-4 times slower than on one thread.
    # timeout=60 per cell: about one run in three, nbclient waits out the whole cell timeout after the
    # Output-widget cell (the prompt box) although the kernel is idle; the cell's outputs are complete
    # either way. Root cause not found yet (see the closing note of session 3); 60 s keeps such a run
    # inside the limit instead of costing 300 s.
    nb = run_notebook(NOTEBOOK, monkeypatch, timeout=60, limit_s=120, env={"TOOLKIT_OUT": out, "OMP_NUM_THREADS": 1})
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
