"""Colours, colour limits and colorbar ticks shared by every heatmap.

Only :func:`cmap` and :func:`make_norm` import matplotlib; the limit and tick
helpers are plain numpy so :func:`toolkit.plot.prepare_heatmap` stays cheap.
"""

from __future__ import annotations

import math

import numpy as np

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
    """Colour limits for a panel whose every value is ``value``: a small band around it, inside ``bounds``.

    The band is 5 % of the value (0.5 for 0) on each side, in decades on the
    log scale; an end that would cross a bound is moved onto it, so update
    sparsity 1 gets 0.95 .. 1, never 0.95 .. 1.05.
    """
    if scale == "log":
        k = math.log10(value)
        pad = abs(k) * 0.05 or 0.5
        lo, hi = 10.0 ** (k - pad), 10.0 ** (k + pad)
    else:
        pad = abs(value) * 0.05 or 0.5
        lo, hi = value - pad, value + pad
    lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
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
                 center: str | float | None = "median") -> tuple[float, float, float | None]:
    """Colour limits adapted to the data's range.

    Parameters
    ----------
    values : array_like
        Any shape; NaN and +-inf are ignored. For ``scale="log"`` only
        positive values count.
    scale : {"diverging", "sequential", "log"}
    robust : bool
        Use the 2nd and 98th percentiles instead of min and max, so a few
        outliers do not wash out the rest.
    center : "median", float or None
        Colour of the middle (white) of the diverging map. Ignored (returned
        as None) for the sequential and log scales.

    Returns
    -------
    vmin, vmax : float
        ``vmin < vmax`` always (a constant array gets a small band around it).
    center : float or None
        Strictly between ``vmin`` and ``vmax`` for the diverging scale: a
        centre given outside the data's range widens the limits
        symmetrically around it.

    Raises
    ------
    toolkit.errors.EmptyInputError
        No finite value (or no positive value for the log scale).
    """
    from toolkit.errors import EmptyInputError

    check_scale(scale)
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if scale == "log":
        v = v[v > 0]
    if v.size == 0:
        what = "positive finite" if scale == "log" else "finite"
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
    if hi <= lo:  # constant data: a small band around the value
        pad = abs(lo) * 0.05 or 0.5
        lo, hi = lo - pad, hi + pad
    if scale == "sequential" or center is None:
        return lo, hi, None
    c = float(np.median(v)) if center == "median" else float(center)
    if not lo < c < hi:
        if center == "median":  # robust limits squeezed onto the median: widen a little
            c = min(max(c, lo), hi)
        half = max(abs(hi - c), abs(c - lo)) or (abs(c) * 0.05 or 0.5)
        lo, hi = c - half, c + half
    return lo, hi, c


def colorbar_ticks(scale: str, vmin: float, vmax: float, center: float | None) -> tuple[float, ...]:
    """Three to five colorbar ticks inside ``[vmin, vmax]``.

    The diverging scale ticks the two limits, the centre and the two
    midpoints (five ticks), so the white of the map is labelled with the
    median. The sequential and log scales use "nice" numbers, falling back to
    evenly spaced ticks when fewer than three nice ones fit.
    """
    if scale == "diverging" and center is not None:
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


def make_norm(scale: str, vmin: float, vmax: float, center: float | None = None):
    """The matplotlib norm for a scale.

    Returns
    -------
    matplotlib.colors.Normalize
        ``TwoSlopeNorm`` (diverging; each half of the colour map spans one
        side of the centre, so a skewed range still uses every colour),
        ``Normalize`` (sequential) or ``LogNorm`` (log).
    """
    from matplotlib.colors import LogNorm, Normalize, TwoSlopeNorm

    check_scale(scale)
    if scale == "log":
        return LogNorm(vmin=vmin, vmax=vmax)
    if scale == "diverging" and center is not None:
        return TwoSlopeNorm(vcenter=center, vmin=vmin, vmax=vmax)
    return Normalize(vmin=vmin, vmax=vmax)


def format_value(x: float) -> str:
    """A number as every view of the toolkit prints it: three significant digits, one notation.

    Plain from 0.001 to 9999 (``0.0912``, ``35.5``, ``9710``; trailing zeros dropped), scientific outside
    (``1.90e+04``, ``8.54e-04``, always three digits). So a colorbar,
    a hover text and a table never show one value as ``9.7e+03`` and its
    neighbour as ``1.90e+04``.
    """
    x = float(x)
    if math.isnan(x):
        return ""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    rounded = float(f"{x:.3g}")  # 9996 -> 1e4: the notation follows the rounded value
    if 1e-3 <= abs(rounded) < 1e4:
        decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
        text = f"{rounded:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return _scientific(x)


def _scientific(x: float) -> str:
    """``1.90e+04``: three significant digits, always shown in scientific notation."""
    return f"{x:.2e}"


def format_ticks(ticks, scale: str) -> list[str]:
    """Labels for one colorbar's ticks in one notation: when any of them needs scientific
    notation (see :func:`format_value`) all get it, so 8.54e-04 never sits next to 0.00177."""
    ticks = [float(t) for t in ticks]
    sci = any(t != 0 and math.isfinite(t) and not 1e-3 <= abs(float(f"{t:.3g}")) < 1e4 for t in ticks)
    labels = []
    for t in ticks:
        label = format_tick(t, scale)
        if sci and not label.startswith("$") and math.isfinite(t) and t != 0:
            label = _scientific(t)
        labels.append(label)
    return labels


def format_tick(x: float, scale: str) -> str:
    """Colorbar tick label: powers of ten as ``10^k`` on the log scale, else :func:`format_value`."""
    if scale == "log" and x > 0:
        k = math.log10(x)
        if abs(k - round(k)) < 1e-9:
            return f"$10^{{{round(k)}}}$"
    return format_value(x)
