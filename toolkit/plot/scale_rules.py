"""The display rules of a colour scale, as small functions on numbers: one home for every view.

The static figure (:func:`toolkit.plot.prepare_heatmap`), the explorer and the exported page all take
their limits, centre, colour-map span, ticks and colour-bar text from here (the page is handed the
colours and labels these rules give; it computes none of its own). Each rule is a function of numbers,
tested with numbers, as seaborn's ``_HeatMapper._determine_cmap_params`` is:

- :func:`domain`: the values a metric can take (CF ``valid_min`` / ``valid_max``, else
  :data:`toolkit.domains.NATURAL_DOMAINS`), widened to hold every value shown (:func:`holding`);
- :func:`data_limits`: robust percentiles or min / max of the finite values;
- :func:`symmetric_limits`: the same distance on both sides of a diverging centre (in decades with ``log``);
- :func:`bounded_diverging`: those limits cut at the domain, with the part of the colour map they keep
  (:func:`colour_span`), so a condition-number bar stops at 1 and white stays its centre;
- :func:`constant_limits`: a panel of one value is one colour, with no made-up range;
- :func:`centre_text`: what the colour bar says white is *of*: ``white = median 0.671`` (this panel's),
  ``white = 0.772 (median of 3 panels pooled)`` (panels sharing one scale), ``white = 1`` (a ratio);
- :func:`colorbar_ticks`: three to five ticks inside the limits.
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.domains import UNBOUNDED, natural_domain

#: Robust colour limits use these percentiles of the finite values.
ROBUST_PERCENTILES = (2.0, 98.0)
#: The whole colour map (a panel whose limits are not cut by its domain).
FULL_SPAN = (0.0, 1.0)


def finite_values(values, *, positive: bool = False) -> np.ndarray:
    """The finite values of ``values`` as a flat float array (only those > 0 with ``positive``)."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    return v[v > 0] if positive else v


def domain(metric: str, attrs=None) -> tuple[float, float]:
    """The values metric ``metric`` can take.

    Parameters
    ----------
    metric : str
        The variable's name (``update_sparsity``).
    attrs : dict, optional
        Its attrs: CF ``valid_range``, ``valid_min``, ``valid_max`` win over the built-in table.

    Returns
    -------
    (float, float)
        ``(low, high)``; ``(-inf, inf)`` for a metric nothing is known about.

    Examples
    --------
    >>> domain("update_sparsity")
    (0.0, 1.0)
    >>> domain("condition_number")
    (1.0, inf)
    >>> domain("update_sparsity", {"valid_max": 0.5})
    (0.0, 0.5)
    """
    attrs = attrs or {}
    lo, hi = natural_domain(metric)
    if "valid_range" in attrs:
        lo, hi = (float(x) for x in np.asarray(attrs["valid_range"]).ravel()[:2])
    return float(attrs.get("valid_min", lo)), float(attrs.get("valid_max", hi))


def holding(bounds, values) -> tuple[float, float]:
    """``bounds`` widened to hold every finite value of ``values``: a domain never hides a value (data that
    break a declared domain show that the declaration does not fit them, so it is set aside where broken)."""
    v = finite_values(values)
    lo, hi = (float(b) for b in bounds)
    if v.size:
        lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
    return lo, hi


def data_limits(values, *, robust: bool = True, positive: bool = False) -> tuple[float, float]:
    """``(low, high)`` of the finite values: their 2nd and 98th percentiles with ``robust``, else their min and
    max (only positive values with ``positive``, for a log scale).

    Raises
    ------
    toolkit.errors.EmptyInputError
        No finite (positive) value.

    Examples
    --------
    >>> data_limits([1.0, 2.0, 3.0, np.nan], robust=False)
    (1.0, 3.0)
    """
    from toolkit.errors import EmptyInputError

    v = finite_values(values, positive=positive)
    if v.size == 0:
        what = "positive finite" if positive else "finite"
        raise EmptyInputError(f"no {what} value to colour; pick another metric, selection or scale")
    if robust:
        lo, hi = (float(x) for x in np.percentile(v, ROBUST_PERCENTILES))
        return lo, hi
    return float(v.min()), float(v.max())


def color_limits(values, *, scale: str = "diverging", robust: bool = True,
                 center: str | float | None = "median", log: bool = False) -> tuple[float, float, float | None]:
    """Colour limits adapted to the data's range, before any domain cuts them (:func:`bounded_diverging`).

    Parameters
    ----------
    values : array_like
        Any shape; NaN and +-inf are ignored. For ``scale="log"`` (or ``log``) only positive values count.
    scale : {"diverging", "sequential", "log"}
    robust : bool
        The 2nd and 98th percentiles instead of min and max (:func:`data_limits`).
    center : "median", float or None
        The value drawn white on the diverging map. Ignored (returned as None) for the sequential and log
        scales, and for a diverging one without a centre.
    log : bool
        A diverging scale in decades (a positive metric spanning decades, such as a condition number).

    Returns
    -------
    vmin, vmax : float
        ``vmin < vmax`` always (a constant array gets a small band around it: 5 % of the value, 0.5 around
        0, 5 % of its decade on the log scale). A diverging scale spans the *same distance on both sides* of
        its centre (:func:`symmetric_limits`).
    center : float or None
        The diverging scale's centre (the median of the values for ``"median"``).

    Raises
    ------
    ValueError
        An unknown ``scale``.
    toolkit.errors.EmptyInputError
        No finite value (or no positive value for the log scale).

    Examples
    --------
    >>> color_limits([1.0, 2.0, 4.0], robust=False)
    (0.0, 4.0, 2.0)
    """
    if scale not in ("diverging", "sequential", "log"):
        raise ValueError(f"scale must be one of diverging, sequential, log; got {scale!r}")
    positive = scale == "log" or log
    lo, hi = data_limits(values, robust=robust, positive=positive)
    if scale == "log":  # the limits stay the data's own numbers (no log10 round trip)
        if hi <= lo:
            k = math.log10(lo)
            pad = abs(k) * 0.05 or 0.5
            lo, hi = 10.0 ** (k - pad), 10.0 ** (k + pad)
        return lo, hi, None
    if scale == "sequential" or center is None:
        if hi <= lo:
            pad = abs(lo) * 0.05 or 0.5
            lo, hi = lo - pad, hi + pad
        return lo, hi, None
    c = float(np.median(finite_values(values, positive=positive))) if center == "median" else float(center)
    lo, hi = symmetric_limits(lo, hi, c, log=log and c > 0)
    return lo, hi, c


def _to_scale(x: float, log: bool) -> float:
    """``x`` in the scale's own space: decades with ``log`` (``-inf`` for 0)."""
    if not log:
        return float(x)
    return math.log10(x) if x > 0 else -math.inf


def symmetric_limits(lo: float, hi: float, center: float, *, log: bool = False) -> tuple[float, float]:
    """The smallest range around ``center`` that holds ``[lo, hi]`` and spans the same distance on both
    sides (in decades with ``log``); the end that sets the distance stays exactly as given; a small band
    (5 % of the centre, 0.5 around 0; 5 % of its decade with ``log``) when ``lo == hi == center``.

    Examples
    --------
    >>> symmetric_limits(0.5, 3.0, 1.0)
    (-1.0, 3.0)
    >>> symmetric_limits(2.0, 1000.0, 10.0, log=True)
    (0.1, 1000.0)
    """
    if log:
        up, down = math.log10(hi) - math.log10(center), math.log10(center) - math.log10(lo)
        if max(up, down) <= 0:
            half = abs(math.log10(center)) * 0.05 or 0.05
            return float(center / 10.0 ** half), float(center * 10.0 ** half)
        # center * (center / x), not center * center / x: the square under- or overflows past 1e+-154
        return (float(center * (center / hi)), float(hi)) if up >= down else (float(lo), float(center * (center / lo)))
    up, down = hi - center, center - lo
    if max(up, down) <= 0:
        half = abs(center) * 0.05 or 0.5
        return float(center - half), float(center + half)
    return (float(2 * center - hi), float(hi)) if up >= down else (float(lo), float(2 * center - lo))


def colour_span(lo: float, hi: float, center: float, half: float, *, log: bool = False) -> tuple[float, float]:
    """The part of a diverging colour map that ``[lo, hi]`` covers when white (0.5) is ``center`` and the
    ends of the map (0 and 1) lie ``half`` away from it (in decades with ``log``).

    Examples
    --------
    >>> colour_span(0.0, 2.0, 1.0, 2.0)  # a ratio's bar cut at 0, its ends 2 away from 1
    (0.25, 0.75)
    """
    c = _to_scale(center, log)
    return (float(0.5 + (_to_scale(lo, log) - c) / (2 * half)), float(0.5 + (_to_scale(hi, log) - c) / (2 * half)))


def bounded_diverging(lo: float, hi: float, center: float, bounds=UNBOUNDED, *,
                      log: bool = False) -> tuple[float, float, tuple[float, float]]:
    """Diverging limits around ``center`` that stop at the metric's ``bounds``.

    The limits first span the same distance on both sides of ``center`` (:func:`symmetric_limits`); an end
    that passes a bound is moved onto it, and the colour map is cut to match (:func:`colour_span`), so one
    shade is still one distance from white on both sides, and the bar shows no value the metric cannot take.

    Parameters
    ----------
    lo, hi : float
        The data's limits (or typed ones).
    center : float
        The value drawn white.
    bounds : (float, float)
        The metric's domain (:func:`domain`).
    log : bool
        Distances in decades.

    Returns
    -------
    vmin, vmax : float
    span : (float, float)
        The part of the colour map drawn between ``vmin`` and ``vmax`` (``(0.0, 1.0)`` when no end is cut).

    Examples
    --------
    A condition number around its median 21.8 with values up to 84,700 (3.59 decades above) would reach
    21.8 / 10 ** 3.59 = 0.0056 below; it stops at 1, 1.34 decades below, about a third of the blue half:

    >>> vmin, vmax, span = bounded_diverging(4.3, 84700.0, 21.8, (1.0, math.inf), log=True)
    >>> vmin, vmax, round(span[0], 3), span[1]
    (1.0, 84700.0, 0.314, 1.0)
    """
    slo, shi = symmetric_limits(lo, hi, center, log=log)
    blo, bhi = max(slo, float(bounds[0])), min(shi, float(bounds[1]))
    if (blo, bhi) == (slo, shi) or not blo < bhi:
        return slo, shi, FULL_SPAN
    half = (_to_scale(shi, log) - _to_scale(slo, log)) / 2
    return blo, bhi, colour_span(blo, bhi, center, half, log=log)


def constant_limits(value: float, scale: str) -> tuple[float, float, tuple[float, float]]:
    """Limits and colour-map span of a panel whose every value is ``value``: ``(value, value)``, no range
    made up (never ``[1.0, 1.1]`` for a fraction that is 1 everywhere), and one colour: the palest of a
    sequential or log map, white of a diverging one (one value, no contrast).

    Examples
    --------
    >>> constant_limits(1.0, "sequential")
    (1.0, 1.0, (0.0, 0.0))
    >>> constant_limits(0.0, "diverging")
    (0.0, 0.0, (0.5, 0.5))
    """
    at = 0.5 if scale == "diverging" else 0.0
    return float(value), float(value), (at, at)


def pooled_centre_of(n_panels: int, names=None) -> str:
    """What a centre shared by panels is the median of: ``median of 3 panels pooled`` or, with the panels'
    ``names``, ``median of step 0, step 2, step 4 pooled``.

    Examples
    --------
    >>> pooled_centre_of(3)
    'median of 3 panels pooled'
    >>> pooled_centre_of(2, ["step 0", "step 4"])
    'median of step 0, step 4 pooled'
    """
    if names:
        return "median of " + ", ".join(str(n) for n in names) + " pooled"
    return f"median of {int(n_panels)} panels pooled"


def centre_text(center: float, *, of: str = "", digits: int = 3, log: bool = False) -> str:
    """What the colour bar says white is: ``white = 1`` (a natural or typed centre), ``white = median 0.0912``
    (``of="median"``: this panel's median), ``white = 0.772 (median of 3 panels pooled)`` (any other ``of``),
    with ``, log scale`` for a diverging scale in decades.

    Examples
    --------
    >>> centre_text(0.7719, of="median of 3 panels pooled")
    'white = 0.772 (median of 3 panels pooled)'
    >>> centre_text(0.671, of="median")
    'white = median 0.671'
    >>> centre_text(21.8, of="median", log=True)
    'white = median 21.8, log scale'
    """
    from toolkit.plot.numbers import format_value

    value = format_value(center, digits)
    text = f"white = median {value}" if of == "median" else f"white = {value}" + (f" ({of})" if of else "")
    return text + (", log scale" if log else "")


def colorbar_ticks(scale: str, vmin: float, vmax: float, center: float | None,
                   log: bool = False) -> tuple[float, ...]:
    """Three to five colorbar ticks inside ``[vmin, vmax]``.

    The diverging scale ticks the two limits, the centre and the two midpoints (geometric ones with
    ``log``), five ticks, so the white of the map is labelled with its value. The sequential and log scales
    use "nice" numbers, falling back to evenly spaced ticks when fewer than three nice ones fit.

    Examples
    --------
    >>> colorbar_ticks("diverging", 0.0, 2.0, 1.0)
    (0.0, 0.5, 1.0, 1.5, 2.0)
    >>> colorbar_ticks("log", 1.0, 1000.0, None)
    (1.0, 10.0, 100.0, 1000.0)
    """
    if scale == "diverging" and center is not None:
        if log:
            return (vmin, math.sqrt(vmin) * math.sqrt(center), center, math.sqrt(center) * math.sqrt(vmax), vmax)
        return (vmin, (vmin + center) / 2, center, (center + vmax) / 2, vmax)
    if scale == "log":
        lo, hi = math.log10(vmin), math.log10(vmax)
        ticks = [10.0 ** k for k in range(math.ceil(lo), math.floor(hi) + 1)]
        if len(ticks) > 5:
            step = math.ceil(len(ticks) / 5)
            ticks = ticks[::step]
        if len(ticks) < 3:
            ticks = list(np.geomspace(vmin, vmax, 3))
        return tuple(float(t) for t in ticks)
    from matplotlib.ticker import MaxNLocator

    ticks = [t for t in MaxNLocator(nbins=4).tick_values(vmin, vmax)
             if vmin - 1e-12 * abs(vmax - vmin) <= t <= vmax + 1e-12 * abs(vmax - vmin)]
    if not 3 <= len(ticks) <= 5:
        ticks = list(np.linspace(vmin, vmax, 3))
    return tuple(float(t) for t in ticks)
