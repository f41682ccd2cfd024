"""Line and bar panels drawn in the browser: the lab's layer grid and a cell's drill-down.

An ``anywidget`` (front end ``js/chart.js``). Python sends prepared numbers
(:mod:`toolkit.widgets.chart_spec`), the browser draws SVG: a change of the
lab's selection is one message and a redraw of twelve small panels, not
twelve matplotlib panels rendered to PNG. Hovering a panel shows each line's
value at the nearest x, or a bar's range and count.
"""

from __future__ import annotations

import anywidget
import traitlets

from toolkit.widgets._assets import module, style


class ChartView(anywidget.AnyWidget):
    """Small multiples of line / bar panels.

    Attributes
    ----------
    spec : dict
        ``panels`` (each: ``title``, ``xlabel``, ``ylabel``, ``x`` / ``y``
        (``{"log": bool, "lim": [lo, hi] or None}``), ``series`` (dicts of
        ``kind`` "line", "bars", "vline", "hline", "points" with their numbers,
        ``color``, ``dash``, ``label``, ``role``), ``legend``), and ``ncols``,
        ``panel_height``, ``title``, ``legend`` (shared: label, color, dash),
        ``status`` (e.g. "computing…") and ``note``.
    renders : int
        Bumped with every new spec.
    """

    _esm = module("chart.js")
    _css = style()
    spec = traitlets.Dict({}).tag(sync=True)
    renders = traitlets.Int(0).tag(sync=True)

    def show(self, spec: dict) -> None:
        """Replace the panels in one message to the browser."""
        with self.hold_sync():
            self.spec = spec
            self.renders += 1
