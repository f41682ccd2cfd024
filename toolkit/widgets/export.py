"""``export_html``: the explorer as one self-contained HTML file, for a page that travels.

Widgets need a live kernel; a notebook on GitHub or a shared file shows nothing
interactive. The export writes one ``.html`` that opens from ``file://`` with no
network: the same browser code as the live explorer (``js/heatmap.js`` and
``js/chart.js``, inlined), the same prepared numbers (:func:`toolkit.plot.prepare_heatmap`,
its colours, labels and hover texts, :mod:`toolkit.widgets.heatmap_spec`), a metric
menu, and the drill-down (ESD with its fit, singular values) of every cell whose
spectrum the Dataset stores (:func:`toolkit.widgets.drilldown.drill_down`). Python
computes every metric's heatmap and every cell's drill-down once, at export; the
page swaps them in.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from toolkit.constraint_types import DataOf
from toolkit.constraints import Names, Optional, PathName, Text, checks_options
from toolkit.errors import InvalidOptionError, ToolkitError
from toolkit.plot import metric_names, prepare_heatmap
from toolkit.plot._select import model_name
from toolkit.plot.fit_marks import with_relative_width
from toolkit.plot.scales import shared_scale
from toolkit.widgets import heatmap_spec
from toolkit.widgets._assets import FOLDER, module, style
from toolkit.widgets.cells import Panel, PanelFacts, unique_labels
from toolkit.widgets.embed import json_for_html, text_for_html

__all__ = ["NO_SPECTRA", "export_html", "page_data"]

#: What an export of Datasets without stored spectra says (the page, export_html's warning, the explorer's status).
NO_SPECTRA = ("the export has no drill-down spectra (the Dataset stores none), so clicking a cell shows no "
              "spectrum: measure with toolkit.weight_stats(..., keep_spectra=True) and export that Dataset")


#: Panels of a watched run's page at most: every record up to this many, else this many evenly spaced, the
#: first and the last included (a page of every record of a long run would be unreadable side by side).
WATCH_PANELS = 8


def _models(data, labels) -> list[tuple[str, object]]:
    """``[(label, Dataset)]``: one per Dataset of a list, one per checkpoint of a series Dataset, one per
    recorded step of a watched run (at most :data:`WATCH_PANELS`)."""
    import xarray as xr

    if isinstance(data, xr.Dataset):
        if "step" in data.dims and "layer" in data.dims:  # a watched run's records (toolkit.watch)
            steps = data["step"].values.tolist()
            keep = sorted({round(i * (len(steps) - 1) / (WATCH_PANELS - 1)) for i in range(WATCH_PANELS)}) \
                if len(steps) > WATCH_PANELS else range(len(steps))
            return [(f"step {steps[i]}", data.isel(step=i)) for i in keep]
        if "checkpoint" in data.dims:
            steps = data["step"].values.tolist() if "step" in data.coords else list(range(data.sizes["checkpoint"]))
            return [(f"step {s}", data.isel(checkpoint=i)) for i, s in enumerate(steps)]
        return [(model_name(data.attrs) or "model", data)]
    items = list(data)
    if not items or not all(isinstance(d, xr.Dataset) for d in items):
        raise InvalidOptionError("data", data, "an xarray.Dataset or a non-empty list of them", "toolkit.widgets."
                                 "export_html")
    labels = labels if labels is not None else [model_name(d.attrs) or f"model {i}" for i, d in enumerate(items)]
    return list(zip(unique_labels(labels, len(items), "toolkit.widgets.export_html"), items, strict=True))


def _heatmap(models, metric: str) -> dict | None:
    """The live explorer's spec of ``metric`` (panels side by side on one scale), or None where it cannot draw."""
    try:
        prepared = [prepare_heatmap(ds, metric) for _, ds in models]
        if len(prepared) > 1:
            one = shared_scale([p.values for p in prepared], attrs=models[0][1][metric].attrs,
                               names=[label for label, _ in models])
            prepared = [prepare_heatmap(ds, metric, **one.keywords()) for _, ds in models]
    except (ToolkitError, ValueError, KeyError):
        return None
    hovers = [PanelFacts(Panel(label, ds, {}), p, metric).grid() for (label, ds), p in zip(models, prepared,
                                                                                                strict=True)]
    if len(models) > 1:
        prepared = [replace(p, title=f"{label}: {p.title}") for (label, _), p in zip(models, prepared, strict=True)]
    return heatmap_spec.spec(prepared, hovers, shared=len(prepared) > 1,
                             hint="hover a cell for its numbers; click (or Enter) for its spectrum")


def _drilldowns(models) -> dict:
    """``{"k,row,col": chart spec}`` of every cell with a stored spectrum (rows from the lowest layer)."""
    from toolkit.widgets.drilldown import drill_down

    out = {}
    for k, (_, ds) in enumerate(models):
        if "eigenvalues" not in ds:
            continue
        finite = np.isfinite(ds["eigenvalues"].values).any(axis=-1)
        layers, components = ds["layer"].values.tolist(), ds["component"].values.tolist()
        for i, layer in enumerate(layers):
            for j, comp in enumerate(components):
                if not finite[i, j]:
                    continue
                dd = drill_down(ds, int(layer), comp)
                if dd.panels:
                    out[f"{k},{i},{j}"] = dd.spec(title=f"layer {layer} {comp}")
    return out


def page_data(data, *, metrics=None, labels=None) -> dict:
    """What the exported page holds: ``{"metrics": [...], "labels": [...], "heatmaps": {metric: spec},
    "drilldowns": {...}, "note": str}``: the menu's variable names and their labels (the live explorer's,
    :func:`toolkit.widgets._controls.metric_options`), and ``note`` = :data:`NO_SPECTRA` where no cell
    has a stored spectrum (else ``""``).

    Parameters
    ----------
    data : xarray.Dataset or list of xarray.Dataset
        As :func:`toolkit.widgets.explore` takes it (a series' ``checkpoint`` dim: one panel per step; a watched
        run's ``step`` dim, ``toolkit.load(store)``: one panel per record, at most :data:`WATCH_PANELS`).
    metrics : str or list of str, optional
        The menu (a str is one metric); default every metric the explorer offers (:func:`toolkit.plot.metric_names`).
    labels : list of str, optional
        One per Dataset of a list.

    Raises
    ------
    InvalidOptionError
        ``data`` of another type, or no metric of the data can be drawn.
    """
    models = [(label, with_relative_width(ds)) for label, ds in _models(data, labels)]  # as the explorer offers
    names = ([metrics] if isinstance(metrics, str) else list(metrics)) if metrics is not None \
        else metric_names(models[0][1])  # a str is one metric, not its letters
    heatmaps = {m: got for m in names if (got := _heatmap(models, m)) is not None}
    if not heatmaps:
        raise InvalidOptionError("metrics", metrics, "metrics of the data that a heatmap can draw, e.g. "
                                 f"{metric_names(models[0][1])[:3]}", "toolkit.widgets.export_html")
    from toolkit.widgets._controls import metric_options

    drilldowns = _drilldowns(models)
    labels = dict((name, label) for label, name in metric_options(models[0][1], list(heatmaps)))
    if not drilldowns:
        for spec in heatmaps.values():
            spec["hint"] = "hover a cell for its numbers; " + NO_SPECTRA
    return {"metrics": list(heatmaps), "labels": [labels[m] for m in heatmaps], "heatmaps": heatmaps,
            "drilldowns": drilldowns, "note": "" if drilldowns else NO_SPECTRA}


@checks_options(data=DataOf(many=True), path=PathName(), metrics=Optional(Names("metrics of the data")),
                labels=Optional(Names("one label per Dataset")), title=Optional(Text("the page's title")))
def export_html(data, path, *, metrics=None, labels=None, title: str | None = None) -> Path:
    """Write the explorer as one self-contained HTML file (no network resource; opens from ``file://``).

    Parameters
    ----------
    data : xarray.Dataset or list of xarray.Dataset
        As :func:`toolkit.widgets.explore` takes it; a watched run's records (``step`` dim) give one panel
        per record on one colour scale (at most :data:`WATCH_PANELS`, evenly spaced, first and last included).
    path : str or path-like
        The ``.html`` file to write (replaced atomically).
    metrics, labels
        As :func:`page_data`.
    title : str, optional
        The page's title; default the first model's name (a series' or a watched run's: the run's name).

    Returns
    -------
    pathlib.Path
        The file written.

    Warns
    -----
    UserWarning
        No cell of ``data`` has a stored spectrum: the page has no drill-down (:data:`NO_SPECTRA`).

    Raises
    ------
    InvalidOptionError
        As :func:`page_data`, or an option of the wrong type.
    OutputPathError
        ``path`` is a folder, or the file cannot be written there (its missing folders are created).

    Examples
    --------
    >>> ds = toolkit.weight_stats(keep_spectra=True)          # doctest: +SKIP
    >>> toolkit.widgets.export_html(ds, "smollm2.html")        # doctest: +SKIP
    """
    from toolkit.widgets.figures import write_file

    page = page_data(data, metrics=metrics, labels=labels)
    name = title or _default_title(data, labels)
    out = write_file(path, _page(page, name), "export_html's path", "statistics.html")
    if page["note"]:
        warnings.warn(f"{out}: {page['note']}", UserWarning, stacklevel=3)
    return out


def _default_title(data, labels) -> str:
    """The first model's name; for a series or a watched run (one Dataset of several steps), the run's name,
    not its first step's label."""
    import xarray as xr

    if isinstance(data, xr.Dataset) and ({"checkpoint", "step"} & set(data.dims)):
        return model_name(data.attrs) or "training run"
    return _models(data, labels)[0][0]


def _page(page: dict, title: str) -> str:
    modules = {name: module(f"{name}.js") for name in ("heatmap", "chart")}
    glue = (FOLDER / "export_page.js").read_text(encoding="utf-8")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{text_for_html(title)}</title>
<style>{style()}
body {{ font-family: sans-serif; margin: 16px; }} .toolkit-export-bar {{ margin-bottom: 8px; }}
.toolkit-export-row {{ display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }}</style></head>
<body><h3>{text_for_html(title)}</h3>
<div class="toolkit-export-bar"><label>metric <select id="toolkit-metric"></select></label></div>
<div class="toolkit-export-row"><div id="toolkit-heatmap"></div><div id="toolkit-drilldown"></div></div>
<script type="application/json" id="toolkit-data">{json_for_html(page)}</script>
<script type="application/json" id="toolkit-modules">{json_for_html(modules)}</script>
<script type="module">{glue}</script>
</body></html>
"""
