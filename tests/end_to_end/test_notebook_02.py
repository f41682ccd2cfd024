"""Notebook 02 runs headless on a real (short) fine-tune of SmolLM2 and shows where it changed the model."""

import pytest

from _notebooks import ROOT, WIDGET_VIEW, committed_sources, run_notebook

NOTEBOOK = ROOT / "notebooks" / "02_checkpoint_diff.ipynb"


def test_notebook_is_committed_without_outputs():
    sources = committed_sources(NOTEBOOK)
    assert "%matplotlib inline" in sources
    assert "finetune(" in sources and "compare_series(" in sources and "explore(" in sources
    assert "SelectionSlider" in sources and "component_lines(" in sources
    assert "Qwen/Qwen2.5-Math-7B" in sources and "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B" in sources


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    env = {"TOOLKIT_OUT": out, "TOOLKIT_FINETUNE_PRESET": "short", "TOOLKIT_CACHE_DIR": tmp_path / "cache",
           "OMP_NUM_THREADS": 1}
    nb = run_notebook(NOTEBOOK, monkeypatch, timeout=600, env=env)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "3 checkpoints at steps [0, 2, 4]" in text and "whole model: relative change" in text
    # section 6: the sentence is built from the numbers it prints (it said "a little above" of 61 % more)
    gguf_cell = next(c for c in nb.cells if "compare(None, run.final" in c.source)
    printed = "".join(o.get("text", "") for o in gguf_cell.outputs if o.output_type == "stream")
    import re

    found = re.search(r"relative change (\S+), (\S+) x the series' (\S+): the bf16 rounding alone is (\S+) \((\S+) x",
                      printed)
    assert found, printed
    both, ratio, tuned, rounded, share = (float(x) for x in found.groups())
    assert ratio == pytest.approx(both / tuned, rel=0.02) and share == pytest.approx(rounded / tuned, rel=0.02)
    assert both > tuned and rounded > 0
    assert "a little above" not in "".join(c.source for c in nb.cells)
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
    import numpy as np
    from matplotlib.image import imread

    png = imread(out / "finetune_relative_change.png")  # the explorer's figure: a drawn heatmap, not a blank
    assert png.ndim == 3 and min(png.shape[:2]) >= 200 and len(np.unique(png.reshape(-1, png.shape[2]), axis=0)) > 50
