r"""Heavy-tailed self-regularisation: the power-law exponent ``alpha`` of the ESD.

Follows WeightWatcher 0.7.7's default fit (``pl_package="ww"``,
``fix_fingers=False``, ``xmax=None``) so that numbers agree with it:

1. eigenvalues :math:`\lambda_i = \sigma_i^2` of :math:`W^\top W`,
   **not** normalised (no division by N; ``normalize`` is off by default and
   commented out in ``combined_eigenvalues``);
2. keep :math:`\lambda > 10^{-5}` (``EVALS_THRESH``, an absolute threshold);
3. every eigenvalue but the largest is an ``xmin`` candidate and the largest
   is kept in the tail (no ``xmax`` clipping);
4. for candidate :math:`i` (ascending order, tail size :math:`n = N - i`,
   counting :math:`\lambda_i` itself): MLE
   :math:`\alpha_i = 1 + n / \sum_{j \ge i} \ln(\lambda_j / \lambda_i)`,
   and KS distance
   :math:`D_i = \max_{t<n} |1 - (\lambda_{i+t}/\lambda_i)^{1-\alpha_i} - t/n|`;
5. :math:`x_{min}` minimises :math:`D` (first index on ties).
   With fewer than 20 kept eigenvalues WeightWatcher switches to its
   small-N fit: bias-corrected :math:`\alpha = 1 + (n-1)/\sum\ln`, only
   tails of at least 8 eigenvalues; the xmin rule stays argmin D (its
   objective :math:`D - 0.868/\sqrt{n}` is computed but then overridden
   by ``WWFit.__init__``). So do we.

Source: ``weightwatcher/WW_powerlaw.py`` (``WWFit.fit_power_law_standard``,
``fit_powerlaw_smallN``, ``pl_fit``) and ``weightwatcher/weightwatcher.py``
(``fit_powerlaw``, ``combined_eigenvalues``) of weightwatcher 0.7.7.

WeightWatcher gets the eigenvalues from a float64 SciPy SVD (CPU) or a
float32 ``torch.linalg.svdvals`` (CUDA); here they come from
:func:`~toolkit.metrics.singular_values` (Gram route in float64), which
agrees far below the precision the fit can resolve: on float32 matrices the
alpha of the two pipelines matched to 1e-12.

WeightWatcher evaluates :math:`D_i` for every candidate with an O(N) inner
loop (O(N²) in Python). Here it is exact but pruned (:func:`fit_power_law`).

The whole fit (:class:`PowerLawFit`: xmin, D, sigma, xmax, tail counts) feeds
the other fit columns of :mod:`toolkit.metrics.esd_fit`; :func:`spectrum_fit`
computes it once per matrix and options. Options beyond the default follow
WeightWatcher's ``xmax=-k`` (clip the top eigenvalues) and
``fix_fingers="clip_xmax"``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from toolkit.metrics.power_law_tail import (
    EVALS_THRESHOLD,
    MIN_EIGENVALUES,
    KsScores,
    PowerLawFit,
    exact_ks_distances,
    flat_reason,
    ks_bounds,
    tail_alphas,
)
from toolkit.metrics.registry import DegenerateMatrix, register_metric
from toolkit.metrics.tensor_memo import TensorMemo

__all__ = ["EVALS_THRESHOLD", "FIT_DEFAULTS", "FIT_METRIC_OPTIONS", "MIN_EIGENVALUES", "KsScores", "PowerLawFit",
           "alpha", "fit_power_law", "fit_with_scores", "spectrum_fit"]

SMALL_N = 20  # WeightWatcher WW_powerlaw.SMALL_N_CUTOFF
MAX_FINGERS = 10  # WeightWatcher DEFAULT_MAX_FINGERS
FINGER_THRESH = 1.0  # WeightWatcher DEFAULT_FINGER_THRESH
_SAMPLES = 64  # sample points per tail for the D bounds
#: Sample points of the first round of bounds when no one reads them (the argmin is the same; the
#: cheaper first round prunes most candidates: ~4x faster fits, what the bootstrap interval needs).
_FIRST_SAMPLES = 8


def fit_power_law(eigenvalues, *, threshold: float = EVALS_THRESHOLD, min_eigenvalues: int = MIN_EIGENVALUES,
                  xmax: int | None = None, fix_fingers: str | None = None, max_fingers: int = MAX_FINGERS,
                  finger_thresh: float = FINGER_THRESH, xmin_max: float | None = None) -> PowerLawFit:
    r"""Continuous power-law fit of an eigenvalue tail, xmin by minimum KS distance.

    Parameters
    ----------
    eigenvalues : array-like, 1-D
        :math:`\lambda_i \ge 0`, any order.
    threshold : float, default 1e-5
        Keep only :math:`\lambda > ` threshold (WeightWatcher's EVALS_THRESH).
    min_eigenvalues : int, default 8
        Fewer kept eigenvalues than this is degenerate. WeightWatcher skips
        matrices whose smaller side is below 8 (``min_evals``) but would still
        fit a larger one with fewer than 8 eigenvalues above the threshold
        (a nearly rank-deficient matrix); here that is degenerate too.
    xmax : int or None, default None
        WeightWatcher's ``xmax=-k`` (or ``k``): leave the ``|k|`` largest
        eigenvalues out of the spectrum before anything else (its
        ``num_pl_spikes`` is then counted without them too). None: no clipping.
    fix_fingers : {None, "xmin_peak", "clip_xmax"}
        ``"xmin_peak"``: WeightWatcher's ``xmin_peak``
        (:func:`toolkit.metrics.xmin_peak.fit_xmin_peak`):
        xmin searched only up to ``xmin_max`` (default 1.5 × the peak of
        the ESD's log-spaced histogram).
        ``"clip_xmax"``: WeightWatcher's finger fix. After the fit of the
        whole tail, refit without the ``idx`` largest eigenvalues for
        ``idx = 2 .. max_fingers - 1`` and keep the first refit whose alpha is
        more than ``finger_thresh`` below the first one (``num_fingers =
        idx - 1``, WeightWatcher's count); stop without one at a refit with
        alpha <= 2. ``xmin``, ``xmax``, D, sigma come from the kept fit,
        ``num_pl_spikes`` counts every eigenvalue >= its xmin, ``raw_alpha``
        is the first fit's.
    max_fingers : int, default 10
        WeightWatcher's ``max_fingers`` (it replaces any value below half the
        spectrum's size by 10; here the value is used as given).
    finger_thresh : float, default 1.0
        WeightWatcher's ``finger_thresh``.
    xmin_max : float or None, default None
        ``fix_fingers="xmin_peak"``: top of the xmin range (WeightWatcher's
        ``xmin_max``); None: 1.5 × the peak.

    Returns
    -------
    PowerLawFit

    Raises
    ------
    DegenerateMatrix
        Too few eigenvalues above the threshold, or a tail whose eigenvalues
        are all equal (alpha infinite), e.g. an identity matrix; an ``xmax``
        clipping more than half the spectrum.
    ValueError
        An unknown ``fix_fingers``.

    Notes
    -----
    Exact argmin of :math:`D` without the O(N²) scan: on K+1 quantiles of
    each candidate's tail, the sampled deviations give a lower bound on
    :math:`D_i` and, because the fitted and empirical CDFs are both
    non-decreasing, ``max(F_fit(b) - F_emp(a), F_emp(b) - F_fit(a))`` over
    consecutive samples ``a < b`` gives an upper bound. After each round the
    8 candidates with the smallest upper bound are scored exactly; every
    candidate whose lower bound exceeds the best exact :math:`D` so far
    cannot be the minimum and is dropped. Rounds use K = 8, 32, 128, ...
    (64, 256, 1024, ... for :func:`fit_with_scores`, whose pruned bounds a
    certificate reads) while more than 64 candidates survive and sampling is cheaper than
    scoring them exactly; the survivors are then scored exactly, in
    vectorised blocks. The result is WeightWatcher's argmin (ties: first
    index) at a cost near N·16, against its N²/2 in a Python loop
    (figures: ``benchmarks/bench_weightwatcher.py``).

    References
    ----------
    Clauset, A., Shalizi, C. R. & Newman, M. E. J. (2009). Power-law
    distributions in empirical data. *SIAM Review* 51(4), 661-703, eqs.
    (3.7) and (3.9).
    Martin, C. H. & Mahoney, M. W. (2021). Implicit self-regularization in
    deep neural networks. *JMLR* 22(165), 1-73.
    Martin, C. H., Peng, T. S. & Mahoney, M. W. (2021). Predicting trends in
    the quality of state-of-the-art neural networks without access to
    training or testing data. *Nature Communications* 12, 4122.
    """
    if fix_fingers not in (None, False, "clip_xmax", "xmin_peak"):
        raise ValueError(f"fix_fingers must be None, 'xmin_peak' or 'clip_xmax', got {fix_fingers!r}")
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64).ravel())
    if xmax:
        k = abs(int(xmax))
        if k > lam.size / 2:
            raise DegenerateMatrix(f"xmax={xmax} clips more than half of the {lam.size} eigenvalues", "alpha")
        lam = lam[:-k]
    x = lam[lam > threshold]
    if fix_fingers == "xmin_peak":
        from toolkit.metrics.xmin_peak import fit_xmin_peak

        return fit_xmin_peak(x, xmin_max=xmin_max, min_eigenvalues=min_eigenvalues, threshold=threshold)
    first = _fit_kept(x, threshold, min_eigenvalues)
    if not fix_fingers:
        return first
    best, fingers = first, 0
    for idx in range(2, max_fingers):
        try:
            fit = _fit_kept(x[:-idx], threshold, min_eigenvalues)
        except DegenerateMatrix:
            break  # too little left to refit
        if fit.alpha + finger_thresh < first.alpha:
            best, fingers = fit, idx - 1
            break
        if fit.alpha <= 2.0:
            break
    spikes = int(x.size - np.searchsorted(x, best.xmin, side="left"))
    return best._replace(num_pl_spikes=spikes, num_fingers=fingers, raw_alpha=first.alpha)


def fit_with_scores(x: np.ndarray) -> tuple[PowerLawFit, KsScores]:
    r"""The default fit of kept eigenvalues and its scores of every candidate, for a certificate.

    Parameters
    ----------
    x : numpy.ndarray, shape (N,), float64
        The eigenvalues above the threshold, ascending, :math:`N \ge 20`
        (the standard fit; WeightWatcher's small-N fit has no scores here).

    Returns
    -------
    (PowerLawFit, KsScores)
        The same fit as :func:`fit_power_law` with default options gives for
        these eigenvalues, and its :class:`KsScores`.

    Raises
    ------
    ValueError
        Fewer than 20 eigenvalues.
    DegenerateMatrix
        An all-equal tail.
    """
    if x.size < SMALL_N:
        raise ValueError(f"fit_with_scores needs at least {SMALL_N} eigenvalues, got {x.size}")
    scores = []
    fit = _fit_kept(x, 0.0, MIN_EIGENVALUES, scores)
    return fit, scores[0]


def _fit_kept(x: np.ndarray, threshold: float, min_eigenvalues: int, scores: list | None = None) -> PowerLawFit:
    """The fit of ``x``: the eigenvalues above the threshold, ascending (``scores``: append the standard
    fit's :class:`KsScores`)."""
    N = x.size
    if N < min_eigenvalues:
        raise DegenerateMatrix(
            f"too short a spectrum: {N} eigenvalue{'s' * (N != 1)} above {threshold:g} "
            f"(a power-law fit needs at least {min_eigenvalues})",
            "alpha",
        )
    logx = np.log(x)
    if N < SMALL_N:
        fit = _fit_small_n(x, logx)
    else:
        fit = _fit_standard(x, logx, scores)
    if not math.isfinite(fit.alpha):
        raise DegenerateMatrix("all eigenvalues of the tail are equal: alpha is infinite", "alpha")
    flat = flat_reason(fit.xmin, float(x[-1]), N)
    if flat:
        raise DegenerateMatrix(flat, "alpha")
    # WWFit: sigmas = (alphas - 1) / sqrt(N - i); xmax = the largest datum fitted;
    # fit_powerlaw: num_pl_spikes = len(evals[evals >= fit.xmin]).
    num_pl_spikes = int(N - np.searchsorted(x, fit.xmin, side="left"))
    return fit._replace(sigma=(fit.alpha - 1.0) / math.sqrt(fit.num_tail), xmax=float(x[-1]),
                        num_pl_spikes=num_pl_spikes, raw_alpha=fit.alpha)


def _fit_standard(x: np.ndarray, logx: np.ndarray, scores: list | None = None) -> PowerLawFit:
    N = x.size
    alpha, n, _ = tail_alphas(logx)
    # WeightWatcher only scores alpha > 1 (else D = 1); alpha is > 1 or inf here.
    keep = np.flatnonzero(alpha > 1.0)
    d = np.ones(N - 1)
    d_lower = np.ones(N - 1)  # exact where scored, the pruning bound where pruned
    scored = np.zeros(N - 1, dtype=bool)
    best = np.inf  # an upper bound on min D: the best exact D found so far
    # a certificate reads the bounds of pruned candidates (KsScores.d_lower): keep them at 64 samples
    k = _SAMPLES if scores is not None else _FIRST_SAMPLES
    # Refine the bounds on the surviving candidates (k = 8, 32, 128, ... or 64, 256, ...)
    # while that is cheaper than the exact D of the survivors; then go exact.
    # After each round the few most promising get their exact D, which
    # tightens ``best`` far more than the sampled upper bounds would.
    while keep.size > _SAMPLES and 2 * (k + 1) < N - keep[0]:
        lower, upper = ks_bounds(logx, keep, alpha, n, k)
        probe = np.sort(keep[np.argsort(upper, kind="stable")[:8]])
        d[probe] = exact_ks_distances(x, probe, alpha, n)
        scored[probe] = True
        best = min(best, float(d[probe].min()))
        pruned = lower > best * (1 + 1e-9) + 1e-12
        d_lower[keep[pruned]] = lower[pruned]
        keep = keep[~pruned]
        k *= 4
    keep = keep[~scored[keep]]
    if keep.size:
        d[keep] = exact_ks_distances(x, keep, alpha, n)
    i = int(np.argmin(d))
    if scores is not None:
        scored |= np.isin(np.arange(N - 1), keep)
        d_lower[scored] = d[scored]
        scores.append(KsScores(i, alpha, n, d_lower))
    return PowerLawFit(float(alpha[i]), float(x[i]), float(d[i]), int(n[i]))


def _fit_small_n(x: np.ndarray, logx: np.ndarray, k_min: int = 8) -> PowerLawFit:
    # WWFit.fit_powerlaw_smallN scores tails of >= k_min with the bias-corrected
    # alpha; WWFit.__init__ then takes argmin D (its J = D - 0.868/sqrt(n) only
    # trims WWFit.data), so the selection rule is the standard one.
    alpha, n, s = tail_alphas(logx, bias_corrected=True)
    idx = np.flatnonzero((n >= k_min) & (s > 1e-12))
    if idx.size == 0:
        raise DegenerateMatrix("all eigenvalues of the tail are equal: alpha is infinite", "alpha")
    d = exact_ks_distances(x, idx, alpha, n)
    b = int(np.argmin(d))
    i = int(idx[b])
    return PowerLawFit(float(alpha[i]), float(x[i]), float(d[b]), int(n[i]))


_FITS = TensorMemo()


FIT_DEFAULTS = {"threshold": EVALS_THRESHOLD, "min_eigenvalues": MIN_EIGENVALUES, "xmax": None, "fix_fingers": None,
                "max_fingers": MAX_FINGERS, "finger_thresh": FINGER_THRESH, "xmin_max": None}
#: The fit options a fit metric registers (and :class:`~toolkit.metrics.fit_options.FitOptions` sets).
FIT_METRIC_OPTIONS = {"fix_fingers": None, "xmax": None, "xmin_max": None, "max_fingers": MAX_FINGERS,
                      "finger_thresh": FINGER_THRESH}


def spectrum_fit(s: torch.Tensor, **fit_options) -> PowerLawFit:
    r"""The power-law fit of :math:`\lambda_i = \sigma_i^2`, once per singular-value tensor and options.

    Every fit column (``alpha``, ``alpha_xmin``, ``alpha_ks_distance``, ...)
    reads this one fit: it is memoised on ``s`` (its identity and version,
    per thread; :class:`~toolkit.metrics.tensor_memo.TensorMemo`) and the
    options, and so is a degenerate outcome, raised again for each column.

    Parameters
    ----------
    s : torch.Tensor, shape (k,)
        Singular values (any order), e.g. the shared ones of a cell.
    **fit_options
        ``threshold``, ``min_eigenvalues``, ``xmax``, ``fix_fingers``,
        ``max_fingers``, ``finger_thresh`` of :func:`fit_power_law`
        (defaults: :data:`FIT_DEFAULTS`, WeightWatcher's).

    Raises
    ------
    DegenerateMatrix
        No singular values, an all-zero matrix, or what :func:`fit_power_law` raises.
    TypeError
        An unknown option.
    """
    unknown = set(fit_options) - set(FIT_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown power-law fit option(s) {sorted(unknown)}; known: {sorted(FIT_DEFAULTS)}")
    opts = {**FIT_DEFAULTS, **fit_options}
    opts["xmax"] = int(opts["xmax"]) if opts["xmax"] else None
    opts["fix_fingers"] = opts["fix_fingers"] or None

    def compute() -> PowerLawFit:
        if s is None or s.numel() == 0:
            raise DegenerateMatrix("no singular values", "alpha")
        sv = s.detach().to("cpu", torch.float64).numpy()
        if float(np.max(sv)) == 0.0:
            raise DegenerateMatrix("all-zero matrix", "alpha")
        return fit_power_law(sv * sv, **opts)

    if s is None:
        return compute()
    return _FITS.get(s, ("power_law", *sorted(opts.items())), compute)


def alpha(w, s: torch.Tensor, **fit_options) -> float:
    r"""Power-law exponent of the empirical spectral density of :math:`W^\top W`.

    Parameters
    ----------
    w : torch.Tensor, shape (m, n)
        Unused (the spectrum comes from ``s``).
    s : torch.Tensor, shape (min(m, n),)
        Singular values; :math:`\lambda_i = \sigma_i^2`.
    **fit_options
        ``threshold`` (1e-5), ``min_eigenvalues`` (8), ``xmax`` (None),
        ``fix_fingers`` (None or ``"clip_xmax"``), ``max_fingers`` (10),
        ``finger_thresh`` (1.0): see :func:`fit_power_law`.

    Returns
    -------
    float
        :math:`\alpha` of :math:`p(\lambda) \propto \lambda^{-\alpha}` for
        :math:`\lambda \ge x_{min}` (see :func:`fit_power_law`); roughly 2-6
        for trained layers, smaller meaning heavier-tailed. The fit is shared
        with the other fit columns (:func:`spectrum_fit`).

    Raises
    ------
    DegenerateMatrix
        Fewer than ``min_eigenvalues`` eigenvalues above ``threshold``
        (one-row, rank-1 and all-zero matrices included), or an all-equal tail.
    """
    return spectrum_fit(s, **fit_options).alpha


register_metric(
    "alpha",
    alpha,
    long_name="power-law exponent alpha",
    units="1",
    description=(
        "alpha = 1 + n / sum_{i: lambda_i >= xmin} ln(lambda_i / xmin), lambda_i = sigma_i^2 > 1e-5 "
        "(eigenvalues of W^T W, unnormalised), xmin minimising the Kolmogorov-Smirnov distance, "
        "largest eigenvalue kept (WeightWatcher 0.7.7 default fit)"
    ),
    reference=(
        "Martin & Mahoney (2021) JMLR 22(165); Martin, Peng & Mahoney (2021) Nat. Commun. 12:4122; "
        "Clauset, Shalizi & Newman (2009) SIAM Rev. 51(4)"
    ),
    needs_singular_values=True,
    options=FIT_METRIC_OPTIONS,
)
