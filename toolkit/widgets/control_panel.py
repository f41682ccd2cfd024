"""The explorer's controls of what to draw: metric, fit, extra dimensions, columns, view, colour scale and
limits, layers and components; what they select (:meth:`ControlPanel.selection`)."""

from __future__ import annotations

import html
import math

import ipywidgets as W

from toolkit.plot._select import ROW_DIM, column_dim, describe
from toolkit.plot.fit_marks import MAX_RELATIVE_WIDTH
from toolkit.widgets import _controls as C
from toolkit.widgets.cells import COMBINATIONS
from toolkit.widgets.model_set import DRAWING_OPTIONS, absent_components


class ControlPanel:
    """The widgets that choose what the explorer draws, and the selection they make.

    Parameters
    ----------
    model_set : toolkit.widgets.model_set.ModelSet
        The models shown (read at each call: the live view replaces them).
    names : list of str
        The metrics offered (each model has them).
    metric : str, optional
        The metric shown first; default the first of ``names``.
    absent : list of str, optional
        Components none of the models has; default: found in the models (:func:`absent_components`).

    Attributes
    ----------
    controls : dict of str -> ipywidgets.Widget
        ``metric``, ``fit``, one selector per extra dimension, ``columns`` and ``component`` (with
        (layer, component, X) metrics), ``view``, ``base``, ``target``, ``range`` (with two or more models or
        checkpoints), ``scale``, ``robust``, ``vmin``, ``vmax``, ``mark_width`` (the stated limit of alpha's
        mark, shown with alpha), ``layers``, ``components`` (dict component -> ToggleButton).
    limits_note : ipywidgets.HTML
        Why a typed colour limit is not used.
    absent : list of str
        Components none of the models has (no toggle).
    dims : list of str
        The extra dimensions with a selector.
    """

    def __init__(self, model_set, names, metric=None, *, absent=None):
        self.model_set = model_set
        ds, models, entries = model_set.ds, model_set.models, model_set.entries
        c = self.controls = {}
        c["metric"] = W.Dropdown(options=C.metric_options(ds, names),
                                 value=metric or names[0], description="metric", style=C.WIDE,
                                 layout=W.Layout(width="max-content", min_width="16em"))
        c["fit"] = model_set.fit_choice.dropdown
        self.dims = C.selector_dims(ds, names)
        for d in self.dims:
            c[d] = W.Dropdown(options=C.dim_options(ds, d), description=d, style=C.WIDE,
                              layout=W.Layout(width="max-content"))
        comps = [str(x) for x in ds["component"].values] if "component" in ds.coords else []
        self.absent = absent_components([m for _, m in models], comps) if absent is None else \
            [c for c in comps if c in absent]
        col_choices = C.column_choices(ds, names)
        if len(col_choices) > 1:
            c["columns"] = W.Dropdown(options=col_choices, value="component", description="columns", style=C.WIDE)
            c["component"] = W.Dropdown(options=comps, description="component", style=C.WIDE)
        if len(entries) > 1:
            one = len(models) == 1
            c["view"] = W.ToggleButtons(options=C.VIEW_OPTIONS if one else C.VIEW_OPTIONS[1:],
                                        value="one" if one else "side", style={"button_width": "auto"})
            choices = [(lab, i) for i, (lab, _, _) in enumerate(entries)]
            base = model_set.default_base(names[0] if metric is None else metric)
            c["base"] = W.Dropdown(options=choices, value=base, description="base", style=C.WIDE,
                                   layout=W.Layout(width="max-content"))
            c["target"] = W.Dropdown(options=choices, value=len(choices) - 1, description="target", style=C.WIDE,
                                     layout=W.Layout(width="max-content"))
            c["range"] = W.ToggleButtons(options=(("shared", "shared"), ("separate", "separate")),
                                         value="shared", style={"button_width": "auto"},
                                         tooltips=["one colour scale for every panel: one colour, one value",
                                                   "each panel its own colour range"])
        c["scale"] = W.ToggleButtons(options=C.SCALE_OPTIONS, value="auto", style={"button_width": "auto"},
                                     tooltip=C.SCALE_TOOLTIP)
        c["robust"] = W.Checkbox(value=True, description="robust colour limits", indent=False,
                                 tooltip=C.ROBUST_TOOLTIP, layout=W.Layout(width="auto"))
        c["vmin"] = W.Text(value="", placeholder="auto", description="min", style=C.WIDE,
                           layout=W.Layout(width="9em"), continuous_update=False)
        c["vmax"] = W.Text(value="", placeholder="auto", description="max", style=C.WIDE,
                           layout=W.Layout(width="9em"), continuous_update=False)
        lo = min(int(m[ROW_DIM].min()) for _, m in models)
        hi = max(int(m[ROW_DIM].max()) for _, m in models)
        c["layers"] = W.IntRangeSlider(value=(lo, hi), min=lo, max=hi, description="layers",
                                       continuous_update=False, style=C.WIDE)
        c["components"] = {k: W.ToggleButton(value=True, description=k,
                                             layout=W.Layout(width="auto")) for k in comps if k not in self.absent}
        c["mark_width"] = W.BoundedFloatText(
            value=MAX_RELATIVE_WIDTH, min=0.01, max=100.0, step=0.05, description="mark alpha when its interval >",
            style=C.WIDE, layout=W.Layout(width="max-content"), continuous_update=False,
            tooltip="the black corner marks alpha cells whose 95 % interval is wider than this fraction of alpha "
                    "(the metric alpha_ci_relative_width ranks them all)")
        self.limits_note = W.HTML()

    def observe(self, on_metric, on_change) -> None:
        """Call ``on_metric(change)`` when the metric, the columns or the view change (what can be chosen
        changes with them), ``on_change(change)`` when another control does; the fit menu says its own."""
        for key, w in self.controls.items():
            if key == "components":
                for t in w.values():
                    t.observe(on_change, names="value")
            elif key != "fit":
                w.observe(on_metric if key in ("metric", "columns", "view") else on_change, names="value")

    def rows(self) -> list:
        """The rows of widgets above the figure."""
        c = self.controls
        first = [c["metric"], *(c[d] for d in self.dims), c["fit"]]
        first += [c["columns"], c["component"]] if "columns" in c else []
        rows = [W.HBox(first, layout=W.Layout(flex_flow="row wrap"))]
        if "view" in c:
            rows.append(W.HBox([C.labelled("view", c["view"]), c["base"], c["target"],
                                C.labelled("colour range", c["range"])], layout=W.Layout(flex_flow="row wrap")))
        toggles = list(c["components"].values())
        if self.absent:
            toggles.append(W.HTML(f"<small>no {', '.join(map(html.escape, self.absent))} in "
                                  f"{'these models' if len(self.model_set.models) > 1 else 'this model'} "
                                  "(hatched)</small>"))
        return rows + [W.HBox([C.labelled("colour", c["scale"], C.SCALE_TOOLTIP), c["robust"], c["mark_width"]],
                              layout=W.Layout(flex_flow="row wrap", align_items="center")),
                       W.HBox([W.Label("colour limits"), c["vmin"], c["vmax"], self.limits_note],
                              layout=W.Layout(align_items="center", flex_flow="row wrap")),
                       c["layers"], W.HBox(toggles, layout=W.Layout(flex_flow="row wrap", align_items="center"))]

    # -- what they select -------------------------------------------------------
    @property
    def metric(self) -> str:
        """The metric chosen."""
        return self.controls["metric"].value

    def columns(self) -> str:
        """What the columns are: ``component``, or the dimension chosen (``head``, ``expert`` ...)."""
        return self.controls["columns"].value if "columns" in self.controls else "component"

    def view(self) -> str:
        """``one``, ``side``, ``difference`` or ``ratio``."""
        return self.controls["view"].value if "view" in self.controls else "one"

    def pair(self) -> dict:
        """``base`` and ``target`` (entry numbers) of a difference or ratio; empty with one entry."""
        c = self.controls
        return dict(base=c["base"].value, target=c["target"].value) if "view" in c else {}

    def shared_range(self) -> bool:
        """Side-by-side panels share one colour scale."""
        return "range" in self.controls and self.controls["range"].value == "shared"

    def per_matrix(self) -> bool:
        """The columns are components: each cell is one matrix (with a spectrum)."""
        return self.columns() == "component" and "component" in self.model_set.ds[self.metric].dims

    def _col_dim(self, var) -> str:
        cols = self.columns()
        return cols if cols in var.dims else column_dim(var.dims)

    def limits(self):
        """``(vmin, vmax)`` typed in the boxes (None: automatic); one that cannot be used (not a number, not
        finite, min not below max) is left out and ``limits_note`` says why, so the figure stays (with
        automatic limits) instead of a message."""
        out, notes = [], []
        for key in ("vmin", "vmax"):
            text = self.controls[key].value.strip()
            try:
                value = float(text) if text else None
            except ValueError:
                value = None
                notes.append(f"{key[1:]} {text!r} is not a number")
            if value is not None and not math.isfinite(value):  # "nan", "inf", "1e999"
                value = None
                notes.append(f"{key[1:]} {text!r} is not a finite number")
            out.append(value)
        lo, hi = out
        if lo is not None and hi is not None and not lo < hi:
            notes.append(f"min {lo:g} is not below max {hi:g}")
            lo = hi = None
        self.limits_note.value = ("<span style='color:#b34d00'>" + html.escape("; ".join(notes))
                                  + ": automatic limits used</span>") if notes else ""
        return lo, hi

    def selection(self) -> dict:
        """Keyword arguments of :func:`toolkit.plot.prepare_heatmap` for the current controls (first panel)."""
        c = self.controls
        var = self.model_set.ds[self.metric]
        col_dim = self._col_dim(var)
        kws = {d: c[d].value for d in var.dims if d in c and d not in (col_dim, "component") and d != ROW_DIM}
        if col_dim != column_dim(var.dims):
            kws["component"] = c["component"].value  # a (layer, X) heatmap of one component
        comps = None
        if col_dim == "component" and "component" in var.dims:
            comps = [k for k in (str(x) for x in var["component"].values)
                     if k in self.absent or (k in c["components"] and c["components"][k].value)]
        vmin, vmax = self.limits()
        return dict(metric=self.metric, scale=c["scale"].value, robust=c["robust"].value,
                    layers=tuple(c["layers"].value), components=comps, vmin=vmin, vmax=vmax,
                    mark_width=float(c["mark_width"].value), **kws)

    def sync_enabled(self) -> None:
        """Enable only the controls that apply to the metric, columns and view chosen."""
        c = self.controls
        ds = self.model_set.ds
        var = ds[self.metric]
        col_dim = self._col_dim(var)
        combining = self.view() != "one" and len(self.model_set.models) == 1
        for d in C.selector_dims(ds, [k for _, k in c["metric"].options]):
            c[d].disabled = d not in var.dims or d == col_dim or (d == "checkpoint" and combining)
        if "columns" in c:
            c["columns"].disabled = not any(x in var.dims for x in c["columns"].options[1:])
            c["component"].disabled = col_dim == "component"
        for t in c["components"].values():
            t.disabled = col_dim != "component"
        c["mark_width"].layout.display = "" if self.metric == "alpha" else "none"  # the mark is alpha's
        if "view" in c:
            c["base"].disabled = c["target"].disabled = self.view() not in COMBINATIONS
            c["range"].disabled = self.view() != "side"

    def describe(self) -> list[str]:
        """What the figure shows, as file-name parts: metric, selection (one view), view, layers (zoomed)."""
        c = self.controls
        sel = {k: v for k, v in self.selection().items() if k != "metric" and k not in DRAWING_OPTIONS}
        view, metric = self.view(), self.metric
        parts = [metric, describe(sel, self.model_set.ds[metric]) if sel and view == "one" else "",
                 "" if view == "one" else view]
        lo, hi = c["layers"].value
        if (lo, hi) != (c["layers"].min, c["layers"].max):
            parts.append(f"layers{lo}-{hi}")
        return parts
