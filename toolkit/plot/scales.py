"""Which colour scale a heatmap gets, and one norm for panels that share a scale (no matplotlib here).

Colour must not mislead, so the default (``scale="auto"``) is chosen from the
metric and its numbers:

- a metric with a *natural centre* (a difference: 0; a ratio: 1; the attr
  ``natural_center`` says so) gets the diverging blue-white-orange map with
  white at that centre;
- otherwise, positive values spanning more than :data:`LOG_DECADES` decades
  (a condition number from 21.8 to 84,700) get a log scale, so the
  structure of the heavy tail shows instead of one colour for the top half;
- everything else a sequential (white to orange) linear scale.

The blue-white-orange look around the median of the published figures is one
argument away: ``center="median"``. A diverging scale spans the same distance on
both sides of its centre, in decades when the values span more than
:data:`LOG_DECADES` (:func:`diverging_log`). A figure of several panels on a shared
scale gets one :class:`SharedScale`: the same limits *and* the same centre in
every panel, so one colour is one value everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from toolkit.plot.numbers import digits_for
from toolkit.plot.scale_rules import centre_text, color_limits, finite_values, pooled_centre_of, symmetric_limits

#: Every scale ``prepare_heatmap`` takes; "auto" is resolved by :func:`resolve_scale`.
SCALE_CHOICES = ("auto", "diverging", "sequential", "log")
#: Positive values spanning more decades than this default to a log scale.
LOG_DECADES = 2.0
#: The attr that marks a variable's natural centre (set on difference and ratio views).
CENTER_ATTR = "natural_center"


def natural_center(attrs) -> float | None:
    """The value a variable's colours should centre on, from its attrs (``natural_center``), or None."""
    value = (attrs or {}).get(CENTER_ATTR)
    if value is None:
        return None
    value = float(np.asarray(value).ravel()[0])
    return value if math.isfinite(value) else None


def decades(values) -> float:
    """How many decades the finite values span: ``log10(max / min)``; 0 unless all are positive."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0 or v.min() <= 0:
        return 0.0
    return float(math.log10(v.max() / v.min()))


def resolve_scale(values, *, scale: str = "auto", center=None, attrs=None) -> tuple[str, object]:
    """The concrete ``(scale, center)`` of a heatmap.

    Parameters
    ----------
    values : array_like
        The numbers to colour (NaN and +-inf ignored).
    scale : {"auto", "diverging", "sequential", "log"}
    center : "median", float or None
        None: the natural centre of the variable (``attrs``), if any.
    attrs : dict, optional
        The variable's attrs.

    Returns
    -------
    scale : {"diverging", "sequential", "log"}
        "auto" resolved: diverging around a centre given or natural, else log
        when positive values span more than :data:`LOG_DECADES` decades, else
        sequential.
    center : "median", float or None
        The centre of a diverging scale ("median" when none is natural or
        given); None for the others.

    Raises
    ------
    ValueError
        An unknown ``scale``.
    """
    if scale not in SCALE_CHOICES:
        raise ValueError(f"scale must be one of {', '.join(SCALE_CHOICES)}; got {scale!r}")
    center = natural_center(attrs) if center is None else center
    if scale == "auto":
        if center is not None:
            return "diverging", center
        return ("log" if decades(values) > LOG_DECADES else "sequential"), None
    if scale == "diverging":
        return "diverging", "median" if center is None else center
    return scale, None


def diverging_log(values, center=None) -> bool:
    """Whether a diverging scale around ``center`` works in decades: every finite value (and the centre)
    positive and spanning more than :data:`LOG_DECADES` decades (a condition number from 4.3 to 84,700
    around its median 21.8: 84,700 is 3.6 decades above it, 4.3 is 0.7 below)."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0 or v.min() <= 0:
        return False
    if center is not None and center != "median" and not float(center) > 0:
        return False
    return decades(v) > LOG_DECADES


def describe_scale(scale: str, center: float | None, *, of: str = "", log: bool = False,
                   digits: int = 3) -> str:
    """What the colorbar says about its scale: ``log scale``, ``linear scale``, or what white is and what it
    is the centre of (:func:`toolkit.plot.scale_rules.centre_text`: ``white = 0``, ``white = median
    0.0912``, ``white = 0.772 (median of 3 panels pooled)``; ``, log scale`` added for a diverging scale in
    decades)."""
    if scale == "log":
        return "log scale"
    if scale == "diverging" and center is not None:
        return centre_text(center, of=of, digits=digits, log=log)
    return "linear scale"


@dataclass(frozen=True)
class SharedScale:
    """One colour norm for several panels: the same scale, limits and centre everywhere.

    Attributes
    ----------
    scale : {"diverging", "sequential", "log"}
    vmin, vmax : float
    center : float or None
        The pooled centre (diverging only): the median of every panel's values together, or
        the natural / given centre.
    natural : bool
        The centre is the variable's own (0 of a difference), not a median.
    log : bool
        A diverging scale in decades (:func:`diverging_log` of the pooled values).
    digits : int
        Significant digits of every panel's labels (:func:`toolkit.plot.numbers.digits_for` of the
        pooled values and limits), so one value reads alike in every panel.
    center_of : str
        What the centre is the median of, for the colour bar (``median of 3 panels pooled``); ``""``
        for a natural or given centre.
    """

    scale: str
    vmin: float
    vmax: float
    center: float | None
    natural: bool = False
    log: bool = False
    digits: int = 3
    center_of: str = ""

    def keywords(self) -> dict:
        """Keywords of :func:`toolkit.plot.prepare_heatmap` that draw a panel on this scale (no limits when
        every panel holds one and the same value: each is then drawn as the constant panel it is, in one
        colour with no made-up range, :func:`toolkit.plot.scale_rules.constant_limits`)."""
        limits = {} if self.vmin == self.vmax else {"vmin": self.vmin, "vmax": self.vmax}
        return {"scale": self.scale, **limits, "center": self.center, "log": self.log, "digits": self.digits,
                "center_of": self.center_of or None}


def shared_scale(values_list, *, scale: str = "auto", center=None, robust: bool = True, attrs=None,
                 names=None) -> SharedScale:
    """The one norm of panels shown on a shared scale, from all their values pooled.

    A centre that is a median is the median of every panel's values together, and the scale says so
    (``center_of``: ``median of 3 panels pooled``, or with the panels' ``names``, ``median of step 0,
    step 2, step 4 pooled``), so no one reads it as one panel's own median.

    Raises
    ------
    toolkit.errors.EmptyInputError
        No finite value in any panel (none positive for a log scale).
    """
    pooled = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values_list])
    scale, centre = resolve_scale(pooled, scale=scale, center=center, attrs=attrs)
    finite = finite_values(pooled)
    if finite.size and finite.min() == finite.max():  # one value everywhere: no range to share
        v = float(finite[0])
        return SharedScale(scale, v, v, v if scale == "diverging" else None, centre not in (None, "median"))
    natural = centre is not None and centre != "median"
    log = scale == "diverging" and diverging_log(pooled, centre)
    lo, hi, c = color_limits(pooled, scale=scale, robust=robust, center=centre if scale == "diverging" else None,
                             log=log)
    of = pooled_centre_of(len(values_list), names) if c is not None and not natural else ""
    return SharedScale(scale, float(lo), float(hi), None if c is None else float(c), natural, log,
                       digits_for(pooled, lo, hi), of)


def panel_limits(values, *, scale: str, center=None, robust: bool = True, vmin=None, vmax=None,
                 log: bool = False) -> tuple[float, float, float | None]:
    """``(vmin, vmax, center)`` of one panel that is not constant: from the data, or typed.

    A typed limit replaces the data's; a diverging scale is then widened to the
    same distance on both sides of its centre (the given one, or the median),
    in decades with ``log``, so the white stays the centre.

    Raises
    ------
    ValueError
        ``vmin >= vmax``, or ``vmin <= 0`` on a log scale (``scale="log"`` or ``log``).
    toolkit.errors.EmptyInputError
        No finite value to colour.
    """
    centre = center if scale == "diverging" else None
    if vmin is None or vmax is None or scale == "diverging":
        lo, hi, c = color_limits(values, scale=scale, robust=robust, center=centre, log=log)
    else:
        lo, hi, c = vmin, vmax, None
    lo, hi = float(lo if vmin is None else vmin), float(hi if vmax is None else vmax)
    if hi <= lo:
        raise ValueError(f"colour limits need vmin < vmax; got vmin={lo:g}, vmax={hi:g}")
    if (scale == "log" or log) and lo <= 0:  # only a typed limit can be: the data's are positive
        raise ValueError(f"a log scale needs positive colour limits; got vmin={lo:g} (type one above 0, "
                         "or pick the linear scale)")
    if c is not None and (vmin is not None or vmax is not None):
        lo, hi = symmetric_limits(lo, hi, c, log=log and c > 0)
    return lo, hi, c
