"""Each layer's value over training steps, for one component: one line per layer (the lab's figure, any model).

:func:`prepare_layer_lines` picks the numbers from a Dataset with a ``step`` dimension (a watched run,
:func:`toolkit.watch`) into a :class:`LayerLinesData` (no matplotlib); :func:`draw_layer_lines` draws it;
:func:`layer_lines` does both. Layers are coloured along viridis from the first (dark) to the last
(yellow), so depth reads as a gradient, as in the attention lab's norm figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.constraints import Flag, Optional, Text, Whole, checks_options
from toolkit.errors import EmptyInputError, UnknownMetricError
from toolkit.plot import _options as O
from toolkit.plot._layout import is_dimensionless


@dataclass(frozen=True)
class LayerLinesData:
    """The lines, without matplotlib.

    Attributes
    ----------
    x : numpy.ndarray, shape (step,)
        The recorded steps, ascending.
    values : numpy.ndarray, shape (layer, step), float64
        The metric of ``component`` in each layer (NaN where not measured).
    layers : tuple of int
    component, metric, xlabel, ylabel, title : str
    """

    x: np.ndarray
    values: np.ndarray
    layers: tuple
    component: str
    metric: str
    xlabel: str
    ylabel: str
    title: str


_EXPERT = Optional(Whole(minimum=0, meaning="a routed expert's index"))


@checks_options(ds=O.DS, metric=Text("a (step, layer, component) variable, e.g. 'frobenius_norm'"),
                component=Text("a component of the Dataset, e.g. 'attn.q'"), expert=_EXPERT)
def prepare_layer_lines(ds, metric: str, component: str, *, expert=None) -> LayerLinesData:
    """The numbers of :func:`layer_lines`.

    Parameters
    ----------
    ds : xarray.Dataset
        Dims ``(step, layer, component)`` (``toolkit.watch``'s records).
    metric : str
        A variable with those dims.
    component : str
        One of the Dataset's components.
    expert : int, optional
        For a ``<metric>_per_expert`` variable: which routed expert (default: the (layer, component) mean).

    Raises
    ------
    UnknownMetricError
        ``metric`` is not a (step, layer, component) variable, or ``component`` is not in the Dataset.
    EmptyInputError
        No finite value to draw.
    """
    names = [str(k) for k, v in ds.data_vars.items() if {"step", "layer", "component"} <= set(v.dims)]
    if metric not in names:
        raise UnknownMetricError(metric, names)
    comps = [str(c) for c in ds["component"].values]
    if component not in comps:
        raise UnknownMetricError(component, comps)
    da = ds[metric].sel(component=component)
    if expert is not None and "expert" in da.dims:
        da = da.sel(expert=expert)
    da = da.sortby("step").transpose("layer", "step", ...)
    values = np.asarray(da.values, dtype=float).reshape(da.sizes["layer"], da.sizes["step"])
    if not np.isfinite(values).any():
        raise EmptyInputError(f"no finite value of {metric!r} for {component} in any layer and step")
    long_name = str(ds[metric].attrs.get("long_name", metric))
    units = str(ds[metric].attrs.get("units", ""))
    return LayerLinesData(
        x=np.asarray(da["step"].values), values=values, layers=tuple(int(v) for v in da["layer"].values),
        component=component, metric=metric, xlabel="training step",
        ylabel=long_name + (f" ({units})" if units and not is_dimensionless(units) else ""),
        title=f"{component}, one line per layer")


@checks_options(data=O.PREPARED, ax=O.AX, colorbar=Flag())
def draw_layer_lines(data: LayerLinesData, *, ax=None, colorbar: bool = True):
    """Draw :class:`LayerLinesData` on ``ax`` (default: a new figure); returns the Axes."""
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib import cm, colors
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    norm = colors.Normalize(vmin=min(data.layers), vmax=max(max(data.layers), min(data.layers) + 1))
    cmap = plt.get_cmap("viridis")
    for layer, row in zip(data.layers, data.values, strict=True):
        finite = np.isfinite(row)
        ax.plot(data.x[finite], row[finite], color=cmap(norm(layer)), marker="o" if finite.sum() < 30 else None,
                markersize=3, linewidth=1.2)
    ax.set(xlabel=data.xlabel, ylabel=textwrap.fill(data.ylabel, 36), title=data.title)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    if colorbar:
        bar = ax.figure.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="layer")
        bar.locator = MaxNLocator(integer=True)
        bar.update_ticks()
    return ax


@checks_options(ds=O.DS, metric=Text("a (step, layer, component) variable, e.g. 'frobenius_norm'"),
                component=Text("a component of the Dataset, e.g. 'attn.q'"), ax=O.AX, expert=_EXPERT)
def layer_lines(ds, metric: str, component: str, *, ax=None, expert=None):
    """One line per layer of ``metric`` for ``component`` against the training step.

    Parameters are those of :func:`prepare_layer_lines` plus ``ax``.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> toolkit.plot.layer_lines(monitor.dataset, "relative_change_since_start", "attn.q")  # doctest: +SKIP
    """
    return draw_layer_lines(prepare_layer_lines(ds, metric, component, expert=expert), ax=ax)
