"""Layer x component heatmaps (figure 1 of the design), and layer x head / kv_head ones.

Preparation is split from drawing: :func:`prepare_heatmap` turns a Dataset and
a selection into a :class:`HeatmapData` (plain numbers and labels, no
matplotlib), :func:`draw_heatmap` draws one on an Axes, and :func:`heatmap` does
both. Tests, widgets and the CLI all go through these three functions.
"""

from __future__ import annotations

import numpy as np

from toolkit.constraints import Optional, Text, Whole, checks_options
from toolkit.errors import EmptyInputError, ExtraDimensionError, UnknownMetricError
from toolkit.plot import _options as O
from toolkit.plot import _style
from toolkit.plot._layout import (
    MIN_VALUE_FONT,
    auto_figsize,
    cell_reasons,
    most_common,
    unit_text,
    value_font_size,
    wrap_title,
)
from toolkit.plot._select import (
    COL_DIMS,
    REDUCIBLE_DIMS,
    ROW_DIM,
    column_dim,
    describe,
    metric_names,
    model_name,
    select,
    tick_rows,
)
from toolkit.plot.fit_marks import MAX_RELATIVE_WIDTH, draw_marks, panel_marks
from toolkit.plot.heatmap_data import HeatmapData
from toolkit.plot.panel_scale import panel_scale


@checks_options(**O.HEATMAP, digits=Optional(Whole(minimum=1, maximum=17)),
                center_of=Optional(Text("what a given centre is the median of, e.g. 'median of 3 panels pooled'")))
def prepare_heatmap(data, metric: str | None = None, *, center=None, scale: str = "auto",
                    robust: bool = True, layers=None, components=None, title: str | None = None,
                    vmin: float | None = None, vmax: float | None = None, log: bool | None = None,
                    digits: int | None = None, center_of: str | None = None,
                    mark_width: float = MAX_RELATIVE_WIDTH, **selection) -> HeatmapData:
    """Select one 2-D ``(layer, component)`` panel and work out its colours and labels.

    Parameters
    ----------
    data : xarray.Dataset or xarray.DataArray
        Statistics with dims ``(layer, component)``, ``(layer, head)`` or
        ``(layer, kv_head)``, possibly with extra dims (``checkpoint``,
        ``head``, ``step`` ...). The columns are the first of ``component``,
        ``head``, ``kv_head`` the variable has; the others need a selection.
    metric : str, optional
        Variable name (``"stable_rank"``). Default: the first metric of the
        Dataset (ignored for a DataArray).
    center : "median", float or None, default None
        Value drawn white on the diverging scale; the limits stop at the
        metric's natural domain (:func:`toolkit.plot.scale_rules.domain`: a
        condition number's bar never runs below 1). None: the variable's natural
        centre (its attr ``natural_center``: 0 for a difference, 1 for a
        ratio) if it has one. ``"median"`` gives the published figures'
        blue-white-orange look around the panel's median (with
        ``scale="auto"``, the diverging scale).
    scale : {"auto", "diverging", "sequential", "log"}, default "auto"
        ``"auto"``: diverging around a natural (or given) centre, else log when
        the positive values span more than two decades, else sequential
        (:func:`toolkit.plot.scales.resolve_scale`). ``"diverging"`` without a
        centre is centred on the median.
    robust : bool, default True
        Colour limits from the 2nd/98th percentiles instead of min/max, so a
        few outliers do not wash out the rest; the colorbar then marks the
        clipped end(s) with an arrow. False: the data's min and max, so an
        outlier (a massive activation) is shown as the extreme it is.
    layers : slice, (first, last) tuple, or list of int, optional
        Layers to show; a 2-tuple and a slice are inclusive label ranges.
    components : iterable of str, optional
        Columns to keep (``{"attn.q", "mlp.up"}``, or head numbers for a
        head heatmap); kept in the coordinate's order.
    title : str, optional
        Default: ``"<model>: <long_name> (<selection>)"``.
    vmin, vmax : float, optional
        Fixed colour limits (used by ``heatmaps(..., share_scale=True)``). A
        diverging scale widens them to the same distance on both sides of its
        centre (the white stays the centre).
    log : bool, optional
        Whether a diverging scale works in decades; default: when every value
        is positive and they span more than two decades
        (:func:`toolkit.plot.scales.diverging_log`).
    digits : int, optional
        Significant digits of the panel's labels; default
        :func:`toolkit.plot.numbers.digits_for` of its values and limits
        (panels on one scale get their pooled one).
    center_of : str, optional
        What a given ``center`` is the median of, said on the colour bar
        (``white = 0.772 (median of 3 panels pooled)``), with the panel's own
        median under it; :func:`toolkit.plot.scales.shared_scale` sets it for
        panels that share one scale.
    mark_width : float, default 0.5
        The stated limit of the mark of an uncertain alpha: a cell of
        ``alpha`` whose 95 % interval is wider than this fraction of alpha
        gets a black corner (:data:`toolkit.plot.fit_marks.MAX_RELATIVE_WIDTH`;
        the ranking itself is the metric ``alpha_ci_relative_width``,
        :func:`toolkit.plot.fit_marks.with_relative_width`).
    **selection
        One label per extra dimension, e.g. ``checkpoint="step-1000"``,
        ``head=3``, or a 1-D coordinate such as ``step=1000``. A dimension
        without a coordinate is selected by position. ``expert``, ``head``
        and ``kv_head`` also take ``"mean"``, ``"max"`` or ``"min"``
        (NaN-skipping) to collapse the dimension; selecting the component
        (``component="mlp.up"``) of a (layer, component, expert) variable
        makes the experts the columns.

    Returns
    -------
    HeatmapData
        ``values`` has shape (n_layers, n_cols), row 0 = lowest layer.

    Raises
    ------
    toolkit.errors.UnknownMetricError
        ``metric`` is not a metric of the Dataset.
    ValueError
        A selection label that does not exist, an unknown component, or an unknown ``scale``.
    toolkit.errors.ExtraDimensionError
        An extra dimension left unselected (``stable_rank_per_expert`` without ``expert=``);
        the message says how to choose or reduce it.
    toolkit.errors.EmptyInputError
        The selection leaves no cell, or values that are all +-inf (or none
        positive on the log scale). A panel of NaN only is drawn hatched,
        with the stored reason as its ``caption``.
    """
    import xarray as xr

    attrs = {}
    if isinstance(data, xr.Dataset):
        names = metric_names(data)
        metric = metric if metric is not None else (names[0] if names else None)
        if metric not in names:
            raise UnknownMetricError(str(metric), names)
        attrs, da = dict(data.attrs), data[metric]
    else:
        da, metric = data, str(data.name or metric or "value")
    if ROW_DIM not in da.dims or column_dim(da.dims) is None:
        raise ValueError(f"{metric!r} has dims {tuple(da.dims)}; a heatmap needs 'layer' and one of "
                         + ", ".join(repr(d) for d in COL_DIMS))
    source = da
    da = select(da, selection)
    col_dim = column_dim(da.dims)  # after the selection: component="mlp.up" makes experts the columns
    if col_dim is None:
        raise ValueError(f"the selection {describe(selection)} leaves {metric!r} no column dimension "
                         f"(one of {', '.join(COL_DIMS)}); select fewer")
    if layers is not None:
        if isinstance(layers, tuple) and len(layers) == 2:
            layers = slice(*layers)
        # a range of labels needs them sorted: on [2, 0, 1], sel(layer=slice(0, 2)) is empty
        da = da.sortby(ROW_DIM).sel(layer=layers) if isinstance(layers, slice) else \
            select(da, {ROW_DIM: list(layers)})
    if components is not None:
        wanted = {str(c) for c in ([components] if isinstance(components, str) else components)}
        known = [str(c) for c in da[col_dim].values]
        if wanted - set(known):
            raise ValueError(f"unknown {col_dim}(s) {sorted(wanted - set(known))}; known: {known}")
        da = da.isel({col_dim: [i for i, c in enumerate(known) if c in wanted]})
    extra = [d for d in da.dims if d not in (ROW_DIM, col_dim)]
    if any(da.sizes[d] > 1 for d in extra):
        d = next(d for d in extra if da.sizes[d] > 1)
        shown = da[d].values.tolist() if d in da.coords else f"{da.sizes[d]} positions"
        first = shown[0] if isinstance(shown, list) and shown else 0
        how = f" or reduce it with mean / max / min: {d}='mean'" if d in REDUCIBLE_DIMS else ""
        if col_dim == "component" and d == "expert":
            how += ", or draw the experts as columns: component='mlp.up'"
        raise ExtraDimensionError(metric, d, shown, f"choose one: toolkit.plot.heatmap(ds, {metric!r}, "
                                  f"{d}={first!r}){how}")
    da = da.squeeze(extra, drop=False).transpose(ROW_DIM, col_dim).sortby(ROW_DIM)
    values = np.asarray(da.values, dtype=np.float64)
    if values.size == 0:
        raise EmptyInputError(f"the selection leaves no cell of {metric!r} to draw")
    reasons = cell_reasons(da, metric)
    long_name = str(da.attrs.get("long_name") or metric.replace("_", " "))
    colours = panel_scale(values, metric=str(metric), attrs=da.attrs, scale=scale, center=center,
                          center_of=center_of, robust=robust, vmin=vmin, vmax=vmax, log=log, digits=digits)
    caption = colours.caption
    if np.isnan(values).all():  # nothing defined (delta ranks at step 0): hatched, with the reason
        why = most_common(reasons[reasons != ""]) if reasons.size else ""
        caption = f"{long_name} is undefined in every cell" + (f": {why}" if why else "")
    rows = tuple(int(x) for x in da[ROW_DIM].values)
    cols = tuple(x.item() if hasattr(x, "item") else x for x in da[col_dim].values)
    yticks, ytick_labels = tick_rows(rows)
    if title is None:
        name, sel = model_name(attrs), describe(selection, source)
        title = (f"{name}: " if name else "") + long_name + (f" ({sel})" if sel else "")
    units = str(da.attrs.get("units", ""))
    return HeatmapData(
        values=values, rows=rows, cols=cols, col_dim=col_dim, col_labels=tuple(str(c) for c in cols),
        yticks=yticks, ytick_labels=ytick_labels, metric=str(metric), long_name=long_name,
        units=units, scale=colours.scale, vmin=colours.vmin, vmax=colours.vmax, center=colours.center,
        cbar_ticks=colours.ticks, cbar_label=_cbar_label(long_name, unit_text(units), colours.text),
        title=title, extend=colours.extend, selection=dict(selection), reasons=reasons, caption=caption,
        constant=colours.constant, log=colours.log, digits=colours.digits, span=colours.span,
        mark_width=float(mark_width),
        marks=panel_marks(data, str(metric), selection, rows, cols, col_dim, max_relative_width=mark_width))


def _cbar_label(long_name: str, units: str, scale_text: str = "") -> str:
    """``long_name (units)``, with the units on a second line when the label is long, then what the
    scale is (``log scale``, ``white = median 0.0912``) on a line of its own."""
    label = long_name + ("\n" + units.lstrip(" ,") if len(long_name + units) > 30 and units else units)
    return label + (f"\n{scale_text}" if scale_text else "")


@checks_options(prepared=O.PREPARED, ax=O.AX, **O.CBAR)
def draw_heatmap(prepared: HeatmapData, *, ax=None, annotate: bool = False, cbar: bool = True,
                 cbar_kws: dict | None = None):
    """Draw a :class:`HeatmapData` on ``ax``.

    Layer 0 (``rows[0]``) is at the bottom. The x axis is labelled with the
    column dimension (``head``, ``kv_head``; nothing for components). NaN
    cells show a hatched grey background and the x label says so; a cell
    whose alpha is uncertain (``prepared.marks``) gets a black corner and the
    x label says what it means (:mod:`toolkit.plot.fit_marks`); the
    ``caption`` (``constant: 0``, or why a wholly undefined panel is so) is
    added under it. A long title is wrapped to the figure's width. The
    colorbar has an arrow at each end where values lie beyond the limits.
    With ``annotate`` the values are printed at :func:`value_font_size`;
    when the cells are too small for :data:`MIN_VALUE_FONT` they are not
    printed and the x label says why (draw a taller figure, see
    :func:`auto_figsize`).

    Returns
    -------
    matplotlib.axes.Axes
        With the mesh as ``ax.collections[0]`` and, when ``cbar``, the
        colorbar axes added to the same figure.
    """
    from matplotlib.patches import Rectangle

    p = prepared
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=auto_figsize(*p.values.shape, annotate=annotate), layout="constrained")
    n_rows, n_cols = p.values.shape
    norm, cm = p.norm(), p.colormap()
    mesh = ax.pcolormesh(np.arange(n_cols + 1), np.arange(n_rows + 1), p.drawn_values(),
                         cmap=cm, norm=norm, shading="flat")
    mask = p.nan_mask
    for i, j in zip(*np.nonzero(mask), strict=True):
        ax.add_patch(Rectangle((j, i), 1, 1, facecolor=_style.NAN_FACE, edgecolor=_style.NAN_EDGE,
                               hatch=_style.NAN_HATCH, linewidth=0, zorder=0.5))
    draw_marks(ax, p.marks)
    ax.set_xlim(0, n_cols)
    ax.set_ylim(0, n_rows)  # row 0 (lowest layer) at the bottom
    ax.set_xticks(np.arange(n_cols) + 0.5, p.col_labels, rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(np.asarray(p.yticks) + 0.5, p.ytick_labels)
    ax.tick_params(length=2)
    ax.set_ylabel("layer")
    notes = p.notes
    size = value_font_size(ax, n_rows, n_cols) if annotate else 0.0
    if annotate and size < MIN_VALUE_FONT:
        notes.append(f"values in cells off: {n_rows} rows leave {size:.1f} pt; draw a taller figure")
    ax.set_xlabel("\n".join(notes), fontsize=8 if len(notes) > 1 or p.caption or mask.any() else None)
    ax.set_title(wrap_title(p.title, ax), fontsize=10)
    if annotate and size >= MIN_VALUE_FONT:
        for i, j in zip(*np.nonzero(~mask), strict=True):
            v = p.values[i, j]
            r, g, b, _ = cm(norm(np.clip(v, p.vmin, p.vmax)))
            dark = 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.45
            ax.text(j + 0.5, i + 0.5, p.format(v), ha="center", va="center",
                    fontsize=size, color="white" if dark else "black")
    if cbar:
        kws = {"extend": p.extend, "label": p.cbar_label, "fraction": 0.07, "pad": 0.03, **(cbar_kws or {})}
        cb = ax.figure.colorbar(mesh, ax=ax, **kws)
        labels = p.tick_labels()
        if p.constant is not None:
            labels = [f"constant: {label}" for label in labels]
        cb.set_ticks(list(p.cbar_ticks), labels=labels)
        cb.minorticks_off()
    return ax


@checks_options(**O.HEATMAP, ax=O.AX, **O.CBAR)
def heatmap(data, metric: str | None = None, *, ax=None, center=None, scale: str = "auto",
            robust: bool = True, layers=None, components=None, annotate: bool = False, cbar: bool = True,
            cbar_kws: dict | None = None, title: str | None = None, vmin: float | None = None,
            vmax: float | None = None, log: bool | None = None, mark_width: float = MAX_RELATIVE_WIDTH,
            **selection):
    """Layer x component (or layer x head / kv_head) heatmap of one metric.

    Parameters are those of :func:`prepare_heatmap` plus:

    ax : matplotlib.axes.Axes, optional
        Default: a new pyplot figure sized to the number of layers.
    annotate : bool, default False
        Print each cell's value (3 significant digits).
    cbar : bool, default True
        Colorbar on the right, labelled with ``long_name`` and ``units``.
    cbar_kws : dict, optional
        Extra keywords for ``Figure.colorbar``.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> ds = toolkit.weight_stats()                     # doctest: +SKIP
    >>> toolkit.plot.heatmap(ds, "stable_rank", layers=(0, 11))  # doctest: +SKIP
    >>> act = toolkit.activation_stats()                # doctest: +SKIP
    >>> toolkit.plot.heatmap(act, "max_abs_activation", scale="log", robust=False)  # doctest: +SKIP
    >>> toolkit.plot.heatmap(act, "key_head_rms")       # columns: kv_head  # doctest: +SKIP
    """
    p = prepare_heatmap(data, metric, center=center, scale=scale, robust=robust, layers=layers,
                        components=components, title=title, vmin=vmin, vmax=vmax, log=log, mark_width=mark_width,
                        **selection)
    return draw_heatmap(p, ax=ax, annotate=annotate, cbar=cbar, cbar_kws=cbar_kws)
