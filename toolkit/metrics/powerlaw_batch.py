r"""The default power-law fit of many spectra of one length at once: the exponents a bootstrap needs.

:func:`fit_alphas` gives, for every row of a stack of ascending spectra, the ``alpha`` that
:func:`toolkit.metrics.powerlaw.fit_power_law` (default options) gives for that row alone, or NaN where that
fit raises :class:`~toolkit.errors.DegenerateMatrix`. It is the same fit, batched: the semi-parametric bootstrap
of :mod:`toolkit.metrics.alpha_interval_xmin` refits 200 spectra of one length per matrix, and one fit at a
time costs that many passes of Python around arrays of a few hundred values.

The same choice, on every row (WeightWatcher 0.7.7's default fit, :mod:`toolkit.metrics.powerlaw`):

1. the MLE :math:`\alpha_i` of every candidate :math:`x_{min} = \lambda_i`, :math:`i < N - 1`
   (:func:`~toolkit.metrics.power_law_tail.tail_alphas` along the rows: the same bits as a row alone);
2. :math:`N \ge 20`: the candidates with :math:`\alpha_i > 1` (the others score :math:`D = 1`), the chosen one
   the first minimum of the exact KS distance :math:`D_i` (the expression of
   :func:`~toolkit.metrics.power_law_tail.exact_ks_distances`);
3. :math:`N < 20`: WeightWatcher's small-N fit, the bias-corrected :math:`\alpha_i` of the tails of at least 8
   values with a spread above :math:`10^{-12}`, all scored exactly;
4. a row is degenerate where its alpha is infinite, its tail is flat within rounding
   (:func:`~toolkit.metrics.power_law_tail.flat_reason`) or it has fewer than ``min_eigenvalues`` values.

How step 2 avoids the :math:`N^2/2` distances of every row, with the single fit's pruning rule (a candidate whose
lower bound exceeds an upper bound on the row's minimum by more than :math:`10^{-9}` relative plus
:math:`10^{-12}` is dropped: its :math:`D` exceeds another's, it is never the minimum):

a. probes: the candidates of tail sizes :math:`8 \cdot 1.5^k` (or :math:`1.5^{-2..2}` times a ``tail_hint``: a
   bootstrap's replicates have their minima near the tail they were drawn with), then four around each row's
   best one; their distances plus the rounding bound below are the first upper bounds on each row's minimum;
b. one sampled deviation :math:`|F_{fit} - F_{emp}|` of every candidate of every row at the quantile 1/2 of its
   tail (array operations over the stack), then at 1/4 and 3/4 of the survivors';
c. the single fit's rounds of sampled bounds (:func:`~toolkit.metrics.power_law_tail.ks_bounds`,
   :math:`K = 8, 32, 128, ...`) on the survivors whose tails are longer than :math:`2(K + 1)`, the 4 smallest
   lower bounds of each row probed after each round (the single fit: the 8 smallest upper bounds, and only while
   a row has more than 64 candidates; which candidates are probed changes the cost, not the minimum: ranking by
   the lower bound spares the upper one's computation);
d. the survivors' distances computed from the logarithms,
   :math:`\max_t |\mathrm{expm1}((1-\alpha_i)(\ln\lambda_{i+t} - \ln\lambda_i)) + t/n_i|` (no power: about
   twice as fast; :math:`e^z - 1` by :func:`~toolkit.metrics.power_law_tail.exp_minus_one`), within
   :math:`\epsilon_i = 2^{-52}(16 + 64|1 - \alpha_i|(\max_j|\ln\lambda_j| + 1))` of the exact expression (the
   logarithms' few-ulp errors amplified by :math:`|1 - \alpha_i|`, the ratio's rounding amplified by the power,
   the rest, :math:`e^z - 1` included, a few ulp of numbers at most 1);
e. every candidate whose approximate distance is within :math:`\epsilon` of the row's smallest (typically one) is
   scored by the exact expression, element for element the single fit's, and the first minimum taken: the
   others' exact distances exceed it.

So the choice is WeightWatcher's argmin, with its tie-break, on every row. Equality with
:func:`~toolkit.metrics.powerlaw.fit_power_law` row by row (heavy-tailed, Marchenko-Pastur, short, tied, pruned,
small-N and degenerate rows, scales and exponents built to stress the bound):
``tests/metrics/test_powerlaw_batch.py``; cost: ``benchmarks/bench_xmin_interval.py``.

References
----------
Clauset, A., Shalizi, C. R. & Newman, M. E. J. (2009). Power-law distributions in empirical data. *SIAM Review*
51(4), 661-703, eqs. (3.7) and (3.9) (the MLE and the KS choice of :math:`x_{min}`).
"""

from __future__ import annotations

import numpy as np

from toolkit.metrics.power_law_tail import (
    BLOCK_ELEMENTS,
    MIN_EIGENVALUES,
    exact_ks_distances,
    exp_minus_one,
    ks_bounds,
    spread_above_rounding,
    tail_alphas,
    take_rows,
)
from toolkit.metrics.powerlaw import _FIRST_SAMPLES, SMALL_N

__all__ = ["fit_alphas"]

#: At most this many candidates per block of exact distances (a stack's candidates of one block share the
#: widest tail's width; grouped by position, small blocks waste little).
_BLOCK_CANDIDATES = 256
#: Candidates probed per row after each round of bounds (the single fit's 8).
_PROBES = 4
#: Each round of bounds samples this many times as many quantiles as the last.
_GROWTH = 4
#: Quantiles of each candidate's tail where one deviation is sampled before the rounds (a lower bound on D).
_QUANTILES = (0.5, 0.25, 0.75)
#: Unit roundoff of float64.
_ROUNDING = 2.0 ** -52


def fit_alphas(spectra, *, min_eigenvalues: int = MIN_EIGENVALUES, tail_hint: int | None = None) -> np.ndarray:
    r"""The default fit's alpha of every row of a stack of spectra of one length (module docstring).

    Parameters
    ----------
    spectra : array-like, shape (B, N)
        Each row a spectrum, ascending, every value above the fit's threshold (the kept eigenvalues).
    min_eigenvalues : int, default 8
        Fewer values than this is degenerate (:func:`~toolkit.metrics.powerlaw.fit_power_law`).
    tail_hint : int, optional
        A tail size the rows' minima are expected near (a bootstrap's: the fit its replicates were drawn
        from): the first probes are the candidates of tail sizes :math:`1.5^{-2..2}` times it instead of the
        ladder :math:`8 \cdot 1.5^k` (step a). Which candidates are probed changes the cost, never the result.

    Returns
    -------
    numpy.ndarray, shape (B,), float64
        ``fit_power_law(row).alpha`` for each row, NaN where that fit raises
        :class:`~toolkit.errors.DegenerateMatrix`.

    Raises
    ------
    ValueError
        ``spectra`` not two-dimensional.
    """
    x = np.asarray(spectra, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"fit_alphas takes a stack of spectra, shape (B, N); got shape {x.shape}")
    B, N = x.shape
    out = np.full(B, np.nan)
    if N < max(min_eigenvalues, 2) or B == 0:
        return out
    logx = np.log(x)
    # inf and NaN are expected in the candidates' arrays (flat tails, alpha <= 1): one errstate for the whole fit
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        d, alpha, fitted = _distances(x, logx, tail_hint)
    i = np.argmin(d, axis=1)
    a = alpha[np.arange(B), i]
    ok = fitted & np.isfinite(a) & spread_above_rounding(x[np.arange(B), i], x[:, -1], N)  # flat_reason's rule
    out[ok] = a[ok]
    return out


def _distances(x, logx, tail_hint):
    """The KS distance of every candidate that can be each row's minimum (exact), 1 or inf elsewhere: (d, alpha,
    fitted), fitted False for a row without a candidate (module docstring, steps 1-3)."""
    B, N = x.shape
    if N < SMALL_N:
        alpha, n, s = tail_alphas(logx, bias_corrected=True)
        rows, cols = ((n >= 8)[None, :] & (s > 1e-12)).nonzero()
        d = np.full((B, N - 1), np.inf)
        _exact(x, rows, cols, alpha, n, d)
        return d, alpha, np.bincount(rows, minlength=B) > 0
    alpha, n, _ = tail_alphas(logx)
    d = np.ones((B, N - 1))  # WeightWatcher only scores alpha > 1 (else D = 1)
    scored = np.zeros((B, N - 1), dtype=bool)
    # |D computed from the logarithms - D of the single fit's expression| <= eps (module docstring)
    eps = _ROUNDING * (16.0 + 64.0 * np.abs(1.0 - alpha) * (np.abs(logx).max(axis=1, keepdims=True) + 1.0))
    rows, cols = _survivors(logx, alpha, n, d, scored, eps, tail_hint)
    _approximate(logx, rows, cols, alpha, n, d)
    scored[rows, cols] = True
    # the candidates that can be the minimum: the exact expression decides between them
    reach = np.fmin.reduce(np.where(scored, d + eps, np.inf), axis=1)
    near = scored & ~(d - eps > reach[:, None])
    _exact(x, *near.nonzero(), alpha, n, d)
    return d, alpha, np.ones(B, dtype=bool)


def _blocks(rows, cols, N):
    """The candidates grouped by position (widest tail first), in blocks of at most ``_BLOCK_CANDIDATES`` and
    ``BLOCK_ELEMENTS``: (order, start, stop) of each block in the sorted order."""
    order = np.lexsort((rows, cols))
    c = cols[order]
    pos = 0
    while pos < c.size:
        count = max(1, min(_BLOCK_CANDIDATES, BLOCK_ELEMENTS // (N - int(c[pos]))))
        yield order[pos : pos + count]
        pos += count


def _exact(x, rows, cols, alpha, n, d) -> None:
    """``d[rows, cols]`` = the exact KS distances of those candidates: the single fit's expression
    (:func:`~toolkit.metrics.power_law_tail.exact_ks_distances`), element for element."""
    if rows.size:
        order = np.lexsort((rows, cols))
        r, c = rows[order], cols[order]
        d[r, c] = exact_ks_distances(x, c, alpha, n, rows=r, block_rows=_BLOCK_CANDIDATES)


def _approximate(logx, rows, cols, alpha, n, d) -> None:
    r"""``d[rows, cols]`` = the KS distances from the logarithms:
    :math:`\max_t |\mathrm{expm1}((1 - \alpha_i)(\ln\lambda_{i+t} - \ln\lambda_i)) + t/n_i|`, the single
    fit's :math:`|1 - (\lambda_{i+t}/\lambda_i)^{1-\alpha_i} - t/n_i|` without a power (within ``eps``)."""
    N = logx.shape[1]
    for sel in _blocks(rows, cols, N):
        r, c = rows[sel], cols[sel]
        i0 = int(c.min())
        t = np.arange(i0, N, dtype=np.float64)[None, :] - c[:, None]  # offset in each tail; < 0 outside it
        dev = exp_minus_one((1.0 - take_rows(alpha, r, c))[:, None] * (logx[r, i0:] - take_rows(logx, r, c)[:, None]))
        dev += t / n[c][:, None]
        np.abs(dev, out=dev)
        dev[t < 0] = 0.0
        d[r, c] = dev.max(axis=1)


def _survivors(logx, alpha, n, d, scored, eps, tail_hint=None) -> tuple[np.ndarray, np.ndarray]:
    """The rounds of bounds on every row (module docstring, step 2): the probes' distances written into ``d``
    (and marked in ``scored``), the candidates still to score returned as (rows, columns)."""
    B, N = logx.shape
    alive = alpha > 1.0
    # probes first: the candidates of tail sizes 8, 12, 18, ... (a replicate's minimum is near its drawn tail)
    if tail_hint:
        sizes = np.unique(np.clip(np.round(tail_hint * 1.5 ** np.arange(-2.0, 3.0)), 8, N).astype(np.int64))
    else:
        sizes = np.unique(np.round(8.0 * 1.5 ** np.arange(int(np.log(N / 8.0) / np.log(1.5)) + 1)).astype(np.int64))
    at = N - sizes  # 8 <= sizes <= N
    pr, pj = np.nonzero(alive[:, at])
    _approximate(logx, pr, at[pj], alpha, n, d)
    scored[pr, at[pj]] = True
    first = np.full((B, at.size), np.inf)
    first[pr, pj] = d[pr, at[pj]] + eps[pr, at[pj]]
    best = np.fmin.reduce(first, axis=1)  # per row, an upper bound on min D
    # then around each row's best probe: tail sizes 1.5 ** (+-1/3, +-2/3) times its size
    near = np.flatnonzero(np.isfinite(best))
    m = sizes[np.argmin(first[near], axis=1)][:, None] * 1.5 ** np.array([-2 / 3, -1 / 3, 1 / 3, 2 / 3])
    pr = np.repeat(near, 4)
    pc = N - np.clip(np.round(m).astype(np.int64), 2, N).ravel()
    pr, pc = pr[alive[pr, pc] & ~scored[pr, pc]], pc[alive[pr, pc] & ~scored[pr, pc]]
    _approximate(logx, pr, pc, alpha, n, d)
    scored[pr, pc] = True
    np.fmin.at(best, pr, d[pr, pc] + eps[pr, pc])
    # one sampled deviation of every candidate, at quantiles of its tail, on the whole stack at once
    idx = np.arange(N - 1)
    q, *later = _QUANTILES
    t = (q * (n - 1.0)).astype(np.int64)
    f = -exp_minus_one((1.0 - alpha) * (logx[:, idx + t] - logx[:, :-1]))  # the whole stack; the others: survivors
    alive &= ~(np.abs(f - t / n) > best[:, None] * (1 + 1e-9) + 1e-12)
    rows, cols = np.nonzero(alive)  # row-major: each row's candidates ascending
    for q in later:
        t = (q * (n[cols] - 1.0)).astype(np.int64)
        f = -exp_minus_one((1.0 - take_rows(alpha, rows, cols))
                           * (take_rows(logx, rows, cols + t) - take_rows(logx, rows, cols)))
        keep = ~(np.abs(f - t / n[cols]) > best[rows] * (1 + 1e-9) + 1e-12)
        rows, cols = rows[keep], cols[keep]
    k = _FIRST_SAMPLES
    while rows.size:
        # bounds where k + 1 samples are cheaper than the exact distance (tails longer than 2 (k + 1))
        on = (n[cols] > 2 * (k + 1)) & ~scored[rows, cols]
        if not on.any():
            break
        r, c = rows[on], cols[on]
        lower, _ = ks_bounds(logx, c, alpha, n, k, rows=r, with_upper=False)
        # the candidates of each row with the smallest lower bounds, scored
        grid = np.full((B, N - 1), np.inf)
        grid[r, c] = lower
        live = np.flatnonzero(np.bincount(r, minlength=B) >= _PROBES)
        pc = np.argpartition(grid[live], _PROBES - 1, axis=1)[:, :_PROBES].ravel()
        pr = np.repeat(live, _PROBES)
        fresh = ~scored[pr, pc]
        _approximate(logx, pr[fresh], pc[fresh], alpha, n, d)
        scored[pr, pc] = True
        best[live] = np.fmin(best[live], np.fmin.reduce((d + eps)[pr, pc].reshape(live.size, _PROBES), axis=1))
        pruned = lower > best[r] * (1 + 1e-9) + 1e-12
        keep = np.ones(rows.size, dtype=bool)
        keep[np.flatnonzero(on)[pruned]] = False
        rows, cols = rows[keep], cols[keep]
        k *= _GROWTH
    todo = ~scored[rows, cols]
    return rows[todo], cols[todo]
