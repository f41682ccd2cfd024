"""What the browser's line and bar panels are given: prepared plot data as plain JSON.

Each function turns what :mod:`toolkit.plot` prepared (a layer grid, an
ESD with its bars and fit, a matrix's entries) into the panels of
:class:`~toolkit.widgets.chart_view.ChartView`; the numbers are the ones the
matplotlib figures draw (the ESD's bars are
:func:`toolkit.plot.esd_figure.esd_histogram`, λ_min and λ_max on the outer
edges). No statistic is computed here.
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.plot.esd_figure import BAR_COLOR, BAR_EDGE, FIT_COLOR, XMAX_COLOR, esd_histogram, fit_curve, number

BOUND_COLOR = "#595959"


def finite_list(values) -> list:
    """Floats as a JSON-safe list: NaN and +-inf become None (a gap in a line)."""
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, dtype=float).ravel()]


def layer_grid(d, *, panel_height: int = 165) -> dict:
    """The lab's layer grid (:class:`~toolkit.plot.layer_grid_figure.LayerGridData`): one panel per layer,
    one line per activation, the shared y limits and scale, the dashed reference line, one legend."""
    from toolkit.plot.layer_grid_figure import grid_title

    x = finite_list(d.x)
    panels = []
    n = len(d.panels)
    for i, title in enumerate(d.panel_titles):
        series = [{"kind": "line", "x": x, "y": finite_list(d.values[i, j]), "color": d.colors[j], "label": label,
                   "width": 1.6} for j, label in enumerate(d.series)]
        if d.bound is not None:
            series.append({"kind": "hline", "y": float(d.bound), "color": BOUND_COLOR, "dash": "dash",
                           "label": d.bound_label, "role": "bound"})
        panels.append({
            "title": "" if d.panels == (-1,) else title, "series": series, "xname": "epoch",
            "x": {"log": False, "lim": [float(d.x[0]), float(d.x[-1])]},
            "y": {"log": bool(d.log), "lim": [float(d.ylim[0]), float(d.ylim[1])]},
            "xlabel": "epoch" if i >= n - d.ncols else "", "ylabel": d.ylabel if i % d.ncols == 0 else "",
        })
    legend = [{"label": label, "color": color} for label, color in zip(d.series, d.colors, strict=True)]
    if d.bound is not None:
        legend.append({"label": d.bound_label, "color": BOUND_COLOR, "dash": True})
    return {"title": grid_title(d), "panels": panels, "ncols": d.ncols, "legend": legend,
            "panel_height": panel_height}


def esd_panel(p, *, title: str = "", bins: int = 100) -> dict:
    """The ESD of :class:`~toolkit.plot.esd_figure.ESDData` ``p``: its bars (every eigenvalue in one
    of them), the fitted power law from ``xmin``, and ``xmin`` / λ_max marked."""
    bars = esd_histogram(p, bins)
    series = [{"kind": "bars", "edges": finite_list(bars.edges), "heights": finite_list(bars.density),
               "counts": [int(c) for c in bars.counts], "color": BAR_COLOR, "edge": BAR_EDGE,
               "label": "ESD", "role": "esd"}]
    curve = fit_curve(p)
    if curve is not None:
        series.append({"kind": "line", "x": finite_list(curve[0]), "y": finite_list(curve[1]), "color": FIT_COLOR,
                       "width": 1.8, "label": f"power law, α = {number(p.alpha)}", "role": "fit"})
        series.append({"kind": "vline", "x": float(p.xmin), "color": FIT_COLOR, "dash": "dash",
                       "label": f"xmin = {number(p.xmin)}", "role": "xmin"})
    series.append({"kind": "vline", "x": float(p.xmax), "color": XMAX_COLOR, "dash": "dot",
                   "label": f"λ_max = {number(p.xmax)}", "role": "xmax"})
    log_x, log_y = p.kind in ("loglog", "logx"), p.kind == "loglog"
    zeros = f"; {bars.zeros} zero eigenvalues not drawn" if bars.zeros and log_x else ""
    return {"title": title or p.title, "series": series, "legend": "upper right", "role": "esd",
            "x": {"log": log_x, "lim": None}, "y": {"log": log_y, "lim": None}, "ylabel": "density",
            "xlabel": ("eigenvalue λ of ΔWᵀΔW" if p.update else "eigenvalue λ of WᵀW")
                      + f" ({bars.counted} in {len(bars.counts)} bins{zeros})"}


#: Ranks of a spectrum's bulk (below the fit's ``xmin``) a rank plot keeps: log-spaced, finer than a pixel on its
#: log-log axes (:func:`rank_sample`).
BULK_RANKS = 2048
#: Ranks of the tail (eigenvalues >= ``xmin``, those the power law is fitted to) kept exact, at most.
TAIL_RANKS = 4096


def rank_sample(eigenvalues, xmin: float) -> np.ndarray:
    """The ranks (0-based indices of the descending spectrum) a rank plot draws: every rank of the fitted tail
    (eigenvalue >= ``xmin``; at most :data:`TAIL_RANKS`), and of the rest :data:`BULK_RANKS` log-spaced ranks
    with the last one, so a stored spectrum of 200,000 eigenvalues is drawn from about 6,000 points.

    The thinning changes nothing the page shows from the numbers: the ESD histogram and the fit are computed from
    every eigenvalue (in Python, before the page is written), and on log-log axes consecutive ranks of the bulk
    lie closer than a pixel apart.
    """
    lam = np.asarray(eigenvalues, dtype=float)
    n = lam.size
    tail = int(np.count_nonzero(lam >= xmin)) if math.isfinite(xmin) else 0
    if n <= BULK_RANKS + min(tail, TAIL_RANKS):
        return np.arange(n)
    head = np.arange(min(tail, TAIL_RANKS))
    bulk = np.unique(np.geomspace(1, n, BULK_RANKS).round().astype(np.int64) - 1)
    return np.unique(np.concatenate([head, bulk, [n - 1]]))


def singular_values_panel(p, *, title: str = "") -> dict:
    """σ_i = √λ_i against the rank i, on log-log axes (the spectrum of ``p`` as a rank plot; a long spectrum
    thinned by :func:`rank_sample`)."""
    s = np.sqrt(np.clip(np.asarray(p.eigenvalues, dtype=float), 0, None))
    keep = rank_sample(p.eigenvalues, float(p.xmin))
    return {"title": title or p.title, "role": "singular_values", "xname": "rank",
            "series": [{"kind": "line", "x": finite_list(keep + 1), "y": finite_list(s[keep]),
                        "color": BAR_EDGE, "width": 1.2, "label": "σ_i"}],
            "x": {"log": True, "lim": None}, "y": {"log": True, "lim": None}, "xlabel": "rank i",
            "ylabel": "singular value σ_i of ΔW" if p.update else "singular value σ_i"}


def entries_panel(e, *, title: str) -> dict:
    """The histogram of a matrix's entries (:class:`~toolkit.plot.entries_figure.EntriesData`), log counts."""
    return {"title": title, "role": "entries",
            "series": [{"kind": "bars", "edges": finite_list(e.edges), "heights": finite_list(e.counts),
                        "counts": [int(c) for c in e.counts], "color": BAR_COLOR, "edge": BAR_EDGE,
                        "label": "entries"}],
            "x": {"log": False, "lim": None}, "y": {"log": True, "lim": None}, "xlabel": "entry value",
            "ylabel": "count"}


def line_panel(values, *, title: str, xlabel: str, ylabel: str, role: str, color: str = FIT_COLOR) -> dict:
    """One line over its index (the relative change per row of a comparison's cell)."""
    values = np.asarray(values, dtype=float)
    return {"title": title, "role": role, "xname": xlabel,
            "series": [{"kind": "line", "x": finite_list(np.arange(values.size)), "y": finite_list(values),
                        "color": color, "width": 1.0, "label": ylabel}],
            "x": {"log": False, "lim": None}, "y": {"log": False, "lim": None}, "xlabel": xlabel, "ylabel": ylabel}
