"""The heatmap in the browser: zoom, pan, keys, a selected cell, tooltips, clicks back to Python.

An ``anywidget`` (its front end, ``js/heatmap.js``, ships with the package
and loads from the kernel: no build step, no extension, no network). Python
sends a ``spec``: per panel the colour of every cell (the RGBA matplotlib
paints for the saved figure, from :meth:`toolkit.plot.HeatmapData.face_colors`),
its hover text, the labels and the colour bar
(:mod:`toolkit.widgets.heatmap_spec`). The browser draws SVG and does
everything else itself, with no round trip to the kernel: tooltips, box
and wheel zoom, pan, double-click to reset, arrow keys moving the selected
cell (outlined). A click, or Enter, on a cell sends ``{"event": "open",
"panel": k, "row": i, "col": j}``, which draws its drill-down.
"""

from __future__ import annotations

import anywidget
import traitlets

from toolkit.widgets._assets import module, style


class HeatmapView(anywidget.AnyWidget):
    """Heatmap panels drawn in the browser.

    Attributes
    ----------
    spec : dict
        ``panels`` (list of dict: ``title``, ``rows`` (layer labels, row 0 =
        the bottom row), ``cols``, ``colors`` (``colors[row][col]``: ``"#rrggbb"``
        or None where there is no value, drawn hatched), ``hover``
        (``hover[row][col]``), ``xlabel``, ``cbar`` (dict or None)),
        ``shared_cbar`` (one colour bar for every panel, or None) and ``hint``.
    selected : list
        ``[panel, row, col]`` of the outlined cell, or ``[]``; set by the
        browser (click, arrow keys) and by Python.
    windows : list
        Per panel the cells in view, ``[row0, row1, col0, col1]`` (half-open):
        the zoom, set by the browser (box / wheel zoom, pan) and by Python.
    renders : int
        Bumped with every new spec (the browser marks the figure with it).
    """

    _esm = module("heatmap.js")
    _css = style()
    spec = traitlets.Dict({}).tag(sync=True)
    selected = traitlets.List([]).tag(sync=True)
    windows = traitlets.List([]).tag(sync=True)
    renders = traitlets.Int(0).tag(sync=True)

    def __init__(self, on_open=None, **kwargs):
        super().__init__(**kwargs)
        self._on_open = on_open
        self.on_msg(self._handle_message)

    def _handle_message(self, _widget, content, _buffers):
        """A cell opened in the browser: ``{"event": "open", "panel": k, "row": i, "col": j}``."""
        if not isinstance(content, dict) or content.get("event") not in ("open", "click") or self._on_open is None:
            return
        try:
            panel, row, col = (int(content[k]) for k in ("panel", "row", "col"))
        except (KeyError, TypeError, ValueError):
            return
        panels = self.spec.get("panels", [])
        if 0 <= panel < len(panels) and 0 <= row < len(panels[panel]["rows"]) \
                and 0 <= col < len(panels[panel]["cols"]):
            self.selected = [panel, row, col]
            self._on_open(panel, row, col)

    def show(self, spec: dict, *, keep_zoom: bool = True) -> None:
        """Replace the panels in one message to the browser.

        The zoom (``windows``) is kept when every panel keeps its number of rows
        and columns (another metric of the same grid), else reset; a selected
        cell outside the new grid is dropped.
        """
        old = [(len(p["rows"]), len(p["cols"])) for p in self.spec.get("panels", [])]
        new = [(len(p["rows"]), len(p["cols"])) for p in spec.get("panels", [])]
        with self.hold_sync():
            if not (keep_zoom and old == new):
                self.windows = [[0, r, 0, c] for r, c in new]
            if self.selected and not (self.selected[0] < len(new) and self.selected[1] < new[self.selected[0]][0]
                                      and self.selected[2] < new[self.selected[0]][1]):
                self.selected = []
            self.spec = spec
            self.renders += 1

    def zoom(self, panel: int, rows: tuple[int, int], cols: tuple[int, int] | None = None) -> None:
        """Show rows ``rows[0] .. rows[1] - 1`` (and columns) of panel ``panel``, as a box zoom does."""
        panels = self.spec.get("panels", [])
        windows = [list(w) for w in self.windows] or [[0, len(p["rows"]), 0, len(p["cols"])] for p in panels]
        n_cols = len(panels[panel]["cols"])
        windows[panel] = [int(rows[0]), int(rows[1]), *(cols if cols is not None else (0, n_cols))]
        self.windows = windows
