"""The heatmap's browser parts, one job each (issue 45: ``render()`` was one 425-line closure), their pure
functions run under node: the keys, the colour bar, a panel's svg, the tooltip's and the info line's texts."""

from __future__ import annotations

import json

from tests._node import needs_node, run_js


def _js(expr: str, module: str = "heatmap.js"):
    return run_js(f"console.log(JSON.stringify({expr}));", module=module)


def _panels(n=2, rows=8, cols=3):
    return [{"rows": [str(r) for r in range(rows)], "cols": [f"c{c}" for c in range(cols)],
             "hover": [[f"p{k} r{r} c{c}\nvalue {r * cols + c}" for c in range(cols)] for r in range(rows)]}
            for k in range(n)]


@needs_node
def test_keys_move_the_selection_across_panels_and_clamp_it_alone_in_its_module():
    ps, wins = json.dumps(_panels()), json.dumps([[2, 6, 0, 3], [0, 8, 0, 3]])

    def act(key, sel):
        return _js(f"keyAction({json.dumps(key)}, {json.dumps(sel)}, {ps}, {wins})", module="heatmap_keys.js")

    assert act("ArrowRight", [0, 3, 2]) == {"kind": "select", "k": 1, "row": 3, "col": 0, "open": False}
    assert act("ArrowLeft", [1, 3, 0]) == {"kind": "select", "k": 0, "row": 3, "col": 2, "open": False}
    assert act("ArrowLeft", [0, 3, 0]) == {"kind": "select", "k": 0, "row": 3, "col": 0, "open": False}
    assert act("PageUp", [0, 6, 1])["row"] == 7 and act("PageDown", [0, 2, 1])["row"] == 0  # clamped
    assert act("End", [1, 4, 0])["col"] == 2 and act("Home", [1, 4, 2])["col"] == 0
    assert act("Enter", [1, 4, 2]) == {"kind": "select", "k": 1, "row": 4, "col": 2, "open": True}
    assert act("-", [1, 4, 2]) == {"kind": "zoom", "k": 1, "row": 4, "col": 2, "factor": 1.25}
    # nothing selected: the first panel's window decides (its first cell; zoom about its middle)
    assert act("ArrowUp", []) == {"kind": "select", "k": 0, "row": 2, "col": 0, "open": False}
    assert act("+", []) == {"kind": "zoom", "k": 0, "row": 4, "col": 1, "factor": 0.8}
    assert act("0", [0, 1, 1]) == {"kind": "reset"} and act("Escape", [0, 1, 1]) == {"kind": "clear"}
    assert act("a", [0, 1, 1]) is None
    assert _js(f"keyAction('ArrowUp', [], [], {wins})", module="heatmap_keys.js") is None


@needs_node
def test_a_constant_bar_is_one_swatch_and_a_ranged_one_a_gradient_with_its_own_id():
    ranged = {"colors": ["#0000ff", "#ffffff", "#ff8000"], "ticks": [[0, "0"], [0.5, "1"], [1, "2"]],
              "label": "relative change", "extend": "max"}
    constant = {"colors": ["#fff7ec"], "ticks": [[0.5, "constant: 1"]], "label": "update sparsity",
                "extend": "neither", "constant": True}
    svg = _js(f"colorbarSvg({json.dumps(ranged)}, 10, 20, 180, 'tkX-grad3')", module="heatmap_colorbar.js")
    assert svg.count("<stop ") == 3 and 'id="tkX-grad3"' in svg and 'fill="url(#tkX-grad3)"' in svg
    assert svg.count("toolkit-cbar-tick") == 3 and svg.count("toolkit-cbar-extend") == 1
    one = _js(f"colorbarSvg({json.dumps(constant)}, 10, 20, 180, 'tkX-grad4')", module="heatmap_colorbar.js")
    assert "<stop" not in one and "linearGradient" not in one
    assert 'class="toolkit-cbar-swatch" x="10" y="96.0" width="14" height="28" fill="#fff7ec"' in one
    assert '<text x="31.0" y="114.0" class="toolkit-cbar-tick" font-size="11">constant: 1</text>' in one  # at 0.5


@needs_node
def test_a_panel_draws_its_window_its_selection_and_ids_of_its_own():
    p = {**_panels(1)[0], "colors": [["#111111", None, "#333333"]] * 8, "xlabel": "", "title": "t", "cbar": None,
         "marks": None}
    got = _js(f"(() => {{ const p = {json.dumps(p)}; const g = panelGeometry(p, 90, 66);"
              "const s = panelSvg(p, 1, g, [2, 6, 1, 3], [1, 3, 2], 'tkX');"
              "const n = (re) => (s.match(re) || []).length;"
              "return {g, cells: n(/class=\"cell/g), nan: n(/class=\"cell nan/g),"
              "selected: /class=\"toolkit-selected\" data-r=\"3\" data-c=\"2\"/.test(s),"
              "hatch: s.includes('id=\"tkX-hatch1\"') && s.includes('url(#tkX-hatch1)'),"
              "clip: s.includes('id=\"tkX-clip1\"')}; })()")
    assert got["cells"] == 4 * 2 and got["nan"] == 4  # rows 2..5, columns 1..2; column 1 has no value
    assert got["selected"] and got["hatch"] and got["clip"]
    g = got["g"]
    assert (g["W"], g["H"], g["ml"], g["width"], g["r0"], g["c1"], g["rh"], g["cw"]) == (90, 200, 52, 156, 2, 3, 50, 45)
    assert g["height"] == g["mt"] + 200 + g["mb"]
    assert _js("labelledRows([...Array(28).keys()].map(String), 0, 28, 4)", module="heatmap_panel.js") == \
        [0, 4, 8, 12, 16, 20, 24, 27]


@needs_node
def test_the_tooltip_and_the_info_line_read_the_cells_hover_text():
    spec = json.dumps({"panels": _panels(), "hint": "hover a cell"})
    assert _js(f"infoText({spec}, [1, 2, 0])") == {"text": "p1 r2 c0  ·  value 6", "selected": "1,2,0"}
    assert _js(f"infoText({spec}, [])") == {"text": "hover a cell", "selected": ""}
    assert _js(f"infoText({spec}, [5, 2, 0])") == {"text": "hover a cell", "selected": ""}  # no such panel
    assert _js(f"hoverText({spec}.panels, 0, 9, 0)") is None
    assert _js("openMessage(1, 2, 0)") == {"event": "open", "panel": 1, "row": 2, "col": 0}
