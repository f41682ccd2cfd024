"""The live pass's clock: the time left as a pure function of what the pass has measured and what is left.

A tensor's time is modelled as ``a * entries + b * entries * smaller side``: reading and the entry-wise
statistics grow with the entries, the singular values with entries times the smaller side. The two rates are
fitted, as the pass goes, to the tensors it has computed (:func:`fit_rates`), so a pass of norms only (``b``
comes out 0) and a pass dominated by spectra (``a`` small next to ``b``) both get their own clock, where one
rate per "unit of work" made a Qwen2.5-7B-shaped pass's estimate 3-4x too high (the small matrices, measured
first, carry a larger share of reading per unit of spectrum than the large ones to come).

No widget and no clock here: :class:`PassStatus` is a frozen snapshot, and :func:`seconds_left` reads it;
:class:`toolkit.widgets.live_pace.Pace` builds the snapshot from the pass's reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Matrices whose smaller sides differ by less than this factor cannot tell the two rates apart.
DISTINCT_SIDES = 1.05


@dataclass(frozen=True)
class Cost:
    """What measuring one tensor costs, in the model's two units.

    Attributes
    ----------
    entries : float
        Its entries.
    spectral : float
        Its entries times its smaller matrix side (the singular values' cost); ``entries`` for a vector;
        0 in a pass that computes no singular values (norms only).
    """

    entries: float
    spectral: float

    @property
    def side(self) -> float:
        """The smaller matrix side (1 for a vector)."""
        return self.spectral / self.entries if self.entries else 1.0


def cost_of(shape, *, spectra: bool = True) -> Cost:
    """The :class:`Cost` of a tensor of ``shape`` (a stacked ``(experts, out, in)`` counts every entry); with
    ``spectra`` False (a pass of norms only) its spectral part is 0.

    Examples
    --------
    >>> cost_of((512, 3584))
    Cost(entries=1835008, spectral=939524096)
    >>> cost_of((512, 3584), spectra=False)
    Cost(entries=1835008, spectral=0)
    """
    dims = [int(d) for d in shape]
    entries = math.prod(dims)
    return Cost(entries, entries * (min(dims[-2:]) if len(dims) >= 2 else 1) if spectra else 0)


@dataclass(frozen=True)
class PassStatus:
    """A snapshot of a live pass, as the clock reads it.

    Attributes
    ----------
    measured : tuple of (Cost, float)
        Each tensor this run *computed* (not found in the cache) and the seconds it took.
    left : tuple of Cost
        The tensors still to measure.
    running : bool
        A segment is measuring (after a Stop, the end or a failure nothing is left to wait for).
    """

    measured: tuple = ()
    left: tuple = ()
    running: bool = True


def _single_rate(xs) -> float:
    """The rate ``r`` minimising ``sum((r * x - 1) ** 2)``: one rate fitted in relative error."""
    return sum(xs) / sum(x * x for x in xs)


def fit_rates(measured) -> tuple[float, float]:
    """The rates ``(a, b)`` (seconds per entry, seconds per spectral unit) that fit the computed tensors.

    Fitted by least squares in *relative* error, ``sum(((a n_i + b w_i) - t_i) / t_i) ** 2``, with ``a, b >= 0``
    (the better single-rate fit where the pair would have a negative rate), so a small matrix counts as much as
    a large one. While every tensor so far has one smaller side (a 7B model's ``attn.k`` and ``attn.v`` come
    first), the two costs cannot be told apart: the rate is then all spectral (``a = 0``), the cost that
    dominates a pass of large matrices.

    Parameters
    ----------
    measured : iterable of (Cost, float)
        Computed tensors and their seconds (those with a non-positive time are left out).

    Returns
    -------
    (float, float)
        ``(0.0, 0.0)`` with nothing to fit.

    Examples
    --------
    Two shapes whose times are ``1e-8 * entries + 1e-11 * spectral`` give back exactly those rates:

    >>> small, large = Cost(1e6, 5e8), Cost(1e7, 4e10)
    >>> a, b = fit_rates([(small, 1e-2 + 5e-3), (large, 1e-1 + 4e-1)])
    >>> round(a * 1e8, 6), round(b * 1e11, 6)
    (1.0, 1.0)
    """
    rows = [(c.entries / t, c.spectral / t, c.side) for c, t in measured if t > 0 and c.entries > 0]
    if not rows:
        return 0.0, 0.0
    if not any(w for _, w, _ in rows):  # a pass of entry-wise statistics: no spectral cost
        return _single_rate([n for n, _, _ in rows]), 0.0
    sides = [s for _, _, s in rows]
    only_b = (0.0, _single_rate([w for _, w, _ in rows]))
    if min(sides) > 0 and max(sides) / min(sides) < DISTINCT_SIDES:
        return only_b
    snn = sum(n * n for n, _, _ in rows)
    sww = sum(w * w for _, w, _ in rows)
    snw = sum(n * w for n, w, _ in rows)
    sn, sw = sum(n for n, _, _ in rows), sum(w for _, w, _ in rows)
    det = snn * sww - snw * snw
    if det > 0:
        a, b = (sn * sww - sw * snw) / det, (sw * snn - sn * snw) / det
        if a >= 0 and b >= 0:
            return a, b
    only_a = (_single_rate([n for n, _, _ in rows]), 0.0)

    def misfit(rates) -> float:
        return sum((rates[0] * n + rates[1] * w - 1.0) ** 2 for n, w, _ in rows)

    return min((only_a, only_b), key=misfit)


def seconds_left(status: PassStatus) -> float | None:
    """Seconds the rest of the pass will take at the fitted rates (:func:`fit_rates`).

    Returns
    -------
    float or None
        None when nothing runs, nothing is left, or no tensor has been computed yet (no guess).

    Examples
    --------
    >>> k = Cost(1e6, 5e8)
    >>> seconds_left(PassStatus(measured=((k, 0.5),), left=(k, k)))
    1.0
    """
    if not status.running or not status.left or not status.measured:
        return None
    a, b = fit_rates(status.measured)
    if a == 0 and b == 0:
        return None
    return sum(a * c.entries + b * c.spectral for c in status.left)
