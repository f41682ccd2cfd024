"""Colours, colour limits and colorbar ticks shared by every heatmap.

Only :func:`cmap` and :func:`make_norm` import matplotlib; the limit and tick
helpers are plain numpy so :func:`toolkit.plot.prepare_heatmap` stays cheap.
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.plot.numbers import format_tick, format_ticks, format_value  # noqa: F401 (their home before)

SCALES = ("diverging", "sequential", "log")

#: Blue (low) - white (middle) - orange (high), as in the published figures.
DIVERGING_COLORS = ("#1f4e8c", "#5b8fc7", "#b9d3ea", "#ffffff", "#fdd3a5", "#f39237", "#b34d00")
#: White to deep orange, for ``scale="sequential"`` and ``scale="log"``.
SEQUENTIAL_COLORS = ("#fff7ec", "#fdd3a5", "#f9a35a", "#e8731a", "#b34d00", "#6b2c00")
#: Face colour and hatch of cells with no value (NaN, e.g. ``mlp.gate`` of BERT).
NAN_FACE = "#ececec"
NAN_EDGE = "#9a9a9a"
NAN_HATCH = "///"

#: Robust colour limits use these percentiles of the finite values.
ROBUST_PERCENTILES = (2.0, 98.0)

_CMAPS: dict[str, object] = {}

#: Known value ranges of built-in metrics, used when a variable's attrs give no CF
#: ``valid_min`` / ``valid_max`` (a constant panel's colour range stays inside them).
METRIC_BOUNDS = {
    "update_sparsity": (0.0, 1.0), "update_density": (0.0, 1.0), "subspace_overlap": (0.0, 1.0),
    "cosine_similarity": (-1.0, 1.0), "relative_change": (0.0, math.inf), "spectral_entropy": (0.0, 1.0),
    "frobenius_norm": (0.0, math.inf), "spectral_norm": (0.0, math.inf), "rms": (0.0, math.inf),
    "stable_rank": (0.0, math.inf), "effective_rank": (0.0, math.inf), "matrix_rank": (0.0, math.inf),
}


def metric_bounds(name: str, attrs=None) -> tuple[float, float]:
    """The range a metric's values can take: CF ``valid_min`` / ``valid_max`` / ``valid_range``
    attrs, else :data:`METRIC_BOUNDS`, else ``(-inf, inf)``."""
    attrs = attrs or {}
    lo, hi = METRIC_BOUNDS.get(name, (-math.inf, math.inf))
    if "valid_range" in attrs:
        lo, hi = (float(x) for x in np.asarray(attrs["valid_range"]).ravel()[:2])
    lo = float(attrs.get("valid_min", lo))
    hi = float(attrs.get("valid_max", hi))
    return lo, hi


def constant_limits(value: float, bounds=(-math.inf, math.inf), scale: str = "diverging") -> tuple[float, float]:
    """Colour limits for a panel whose every value is ``value``.

    On the sequential and log scales the band starts at the value and runs 10 %
    of it (1 for 0; a tenth of a decade on the log scale) upwards, so the panel
    is painted the palest colour of the map: one value, no contrast (rank loss 0
    everywhere is not mid-orange). On the diverging scale it is 5 % of the value
    (0.5 for 0) on each side, inside ``bounds``: an end that would cross a bound
    is moved onto it.
    """
    if scale == "log":
        k = math.log10(value)
        return float(value), float(10.0 ** (k + (abs(k) * 0.1 or 1.0)))
    pad = abs(value) * 0.05 or 0.5
    if scale != "diverging":
        return float(value), float(value + 2 * pad)
    lo, hi = max(value - pad, bounds[0]), min(value + pad, bounds[1])
    if hi <= lo:  # value on a bound with no room on one side: the band lies on the other side
        lo, hi = (value, value + 2 * pad) if value <= bounds[0] else (value - 2 * pad, value)
    return float(lo), float(hi)


def check_scale(scale: str) -> str:
    """Return ``scale`` if it is one of :data:`SCALES`, else raise ValueError."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}; got {scale!r}")
    return scale


def cmap(scale: str = "diverging"):
    """The colormap for a scale.

    Parameters
    ----------
    scale : {"diverging", "sequential", "log"}

    Returns
    -------
    matplotlib.colors.LinearSegmentedColormap
        ``toolkit_diverging`` (blue-white-orange) or ``toolkit_sequential``
        (white-orange, shared by "sequential" and "log"). NaN cells are drawn
        transparent so the hatched background shows through.
    """
    from matplotlib.colors import LinearSegmentedColormap

    name = "diverging" if check_scale(scale) == "diverging" else "sequential"
    if name not in _CMAPS:
        colors = DIVERGING_COLORS if name == "diverging" else SEQUENTIAL_COLORS
        cm = LinearSegmentedColormap.from_list(f"toolkit_{name}", colors, N=256)
        _CMAPS[name] = cm.with_extremes(bad=(0, 0, 0, 0))
    return _CMAPS[name]


def color_limits(values, *, scale: str = "diverging", robust: bool = True,
                 center: str | float | None = "median", log: bool = False) -> tuple[float, float, float | None]:
    """Colour limits adapted to the data's range.

    Parameters
    ----------
    values : array_like
        Any shape; NaN and +-inf are ignored. For ``scale="log"`` (or ``log``)
        only positive values count.
    scale : {"diverging", "sequential", "log"}
    robust : bool
        Use the 2nd and 98th percentiles instead of min and max, so a few
        outliers do not wash out the rest.
    center : "median", float or None
        Colour of the middle (white) of the diverging map. Ignored (returned
        as None) for the sequential and log scales.
    log : bool
        A diverging scale in log space (a positive metric spanning decades,
        such as a condition number): the symmetry below is in decades.

    Returns
    -------
    vmin, vmax : float
        ``vmin < vmax`` always (a constant array gets a small band around it).
        A diverging scale spans the *same distance on both sides* of its
        centre (in decades with ``log``), as seaborn's ``center=`` does: the
        wider side of the data sets it, so one shade of blue is as far below
        the centre as the same shade of orange is above.
    center : float or None
        The middle of ``[vmin, vmax]`` (geometric with ``log``) for the diverging scale.

    Raises
    ------
    toolkit.errors.EmptyInputError
        No finite value (or no positive value for the log scale).
    """
    from toolkit.errors import EmptyInputError

    check_scale(scale)
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if scale == "log" or log:
        v = v[v > 0]
    if v.size == 0:
        what = "positive finite" if scale == "log" or log else "finite"
        raise EmptyInputError(f"no {what} value to colour (scale={scale!r}); pick another metric, "
                              "selection or scale")
    if robust:
        lo, hi = (float(x) for x in np.percentile(v, ROBUST_PERCENTILES))
    else:
        lo, hi = float(v.min()), float(v.max())
    if scale == "log":  # the limits stay the data's own numbers (no log10 round trip)
        if hi <= lo:  # constant data: a small band around the value, in decades
            k = math.log10(lo)
            pad = abs(k) * 0.05 or 0.5
            lo, hi = 10.0 ** (k - pad), 10.0 ** (k + pad)
        return lo, hi, None
    if scale == "sequential" or center is None:
        if hi <= lo:  # constant data: a small band around the value
            pad = abs(lo) * 0.05 or 0.5
            lo, hi = lo - pad, hi + pad
        return lo, hi, None
    c = float(np.median(v)) if center == "median" else float(center)
    lo, hi = symmetric_limits(lo, hi, c, log=log and c > 0)
    return lo, hi, c


def symmetric_limits(lo: float, hi: float, center: float, *, log: bool = False) -> tuple[float, float]:
    """The smallest range around ``center`` that holds ``[lo, hi]`` and spans the same distance on both
    sides (in decades with ``log``); the end that sets the distance stays exactly as given; a small band
    when ``lo == hi == center``."""
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


def colorbar_ticks(scale: str, vmin: float, vmax: float, center: float | None,
                   log: bool = False) -> tuple[float, ...]:
    """Three to five colorbar ticks inside ``[vmin, vmax]``.

    The diverging scale ticks the two limits, the centre and the two
    midpoints (geometric ones with ``log``), five ticks, so the white of the
    map is labelled with its value. The sequential and log scales use "nice"
    numbers, falling back to evenly spaced ticks when fewer than three nice
    ones fit.
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


def make_norm(scale: str, vmin: float, vmax: float, center: float | None = None, log: bool = False):
    """The matplotlib norm for a scale.

    Returns
    -------
    matplotlib.colors.Normalize
        ``LogNorm`` (log, or diverging with ``log``) or ``Normalize``: one slope
        over ``[vmin, vmax]``. A diverging scale's limits are symmetric about
        its centre (:func:`symmetric_limits`), so the centre is drawn white and
        equal distances on both sides get equally strong colours (never
        matplotlib's two-slope norm, which stretches each side separately).
        ``center`` is accepted for the callers' symmetry and not needed.
    """
    from matplotlib.colors import LogNorm, Normalize

    check_scale(scale)
    if scale == "log" or (log and scale == "diverging"):
        return LogNorm(vmin=vmin, vmax=vmax)
    return Normalize(vmin=vmin, vmax=vmax)
