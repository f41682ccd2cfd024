r"""A 95 % interval for the power-law exponent alpha of the fitted tail, with nominal coverage.

The fit (:func:`~toolkit.metrics.powerlaw.fit_power_law`) estimates alpha by maximum likelihood
on the tail above its chosen :math:`x_{min}`: :math:`\hat\alpha = 1 + c/S`, with
:math:`S = \sum_{\lambda_i \ge x_{min}} \ln(\lambda_i / x_{min})` over the :math:`n` tail values and
:math:`c = n` (:math:`n - 1` in WeightWatcher's small-N fit). The MLE is biased upward on small tails
(:math:`E[\hat\alpha - 1] = \frac{n}{n-2}(\alpha - 1)` with :math:`x_{min}` at a tail value), so the
percentile interval of a bootstrap of :math:`\hat\alpha` covers less than its level. The interval
here is a parametric bootstrap of the MLE on the fixed tail, inverted through a pivot, which removes
that bias (Davison & Hinkley 1997, *Bootstrap Methods and their Application*, §2.4 and §5.2, the
basic interval on the scale where the statistic is pivotal):

1. the tail of the fit (its :math:`n` values from :math:`x_{min}` up to the fitted :math:`x_{max}`)
   and :math:`S`;
2. ``replicates`` bootstrap tails drawn from the fitted power law :math:`p(x) \propto x^{-\hat\alpha}`,
   :math:`x \ge x_{min}`, each refitted with the same MLE: :math:`\hat\alpha^* - 1 = c/S^*`. The fit's
   :math:`x_{min}` is the smallest tail value, and above it the other :math:`n - 1` are again a power law
   of the same exponent, so :math:`(\alpha - 1) S` is :math:`\mathrm{Gamma}(n - 1, 1)` whatever alpha is:
   a replicate's :math:`S^*` is drawn directly as :math:`G^*/(\hat\alpha - 1)`,
   :math:`G^* \sim \mathrm{Gamma}(n - 1, 1)` (vectorised: one draw per replicate, whatever the tail's length);
3. the ratio :math:`R = (\hat\alpha - 1)/(\alpha - 1)` is pivotal, and its bootstrap copy is
   :math:`R^* = (\hat\alpha^* - 1)/(\hat\alpha - 1)` (its upward bias included); the interval is
   :math:`\alpha - 1 \in [(\hat\alpha - 1)/R^*_{(1+\ell)/2},\ (\hat\alpha - 1)/R^*_{(1-\ell)/2}]` at level
   :math:`\ell` (0.95): as ``replicates`` grows, :math:`[G_{(1-\ell)/2}/S,\ G_{(1+\ell)/2}/S]` with
   :math:`G \sim \mathrm{Gamma}(n - 1, 1)`, the exact interval of a power law above a given :math:`x_{min}`
   (Clauset, Shalizi & Newman 2009, SIAM Rev. 51(4), eq. (3.7) and its Gamma law).

The interval is conditional on :math:`x_{min}` (the choice of the tail is not resampled; WeightWatcher's
``sigma`` is too); where the KS rule's choice varies it covers less (below 0.92 on a tail above a bulk:
``benchmarks/bench_alpha_coverage.py``), and :mod:`toolkit.metrics.alpha_interval_xmin` chooses :math:`x_{min}`
again in every replicate, at the cost of a whole fit each: its columns are the default interval, these
(``alpha_ci_lower`` / ``alpha_ci_upper``) are opt-in, for a tail whose start is known. The draws come from
``numpy.random.default_rng`` seeded from the tail (a coarse, scale-free fingerprint: :func:`spectrum_rng`) and
``seed``: the same spectrum gives the same interval, bit for bit, and the same matrix scaled or with its rows
permuted the same draws.
Coverage of a known exponent at tails of 30 to 1000 values: ``tests/metrics/test_alpha_interval.py`` and
``benchmarks/bench_alpha_coverage.py``.
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist

import numpy as np
import torch

from toolkit.metrics.power_law_tail import EVALS_THRESHOLD, PowerLawFit
from toolkit.metrics.powerlaw import FIT_METRIC_OPTIONS, fit_power_law, spectrum_fit
from toolkit.metrics.registry import DegenerateMatrix, register_metric
from toolkit.metrics.tensor_memo import TensorMemo

__all__ = ["REPLICATES", "LEVEL", "alpha_interval", "bootstrap_alphas", "cell_interval", "fit_tail",
           "lognormal_pivot_interval", "pivot_interval", "spectrum_rng", "student_t_quantile"]

#: Bootstrap replicates of the default interval (one Gamma draw each).
REPLICATES = 2000
#: Confidence level of the default interval.
LEVEL = 0.95

_INTERVALS = TensorMemo()


def fit_tail(eigenvalues, fit: PowerLawFit, threshold: float = EVALS_THRESHOLD) -> np.ndarray:
    """The tail a fit was made on: its ``num_tail`` largest values up to ``fit.xmax``, ascending.

    Parameters
    ----------
    eigenvalues : array-like, shape (N,)
        The spectrum ``fit`` was made from (any order).
    fit : PowerLawFit
    threshold : float
        The fit's threshold (values at or below it were not fitted).

    Returns
    -------
    numpy.ndarray, shape (fit.num_tail,), float64
    """
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64).ravel())
    kept = lam[(lam > threshold) & (lam <= fit.xmax)] if math.isfinite(fit.xmax) else lam[lam > threshold]
    return kept[kept.size - int(fit.num_tail):]


def spectrum_rng(tail: np.ndarray, seed: int) -> np.random.Generator:
    r"""A generator seeded from ``seed`` and a coarse, scale-free fingerprint of the values: each one's
    :math:`\log_2` over the largest, in steps of 1/16 (about 4 %).

    The same spectrum gives the same draws; so, almost always, does one that differs from it only in the
    last bits: the singular values of :math:`cW` (with :math:`W` rounded to float32 again: ~1e-8 relative),
    or of :math:`W` with its rows or columns permuted (~1e-15): a value moves to the next step only when it lies
    that close to a step's edge, about one spectrum of 3000 values in a thousand at 1e-8, one in 1e7 at 1e-15.
    Seeded from the raw bytes, the interval of one matrix moved with such last bits by the Monte Carlo spread of
    its replicates (an alpha of 9.09 had [6.00, 12.14], [5.68, 13.96] with its rows permuted, [6.42, 12.69]
    doubled); now it moves with them as little as alpha does. Spectra that differ beyond a step get
    independent draws, so the Monte Carlo errors of different matrices do not line up."""
    v = np.ascontiguousarray(tail, dtype=np.float64)
    top = float(v.max()) if v.size else 0.0
    if math.isfinite(top) and top > 0.0:
        with np.errstate(divide="ignore"):
            steps = np.floor(np.log2(np.maximum(v, 0.0) / top) * 16.0)
        v = np.where(np.isfinite(steps), steps, -(2.0 ** 31)).astype(np.int64)
    digest = hashlib.blake2b(v.tobytes(), digest_size=16).digest()
    return np.random.default_rng([int(seed), *np.frombuffer(digest, dtype=np.uint32).tolist()])


def bootstrap_alphas(eigenvalues, fit: PowerLawFit, *, replicates: int = REPLICATES, seed: int = 0,
                     threshold: float = EVALS_THRESHOLD, **_fit_options) -> np.ndarray:
    r"""The MLEs :math:`\hat\alpha^*` of ``replicates`` parametric bootstrap tails of a fit (steps 1-2).

    Parameters
    ----------
    eigenvalues : array-like, shape (N,)
        The spectrum ``fit`` was made from.
    fit : PowerLawFit
    replicates : int
    seed : int
        Mixed with the tail's bytes into the generator's seed.
    threshold : float
        The fit's threshold; the other fit options are accepted and not needed (the tail is the fit's).

    Returns
    -------
    numpy.ndarray, shape (replicates,), float64

    Raises
    ------
    DegenerateMatrix
        A tail of fewer than two values, or a flat one (:math:`S = 0`).
    """
    tail = fit_tail(eigenvalues, fit, threshold)
    s = float(np.log(tail / tail[0]).sum()) if tail.size else 0.0
    if tail.size < 2 or not s > 0 or not math.isfinite(fit.alpha):
        raise DegenerateMatrix(f"a tail of {tail.size} value(s) with log-sum {s:g}: no interval", "alpha_ci")
    a1 = fit.alpha - 1.0
    g = spectrum_rng(tail, seed).standard_gamma(float(tail.size - 1), size=int(replicates))
    return 1.0 + (a1 * s) * a1 / g  # c / S*, c = (alpha - 1) S the fit's numerator, S* = G / (alpha - 1)


def alpha_interval(eigenvalues, fit: PowerLawFit | None = None, *, level: float = LEVEL,
                   replicates: int = REPLICATES, seed: int = 0, **fit_options) -> tuple[float, float]:
    """The ``level`` interval of alpha: the pivot of :func:`bootstrap_alphas` inverted (module docstring, step 3).

    Parameters
    ----------
    eigenvalues : array-like, shape (N,)
    fit : PowerLawFit, optional
        The spectrum's fit (made here with ``fit_options`` when not given).
    level : float, default 0.95
    replicates, seed
        As :func:`bootstrap_alphas`.
    **fit_options
        As :func:`~toolkit.metrics.powerlaw.fit_power_law` takes them.

    Returns
    -------
    (float, float)
        ``(lower, upper)``.

    Raises
    ------
    DegenerateMatrix
        The spectrum cannot be fitted, or its tail has no spread.
    ValueError
        ``level`` outside (0, 1) or fewer than 10 replicates.
    """
    if not 0.0 < level < 1.0 or int(replicates) < 10:
        raise ValueError(f"alpha_interval needs 0 < level < 1 and replicates >= 10, got {level}, {replicates}")
    fit = fit if fit is not None else fit_power_law(eigenvalues, **fit_options)
    stars = bootstrap_alphas(eigenvalues, fit, replicates=replicates, seed=seed,
                             threshold=fit_options.get("threshold") or EVALS_THRESHOLD)
    return pivot_interval(fit.alpha, stars, level)


def pivot_interval(alpha: float, stars: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    r"""The ``level`` interval of alpha from bootstrap replicates ``stars`` of it, through the pivot (step 3).

    Parameters
    ----------
    alpha : float
        The fit's exponent :math:`\hat\alpha`.
    stars : numpy.ndarray, shape (B,)
        The replicates' exponents :math:`\hat\alpha^*` (parametric here, semi-parametric in
        :mod:`toolkit.metrics.alpha_interval_xmin`).
    level : float, default 0.95

    Returns
    -------
    (float, float)
        :math:`1 + (\hat\alpha - 1)/R^*_{(1+\ell)/2}` and :math:`1 + (\hat\alpha - 1)/R^*_{(1-\ell)/2}`,
        :math:`R^* = (\hat\alpha^* - 1)/(\hat\alpha - 1)` (Davison & Hinkley 1997, §5.2, the basic
        interval on the scale of the ratio).
    """
    a1 = alpha - 1.0
    r_lo, r_hi = np.quantile((np.asarray(stars) - 1.0) / a1, [(1 - level) / 2, (1 + level) / 2])
    return 1.0 + a1 / float(r_hi), 1.0 + a1 / float(r_lo)


def student_t_quantile(p: float, df: float) -> float:
    r"""The ``p`` quantile of Student's t with ``df`` degrees of freedom, by its Cornish-Fisher expansion.

    :math:`t_p \approx z + g_1(z)/\nu + g_2(z)/\nu^2 + g_3(z)/\nu^3 + g_4(z)/\nu^4`, :math:`z = \Phi^{-1}(p)`
    (Abramowitz & Stegun 1964, eq. 26.7.5): within :math:`10^{-4}` relative of the exact quantile for
    :math:`\nu \ge 9` at :math:`p \le 0.995` (``tests/metrics/test_alpha_interval.py`` against scipy), without
    importing ``scipy.stats`` (a tenth of a second) into a metrics pass.

    Parameters
    ----------
    p : float
        Probability, in (0, 1).
    df : float
        Degrees of freedom :math:`\nu`, at least 1 (the expansion is only this accurate from about 9).

    Returns
    -------
    float
    """
    z = NormalDist().inv_cdf(p)
    z2 = z * z
    g = (z * (z2 + 1.0) / 4.0,
         z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0,
         z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0,
         z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92160.0)
    return z + sum(gk / df ** (k + 1) for k, gk in enumerate(g))


def lognormal_pivot_interval(alpha: float, stars: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    r"""The ``level`` interval of alpha from a few bootstrap replicates: the normal approximation of the log pivot.

    For tens of replicates (:mod:`toolkit.metrics.alpha_interval_xmin`'s 30), where :func:`pivot_interval`'s
    2.5 % and 97.5 % quantiles would each rest on about one replicate: the bootstrap copy of the pivot on the log
    scale, :math:`L^* = \ln R^* = \ln((\hat\alpha^* - 1)/(\hat\alpha - 1))`, summarised by its mean :math:`b`
    (the bias, the MLE's included) and standard deviation :math:`v^{1/2}` over all the :math:`B` replicates, and
    :math:`\ln(\alpha - 1) \in \ln(\hat\alpha - 1) - b \pm q\,v^{1/2}`: the normal approximation with the
    bootstrap's bias and variance (Davison & Hinkley 1997, *Bootstrap Methods and their Application*, §5.2) on the
    transformed scale :math:`h(\alpha) = \ln(\alpha - 1)`, where :math:`(\hat\alpha - 1)/(\alpha - 1)` is close to
    pivotal (a ratio of Gamma variables on a fixed tail). :math:`b` and :math:`v` are themselves estimated from
    :math:`B` draws, so :math:`q = t_{B-1}((1+\ell)/2)\sqrt{1 + 1/B}` (the normal prediction interval with
    estimated mean and variance; :func:`student_t_quantile`) rather than :math:`\Phi^{-1}((1+\ell)/2)`: with 30
    replicates the normal quantile covered 0.917 at a tail of 100 values where this one covered 0.935
    (``benchmarks/bench_alpha_coverage.py``); it tends to the normal one as :math:`B` grows.

    Parameters
    ----------
    alpha : float
        The fit's exponent :math:`\hat\alpha` (above 1).
    stars : numpy.ndarray, shape (B,)
        The replicates' exponents :math:`\hat\alpha^*`; those not above 1 (no finite log pivot) are left out.
    level : float, default 0.95

    Returns
    -------
    (float, float)
        :math:`1 + (\hat\alpha - 1)\,e^{-b - q v^{1/2}}` and :math:`1 + (\hat\alpha - 1)\,e^{-b + q v^{1/2}}`.

    Raises
    ------
    ValueError
        Fewer than 10 replicates above 1, or ``alpha`` not above 1.
    """
    a1 = alpha - 1.0
    r = (np.asarray(stars, dtype=np.float64) - 1.0) / a1 if a1 > 0.0 else np.empty(0)
    r = r[np.isfinite(r) & (r > 0.0)]
    if not a1 > 0.0 or r.size < 10:
        raise ValueError(f"lognormal_pivot_interval needs alpha > 1 and >= 10 replicates above 1, got alpha={alpha}, "
                         f"{r.size} replicates")
    logs = np.log(r)
    bias, sd = float(logs.mean()), float(logs.std(ddof=1))
    q = student_t_quantile((1.0 + level) / 2.0, r.size - 1) * math.sqrt(1.0 + 1.0 / r.size)
    return 1.0 + a1 * math.exp(-bias - q * sd), 1.0 + a1 * math.exp(-bias + q * sd)


def cell_interval(s: torch.Tensor, name: str, replicates: int, seed: int, fit_options: dict,
                  interval=None) -> tuple[float, float]:
    """The interval of a cell's fit, once per singular-value tensor, method and options (both bounds read it).

    Parameters
    ----------
    s : torch.Tensor
        The cell's singular values.
    name : str
        The metric asking (named in a :class:`DegenerateMatrix`).
    replicates, seed, fit_options
        As ``interval`` takes them.
    interval : callable, optional
        ``interval(eigenvalues, fit, replicates=, seed=, **fit_options) -> (lower, upper)``; default
        :func:`alpha_interval` (:func:`toolkit.metrics.alpha_interval_xmin.alpha_interval_xmin` for the columns
        that choose xmin again).

    Returns
    -------
    (float, float)
    """
    interval = interval or alpha_interval

    def compute():
        try:
            fit = spectrum_fit(s, **fit_options)
        except DegenerateMatrix as e:
            raise DegenerateMatrix(e.reason, name) from None
        sv = s.detach().to("cpu", torch.float64).numpy()
        try:
            return interval(sv * sv, fit, replicates=replicates, seed=seed, **fit_options)
        except DegenerateMatrix as e:
            raise DegenerateMatrix(e.reason, name) from None

    if s is None:
        return compute()
    key = (interval.__name__, int(replicates), int(seed), *sorted((k, str(v)) for k, v in fit_options.items()))
    return _INTERVALS.get(s, key, compute)


def alpha_ci_lower(w, s: torch.Tensor, *, replicates: int = REPLICATES, seed: int = 0, **fit_options) -> float:
    """Lower end of alpha's 95 % interval (parametric bootstrap of the tail's MLE, pivot; module docstring)."""
    return cell_interval(s, "alpha_ci_lower", replicates, seed, fit_options)[0]


def alpha_ci_upper(w, s: torch.Tensor, *, replicates: int = REPLICATES, seed: int = 0, **fit_options) -> float:
    """Upper end of alpha's 95 % interval (parametric bootstrap of the tail's MLE, pivot; module docstring)."""
    return cell_interval(s, "alpha_ci_upper", replicates, seed, fit_options)[1]


CI_OPTIONS = {**FIT_METRIC_OPTIONS, "replicates": REPLICATES, "seed": 0}
CI_REFERENCE = ("Davison & Hinkley (1997), Bootstrap Methods and their Application, sections 2.4 and 5.2 (parametric "
                 "bootstrap, pivot); Clauset, Shalizi & Newman (2009), SIAM Rev. 51(4), eq. (3.7) (the MLE)")
for _name, _func, _end in (("alpha_ci_lower", alpha_ci_lower, "lower"), ("alpha_ci_upper", alpha_ci_upper, "upper")):
    register_metric(
        _name, _func, long_name=f"alpha, 95 % interval ({_end} end)", units="1",
        description=(f"{_end} end of alpha's 95 % interval: {REPLICATES} parametric bootstrap tails of the fitted "
                     "power law above xmin (xmin held), the MLE's ratio (alpha* - 1)/(alpha - 1) as the pivot, "
                     "which corrects the MLE's upward bias on small tails; seeded from the tail"),
        reference=CI_REFERENCE, needs_singular_values=True, options=CI_OPTIONS, opt_in=True,
    )
