"""Colours, colour limits and colorbar ticks shared by every heatmap.

Only :func:`cmap` and :func:`make_norm` import matplotlib; the limit and tick
helpers are plain numpy so :func:`toolkit.plot.prepare_heatmap` stays cheap.
"""

from __future__ import annotations

import numpy as np

from toolkit.plot.numbers import format_tick, format_ticks, format_value  # noqa: F401 (their home before)
from toolkit.plot.scale_rules import (  # noqa: F401 (their home before)
    ROBUST_PERCENTILES,
    color_limits,
    colorbar_ticks,
    data_limits,
    symmetric_limits,
)

SCALES = ("diverging", "sequential", "log")

#: Blue (low) - white (middle) - orange (high), as in the published figures.
DIVERGING_COLORS = ("#1f4e8c", "#5b8fc7", "#b9d3ea", "#ffffff", "#fdd3a5", "#f39237", "#b34d00")
#: White to deep orange, for ``scale="sequential"`` and ``scale="log"``.
SEQUENTIAL_COLORS = ("#fff7ec", "#fdd3a5", "#f9a35a", "#e8731a", "#b34d00", "#6b2c00")
#: Face colour and hatch of cells with no value (NaN, e.g. ``mlp.gate`` of BERT).
NAN_FACE = "#ececec"
NAN_EDGE = "#9a9a9a"
NAN_HATCH = "///"

_CMAPS: dict[str, object] = {}


def check_scale(scale: str) -> str:
    """Return ``scale`` if it is one of :data:`SCALES`, else raise ValueError."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}; got {scale!r}")
    return scale


def cmap(scale: str = "diverging", span=(0.0, 1.0)):
    """The colormap for a scale, or the part ``span`` of it.

    Parameters
    ----------
    scale : {"diverging", "sequential", "log"}
    span : (float, float), default (0.0, 1.0)
        The part of the map drawn between the colour limits
        (:func:`toolkit.plot.scale_rules.bounded_diverging`: a diverging bar cut at its
        metric's bound; :func:`~toolkit.plot.scale_rules.constant_limits`: one colour).

    Returns
    -------
    matplotlib.colors.Colormap
        ``toolkit_diverging`` (blue-white-orange) or ``toolkit_sequential``
        (white-orange, shared by "sequential" and "log"), resampled over
        ``span``. NaN cells are drawn transparent so the hatched background
        shows through.
    """
    from matplotlib.colors import LinearSegmentedColormap, ListedColormap

    name = "diverging" if check_scale(scale) == "diverging" else "sequential"
    key = (name, float(span[0]), float(span[1]))
    if key not in _CMAPS:
        colors = DIVERGING_COLORS if name == "diverging" else SEQUENTIAL_COLORS
        cm = LinearSegmentedColormap.from_list(f"toolkit_{name}", colors, N=256)
        if key[1:] != (0.0, 1.0):
            cm = ListedColormap(cm(np.linspace(key[1], key[2], 256)), name=f"toolkit_{name}_{key[1]:.4g}_{key[2]:.4g}")
        _CMAPS[key] = cm.with_extremes(bad=(0, 0, 0, 0))
    return _CMAPS[key]


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
