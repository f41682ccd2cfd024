"""The page's heatmap arithmetic, run under node in seconds (issue 36, item 3): panel widths that keep a
row of panels and their colour bars inside the width they are given, colour bars as wide as their labels."""

from __future__ import annotations

import json

from tests._node import needs_node, run_js


def _panel(cbar_label="Stable rank (dimensionless)\nlinear scale", ticks=("0.02", "0.020005", "0.02001")):
    cbar = {"label": cbar_label, "ticks": [[i / 2, t] for i, t in enumerate(ticks)]}
    return {"rows": [str(i) for i in range(28)], "cols": ["attn. q"] * 7, "cbar": cbar}


def _widths(panels, shared, avail):
    return run_js(f"console.log(JSON.stringify(panelWidths({json.dumps(panels)}, {json.dumps(shared)}, {avail})));",
                  module="heatmap.js")


@needs_node
def test_three_panels_with_their_colour_bars_fit_a_1050_px_explorer_row():
    panels = [_panel() for _ in range(3)]
    got = _widths(panels, None, 700)  # 1050 px less the side panel: was one panel too wide, so it wrapped
    assert got["total"] > 700
    assert sum(got["W"]) + sum(got["chrome"]) + 30 <= 700 or got["minTotal"] > 700
    assert all(w >= 60 for w in got["W"])
    assert got["minTotal"] > 700  # too narrow for three colour bars: the figure asks for the whole row
    wide = _widths(panels, None, 1000)  # the whole row: one line of panels
    assert sum(wide["W"]) + sum(wide["chrome"]) + 30 <= 1000
    shared = _widths([{**p, "cbar": None} for p in panels], panels[0]["cbar"], 700)
    assert shared["minTotal"] <= 700 and sum(shared["W"]) + sum(shared["chrome"]) + shared["sharedW"] + 30 <= 700


@needs_node
def test_a_colour_bar_is_as_wide_as_its_labels():
    short = run_js(f"console.log(JSON.stringify(colorbarWidth({json.dumps(_panel(ticks=('1', '2'))['cbar'])})));",
                   module="heatmap.js")
    long = run_js(f"console.log(JSON.stringify(colorbarWidth({json.dumps(_panel()['cbar'])})));", module="heatmap.js")
    # the tick labels (8 characters of 0.020005) and the two label lines fit: they overlapped at a fixed 104 px
    assert long >= 12 + 26 + 8 * 6.3 + 2 * 13 and long > short
