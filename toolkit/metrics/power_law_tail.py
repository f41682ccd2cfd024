r"""The pieces of a power-law fit of an eigenvalue tail that every fit shares.

The fit record (:class:`PowerLawFit`), WeightWatcher's thresholds, the MLE
exponent of every candidate tail (:func:`tail_alphas`), their exact
Kolmogorov-Smirnov distances (:func:`exact_ks_distances`) and the sampled bounds on them
(:func:`ks_bounds`), each for one spectrum or a stack of them. The default fit
(:func:`toolkit.metrics.powerlaw.fit_power_law`) and the ``xmin_peak`` fit
(:mod:`toolkit.metrics.xmin_peak`) and the batched default fit (:mod:`toolkit.metrics.powerlaw_batch`) build
on them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

EVALS_THRESHOLD = 1e-5  # WeightWatcher constants.EVALS_THRESH
MIN_EIGENVALUES = 8  # WeightWatcher DEFAULT_MIN_EVALS
#: Elements per block of the exact D evaluation (and of the sampled bounds of the default fit).
BLOCK_ELEMENTS = 1 << 22
#: Unit roundoff of float32, the precision weights are read in (:func:`flat_reason`).
UNIT_ROUNDOFF32 = 2.0 ** -24


def spread_above_rounding(low, high, count: int):
    r"""Whether eigenvalues from ``low`` to ``high`` are spread beyond rounding (:func:`flat_reason`'s rule), for
    floats or element-wise for arrays of them (shape (B,): a stack of spectra, bool array).

    :math:`\lambda_{max} - \lambda_{min} > 2u\sqrt{N}\,\lambda_{max}`, :math:`u = 2^{-24}`, :math:`N` = ``count``.
    """
    return high - low > 2.0 * UNIT_ROUNDOFF32 * math.sqrt(max(count, 1)) * high


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
    if not spread_above_rounding(low, high, count):
        spread = high - low
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


def exp_minus_one(z: np.ndarray) -> np.ndarray:
    r""":math:`e^z - 1` of a float64 array, in place (``z`` is overwritten and returned).

    By torch's vectorised ``exp`` (SLEEF, at most 1 ulp; about 2 ns an entry against 10 ns for NumPy's
    ``expm1``) where torch runs one intra-op thread on this thread (a metric pipeline), else NumPy's ``exp``
    (torch would start its intra-op threads on arrays of a thousand entries; measured within 0.5 ulp of 1 of
    ``expm1`` on 600,000 values, as torch's).

    Where :math:`z \le 0` (every deviation the fits sample: :math:`\alpha > 1`, values ascending) the result
    is within a few units of :math:`2^{-53}` of :math:`e^z - 1`, absolutely: an ulp or two of :math:`e^z \le 1`,
    and the subtraction is exact from :math:`e^z \ge 1/2` (Sterbenz) and within half an ulp of 1 below; the
    fits' rounding allowance (:mod:`toolkit.metrics.powerlaw_batch`, step d: :math:`16 \cdot 2^{-52}` for it)
    and pruning slack (:math:`10^{-12}`) cover it. ``expm1``'s relative accuracy near 0 is not needed: a KS
    distance is compared to others absolutely.
    """
    z = np.ascontiguousarray(z, dtype=np.float64)
    if torch.get_num_threads() == 1:
        torch.from_numpy(z).exp_()
    else:
        np.exp(z, out=z)
    z -= 1.0
    return z


def take_rows(a: np.ndarray, rows, cols) -> np.ndarray:
    """``a[rows, cols]`` of a 2-D array (``rows``, ``cols`` broadcast together) by one gather from its flattened
    values: the same elements, about twice as fast as NumPy's indexing by two arrays on the fits' stacks."""
    return a.reshape(-1)[rows * a.shape[-1] + cols]


def tail_alphas(logx: np.ndarray, bias_corrected: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The MLE exponent of every candidate tail of a sorted spectrum (or of each row of a stack of them).

    Parameters
    ----------
    logx : numpy.ndarray, shape (N,) or (B, N)
        :math:`\ln \lambda_j`, ascending (along the last axis: ``B`` spectra of ``N`` values each).
    bias_corrected : bool, default False
        Use :math:`n - 1` instead of :math:`n` in the numerator
        (WeightWatcher's small-N fit).

    Returns
    -------
    alpha : numpy.ndarray, shape (N - 1,) or (B, N - 1)
        :math:`\alpha_i = 1 + n_i / \sum_{j \ge i} \ln(\lambda_j / \lambda_i)`
        for the candidates :math:`i = 0 .. N-2` (inf where the tail is flat).
    n : numpy.ndarray, shape (N - 1,)
        Tail sizes :math:`n_i = N - i`, float64 (the same for every row).
    s : numpy.ndarray, shape (N - 1,) or (B, N - 1)
        The sums :math:`\sum_{j \ge i} \ln(\lambda_j / \lambda_i)`.

    Notes
    -----
    A row of a stack gets the same floating-point operations as the spectrum alone (the mean along the last
    axis, a sequential cumulative sum), so the same bits: the batched fit
    (:mod:`toolkit.metrics.powerlaw_batch`) relies on it.

    References
    ----------
    Clauset, Shalizi & Newman (2009), SIAM Review 51(4), eq. (3.7).
    """
    N = logx.shape[-1]
    n = np.arange(N, 1, -1, dtype=np.float64)  # N - i
    ref = logx.mean(axis=-1, keepdims=True)
    suffix = np.cumsum((logx - ref)[..., ::-1], axis=-1)[..., ::-1][..., :-1]  # sum_{j>=i} (log x_j - ref)
    s = suffix - n * (logx[..., :-1] - ref)  # sum_{j>=i} log(x_j / x_i)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 + ((n - 1.0) if bias_corrected else n) / s
    return alpha, n, s


def exact_ks_distances(x: np.ndarray, idx: np.ndarray, alpha: np.ndarray, n: np.ndarray,
                       rows: np.ndarray | None = None, block_rows: int | None = None) -> np.ndarray:
    r"""Exact Kolmogorov-Smirnov distances of the candidate tails ``idx``, in blocks of bounded memory.

    Parameters
    ----------
    x : numpy.ndarray, shape (N,) or (B, N)
        Eigenvalues, ascending (a stack: each row ascending).
    idx : numpy.ndarray of int, shape (k,)
        Candidate xmin positions, ascending.
    alpha : numpy.ndarray, shape (N - 1,) or (B, N - 1)
        Every candidate's exponent (:func:`tail_alphas`).
    n : numpy.ndarray, shape (N - 1,)
        Every candidate's tail size.
    rows : numpy.ndarray of int, shape (k,), optional
        With a stack: the row of each candidate.
    block_rows : int, optional
        At most this many candidates a block (a stack's candidates of distant positions share a block's width:
        smaller blocks waste less).

    Returns
    -------
    numpy.ndarray, shape (k,)
        :math:`D_i = \max_{t<n_i} |1 - (\lambda_{i+t}/\lambda_i)^{1-\alpha_i} - t/n_i|`.

    Notes
    -----
    Every deviation is one element-wise expression of the same operands, whatever the block or the stack: a
    candidate's :math:`D_i` has the same bits alone, in a block or as a row of a stack.
    """
    N = x.shape[-1]
    out = np.empty(idx.size)
    pos = 0
    while pos < idx.size:
        i0 = idx[pos]
        width = N - i0
        count = max(1, BLOCK_ELEMENTS // width)
        count = min(count, block_rows) if block_rows else count
        sel = idx[pos : pos + count]
        j = np.arange(i0, N)
        t = j[None, :] - sel[:, None]  # offset in each tail; < 0 outside it
        if rows is None:
            top, low, a = x[None, i0:], x[sel, None], alpha[sel, None]
        else:
            r = rows[pos : pos + count]
            top, low, a = x[r, i0:], x[r, sel][:, None], alpha[r, sel][:, None]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            ratio = top / low
            dev = np.abs(1.0 - ratio ** (1.0 - a) - t / n[sel, None])
        dev[t < 0] = 0.0
        out[pos : pos + sel.size] = dev.max(axis=1)
        pos += sel.size
    return out


def ks_bounds(logx: np.ndarray, idx: np.ndarray, alpha: np.ndarray, n: np.ndarray, k: int,
              rows: np.ndarray | None = None, with_upper: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    r"""Lower and upper bounds on the KS distances :math:`D_i` of the candidates ``idx`` from :math:`k + 1`
    quantiles of each tail.

    Parameters
    ----------
    logx : numpy.ndarray, shape (N,) or (B, N)
        :math:`\ln \lambda_j`, ascending (a stack: each row).
    idx : numpy.ndarray of int, shape (m,)
        Candidate positions.
    alpha : numpy.ndarray, shape (N - 1,) or (B, N - 1)
    n : numpy.ndarray, shape (N - 1,)
        As :func:`exact_ks_distances`.
    k : int
        Quantile steps: the offsets :math:`t = \lfloor q (n_i - 1) \rfloor`, :math:`q = 0, 1/k, .., 1`.
    rows : numpy.ndarray of int, shape (m,), optional
        With a stack: the row of each candidate.
    with_upper : bool, default True
        False: ``upper`` is None (not computed; a caller that ranks candidates by ``lower``).

    Returns
    -------
    lower, upper : numpy.ndarray, shape (m,)
        ``lower``: the largest sampled deviation :math:`|F_{fit} - F_{emp}|`; ``upper``: because both CDFs
        are non-decreasing, :math:`\max(F_{fit}(b) - F_{emp}(a), F_{emp}(b) - F_{fit}(a))` over consecutive
        samples :math:`a < b` (and at least ``lower``). The default fit prunes with them
        (:func:`toolkit.metrics.powerlaw.fit_power_law`, Notes).
    """
    lower = np.empty(idx.size)
    upper = np.empty(idx.size) if with_upper else None
    grid = np.linspace(0.0, 1.0, k + 1)
    count = max(1, BLOCK_ELEMENTS // (k + 1))
    with np.errstate(over="ignore", invalid="ignore"):
        for a in range(0, idx.size, count):
            _sampled_block(logx, idx, alpha, n, rows, grid, a, count, lower, upper)
    return lower, upper


def _sampled_block(logx, idx, alpha, n, rows, grid, a, count, lower, upper) -> None:
    """:func:`ks_bounds` of the candidates ``idx[a : a + count]``, written into ``lower`` (and ``upper``)."""
    sel = idx[a : a + count]
    t = (grid[None, :] * (n[sel, None] - 1.0)).astype(np.int64)  # floor: 0 .. n-1
    if rows is None:
        at, start, exponent = logx[sel[:, None] + t], logx[sel, None], alpha[sel, None]
    else:
        r = rows[a : a + count, None]
        at, start, exponent = take_rows(logx, r, sel[:, None] + t), take_rows(logx, r, sel[:, None]), \
            take_rows(alpha, r, sel[:, None])
    ffit = exp_minus_one((1.0 - exponent) * (at - start))
    np.negative(ffit, out=ffit)
    femp = t / n[sel, None]
    dev = ffit - femp
    lo = np.abs(dev, out=dev).max(axis=1)
    lower[a : a + sel.size] = lo
    if upper is not None:
        up = np.maximum(ffit[:, 1:] - femp[:, :-1], femp[:, 1:] - ffit[:, :-1]).max(axis=1)
        upper[a : a + sel.size] = np.maximum(up, lo)
