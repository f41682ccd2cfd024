"""Notebook 03 runs headless, end to end, on the embedded model and data/prompts.txt."""

import pytest

from _notebooks import ROOT, WIDGET_VIEW, committed_sources, run_notebook

NOTEBOOK = ROOT / "notebooks" / "03_activations.ipynb"


def test_notebook_is_committed_without_outputs():
    sources = committed_sources(NOTEBOOK)
    assert "%matplotlib inline" in sources and "SOURCE = None" in sources and "load_prompts()" in sources
    assert "prompt_box(model" in sources  # the text box for your own prompt


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    # One torch thread: on 2 shared, busy cores, two intra-op threads wait on each other at every
    # operation and the forward/backward passes run 2-4 times slower than on one thread.
    nb = run_notebook(NOTEBOOK, monkeypatch, timeout=300, env={"TOOLKIT_OUT": out, "OMP_NUM_THREADS": 1})
    for needle in ('"max_abs_activation"', '"attention_sink_mass"'):  # the two explorers
        cell = next(c for c in nb.cells if "explore(" in c.source and needle in c.source)
        bundles = [o.data for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        assert len(bundles) == 1 and WIDGET_VIEW in bundles[0] and "image/png" in bundles[0], cell.source
    prompt_cell = next(c for c in nb.cells if "prompt_box(model" in c.source)
    bundles = [o.data for o in prompt_cell.outputs if o.output_type in ("display_data", "execute_result")]
    assert len(bundles) == 1 and WIDGET_VIEW in bundles[0] and "image/png" in bundles[0]
    summary = next(c for c in nb.cells if "largest |activation|" in c.source)
    text = "".join(o.get("text", "") for o in summary.outputs)
    assert "attention on the first token" in text and "next-token loss" in text
    import numpy as np

    import toolkit

    saved = toolkit.load(out / "activation_stats.nc")  # the embedded model's 30 layers, measured
    assert saved.sizes["layer"] == 30
    sink = saved.attention_sink_mass.values
    sink = sink[np.isfinite(sink)]
    assert sink.size and ((sink >= 0) & (sink <= 1 + 1e-6)).all()  # a share of the attention weights
    peak = saved.max_abs_activation.values
    assert np.isfinite(peak).any() and (peak[np.isfinite(peak)] > 0).all()


@pytest.mark.slow
def test_the_harness_names_cells_that_capture_into_an_output_widget(tmp_path, monkeypatch):
    """The stall's pattern fails every notebook test at once, with its fix, instead of one run in two."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in (
        "import ipywidgets as W\nout = W.Output()\nout",
        "out.outputs = ({'output_type': 'stream', 'name': 'stdout', 'text': 'set, not captured'},)",
        "with out:\n    print('captured')",
    )])
    path = tmp_path / "capture.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(AssertionError, match=r"cells \[2\] captured output into an Output widget"):
        run_notebook(path, monkeypatch, timeout=15)  # a stall here costs at most 15 s
