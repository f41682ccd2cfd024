"""toolkit.widgets.export_html: one self-contained page, opened offline from file:// in headless Chromium,
with the live explorer's colours and hover texts, the metric menu and each stored cell's drill-down."""

from __future__ import annotations

import json
import re

import pytest

import toolkit
from _browser import MARKS, chromium
from toolkit.plot import prepare_heatmap
from toolkit.widgets import export_html
from toolkit.widgets.cells import Panel, PanelFacts
from toolkit.widgets.export import page_data

pytestmark = MARKS


def _embedded(path) -> dict:
    text = path.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="toolkit-data">(.*?)</script>', text,
                                re.S).group(1).replace("<\\/", "</"))


def test_the_exported_page_works_offline_with_the_widgets_numbers(tmp_path, cache):
    ds = toolkit.weight_stats(progress=False, keep_spectra=True)  # the embedded SmolLM2, with its spectra
    path = export_html(ds, tmp_path / "smollm2.html")
    assert path.stat().st_size < 5_000_000  # the embedded model with every spectrum
    page = _embedded(path)
    assert page["metrics"][:2] == ["frobenius_norm", "rms"] and len(page["drilldowns"]) == 210
    prepared = prepare_heatmap(ds, "alpha")
    hover = PanelFacts(Panel("m", ds, {}), prepared, "alpha").grid()
    assert page["heatmaps"]["alpha"]["panels"][0]["hover"] == hover  # the live explorer's texts
    with chromium(tmp_path, 1400, 900) as tab:
        requests, errors = [], []
        tab.context.set_offline(True)
        tab.on("request", lambda r: requests.append(r.url))
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(path.as_uri())
        tab.wait_for_selector("body[data-ready=true]", timeout=30_000)
        tab.select_option("#toolkit-metric", "alpha")
        tab.wait_for_function("document.querySelector('#toolkit-heatmap').textContent.includes('alpha')")
        cell = tab.locator("#toolkit-heatmap svg rect").nth(40).bounding_box()
        tab.mouse.move(cell["x"] + cell["width"] / 2, cell["y"] + cell["height"] / 2)
        tab.wait_for_function("document.querySelector('#toolkit-heatmap').innerText.includes('tensor: model.')")
        shown = tab.locator("#toolkit-heatmap").inner_text()
        assert any(h and h in shown for row in hover for h in row), shown[-400:]
        tab.mouse.click(cell["x"] + cell["width"] / 2, cell["y"] + cell["height"] / 2)
        tab.wait_for_selector("#toolkit-drilldown svg", timeout=10_000)
        assert "power law, α" in tab.locator("#toolkit-drilldown").inner_text()
        tab.screenshot(path=str(tmp_path / "export.png"))
    assert not errors, errors
    assert all(u.startswith(("file:", "blob:", "data:")) for u in requests), requests


def test_a_series_exports_one_panel_per_step_on_one_scale():
    import numpy as np
    import xarray as xr

    v = np.arange(12.0).reshape(3, 2, 2)
    ds = xr.Dataset({"relative_change": (("checkpoint", "layer", "component"), v)},
                    coords={"checkpoint": [0, 1, 2], "step": ("checkpoint", [0, 5, 10]), "layer": [0, 1],
                            "component": ["attn.q", "attn.k"]})
    page = page_data(ds)
    spec = page["heatmaps"]["relative_change"]
    assert [p["title"].split(":")[0] for p in spec["panels"]] == ["step 0", "step 5", "step 10"]
    assert spec["shared_cbar"] is not None and page["drilldowns"] == {}
    with pytest.raises(toolkit.errors.InvalidOptionError, match="metrics"):
        page_data(ds, metrics=["nope"])


def test_a_page_without_spectra_has_the_live_labels_and_names_the_clicked_cell(tmp_path):
    """The menu lists "Frobenius norm", not frobenius_norm; a click says which layer and component has no
    spectrum (it said "panel 1, row 3, column 5": a 1-based panel beside 0-based rows) and how to get one."""
    from _stats_data import make_stats

    ds = make_stats(6)
    with pytest.warns(UserWarning, match="no drill-down spectra"):
        path = export_html(ds, tmp_path / "plain.html", metrics=["frobenius_norm", "stable_rank"])
    with chromium(tmp_path, 1400, 900) as tab:
        errors = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(path.as_uri())
        tab.wait_for_selector("body[data-ready=true]", timeout=30_000)
        options = tab.locator("#toolkit-metric option").evaluate_all("os => os.map(o => [o.value, o.text])")
        assert options == [["frobenius_norm", ds["frobenius_norm"].attrs["long_name"]],
                           ["stable_rank", ds["stable_rank"].attrs["long_name"]]]
        assert "keep_spectra=True" in tab.locator("#toolkit-heatmap .toolkit-heatmap-info").inner_text()
        tab.locator('#toolkit-heatmap rect.cell[data-r="3"][data-c="5"]').click()
        tab.wait_for_function("document.querySelector('#toolkit-drilldown').innerText.includes('keep_spectra')")
        note = tab.locator("#toolkit-drilldown").inner_text()
        assert "layer 3, mlp.down" in note and "no drill-down spectra" in note, note
        assert "panel" not in note and "row" not in note, note
    assert not errors, errors


def test_the_page_shows_scales_inside_the_metrics_bounds(tmp_path):
    """Issue 45, item 2, in the browser: a constant update sparsity (1 everywhere) is one colour with the one
    tick "constant: 1", never a bar up to 1.1; an overlap drawn around its centre 0.8 (values 0.2 .. 0.9) stops
    at 1, a fraction's maximum, instead of running to 1.4."""
    import numpy as np
    import xarray as xr

    rng = np.random.default_rng(0)
    overlap = rng.uniform(0.2, 0.9, (4, 2))
    overlap[0, 0], overlap[0, 1] = 0.2, 0.9
    dims = ("layer", "component")
    ds = xr.Dataset({"update_sparsity": (dims, np.ones((4, 2)), {"long_name": "update sparsity", "units": "1"}),
                     "subspace_overlap": (dims, overlap, {"long_name": "subspace overlap", "units": "1",
                                                          "natural_center": 0.8})},
                    coords={"layer": range(4), "component": ["attn.q", "attn.k"]})
    path = export_html(ds, tmp_path / "bounded.html")
    spec = _embedded(path)["heatmaps"]
    bar = spec["update_sparsity"]["panels"][0]["cbar"]
    assert bar["constant"] and len(bar["colors"]) == 1 and bar["ticks"] == [[0.5, "constant: 1"]]
    overlap_bar = spec["subspace_overlap"]["panels"][0]["cbar"]
    ticks = [t for _, t in overlap_bar["ticks"]]  # the low end: the 2nd percentile, about 0.2
    assert ticks[2:] == ["0.8", "0.9", "1"] and float(ticks[0]) < 0.21  # 0.8 + (0.8 - 0.2) would be 1.4
    with chromium(tmp_path, 1200, 800) as tab:
        tab.goto(path.as_uri())
        tab.wait_for_selector("body[data-ready=true]", timeout=30_000)
        tab.select_option("#toolkit-metric", "update_sparsity")
        tab.wait_for_function("document.querySelector('#toolkit-heatmap').textContent.includes('update sparsity')")
        constant = tab.locator("#toolkit-heatmap text.toolkit-cbar-tick").all_text_contents()
        stops = tab.locator("#toolkit-heatmap .toolkit-cbar stop").count()
        swatch = tab.locator("#toolkit-heatmap rect.toolkit-cbar-swatch").get_attribute("fill")
        assert constant == ["constant: 1"] and stops == 0 and swatch == bar["colors"][0], (constant, stops, swatch)
        tab.select_option("#toolkit-metric", "subspace_overlap")
        tab.wait_for_function("document.querySelector('#toolkit-heatmap').textContent.includes('subspace overlap')")
        shown = tab.locator("#toolkit-heatmap text.toolkit-cbar-tick").all_text_contents()
        assert shown == ticks, shown
        label = " ".join(tab.locator("#toolkit-heatmap text.toolkit-cbar-label").all_text_contents())
        assert "white = 0.8" in label, label
        tab.screenshot(path=str(tmp_path / "bounded.png"))
