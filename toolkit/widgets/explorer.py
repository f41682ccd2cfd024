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
from toolkit.plot._select import COL_DIMS, metric_names
from toolkit.plot.fit_marks import with_relative_width
from toolkit.widgets import heatmap_spec
from toolkit.widgets.cell_panel import CellPanel
from toolkit.widgets.cells import PanelFacts, Shown
from toolkit.widgets.control_panel import ControlPanel
from toolkit.widgets.figures import figure_bytes, file_stem
from toolkit.widgets.heatmap_view import HeatmapView
from toolkit.widgets.model_set import ModelSet
from toolkit.widgets.saver import Saver


def figure_png(prepared: list, *, annotate=False, dpi=100):
    """The panels as PNG bytes and their axes' boxes (see :func:`toolkit.widgets.figures.figure_bytes`)."""
    return figure_bytes(prepared, "png", annotate=annotate, dpi=dpi)


class Explorer:
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
    model_set : toolkit.widgets.model_set.ModelSet
        The models and the panels each view makes of them.
    control_panel : toolkit.widgets.control_panel.ControlPanel
        The controls of what to draw, and the selection they make.
    cell_panel : toolkit.widgets.cell_panel.CellPanel
        The side panel: the opened cell and the top cells.
    saver : toolkit.widgets.saver.Saver
        The save buttons and what they write.
    """

    def __init__(self, data, metric=None, *, out_dir=".", dpi=100, root=None, labels=None, read_entries=True,
                 absent=None, pending=False, fit=None):
        self.model_set = ModelSet(data, labels, fit, pending=pending)
        self.fit_choice = self.model_set.fit_choice
        ds = self.ds
        names = [n for n in metric_names(ds) if all(n in m for _, m in self.models[1:])]
        if not names:
            raise EmptyInputError(f"no metric with a 'layer' and a {' / '.join(map(repr, COL_DIMS))} dimension "
                                  f"in {list(ds.data_vars)}" + (" shared by every model" if self.models[1:] else ""))
        if metric is not None and metric not in names:
            raise UnknownMetricError(str(metric), names)
        self.dpi, self.read_entries = dpi, read_entries
        self.shown, self.renders = Shown(), 0
        self._png_cache: tuple = (-1, b"")
        self._lock, self._dirty, self._hold_depth = threading.Lock(), False, 0
        self.control_panel = panel = ControlPanel(self.model_set, names, metric, absent=absent)
        self.absent, self.limits_note = panel.absent, panel.limits_note
        self.view = HeatmapView(on_open=lambda *cell: self.cell_panel.open(*cell))
        self.view.add_class("toolkit-explorer-figure")
        self.cell_panel = CellPanel(self.view, read_entries=read_entries)
        self.top, self.cell_text, self.drill = self.cell_panel.top, self.cell_panel.cell_text, self.cell_panel.drill
        stem = file_stem(*(re.sub(r"\.(gguf|safetensors|bin|pt|pth)$", "", lab) for lab, _ in self.models[:2]))
        self.saver = Saver(out_dir, stem, shown=lambda: self.shown, models=lambda: self.models,
                           describe=panel.describe)
        self.status = self.saver.status
        self.controls = {**panel.controls, "annotate": self.saver.controls["annotate"], "rank": self.cell_panel.rank,
                         **self.saver.controls}
        self.message_box = W.HTML(layout=W.Layout(display="none"))
        self.message_box.add_class("toolkit-explorer-message")
        panel.observe(self._on_metric, self._on_change)
        self.fit_choice.on_change(self._set_models)
        main = W.HBox([self.view, self.cell_panel.widget])
        main.add_class("toolkit-explorer-main")
        wrap = W.Box([main])  # beside the heatmap, stacked only where narrow (js/widgets.css)
        wrap.add_class("toolkit-explorer-wrap")
        self.widget = root if root is not None else W.VBox()
        self.widget.children = [*panel.rows(), self.message_box, wrap, self.saver.row, self.status]
        with self.hold():
            panel.sync_enabled()
            self._dirty = True

    def selection(self) -> dict:
        """Keyword arguments of :func:`toolkit.plot.prepare_heatmap` for the current controls (first panel)."""
        return self.control_panel.selection()

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
            self.control_panel.sync_enabled()
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
        panel = self.control_panel
        try:
            metric, panels, prepared, shared = self.model_set.prepare(
                panel.selection(), view=panel.view(), shared_range=panel.shared_range(), **panel.pair())
            facts = [PanelFacts(p, q, metric, pending=self.pending) for p, q in zip(panels, prepared, strict=True)]
            spec = heatmap_spec.spec(prepared, [f.grid() for f in facts], shared=shared, pending=self.pending,
                                     hint=self.cell_panel.hint(panels, per_matrix=panel.per_matrix()))
        except (ToolkitError, ValueError) as err:
            self._show_message(f"Nothing to draw for this selection: {err}")
            return
        if self._dirty:  # the controls changed while preparing: this figure is already stale
            return
        self.view.show(spec)
        self.view.layout.display = ""
        self.message_box.value, self.message_box.layout.display = "", "none"
        self.shown = Shown(panels, prepared, facts)
        self.renders += 1
        self.cell_panel.update(self.shown)

    def _show_message(self, text: str) -> None:
        """Nothing to draw: the message (wrapped between words) instead of the figure, and no drill-down
        of a cell that is no longer shown."""
        self.shown = Shown(message=text)
        self.message_box.value = f"<div class='toolkit-explorer-message'>{html.escape(text)}</div>"
        self.message_box.layout.display = ""
        self.view.layout.display = "none"
        self.cell_panel.update(self.shown)

    # -- the models (ModelSet) -------------------------------------------------
    models = property(lambda self: self.model_set.models, doc="The ``[(label, ds)]`` shown.")
    ds = property(lambda self: self.model_set.ds, doc="The (first) Dataset shown.")
    entries = property(lambda self: self.model_set.entries, doc="What the views combine (:class:`ModelSet`).")

    @property
    def pending(self) -> bool:
        """A pass is still measuring: empty cells read "not measured yet" and the fit menu waits."""
        return self.model_set.pending

    @pending.setter
    def pending(self, value: bool) -> None:
        self.model_set.pending = value

    def set_data(self, ds) -> None:
        """Show ``ds`` in place of the (one) Dataset, the controls kept: the same grid with more cells
        measured (the live view of :func:`~toolkit.widgets.explore_model`).

        Raises
        ------
        toolkit.errors.EmptyInputError
            ``ds`` is not a Dataset, or lacks a metric the menu offers (the explorer keeps showing the old one).
        """
        import xarray as xr

        if not isinstance(ds, xr.Dataset):
            raise EmptyInputError(f"set_data takes an xarray.Dataset; got {type(ds).__name__}")
        offered = [name for _, name in self.controls["metric"].options]
        missing = [name for name in offered if name not in with_relative_width(ds).data_vars]  # as ModelSet.use
        if missing:
            raise EmptyInputError(f"set_data: the Dataset lacks {', '.join(map(repr, missing))} (offered in the "
                                  f"metric menu); it holds {list(ds.data_vars)}")
        opened = self.cell_panel.opened
        self.model_set.set_data(ds)
        self._redraw(opened)

    def _set_models(self, models) -> None:
        """Show ``models`` (another fit's) with the controls kept, and the opened cell again."""
        opened = self.cell_panel.opened
        self.model_set.use(models)
        self._redraw(opened)

    def _redraw(self, opened) -> None:
        self.render()
        if opened is not None and self.prepared and self.cell_panel.opened is None:
            try:
                self.show_cell(*opened)
            except (ToolkitError, ValueError):
                pass  # no longer shown

    # -- what is shown (Shown) and its cells (CellPanel) ---------------------------
    prepared = property(lambda self: self.shown.prepared, doc="All panels shown (HeatmapData).")
    current = property(lambda self: self.shown.current, doc="The (first) panel shown, or None.")
    panels = property(lambda self: self.shown.panels, doc="Where the panels shown come from.")
    facts = property(lambda self: self.shown.facts, doc="The panels' per-cell facts.")
    message = property(lambda self: self.shown.message, doc="Why nothing is drawn, or \"\".")
    cell = property(lambda self: self.cell_panel.cell, doc="The drill-down shown, or None.")

    def hover_text(self, layer, component, *, panel: int = 0) -> str:
        """What hovering over a cell shows (:meth:`toolkit.widgets.cell_panel.CellPanel.hover_text`)."""
        return self.cell_panel.hover_text(layer, component, panel=panel)

    def show_cell(self, layer, component, *, panel: int = 0, wait: bool = False):
        """Open a cell as a click on it does; returns its drill-down
        (:meth:`toolkit.widgets.cell_panel.CellPanel.show_cell`)."""
        return self.cell_panel.show_cell(layer, component, panel=panel, wait=wait)

    # -- saving (Saver) ----------------------------------------------------------
    @property
    def out_dir(self) -> Path:
        """Where the save buttons write."""
        return self.saver.out_dir

    @out_dir.setter
    def out_dir(self, value) -> None:
        self.saver.out_dir = Path(value)

    def save_figure(self, path=None, *, fmt=None, dpi=150) -> Path:
        """Save the figure shown as PNG, SVG or PDF (:meth:`toolkit.widgets.saver.Saver.save_figure`)."""
        return self.saver.save_figure(path, fmt=fmt, dpi=dpi)

    def save_png(self, path=None, *, dpi=150) -> Path:
        """:meth:`save_figure` as PNG."""
        return self.saver.save_png(path, dpi=dpi)

    def save_csv(self, path=None) -> Path:
        """Save the numbers of the panels shown as CSV (:meth:`toolkit.widgets.saver.Saver.save_csv`)."""
        return self.saver.save_csv(path)

    def save_netcdf(self, path=None) -> Path:
        """Save the (first) Dataset as NetCDF (:meth:`toolkit.widgets.saver.Saver.save_netcdf`)."""
        return self.saver.save_netcdf(path)

    def save_html(self, path=None) -> Path:
        """Export the explorer as one HTML page (:meth:`toolkit.widgets.saver.Saver.save_html`)."""
        return self.saver.save_html(path)

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
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)
