"""Notebook 04 (attention-activation lab) is committed clean and runs headless."""

import pytest

from _notebooks import ROOT, WIDGET_VIEW, committed_sources, run_notebook

NOTEBOOK = ROOT / "notebooks" / "04_attention_norms.ipynb"


def test_notebook_is_committed_without_outputs():
    text = committed_sources(NOTEBOOK)
    assert "%matplotlib inline" in text and "load_result()" in text and "lab_explorer(" in text
    assert "\\sqrt N" in text and 'ACTIVATION = "x²/4"' in text
    assert 'load_result("up16")' in text and "## What sets the level of each curve" in text
    assert "checkpoints=False" in text  # its own run leaves only the NetCDF behind


def test_the_lesson_comes_first_and_the_research_notes_after_the_line():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    sources = [c.source for c in nb.cells]
    split = next(i for i, s in enumerate(sources) if "# Part 2 — Research notes" in s)
    lesson, research = "\n".join(sources[:split]), "\n".join(sources[split:])
    for step in ("attention_picture(", "lab_explorer(ds)", "answer_notes(ds)", "train_your_own()",
                 "means nothing yet", "max over heads", "## 4. Questions the explorer answers"):
        assert step in lesson, step
    for note in ("## Why softmax can never exceed", "## What sets the level of each curve", "run_experiment("):
        assert note in research and note not in lesson, note
    assert "<details>" in lesson  # answer notes fold away


def test_notebook_names_the_colours_the_figure_draws():
    from toolkit.plot.layer_grid_figure import ACTIVATION_COLOR_NAMES, ACTIVATION_COLORS

    text = committed_sources(NOTEBOOK)
    assert set(ACTIVATION_COLOR_NAMES) == set(ACTIVATION_COLORS)
    for label, name in ACTIVATION_COLOR_NAMES.items():
        assert f"**{label}** {name}" in text, label
    for stale in ("orange, red", "green, pink", "(blue)", "Layer 1"):
        assert stale not in text


@pytest.mark.slow
def test_notebook_runs_headless_and_draws_the_grid(tmp_path, monkeypatch):
    nb = run_notebook(NOTEBOOK, monkeypatch, timeout=300, env={"TOOLKIT_OUT": tmp_path})
    grid_cell = next(c for c in nb.cells if c.source.startswith('fig = layer_grid(ds, "attention_norm")'))
    assert [o for o in grid_cell.outputs if "image/png" in o.get("data", {})]  # the 3 x 4 grid
    panel_cell = next(c for c in nb.cells if "lab_explorer(" in c.source)
    bundles = [o.data for o in panel_cell.outputs if o.output_type == "display_data"]
    assert len(bundles) == 1 and WIDGET_VIEW in bundles[0] and "image/png" in bundles[0]
    # a run without score statistics (the N = 17 one predates them) is said so, not printed as "= nan"
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                      if o.output_type == "stream")
    import re

    assert not re.search(r"=\s*nan\b", printed, re.IGNORECASE), printed
    assert "N = 17: the run's Dataset has no score statistics" in printed
    assert "no share of |S| > 1 for this run" in printed and "x³/1: share of |S| > 1 = 0.0" in printed
    fresh_cell = next(c for c in nb.cells if "run_experiment(" in c.source)
    assert [o for o in fresh_cell.outputs if "image/png" in o.get("data", {})]
    import numpy as np

    from toolkit.lab import load_result

    fresh = load_result(tmp_path / "attention_lab_fresh.nc")  # the notebook's run: 2 activations x 8 epochs
    assert list(fresh.activation.values) == ["softmax", "x²/4"]
    assert list(fresh.epoch.values) == list(range(9))  # epoch 0 is the untrained model, then 8 epochs
    acc = fresh.test_accuracy.values
    assert np.isfinite(acc).all() and ((acc >= 0) & (acc <= 1)).all() and acc.shape == (2, 9)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention_lab_fresh.nc"]  # no checkpoint folder left
    levels = next(c for c in nb.cells if c.source.startswith("runs = {"))
    assert [o for o in levels.outputs if "image/png" in o.get("data", {})]
    picture = next(c for c in nb.cells if "attention_picture(" in c.source)
    assert [o for o in picture.outputs if "image/png" in o.get("data", {})]
    printed = "".join(o.get("text", "") for o in picture.outputs)
    assert "attention norm ||A||_F: softmax " in printed and ", x/1 " in printed and ", x³/16 " in printed
    notes_cell = next(c for c in nb.cells if "answer_notes(ds)" in c.source)
    (shown,) = [o.data["text/html"] for o in notes_cell.outputs if "text/html" in o.get("data", {})]
    from toolkit.lab.lesson import answer_notes

    notes = answer_notes(load_result())
    import html

    assert shown.count("<details>") == 4 and all(html.escape(v) in shown for v in notes.values())
    assert "reaches 3.99" in notes["q3"]  # the number the research notes quote, computed
    widget = next(c for c in nb.cells if c.source.strip() == "train_your_own()")
    assert [o for o in widget.outputs if WIDGET_VIEW in o.get("data", {})]  # the panel; nothing trained headless
