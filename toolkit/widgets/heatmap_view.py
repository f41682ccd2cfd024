"""The heatmap PNG in the browser, with a tooltip per cell and clicks sent back to Python.

An ``anywidget`` (a widget whose front end is a few lines of JavaScript shipped
with it, so it needs no build step and no separate Jupyter extension):
Python sends the figure as a PNG together with, for each panel of it, the
axes' box (fractions of the image) and the hover text of every cell. The
browser finds the cell under the cursor and draws the tooltip itself, with no
round trip to the kernel; a click sends ``(panel, row, col)`` to Python,
which draws that cell's drill-down. The figure stays the seaborn/matplotlib
one, pixel for pixel.
"""

from __future__ import annotations

import anywidget
import traitlets

_ESM = r"""
function render({ model, el }) {
  const wrap = document.createElement("div");
  wrap.className = "toolkit-heatmap";
  const img = document.createElement("img");
  img.className = "toolkit-heatmap-img";
  img.alt = "heatmap";
  const tip = document.createElement("div");
  tip.className = "toolkit-heatmap-tooltip";
  tip.style.display = "none";
  wrap.append(img, tip);
  el.append(wrap);

  const draw = () => {
    const png = model.get("png");
    img.src = png ? "data:image/png;base64," + png : "";
    img.style.display = png ? "" : "none";
    img.title = "";
    wrap.dataset.renders = String(model.get("renders"));
    tip.style.display = "none";
  };
  const locate = (ev) => {
    const r = img.getBoundingClientRect();
    if (!r.width || !r.height) return null;
    const fx = (ev.clientX - r.left) / r.width, fy = (ev.clientY - r.top) / r.height;
    const panels = model.get("panels") || [];
    for (let k = 0; k < panels.length; k++) {
      const p = panels[k];
      const [l, t, rr, b] = p.box;
      if (fx >= l && fx < rr && fy >= t && fy < b) {
        const col = Math.min(p.n_cols - 1, Math.floor(((fx - l) / (rr - l)) * p.n_cols));
        const fromTop = Math.min(p.n_rows - 1, Math.floor(((fy - t) / (b - t)) * p.n_rows));
        return { panel: k, row: p.n_rows - 1 - fromTop, col: col,
                 x: ev.clientX - r.left, y: ev.clientY - r.top, w: r.width, h: r.height };
      }
    }
    return null;
  };
  const onMove = (ev) => {
    const hit = locate(ev);
    if (!hit) { tip.style.display = "none"; return; }
    tip.textContent = model.get("panels")[hit.panel].hover[hit.row][hit.col];
    tip.dataset.panel = String(hit.panel);
    tip.dataset.row = String(hit.row);
    tip.dataset.col = String(hit.col);
    tip.style.display = "block";
    const left = hit.x + 16 + tip.offsetWidth > hit.w ? hit.x - 12 - tip.offsetWidth : hit.x + 16;
    tip.style.left = Math.max(0, left) + "px";
    const top = hit.y + 16 + tip.offsetHeight > hit.h ? hit.y - 12 - tip.offsetHeight : hit.y + 16;
    tip.style.top = Math.max(0, top) + "px";
  };
  const onLeave = () => { tip.style.display = "none"; };
  const onClick = (ev) => {
    const hit = locate(ev);
    if (hit) model.send({ event: "click", panel: hit.panel, row: hit.row, col: hit.col });
  };
  img.addEventListener("mousemove", onMove);
  img.addEventListener("mouseleave", onLeave);
  img.addEventListener("click", onClick);
  model.on("change:png", draw);
  model.on("change:renders", draw);
  draw();
  return () => {
    model.off("change:png", draw);
    model.off("change:renders", draw);
  };
}
export default { render };
"""

_CSS = """
.toolkit-heatmap { position: relative; display: inline-block; line-height: 0; }
.toolkit-heatmap-img { max-width: 100%; height: auto; cursor: crosshair; }
.toolkit-heatmap-tooltip {
  position: absolute; z-index: 20; pointer-events: none; white-space: pre; line-height: 1.35;
  background: rgba(255, 255, 255, 0.96); color: #111; border: 1px solid #999; border-radius: 3px;
  padding: 4px 6px; font: 12px/1.35 ui-monospace, SFMono-Regular, Menlo, monospace;
  box-shadow: 0 1px 4px rgba(0, 0, 0, 0.25);
}
"""


class HeatmapView(anywidget.AnyWidget):
    """A PNG of heatmap panels with per-cell tooltips drawn in the browser.

    Attributes
    ----------
    png : str
        The figure, base64-encoded PNG ("" shows nothing).
    panels : list of dict
        One per heatmap panel of the figure: ``box`` ``[left, top, right,
        bottom]`` of its axes as fractions of the image (top-left origin),
        ``n_rows``, ``n_cols`` and ``hover`` (``hover[row][col]``, row 0 =
        the bottom row, the lowest layer).
    renders : int
        Bumped with every new figure (the browser tests wait on it).
    """

    _esm = _ESM
    _css = _CSS
    png = traitlets.Unicode("").tag(sync=True)
    panels = traitlets.List([]).tag(sync=True)
    renders = traitlets.Int(0).tag(sync=True)

    def __init__(self, on_click=None, **kwargs):
        super().__init__(**kwargs)
        self._on_click = on_click
        self.on_msg(self._handle_message)

    def _handle_message(self, _widget, content, _buffers):
        """A click from the browser: ``{"event": "click", "panel": k, "row": i, "col": j}``."""
        if not isinstance(content, dict) or content.get("event") != "click" or self._on_click is None:
            return
        try:
            panel, row, col = (int(content[k]) for k in ("panel", "row", "col"))
        except (KeyError, TypeError, ValueError):
            return
        if 0 <= panel < len(self.panels):
            p = self.panels[panel]
            if 0 <= row < p["n_rows"] and 0 <= col < p["n_cols"]:
                self._on_click(panel, row, col)

    def show(self, png: str, panels: list) -> None:
        """Replace the figure and its panels in one message to the browser."""
        with self.hold_sync():
            self.panels = panels
            self.png = png
            self.renders += 1
