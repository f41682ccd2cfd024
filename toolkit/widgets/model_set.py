"""The explorer's models and which panels it draws: one model, several side by side, or a difference / ratio of
two (:class:`ModelSet`)."""

from __future__ import annotations

import numpy as np

from toolkit.errors import EmptyInputError
from toolkit.plot._select import column_dim, model_name, select
from toolkit.plot.fit_marks import with_relative_width
from toolkit.plot.heatmap_figure import prepare_heatmap
from toolkit.plot.scales import CENTER_ATTR, shared_scale
from toolkit.widgets import _controls as C
from toolkit.widgets.cells import COMBINATIONS, Panel, combined, unique_labels
from toolkit.widgets.fit_choice import FitChoice

#: The controls' keywords of :func:`toolkit.plot.prepare_heatmap` that say how to draw, not which cells (the
#: others select along the Dataset's dims).
DRAWING_OPTIONS = ("scale", "robust", "layers", "components", "vmin", "vmax", "mark_width")


def models_of(data, labels=None) -> list[tuple[str, object]]:
    """``[(label, ds)]`` of the Datasets given; labels from the model names, made unique."""
    import xarray as xr

    items = list(data) if isinstance(data, (list, tuple)) else [data]
    if not items or not all(isinstance(d, xr.Dataset) for d in items):
        raise EmptyInputError("explore takes an xarray.Dataset or a list of them; got "
                              + (", ".join(type(d).__name__ for d in items) or "an empty list"))
    labels = labels if labels is not None else [model_name(d.attrs) or f"model {i}" for i, d in enumerate(items)]
    return list(zip(unique_labels(labels, len(items), "toolkit.widgets.explore"), items, strict=True))


def absent_components(datasets, components) -> list[str]:
    """The components no Dataset has a matrix for (BERT's ``mlp.gate``): no tensor name, no shape and no
    value in any of them. They keep their (hatched) column, but get no toggle."""
    present = dict.fromkeys(components, False)
    for ds in datasets:
        if "component" not in ds.dims:
            continue
        names = [str(c) for c in ds["component"].values]
        found = np.zeros(len(names), dtype=bool)
        for key in ("parameter_name", "n_rows"):
            if key in ds.coords and "component" in ds[key].dims:
                v = ds[key]
                has = (v != "") if v.dtype.kind in "OUS" else (v > 0)
                found |= has.any([d for d in v.dims if d != "component"]).transpose("component").values
        for var in ds.data_vars.values():
            if "component" in var.dims and var.dtype.kind == "f" and "index" not in var.dims:
                found |= var.notnull().any([d for d in var.dims if d != "component"]).transpose("component").values
        for name, ok in zip(names, found, strict=True):
            if name in present:
                present[name] |= bool(ok)
    return [c for c, ok in present.items() if not ok]


def applicable(da, selection: dict) -> dict:
    """The part of ``selection`` that ``da`` can take (its dims, and 1-D coords along them)."""
    return {k: v for k, v in selection.items()
            if k in da.dims or (k in da.coords and da[k].ndim == 1 and da[k].dims[0] in da.dims)}


class ModelSet:
    """The Datasets an explorer shows and the panels a view makes of them.

    Parameters
    ----------
    data : xarray.Dataset or list of xarray.Dataset
    labels : list of str, optional
        One per Dataset; default: the model names, made unique (:func:`models_of`).
    fit : str or dict, optional
        The fit to show first (:class:`~toolkit.widgets.fit_choice.FitChoice`).
    pending : bool, default False
        A pass is still measuring.

    Attributes
    ----------
    fit_choice : toolkit.widgets.fit_choice.FitChoice
        The "fit" menu; its ``models`` are the Datasets with the fit chosen.
    models : list of (str, xarray.Dataset)
    ds : xarray.Dataset
        The first model's Dataset.
    entries : list of (str, xarray.Dataset, dict)
        What the views combine: each model, or each checkpoint of one Dataset.
    """

    def __init__(self, data, labels=None, fit=None, *, pending: bool = False):
        self.fit_choice = FitChoice(models_of(data, labels), fit)
        self.use(self.fit_choice.models)
        self.pending = pending

    @property
    def pending(self) -> bool:
        """A pass is still measuring: empty cells read "not measured yet" and the fit menu waits."""
        return self._pending

    @pending.setter
    def pending(self, value: bool) -> None:
        self._pending = bool(value)
        self.fit_choice.enable(not self._pending)

    def use(self, models) -> None:
        """Show ``models`` (another fit's, newer cells): ``[(label, ds)]``, the same grid; each with alpha's
        interval ranked as a metric of its own where it has one
        (:func:`~toolkit.plot.fit_marks.with_relative_width`, computed anew from each fit's interval)."""
        models = [(label, with_relative_width(ds)) for label, ds in models]
        self.models, self.ds = models, models[0][1]
        self.entries = self._entries()

    def set_data(self, ds) -> None:
        """``ds`` in place of the (one) Dataset, under the same label, refitted as the fit menu says."""
        self.fit_choice.reset([(self.models[0][0], ds)], enabled=not self.pending)
        self.use(self.fit_choice.models)

    def _entries(self):
        """``[(label, ds, selection)]`` the views combine: each model, or each checkpoint of one Dataset."""
        if len(self.models) > 1:
            return [(lab, d, {}) for lab, d in self.models]
        ds = self.ds
        if "checkpoint" in ds.dims and ds.sizes["checkpoint"] > 1:
            return [(lab, ds, {"checkpoint": v}) for lab, v in C.dim_options(ds, "checkpoint")]
        return [(self.models[0][0], ds, {})]

    def panel_list(self, view: str, base: int = 0, target: int = -1) -> list[Panel]:
        """The panels of ``view`` (``one``, ``side``, ``difference`` or ``ratio``), without their metric's
        selection; ``base`` and ``target`` index :attr:`entries` (a difference or ratio)."""
        if view == "one":
            return [Panel(self.models[0][0], self.ds, {})]
        if view == "side":
            return [Panel(lab, d, sel) for lab, d, sel in self.entries]
        b, t = self.entries[base], self.entries[target]
        return [Panel(t[0], t[1], t[2], base=b, combine=view)]

    def default_base(self, metric: str) -> int:
        """The first entry whose ``metric`` is not all 0 or NaN (step 0 of a series compares the model with
        itself: a ratio over it would be empty), else the first."""
        for i, (_, ds, sel) in enumerate(self.entries[:-1]):
            try:
                values = np.asarray(select(ds[metric], applicable(ds[metric], sel)).values, dtype=float)
            except (KeyError, ValueError):
                continue
            if np.any(np.isfinite(values) & (values != 0)):
                return i
        return 0

    def prepare(self, selection: dict, *, view: str = "one", base: int = 0, target: int = -1,
                shared_range: bool = False):
        """The panels of ``view`` for ``selection`` (the keyword arguments of
        :func:`toolkit.plot.prepare_heatmap`, with ``metric``).

        Returns
        -------
        tuple
            ``(metric, panels, prepared, shared)``: the panels carry their full selection; ``shared``: the
            panels have one norm (same scale, limits and centre), as ``shared_range`` asks when they are several.
        """
        kws = dict(selection)
        metric = kws.pop("metric")
        extra = {k: kws.pop(k) for k in list(kws) if k not in DRAWING_OPTIONS}
        panels = []
        for p in self.panel_list(view, base, target):
            b = None
            if p.base is not None:
                b_label, b_ds, b_sel = p.base
                b = (b_label, b_ds, applicable(b_ds[metric], {**extra, **b_sel}))
            panels.append(Panel(p.label, p.ds, applicable(p.ds[metric], {**extra, **p.selection}), b, p.combine))
        prepared = [_prepare(p, metric, _own_columns(kws, p.ds[metric])) for p in panels]
        shared = len(prepared) > 1 and shared_range
        if shared:
            limits = {k: kws[k] for k in ("vmin", "vmax") if kws[k] is not None}
            one = shared_scale([q.values for q in prepared], scale=kws["scale"], robust=kws["robust"],
                               attrs=self.ds[metric].attrs, names=[p.label for p in panels])
            keywords = {**one.keywords(), **limits}
            if limits:  # a typed limit replaces the pooled one; the centre stays the pooled one
                keywords["center"] = one.center if one.scale == "diverging" else None
            prepared = [_prepare(p, metric, _own_columns({**kws, **keywords}, p.ds[metric])) for p in panels]
        return metric, panels, prepared, shared


def _own_columns(kws: dict, da) -> dict:
    """``kws`` with its ``components`` cut to those ``da`` holds: the toggles list the first model's, and a
    model shown beside it may lack one (its panel shows the components it has)."""
    comps = kws.get("components")
    if comps is None or "component" not in da.dims:
        return kws
    have = {str(c) for c in da["component"].values}
    return {**kws, "components": [c for c in comps if c in have]}


def _prepare(p: Panel, metric: str, kws: dict):
    if not p.combine:
        return prepare_heatmap(p.ds, metric, **kws, **p.selection)
    b_label, b_ds, b_sel = p.base
    t_da, b_da = select(p.ds[metric], p.selection), select(b_ds[metric], b_sel)
    da = combined(t_da, b_da, p.combine, col_dim=column_dim(t_da.dims), target=p.label, base=b_label)
    symbol, _, _, centre = COMBINATIONS[p.combine]
    da.attrs[CENTER_ATTR] = centre  # a difference centres on 0, a ratio on 1
    long_name = str(p.ds[metric].attrs.get("long_name") or metric)
    return prepare_heatmap(da, **kws, title=f"{long_name}: {p.label} {symbol} {b_label}")
