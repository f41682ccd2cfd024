"""The explorer in a real browser: Voila serves a notebook, headless Chromium uses it.

Notebook 01 as a user opens it (the model measured live, the metric changes the figure), and a
small notebook of synthetic statistics: hover a cell and read its tooltip, click it and see its
spectrum, change the metric and see one new figure, switch two models to the difference view, and
no label cut off. The interaction of a modern plot (zoom, keys, the selected cell, the layout at
two widths, shared colours, λ_max) is in ``tests/end_to_end/test_browser_explorer.py``.

Needs ``/usr/bin/chromium``, ``voila`` and ``playwright`` (``.ci/browser-deps.sh``
installs them; never ``playwright install``). Leaves screenshots in ``test-artifacts/``.
"""

import json
import sys

import pytest

import _browser as B

pytestmark = B.MARKS
NOTEBOOK = B.ROOT / "notebooks" / "01_weight_heatmaps.ipynb"
HEATMAP = ".toolkit-heatmap"


def _renders(page, index: int) -> int:
    return int(page.locator(HEATMAP).nth(index).get_attribute("data-renders") or 0)


def _wait_rendered(page, index: int, after: int = 0):
    """Wait until heatmap ``index`` has drawn a figure newer than ``after``; returns its render count."""
    page.wait_for_function(
        "([k, old]) => { const h = document.querySelectorAll('.toolkit-heatmap')[k];"
        " return h && Number(h.dataset.renders) > old && h.querySelector('rect.cell'); }",
        arg=[index, after], timeout=180_000)
    return _settled(page, index)


def _settled(page, index: int, quiet_polls: int = 5, max_polls: int = 300) -> int:
    """The render count of heatmap ``index`` once it stops changing (``quiet_polls`` reads 0.1 s apart agree):
    one change in the page can draw twice (the figure, then its colour scale), and a cell located between the
    two is detached from the page."""
    last, same = _renders(page, index), 0
    for _ in range(max_polls):
        page.wait_for_timeout(100)
        now = _renders(page, index)
        same = same + 1 if now == last else 0
        last = now
        if same >= quiet_polls:
            break
    return last


def test_notebook_01_measures_live_and_the_metric_redraws_the_heatmap(tmp_path):
    with B.voila(NOTEBOOK, tmp_path) as url, B.chromium(tmp_path) as page:
        page.goto(url, timeout=B.PAGE_TIMEOUT_MS, wait_until="commit")
        # notebook 01 shows two explorers: the model's (measured live), and the mixture-of-experts one
        page.locator(HEATMAP).nth(1).wait_for(state="attached", timeout=B.PAGE_TIMEOUT_MS)
        _wait_rendered(page, 0)
        _wait_rendered(page, 1)
        page.get_by_text("Measured").first.wait_for(timeout=B.PAGE_TIMEOUT_MS)  # the pass finished
        # what the later cells show (section 8's MoE model included) fills its placeholder once the pass ends
        page.get_by_text("shown when the measuring").first.wait_for(state="detached", timeout=B.PAGE_TIMEOUT_MS)
        assert page.locator('.toolkit-heatmap rect.cell.nan').count() < page.locator(".toolkit-heatmap rect.cell") \
            .count()
        metric = page.locator(".widget-vbox:has(> .toolkit-explorer-wrap) select").first
        options = metric.locator("option").all_inner_texts()
        current = metric.evaluate("el => el.options[el.selectedIndex].text")
        target = next(o for o in options if o != current)
        before = page.locator(HEATMAP).first.locator("rect.cell").evaluate_all("rs => rs.map(r => r.getAttribute("
                                                                                 "'fill'))")
        n = _renders(page, 0)
        metric.select_option(label=target)
        _wait_rendered(page, 0, after=n)
        after = page.locator(HEATMAP).first.locator("rect.cell").evaluate_all("rs => rs.map(r => r.getAttribute("
                                                                                "'fill'))")
        assert after != before and page.locator(HEATMAP).count() == 2  # one figure per explorer, none added
        page.locator(HEATMAP).first.scroll_into_view_if_needed()
        page.screenshot(path=str(B.ARTIFACTS / "notebook01_metric_changed.png"), full_page=True)
        text = page.inner_text("body")
        for bad in ("Traceback", "Error"):
            assert bad not in text, f"page shows {bad!r}: ...{text[max(0, text.find(bad) - 300):][:800]}"
        assert target in text
        assert "edit this cell" not in text


#: The synthetic notebook: one explorer over a model with stored spectra, one over two models.
SETUP = """
import numpy as np
from _stats_data import make_stats, with_spectra
from toolkit.widgets import explore


one = with_spectra(make_stats(12, gate=False))
pair = [make_stats(12, seed=1, source="org/base"), make_stats(12, seed=2, source="org/tuned")]
"""
CELLS = [SETUP, "explore(one)", "explore(pair)"]
HOVER_CELL = (3, "mlp.down")


def _expected():
    """The same two explorers in this process: the hover texts the page must show."""
    import matplotlib

    matplotlib.use("Agg")
    sys.path.insert(0, str(B.ROOT / "tests"))
    scope = {}
    exec(SETUP, scope)  # noqa: S102 - our own constant
    return scope["explore"](scope["one"]), scope["explore"](scope["pair"])


def _cell(page, index: int, row: int, col: int):
    """The page coordinates of a cell's centre."""
    return B.centre(page.locator(HEATMAP).nth(index).locator(
        f'svg[data-panel="0"] rect.cell[data-r="{row}"][data-c="{col}"]'))


def test_hover_click_metric_and_difference_in_the_explorer(tmp_path):
    ex_one, ex_pair = _expected()
    notebook = B.write_notebook(tmp_path / "explorer.ipynb", CELLS)
    with B.voila(notebook, tmp_path, extra_path=str(B.ROOT / "tests")) as url, B.chromium(tmp_path) as page:
        page.goto(url, timeout=B.PAGE_TIMEOUT_MS, wait_until="commit")
        page.locator(HEATMAP).nth(1).wait_for(state="attached", timeout=B.PAGE_TIMEOUT_MS)
        first = _wait_rendered(page, 0)
        _wait_rendered(page, 1)
        heatmaps = page.locator(HEATMAP)

        # hover: the tooltip is the cell's text, value and tensor name included
        layer, comp = HOVER_CELL
        i, j = ex_one.current.rows.index(layer), ex_one.current.cols.index(comp)
        x, y = _cell(page, 0, i, j)
        page.mouse.move(x, y)
        tip = heatmaps.nth(0).locator(".toolkit-heatmap-tooltip")
        tip.wait_for(state="visible", timeout=10_000)
        assert tip.inner_text() == ex_one.hover_text(layer, comp)
        assert "tensor: model.layers.3.mlp.down.weight" in tip.inner_text()
        page.screenshot(path=str(B.ARTIFACTS / "explorer_hover.png"))

        # click: the drill-down appears beside the heatmap
        page.mouse.click(x, y)
        page.locator(".toolkit-explorer-side svg.toolkit-chart-panel").first.wait_for(state="visible", timeout=60_000)
        assert "layer 3, mlp.down" in page.locator(".toolkit-cell").first.inner_text()
        page.screenshot(path=str(B.ARTIFACTS / "explorer_click_drilldown.png"))

        # metric: one new figure in that explorer
        metric = page.locator("select").first
        metric.select_option(label="Spectral norm")
        _wait_rendered(page, 0, after=first)
        assert ex_one.controls["metric"].value != "spectral_norm"
        assert heatmaps.count() == 2  # one figure per explorer, no stale copy
        assert "Spectral norm" in heatmaps.nth(0).locator("text.toolkit-heatmap-title").first.text_content()
        page.screenshot(path=str(B.ARTIFACTS / "explorer_metric_changed.png"))

        # two models: the difference view, and its tooltip names both sides
        pair_before = _renders(page, 1)
        page.get_by_role("button", name="difference (target − base)").click()
        _wait_rendered(page, 1, after=pair_before)
        ex_pair.controls["view"].value = "difference"
        x, y = _cell(page, 1, i, j)
        page.mouse.move(x, y)
        tip = heatmaps.nth(1).locator(".toolkit-heatmap-tooltip")
        tip.wait_for(state="visible", timeout=10_000)
        assert tip.inner_text() == ex_pair.hover_text(layer, comp)
        assert "(target − base)" in tip.inner_text() and "org/base:" in tip.inner_text()
        assert "white = 0" in heatmaps.nth(1).locator("text.toolkit-cbar-label").all_text_contents()
        page.screenshot(path=str(B.ARTIFACTS / "explorer_difference.png"), full_page=True)

        # no label or button text cut off
        cut = page.evaluate("""() => [...document.querySelectorAll(
              '.widget-button, .widget-toggle-button, .widget-label, .widget-label-basic')]
            .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
            .map(e => e.innerText)""")
        assert cut == [], f"cut-off labels: {json.dumps(cut)}"
        text = page.inner_text("body")
        assert "Traceback" not in text, text[:2000]


@pytest.mark.skipif(not B.HAS_LAB, reason="needs jupyterlab (pip install jupyterlab)")
def test_hover_and_click_in_jupyterlab(tmp_path):
    ex_one, _ = _expected()
    B.write_notebook(tmp_path / "explorer.ipynb", CELLS)
    with B.jupyterlab(tmp_path, "explorer.ipynb", tmp_path, str(B.ROOT / "tests")) as url, B.chromium(tmp_path) as page:
        B.run_all_in_jupyterlab(page, url)
        try:
            page.locator(HEATMAP).nth(1).wait_for(state="attached", timeout=120_000)
        except Exception:
            page.screenshot(path=str(B.ARTIFACTS / "jupyterlab_no_heatmap.png"))
            raise
        _wait_rendered(page, 0)
        heatmap = page.locator(HEATMAP).nth(0)
        layer, comp = HOVER_CELL
        i, j = ex_one.current.rows.index(layer), ex_one.current.cols.index(comp)
        x, y = _cell(page, 0, i, j)
        page.mouse.move(x, y)
        tip = heatmap.locator(".toolkit-heatmap-tooltip")
        tip.wait_for(state="visible", timeout=10_000)
        assert tip.inner_text() == ex_one.hover_text(layer, comp)
        page.screenshot(path=str(B.ARTIFACTS / "jupyterlab_hover.png"))
        page.mouse.click(x, y)
        page.locator(".toolkit-explorer-side svg.toolkit-chart-panel").first.wait_for(state="visible", timeout=60_000)
        assert "layer 3, mlp.down" in page.locator(".toolkit-cell").first.inner_text()
        page.screenshot(path=str(B.ARTIFACTS / "jupyterlab_click_drilldown.png"))
