r"""WeightWatcher's ``analyze()`` columns of one weight matrix, from its shared singular values.

Every function here reads the eigenvalues :math:`\lambda_i = \sigma_i^2` of
:math:`W^\top W` (unnormalised, all :math:`k = \min(m, n)` of them) of the
cell's shared singular values, and follows the definitions of WeightWatcher
0.7.7's default ``analyze()`` (column in brackets):

==================== =================== =====================================================
name                 [WeightWatcher]     definition
==================== =================== =====================================================
alpha_xmin           [xmin]              :math:`x_{min}` of the power-law fit
alpha_xmax           [xmax]              largest eigenvalue fitted (:math:`\lambda_{max}`)
alpha_ks_distance    [D]                 KS distance of the fit at :math:`x_{min}`
alpha_sigma          [sigma]             :math:`(\alpha - 1)/\sqrt{n}`, n = tail size
num_pl_spikes        [num_pl_spikes]     :math:`\#\{i: \lambda_i \ge x_{min}\}`
alpha_weighted       [alpha_weighted]    :math:`\alpha \log_{10} \lambda_{max}`
log_norm             [log_norm]          :math:`\log_{10} \sum_i \lambda_i = \log_{10} \|W\|_F^2`
log_spectral_norm    [log_spectral_norm] :math:`\log_{10} \lambda_{max} = \log_{10} \sigma_{max}^2`
log_alpha_norm       [log_alpha_norm]    :math:`\log_{10} \sum_i \lambda_i^\alpha`
matrix_rank          [matrix_rank]       :math:`\#\{i: \sigma_i > \max(m,n)\,\epsilon_{64}\,\sigma_{max}\}`
rank_loss            [rank_loss]         :math:`\min(m, n) -` ``matrix_rank``
spectral_entropy     [entropy]           :math:`-\sum_i p_i \ln p_i / \ln r`,
                                         :math:`p_i = \lambda_i / \sum_j \lambda_j`, r = ``matrix_rank``
==================== =================== =====================================================

The fit columns and ``alpha`` share one fit per matrix
(:func:`~toolkit.metrics.powerlaw.spectrum_fit`) and take its options as
keywords (``threshold``, ``min_eigenvalues``, ``xmax``, ``fix_fingers``,
``max_fingers``, ``finger_thresh``; WeightWatcher's defaults), which must be
the same for every column of a Dataset to describe one fit. :func:`esd_quality` turns
``alpha`` into WeightWatcher's ``warning`` label.

Where WeightWatcher writes -1 (a failed fit) or -inf (the log of zero),
these raise :class:`~toolkit.metrics.registry.DegenerateMatrix`, so the cell
is NaN with the reason.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from toolkit.metrics.powerlaw import FIT_METRIC_OPTIONS, PowerLawFit, spectrum_fit
from toolkit.metrics.registry import DegenerateMatrix, register_metric

OVER_TRAINED = "over-trained"  # WeightWatcher constants.OVER_TRAINED
UNDER_TRAINED = "under-trained"  # WeightWatcher constants.UNDER_TRAINED
OK = "ok"
OVER_TRAINED_ALPHA = 2.0  # WeightWatcher OVER_TRAINED_THRESH
UNDER_TRAINED_ALPHA = 6.0  # WeightWatcher UNDER_TRAINED_THRESH

_EPS64 = float(np.finfo(np.float64).eps)
_WW_FIT = "WeightWatcher 0.7.7 default fit (pl_package='ww', xmax=None, fix_fingers=False)"
_REF_FIT = ("Martin & Mahoney (2021) JMLR 22(165); Clauset, Shalizi & Newman (2009) SIAM Rev. 51(4); "
            "WeightWatcher 0.7.7 analyze() column ")
_REF_NORMS = ("Martin, Peng & Mahoney (2021) Nat. Commun. 12:4122; WeightWatcher 0.7.7 analyze() column ")


def _eigenvalues(s: torch.Tensor | None, name: str) -> np.ndarray:
    """:math:`\\lambda_i = \\sigma_i^2` (float64, NumPy), or DegenerateMatrix for no values / all zeros."""
    if s is None or s.numel() == 0:
        raise DegenerateMatrix("no singular values", name)
    sv = s.detach().to("cpu", torch.float64).numpy()
    lam = sv * sv
    if not float(lam.max()) > 0.0:
        raise DegenerateMatrix("all-zero matrix", name)
    return lam


def _fit(s, name: str, fit_options: dict) -> PowerLawFit:
    try:
        return spectrum_fit(s, **fit_options)
    except DegenerateMatrix as e:
        raise DegenerateMatrix(e.reason, name) from None  # alpha's reason, word for word


# ---------------------------------------------------------------- the fit columns


def alpha_xmin(w, s, **fit_options) -> float:
    r"""Start :math:`x_{min}` of the power-law tail (an eigenvalue of :math:`W^\top W`), WeightWatcher's ``xmin``.

    Raises
    ------
    DegenerateMatrix
        Where ``alpha`` is undefined (too short a spectrum, an all-equal tail, zeros).
    """
    return _fit(s, "alpha_xmin", fit_options).xmin


def alpha_xmax(w, s, **fit_options) -> float:
    r"""Upper end of the fitted range, WeightWatcher's ``xmax``: the largest eigenvalue fitted,
    :math:`\lambda_{max}` by default (nothing clipped), less with the ``xmax`` or
    ``fix_fingers="clip_xmax"`` options.

    Raises
    ------
    DegenerateMatrix
        Where ``alpha`` is undefined.
    """
    return _fit(s, "alpha_xmax", fit_options).xmax


def alpha_ks_distance(w, s, **fit_options) -> float:
    r"""Kolmogorov-Smirnov distance :math:`D` between the tail's empirical CDF and the fitted
    power law at the chosen :math:`x_{min}` (the minimum over candidates), WeightWatcher's ``D``.

    Notes
    -----
    :math:`D = \max_{t<n} |1 - (\lambda_{i+t}/x_{min})^{1-\alpha} - t/n|` over the
    :math:`n` sorted tail eigenvalues. Between 0 and 1; small is a good fit.

    Raises
    ------
    DegenerateMatrix
        Where ``alpha`` is undefined.
    """
    return _fit(s, "alpha_ks_distance", fit_options).ks_distance


def alpha_sigma(w, s, **fit_options) -> float:
    r"""Standard error of the exponent, :math:`(\alpha - 1)/\sqrt{n}`, :math:`n` the tail size
    (WeightWatcher's ``sigma``; Clauset et al. 2009, eq. 3.2).

    Raises
    ------
    DegenerateMatrix
        Where ``alpha`` is undefined.
    """
    return _fit(s, "alpha_sigma", fit_options).sigma


def num_pl_spikes(w, s, **fit_options) -> float:
    r"""Number of eigenvalues in the power-law tail, :math:`\#\{i: \lambda_i \ge x_{min}\}`
    (WeightWatcher's ``num_pl_spikes``).

    Raises
    ------
    DegenerateMatrix
        Where ``alpha`` is undefined.
    """
    return float(_fit(s, "num_pl_spikes", fit_options).num_pl_spikes)


def alpha_weighted(w, s, **fit_options) -> float:
    r"""Weighted alpha :math:`\hat\alpha = \alpha \log_{10} \lambda_{max}` (WeightWatcher's ``alpha_weighted``).

    Raises
    ------
    DegenerateMatrix
        Where ``alpha`` is undefined.

    References
    ----------
    Martin, C. H. & Mahoney, M. W. (2021), *JMLR* 22(165), sec. 7 ("weighted alpha").
    """
    fit = _fit(s, "alpha_weighted", fit_options)
    return fit.alpha * math.log10(float(_eigenvalues(s, "alpha_weighted").max()))


def log_alpha_norm(w, s, **fit_options) -> float:
    r"""Log of the Schatten :math:`\alpha`-norm raised to :math:`\alpha`:
    :math:`\log_{10} \sum_i \lambda_i^{\alpha}` over all eigenvalues (WeightWatcher's ``log_alpha_norm``).

    Notes
    -----
    Computed as :math:`\alpha \log_{10}\lambda_{max} + \log_{10}\sum_i (\lambda_i/\lambda_{max})^\alpha`,
    which never overflows; the same number as the direct sum where that is finite.

    Raises
    ------
    DegenerateMatrix
        Where ``alpha`` is undefined.

    References
    ----------
    Martin, Peng & Mahoney (2021), *Nat. Commun.* 12:4122 (the "alpha-norm" metric).
    """
    a = _fit(s, "log_alpha_norm", fit_options).alpha
    lam = _eigenvalues(s, "log_alpha_norm")
    top = float(lam.max())
    return a * math.log10(top) + math.log10(float(np.sum((lam / top) ** a)))


# ---------------------------------------------------------------- norms, rank, entropy


def log_norm(w, s) -> float:
    r""":math:`\log_{10} \sum_i \lambda_i = \log_{10} \|W\|_F^2` (WeightWatcher's ``log_norm``:
    the log of its ``norm`` column, the squared Frobenius norm).

    Raises
    ------
    DegenerateMatrix
        All-zero matrix (the log of 0).
    """
    return math.log10(float(_eigenvalues(s, "log_norm").sum()))


def log_spectral_norm(w, s) -> float:
    r""":math:`\log_{10} \lambda_{max} = 2 \log_{10} \sigma_{max}` (WeightWatcher's ``log_spectral_norm``:
    its ``spectral_norm`` is :math:`\sigma_{max}^2`).

    Raises
    ------
    DegenerateMatrix
        All-zero matrix (the log of 0).
    """
    return math.log10(float(_eigenvalues(s, "log_spectral_norm").max()))


def _rank(w, s, name: str) -> int:
    if s is None or s.numel() == 0:
        raise DegenerateMatrix("no singular values", name)
    sv = s.detach().to("cpu", torch.float64).numpy()
    big = max(int(w.shape[0]), int(w.shape[1])) if w is not None and w.ndim == 2 else sv.size
    tol = float(sv.max()) * big * _EPS64
    return int(np.count_nonzero(sv > tol))


def matrix_rank(w, s) -> float:
    r"""Numerical rank: :math:`\#\{i: \sigma_i > \max(m, n)\,\epsilon_{64}\,\sigma_{max}\}`
    (WeightWatcher's ``matrix_rank``, NumPy's ``matrix_rank`` tolerance). 0 for the zero matrix.

    Notes
    -----
    The shared singular values resolve :math:`\sigma_i` only down to their
    accuracy floor :math:`\sqrt{\max(m,n)\,\epsilon_{64}}\,\sigma_{max}` (below it
    they are 0, see :func:`~toolkit.metrics.singular_values`), far above this
    tolerance: a singular value between the two counts as 0 here, where a
    float64 SVD may still count it.

    References
    ----------
    Golub & Van Loan, *Matrix Computations*, 4th ed. (2013), sec. 5.4.1; ``numpy.linalg.matrix_rank``.
    """
    return float(_rank(w, s, "matrix_rank"))


def rank_loss(w, s) -> float:
    r"""Rank deficiency :math:`\min(m, n) - ` ``matrix_rank`` (WeightWatcher's ``rank_loss``)."""
    r = _rank(w, s, "rank_loss")
    return float(s.numel() - r)


def spectral_entropy(w, s) -> float:
    r"""Normalised spectral (matrix) entropy :math:`-\sum_i p_i \ln p_i / \ln r`,
    :math:`p_i = \lambda_i / \sum_j \lambda_j`, :math:`r` = ``matrix_rank`` (WeightWatcher's ``entropy``).

    Notes
    -----
    1 when the :math:`r` non-zero eigenvalues are equal, towards 0 when one
    dominates. :math:`0 \ln 0 = 0`. WeightWatcher adds :math:`10^{-10}` to every
    :math:`p_i` and to :math:`r` (so that a rank-one matrix gives a huge number
    instead of 0/0); here the formula is exact, which differs from its value by
    about :math:`10^{-10}\,k` (:math:`k = \min(m, n)`), below 1e-6 relative for
    :math:`k < 10^4`.

    Raises
    ------
    DegenerateMatrix
        Rank below 2 (:math:`\ln r = 0`: 0/0), all-zero matrix included.

    References
    ----------
    Martin & Mahoney (2021), *JMLR* 22(165), eq. (9) ("matrix entropy").
    """
    r = _rank(w, s, "spectral_entropy")
    if r < 2:
        raise DegenerateMatrix(f"rank {r}: the entropy normalised by ln(rank) is undefined", "spectral_entropy")
    lam = _eigenvalues(s, "spectral_entropy")
    p = lam[lam > 0.0] / lam.sum()
    return float(-np.sum(p * np.log(p)) / math.log(r))


# ---------------------------------------------------------------- quality label


def esd_quality(alpha, *, over: float = OVER_TRAINED_ALPHA, under: float = UNDER_TRAINED_ALPHA, reason=""):
    r"""WeightWatcher's ``warning`` label of a layer from its power-law exponent.

    Parameters
    ----------
    alpha : float or array-like of float
        The ``alpha`` of one cell, or of many (any shape, e.g. a (layer,
        component) array; NaN where undefined).
    over : float, default 2.0
        ``alpha < over`` is ``"over-trained"`` (WeightWatcher's OVER_TRAINED_THRESH).
    under : float, default 6.0
        ``alpha > under`` is ``"under-trained"`` (UNDER_TRAINED_THRESH).
    reason : str or array-like of str, default ""
        Why ``alpha`` is NaN (a cell's ``nan_reason``); broadcast against ``alpha``.

    Returns
    -------
    str, or numpy.ndarray of str (object dtype, the broadcast shape)
        ``"over-trained"``, ``"under-trained"`` or ``"ok"`` (``over <= alpha <= under``);
        for a NaN ``alpha``, ``"not fitted: <reason>"`` (``"not fitted"`` without one).

    Raises
    ------
    ValueError
        ``over > under``.

    Examples
    --------
    >>> esd_quality(1.7), esd_quality(3.2), esd_quality(7.5)
    ('over-trained', 'ok', 'under-trained')
    >>> esd_quality(float("nan"), reason="all-zero matrix")
    'not fitted: all-zero matrix'
    >>> esd_quality([1.5, 4.0], over=1.0)
    array(['ok', 'ok'], dtype=object)
    """
    if not over <= under:
        raise ValueError(f"esd_quality: over ({over}) must not exceed under ({under})")
    a = np.asarray(alpha, dtype=np.float64)
    why = np.asarray(reason, dtype=object)
    a, why = np.broadcast_arrays(a, why)
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(a.shape):
        v = float(a[idx])
        if math.isnan(v):
            r = str(why[idx] or "")
            out[idx] = f"not fitted: {r}" if r else "not fitted"
        elif v < over:
            out[idx] = OVER_TRAINED
        elif v > under:
            out[idx] = UNDER_TRAINED
        else:
            out[idx] = OK
    return out.item() if out.ndim == 0 else out


# ---------------------------------------------------------------- registration

_FIT_COLUMNS = [
    ("alpha_xmin", alpha_xmin, "power-law xmin", "xmin",
     "xmin = the eigenvalue lambda_i = sigma_i^2 (> 1e-5) at which the tail fit minimises the Kolmogorov-Smirnov "
     "distance D; alpha = 1 + n / sum_{lambda >= xmin} ln(lambda / xmin)"),
    ("alpha_xmax", alpha_xmax, "power-law xmax", "xmax",
     "xmax = the largest eigenvalue fitted, lambda_max (no clipping)"),
    ("alpha_ks_distance", alpha_ks_distance, "power-law KS distance D", "D",
     "D = max_{t<n} |1 - (lambda_{i+t} / xmin)^(1 - alpha) - t/n| over the n tail eigenvalues at the chosen xmin"),
    ("alpha_sigma", alpha_sigma, "standard error of alpha", "sigma",
     "sigma = (alpha - 1) / sqrt(n), n = number of tail eigenvalues from xmin up"),
    ("num_pl_spikes", num_pl_spikes, "eigenvalues in the power-law tail", "num_pl_spikes",
     "num_pl_spikes = #{i : lambda_i >= xmin}"),
    ("alpha_weighted", alpha_weighted, "weighted alpha", "alpha_weighted",
     "alpha_weighted = alpha * log10(lambda_max), lambda_max = sigma_max^2"),
    ("log_alpha_norm", log_alpha_norm, "log alpha-norm", "log_alpha_norm",
     "log_alpha_norm = log10(sum_i lambda_i^alpha) over all eigenvalues of W^T W"),
]
for _name, _func, _long, _col, _desc in _FIT_COLUMNS:
    register_metric(_name, _func, long_name=_long, units="1", description=f"{_desc} ({_WW_FIT})",
                    reference=_REF_FIT + _col, needs_singular_values=True, options=FIT_METRIC_OPTIONS)

register_metric(
    "log_norm", log_norm, long_name="log10 squared Frobenius norm", units="1",
    description="log_norm = log10(sum_i lambda_i) = log10 ||W||_F^2, lambda_i = sigma_i^2",
    reference=_REF_NORMS + "log_norm", needs_singular_values=True,
)
register_metric(
    "log_spectral_norm", log_spectral_norm, long_name="log10 largest eigenvalue", units="1",
    description="log_spectral_norm = log10(lambda_max) = log10(sigma_max^2)",
    reference=_REF_NORMS + "log_spectral_norm", needs_singular_values=True,
)
register_metric(
    "matrix_rank", matrix_rank, long_name="numerical rank", units="1",
    description="matrix_rank = #{i : sigma_i > max(m, n) * eps_float64 * sigma_max} (numpy.linalg.matrix_rank "
                "tolerance; values below the shared singular values' accuracy floor count as 0)",
    reference="Golub & Van Loan, Matrix Computations (2013), sec. 5.4.1; WeightWatcher 0.7.7 analyze() column "
              "matrix_rank",
    needs_singular_values=True,
)
register_metric(
    "rank_loss", rank_loss, long_name="rank loss", units="1",
    description="rank_loss = min(m, n) - matrix_rank",
    reference="WeightWatcher 0.7.7 analyze() column rank_loss", needs_singular_values=True,
)
register_metric(
    "spectral_entropy", spectral_entropy, long_name="normalised spectral entropy", units="1",
    description="spectral_entropy = -sum_i p_i ln p_i / ln(matrix_rank), p_i = lambda_i / sum_j lambda_j "
                "(0 ln 0 = 0; WeightWatcher adds 1e-10 to each p_i and to the rank)",
    reference="Martin & Mahoney (2021) JMLR 22(165), eq. 9; WeightWatcher 0.7.7 analyze() column entropy",
    needs_singular_values=True,
)


def ww_skip_reason(n_rows: int, n_cols: int, *, min_evals: int = 8, max_evals: int = 15000,
                   max_n: int = 50000) -> str:
    r"""Why WeightWatcher 0.7.7's ``analyze()`` would skip a dense matrix of this shape ("" if it would not).

    Its ``min_evals`` / ``max_evals`` / ``max_N`` rules for a dense layer:
    :math:`M = \min(m, n) <` ``min_evals``, :math:`M >` ``max_evals``, or
    :math:`N = \max(m, n) >` ``max_N`` (0 or None turns the first two off).
    The toolkit computes every matrix; this lets a caller blank the cells
    WeightWatcher leaves out, to compare like with like.

    Examples
    --------
    >>> ww_skip_reason(576, 1536), ww_skip_reason(262144, 640)
    ('', 'N = 262144 > max_N = 50000 (WeightWatcher skips it)')
    """
    small, big = min(n_rows, n_cols), max(n_rows, n_cols)
    if min_evals and small < min_evals:
        why = f"M = {small} < min_evals = {min_evals}"
    elif max_evals and small > max_evals:
        why = f"M = {small} > max_evals = {max_evals}"
    elif big > max_n:
        why = f"N = {big} > max_N = {max_n}"
    else:
        return ""
    return f"{why} (WeightWatcher skips it)"
