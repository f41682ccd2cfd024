"""One panel's colour scale, decided from its numbers alone: :func:`panel_scale` (no matplotlib, no xarray).

The one function every view calls for its colours (seaborn's ``_HeatMapper._determine_cmap_params`` is the
model): :func:`toolkit.plot.prepare_heatmap` hands it a panel's values and keywords and copies the result
into :class:`~toolkit.plot.HeatmapData`, which the static figure draws and the explorer and the exported
page receive as colours and labels. It composes the rules of :mod:`toolkit.plot.scale_rules` and
:mod:`toolkit.plot.scales`; tests call it with numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.plot.numbers import digits_for, format_value, near_constant_note
from toolkit.plot.scale_rules import (
    FULL_SPAN,
    bounded_diverging,
    colorbar_ticks,
    constant_limits,
    data_limits,
    domain,
    finite_values,
    holding,
)
from toolkit.plot.scales import describe_scale, diverging_log, panel_limits, resolve_scale


@dataclass(frozen=True)
class PanelScale:
    """The colours of one panel as numbers and words.

    Attributes
    ----------
    scale : {"diverging", "sequential", "log"}
    vmin, vmax : float
        Colour limits; equal for a constant panel (one colour, no range).
    center : float or None
        The value drawn white (diverging only).
    log : bool
        A diverging scale in decades.
    span : (float, float)
        The part of the colour map drawn between ``vmin`` and ``vmax``
        (:func:`toolkit.plot.scale_rules.bounded_diverging`).
    ticks : tuple of float
        The colour bar's ticks (the value alone for a constant panel, none for an undefined one).
    text : str
        What the colour bar says about the scale (``white = 0.772 (median of 3 panels pooled)``).
    caption : str
        What the panel says under it: ``constant: 1``, ``all within 0.1 % of 0.02``, or this panel's own
        median when white is a pooled one.
    constant : float or None
        The value of a constant panel.
    digits : int
        Significant digits of the panel's labels.
    extend : {"neither", "min", "max", "both"}
        Which ends the limits clip.
    """

    scale: str
    vmin: float
    vmax: float
    center: float | None
    log: bool
    span: tuple
    ticks: tuple
    text: str
    caption: str
    constant: float | None
    digits: int
    extend: str


def panel_scale(values, *, metric: str = "", attrs=None, scale: str = "auto", center=None,
                center_of: str | None = None, robust: bool = True, vmin: float | None = None,
                vmax: float | None = None, log: bool | None = None, digits: int | None = None) -> PanelScale:
    """Decide one panel's colour scale from its values.

    Parameters
    ----------
    values : array_like, shape (layer, component)
        The numbers coloured (NaN: no value; +-inf drawn beyond the limits).
    metric : str
        The variable's name: its natural domain (:func:`toolkit.plot.scale_rules.domain`) bounds the limits.
    attrs : dict, optional
        The variable's attrs (``natural_center``, ``valid_min`` / ``valid_max``).
    scale, center, robust, vmin, vmax, log, digits
        As for :func:`toolkit.plot.prepare_heatmap`.
    center_of : str, optional
        What a given ``center`` is the median of (``median of 3 panels pooled``): the colour bar says so and
        the caption gives this panel's own median beside it.

    Returns
    -------
    PanelScale

    Raises
    ------
    ValueError
        An unknown ``scale``, ``vmin >= vmax``, or a non-positive limit on a log scale.
    toolkit.errors.EmptyInputError
        No finite value (none positive on a log scale) in a panel that is not wholly NaN.

    Examples
    --------
    >>> s = panel_scale([[1.0, 1.0], [1.0, 1.0]], metric="update_sparsity")
    >>> s.vmin, s.vmax, s.caption
    (1.0, 1.0, 'constant: 1')
    """
    values = np.asarray(values, dtype=np.float64)
    finite = finite_values(values)
    scale, center = resolve_scale(values, scale=scale, center=center, attrs=attrs)
    log = bool(scale == "diverging" and (diverging_log(values, center) if log is None else log))
    span, constant, c = FULL_SPAN, None, None
    if np.isnan(values).all():  # nothing defined: hatched; the caller says why
        lo, hi = (1.0, 10.0) if scale == "log" else (0.0, 1.0)  # a LogNorm takes no 0
        return PanelScale(scale, lo, hi, None, log, span, (), "", "", None, digits or 3, "neither")
    if finite.size and finite.min() == finite.max() and vmin is None and vmax is None:
        constant = float(finite[0])
        if scale == "log" and constant <= 0:
            data_limits(finite, positive=True)  # raises: no positive value to colour
        lo, hi, span = constant_limits(constant, scale)
        c = constant if scale == "diverging" else None
        caption, ticks = f"constant: {format_value(constant)}", (constant,)
    else:
        lo, hi, c = panel_limits(values, scale=scale, center=center, robust=robust, vmin=vmin, vmax=vmax, log=log)
        if c is not None:
            lo, hi, span = bounded_diverging(lo, hi, c, holding(domain(metric, attrs), values), log=log and c > 0)
        caption, ticks = near_constant_note(finite), colorbar_ticks(scale, lo, hi, c, log=log)
    if digits is None:
        digits = digits_for(finite, None if constant is not None else lo, None if constant is not None else hi)
    of = center_of or ("median" if center == "median" and c is not None and c == float(np.median(finite)) else "")
    if center_of and c is not None and finite.size and constant is None:
        own = f"median of this panel: {format_value(float(np.median(finite)), digits)}"
        caption = f"{caption}; {own}" if caption else own
    return PanelScale(scale, float(lo), float(hi), c, log, span, tuple(ticks),
                      describe_scale(scale, c, of=of, log=log, digits=digits), caption, constant, digits,
                      _extend(values, lo, hi))


def _extend(values, lo: float, hi: float) -> str:
    """Which ends of ``[lo, hi]`` some value lies beyond (the colour bar's arrows)."""
    known = values[~np.isnan(values)]
    below, above = bool((known < lo).any()), bool((known > hi).any())
    return {(False, False): "neither", (True, False): "min", (False, True): "max"}.get((below, above), "both")
