r"""Which alpha cells are too uncertain to read: the stated limits, and the mark drawn on them.

Where a heatmap shows ``alpha`` and its Dataset holds the fit's quality (the 95 % bootstrap
interval: ``alpha_ci_xmin_lower`` / ``alpha_ci_xmin_upper`` of :mod:`toolkit.metrics.alpha_interval_xmin`, the
default, which chooses xmin again in every replicate, or else ``alpha_ci_lower`` / ``alpha_ci_upper`` of
:mod:`toolkit.metrics.alpha_interval`, xmin held: :func:`interval_columns`; the tail's eigenvalue count
``num_pl_spikes``), a cell beyond either limit is *marked*: a black
corner (top right, white-edged, so it shows on every colour) drawn by
:func:`toolkit.plot.draw_heatmap` and by the explorer's page alike, and the panel's notes
(the x label) say what the mark means. The colour alone does not carry it.

The limits
----------
:data:`MAX_RELATIVE_WIDTH` = 0.5 (the default of every ``mark_width`` option; the interval decides
wherever it was measured, and its relative width is a metric of its own, :func:`relative_width`, whose
heatmap ranks the cells): the interval is wider than half of alpha,
:math:`(\alpha_{hi} - \alpha_{lo}) / \alpha > 0.5`. At alpha = 4 such an interval
(about 3 to 5) covers half of the 2-6 band the ``quality`` labels call well trained (WeightWatcher's
thresholds, Martin & Mahoney 2021; :func:`toolkit.collect.assemble.quality.with_quality`), and
near either threshold it straddles it: the label is not known.
For a tail of :math:`n` eigenvalues and a known xmin the 95 % interval is about
:math:`2 \cdot 1.96 (\alpha - 1)/\sqrt n` wide (Clauset et al. 2009, §3.1); the bootstrap's
(xmin held, the MLE's small-tail bias corrected) is as wide (``tests/metrics/test_alpha_interval.py``).

:data:`MIN_TAIL` = 50 eigenvalues: the same limit read from the tail's size, for a cell without
the interval (a measured interval already holds what the tail's size says).
With xmin known, alpha's standard error is :math:`(\alpha - 1)/\sqrt n`
(WeightWatcher's ``sigma``); at :math:`n = 50` the 95 % interval is already
:math:`0.55(\alpha - 1)` wide, 0.42 of alpha at alpha = 4, close to :data:`MAX_RELATIVE_WIDTH`
before xmin's own uncertainty is added; and the MLE's bias, :math:`(\alpha - 1)/n` (the
:math:`n - 1` of the unbiased estimator), is no longer negligible below it.

References
----------
Clauset, A., Shalizi, C. R. & Newman, M. E. J. (2009). Power-law distributions in empirical
data. *SIAM Review* 51(4), 661-703.
Martin, C. H. & Mahoney, M. W. (2021). Implicit self-regularization in deep neural networks.
*JMLR* 22(165), 1-73.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INTERVALS", "MAX_RELATIVE_WIDTH", "MIN_TAIL", "WIDTH_NAME", "cell_verdict", "draw_marks",
           "interval_columns", "mark_note", "panel_marks", "relative_width", "uncertain_alpha", "uncertain_reason",
           "with_relative_width"]

#: The interval columns of alpha, in the order they are read: xmin chosen again (the default), xmin held.
INTERVALS = (("alpha_ci_xmin_lower", "alpha_ci_xmin_upper"), ("alpha_ci_lower", "alpha_ci_upper"))


def interval_columns(names) -> tuple[str, str] | None:
    """The (lower, upper) names of the first of :data:`INTERVALS` whose two ends are both in ``names``
    (a Dataset's variables, a dict's keys), or None."""
    return next((pair for pair in INTERVALS if set(pair) <= set(names)), None)

#: A cell whose 95 % interval of alpha is wider than this fraction of alpha is marked (the default of
#: every ``mark_width`` option).
MAX_RELATIVE_WIDTH = 0.5
#: The variable that ranks the cells from "trust alpha" (0) to "do not" (:func:`relative_width`).
WIDTH_NAME = "alpha_ci_relative_width"
#: A cell whose power-law tail holds fewer eigenvalues than this is marked.
MIN_TAIL = 50
#: Side of the corner mark, as a fraction of the cell (matplotlib; the page draws the same).
CORNER = 0.32


def relative_width(ds):
    r"""The width of alpha's 95 % interval over alpha, per cell: a metric of its own, whose heatmap ranks the
    cells from "trust alpha" (near 0) to "do not" (above :data:`MAX_RELATIVE_WIDTH`).

    Parameters
    ----------
    ds : xarray.Dataset
        With ``alpha`` and an interval's two ends (:func:`interval_columns`) on one set of dims.

    Returns
    -------
    xarray.DataArray or None
        :math:`(\alpha_{hi} - \alpha_{lo}) / \alpha`, named :data:`WIDTH_NAME`, dims of ``alpha``, NaN where
        alpha or its interval is; attrs ``long_name``, ``units`` ("1"), ``description``, ``valid_min`` 0.
        None without alpha or an interval.

    Examples
    --------
    An interval 3 to 5 around alpha = 4 is half of alpha wide: 0.5.
    """
    names = getattr(ds, "data_vars", {})
    pair = interval_columns(names)
    if "alpha" not in names or pair is None:
        return None
    lo, hi = pair
    with np.errstate(invalid="ignore", divide="ignore"):
        width = (ds[hi] - ds[lo]) / ds["alpha"]
    return width.where(np.isfinite(width)).rename(WIDTH_NAME).assign_attrs(
        long_name="relative width of alpha's 95 % interval", units="1", valid_min=0.0,
        description=f"({hi} - {lo}) / alpha: 0 = alpha is known, above "
                    f"{MAX_RELATIVE_WIDTH:g} = the cell gets the mark of an uncertain alpha",
        reference="toolkit.plot.fit_marks")


def with_relative_width(ds):
    """``ds`` with :func:`relative_width` as the variable :data:`WIDTH_NAME` where it can be computed and is not
    there yet (the explorer offers it in its metric menu); ``ds`` itself otherwise."""
    if WIDTH_NAME in getattr(ds, "data_vars", {}):
        return ds
    width = relative_width(ds)
    return ds if width is None else ds.assign({WIDTH_NAME: width})


def uncertain_alpha(ds, *, max_relative_width: float = MAX_RELATIVE_WIDTH, min_tail: int = MIN_TAIL):
    r"""Where alpha is too uncertain to read: True above the stated limit (module docstring).

    The interval decides where it was measured: a cell is marked when its relative width
    (:func:`relative_width`) is above ``max_relative_width``. The tail's size stands in only where no
    interval was measured: fewer than ``min_tail`` eigenvalues.

    Parameters
    ----------
    ds : xarray.Dataset
        With ``alpha`` and any of an interval's two ends (:func:`interval_columns`), ``num_pl_spikes``
        (on alpha's dims).
    max_relative_width : float, default :data:`MAX_RELATIVE_WIDTH`
    min_tail : int, default :data:`MIN_TAIL`

    Returns
    -------
    xarray.DataArray of bool or None
        Dims of ``alpha``: True where alpha is finite and
        :math:`(\alpha_{hi} - \alpha_{lo})/\alpha >` ``max_relative_width``, or, where the interval is
        NaN or absent, ``num_pl_spikes < min_tail``; False elsewhere. None when ``ds`` holds no alpha or
        neither quality column.
    """
    names = getattr(ds, "data_vars", {})
    if "alpha" not in names:
        return None
    alpha = ds["alpha"]
    width = relative_width(ds)
    if width is None and "num_pl_spikes" not in names:
        return None
    marked = alpha.notnull() & False
    measured = marked if width is None else width.notnull()
    if width is not None:
        marked = marked | (width > max_relative_width).fillna(False)
    if "num_pl_spikes" in names:
        marked = marked | ((ds["num_pl_spikes"] < min_tail).fillna(False) & ~measured)
    return (marked & np.isfinite(alpha)).rename("alpha_uncertain")


def uncertain_reason(alpha: float, facts: dict, *, max_relative_width: float = MAX_RELATIVE_WIDTH,
                     min_tail: int = MIN_TAIL) -> str:
    """Why one cell's alpha is marked (:func:`uncertain_alpha`'s test on one cell), ``""`` when it is not.

    Parameters
    ----------
    alpha : float
    facts : dict of str -> float
        An interval's two ends (:func:`interval_columns`), ``num_pl_spikes`` of the cell: any of them.

    Returns
    -------
    str
        ``"uncertain: 48 tail eigenvalues < 50"``, ``"uncertain: 95 % interval 2.7 to 5 is 77 % of alpha
        (> 50 %)"`` (both, joined by ``"; "``, where both hold), or ``""``.
    """
    from toolkit.plot.numbers import format_value

    if alpha is None or not np.isfinite(alpha):
        return ""
    why = []
    pair = interval_columns(facts) or INTERVALS[0]
    lo, hi = facts.get(pair[0], np.nan), facts.get(pair[1], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        width = (hi - lo) / alpha
    if np.isfinite(width) and width > max_relative_width:
        why.append(f"95 % interval {format_value(lo, 3)} to {format_value(hi, 3)} is "
                   f"{width * 100:.0f} % of alpha (> {max_relative_width * 100:g} %)")
    tail = facts.get("num_pl_spikes", np.nan)
    if np.isfinite(tail) and tail < min_tail and not np.isfinite(width):  # the interval decides where measured
        why.append(f"{tail:g} tail eigenvalues < {min_tail}")
    return ("uncertain: " + "; ".join(why)) if why else ""


def cell_verdict(ds, layer, component) -> str:
    """Why alpha of the cell (``layer``, ``component``) of ``ds`` is marked, ``""`` when it is not
    (or ``ds`` holds no alpha): the verdict the drill-down's title and the hover give with the mark."""
    names = getattr(ds, "data_vars", {})
    if "alpha" not in names or not {"layer", "component"} <= set(ds["alpha"].dims):
        return ""
    where = {"layer": layer, "component": component}
    try:
        alpha = float(ds["alpha"].sel(where))
        facts = {n: float(ds[n].sel(where)) for n in (*(interval_columns(names) or ()), "num_pl_spikes")
                 if n in names and set(ds[n].dims) == set(ds["alpha"].dims)}
    except (KeyError, ValueError, TypeError):
        return ""
    return uncertain_reason(alpha, facts)


def panel_marks(ds, metric: str, selection: dict, rows, cols, col_dim: str, *,
                max_relative_width: float = MAX_RELATIVE_WIDTH):
    """:func:`uncertain_alpha` on one prepared panel's grid, or None (not alpha, no quality columns).

    Parameters
    ----------
    ds : xarray.Dataset or xarray.DataArray
        What the panel was prepared from (a DataArray has no quality columns: None).
    metric : str
    selection : dict
        The panel's extra-dimension labels; a reduction (``expert="mean"``) gives None.
    rows, cols : sequence
        The panel's layers and column labels, in its order.
    col_dim : str
    max_relative_width : float, default :data:`MAX_RELATIVE_WIDTH`
        The stated limit (:func:`uncertain_alpha`).

    Returns
    -------
    numpy.ndarray of bool, shape (len(rows), len(cols)), or None
    """
    from toolkit.plot._select import is_reduction, select

    if metric != "alpha" or not hasattr(ds, "data_vars"):
        return None
    marked = uncertain_alpha(ds, max_relative_width=max_relative_width)
    if marked is None or any(is_reduction(marked, k, v) for k, v in selection.items()):
        return None
    try:
        marked = select(marked, {k: v for k, v in selection.items() if k in marked.dims or k in marked.coords})
        marked = marked.sel(layer=list(rows), **{col_dim: list(cols)})
    except (KeyError, ValueError):
        return None
    if set(marked.dims) != {"layer", col_dim}:
        return None
    return np.asarray(marked.transpose("layer", col_dim).values, dtype=bool)


def mark_note(*, max_relative_width: float = MAX_RELATIVE_WIDTH, min_tail: int = MIN_TAIL) -> str:
    """The legend of the mark, as the figure's notes print it (three short lines: it fits under a narrow panel)."""
    return (f"black corner: alpha uncertain\n(95 % interval > {max_relative_width * 100:g} % of alpha,\n"
            f"or, with none, a tail of < {min_tail} eigenvalues)")


def corner(j: float, i: float, size: float = CORNER) -> list[tuple[float, float]]:
    """The three points of the mark of cell (row ``i``, column ``j``) in data units (row 0 at the bottom)."""
    return [(j + 1 - size, i + 1), (j + 1, i + 1), (j + 1, i + 1 - size)]


def draw_marks(ax, marks) -> int:
    """Draw the mark on the cells of ``ax`` where ``marks`` (n_rows, n_cols) is True; the number drawn."""
    from matplotlib.patches import Polygon

    if marks is None:
        return 0
    hits = np.argwhere(np.asarray(marks, dtype=bool))
    for i, j in hits:
        ax.add_patch(Polygon(corner(float(j), float(i)), closed=True, facecolor="black", edgecolor="white",
                             linewidth=0.8, zorder=3, gid="alpha-uncertain"))
    return len(hits)
