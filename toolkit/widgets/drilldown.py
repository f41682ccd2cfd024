"""One cell's drill-down: its ESD with the power-law fit, its singular values, its entries.

Prepared from the Dataset's stored spectrum (``eigenvalues``, through
:func:`toolkit.plot.prepare_esd`) and drawn in the browser
(:class:`~toolkit.widgets.chart_view.ChartView`), so it is instant when the
spectrum is stored. A comparison Dataset whose
``eigenvalues`` are those of the update carries the attr ``matrix`` (e.g.
``"ΔW = W_target − W_base"``); the titles then name it. The entry histogram
needs the matrix itself: it is read from the source recorded in the
Dataset's attrs by :func:`toolkit.widgets.cell_matrix.read_cell_matrix` when
that works, otherwise the panel says why not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.plot._select import is_reduction, select


@dataclass
class DrillDown:
    """What opening a cell shows beside the heatmap.

    Attributes
    ----------
    layer, column : the cell
    panels : list of dict
        The figure's panels for :class:`~toolkit.widgets.chart_view.ChartView`
        (:mod:`toolkit.widgets.chart_spec`), in the order of ``kinds``.
    notes : list of str
        Why a part is missing (no stored spectrum, no readable source ...).
    kinds : list of str
        The parts drawn, in order: ``"esd"``, ``"singular_values"``, ``"entries"`` (or
        ``"update_entries"`` and ``"row_change"``).
    titles : list of str
        Their titles (they name the update ``ΔW`` for a comparison's spectrum).
    eigenvalues : numpy.ndarray or None
        The stored spectrum drawn (λ, descending).
    esd : toolkit.plot.ESDData or None
        The prepared ESD (its bars: :func:`toolkit.plot.esd_figure.esd_histogram`).
    row_change : numpy.ndarray or None
        For a comparison read from its checkpoints: ‖ΔW_i‖ / ‖W_base,i‖ per row.
    fit : list of str
        alpha and how well it is determined, where the Dataset holds it: ``"α = 2.53"``, its
        95 % interval, the tail's eigenvalue count and range λmax / xmin
        (:func:`~toolkit.widgets.cells.fit_quality_lines`), and whether the heatmap marks it
        (:mod:`toolkit.plot.fit_marks`); shown above the figure.
    """

    layer: int
    column: object
    panels: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    kinds: list = field(default_factory=list)
    titles: list = field(default_factory=list)
    eigenvalues: np.ndarray | None = None
    esd: object = None
    row_change: np.ndarray | None = None
    fit: list = field(default_factory=list)

    def spec(self, *, title: str = "", status: str = "") -> dict:
        """The :class:`~toolkit.widgets.chart_view.ChartView` spec: the panels one above the other
        (``title`` default: the :attr:`fit` lines)."""
        return {"title": title or " · ".join(self.fit), "panels": self.panels, "ncols": 1, "panel_height": 215,
                "status": status, "note": "\n".join(self.notes)}


def cell_dataset(ds, selection: dict):
    """``ds`` with the panel's extra-dimension labels selected (reductions are skipped: a spectrum
    of the mean over experts does not exist)."""
    sel = {k: v for k, v in selection.items()
           if not is_reduction(ds, k, v) and (k in ds.dims or (k in ds.coords and ds[k].ndim == 1))}
    return select(ds, sel)


def drill_down(ds, layer: int, column, *, col_dim: str = "component", selection=None, matrix=None) -> DrillDown:
    """The drill-down of one cell: its ESD with the fit, its singular values, its entries.

    Parameters
    ----------
    ds : xarray.Dataset
        The statistics the cell comes from (with ``eigenvalues`` for the spectra).
    layer : int
    column : str
        The component (spectra exist only for components).
    col_dim : str
    selection : dict, optional
        The panel's extra-dimension labels (``checkpoint`` ...).
    matrix : numpy.ndarray, (numpy.ndarray, numpy.ndarray) or str, optional
        The cell's matrix (out, in) for the entry histogram; for a
        comparison ``(W_base, W_target)``, drawn as the histogram of ΔW's
        entries and the relative change per row; or why it could not be read.

    Returns
    -------
    DrillDown
    """
    from toolkit.plot._style import format_value
    from toolkit.plot.entries_figure import prepare_entries
    from toolkit.plot.esd_figure import prepare_esd
    from toolkit.widgets import chart_spec

    out = DrillDown(layer, column)
    if col_dim != "component":
        out.notes.append(f"spectra are stored per matrix: a {col_dim} column has none")
        return out
    cell = cell_dataset(ds, selection or {})
    what = str(cell["eigenvalues"].attrs.get("matrix", "")) if "eigenvalues" in cell else ""
    try:
        esd = prepare_esd(cell, layer=layer, component=str(column))
        out.eigenvalues, out.esd = esd.eigenvalues, esd
        out.panels += [chart_spec.esd_panel(esd, title=_short_title(esd.title, what)),
                       chart_spec.singular_values_panel(esd, title=_short_title(esd.title, what))]
        out.kinds += ["esd", "singular_values"]
        out.fit = fit_text(cell, layer, str(column)) if not esd.update else []
    except (ToolkitError, KeyError, ValueError) as err:
        out.notes.append(f"spectrum: {err}")
    if isinstance(matrix, np.ndarray):
        e = prepare_entries(matrix)
        out.panels.append(chart_spec.entries_panel(
            e, title=f"layer {layer} {column}: {e.size:,} entries, rms {format_value(e.rms)}"))
        out.kinds.append("entries")
    elif isinstance(matrix, tuple):  # (W_base, W_target) of a comparison
        base, target = (np.asarray(m, dtype=np.float64) for m in matrix)
        e = prepare_entries(target - base)
        out.row_change = change = row_change(base, target)
        out.panels += [
            chart_spec.entries_panel(e, title=f"layer {layer} {column}: {e.size:,} ΔW entries, "
                                              f"rms {format_value(e.rms)}"),
            chart_spec.line_panel(change, title=f"relative change per row: median "
                                                f"{format_value(float(np.nanmedian(change)))}, max "
                                                f"{format_value(float(np.nanmax(change)))}",
                                  xlabel="row i (output feature)", ylabel="‖ΔW_i‖ / ‖W_base,i‖", role="row_change")]
        out.kinds += ["update_entries", "row_change"]
    elif matrix:
        out.notes.append(f"entry histogram: {matrix}")
    out.titles = [p["title"] for p in out.panels]
    return out


def fit_text(cell, layer: int, component: str) -> list[str]:
    """alpha of one cell and its fit quality, as the drill-down shows them (:attr:`DrillDown.fit`)."""
    from toolkit.plot.fit_marks import cell_verdict
    from toolkit.plot.numbers import format_value
    from toolkit.widgets.cells import FIT_FACTS, fit_quality_lines

    if "alpha" not in cell or set(cell["alpha"].dims) != {"layer", "component"}:
        return []
    where = {"layer": layer, "component": component}
    alpha = float(cell["alpha"].sel(where))
    if not np.isfinite(alpha):
        return []
    facts = {name: float(cell[name].sel(where)) for name in FIT_FACTS if name in cell}
    lines = [f"α = {format_value(alpha, 3)}", *fit_quality_lines(facts)]
    verdict = cell_verdict(cell, layer, component)
    if verdict:
        lines.append(verdict + " (marked on the heatmap)")
    return lines


def _short_title(title: str, what: str) -> str:
    """The ESD title without the model name (the panel header has it), naming the update if it is one."""
    short = title.split(": ", 1)[-1]
    return f"{what}: {short}" if what else short


def row_change(base: np.ndarray, target: np.ndarray) -> np.ndarray:
    """‖W_t,i − W_b,i‖₂ / ‖W_b,i‖₂ for each row i (output feature); NaN where the base row is zero."""
    with np.errstate(divide="ignore", invalid="ignore"):
        num, den = np.linalg.norm(target - base, axis=1), np.linalg.norm(base, axis=1)
        return np.where(den > 0, num / den, np.nan)
