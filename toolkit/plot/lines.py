"""Each component's change over training steps: one line per component.

:func:`prepare_component_lines` reduces a checkpoint series
(:func:`toolkit.compare_series`, dims ``(checkpoint, layer, component)``) over
layers into a :class:`ComponentLinesData` of plain numbers and labels (no
matplotlib); :func:`draw_component_lines` draws one on an Axes;
:func:`component_lines` does both.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from toolkit.architectures.vocabulary import ALL_COMPONENTS, COMPONENTS
from toolkit.constraints import Flag, OneOf, Text, checks_options
from toolkit.errors import EmptyInputError, UnknownMetricError
from toolkit.plot import _options as O
from toolkit.plot._layout import is_dimensionless

#: One fixed colour per component (seaborn "colorblind"), the same in every figure; the components
#: some architectures add take the colour of the canonical one they sit beside (``attn.q_a`` that
#: of ``attn.q``, ``mlp.shared.up`` that of ``mlp.up``), the router grey.
COMPONENT_COLORS: dict[str, str] = {**dict(zip(COMPONENTS, (
    "#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#56b4e9"), strict=True)),
    "attn.q_a": "#0173b2", "attn.kv_a": "#de8f05", "mlp.router": "#949494", "mlp.shared.up": "#cc78bc",
    "mlp.shared.down": "#ca9161", "mlp.shared.gate": "#56b4e9"}
#: Line style per component: solid for the canonical seven, dashed for the added ones (told apart by it).
COMPONENT_LINESTYLES: dict[str, str] = {c: "-" if c in COMPONENTS else "--" for c in ALL_COMPONENTS}
REDUCTIONS = ("mean", "median", "max", "min")
#: The y scales of a line figure (``scale=``).
LINE_SCALES = ("linear", "log")


@dataclass(frozen=True)
class ComponentLinesData:
    """Everything needed to draw the lines, without matplotlib.

    Attributes
    ----------
    x : numpy.ndarray, shape (checkpoint,)
        Training steps (the ``step`` coordinate, else checkpoint numbers), ascending.
    values : numpy.ndarray, shape (component, checkpoint), float64
        The metric reduced over the selected layers (NaN cells ignored).
    components : tuple of str
        The Dataset's components with at least one finite value, in its order (the canonical
        seven, then those the architecture adds: ``mlp.router``, ``mlp.shared.*``, ``attn.q_a``...).
    labels, colors, linestyles : tuple of str
        Legend label, colour and line style per line.
    layers : tuple of int
        Layers the reduction ran over.
    metric, long_name, units, reduce, xlabel, ylabel, title : str
    logy : bool
    """

    x: np.ndarray
    values: np.ndarray
    components: tuple
    labels: tuple
    colors: tuple
    layers: tuple
    metric: str
    long_name: str
    units: str
    reduce: str
    xlabel: str
    ylabel: str
    title: str
    logy: bool = False
    selection: dict = field(default_factory=dict)
    linestyles: tuple = ()


@checks_options(ds=O.DS, metric=Text("a metric of the series, e.g. 'relative_change'"), reduce=OneOf(REDUCTIONS),
                layers=O.LABELS["layers"], components=O.LABELS["components"], scale=OneOf(LINE_SCALES),
                title=O.TITLE)
def prepare_component_lines(ds, metric: str = "relative_change", *, reduce: str = "mean", layers=None,
                            components=None, scale: str = "linear", title: str | None = None) -> ComponentLinesData:
    """Reduce a checkpoint series to one value per component and step.

    Parameters
    ----------
    ds : xarray.Dataset
        Dims ``(checkpoint, layer, component)`` (a :func:`toolkit.compare_series`
        result); a ``step`` coordinate along ``checkpoint`` gives the x axis.
    metric : str, default "relative_change"
        Variable to draw (any diff metric).
    reduce : {"mean", "median", "max", "min"}, default "mean"
        How the layers are combined, NaN cells skipped.
    layers : (first, last) tuple or list of int, optional
        Layers to combine; a 2-tuple is an inclusive range. Default: all.
    components : iterable of str, optional
        Lines to draw; default every component the model has.
    scale : {"linear", "log"}, default "linear"
        Of the y axis (on a log axis, steps with values <= 0 are not drawn).
    title : str, optional
        Default ``"<model>: <long_name>, <reduce> over layers a-b"``.

    Returns
    -------
    ComponentLinesData

    Raises
    ------
    UnknownMetricError
        ``metric`` is not a variable with ``checkpoint``, ``layer`` and ``component`` dims.
    EmptyInputError
        No layer, component or finite value selected.
    """
    names = [str(k) for k, v in ds.data_vars.items() if {"checkpoint", "layer", "component"} <= set(v.dims)]
    if metric not in names:
        raise UnknownMetricError(metric, names)
    da = ds[metric]
    if layers is not None:
        pair = isinstance(layers, tuple) and len(layers) == 2
        wanted = list(range(layers[0], layers[1] + 1)) if pair else list(layers)
        da = da.sel(layer=[x for x in da["layer"].values.tolist() if x in set(wanted)])
    if da.sizes["layer"] == 0:
        raise EmptyInputError(f"no layer selected from {ds['layer'].values.tolist()}")
    keep = [str(c) for c in da["component"].values if components is None or c in set(components)]
    x = ds["step"].values if "step" in ds.coords else ds["checkpoint"].values
    order = np.argsort(x, kind="stable")
    arr = da.sel(component=keep).transpose("component", "layer", "checkpoint").values.astype(float)[:, :, order]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column is NaN, not a warning
        values = getattr(np, f"nan{reduce}")(arr, axis=1)
    finite = [i for i in range(len(keep)) if np.isfinite(values[i]).any()]
    if not finite:
        raise EmptyInputError(f"no finite value of {metric!r} for the selected layers and components")
    keep, values = [keep[i] for i in finite], values[finite]
    rows = tuple(int(v) for v in da["layer"].values)
    long_name = str(da.attrs.get("long_name", metric))
    units = str(da.attrs.get("units", ""))
    model = str(ds.attrs.get("model_name", "") or "")
    span = f"layers {rows[0]}-{rows[-1]}" if len(rows) > 1 else f"layer {rows[0]}"
    return ComponentLinesData(
        x=np.asarray(x)[order], values=values, components=tuple(keep),
        labels=tuple(str(c) for c in keep),
        colors=tuple(COMPONENT_COLORS.get(c, "#949494") for c in keep),
        linestyles=tuple(COMPONENT_LINESTYLES.get(c, "--") for c in keep),
        layers=rows, metric=metric, long_name=long_name, units=units, reduce=reduce,
        xlabel="training step" if "step" in ds.coords else "checkpoint",
        ylabel=f"{reduce} {long_name}" + (f" ({units})" if units and not is_dimensionless(units) else ""),
        title=title if title is not None else f"{model + ': ' if model else ''}{long_name}, {reduce} over {span}",
        logy=scale == "log", selection={"reference": ds.attrs.get("reference", "")})


@checks_options(data=O.PREPARED, ax=O.AX, legend=Flag(), marker=O.marker)
def draw_component_lines(data: ComponentLinesData, *, ax=None, legend: bool = True, marker: str = "o"):
    """Draw prepared lines on ``ax`` (default: a new pyplot figure); returns the Axes."""
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    styles = data.linestyles or ("-",) * len(data.labels)
    for label, color, style, y in zip(data.labels, data.colors, styles, data.values, strict=True):
        ok = np.isfinite(y) & ((y > 0) if data.logy else True)
        ax.plot(data.x[ok], y[ok], marker=marker, color=color, ls=style, label=label, lw=1.6, ms=4)
    if data.logy:
        ax.set_yscale("log")
    if np.issubdtype(np.asarray(data.x).dtype, np.integer):
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(data.xlabel)
    ax.set_ylabel(data.ylabel)
    ax.set_title(data.title, fontsize="medium")
    ax.grid(True, alpha=0.3)
    if legend:
        ax.legend(title="component", fontsize="small", frameon=False, loc="best")
    return ax


@checks_options(ds=O.DS, metric=Text("a metric of the series, e.g. 'relative_change'"), ax=O.AX,
                reduce=OneOf(REDUCTIONS), layers=O.LABELS["layers"], components=O.LABELS["components"],
                scale=OneOf(LINE_SCALES), legend=Flag(), title=O.TITLE)
def component_lines(ds, metric: str = "relative_change", *, ax=None, reduce: str = "mean", layers=None,
                    components=None, scale: str = "linear", legend: bool = True, title: str | None = None):
    """Line plot of each component's change (reduced over layers) against the training step.

    Parameters are those of :func:`prepare_component_lines` plus ``ax`` (default:
    a new pyplot figure) and ``legend``.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> series = toolkit.compare_series(run.checkpoints, steps=run.steps)   # doctest: +SKIP
    >>> toolkit.plot.component_lines(series, "update_density")              # doctest: +SKIP
    """
    data = prepare_component_lines(ds, metric, reduce=reduce, layers=layers, components=components, scale=scale,
                                   title=title)
    return draw_component_lines(data, ax=ax, legend=legend)
