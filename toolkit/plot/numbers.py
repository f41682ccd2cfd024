"""How every view of the toolkit prints a number, and how many digits a panel's numbers need.

One rule, written twice: here in Python and as ``formatNumber`` in
``toolkit/widgets/js/common.js`` (the page); ``tests/plot/test_numbers_js.py`` checks
that both give the same text on a table of values.

- :func:`format_value` prints ``digits`` significant digits (3 by default):
  plain from 0.001 to 9999 with trailing zeros dropped (``0.0912``, ``35.5``,
  ``9710``), scientific outside (``1.90e+04``, ``8.54e-04``). Ties round away
  from zero (as JavaScript's ``toPrecision`` does), so Python and the page
  never differ on a half.
- :func:`digits_for` is the number of significant digits that tells a panel's
  numbers apart: enough that the last digit is a twentieth of the spread or
  finer (three at least), so values a twentieth of the spread apart never share
  a label: RMS values 0.020000 .. 0.020020 print as ``0.020005``, ``0.02001``,
  never ``0.02 0.02 0.02``; an ordinary panel (0.075 .. 0.105) keeps three.
- :func:`near_constant_note` is what a panel whose spread is tiny next to its
  values says on the figure: ``all within 0.1 % of 0.02``.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

#: Fewest and most significant digits a label carries.
MIN_DIGITS, MAX_DIGITS = 3, 15
#: Labels resolve a panel's spread into at least this many steps (about what the eye tells apart in a colour map).
LEVELS = 20
#: A panel whose values all lie within this fraction of their median says so on the figure.
NEAR_CONSTANT = 0.01
#: Labels print plain between these magnitudes, scientific outside.
PLAIN_RANGE = (Decimal("0.001"), Decimal("1e4"))


def _round(x: float, digits: int) -> Decimal:
    """``x`` (exactly, as its binary value) rounded to ``digits`` significant digits, ties away from zero."""
    d = Decimal(x)
    return d.quantize(Decimal(1).scaleb(d.adjusted() - digits + 1), rounding=ROUND_HALF_UP)


def format_value(x: float, digits: int = MIN_DIGITS, *, trim: bool = True) -> str:
    """A number as every view of the toolkit prints it.

    Parameters
    ----------
    x : float
    digits : int, default 3
        Significant digits (:func:`digits_for` gives a panel's).
    trim : bool, default True
        Drop a plain number's trailing zeros (``192``); False keeps them, so that a column of
        numbers (the explorer's top-cells table) shows every value with its ``digits`` digits
        (``192.0`` beside ``192.3``, ``1.000`` beside ``0.9976``). The page's ``formatNumber(x, digits,
        trim)`` does the same.

    Returns
    -------
    str
        Plain from 0.001 to 9999 (``0.0912``, ``35.5``, ``9710``; trailing
        zeros dropped), scientific outside (``1.90e+04``, ``8.54e-04``: always
        ``digits`` digits); the notation follows the rounded value (9996 ->
        ``1.00e+04``). ``""`` for NaN, ``inf`` / ``-inf``, ``0``.
    """
    x = float(x)
    if math.isnan(x):
        return ""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    digits = int(min(max(digits, 1), MAX_DIGITS))
    q = _round(x, digits)
    if PLAIN_RANGE[0] <= abs(q) < PLAIN_RANGE[1]:
        text = f"{q:.{max(0, digits - 1 - q.adjusted())}f}"
        return text.rstrip("0").rstrip(".") if trim and "." in text else text
    return scientific(x, digits)


def scientific(x: float, digits: int = MIN_DIGITS) -> str:
    """``1.90e+04``: ``digits`` significant digits in scientific notation (two exponent digits at least)."""
    if float(x) == 0:
        return "0"
    q = _round(float(x), digits)
    mantissa = q.scaleb(-q.adjusted())
    text = f"{mantissa:.{digits - 1}f}"
    return f"{text}e{'-' if q.adjusted() < 0 else '+'}{abs(q.adjusted()):02d}"


def is_plain(x: float, digits: int = MIN_DIGITS) -> bool:
    """Whether :func:`format_value` prints ``x`` without an exponent (0 and non-finite count as plain)."""
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return True
    return PLAIN_RANGE[0] <= abs(_round(x, int(min(max(digits, 1), MAX_DIGITS)))) < PLAIN_RANGE[1]


def digits_for(values, lo: float | None = None, hi: float | None = None) -> int:
    """Significant digits that tell a panel's numbers apart.

    Parameters
    ----------
    values : array_like
        The numbers shown (NaN and +-inf ignored).
    lo, hi : float, optional
        The colour limits: their span counts too (colour-bar ticks lie between them).

    Returns
    -------
    int
        ``1 + floor(log10(magnitude)) - floor(log10(spread / 20))`` clipped to
        [:data:`MIN_DIGITS`, :data:`MAX_DIGITS`]: the largest absolute value
        against the smallest positive spread (of the values, of the limits),
        so the last digit printed is at most a twentieth of the spread
        (:data:`LEVELS`). 3 for a constant panel.
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    spans = [float(v.max() - v.min())] if v.size else []
    ends = [float(t) for t in (lo, hi) if t is not None and math.isfinite(t)]
    if lo is not None and hi is not None and len(ends) == 2:
        spans.append(abs(ends[1] - ends[0]))
    spans = [s for s in spans if s > 0]
    magnitude = max([abs(float(t)) for t in (*v.tolist(), *ends)] or [0.0])
    if not spans or magnitude == 0:
        return MIN_DIGITS
    digits = 1 + math.floor(math.log10(magnitude)) - math.floor(math.log10(min(spans) / LEVELS))
    return int(min(max(digits, MIN_DIGITS), MAX_DIGITS))


def distinct_digits(values, start: int = MIN_DIGITS) -> int:
    """The fewest significant digits, ``start`` or more, that give distinct values distinct labels (for a
    short list such as the top-cells table; at most :data:`MAX_DIGITS`)."""
    v = [float(x) for x in np.asarray(values, dtype=float).ravel() if math.isfinite(x)]
    wanted = len(set(v))
    digits = max(int(start), 1)
    while digits < MAX_DIGITS and len({format_value(x, digits) for x in v}) < wanted:
        digits += 1
    return digits


def near_constant_note(values) -> str:
    """What a panel whose spread is tiny next to its values says on the figure, else ``""``.

    ``"all within 0.1 % of 0.02"`` when every finite value lies within
    :data:`NEAR_CONSTANT` (1 %) of their median (and they are not all equal:
    a constant panel says ``constant: ...``). The percentage is rounded up,
    so the values do lie within it.
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if v.size < 2 or v.min() == v.max():
        return ""
    median = float(np.median(v))
    if median == 0:
        return ""
    rel = float(np.max(np.abs(v - median))) / abs(median)
    if rel >= NEAR_CONSTANT:
        return ""
    pct = rel * 100
    step = 10.0 ** math.floor(math.log10(pct))  # one significant digit, rounded up
    pct = math.ceil(pct / step - 1e-9) * step
    return f"all within {format_value(pct, 1)} % of {format_value(median)}"


def format_tick(x: float, scale: str, digits: int = MIN_DIGITS) -> str:
    """Colorbar tick label: powers of ten as ``10^k`` on a log scale, else :func:`format_value`."""
    if scale == "log" and x > 0:
        k = math.log10(x)
        if abs(k - round(k)) < 1e-9:
            return f"$10^{{{round(k)}}}$"
    return format_value(x, digits)


def format_column(values, digits: int = MIN_DIGITS) -> list[str]:
    """A column of numbers (a table's) in one notation, each with ``digits`` significant digits, trailing
    zeros kept (``8.00`` beside ``3.25``; a column of whole numbers, counts, stays ``48``): scientific for
    all where any needs it (:func:`format_ticks`' rule), else plain."""
    values = [float(v) for v in values]
    finite = [v for v in values if math.isfinite(v)]
    sci = not all(is_plain(v, digits) for v in finite if v != 0)
    trim = all(v == round(v) for v in finite)
    return [scientific(v, digits) if sci and math.isfinite(v) and v != 0 else format_value(v, digits, trim=trim)
            for v in values]


def format_ticks(ticks, scale: str, digits: int = MIN_DIGITS) -> list[str]:
    """Labels for one colorbar's ticks in one notation: when any of them needs scientific notation (see
    :func:`format_value`) all get it, so 8.54e-04 never sits next to 0.00177."""
    ticks = [float(t) for t in ticks]
    sci = not all(is_plain(t, digits) for t in ticks if math.isfinite(t) and t != 0)  # 0 prints as "0" either way
    labels = []
    for t in ticks:
        label = format_tick(t, scale, digits)
        if sci and not label.startswith("$") and math.isfinite(t) and t != 0:
            label = scientific(t, digits)
        labels.append(label)
    return labels
