"""An ipywidgets panel over one or several statistics Datasets.

The panel only chooses what to draw; the numbers come from the Datasets and the
figure from :func:`toolkit.plot.prepare_heatmap` / :func:`toolkit.plot.draw_heatmap`,
the same functions the CLI uses. The figure is shown by a
:class:`~toolkit.widgets.heatmap_view.HeatmapView` (an anywidget): the same
PNG, plus each cell's hover text, drawn as a tooltip by the browser with no
kernel round trip; a click on a cell draws its drill-down (ESD, singular
values, entries) beside the heatmap.
"""

from __future__ import annotations

import base64
import re
import threading
from contextlib import contextmanager
from pathlib import Path

import ipywidgets as W

from toolkit.errors import EmptyInputError, ToolkitError, UnknownMetricError
from toolkit.plot._select import COL_DIMS, ROW_DIM, column_dim, metric_names
from toolkit.widgets import _controls as C
from toolkit.widgets._cell_side import CellSide
from toolkit.widgets._saving import Saving
from toolkit.widgets._views import Views, models_of
from toolkit.widgets.cells import COMBINATIONS, PanelFacts
from toolkit.widgets.figures import figure_bytes, file_stem, png_size
from toolkit.widgets.heatmap_view import HeatmapView

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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
        ``metric``, ``scale``, ``robust`` (checkbox "robust colour limits"),
        ``vmin`` / ``vmax`` (text boxes, empty = automatic), ``layers``,
        ``annotate``, ``filename``, ``format`` (png / svg / pdf),
        ``save_figure``, ``save_csv``, ``save_netcdf``, ``rank`` (top cells:
        highest / lowest), one selector per extra dimension (named after
        it: ``checkpoint``, ``head``, ``expert`` ...; ``expert`` / ``head``
        also offer mean / max / min), ``components`` (dict component ->
        ToggleButton); with (layer, component, X) metrics ``columns``
        (``component`` or X) and ``component`` (the one component of a
        (layer, X) heatmap); with two or more models (or checkpoints)
        ``view`` (one / side / difference / ratio), ``base``, ``target``
        and ``range`` (separate / shared colour range).
    view : HeatmapView
        The figure in the browser, with its hover texts.
    output : ipywidgets.Output
        Holds exactly one display: the view, or one message.
    current : toolkit.plot.HeatmapData or None
        The prepared data of the (first) panel shown; None while a message is shown.
    prepared : list of toolkit.plot.HeatmapData
        All panels shown.
    cell : toolkit.widgets.drilldown.DrillDown or None
        The last drill-down drawn (:meth:`show_cell`).
    renders : int
        Number of figures drawn so far.
    """

    def __init__(self, data, metric=None, *, out_dir=".", dpi=100, root=None, labels=None, read_entries=True):
        self.models = models_of(data, labels)
        self.ds = ds = self.models[0][1]
        names = [n for n in metric_names(ds) if all(n in m for _, m in self.models[1:])]
        if not names:
            raise EmptyInputError(f"no metric with a 'layer' and a {' / '.join(map(repr, COL_DIMS))} dimension "
                                  f"in {list(ds.data_vars)}" + (" shared by every model" if self.models[1:] else ""))
        if metric is not None and metric not in names:
            raise UnknownMetricError(str(metric), names)
        self.out_dir, self.dpi, self.read_entries = Path(out_dir), dpi, read_entries
        self.current, self.prepared, self.panels, self.facts = None, [], [], []
        self.renders, self.message, self.cell, self._png, self._matrices = 0, "", None, b"", {}
        self._lock, self._dirty, self._hold_depth = threading.Lock(), False, 0
        self.entries = self._entries()
        c = self.controls = {}
        c["metric"] = W.Dropdown(options=[(str(ds[n].attrs.get("long_name") or n), n) for n in names],
                                 value=metric or names[0], description="metric", style=C.WIDE,
                                 layout=W.Layout(width="max-content", min_width="16em"))
        dims = C.selector_dims(ds, names)
        for d in dims:
            c[d] = W.Dropdown(options=C.dim_options(ds, d), description=d, style=C.WIDE,
                              layout=W.Layout(width="max-content"))
        comps = [str(x) for x in ds["component"].values] if "component" in ds.coords else []
        col_choices = C.column_choices(ds, names)
        if len(col_choices) > 1:
            c["columns"] = W.Dropdown(options=col_choices, value="component", description="columns", style=C.WIDE)
            c["component"] = W.Dropdown(options=comps, description="component", style=C.WIDE)
        if len(self.entries) > 1:
            one = len(self.models) == 1
            c["view"] = W.ToggleButtons(options=C.VIEW_OPTIONS if one else C.VIEW_OPTIONS[1:],
                                        value="one" if one else "side", style={"button_width": "auto"})
            choices = [(lab, i) for i, (lab, _, _) in enumerate(self.entries)]
            c["base"] = W.Dropdown(options=choices, value=0, description="base", style=C.WIDE,
                                   layout=W.Layout(width="max-content"))
            c["target"] = W.Dropdown(options=choices, value=len(choices) - 1, description="target", style=C.WIDE,
                                     layout=W.Layout(width="max-content"))
            c["range"] = W.ToggleButtons(options=(("separate", "separate"), ("shared", "shared")),
                                         value="separate", style={"button_width": "auto"})
        c["scale"] = W.ToggleButtons(options=C.SCALE_OPTIONS, value="diverging", style={"button_width": "auto"})
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
                                             layout=W.Layout(width="auto")) for k in comps}
        c["annotate"] = W.Checkbox(value=False, description="values in cells", indent=False,
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
        self.status = W.HTML()
        self.view = HeatmapView(on_click=self._clicked)
        self.output = W.Output(layout=W.Layout(min_height="300px", flex="0 1 auto", max_width="100%"))
        self.top = W.HTML()
        self.cell_text = W.HTML("<i>Click a cell for its spectrum.</i>")
        self.cell_image = W.Image(format="png", layout=W.Layout(display="none", width="432px"))
        self._showing_view = False
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
            elif key not in ("filename", "format", "save_figure", "save_csv", "save_netcdf"):
                w.observe(self._on_metric if key in ("metric", "columns", "view") else self._on_change, names="value")
        c["save_figure"].on_click(lambda _: self._report(self.save_figure))
        c["save_csv"].on_click(lambda _: self._report(self.save_csv))
        c["save_netcdf"].on_click(lambda _: self._report(self.save_netcdf))

    def _layout(self, dims):
        c = self.controls
        first = [c["metric"], *(c[d] for d in dims)] + ([c["columns"], c["component"]] if "columns" in c else [])
        rows = [W.HBox(first, layout=W.Layout(flex_flow="row wrap"))]
        if "view" in c:
            rows.append(W.HBox([C.labelled("view", c["view"]), c["base"], c["target"],
                                C.labelled("colour range", c["range"])], layout=W.Layout(flex_flow="row wrap")))
        rows += [W.HBox([C.labelled("colour", c["scale"]), c["robust"], c["annotate"]],
                        layout=W.Layout(flex_flow="row wrap", align_items="center")),
                 W.HBox([W.Label("colour limits"), c["vmin"], c["vmax"]], layout=W.Layout(align_items="center")),
                 c["layers"], W.HBox(list(c["components"].values()), layout=W.Layout(flex_flow="row wrap"))]
        side = W.VBox([self.cell_text, self.cell_image, C.labelled("top cells", c["rank"]), self.top],
                      layout=W.Layout(width="450px", margin="0 0 0 12px"))
        rows += [W.HBox([self.output, side], layout=W.Layout(flex_flow="row wrap")),  # narrow: panel below
                 W.HBox([c["filename"], c["format"], c["save_figure"], c["save_csv"], c["save_netcdf"]],
                        layout=W.Layout(flex_flow="row wrap", align_items="center")), self.status]
        return rows

    # -- what to draw -------------------------------------------------------
    def _columns(self) -> str:
        return self.controls["columns"].value if "columns" in self.controls else "component"

    def _view(self) -> str:
        return self.controls["view"].value if "view" in self.controls else "one"

    def _limits(self):
        out = []
        for key in ("vmin", "vmax"):
            text = self.controls[key].value.strip()
            try:
                out.append(float(text) if text else None)
            except ValueError:
                raise ValueError(f"colour limit {key[1:]} {text!r} is not a number; leave it empty for "
                                 "automatic") from None
        return tuple(out)

    def selection(self) -> dict:
        """Keyword arguments of :func:`toolkit.plot.prepare_heatmap` for the current controls (first panel)."""
        c = self.controls
        var = self.ds[c["metric"].value]
        cols = self._columns()
        col_dim = cols if cols in var.dims else column_dim(var.dims)
        kws = {d: c[d].value for d in var.dims if d in c and d not in (col_dim, "component") and d != ROW_DIM}
        if col_dim != column_dim(var.dims):
            kws["component"] = c["component"].value  # a (layer, X) heatmap of one component
        comps = [k for k, t in c["components"].items() if t.value] if col_dim == "component" else None
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
            metric, panels, prepared = self._prepare_all()
            png, boxes = figure_png(prepared, annotate=self.controls["annotate"].value, dpi=self.dpi)
        except (ToolkitError, ValueError) as err:
            self.current, self.prepared, self.message = None, [], f"Nothing to draw for this selection: {err}"
            self.output.outputs = ({"output_type": "stream", "name": "stdout", "text": self.message + "\n"},)
            self._showing_view = False
            self.top.value = ""
            return
        if self._dirty:  # the controls changed while drawing: this figure is already stale
            return
        self.facts = [PanelFacts(p, q, metric) for p, q in zip(panels, prepared, strict=True)]
        self.view.show(base64.b64encode(png).decode("ascii"),
                       [{"box": b, "n_rows": q.values.shape[0], "n_cols": q.values.shape[1], "hover": f.grid()}
                        for b, q, f in zip(boxes, prepared, self.facts, strict=True)])
        self.current, self.prepared, self.panels, self.message = prepared[0], prepared, panels, ""
        self.renders, self._png = self.renders + 1, png
        self.output.layout.width = f"{png_size(png)[0] + 4}px"  # the side panel sits right next to the figure
        if not self._showing_view:
            self.output.outputs = ({"output_type": "display_data", "metadata": {},
                                    "data": {WIDGET_VIEW: {"version_major": 2, "version_minor": 0,
                                                           "model_id": self.view.model_id},
                                             "text/plain": "<heatmap>"}},)
            self._showing_view = True
        self._show_top()

    # -- display --------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs):
        """The live panel, plus a PNG of the current figure for viewers without widgets."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self.prepared:
            bundle["image/png"] = base64.b64encode(self._png).decode("ascii")
        bundle["text/plain"] = f"Explorer({self.current.title if self.current else self.message!r})"
        return bundle

    def _ipython_display_(self):
        from IPython import get_ipython
        from IPython.display import display

        ip = get_ipython()
        if self._eager_cell is not None and ip is not None and ip.execution_count == self._eager_cell:
            return  # explore_model already put this panel on screen in this cell
        display(self._repr_mimebundle_(), raw=True)


def explore(data, metric=None, *, out_dir=".", dpi=100, labels=None, read_entries=True) -> Explorer:
    """Interactive heatmap panel over one or several statistics Datasets.

    Parameters
    ----------
    data : xarray.Dataset or list of xarray.Dataset
        Metrics with dims ``(layer, component)``, ``(layer, head)`` or
        ``(layer, kv_head)``, plus any extra dims (``checkpoint``, ``head``,
        ``expert``, ``text`` ...), each of which gets a selector. A list
        (models of 28, 36, 48 layers), or a Dataset with a ``checkpoint``
        dimension, adds the views *side by side* (one panel per model, each
        with its own layer axis; separate or shared colour range) and
        *difference* / *ratio* (target − base, target / base; when the grids
        line up).
    metric : str, optional
        Metric shown first (default: the first one every model has).
    out_dir : str or path, default "."
        Where the save buttons write.
    dpi : int, default 100
    labels : list of str, optional
        Names of the models (default: from their attrs).
    read_entries : bool, default True
        Let a click read the cell's matrix from the source recorded in the
        Dataset (a local file) for the entry histogram.

    Returns
    -------
    Explorer
        Displays itself as the panel. Hovering a cell shows its value, tensor
        name, shape and NaN reason (:meth:`Explorer.hover_text`); a click
        draws its spectrum beside the heatmap (:meth:`Explorer.show_cell`).

    Raises
    ------
    toolkit.errors.EmptyInputError
        No Dataset, or no metric with layer and component/head/kv_head dims.
    toolkit.errors.UnknownMetricError
        ``metric`` is not one of them.
    """
    return Explorer(data, metric, out_dir=out_dir, dpi=dpi, labels=labels, read_entries=read_entries)
