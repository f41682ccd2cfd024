"""An ipywidgets panel over one or several statistics Datasets.

The panel only chooses what to draw; the numbers come from the Datasets, the
prepared panels from :func:`toolkit.plot.prepare_heatmap` (the function the
saved figures and the CLI use) and the colours from
:meth:`toolkit.plot.HeatmapData.face_colors`. The browser draws them
(:class:`~toolkit.widgets.heatmap_view.HeatmapView`): tooltips, box and wheel
zoom, pan, arrow keys and a selected cell need no kernel round trip, and a
change of control is one message, not a re-rendered PNG. Opening a cell
(click or Enter) draws its drill-down beside the heatmap (ESD with the fit,
singular values, entries: :class:`~toolkit.widgets.chart_view.ChartView`).
matplotlib still draws every saved figure (PNG, SVG, PDF) and the static
image a notebook keeps for viewers without widgets.
"""

from __future__ import annotations

import base64
import html
import re
import threading
from contextlib import contextmanager
from pathlib import Path

import ipywidgets as W

from toolkit.errors import EmptyInputError, ToolkitError, UnknownMetricError
from toolkit.plot._select import COL_DIMS, ROW_DIM, column_dim, metric_names
from toolkit.widgets import _controls as C
from toolkit.widgets import heatmap_spec
from toolkit.widgets._cell_side import CellSide
from toolkit.widgets._saving import Saving
from toolkit.widgets._views import Views, absent_components, models_of
from toolkit.widgets.cells import COMBINATIONS, PanelFacts
from toolkit.widgets.chart_view import ChartView
from toolkit.widgets.figures import figure_bytes, file_stem
from toolkit.widgets.fit_choice import FitChoice
from toolkit.widgets.heatmap_view import HeatmapView


def figure_png(prepared: list, *, annotate=False, dpi=100):
    """The panels as PNG bytes and their axes' boxes (see :func:`toolkit.widgets.figures.figure_bytes`)."""
    return figure_bytes(prepared, "png", annotate=annotate, dpi=dpi)


class Explorer(CellSide, Saving, Views):
    """Interactive heatmap panel; build it with :func:`explore`.

    Attributes
    ----------
    ds : xarray.Dataset
        The (first) statistics shown (never modified); ``models`` holds all of them.
    models : list of (str, xarray.Dataset)
    widget : ipywidgets.VBox
        The whole panel.
    controls : dict of str -> ipywidgets.Widget
        ``metric``, ``scale`` (auto / linear / log / diverging), ``robust``
        (checkbox "robust colour limits"), ``vmin`` / ``vmax`` (text boxes,
        empty = automatic), ``layers``, ``annotate``, ``filename``, ``format``
        (png / svg / pdf), ``save_figure``, ``save_csv``, ``save_netcdf``, ``save_html``,
        ``rank`` (top cells: highest / lowest), one selector per extra
        dimension (named after it: ``checkpoint``, ``head``, ``expert`` ...;
        ``expert`` / ``head`` also offer mean / max / min), ``components``
        (dict component -> ToggleButton, for the components some model has);
        with (layer, component, X) metrics ``columns`` (``component`` or X)
        and ``component`` (the one component of a (layer, X) heatmap); with
        two or more models (or checkpoints) ``view`` (one / side / difference
        / ratio), ``base``, ``target`` and ``range`` (separate / shared colour
        scale).
    view : HeatmapView
        The heatmap in the browser, with its hover texts, zoom and selected cell.
    drill : ChartView
        The opened cell's drill-down beside the heatmap.
    message : str
        Why nothing is drawn ("" while a figure is shown); shown in ``message_box``.
    limits_note : ipywidgets.HTML
        Why a typed colour limit is not used ("abc" is not a number, min above max).
    current : toolkit.plot.HeatmapData or None
        The prepared data of the (first) panel shown; None while a message is shown.
    prepared : list of toolkit.plot.HeatmapData
        All panels shown.
    cell : toolkit.widgets.drilldown.DrillDown or None
        The drill-down shown (:meth:`show_cell`); None when none is.
    renders : int
        Number of figures drawn so far.
    absent : list of str
        Components none of the models has (no toggle; their hatched column says why).
    pending : bool
        A pass is still measuring (the live view): empty cells read "not measured yet".
    fit_choice : toolkit.widgets.fit_choice.FitChoice
        The "fit" menu (``controls["fit"]``): ``fix_fingers`` / ``xmax``, refitted from stored spectra.
    """

    def __init__(self, data, metric=None, *, out_dir=".", dpi=100, root=None, labels=None, read_entries=True,
                 absent=None, pending=False, fit=None):
        self.fit_choice = FitChoice(models_of(data, labels), fit)
        self.models = self.fit_choice.models
        self.ds = ds = self.models[0][1]
        names = [n for n in metric_names(ds) if all(n in m for _, m in self.models[1:])]
        if not names:
            raise EmptyInputError(f"no metric with a 'layer' and a {' / '.join(map(repr, COL_DIMS))} dimension "
                                  f"in {list(ds.data_vars)}" + (" shared by every model" if self.models[1:] else ""))
        if metric is not None and metric not in names:
            raise UnknownMetricError(str(metric), names)
        self.out_dir, self.dpi, self.read_entries = Path(out_dir), dpi, read_entries
        self.current, self.prepared, self.panels, self.facts = None, [], [], []
        self.renders, self.message, self.cell, self._matrices = 0, "", None, {}
        self._png_cache: tuple = (-1, b"")
        self._lock, self._dirty, self._hold_depth = threading.Lock(), False, 0
        self.pending = pending  # a pass is still measuring: empty cells are "not measured yet"
        self._init_cells()
        self.entries = self._entries()
        c = self.controls = {}
        c["metric"] = W.Dropdown(options=C.metric_options(ds, names),
                                 value=metric or names[0], description="metric", style=C.WIDE,
                                 layout=W.Layout(width="max-content", min_width="16em"))
        c["fit"] = self.fit_choice.dropdown
        self.fit_choice.on_change(self._set_models)
        dims = C.selector_dims(ds, names)
        for d in dims:
            c[d] = W.Dropdown(options=C.dim_options(ds, d), description=d, style=C.WIDE,
                              layout=W.Layout(width="max-content"))
        comps = [str(x) for x in ds["component"].values] if "component" in ds.coords else []
        self.absent = absent_components([m for _, m in self.models], comps) if absent is None else \
            [c for c in comps if c in absent]
        col_choices = C.column_choices(ds, names)
        if len(col_choices) > 1:
            c["columns"] = W.Dropdown(options=col_choices, value="component", description="columns", style=C.WIDE)
            c["component"] = W.Dropdown(options=comps, description="component", style=C.WIDE)
        if len(self.entries) > 1:
            one = len(self.models) == 1
            c["view"] = W.ToggleButtons(options=C.VIEW_OPTIONS if one else C.VIEW_OPTIONS[1:],
                                        value="one" if one else "side", style={"button_width": "auto"})
            choices = [(lab, i) for i, (lab, _, _) in enumerate(self.entries)]
            base = self._default_base(names[0] if metric is None else metric)
            c["base"] = W.Dropdown(options=choices, value=base, description="base", style=C.WIDE,
                                   layout=W.Layout(width="max-content"))
            c["target"] = W.Dropdown(options=choices, value=len(choices) - 1, description="target", style=C.WIDE,
                                     layout=W.Layout(width="max-content"))
            c["range"] = W.ToggleButtons(options=(("shared", "shared"), ("separate", "separate")),
                                         value="shared", style={"button_width": "auto"},
                                         tooltips=["one colour scale for every panel: one colour, one value",
                                                   "each panel its own colour range"])
        c["scale"] = W.ToggleButtons(options=C.SCALE_OPTIONS, value="auto", style={"button_width": "auto"},
                                     tooltip=C.SCALE_TOOLTIP)
        c["robust"] = W.Checkbox(value=True, description="robust colour limits", indent=False,
                                 tooltip=C.ROBUST_TOOLTIP, layout=W.Layout(width="auto"))
        c["vmin"] = W.Text(value="", placeholder="auto", description="min", style=C.WIDE,
                           layout=W.Layout(width="9em"), continuous_update=False)
        c["vmax"] = W.Text(value="", placeholder="auto", description="max", style=C.WIDE,
                           layout=W.Layout(width="9em"), continuous_update=False)
        lo = min(int(m[ROW_DIM].min()) for _, m in self.models)
        hi = max(int(m[ROW_DIM].max()) for _, m in self.models)
        c["layers"] = W.IntRangeSlider(value=(lo, hi), min=lo, max=hi, description="layers",
                                       continuous_update=False, style=C.WIDE)
        c["components"] = {k: W.ToggleButton(value=True, description=k.replace(".", ". "),
                                             layout=W.Layout(width="auto")) for k in comps if k not in self.absent}
        c["annotate"] = W.Checkbox(value=False, description="values in cells (saved figures)", indent=False,
                                   layout=W.Layout(width="auto"))
        c["rank"] = W.ToggleButtons(options=(("highest", "highest"), ("lowest", "lowest")), value="highest",
                                    style={"button_width": "auto"})
        stem = file_stem(*(re.sub(r"\.(gguf|safetensors|bin|pt|pth)$", "", lab) for lab, _ in self.models[:2]))
        c["filename"] = W.Text(value=stem, description="file name", style=C.WIDE,
                               layout=W.Layout(width="max-content", min_width="22em"))
        c["format"] = W.Dropdown(options=[("PNG", "png"), ("SVG", "svg"), ("PDF", "pdf")], value="png",
                                 layout=W.Layout(width="6em"))
        c["save_figure"] = C.button("Save figure", "image", "the figure shown, in the format chosen")
        c["save_csv"] = C.button("Save numbers (CSV)", "table", "the numbers of the panels shown, one line per cell")
        c["save_netcdf"] = C.button("Save data (NetCDF)", "save", "the whole Dataset, with its metadata")
        c["save_html"] = C.button("Export HTML", "globe", "the explorer as one HTML file that works offline, "
                                  "without a kernel: every metric, hover, zoom and the stored spectra")
        self.status = W.HTML()
        self.limits_note = W.HTML()
        self.message_box = W.HTML(layout=W.Layout(display="none"))
        self.message_box.add_class("toolkit-explorer-message")
        self.view = HeatmapView(on_open=self._opened)
        self.view.add_class("toolkit-explorer-figure")
        self.drill = ChartView()
        self.top = W.HTML()
        self.cell_text = W.HTML()
        self._wire(dims)
        self.widget = root if root is not None else W.VBox()
        self.widget.children = self._layout(dims)
        self._eager_cell = None
        with self.hold():
            self._sync_enabled()
            self._dirty = True

    def _wire(self, dims):
        c = self.controls
        for key, w in c.items():
            if key == "components":
                for t in w.values():
                    t.observe(self._on_change, names="value")
            elif key == "rank":
                w.observe(lambda _: self._show_top(), names="value")
            elif key not in ("filename", "format", "save_figure", "save_csv", "save_netcdf", "save_html", "annotate",
                             "fit"):
                w.observe(self._on_metric if key in ("metric", "columns", "view") else self._on_change, names="value")
        c["save_figure"].on_click(lambda _: self._report(self.save_figure))
        c["save_csv"].on_click(lambda _: self._report(self.save_csv))
        c["save_netcdf"].on_click(lambda _: self._report(self.save_netcdf))
        c["save_html"].on_click(lambda _: self._report(self.save_html))

    def _layout(self, dims):
        c = self.controls
        first = [c["metric"], *(c[d] for d in dims), c["fit"]]
        first += [c["columns"], c["component"]] if "columns" in c else []
        rows = [W.HBox(first, layout=W.Layout(flex_flow="row wrap"))]
        if "view" in c:
            rows.append(W.HBox([C.labelled("view", c["view"]), c["base"], c["target"],
                                C.labelled("colour range", c["range"])], layout=W.Layout(flex_flow="row wrap")))
        toggles = list(c["components"].values())
        if self.absent:
            toggles.append(W.HTML(f"<small>no {', '.join(map(html.escape, self.absent))} in "
                                  f"{'these models' if len(self.models) > 1 else 'this model'} (hatched)</small>"))
        rows += [W.HBox([C.labelled("colour", c["scale"], C.SCALE_TOOLTIP), c["robust"]],
                        layout=W.Layout(flex_flow="row wrap", align_items="center")),
                 W.HBox([W.Label("colour limits"), c["vmin"], c["vmax"], self.limits_note],
                        layout=W.Layout(align_items="center", flex_flow="row wrap")),
                 c["layers"], W.HBox(toggles, layout=W.Layout(flex_flow="row wrap", align_items="center"))]
        side = W.VBox([self.cell_text, self.drill, C.labelled("top cells", c["rank"]), self.top])
        side.add_class("toolkit-explorer-side")
        main = W.HBox([self.view, side])
        main.add_class("toolkit-explorer-main")
        wrap = W.Box([main])  # beside the heatmap, stacked only where narrow (js/widgets.css)
        wrap.add_class("toolkit-explorer-wrap")
        rows += [self.message_box, wrap,
                 W.HBox([c["filename"], c["format"], c["annotate"], c["save_figure"], c["save_csv"],
                         c["save_netcdf"], c["save_html"]],
                        layout=W.Layout(flex_flow="row wrap", align_items="center")),
                 self.status]
        return rows

    # -- what to draw -------------------------------------------------------
    def _columns(self) -> str:
        return self.controls["columns"].value if "columns" in self.controls else "component"

    def _view(self) -> str:
        return self.controls["view"].value if "view" in self.controls else "one"

    def _limits(self):
        """``(vmin, vmax)`` typed in the boxes (None: automatic); one that cannot be used is left out and
        ``limits_note`` says why, so the figure stays (with automatic limits) instead of a message."""
        out, notes = [], []
        for key in ("vmin", "vmax"):
            text = self.controls[key].value.strip()
            try:
                out.append(float(text) if text else None)
            except ValueError:
                out.append(None)
                notes.append(f"{key[1:]} {text!r} is not a number")
        lo, hi = out
        if lo is not None and hi is not None and not lo < hi:
            notes.append(f"min {lo:g} is not below max {hi:g}")
            lo = hi = None
        self.limits_note.value = ("<span style='color:#b34d00'>" + html.escape("; ".join(notes))
                                  + ": automatic limits used</span>") if notes else ""
        return lo, hi

    def selection(self) -> dict:
        """Keyword arguments of :func:`toolkit.plot.prepare_heatmap` for the current controls (first panel)."""
        c = self.controls
        var = self.ds[c["metric"].value]
        cols = self._columns()
        col_dim = cols if cols in var.dims else column_dim(var.dims)
        kws = {d: c[d].value for d in var.dims if d in c and d not in (col_dim, "component") and d != ROW_DIM}
        if col_dim != column_dim(var.dims):
            kws["component"] = c["component"].value  # a (layer, X) heatmap of one component
        comps = None
        if col_dim == "component" and "component" in var.dims:
            comps = [k for k in (str(x) for x in var["component"].values)
                     if k in self.absent or (k in c["components"] and c["components"][k].value)]
        vmin, vmax = self._limits()
        return dict(metric=c["metric"].value, scale=c["scale"].value, robust=c["robust"].value,
                    layers=tuple(c["layers"].value), components=comps, vmin=vmin, vmax=vmax, **kws)

    def _sync_enabled(self):
        c = self.controls
        var = self.ds[c["metric"].value]
        cols = self._columns()
        col_dim = cols if cols in var.dims else column_dim(var.dims)
        combining = self._view() != "one" and len(self.models) == 1
        for d in C.selector_dims(self.ds, [k for _, k in c["metric"].options]):
            c[d].disabled = d not in var.dims or d == col_dim or (d == "checkpoint" and combining)
        if "columns" in c:
            c["columns"].disabled = not any(x in var.dims for x in c["columns"].options[1:])
            c["component"].disabled = col_dim == "component"
        for t in c["components"].values():
            t.disabled = col_dim != "component"
        if "view" in c:
            c["base"].disabled = c["target"].disabled = self._view() not in COMBINATIONS
            c["range"].disabled = self._view() != "side"

    # -- rendering ------------------------------------------------------------
    @contextmanager
    def hold(self):
        """Change several controls and render once at the end."""
        self._hold_depth += 1
        try:
            yield self
        finally:
            self._hold_depth -= 1
            if self._hold_depth == 0 and self._dirty:
                self.render()

    def _on_metric(self, _change):
        with self.hold():
            self._sync_enabled()
            self._dirty = True

    def _on_change(self, _change):
        self._dirty = True
        if not self._hold_depth:
            self.render()

    def render(self):
        """Redraw from the controls.

        A change made while a render runs (another thread, or a control set
        from inside a render) marks the panel dirty; the running render loops
        and draws again, so the view never keeps a stale figure.
        """
        self._dirty = True
        while self._dirty:
            if not self._lock.acquire(blocking=False):
                return  # the render in progress will see _dirty and draw again
            try:
                while self._dirty:
                    self._dirty = False
                    self._render_once()
            finally:
                self._lock.release()

    def _render_once(self):
        try:
            metric, panels, prepared, shared = self._prepare_all()
            facts = [PanelFacts(p, q, metric, pending=self.pending) for p, q in zip(panels, prepared, strict=True)]
            spec = heatmap_spec.spec(prepared, [f.grid() for f in facts], shared=shared, hint=self._hint(panels))
        except (ToolkitError, ValueError) as err:
            self._show_message(f"Nothing to draw for this selection: {err}")
            return
        if self._dirty:  # the controls changed while preparing: this figure is already stale
            return
        self.facts = facts
        self.view.show(spec)
        self.view.layout.display = ""
        self.message_box.value, self.message_box.layout.display = "", "none"
        self.current, self.prepared, self.panels, self.message = prepared[0], prepared, panels, ""
        self.renders += 1
        self._follow_cell()
        self._show_top()

    def _show_message(self, text: str) -> None:
        """Nothing to draw: the message (wrapped between words) instead of the figure, and no drill-down
        of a cell that is no longer shown."""
        self.current, self.prepared, self.message = None, [], text
        self.message_box.value = f"<div class='toolkit-explorer-message'>{html.escape(text)}</div>"
        self.message_box.layout.display = ""
        self.view.layout.display = "none"
        self.top.value = ""
        self._clear_cell()

    # -- display --------------------------------------------------------------
    def figure_png(self) -> bytes:
        """PNG of the panels shown, drawn by matplotlib (what a saved notebook keeps; cached per render)."""
        if not self.prepared:
            return b""
        key = (self.renders, self.controls["annotate"].value)
        if self._png_cache[0] != key:
            png, _ = figure_png(self.prepared, annotate=key[1], dpi=self.dpi)
            self._png_cache = (key, png)
        return self._png_cache[1]

    def _repr_mimebundle_(self, **kwargs):
        """The live panel, plus a PNG of the current figure for viewers without widgets."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self.prepared:
            bundle["image/png"] = base64.b64encode(self.figure_png()).decode("ascii")
        bundle["text/plain"] = f"Explorer({self.current.title if self.current else self.message!r})"
        return bundle

    def _ipython_display_(self):
        from IPython import get_ipython
        from IPython.display import display

        ip = get_ipython()
        if self._eager_cell is not None and ip is not None and ip.execution_count == self._eager_cell:
            return  # explore_model already put this panel on screen in this cell
        display(self._repr_mimebundle_(), raw=True)
