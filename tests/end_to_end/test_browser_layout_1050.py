"""The heatmap at 1050 px (issue 45, item 5: JupyterLab with its file browser open leaves the widget about that
wide), on the exported page in headless Chromium: the shared colour bar stays right of the panels however they
wrap, no label of any colour bar is cut by its svg (they were cut to "relative w"), and a constant panel's bar is
one swatch, not a gradient that looks like a range."""

from __future__ import annotations

from dataclasses import replace

from _browser import MARKS, chromium
from _stats_data import make_stats
from toolkit.plot import prepare_heatmap
from toolkit.widgets import heatmap_spec
from toolkit.widgets.export import _page, page_data

pytestmark = MARKS

LABEL = "relative change of the weights, relative to the first step"

GEOMETRY = """() => {
  const box = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const root = document.querySelector('#toolkit-heatmap');
  return {
    panels: [...root.querySelectorAll('svg.toolkit-heatmap-panel')].map(box),
    shared: [...root.querySelectorAll('svg.toolkit-heatmap-shared-cbar')].map(box),
    // every colour-bar text with the box of the svg that draws it
    texts: [...root.querySelectorAll('g.toolkit-cbar text')].map(t => ({text: t.textContent, box: box(t),
                                                                        svg: box(t.ownerSVGElement)})),
    bars: [...root.querySelectorAll('g.toolkit-cbar')].map(g => ({
      gradients: g.querySelectorAll('linearGradient').length, swatch: g.querySelectorAll('.toolkit-cbar-swatch').length,
      ticks: [...g.querySelectorAll('.toolkit-cbar-tick')].map(t => t.textContent)})),
    ids: [...root.querySelectorAll('[id]')].map(e => e.id),
  };
}"""


def _series() -> tuple:
    """Seven steps of a 28-layer model with a long label, and three panels on their own scales, the first of
    one value (an update sparsity of 1 everywhere, as at step 0)."""
    ds = make_stats(28, checkpoints=7)
    ds["stable_rank"] = ds["stable_rank"] * ds["step"].clip(min=500) / 2000
    ds["stable_rank"].attrs["long_name"] = LABEL
    steps = [ds.isel(checkpoint=i) for i in (0, 3, 6)]
    first = steps[0].copy()
    first["stable_rank"] = first["stable_rank"] * 0 + 1.0
    prepared = [prepare_heatmap(d, "stable_rank") for d in (first, *steps[1:])]
    prepared = [replace(p, title=f"step {k}: {p.title}") for k, p in enumerate(prepared)]
    hovers = [[["cell"] * len(p.cols) for _ in p.rows] for p in prepared]
    return ds, heatmap_spec.spec(prepared, hovers, shared=False)


def _inside(inner, outer, slack=1.0) -> bool:
    return (inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack and inner[2] <= outer[2] + slack
            and inner[3] <= outer[3] + slack)


def test_colour_bars_at_1050_px_stay_right_of_the_panels_whole_and_one_swatch_when_constant(tmp_path):
    ds, separate = _series()
    page = page_data(ds, metrics=["stable_rank"])
    page["metrics"].append("separate")
    page["labels"].append("separate")
    page["heatmaps"]["separate"] = separate
    path = tmp_path / "layout.html"
    path.write_text(_page(page, "layout"), encoding="utf-8")
    assert separate["panels"][0]["cbar"]["constant"] and not separate["panels"][1]["cbar"]["constant"]
    with chromium(tmp_path, 1050, 1000) as tab:
        errors = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(path.as_uri())
        tab.wait_for_selector("body[data-ready=true]", timeout=30_000)
        tab.wait_for_timeout(300)
        shared = tab.evaluate(GEOMETRY)
        tab.select_option("#toolkit-metric", "separate")
        tab.wait_for_function("document.querySelectorAll('#toolkit-heatmap g.toolkit-cbar').length === 3")
        tab.wait_for_timeout(300)
        own = tab.evaluate(GEOMETRY)
        tab.screenshot(path=str(tmp_path / "layout-1050.png"))
    assert not errors, errors
    # seven panels on one scale: they wrap into rows, the one bar in a column right of every one of them
    assert len(shared["panels"]) == 7 and len(shared["shared"]) == 1
    assert len({round(p[1]) for p in shared["panels"]}) > 1  # wrapped (it was the bar that dropped below)
    bar = shared["shared"][0]
    assert bar[0] >= max(p[2] for p in shared["panels"]) - 1, (bar, shared["panels"])
    assert bar[1] < shared["panels"][0][3]  # beside the first row, not under the last
    assert bar[2] <= 1050
    for geo in (shared, own):  # every tick and every line of every label inside the svg that draws it
        assert geo["texts"], geo
        cut = [t["text"] for t in geo["texts"] if not _inside(t["box"], t["svg"])]
        assert not cut, cut
        assert len(geo["ids"]) == len(set(geo["ids"]))  # one gradient (clip, hatch) id per bar and panel
    label = " ".join(t["text"] for t in shared["texts"] if not any(c.isdigit() for c in t["text"][:1]))
    assert "relative to the first step" in label
    constant, *ranged = own["bars"]
    assert constant == {"gradients": 0, "swatch": 1, "ticks": ["constant: 1"]}
    assert all(b["gradients"] == 1 and b["swatch"] == 0 and len(b["ticks"]) >= 3 for b in ranged), ranged
