"""The explorer's controls: which widgets, their options and labels (no drawing here)."""

from __future__ import annotations

import ipywidgets as W

from toolkit.plot._select import COL_DIMS, REDUCIBLE_DIMS, REDUCTIONS, ROW_DIM, STEP_COORDS, column_dim

#: The colour scales offered: "auto" is the honest default (toolkit.plot.scales.resolve_scale: diverging only
#: around a natural centre, log past two decades, else linear); "diverging" centres on the median when the
#: metric has no natural centre.
SCALE_OPTIONS = (("auto", "auto"), ("linear", "sequential"), ("log", "log"), ("diverging", "diverging"))
SCALE_TOOLTIP = ("auto: white-to-orange, on a log scale when the values span more than two decades; blue-white-"
                 "orange only around a natural centre (0 of a difference, 1 of a ratio). diverging: blue-white-"
                 "orange around that centre, or the median.")
ROBUST_TOOLTIP = ("On: colour limits at the 2nd and 98th percentiles, so a few outliers do not wash out the "
                  "rest (arrows on the colorbar mark clipped ends). Off: the data's min and max, so an "
                  "outlier such as a massive activation is shown as the extreme it is.")
VIEW_OPTIONS = (("one", "one"), ("side by side", "side"), ("difference (target − base)", "difference"),
                ("ratio (target / base)", "ratio"))
#: Labels keep their full width: no "Save figure (P…" and no label detached from its control.
WIDE = {"description_width": "initial"}


def metric_options(ds, names) -> list[tuple[str, str]]:
    """``(label, name)`` of the metric menu: each variable's ``long_name``, never two alike.

    A mixture-of-experts Dataset holds ``stable_rank`` (the mean over a layer's experts) and
    ``stable_rank_per_expert`` with one ``long_name``: the second is labelled ``... (per expert)``. A
    label still shared by two variables gets the variable's name in brackets.
    """
    labels = []
    for n in names:
        label = str(ds[n].attrs.get("long_name") or n)
        if n.endswith("_per_expert") and "expert" not in label.lower():
            label += " (per expert)"
        labels.append(label)
    counts = {lab: labels.count(lab) for lab in labels}
    return [(f"{lab} ({n})" if counts[lab] > 1 else lab, n) for lab, n in zip(labels, names, strict=True)]


def selector_dims(ds, names) -> list[str]:
    """Dimensions that need a selector: those of a metric that are neither its rows nor its columns.

    ``kv_head`` of ``key_head_rms`` (layer, kv_head) is its columns, so it gets
    none; ``head`` of a (layer, component, head) variable gets one. In the
    Dataset's dimension order.
    """
    dims = {d for n in names for d in ds[n].dims if d not in (ROW_DIM, column_dim(ds[n].dims))}
    return sorted(dims, key=list(ds.sizes).index)


def dim_options(ds, dim):
    """(label, value) pairs for a selector.

    1-D coords along ``dim`` join the label (``ckpt-1 (step 1000)``); where
    the labels are only positions and a ``step`` (``epoch``) runs along the
    dimension, the step names it (``step 4``). ``expert``, ``head`` and
    ``kv_head`` start with the mean, max and min over the dimension.
    """
    values = ds[dim].values.tolist() if dim in ds.coords else list(range(ds.sizes[dim]))
    extra = [c for c, v in ds.coords.items() if v.dims == (dim,) and c != dim]
    step = next((c for c in STEP_COORDS if c in extra), None)
    positions = values == list(range(len(values)))
    labels = []
    for i, v in enumerate(values):
        if step is not None and positions:
            more = ", ".join(f"{c} {ds[c].values[i]}" for c in extra if c != step)
            labels.append(f"{step} {ds[step].values[i]}" + (f" ({more})" if more else ""))
            continue
        more = ", ".join(f"{c} {ds[c].values[i]}" for c in extra)
        labels.append(f"{v} ({more})" if more else str(v))
    options = list(zip(labels, values, strict=True))
    if dim in REDUCIBLE_DIMS:
        options = [(f"{r} over {dim}s", r) for r in REDUCTIONS] + options
    return options


def column_choices(ds, names) -> list[str]:
    """Column dimensions offered besides ``component``: the reducible dims of (layer, component, X) metrics."""
    found = {d for n in names if column_dim(ds[n].dims) == "component"
             for d in ds[n].dims if d in REDUCIBLE_DIMS}
    return ["component"] + [d for d in COL_DIMS if d in found]


def labelled(label: str, widget, tooltip: str = ""):
    """``widget`` with ``label`` right beside it (a ToggleButtons' own description drifts away)."""
    return W.HBox([W.Label(label, tooltip=tooltip, layout=W.Layout(width="auto", margin="0 6px 0 0")), widget],
                  layout=W.Layout(align_items="center", width="auto"))


def button(description: str, icon: str, tooltip: str = ""):
    """A button as wide as its text."""
    return W.Button(description=description, icon=icon, tooltip=tooltip or description,
                    layout=W.Layout(width="auto"))
