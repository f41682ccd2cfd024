"""Several heatmap panels side by side (models, checkpoints or metrics)."""

from __future__ import annotations

import math

from toolkit.constraint_types import DataOf, Exempt
from toolkit.constraints import Flag, Names, OneOf, Optional, Text, Whole, checks_options
from toolkit.plot import _options as O
from toolkit.plot.heatmap_figure import auto_figsize, draw_heatmap, prepare_heatmap
from toolkit.plot.scales import SCALE_CHOICES, shared_scale

#: Extra dimensions that ``heatmaps`` splits into panels when asked for nothing else.
PANEL_DIMS = ("checkpoint", "step", "epoch")


def _panels(data, metric, over):
    """List of (data, metric, selection) for each panel."""
    import xarray as xr

    if isinstance(data, (list, tuple)):
        if isinstance(metric, (list, tuple)):
            raise ValueError("pass either several datasets or several metrics, not both")
        return [(d, metric, {}) for d in data]
    if isinstance(metric, (list, tuple)):
        return [(data, m, {}) for m in metric]
    var = data[metric] if isinstance(data, xr.Dataset) and metric is not None else data
    if isinstance(var, xr.Dataset):  # metric None: the first metric
        from toolkit.plot._select import metric_names

        names = metric_names(var)
        var = var[names[0]] if names else var
    if over is None:
        over = next((d for d in PANEL_DIMS if d in getattr(var, "dims", ())), None)
    if over is None:
        return [(data, metric, {})]
    if over not in var.dims:
        raise ValueError(f"cannot make panels over {over!r}: dims are {tuple(var.dims)}")
    labels = var[over].values.tolist() if over in var.coords else list(range(var.sizes[over]))
    return [(data, metric, {over: lab}) for lab in labels]


@checks_options(data=DataOf(array=True, many=True),
                metric=Optional(Names("a variable of the data, or one per panel")),
                over=Optional(Text("a dimension of the metric, e.g. 'checkpoint'")), share_scale=Optional(Flag()),
                titles=O.TITLES, ncols=Optional(Whole(minimum=1)), figsize=O.FIGSIZE, annotate=Flag(),
                center=O.CENTER, scale=OneOf(SCALE_CHOICES), robust=Flag(),
                kwargs=Exempt("options of prepare_heatmap (which declares them) and labels of the data's other "
                              "dims, passed on to each panel"))
def heatmaps(data, metric=None, *, over: str | None = None, share_scale: bool | None = None,
             titles=None, ncols: int | None = None, figsize=None, annotate: bool = False,
             center=None, scale: str = "auto", robust: bool = True, **kwargs):
    """Several layer x component heatmaps side by side, sharing the component axis.

    Parameters
    ----------
    data : xarray.Dataset, DataArray, or list of them
        A list gives one panel per item (e.g. models of 28, 36 and 48 layers).
    metric : str or list of str, optional
        A list (with one Dataset) gives one panel per metric.
    over : str, optional
        With one Dataset and one metric: the extra dimension to split into
        panels. Default: the first of ``checkpoint``, ``step``, ``epoch`` the
        metric has; none gives a single panel.
    share_scale : bool, optional
        One norm for every panel (:func:`toolkit.plot.scales.shared_scale`:
        the same scale, limits *and* centre, from all panels' values pooled)
        and one colorbar, so a colour means one value in every panel. Default:
        shared when every panel shows one metric (the steps of a series, several
        models), so step 2 (max 9e-4) never looks as changed as step 4 (max
        1.5e-3); separate for panels of several metrics. False gives each panel
        its own range and colorbar.
    titles : list of str, optional
        Panel titles; default from each panel's model, metric and selection.
    ncols : int, optional
        Panels per row (default: all in one row).
    figsize : (float, float), optional
        Inches; default from the panel count and the largest layer count.
    annotate, center, scale, robust, **kwargs
        As for :func:`toolkit.plot.heatmap` (``layers``, ``components`` and
        selections such as ``head=3`` apply to every panel).

    Returns
    -------
    matplotlib.figure.Figure
        Its panel axes are ``fig.axes[:n_panels]`` (colorbars follow).

    Raises
    ------
    ValueError
        Both several datasets and several metrics, or an unknown ``over``.
    """
    import matplotlib.pyplot as plt

    specs = _panels(data, metric, over)
    if share_scale is None:
        share_scale = len({m for _, m, _ in specs}) == 1
    opts = dict(center=center, scale=scale, robust=robust, **kwargs)
    prepared = [prepare_heatmap(d, m, **opts, **sel) for d, m, sel in specs]
    if share_scale:
        one = shared_scale([p.values for p in prepared], scale=scale, center=center, robust=robust,
                           attrs=_attrs(specs[0]), names=_names(specs, titles))
        prepared = [prepare_heatmap(d, m, **{**opts, **one.keywords()}, **sel) for d, m, sel in specs]
    if titles is not None:
        from dataclasses import replace

        prepared = [replace(p, title=t) for p, t in zip(prepared, titles, strict=True)]
    n = len(prepared)
    ncols = min(ncols or n, n)
    nrows = math.ceil(n / ncols)
    if figsize is None:
        w, h = auto_figsize(max(p.values.shape[0] for p in prepared), max(p.values.shape[1] for p in prepared))
        figsize = (w * ncols - (0.9 * (ncols - 1) if share_scale else 0), h * nrows)
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")
    flat = axes.ravel()
    for p, ax in zip(prepared, flat, strict=False):
        draw_heatmap(p, ax=ax, annotate=annotate, cbar=not share_scale)
    for ax in flat[n:]:
        ax.remove()
    if share_scale:
        p = prepared[0]
        label = "\n".join(dict.fromkeys(q.cbar_label for q in prepared))  # unique, in panel order
        cb = fig.colorbar(flat[0].collections[0], ax=list(flat[:n]), extend=_merge_extend(prepared),
                          label=label, fraction=0.05 / ncols + 0.02, pad=0.02)
        cb.set_ticks(list(p.cbar_ticks), labels=p.tick_labels())
        cb.minorticks_off()
    return fig


def _attrs(spec) -> dict:
    """The attrs of a panel's variable (where its natural centre is recorded)."""
    data, metric, _ = spec
    var = data[metric] if metric is not None and hasattr(data, "data_vars") else data
    return dict(getattr(var, "attrs", {}) or {})


def _names(specs, titles) -> list | None:
    """What each panel is, for a pooled centre's label (``step 0, step 2, step 4``): the titles given, else
    the selections (``step 4``); None when a panel has neither (the label then counts the panels)."""
    from toolkit.plot._select import describe

    names = list(titles) if titles is not None else [describe(spec[2], _var(spec)) for spec in specs]
    return names if all(names) else None


def _var(spec):
    """The variable a panel's selection is made on (the data itself when it is one)."""
    data, metric, _ = spec
    return data[metric] if metric is not None and hasattr(data, "data_vars") else None


def _merge_extend(prepared) -> str:
    low = any(p.extend in ("min", "both") for p in prepared)
    high = any(p.extend in ("max", "both") for p in prepared)
    return {(False, False): "neither", (True, False): "min", (False, True): "max"}.get((low, high), "both")
