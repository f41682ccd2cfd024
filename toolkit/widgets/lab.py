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
LAB_METRICS = ("attention_norm", "attention_norm_head", "attention_norm_max", "score_mean_abs",
               "score_p99_abs", "score_fraction_above_1", "train_loss", "test_loss", "train_accuracy",
               "test_accuracy")
#: The head selector's first entry: average the heads.
HEAD_MEAN = "mean over heads"


def grid_figure(prepared):
    """Draw a prepared layer grid on a fresh pyplot-free Figure (the panel's figure)."""
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
        ``head`` (Dropdown: :data:`HEAD_MEAN` or a head, 0-based; enabled for
        variables with a ``head`` dim), ``scale`` (ToggleButtons, "log"/"linear").
    output : ipywidgets.Output
        Holds exactly one PNG after a render that could draw, none after one
        that could not (an old figure never stays under a new message).
    status : ipywidgets.HTML
        Empty, or why nothing could be drawn.
    widget : ipywidgets.VBox
        The whole panel.
    current : LayerGridData or None
        What is drawn now.
    """

    def __init__(self, ds, metric: str = "attention_norm", *, dpi: int = 80):
        self.ds, self.dpi, self.current, self._png = ds, dpi, None, b""
        names = [m for m in grid_variables(ds) if bool(ds[m].notnull().any())]  # a run older than a
        # variable has it all NaN (the score scales before they were recorded): not offered
        options = [m for m in LAB_METRICS if m in names] + [m for m in names if m not in LAB_METRICS]
        labels = [(f"{ds[m].attrs.get('long_name', m)}", m) for m in options]
        acts = [str(a) for a in ds["activation"].values.tolist()]
        layers = [(f"layer {int(x)}", int(x)) for x in ds["layer"].values.tolist()]
        heads = [(HEAD_MEAN, None)] + [(f"head {int(h)}", int(h)) for h in ds["head"].values.tolist()] \
            if "head" in ds.dims else [(HEAD_MEAN, None)]
        self.controls = c = {
            "metric": W.Dropdown(options=labels, value=metric if metric in options else options[0],
                                 description="metric"),
            "activations": W.SelectMultiple(options=acts, value=tuple(acts), rows=min(len(acts), 6),
                                            description="activations"),
            "layers": W.SelectMultiple(options=layers, value=tuple(v for _, v in layers),
                                       rows=6, description="layers (from 0)"),
            "head": W.Dropdown(options=heads, value=None, description="head"),
            "scale": W.ToggleButtons(options=["log", "linear"], description="y scale"),
        }
        c["scale"].value = "log" if default_log(c["metric"].value) else "linear"
        self._enable_head()
        self.output = W.Output(layout=W.Layout(min_height="300px"))
        self.status = W.HTML()
        c["metric"].observe(self._on_metric, names="value")
        for key in ("activations", "layers", "scale", "head"):
            c[key].observe(lambda _change: self.render(), names="value")
        self.widget = W.VBox([W.HBox([c["metric"], c["head"], c["scale"]]),
                              W.HBox([c["activations"], c["layers"]]), self.status, self.output])
        self.render()

    def _enable_head(self):
        self.controls["head"].disabled = "head" not in self.ds[self.controls["metric"].value].dims

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
                log=c["scale"].value == "log")
            png = grid_png(prepared, dpi=self.dpi)
        except ToolkitError as err:
            self.status.value = f"<span style='color:#b34d00'>{err}</span>"
            self.current, self._png, self.output.outputs = None, b"", ()
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
