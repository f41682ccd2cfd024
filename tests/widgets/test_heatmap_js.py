"""The page's heatmap arithmetic, run under node in seconds (issue 36, item 3): panel widths that keep a
row of panels and their colour bars inside the width they are given, colour bars as wide as their labels."""

from __future__ import annotations

import json
from pathlib import Path

from tests._node import needs_node, run_js


def _panel(cbar_label="Stable rank (dimensionless)\nlinear scale", ticks=("0.02", "0.020005", "0.02001")):
    cbar = {"label": cbar_label, "ticks": [[i / 2, t] for i, t in enumerate(ticks)]}
    return {"rows": [str(i) for i in range(28)], "cols": ["attn.q"] * 7, "cbar": cbar}


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


@needs_node
def test_a_long_colour_bar_label_is_wrapped_to_the_bar_and_the_bar_made_wide_enough():
    """Issue 45, item 5: at 1050 px the rotated label ran past its bar and was cut to "relative w"; a pooled
    centre's label is longer still. Each line is wrapped to the bar's height (6.3 px a character: 180 px hold
    28), and the bar's width counts the wrapped lines."""
    label = "relative change of the weights (1)\nwhite = 0.772 (median of step 0, step 2, step 4 pooled)"
    lines = run_js(f"console.log(JSON.stringify(cbarLabelLines({json.dumps(label)}, 180)));", module="heatmap.js")
    assert all(len(line) <= 28 for line in lines) and " ".join(lines).split() == label.split()
    assert len(lines) == 5  # 34 and 55 characters: 2 + 3 lines of at most 28
    tall = run_js(f"console.log(JSON.stringify(cbarLabelLines({json.dumps(label)}, 600)));", module="heatmap.js")
    assert tall == label.split("\n")  # a tall bar keeps the two lines
    cbar = {**_panel()["cbar"], "label": label}
    wide = run_js(f"console.log(JSON.stringify(colorbarWidth({json.dumps(cbar)}, 180)));", module="heatmap.js")
    assert wide >= 12 + 26 + 8 * 6.3 + 5 * 13
    panel = {**_panel(cbar_label=label), "rows": [str(i) for i in range(8)]}  # 8 rows: a 200 px plot
    got = _widths([panel], None, 1050)
    assert got["chrome"][0] == 52 + wide


# ---------------------------------------------------------------- window arithmetic and hit-testing

_PROPERTIES = (Path(__file__).parent / "heatmap_window_properties.js").read_text(encoding="utf-8")


@needs_node
def test_zoom_pan_select_and_box_always_leave_a_valid_window_and_hit_the_cell_under_the_pointer():
    # 4000 random panels and windows: showing a cell moves the window (its size kept) to contain it; zooming in
    # keeps the cell under the pointer and shrinks each axis longer than one cell; zooming out grows it; a pan
    # keeps the size; the centre of a cell hits that cell; a box over cells gives exactly those cells
    assert run_js(_PROPERTIES, module="heatmap.js") == []


@needs_node
def test_zooming_out_step_by_step_reaches_the_whole_panel():
    got = run_js("let w = [10, 12, 3, 4]; let n = 0;"
                 "while ((w[1] - w[0] < 28 || w[3] - w[2] < 7) && n < 100) {"
                 "  w = zoomWindow(w, 11, 3, 1.25, 28, 7); n++; }"
                 "console.log(JSON.stringify([w, n]));", module="heatmap.js")
    assert got[0] == [0, 28, 0, 7] and got[1] < 20


@needs_node
def test_a_plot_keeps_at_least_12_px_a_column_however_narrow_the_row():
    """Issue 45, item 5: plots shrink together to fit their row, but never below MIN_CELL_W (12 px) a column:
    a row too narrow for that wraps its panels (the shared bar stays in its column on the right)."""
    heads = {**_panel(), "cols": [str(h) for h in range(32)]}  # 32 heads: 120 px were 3.75 px a column
    got = _widths([heads, heads], None, 600)
    assert got["W"] == [12 * 32, 12 * 32] and got["minTotal"] > 600
    seven = _widths([_panel() for _ in range(3)], None, 400)
    assert seven["W"] == [98, 98, 98]  # 14 px a column for the seven components, as before
    assert run_js("console.log(JSON.stringify(MIN_CELL_W));", module="heatmap.js") == 12
