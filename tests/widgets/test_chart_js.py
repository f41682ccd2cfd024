"""The chart's pure helpers under node: a y label wrapped to its plot's height (the browser test measures it)."""

from tests._node import needs_node, run_js

pytestmark = needs_node


def test_a_long_y_label_takes_lines_that_fit_the_plot_and_keeps_every_word():
    got = run_js("console.log(JSON.stringify([107, 121, 300].map((h) => ["
                 "ylabelLines('largest attention norm per head', h), YLABEL_CHAR_PX])"
                 ".concat([[ylabelLines('test loss (nat)', 107)], [ylabelLines('', 107)]])))", module="chart.js")
    (short, px), (taller, _), (tall, _), (loss,), (empty,) = got
    assert len(short) >= 2 and len(taller) >= 2 and tall == ["largest attention norm per head"]
    for lines, height in ((short, 107), (taller, 121)):
        assert " ".join(lines) == "largest attention norm per head"
        assert all(len(line) * px <= height for line in lines), lines
    assert loss == ["test loss (nat)"] and empty == []


def test_a_tooltip_near_the_bottom_or_right_edge_flips_to_stay_inside_its_box():
    """Notebook 04's bottom row of lab panels: the curve tooltip ran 27 px below `.toolkit-lab-chart`
    (overflow: hidden) and lost its last line; it goes above the pointer there."""
    got = run_js("console.log(JSON.stringify([[100, 100], [100, 690], [590, 100], [590, 690]].map("
                 "([x, y]) => tipPosition(x, y, 180, 58, 700, 706.6))))")
    assert got[0] == {"left": 114, "top": 112}  # room: right of and below the pointer
    assert got[1] == {"left": 114, "top": 690 - 8 - 58}  # bottom: above the pointer
    assert got[2] == {"left": 590 - 10 - 180, "top": 112}  # right edge: left of it
    for at in got:
        assert 0 <= at["left"] and at["left"] + 180 <= 700 and 0 <= at["top"] and at["top"] + 58 <= 706.6
