r"""The pieces of a power-law fit of an eigenvalue tail that every fit shares.

The fit record (:class:`PowerLawFit`), WeightWatcher's thresholds, the MLE
exponent of every candidate tail (:func:`tail_alphas`) and their exact
Kolmogorov-Smirnov distances (:func:`exact_ks_distances`). The default fit
(:func:`toolkit.metrics.powerlaw.fit_power_law`) and the ``xmin_peak`` fit
(:mod:`toolkit.metrics.xmin_peak`) both build on them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

EVALS_THRESHOLD = 1e-5  # WeightWatcher constants.EVALS_THRESH
MIN_EIGENVALUES = 8  # WeightWatcher DEFAULT_MIN_EVALS
#: Elements per block of the exact D evaluation (and of the sampled bounds of the default fit).
BLOCK_ELEMENTS = 1 << 22
#: Unit roundoff of float32, the precision weights are read in (:func:`flat_reason`).
UNIT_ROUNDOFF32 = 2.0 ** -24


def flat_reason(low: float, high: float, count: int) -> str:
    r"""Why eigenvalues from ``low`` to ``high`` (``count`` of them, the matrix's) have no spread, or ``""``.

    They are equal within rounding when

    .. math:: \lambda_{max} - \lambda_{min} \le 2u\sqrt{N}\,\lambda_{max},
              \qquad u = 2^{-24},

    with :math:`N` = ``count``. Rounding ``W`` to float32 (how weights are read) is a perturbation
    :math:`E` with :math:`\|E\|_2 \le \|E\|_F \le u\|W\|_F \le u\sqrt{N}\,\sigma_{max}`, which by
    Weyl's inequality moves every singular value by at most that, every :math:`\lambda = \sigma^2` by
    about :math:`2u\sqrt N\lambda_{max}` (Horn & Johnson, *Matrix Analysis*, 2nd ed., cor. 7.3.5). A
    spread within it, e.g. an orthogonal matrix's (every eigenvalue 1) or the top cluster of a matrix with
    two distinct singular values, is rounding noise: a power law fitted to it reports alpha ~ 1e7 to
    1e15 (issue 42). Every fit (``alpha``, its interval, ``alpha_farms``) and the ERG tail
    (:mod:`toolkit.metrics.erg`) ask this before reporting a value.

    Parameters
    ----------
    low, high : float
        The smallest and the largest eigenvalue of the set (:math:`\ge 0`).
    count : int
        :math:`N`, the eigenvalues of the whole spectrum.

    Returns
    -------
    str
        The reason (for :class:`~toolkit.errors.DegenerateMatrix`), ``""`` when the values are spread.
    """
    spread = high - low
    if not spread > 2.0 * UNIT_ROUNDOFF32 * math.sqrt(max(count, 1)) * high:
        rel = spread / high if high > 0 else 0.0
        return (f"the eigenvalues of the tail are equal within rounding (relative spread {rel:.2g}): "
                "no power law to fit")
    return ""


class PowerLawFit(NamedTuple):
    r"""Result of :func:`~toolkit.metrics.powerlaw.fit_power_law`, WeightWatcher's fit columns in brackets.

    Attributes
    ----------
    alpha : float
        The exponent [alpha].
    xmin : float
        Start of the fitted tail, an eigenvalue [xmin].
    ks_distance : float
        Kolmogorov-Smirnov distance of the fit at ``xmin`` [D].
    num_tail : int
        :math:`n = N - i`, the eigenvalues from ``xmin``'s position in the
        sorted spectrum to the top (``xmin`` itself included).
    sigma : float
        Standard error of the MLE, :math:`(\alpha - 1)/\sqrt{n}` [sigma].
    xmax : float
        Upper end of the fitted range: the largest eigenvalue fitted [xmax].
    num_pl_spikes : int
        Number of eigenvalues :math:`\ge x_{min}` [num_pl_spikes]; equals
        ``num_tail`` unless ``xmin`` is tied with smaller-index eigenvalues.
    num_fingers : int
        ``fix_fingers="clip_xmax"``: WeightWatcher's count of the clipped
        largest eigenvalues (one less than clipped); 0 otherwise [num_fingers].
    raw_alpha : float
        The alpha before the finger fix (= ``alpha`` without it) [raw_alpha].
    """

    alpha: float
    xmin: float
    ks_distance: float
    num_tail: int
    sigma: float = math.nan
    xmax: float = math.nan
    num_pl_spikes: int = 0
    num_fingers: int = 0
    raw_alpha: float = math.nan


class KsScores(NamedTuple):
    r"""What the default fit knows of every xmin candidate (:func:`~toolkit.metrics.powerlaw.fit_with_scores`).

    Attributes
    ----------
    index : int
        Position of the chosen xmin in the kept, ascending eigenvalues.
    alpha, n : numpy.ndarray, shape (N - 1,)
        Every candidate's exponent and tail size (:func:`tail_alphas`).
    d_lower : numpy.ndarray, shape (N - 1,)
        Every candidate's KS distance :math:`D_i` where it was scored exactly
        (the chosen one included), a lower bound on it where the sampled
        bounds of :func:`~toolkit.metrics.powerlaw.fit_power_law` pruned it:
        the argmin is ``index`` because no other entry is below ``d_lower[index]``.
    """

    index: int
    alpha: np.ndarray
    n: np.ndarray
    d_lower: np.ndarray


def tail_alphas(logx: np.ndarray, bias_corrected: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The MLE exponent of every candidate tail of a sorted spectrum.

    Parameters
    ----------
    logx : numpy.ndarray, shape (N,)
        :math:`\ln \lambda_j`, ascending.
    bias_corrected : bool, default False
        Use :math:`n - 1` instead of :math:`n` in the numerator
        (WeightWatcher's small-N fit).

    Returns
    -------
    alpha : numpy.ndarray, shape (N - 1,)
        :math:`\alpha_i = 1 + n_i / \sum_{j \ge i} \ln(\lambda_j / \lambda_i)`
        for the candidates :math:`i = 0 .. N-2` (inf where the tail is flat).
    n : numpy.ndarray, shape (N - 1,)
        Tail sizes :math:`n_i = N - i`, float64.
    s : numpy.ndarray, shape (N - 1,)
        The sums :math:`\sum_{j \ge i} \ln(\lambda_j / \lambda_i)`.

    References
    ----------
    Clauset, Shalizi & Newman (2009), SIAM Review 51(4), eq. (3.7).
    """
    N = logx.size
    n = np.arange(N, 1, -1, dtype=np.float64)  # N - i
    ref = logx.mean()
    suffix = np.cumsum((logx - ref)[::-1])[::-1][:-1]  # sum_{j>=i} (log x_j - ref)
    s = suffix - n * (logx[:-1] - ref)  # sum_{j>=i} log(x_j / x_i)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 + ((n - 1.0) if bias_corrected else n) / s
    return alpha, n, s


def exact_ks_distances(x: np.ndarray, idx: np.ndarray, alpha: np.ndarray, n: np.ndarray) -> np.ndarray:
    r"""Exact Kolmogorov-Smirnov distances of the candidate tails ``idx``, in blocks of bounded memory.

    Parameters
    ----------
    x : numpy.ndarray, shape (N,)
        Eigenvalues, ascending.
    idx : numpy.ndarray of int, shape (k,)
        Candidate xmin positions, ascending.
    alpha, n : numpy.ndarray, shape (N - 1,)
        Every candidate's exponent and tail size (:func:`tail_alphas`).

    Returns
    -------
    numpy.ndarray, shape (k,)
        :math:`D_i = \max_{t<n_i} |1 - (\lambda_{i+t}/\lambda_i)^{1-\alpha_i} - t/n_i|`.
    """
    N = x.size
    out = np.empty(idx.size)
    pos = 0
    while pos < idx.size:
        i0 = idx[pos]
        width = N - i0
        rows = max(1, BLOCK_ELEMENTS // width)
        sel = idx[pos : pos + rows]
        j = np.arange(i0, N)
        t = j[None, :] - sel[:, None]  # offset in each tail; < 0 outside it
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            ratio = x[None, i0:] / x[sel, None]
            dev = np.abs(1.0 - ratio ** (1.0 - alpha[sel, None]) - t / n[sel, None])
        dev[t < 0] = 0.0
        out[pos : pos + sel.size] = dev.max(axis=1)
        pos += sel.size
    return out
