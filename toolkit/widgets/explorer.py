"""An ipywidgets panel over any statistics Dataset.

The panel only chooses what to draw; the numbers come from the Dataset and the
figure from :func:`toolkit.plot.prepare_heatmap` / :func:`toolkit.plot.draw_heatmap`,
the same functions the CLI uses. Each render draws on a fresh, pyplot-free
``Figure`` turned into one PNG that *replaces* the output area's content, so
the area always holds exactly one image and no figure stays open.
"""

from __future__ import annotations

import base64
import html
import io
import re
import threading
from contextlib import contextmanager
from pathlib import Path

import ipywidgets as W

from toolkit.errors import EmptyInputError, ToolkitError, UnknownMetricError
from toolkit.plot._select import COL_DIMS, ROW_DIM, column_dim, metric_names, model_name
from toolkit.plot.heatmap_figure import auto_figsize, draw_heatmap, prepare_heatmap

SCALE_OPTIONS = (("diverging (median)", "diverging"), ("sequential", "sequential"), ("log", "log"))
ROBUST_TOOLTIP = ("On: colour limits at the 2nd and 98th percentiles, so a few outliers do not wash out the "
                  "rest (arrows on the colorbar mark clipped ends). Off: the data's min and max, so an "
                  "outlier such as a massive activation is shown as the extreme it is.")


def _selector_dims(ds, names) -> list[str]:
    """Dimensions that need a selector: those of a metric that are neither its rows nor its columns.

    ``kv_head`` of ``key_head_rms`` (layer, kv_head) is its columns, so it gets
    none; ``head`` of a (layer, component, head) variable gets one. In the
    Dataset's dimension order.
    """
    dims = {d for n in names for d in ds[n].dims if d not in (ROW_DIM, column_dim(ds[n].dims))}
    return sorted(dims, key=list(ds.sizes).index)


def _dim_options(ds, dim):
    """(label, value) pairs for a selector; 1-D coords along ``dim`` (``step``) join the label."""
    values = ds[dim].values.tolist() if dim in ds.coords else list(range(ds.sizes[dim]))
    extra = [c for c, v in ds.coords.items() if v.dims == (dim,) and c != dim]
    labels = []
    for i, v in enumerate(values):
        more = ", ".join(f"{c} {ds[c].values[i]}" for c in extra)
        labels.append(f"{v} ({more})" if more else str(v))
    return list(zip(labels, values, strict=True))


def figure_png(prepared, *, annotate=False, dpi=100, figsize=None) -> bytes:
    """Draw a prepared heatmap on a fresh pyplot-free Figure and return PNG bytes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize or auto_figsize(*prepared.values.shape), dpi=dpi, layout="constrained")
    draw_heatmap(prepared, ax=fig.add_subplot(), annotate=annotate)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    fig.clear()
    return buf.getvalue()


class Explorer:
    """Interactive heatmap panel; build it with :func:`explore`.

    Attributes
    ----------
    ds : xarray.Dataset
        The statistics shown (never modified).
    widget : ipywidgets.VBox
        The whole panel.
    controls : dict of str -> ipywidgets.Widget
        ``metric``, ``scale``, ``robust`` (checkbox "robust colour limits",
        on by default; off: the data's min and max), ``layers``,
        ``annotate``, ``filename``, ``save_png``, ``save_netcdf``, one
        selector per extra dimension (named after it: ``checkpoint``,
        ``head``, ``text`` ...; disabled while the metric shown lacks it or
        draws it as columns), and ``components`` (dict component ->
        ToggleButton; disabled unless the columns are components).
    output : ipywidgets.Output
        Holds exactly one PNG of the current figure (or one message).
    current : toolkit.plot.HeatmapData or None
        The prepared data of the figure shown; None while a message is shown.
    renders : int
        Number of figures drawn so far.
    """

    def __init__(self, ds, metric=None, *, out_dir=".", dpi=100, root=None):
        self.ds = ds
        names = metric_names(ds)
        if not names:
            raise EmptyInputError(f"no metric with a 'layer' and a {' / '.join(map(repr, COL_DIMS))} dimension "
                                  f"in {list(ds.data_vars)}")
        if metric is not None and metric not in names:
            raise UnknownMetricError(str(metric), names)
        self.out_dir, self.dpi = Path(out_dir), dpi
        self.current, self.renders, self.message = None, 0, ""
        self._lock, self._dirty, self._hold_depth = threading.Lock(), False, 0
        c = self.controls = {}
        c["metric"] = W.Dropdown(options=[(str(ds[n].attrs.get("long_name") or n), n) for n in names],
                                 value=metric or names[0], description="metric")
        dims = _selector_dims(ds, names)
        for d in dims:
            c[d] = W.Dropdown(options=_dim_options(ds, d), description=d)
        c["scale"] = W.ToggleButtons(options=SCALE_OPTIONS, value="diverging", description="colour",
                                     style={"button_width": "auto", "description_width": "initial"})
        c["robust"] = W.Checkbox(value=True, description="robust colour limits", indent=False,
                                 tooltip=ROBUST_TOOLTIP)
        lo, hi = int(ds[ROW_DIM].min()), int(ds[ROW_DIM].max())
        c["layers"] = W.IntRangeSlider(value=(lo, hi), min=lo, max=hi, description="layers",
                                       continuous_update=False)
        comps = [str(x) for x in ds["component"].values] if "component" in ds.coords else []
        c["components"] = {k: W.ToggleButton(value=True, description=k.replace(".", ". "),
                                             layout=W.Layout(width="auto")) for k in comps}
        c["annotate"] = W.Checkbox(value=False, description="values in cells", indent=False)
        name = re.sub(r"\.(gguf|safetensors|bin|pt|pth)$", "", model_name(ds.attrs) or "statistics")
        stem = re.sub(r"[^\w.-]+", "_", name)
        c["filename"] = W.Text(value=stem, description="file name")
        c["save_png"] = W.Button(description="Save figure (PNG)", icon="image")
        c["save_netcdf"] = W.Button(description="Save data (NetCDF)", icon="save")
        self.status = W.HTML()
        self.output = W.Output(layout=W.Layout(min_height="300px"))
        for key, w in c.items():
            if key == "components":
                for t in w.values():
                    t.observe(self._on_change, names="value")
            elif key not in ("filename", "save_png", "save_netcdf"):
                w.observe(self._on_metric if key == "metric" else self._on_change, names="value")
        c["save_png"].on_click(lambda _: self._report(self.save_png))
        c["save_netcdf"].on_click(lambda _: self._report(self.save_netcdf))
        rows = [W.HBox([c["metric"], *(c[d] for d in dims)]), W.HBox([c["scale"], c["robust"], c["annotate"]]),
                c["layers"], W.HBox(list(c["components"].values())), self.output,
                W.HBox([c["filename"], c["save_png"], c["save_netcdf"]]), self.status]
        self.widget = root if root is not None else W.VBox()
        self.widget.children = rows
        self._eager_cell = None
        with self.hold():
            self._sync_enabled()
            self._dirty = True

    # -- what to draw -------------------------------------------------------
    def selection(self) -> dict:
        """Keyword arguments of :func:`toolkit.plot.prepare_heatmap` for the current controls."""
        c = self.controls
        var = self.ds[c["metric"].value]
        col_dim = column_dim(var.dims)
        kws = {d: c[d].value for d in var.dims if d in c and d != col_dim}
        comps = None
        if col_dim == "component":
            comps = [k for k, t in c["components"].items() if t.value]
        return dict(metric=c["metric"].value, scale=c["scale"].value, robust=c["robust"].value,
                    layers=tuple(c["layers"].value), components=comps, **kws)

    def _sync_enabled(self):
        var = self.ds[self.controls["metric"].value]
        col_dim = column_dim(var.dims)
        for d, w in self.controls.items():
            if isinstance(w, W.Dropdown) and d != "metric":
                w.disabled = d not in var.dims or d == col_dim
        for t in self.controls["components"].values():
            t.disabled = col_dim != "component"

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
        """Redraw from the controls, replacing the output area's content.

        A change made while a render runs (another thread, or a control set
        from inside a render) marks the panel dirty; the running render loops
        and draws again, so the area never keeps a stale figure.
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
        kws = self.selection()
        try:
            prepared = prepare_heatmap(self.ds, **kws)
            png = figure_png(prepared, annotate=self.controls["annotate"].value, dpi=self.dpi)
        except (ToolkitError, ValueError) as err:
            self.current, self.message = None, f"Nothing to draw for this selection: {err}"
            self.output.outputs = ({"output_type": "stream", "name": "stdout", "text": self.message + "\n"},)
            return
        if self._dirty:  # the controls changed while drawing: this figure is already stale
            return
        self.current, self.message, self.renders = prepared, "", self.renders + 1
        self._png = png
        self.output.outputs = ({"output_type": "display_data", "metadata": {},
                                "data": {"image/png": base64.b64encode(png).decode("ascii"),
                                         "text/plain": f"<heatmap: {prepared.title}>"}},)

    # -- saving ---------------------------------------------------------------
    def _default_path(self, suffix: str) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        stem = self.controls["filename"].value.strip() or "statistics"
        return self.out_dir / (stem + suffix)

    def save_png(self, path=None, *, dpi=150) -> Path:
        """Save the figure shown as PNG; default ``<out_dir>/<file name>_<metric>.png``.

        Raises
        ------
        toolkit.errors.EmptyInputError
            No figure is shown (the selection left nothing to draw).
        """
        if self.current is None:
            raise EmptyInputError("no figure to save: " + self.message)
        path = Path(path) if path is not None else self._default_path(f"_{self.current.metric}.png")
        path.write_bytes(figure_png(self.current, annotate=self.controls["annotate"].value, dpi=dpi))
        return path

    def save_netcdf(self, path=None) -> Path:
        """Save the Dataset with :func:`toolkit.save`; default ``<out_dir>/<file name>.nc``."""
        from toolkit.io import save

        path = Path(path) if path is not None else self._default_path(".nc")
        save(self.ds, path)
        return path

    def _report(self, action):
        try:
            self.status.value = f"Saved <code>{html.escape(str(action()))}</code>"
        except Exception as err:  # noqa: BLE001 - a button has nowhere else to report
            self.status.value = f"Could not save: {html.escape(str(err))}"

    # -- display --------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs):
        """The live panel, plus a PNG of the current figure for viewers without widgets."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self.current is not None:
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


def explore(ds, metric=None, *, out_dir=".", dpi=100) -> Explorer:
    """Interactive heatmap panel over a statistics Dataset.

    Parameters
    ----------
    ds : xarray.Dataset
        Metrics with dims ``(layer, component)``, ``(layer, head)`` or
        ``(layer, kv_head)`` (key/value heads of grouped-query attention),
        plus any extra dims (``checkpoint``, ``head``, ``text`` ...), each of
        which gets a selector. Rows are layers, columns the first of
        ``component``, ``head``, ``kv_head`` the metric has.
    metric : str, optional
        Metric shown first (default: the first one).
    out_dir : str or path, default "."
        Where the save buttons write.
    dpi : int, default 100

    Returns
    -------
    Explorer
        Displays itself as the panel; drive it from Python through
        ``.controls`` and read ``.current`` (the prepared data shown).

    Raises
    ------
    toolkit.errors.EmptyInputError
        The Dataset has no metric with layer and component/head/kv_head dims.
    toolkit.errors.UnknownMetricError
        ``metric`` is not one of them.
    """
    return Explorer(ds, metric, out_dir=out_dir, dpi=dpi)
