"""One panel per layer, one line per series over epochs (figure 2 of the design).

:func:`prepare_layer_grid` turns a lab Dataset (dims ``activation, epoch,
layer[, head]``) into a :class:`LayerGridData` of plain numbers and labels
(no matplotlib); :func:`draw_layer_grid` draws it; :func:`layer_grid` does
both. :func:`training_curves` draws the per-activation curves (loss,
accuracy) side by side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from toolkit.constraints import Names, OneOf, Optional, checks_options
from toolkit.errors import EmptyInputError, UnknownMetricError
from toolkit.plot import _options as O
from toolkit.plot._layout import fit_ylabels, is_dimensionless

#: The y scales of a line figure (``scale=``; None: the variable's default).
LINE_SCALES = ("log", "linear")
#: How the heads of a variable with a ``head`` dim can be reduced (``head=``; an int picks one head).
HEAD_REDUCTIONS = ("mean", "max")

#: Fixed colours of the paper's five activations: Okabe-Ito black, orange, sky blue and blue,
#: and Tol's wine. Warm for the unscaled polynomials, cool for the scaled ones. Chosen by the
#: smallest CAM02-UCS distance between any two of them, under normal vision and simulated
#: deuteranomaly, protanomaly and tritanomaly at full severity (colorspacious): 22, against
#: 10 for seaborn's "colorblind" orange and vermillion used before (tests/lab/test_lab_plot.py).
ACTIVATION_COLORS = {"softmax": "#000000", "x/1": "#E69F00", "x/16": "#56B4E9",
                     "x³/1": "#882255", "x³/16": "#0072B2"}
#: What the notebook's text calls each colour.
ACTIVATION_COLOR_NAMES = {"softmax": "black", "x/1": "orange", "x/16": "light blue",
                          "x³/1": "wine red", "x³/16": "dark blue"}
_MORE_COLORS = ("#009E73", "#CC79A7", "#D55E00", "#999933", "#332288", "#949494")
#: How every lab figure numbers layers: from 0, like the heatmaps and the Dataset's ``layer``.
LAYER_NOTE = "layer 0 = first block after the patch embedding"


def grid_variables(ds) -> list[str]:
    """Variables of ``ds`` that can be drawn over epochs (numeric, with an ``epoch`` dim)."""
    return [str(k) for k, v in ds.data_vars.items() if "epoch" in v.dims and v.dtype.kind in "fiu"]


def default_log(var: str) -> bool:
    """Log y by default for attention norms, score scales and losses, linear otherwise."""
    return var.startswith("attention_norm") or var.endswith("loss") or var in ("score_mean_abs", "score_p99_abs")


def _reference_line(ds, var: str, bound: bool):
    """The dashed line of a variable's panels: √N (softmax's ceiling) for attention norms,
    |S| = 1 (where x³ crosses x) for the score scales; (None, "") for the rest."""
    if not bound:
        return None, ""
    if var.startswith("attention_norm") and "num_tokens" in ds.attrs:
        sqrt_n = math.sqrt(float(ds.attrs["num_tokens"]))
        return sqrt_n, f"√N = {sqrt_n:.2f}"
    if var in ("score_mean_abs", "score_p99_abs"):
        return 1.0, "|S| = 1 (x³ = x)"
    return None, ""


def series_colors(labels, known=()) -> tuple[str, ...]:
    """One colour per label, fixed per label (not per position in a selection).

    The paper's five activations keep :data:`ACTIVATION_COLORS`; any other label
    gets the next colour by its index in ``known`` (the full coordinate).
    """
    others = [k for k in known if k not in ACTIVATION_COLORS]
    out = []
    for lab in labels:
        if lab in ACTIVATION_COLORS:
            out.append(ACTIVATION_COLORS[lab])
        else:
            i = others.index(lab) if lab in others else len(others) + len(out)
            out.append(_MORE_COLORS[i % len(_MORE_COLORS)])
    return tuple(out)


@dataclass(frozen=True)
class LayerGridData:
    """Everything needed to draw a layer grid, without matplotlib.

    Attributes
    ----------
    values : numpy.ndarray, shape (panel, series, epoch), float64
        NaN where nothing was recorded (unfinished run, diverged steps).
    x : numpy.ndarray, shape (epoch,)
        Epoch numbers.
    panels : tuple of int
        Layer of each panel (0-based); ``(-1,)`` for a variable without ``layer``.
    panel_titles : tuple of str
        ``"layer 0"`` ... (0-based, as everywhere in the toolkit: :data:`LAYER_NOTE`),
        or the variable's long name.
    series : tuple of str
        Activation labels, one line each.
    colors : tuple of str
        Hex colour per series, the same in every panel.
    nrows, ncols : int
        Grid shape (3 x 4 for 12 layers).
    log : bool
        Log-scale y axis.
    ylim : (float, float)
        Shared y limits (decades on a log axis).
    bound : float or None
        A dashed reference line: √N on attention-norm panels, 1 on score-scale panels.
    bound_label : str
        Its legend entry (``"√N = 4.12"``).
    metric, long_name, units, ylabel : str
    selection : dict
        How extra dims were reduced, e.g. ``{"head": "mean"}``.
    note : str
        What the figure says about its panels (:data:`LAYER_NOTE` for per-layer variables).
    """

    values: np.ndarray
    x: np.ndarray
    panels: tuple
    panel_titles: tuple
    series: tuple
    colors: tuple
    nrows: int
    ncols: int
    log: bool
    ylim: tuple
    bound: float | None
    bound_label: str
    metric: str
    long_name: str
    units: str
    ylabel: str
    selection: dict = field(default_factory=dict)
    note: str = ""


def _ylim(values: np.ndarray, log: bool, bound: float | None, metric: str) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    if log:
        v = v[v > 0]
    if v.size == 0:
        raise EmptyInputError(f"no {'positive ' if log else ''}finite value of {metric!r} to draw; "
                              "pick other activations, layers or a linear scale")
    lo, hi = float(v.min()), float(v.max())
    if bound is not None and (not log or bound > 0):
        lo, hi = min(lo, bound), max(hi, bound)
    if log:
        return 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi) + 1e-9)
    if metric.endswith("accuracy"):
        return 0.0, 1.02
    pad = 0.05 * (hi - lo) or 0.5
    return lo - pad, hi + pad


_SCALE = Optional(OneOf(LINE_SCALES))


@checks_options(**O.LAYER_GRID, scale=_SCALE)
def prepare_layer_grid(ds, metric: str = "attention_norm", *, activations=None, layers=None,
                       head=None, scale: str | None = None, ncols: int | None = None,
                       bound: bool = True) -> LayerGridData:
    """Select and lay out the numbers of a layer grid.

    Parameters
    ----------
    ds : xarray.Dataset
        A lab result (:func:`toolkit.lab.run_experiment`): dims
        ``(activation, epoch, layer[, head])``.
    metric : str
        Variable to draw (default ``"attention_norm"``); any with an ``epoch`` dim.
    activations : sequence of str, optional
        Activation labels to draw, in this order; default all.
    layers : sequence of int, optional
        Layers (0-based) to draw, one panel each; default all.
    head : int or {"mean", "max"}, optional
        For a variable with a ``head`` dim: the head to draw (0-based), or how
        to reduce the heads: ``"mean"`` (the default, also None) or ``"max"``
        (the largest head at each epoch and layer: what "softmax never
        crosses √N" is about, since one head may reach it while the mean
        stays far below).
    scale : {"log", "linear"}, optional
        Of the y axis; default :func:`default_log` of ``metric`` (log or linear).
    ncols : int, optional
        Panels per row; default 4 (3 x 4 for 12 layers).
    bound : bool
        Carry the reference line: √N (attr ``num_tokens``) for attention-norm
        variables, 1 for ``score_mean_abs`` and ``score_p99_abs``.

    Returns
    -------
    LayerGridData

    Raises
    ------
    UnknownMetricError
        ``metric`` is not a variable with an ``epoch`` dim.
    InvalidOptionError
        ``scale`` not "log", "linear" or None, ``ncols`` < 1 (before any work).
    EmptyInputError
        An empty selection, or nothing finite (positive, for log) to draw.
    """
    var = metric
    names = grid_variables(ds)
    if var not in names:
        raise UnknownMetricError(var, names)
    da = ds[var]
    selection = {}
    if "head" in da.dims:
        heads = [int(h) for h in ds["head"].values.tolist()]
        head = "mean" if head is None else head
        if head not in HEAD_REDUCTIONS and (isinstance(head, (str, bool)) or head not in heads):
            raise EmptyInputError(f"head {head!r} not in the Dataset; it has heads {heads} "
                                  f"(or reduce them: {', '.join(map(repr, HEAD_REDUCTIONS))})")
        if head in HEAD_REDUCTIONS:
            da = getattr(da, head)("head")
            selection["head"] = head
        else:
            da, selection["head"] = da.sel(head=head), int(head)
    if "activation" in da.dims:
        known = [str(a) for a in ds["activation"].values.tolist()]
        series = known if activations is None else [str(a) for a in activations]
        missing = [a for a in series if a not in known]
        if missing:
            raise EmptyInputError(f"activation(s) {missing} not in the Dataset; it has {known}")
        da = da.sel(activation=series)
    else:
        known, series = [], [da.attrs.get("long_name", var)]
        da = da.expand_dims(activation=series)
    if not series:
        raise EmptyInputError("no activation selected; pick at least one")
    if "layer" in da.dims:
        panels = list(ds["layer"].values.tolist()) if layers is None else [int(x) for x in layers]
        if not panels:
            raise EmptyInputError("no layer selected; pick at least one")
        da = da.sel(layer=panels)
        titles, note = [f"layer {p}" for p in panels], LAYER_NOTE
    else:
        da, panels, titles = da.expand_dims(layer=[-1]), [-1], [da.attrs.get("long_name", var)]
        note = ""
    values = da.transpose("layer", "activation", "epoch").values.astype(float)
    log = default_log(var) if scale is None else scale == "log"
    line, line_label = _reference_line(ds, var, bound)
    ncols = min(ncols or 4, len(panels))
    units = str(ds[var].attrs.get("units", ""))
    long_name = str(ds[var].attrs.get("long_name", var))
    return LayerGridData(
        values=values, x=ds["epoch"].values, panels=tuple(panels), panel_titles=tuple(titles),
        series=tuple(series), colors=series_colors(series, known), nrows=math.ceil(len(panels) / ncols),
        ncols=ncols, log=log, ylim=_ylim(values, log, line, var), bound=line, bound_label=line_label, metric=var,
        long_name=long_name, units=units,
        ylabel=long_name + (f" ({units})" if units and not is_dimensionless(units) else ""), selection=selection,
        note=note)


def _draw_panel(ax, data: LayerGridData, i: int, *, title: str | None = None):
    for j, label in enumerate(data.series):
        ax.plot(data.x, data.values[i, j], color=data.colors[j], lw=1.4, label=label)
    if data.bound is not None:
        ax.axhline(data.bound, color="0.35", ls="--", lw=0.9, label=data.bound_label)
    if data.log:
        ax.set_yscale("log")
    ax.set_ylim(*data.ylim)
    ax.set_xlim(data.x[0], data.x[-1])
    ax.set_title(data.panel_titles[i] if title is None else title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def _new_figure(fig, figsize):
    if fig is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=figsize, layout="constrained")
    return fig


@checks_options(data=O.PREPARED, fig=O.FIG, figsize=O.FIGSIZE, legend=O.LEGEND, title=O.TITLE)
def draw_layer_grid(data: LayerGridData, *, fig=None, figsize=None, legend: str | None = "shared",
                    title: str | None = None):
    """Draw a prepared layer grid.

    Parameters
    ----------
    data : LayerGridData
    fig : matplotlib.figure.Figure, optional
        An empty figure to draw on (not closed). Default: a new pyplot figure.
    figsize : (float, float), optional
        Size of the new figure; default 3.2 in per column, 2.4 in per row.
    legend : {"shared", "panel", None}
        One legend below the grid, one in each panel's upper left, or none.
    title : str, optional
        Figure title; default the variable's long name.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig = _new_figure(fig, figsize or (3.2 * data.ncols, 2.4 * data.nrows + 0.8))
    axes = np.atleast_1d(fig.subplots(data.nrows, data.ncols, sharex=True, sharey=True, squeeze=False)).ravel()
    for i, ax in enumerate(axes):
        if i >= len(data.panels):
            ax.set_visible(False)
            continue
        _draw_panel(ax, data, i, title="" if data.panels == (-1,) else None)  # the suptitle names it
        if legend == "panel":
            ax.legend(loc="upper left", fontsize=7)
        if i % data.ncols == 0:
            ax.set_ylabel(data.ylabel)
        if i >= len(data.panels) - data.ncols:
            ax.set_xlabel("epoch")
    if legend == "shared":
        _shared_legend(fig, axes[0], data.ncols)
    fig.suptitle(_fitted(title or grid_title(data), fig))
    fit_ylabels(fig)
    return fig


def _fitted(title: str, fig, fontsize: float = 12.0) -> str:
    """``title`` broken into lines that fit the figure's width (two panels leave room for ~50 characters)."""
    import textwrap

    chars = max(16, int(fig.get_size_inches()[0] * 72 * 0.95 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(title, chars, break_on_hyphens=False)) or title


def grid_title(data: LayerGridData) -> str:
    """``"<long name> (max over heads; layer 0 = …)"``: what was selected and how layers count."""
    extra = [f"{v} over heads" if v in HEAD_REDUCTIONS else f"{k} {v}" for k, v in data.selection.items()]
    extra += [data.note] if data.note else []
    return data.long_name + (f" ({'; '.join(extra)})" if extra else "")


def _shared_legend(fig, ax, ncols: int):
    """One legend for the figure, sized to fit: below a grid of two or more columns (at most
    three entries per column of panels, so a narrow figure wraps it onto more rows), right
    of a single column (a one-panel figure is too narrow for a row of six labels)."""
    handles, labels = ax.get_legend_handles_labels()
    if ncols == 1:
        return fig.legend(handles, labels, loc="outside right upper", ncols=1, frameon=False)
    return fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3 * ncols),
                      frameon=False)


@checks_options(**O.LAYER_GRID, scale=_SCALE, legend=O.LEGEND, fig=O.FIG, figsize=O.FIGSIZE, title=O.TITLE)
def layer_grid(ds, metric: str = "attention_norm", *, activations=None, layers=None, head=None,
               scale: str | None = None, ncols: int | None = None, bound: bool = True,
               legend: str | None = "shared", fig=None, figsize=None, title: str | None = None):
    """Line grid: one panel per layer, epochs on x, one line per activation.

    The seed figure of Saratchandran et al. (arXiv:2410.18613): 12 layers in
    3 x 4 panels titled "layer 0" ... "layer 11" (0-based, as every figure of
    the toolkit; the paper counts from 1), log-scale attention norm,
    the same y limits and colours in every panel, one shared legend, and the
    softmax bound √N dashed. Parameters as in :func:`prepare_layer_grid` and
    :func:`draw_layer_grid`.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> fig = layer_grid(toolkit.lab.load_result(), "attention_norm")  # doctest: +SKIP
    """
    data = prepare_layer_grid(ds, metric, activations=activations, layers=layers, head=head,
                              scale=scale, ncols=ncols, bound=bound)
    return draw_layer_grid(data, fig=fig, figsize=figsize, legend=legend, title=title)


@checks_options(ds=O.DS, metrics=Names("run-level variables of the lab result"),
                activations=O.LABELS["activations"], scale=_SCALE, fig=O.FIG, figsize=O.FIGSIZE)
def training_curves(ds, metrics=("train_loss", "test_accuracy"), *, activations=None,
                    scale: str | None = None, fig=None, figsize=None):
    """Per-activation curves of run-level variables (loss, accuracy), one panel each.

    Parameters
    ----------
    ds : xarray.Dataset
        A lab result.
    metrics : sequence of str
        Variables with dims (activation, epoch); default train loss and test accuracy.
    activations : sequence of str, optional
        Default all.
    scale : {"log", "linear"}, optional
        Of every panel's y axis; default :func:`default_log` per variable.
    fig, figsize
        As in :func:`draw_layer_grid`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    prepared = [prepare_layer_grid(ds, v, activations=activations, scale=scale) for v in metrics]
    fig = _new_figure(fig, figsize or (4.2 * len(prepared), 3.4))
    axes = np.atleast_1d(fig.subplots(1, len(prepared), squeeze=False)).ravel()
    for ax, data in zip(axes, prepared, strict=False):
        _draw_panel(ax, data, 0, title=data.long_name)
        ax.set_xlabel("epoch")
        ax.set_ylabel(data.ylabel)
    _shared_legend(fig, axes[0], len(prepared))
    fit_ylabels(fig)
    return fig
