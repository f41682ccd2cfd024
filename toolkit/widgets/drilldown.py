"""One cell's drill-down figure: its ESD with the power-law fit, its singular values, its entries.

Drawn from the Dataset's stored spectrum (``eigenvalues``, through
:func:`toolkit.plot.prepare_esd` / :func:`toolkit.plot.draw_esd`), so it is
instant when the spectrum is stored. A comparison Dataset whose
``eigenvalues`` are those of the update carries the attr ``matrix`` (e.g.
``"ΔW = W_target − W_base"``); the titles then name it. The entry histogram
needs the matrix itself: it is read from the source recorded in the
Dataset's attrs by :func:`toolkit.widgets.cell_matrix.read_cell_matrix` when
that works, otherwise the panel says why not.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.plot._select import is_reduction, select


@dataclass
class DrillDown:
    """What a click on a cell shows.

    Attributes
    ----------
    layer, column : the cell
    png : bytes
        The figure (ESD, singular values, entry histogram; for a comparison ΔW's entries and
        the relative change per row), or b"" when none could be drawn.
    notes : list of str
        Why a part is missing (no stored spectrum, no readable source ...).
    kinds : list of str
        The parts drawn, in order: ``"esd"``, ``"singular_values"``, ``"entries"`` (or
        ``"update_entries"`` and ``"row_change"``).
    titles : list of str
        Their titles (they name the update ``ΔW`` for a comparison's spectrum).
    eigenvalues : numpy.ndarray or None
        The stored spectrum drawn (λ, descending).
    row_change : numpy.ndarray or None
        For a comparison read from its checkpoints: ‖ΔW_i‖ / ‖W_base,i‖ per row.
    """

    layer: int
    column: object
    png: bytes = b""
    notes: list = field(default_factory=list)
    kinds: list = field(default_factory=list)
    titles: list = field(default_factory=list)
    eigenvalues: np.ndarray | None = None
    row_change: np.ndarray | None = None


def cell_dataset(ds, selection: dict):
    """``ds`` with the panel's extra-dimension labels selected (reductions are skipped: a spectrum
    of the mean over experts does not exist)."""
    sel = {k: v for k, v in selection.items()
           if not is_reduction(ds, k, v) and (k in ds.dims or (k in ds.coords and ds[k].ndim == 1))}
    return select(ds, sel)


def drill_down(ds, layer: int, column, *, col_dim: str = "component", selection=None, matrix=None,
               dpi: int = 80) -> DrillDown:
    """The drill-down figure of one cell.

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
    dpi : int

    Returns
    -------
    DrillDown
    """
    from matplotlib.figure import Figure

    from toolkit.plot.esd_figure import draw_esd, prepare_esd

    out = DrillDown(layer, column)
    if col_dim != "component":
        out.notes.append(f"spectra are stored per matrix: a {col_dim} column has none")
        return out
    cell = cell_dataset(ds, selection or {})
    what = str(cell["eigenvalues"].attrs.get("matrix", "")) if "eigenvalues" in cell else ""
    parts = []
    try:
        esd = prepare_esd(cell, layer=layer, component=str(column))
        out.eigenvalues = esd.eigenvalues
        parts += [("esd", esd), ("singular_values", prepare_esd(cell, layer=layer, component=str(column),
                                                                kind="singular_values"))]
    except (ToolkitError, KeyError, ValueError) as err:
        out.notes.append(f"spectrum: {err}")
    if isinstance(matrix, np.ndarray):
        parts.append(("entries", matrix))
    elif isinstance(matrix, tuple):  # (W_base, W_target) of a comparison
        base, target = (np.asarray(m, dtype=np.float64) for m in matrix)
        parts += [("update_entries", target - base), ("row_change", row_change(base, target))]
    elif matrix:
        out.notes.append(f"entry histogram: {matrix}")
    if not parts:
        return out
    fig = Figure(figsize=(4.8, 2.6 * len(parts)), dpi=dpi, layout="constrained")
    axes = fig.subplots(len(parts), 1, squeeze=False)[:, 0]
    for ax, (kind, data) in zip(axes, parts, strict=True):
        if kind in ("entries", "update_entries"):
            _draw_entries(ax, data, layer, column, "ΔW " if kind == "update_entries" else "")
        elif kind == "row_change":
            out.row_change = data
            ax.plot(np.arange(data.size), data, lw=0.8, color="#c45a00")
            ax.set_xlabel("row i (output feature)")
            ax.set_ylabel("‖ΔW_i‖ / ‖W_base,i‖")
            ax.set_title(f"relative change per row: median {np.nanmedian(data):.3g}, max {np.nanmax(data):.3g}",
                         fontsize=9)
        else:
            draw_esd(data, ax=ax)
            ax.set_title(_short_title(data.title, what), fontsize=9)
        out.kinds.append(kind)
        out.titles.append(ax.get_title())
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    fig.clear()
    out.png = buf.getvalue()
    return out


def _short_title(title: str, what: str) -> str:
    """The ESD title without the model name (the panel header has it), naming the update if it is one."""
    short = title.split(": ", 1)[-1]
    return f"{what}: {short}" if what else short


def row_change(base: np.ndarray, target: np.ndarray) -> np.ndarray:
    """‖W_t,i − W_b,i‖₂ / ‖W_b,i‖₂ for each row i (output feature); NaN where the base row is zero."""
    with np.errstate(divide="ignore", invalid="ignore"):
        num, den = np.linalg.norm(target - base, axis=1), np.linalg.norm(base, axis=1)
        return np.where(den > 0, num / den, np.nan)


def _draw_entries(ax, w: np.ndarray, layer, column, what: str = ""):
    w = np.asarray(w, dtype=np.float64).ravel()
    w = w[np.isfinite(w)]
    ax.hist(w, bins=120, color="#9ec3e6", edgecolor="#1f5fa8", linewidth=0.3)
    ax.set_yscale("log")
    ax.set_xlabel(f"{what}entry value")
    ax.set_ylabel("count")
    ax.set_title(f"layer {layer} {column}: {w.size:,} {what}entries, rms {np.sqrt(np.mean(w * w)):.3g}",
                 fontsize=9)
