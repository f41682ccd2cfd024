r"""WeightWatcher's ``fix_fingers="xmin_peak"`` power-law fit: xmin searched below the ESD's peak region.

Called by :func:`toolkit.metrics.powerlaw.fit_power_law` (``fix_fingers="xmin_peak"``),
whose candidate exponents and exact KS distances it shares
(:mod:`toolkit.metrics.power_law_tail`).
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.errors import DegenerateMatrix
from toolkit.metrics.power_law_tail import (
    EVALS_THRESHOLD,
    MIN_EIGENVALUES,
    PowerLawFit,
    exact_ks_distances,
    flat_reason,
    tail_alphas,
)

#: ``fix_fingers="xmin_peak"``: bins of the log10 histogram whose fullest bin is the peak (WeightWatcher 0.7.7).
PEAK_BINS = 100
#: The range of exponents the ``powerlaw`` package counts as a valid fit (its Power_Law parameter range).
VALID_ALPHA = (0.0, 3.0)


def fit_xmin_peak(x, *, xmin_max: float | None = None, min_eigenvalues: int = MIN_EIGENVALUES,
                  threshold: float = EVALS_THRESHOLD) -> PowerLawFit:
    r"""WeightWatcher 0.7.7's ``fix_fingers="xmin_peak"`` fit: xmin searched below the ESD's peak region.

    Parameters
    ----------
    x : numpy.ndarray, 1-D, ascending
        The eigenvalues above the threshold (after any ``xmax`` clipping).
    xmin_max : float or None
        Top of the xmin range; None: 1.5 × the peak.
    min_eigenvalues : int
        Fewer eigenvalues than this is degenerate.
    threshold : float
        Only for the message.

    Returns
    -------
    PowerLawFit
        ``xmax`` is the largest eigenvalue (the fit is not clipped).

    Raises
    ------
    DegenerateMatrix
        Too few eigenvalues, fewer than two candidates in the range (the
        ``powerlaw`` package returns NaN there; WeightWatcher marks the fit failed).

    Notes
    -----
    The fit ``WeightWatcher.fit_powerlaw(fix_fingers="xmin_peak")`` means to
    run: ``powerlaw.Fit`` with an xmin range (WeightWatcher 0.7.7 itself
    fails it on every matrix: its own package takes no range, and it passes
    ``powerlaw`` 2.0 a ``distribution=`` keyword that ``Fit`` refuses; so the
    reference is the ``powerlaw`` package, ``benchmarks/bench_xmin_peak.py``):

    1. peak :math:`p = 10^{e_k}`, :math:`e_k` the left edge of the fullest of
       100 equal bins of :math:`\log_{10}\lambda`;
    2. candidates: the distinct :math:`\lambda` with
       :math:`\min(r) \le \lambda < \max(r)`, :math:`r = (\log_{10}(0.95 p),`
       ``xmin_max``), the largest of them left out (``powerlaw.Fit.find_xmin``).
       WeightWatcher documents the range as (0.95 p, 1.5 p) but passes the
       log10 of its lower end; that is followed here (in effect every
       eigenvalue below 1.5 p is a candidate);
    3. for each: :math:`\alpha = 1 + n / \sum_{\lambda \ge x_{min}} \ln(\lambda / x_{min})`
       and the KS distance :math:`D` (as the default fit);
    4. xmin minimises :math:`D` among the candidates with
       :math:`0 < \alpha < 3` (the package's valid range), or among all when
       none is valid. (The package refits numerically a candidate whose
       :math:`\alpha \notin (1.5, 3]`; its optimum is the same MLE up to the
       optimiser's tolerance.)

    References
    ----------
    Alstott, J., Bullmore, E. & Plenz, D. (2014). powerlaw: a Python package
    for analysis of heavy-tailed distributions. *PLoS ONE* 9(1), e85777.
    WeightWatcher 0.7.7, ``fit_powerlaw`` (``fix_fingers='xmin_peak'``).
    """
    x = np.asarray(x, dtype=np.float64)
    N = x.size
    if N < min_eigenvalues:
        raise DegenerateMatrix(
            f"too short a spectrum: {N} eigenvalue{'s' * (N != 1)} above {threshold:g} "
            f"(a power-law fit needs at least {min_eigenvalues})", "alpha")
    counts, edges = np.histogram(np.log10(x), bins=PEAK_BINS)
    peak = 10.0 ** edges[int(np.argmax(counts))]
    top = 1.5 * peak if xmin_max is None else float(xmin_max)
    low = math.log10(0.95 * peak)
    lo, hi = min(low, top), max(low, top)
    inside = np.flatnonzero((x >= lo) & (x < hi))
    _, first = np.unique(x[inside], return_index=True)
    idx = inside[first][:-1]  # the first position of each distinct candidate, the largest left out
    if idx.size < 2:
        raise DegenerateMatrix(f"xmin_peak: {idx.size} candidate xmin below xmin_max = {top:.4g} "
                               "(the fit needs at least 2)", "alpha")
    alpha_all, n_all, _ = tail_alphas(np.log(x))
    alpha, n = alpha_all[idx], n_all[idx]
    d = exact_ks_distances(x, idx, alpha_all, n_all)
    valid = (alpha > VALID_ALPHA[0]) & (alpha < VALID_ALPHA[1]) & np.isfinite(d)
    pick = np.flatnonzero(valid)[np.argmin(d[valid])] if valid.any() else int(np.argmin(d))
    a, i = float(alpha[pick]), int(idx[pick])
    if not math.isfinite(a):
        raise DegenerateMatrix("all eigenvalues of the tail are equal: alpha is infinite", "alpha")
    flat = flat_reason(float(x[i]), float(x[-1]), N)
    if flat:
        raise DegenerateMatrix(flat, "alpha")
    tail = int(n[pick])
    return PowerLawFit(a, float(x[i]), float(d[pick]), tail, sigma=(a - 1.0) / math.sqrt(tail), xmax=float(x[-1]),
                       num_pl_spikes=int(N - np.searchsorted(x, x[i], side="left")), raw_alpha=a)

