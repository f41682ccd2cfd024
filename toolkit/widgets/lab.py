"""The attention lab's explorer: metric, activations, layers, head and y scale over a layer grid.

The numbers come from :func:`~toolkit.plot.layer_grid_figure.prepare_layer_grid`
(the function :func:`toolkit.plot.layer_grid` draws with matplotlib); the
browser draws them (:class:`~toolkit.widgets.chart_view.ChartView`), so a
change redraws twelve small SVG panels instead of rendering twelve matplotlib
panels to PNG. The PNG of :func:`grid_png` is kept for viewers without
widgets (a saved notebook).
"""

from __future__ import annotations

import base64
import html
import io

import ipywidgets as W

from toolkit.constraint_types import DataOf
from toolkit.constraints import Text, Whole, checks_options
from toolkit.errors import ToolkitError
from toolkit.plot.layer_grid_figure import default_log, draw_layer_grid, grid_variables, prepare_layer_grid
from toolkit.widgets import _controls as C
from toolkit.widgets import chart_spec
from toolkit.widgets.chart_view import ChartView

#: Variables offered by the metric selector, in this order, when present.
LAB_METRICS = ("attention_norm", "attention_norm_head", "attention_norm_max", "score_mean_abs",
               "score_p99_abs", "score_fraction_above_1", "train_loss", "test_loss", "train_accuracy",
               "test_accuracy")
#: The head selector's first entry: average the heads.
HEAD_MEAN = "mean over heads"
#: Its second: the largest head (softmax's ceiling √N is about single heads; the mean stays below it).
HEAD_MAX = "max over heads"
#: What the head selector says for a variable that has no heads.
NO_HEADS = "— (no heads)"


def grid_figure(prepared):
    """Draw a prepared layer grid on a fresh pyplot-free Figure (the static image)."""
    from matplotlib.figure import Figure

    width = 3.2 * prepared.ncols + (2.0 if prepared.ncols == 1 else 0.0)  # room for a legend at the right
    fig = Figure(figsize=(width, 2.4 * prepared.nrows + 0.8), layout="constrained")
    return draw_layer_grid(prepared, fig=fig)


def grid_png(prepared, *, dpi: int = 80) -> bytes:
    """Draw a prepared layer grid with :func:`grid_figure`; return PNG bytes."""
    fig = grid_figure(prepared)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    fig.clear()
    return buf.getvalue()


class LabExplorer:
    """Layer-grid panel over a lab Dataset; build it with :func:`lab_explorer`.

    Attributes
    ----------
    ds : xarray.Dataset
        The lab result shown (never modified).
    controls : dict of str -> ipywidgets.Widget
        ``metric`` (Dropdown), ``activations`` and ``layers`` (SelectMultiple),
        ``head`` (Dropdown: :data:`HEAD_MEAN`, :data:`HEAD_MAX` or a head, 0-based; for
        variables with a ``head`` dim, else it reads :data:`NO_HEADS` and is
        disabled), ``scale`` (ToggleButtons, "log"/"linear").
    chart : ChartView
        The panels in the browser; empty after a selection that cannot be drawn.
    status : ipywidgets.HTML
        Empty, or why nothing could be drawn.
    widget : ipywidgets.VBox
        The whole panel.
    current : LayerGridData or None
        What is drawn now.
    renders : int
    """

    def __init__(self, ds, metric: str = "attention_norm", *, dpi: int = 80):
        self.ds, self.dpi, self.current, self.renders = ds, dpi, None, 0
        self._png_cache: tuple = (-1, b"")
        names = [m for m in grid_variables(ds) if bool(ds[m].notnull().any())]  # a run older than a
        # variable has it all NaN (the score scales before they were recorded): not offered
        options = [m for m in LAB_METRICS if m in names] + [m for m in names if m not in LAB_METRICS]
        labels = [(f"{ds[m].attrs.get('long_name', m)}", m) for m in options]
        acts = [str(a) for a in ds["activation"].values.tolist()]
        layers = [(f"layer {int(x)}", int(x)) for x in ds["layer"].values.tolist()]
        heads = ds["head"].values.tolist() if "head" in ds.dims else []
        self._heads = [(HEAD_MEAN, None)] + ([(HEAD_MAX, "max")] if heads else []) + [
            (f"head {int(h)}", int(h)) for h in heads]
        self.controls = c = {
            "metric": W.Dropdown(options=labels, value=metric if metric in options else options[0],
                                 description="metric", style=C.WIDE, layout=W.Layout(width="max-content")),
            "activations": W.SelectMultiple(options=acts, value=tuple(acts), rows=min(len(acts), 6),
                                            description="activations", style=C.WIDE),
            "layers": W.SelectMultiple(options=layers, value=tuple(v for _, v in layers),
                                       rows=6, description="layers (from 0)", style=C.WIDE),
            "head": W.Dropdown(options=self._heads, index=0, description="head", style=C.WIDE,
                               layout=W.Layout(width="max-content")),
            "scale": W.ToggleButtons(options=["log", "linear"], style={"button_width": "auto"}),
        }
        c["scale"].value = "log" if default_log(c["metric"].value) else "linear"
        self._enable_head()
        self.chart = ChartView()
        self.chart.add_class("toolkit-lab-chart")
        self.status = W.HTML()
        c["metric"].observe(self._on_metric, names="value")
        for key in ("activations", "layers", "scale", "head"):
            c[key].observe(lambda _change: self.render(), names="value")
        self.widget = W.VBox([W.HBox([c["metric"], c["head"], C.labelled("y scale", c["scale"])],
                                     layout=W.Layout(flex_flow="row wrap", align_items="center")),
                              W.HBox([c["activations"], c["layers"]], layout=W.Layout(flex_flow="row wrap")),
                              self.status, self.chart])
        self.render()

    def _enable_head(self):
        head = self.controls["head"]
        has = "head" in self.ds[self.controls["metric"].value].dims
        if has and head.disabled:
            head.options = self._heads
            head.index = 0  # the mean (value None: only an index shows its label, never a blank menu)
        elif not has:
            head.options = [(NO_HEADS, None)]
            head.index = 0  # says why it is off
        head.disabled = not has

    def _on_metric(self, change):
        self._enable_head()
        scale = "log" if default_log(change["new"]) else "linear"
        if self.controls["scale"].value != scale:
            self.controls["scale"].value = scale  # its observer renders
        else:
            self.render()

    def render(self) -> None:
        """Redraw from the current selection (an impossible one is reported in ``status``)."""
        c = self.controls
        try:
            prepared = prepare_layer_grid(
                self.ds, c["metric"].value, activations=list(c["activations"].value),
                layers=list(c["layers"].value), head=None if c["head"].disabled else c["head"].value,
                scale=c["scale"].value)
        except ToolkitError as err:
            self.status.value = f"<span style='color:#b34d00'>{html.escape(str(err))}</span>"
            self.current = None
            self.chart.show({})
            return
        self.status.value, self.current = "", prepared
        self.chart.show(chart_spec.layer_grid(prepared))
        self.renders += 1

    def figure_png(self) -> bytes:
        """PNG of the current grid, drawn by matplotlib (cached per render; for viewers without widgets)."""
        if self.current is None:
            return b""
        if self._png_cache[0] != self.renders:
            self._png_cache = (self.renders, grid_png(self.current, dpi=self.dpi))
        return self._png_cache[1]

    def _repr_mimebundle_(self, **kwargs):
        """The live panel, plus a PNG of the current grid for viewers without widgets."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self.current is not None:
            bundle["image/png"] = base64.b64encode(self.figure_png()).decode("ascii")
        bundle["text/plain"] = f"LabExplorer({self.current.metric if self.current else ''!r})"
        return bundle

    def _ipython_display_(self):
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)


@checks_options(ds=DataOf(), metric=Text("a variable of the lab result"), dpi=Whole(minimum=1))
def lab_explorer(ds, metric: str = "attention_norm", *, dpi: int = 80) -> LabExplorer:
    """Interactive layer grid over a lab result.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`toolkit.lab.run_experiment` or :func:`toolkit.lab.load_result`.
    metric : str
        Variable shown first (default ``"attention_norm"``).
    dpi : int
        Resolution of the static PNG kept for viewers without widgets.

    Returns
    -------
    LabExplorer
        Displays itself as its panel; ``.widget`` is the VBox.
    """
    return LabExplorer(ds, metric, dpi=dpi)
