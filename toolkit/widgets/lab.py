"""A small ipywidgets panel over a lab result: the layer grid with selectors.

The panel only chooses what to draw; the figure comes from
:func:`toolkit.plot.layer_grid_figure.prepare_layer_grid` and
:func:`~toolkit.plot.layer_grid_figure.draw_layer_grid`, drawn on a fresh pyplot-free
``Figure`` and shown as one PNG that replaces the output area's content.
"""

from __future__ import annotations

import base64
import io

import ipywidgets as W

from toolkit.errors import ToolkitError
from toolkit.plot.layer_grid_figure import default_log, draw_layer_grid, grid_variables, prepare_layer_grid

#: Variables offered by the metric selector, in this order, when present.
LAB_METRICS = ("attention_norm", "attention_norm_max", "train_loss", "test_loss",
               "train_accuracy", "test_accuracy")


def grid_png(prepared, *, dpi: int = 80) -> bytes:
    """Draw a prepared layer grid on a fresh pyplot-free Figure; return PNG bytes."""
    from matplotlib.figure import Figure

    size = (3.2 * prepared.ncols, 2.4 * prepared.nrows + 0.8)
    fig = Figure(figsize=size, layout="constrained")
    draw_layer_grid(prepared, fig=fig)
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
        ``scale`` (ToggleButtons, "log"/"linear").
    output : ipywidgets.Output
        Holds exactly one PNG after each render.
    status : ipywidgets.HTML
        Empty, or why nothing could be drawn.
    widget : ipywidgets.VBox
        The whole panel.
    current : LayerGridData or None
        What is drawn now.
    """

    def __init__(self, ds, metric: str = "attention_norm", *, dpi: int = 80):
        self.ds, self.dpi, self.current, self._png = ds, dpi, None, b""
        names = grid_variables(ds)
        options = [m for m in LAB_METRICS if m in names] + [m for m in names if m not in LAB_METRICS]
        labels = [(f"{ds[m].attrs.get('long_name', m)}", m) for m in options]
        acts = [str(a) for a in ds["activation"].values.tolist()]
        layers = [(f"Layer {int(x) + 1}", int(x)) for x in ds["layer"].values.tolist()]
        self.controls = c = {
            "metric": W.Dropdown(options=labels, value=metric if metric in options else options[0],
                                 description="metric"),
            "activations": W.SelectMultiple(options=acts, value=tuple(acts), rows=min(len(acts), 6),
                                            description="activations"),
            "layers": W.SelectMultiple(options=layers, value=tuple(v for _, v in layers),
                                       rows=6, description="layers"),
            "scale": W.ToggleButtons(options=["log", "linear"], description="y scale"),
        }
        c["scale"].value = "log" if default_log(c["metric"].value) else "linear"
        self.output = W.Output(layout=W.Layout(min_height="300px"))
        self.status = W.HTML()
        c["metric"].observe(self._on_metric, names="value")
        for key in ("activations", "layers", "scale"):
            c[key].observe(lambda _change: self.render(), names="value")
        self.widget = W.VBox([W.HBox([c["metric"], c["scale"]]),
                              W.HBox([c["activations"], c["layers"]]), self.status, self.output])
        self.render()

    def _on_metric(self, change):
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
                layers=list(c["layers"].value), log=c["scale"].value == "log")
            png = grid_png(prepared, dpi=self.dpi)
        except ToolkitError as err:
            self.status.value = f"<span style='color:#b34d00'>{err}</span>"
            return
        self.status.value, self.current, self._png = "", prepared, png
        self.output.outputs = ({"output_type": "display_data", "metadata": {},
                                "data": {"image/png": base64.b64encode(png).decode("ascii"),
                                         "text/plain": f"<layer grid of {prepared.metric}>"}},)

    def _repr_mimebundle_(self, **kwargs):
        """The live panel, plus a PNG of the current grid for viewers without widgets."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self._png:
            bundle["image/png"] = base64.b64encode(self._png).decode("ascii")
        bundle["text/plain"] = f"LabExplorer({self.current.metric if self.current else ''!r})"
        return bundle

    def _ipython_display_(self):
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)


def lab_explorer(ds, metric: str = "attention_norm", *, dpi: int = 80) -> LabExplorer:
    """Interactive layer grid over a lab result.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`toolkit.lab.run_experiment` or :func:`toolkit.lab.load_result`.
    metric : str
        Variable shown first (default ``"attention_norm"``).
    dpi : int
        Resolution of the PNG shown.

    Returns
    -------
    LabExplorer
        Displays itself as its panel; ``.widget`` is the VBox.
    """
    return LabExplorer(ds, metric, dpi=dpi)
