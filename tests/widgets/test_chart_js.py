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
