r"""The default power-law fit of many spectra of one length at once: the exponents a bootstrap needs.

:func:`fit_alphas` gives, for every row of a stack of ascending spectra, the ``alpha`` that
:func:`toolkit.metrics.powerlaw.fit_power_law` (default options) gives for that row alone, or NaN where that
fit raises :class:`~toolkit.errors.DegenerateMatrix`. It is the same fit, batched: the semi-parametric bootstrap
of :mod:`toolkit.metrics.alpha_interval_xmin` refits 200 spectra of one length per matrix, and one fit at a
time costs that many passes of Python around arrays of a few hundred values.

The same rules, on every row (WeightWatcher 0.7.7's default fit, :mod:`toolkit.metrics.powerlaw`):

1. the MLE :math:`\alpha_i` of every candidate :math:`x_{min} = \lambda_i`, :math:`i < N - 1`
   (:func:`~toolkit.metrics.power_law_tail.tail_alphas` along the rows; the same bits as a row alone);
2. :math:`N \ge 20`: the candidates with :math:`\alpha_i > 1` (the others score :math:`D = 1`); rounds of sampled
   bounds (:func:`~toolkit.metrics.power_law_tail.ks_bounds`, :math:`K = 8, 32, 128, ...` quantiles) on the
   candidates of every row that still has more than 64 of them and a tail longer than :math:`2(K + 1)`; after
   each round the 8 candidates of the row with the smallest upper bound are scored exactly and every candidate
   whose lower bound exceeds the row's best exact :math:`D` by more than :math:`10^{-9}` relative plus
   :math:`10^{-12}` is dropped; the survivors are then scored exactly
   (:func:`~toolkit.metrics.power_law_tail.exact_ks_distances`, element for element the single fit's
   expression);
3. :math:`N < 20`: WeightWatcher's small-N fit, the bias-corrected :math:`\alpha_i` of the tails of at least 8
   values with a spread above :math:`10^{-12}`, all scored exactly;
4. :math:`x_{min}` minimises :math:`D` (first index on ties); a row is degenerate where its alpha is infinite, its
   tail is flat within rounding (:func:`~toolkit.metrics.power_law_tail.flat_reason`), it has fewer than
   ``min_eigenvalues`` values or (small N) no candidate.

A dropped candidate's :math:`D` exceeds an exact :math:`D` of its row, so it is never the minimum: the choice is
the argmin of the exact distances whichever candidates a round probes, as in the single fit. Equality with
:func:`~toolkit.metrics.powerlaw.fit_power_law` row by row, the same draws: ``tests/metrics/test_powerlaw_batch.py``.

References
----------
Clauset, A., Shalizi, C. R. & Newman, M. E. J. (2009). Power-law distributions in empirical data. *SIAM Review*
51(4), 661-703, eqs. (3.7) and (3.9) (the MLE and the KS choice of :math:`x_{min}`).
"""

from __future__ import annotations

import numpy as np

from toolkit.metrics.power_law_tail import (
    MIN_EIGENVALUES,
    exact_ks_distances,
    flat_reason,
    ks_bounds,
    tail_alphas,
)
from toolkit.metrics.powerlaw import _FIRST_SAMPLES, _SAMPLES, SMALL_N

__all__ = ["fit_alphas"]

#: At most this many candidates per block of exact distances (a stack's candidates of one block share the
#: widest tail's width; grouped by position, small blocks waste little).
_BLOCK_CANDIDATES = 256
#: Candidates scored exactly per row after each round of bounds (the single fit's 8).
_PROBES = 8


def fit_alphas(spectra, *, min_eigenvalues: int = MIN_EIGENVALUES) -> np.ndarray:
    r"""The default fit's alpha of every row of a stack of spectra of one length (module docstring).

    Parameters
    ----------
    spectra : array-like, shape (B, N)
        Each row a spectrum, ascending, every value above the fit's threshold (the kept eigenvalues).
    min_eigenvalues : int, default 8
        Fewer values than this is degenerate (:func:`~toolkit.metrics.powerlaw.fit_power_law`).

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
    if N < SMALL_N:
        alpha, n, s = tail_alphas(logx, bias_corrected=True)
        rows, cols = np.nonzero((n >= 8)[None, :] & (s > 1e-12))
        d = np.full((B, N - 1), np.inf)
        fitted = np.bincount(rows, minlength=B) > 0
    else:
        alpha, n, _ = tail_alphas(logx)
        d = np.ones((B, N - 1))  # WeightWatcher only scores alpha > 1 (else D = 1)
        rows, cols = _survivors(x, logx, alpha, n, d)
        fitted = np.ones(B, dtype=bool)
    _score(x, rows, cols, alpha, n, d)
    i = np.argmin(d, axis=1)
    a = alpha[np.arange(B), i]
    for b in np.flatnonzero(fitted & np.isfinite(a)):
        if not flat_reason(float(x[b, i[b]]), float(x[b, -1]), N):
            out[b] = a[b]
    return out


def _score(x, rows, cols, alpha, n, d) -> None:
    """``d[rows, cols]`` = the exact KS distances of those candidates, grouped by position."""
    if rows.size:
        order = np.lexsort((rows, cols))
        r, c = rows[order], cols[order]
        d[r, c] = exact_ks_distances(x, c, alpha, n, rows=r, block_rows=_BLOCK_CANDIDATES)


def _survivors(x, logx, alpha, n, d) -> tuple[np.ndarray, np.ndarray]:
    """The standard fit's rounds of bounds on every row (module docstring, step 2): the probes' exact distances
    written into ``d``, the candidates still to score returned as (rows, columns)."""
    B, N = x.shape
    rows, cols = np.nonzero(alpha > 1.0)  # row-major: each row's candidates ascending
    scored = np.zeros(d.shape, dtype=bool)
    best = np.full(B, np.inf)  # per row, an upper bound on min D: the best exact D so far
    k = _FIRST_SAMPLES
    while rows.size:
        count = np.bincount(rows, minlength=B)
        first = np.full(B, N)
        first[count > 0] = cols[np.searchsorted(rows, np.flatnonzero(count > 0))]
        active = (count > _SAMPLES) & (2 * (k + 1) < N - first)
        on = active[rows]
        if not on.any():
            break
        r, c = rows[on], cols[on]
        lower, upper = ks_bounds(logx, c, alpha, n, k, rows=r)
        # the _PROBES candidates of each active row with the smallest upper bounds, scored exactly
        grid = np.full((B, N - 1), np.inf)
        grid[r, c] = upper
        live = np.flatnonzero(active)
        pc = np.argpartition(grid[live], _PROBES - 1, axis=1)[:, :_PROBES]
        pr = np.repeat(live, _PROBES)
        pc = pc.ravel()
        _score(x, pr, pc, alpha, n, d)
        scored[pr, pc] = True
        best[live] = np.minimum(best[live], d[pr, pc].reshape(live.size, _PROBES).min(axis=1))
        pruned = lower > best[r] * (1 + 1e-9) + 1e-12
        keep = np.ones(rows.size, dtype=bool)
        keep[np.flatnonzero(on)[pruned]] = False
        rows, cols = rows[keep], cols[keep]
        k *= 4
    todo = ~scored[rows, cols]
    return rows[todo], cols[todo]
