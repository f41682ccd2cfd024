"""The live pass's clock: the time left as a pure function of what the pass has measured and what is left.

A tensor's time is modelled as ``a * entries + b * entries * smaller side`` (+ ``e * smaller side ** 3``
with a probe): reading and the entry-wise statistics grow with the entries, the Gram product with entries
times the smaller side, its eigenvalues with the smaller side cubed (a square ``attn.q`` pays about as much
for its eigenvalues as for its Gram product, a 7B ``mlp.down`` a fifth).

Two clocks, one status:

- **with a probe** of this machine's Gram and eigenvalue speed (:class:`ProbeRates`,
  :func:`toolkit.widgets.live_probe.probe_rates`, taken before a pass of large matrices): ``b`` and ``e``
  are the probe's, ``a``, a set-up time and a scale of the probe's rates are fitted to the times so far
  (:func:`fit_progress`), and the tensors left are scheduled over the pass's pipelines (:func:`makespan`).
  A pass measures on two pipelines at once: its reports come in pairs (one after a tensor's whole time, the
  next a moment later), so the fit reads cumulative time with the tensor in flight half done, and the end
  of a pass, when one pipeline has no more work, is not divided by two. Tensors of one smaller side (a 7B
  model's first look: ``attn.k`` and ``attn.v`` of every layer) cannot tell reading from spectra; the probe
  can. A Qwen2.5-7B-shaped pass recorded here (``benchmarks/bench_live_clock.py``) is within 1.5x of the
  truth from its fifth tensor on.
- **without** (norms only, a small model): the two rates ``a, b`` fitted to the computed tensors
  (:func:`fit_rates`), one rate while their sides are one.

No widget and no clock here: :class:`PassStatus` is a frozen snapshot, and :func:`seconds_left` reads it;
:class:`toolkit.widgets.live_pace.Pace` builds the snapshot from the pass's reports.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np

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
        Its entries times its smaller matrix side (the Gram product's cost); ``entries`` for a vector;
        0 in a pass that computes no singular values (norms only).
    cubic : float
        Its smaller side cubed, per matrix (the eigenvalues' cost; a stacked ``(experts, out, in)`` counts
        each expert); 0 in a pass of norms only.
    """

    entries: float
    spectral: float
    cubic: float = 0.0

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
    Cost(entries=1835008, spectral=939524096, cubic=134217728)
    >>> cost_of((512, 3584), spectra=False)
    Cost(entries=1835008, spectral=0, cubic=0)
    """
    dims = [int(d) for d in shape]
    entries = math.prod(dims)
    side, matrices = (min(dims[-2:]), math.prod(dims[:-2])) if len(dims) >= 2 else (1, 1)
    return Cost(entries, entries * side if spectra else 0, matrices * side ** 3 if spectra else 0)


@dataclass(frozen=True)
class ProbeRates:
    """What one pipeline of a pass pays for the singular values on this machine, probed before the pass.

    Attributes
    ----------
    gram : float
        Seconds per unit of :attr:`Cost.spectral` (a Gram product's multiply-adds).
    eig : float
        Seconds per unit of :attr:`Cost.cubic` (the eigenvalues of the Gram matrix).
    pipelines : int
        Tensors the pass measures at once (:data:`toolkit.collect.execute.stream.MAX_PIPELINES` at most),
        each at these rates while the others run.
    """

    gram: float
    eig: float
    pipelines: int = 1

    def work(self, cost: Cost) -> float:
        """One pipeline's seconds for ``cost``'s singular values at the probed rates."""
        return self.gram * cost.spectral + self.eig * cost.cubic


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
    probe : ProbeRates, optional
        This machine's rates for the singular values (a pass of large matrices): the scheduled clock.
    """

    measured: tuple = ()
    left: tuple = ()
    running: bool = True
    probe: ProbeRates | None = None


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
    if status.probe is not None:
        return scheduled_left(status.measured, status.left, status.probe)
    a, b = fit_rates(status.measured)
    if a == 0 and b == 0:
        return None
    return sum(a * c.entries + b * c.spectral for c in status.left)


#: How much of the tensor a pipeline is measuring when another one reports is taken as done (its start is
#: not reported: on average, half).
IN_FLIGHT_DONE = 0.5


def _in_flight(rest: list, pipelines: int) -> list:
    """The tensors the other pipelines are measuring: the next ``pipelines - 1`` of ``rest`` (cheapest
    first, the live order), while more are left than they can hold."""
    return rest[:pipelines - 1] if len(rest) > pipelines - 1 else []


def progress_rows(measured, left, probe: ProbeRates) -> list[tuple[float, float, float]]:
    """After each computed tensor: the entries and the probe's seconds of spectra done (per pipeline count,
    i.e. wall seconds at the probed rates), the tensors in flight counted :data:`IN_FLIGHT_DONE` done, and the
    seconds the run had spent. Linear in the tensors (a MoE pass has thousands).

    Parameters
    ----------
    measured : sequence of (Cost, float)
        Computed tensors in the order reported, each with the seconds since the report before it.
    left : sequence of Cost
        The tensors still to measure now.
    probe : ProbeRates

    Returns
    -------
    list of (float, float, float)
        ``(entries, spectral seconds, elapsed seconds)``, one row per computed tensor.
    """
    p = max(1, probe.pipelines)
    costs = [c for c, _ in measured]
    ahead = sorted(left, key=probe.work)[:p - 1]  # in flight now: the cheapest left, the live order's next
    rows, entries, spectra, elapsed = [], 0.0, 0.0, 0.0
    for j, (cost, seconds) in enumerate(measured):
        entries, spectra, elapsed = entries + cost.entries, spectra + probe.work(cost) / p, elapsed + seconds
        # in flight at report j: the tensors reported next (each pipeline's current one), while more are left
        # than the other pipelines hold
        flight = (costs[j + 1:j + p] + ahead)[:p - 1] if len(costs) - j - 1 + len(left) > p - 1 else []
        rows.append((entries + IN_FLIGHT_DONE * sum(c.entries for c in flight),
                     spectra + IN_FLIGHT_DONE * sum(probe.work(c) for c in flight) / p, elapsed))
    return rows


def after_warm_up(rows: list, pipelines: int) -> list:
    """``rows`` from each pipeline's first tensor on, counted from there: a pipeline's first tensor carries its
    set-up (its thread, its first file opened, its first call; on the recorded 7B pass the second pipeline's
    first ``attn.k`` took 0.37 s where the next took 0.006 s), which no per-tensor rate should absorb. All of
    ``rows`` while there are no more than ``pipelines`` of them."""
    p = max(1, pipelines)
    if len(rows) <= p:
        return rows
    n0, s0, t0 = rows[p - 1]
    return [(n - n0, s - s0, t - t0) for n, s, t in rows[p:]]


def _nonnegative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares ``x @ coef ~ y`` with ``coef >= 0`` (every subset of the few columns tried; the best
    whose free solution is non-negative); zeros when none is."""
    best, coef = math.inf, np.zeros(x.shape[1])
    for k in range(1, x.shape[1] + 1):
        for cols in itertools.combinations(range(x.shape[1]), k):
            sol = np.linalg.lstsq(x[:, cols], y, rcond=None)[0]
            if (sol < 0).any():
                continue
            res = float(((x[:, cols] @ sol - y) ** 2).sum())
            if res < best * (1 - 1e-12):
                best, coef = res, np.zeros(x.shape[1])
                coef[list(cols)] = sol
    return coef


def fit_progress(rows, *, scale_probe: bool) -> tuple[float, float, float]:
    """``(setup, a, k)`` with ``elapsed ~ setup + a * entries + k * spectral seconds`` over ``rows``
    (:func:`progress_rows`), all ``>= 0``, least squares in seconds (the later, longer rows weigh most).

    ``k``, the scale of the probe's rates in this pass, is fitted only with ``scale_probe`` (tensors of two
    smaller sides measured: reading and spectra apart); else 1.
    """
    r = np.asarray(rows, dtype=float)
    n, s, t = r[:, 0], r[:, 1], r[:, 2]
    # columns of order 1; reading, then the probe, then a set-up: where rows cannot tell them apart (one row)
    # the earlier explains the time
    scale = np.array([n[-1] or 1.0, s[-1] or 1.0, 1.0])
    if scale_probe:
        coef = _nonnegative_lstsq(np.stack([n, s, np.ones_like(n)], 1) / scale, t)
        return float(coef[2]), float(coef[0] / scale[0]), float(coef[1] / scale[1])
    coef = _nonnegative_lstsq(np.stack([n, np.ones_like(n)], 1) / scale[[0, 2]], t - s)
    return float(coef[1]), float(coef[0] / scale[0]), 1.0


def makespan(costs, seconds, pipelines: int) -> float:
    """Seconds until ``pipelines`` pipelines have measured ``costs`` (in order, each taken by the first free
    pipeline), each tensor taking ``seconds(cost)`` on one; the first ``pipelines - 1`` are in flight,
    :data:`IN_FLIGHT_DONE` done.

    Examples
    --------
    >>> makespan([1.0, 1.0, 1.0], float, 2)  # one in flight, half done; the free pipeline takes the next
    1.5
    """
    p = max(1, pipelines)
    flight = _in_flight(list(costs), p)
    free = [(1 - IN_FLIGHT_DONE) * seconds(c) for c in flight] + [0.0] * (p - len(flight))
    heapq.heapify(free)
    for c in list(costs)[len(flight):]:
        heapq.heappush(free, heapq.heappop(free) + seconds(c))
    return max(free)


def scheduled_left(measured, left, probe: ProbeRates) -> float:
    """Seconds the tensors ``left`` will take, from the probe's rates and the times so far (the clock with a
    probe: see the module docstring)."""
    p = max(1, probe.pipelines)
    sides = [c.side for c, _ in measured]
    two_sides = min(sides) > 0 and max(sides) / min(sides) >= DISTINCT_SIDES
    _, a, k = fit_progress(after_warm_up(progress_rows(measured, left, probe), p), scale_probe=two_sides)
    return makespan(sorted(left, key=probe.work), lambda c: p * a * c.entries + k * probe.work(c), p)
