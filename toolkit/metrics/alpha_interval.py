r"""A confidence interval for the power-law exponent alpha that includes the uncertainty of xmin.

WeightWatcher's ``sigma`` (:math:`(\alpha - 1)/\sqrt{n}`, ``alpha_sigma``) is the standard
error of the MLE *for a known xmin*; the fit chooses xmin from the data, and most of the
spread of alpha over samples comes from that choice. The interval here is Clauset, Shalizi &
Newman's semi-parametric bootstrap (2009, SIAM Rev. 51(4), §4.1, the procedure their §3.4
uses for xmin's uncertainty):

1. fit the spectrum (:func:`~toolkit.metrics.powerlaw.fit_power_law`): :math:`\hat\alpha`,
   :math:`\hat x_{min}`, :math:`n_{tail}` of the :math:`N` kept eigenvalues;
2. for each of ``replicates`` synthetic spectra: draw
   :math:`n' \sim \mathrm{Binomial}(N, n_{tail}/N)` values from the fitted power law
   :math:`p(x) \propto x^{-\hat\alpha}`, :math:`x \ge \hat x_{min}` (up to the fitted
   :math:`x_{max}` when the fit clipped it; the clipped eigenvalues are kept as they are), and
   :math:`N - n'` from the eigenvalues below :math:`\hat x_{min}`, with replacement;
3. fit each synthetic spectrum the same way, xmin chosen again (the same fit options);
4. the interval is the percentile interval of the replicate alphas,
   :math:`[q_{(1-\ell)/2}, q_{(1+\ell)/2}]` at level :math:`\ell` (0.95).

The draws come from ``numpy.random.default_rng(seed)``: the same seed gives the same interval.
Coverage on synthetic spectra of known exponent and the cost against an eigendecomposition are
checked by ``tests/metrics/test_alpha_interval.py`` and ``benchmarks/bench_alpha_interval.py``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from toolkit.metrics.power_law_tail import EVALS_THRESHOLD, PowerLawFit
from toolkit.metrics.powerlaw import FIT_METRIC_OPTIONS, fit_power_law, spectrum_fit
from toolkit.metrics.registry import DegenerateMatrix, register_metric
from toolkit.metrics.tensor_memo import TensorMemo

__all__ = ["REPLICATES", "alpha_interval", "bootstrap_alphas"]

#: Bootstrap replicates of the default interval.
REPLICATES = 100
#: Confidence level of the default interval.
LEVEL = 0.95

_INTERVALS = TensorMemo()


def bootstrap_alphas(eigenvalues, fit: PowerLawFit, *, replicates: int = REPLICATES, seed: int = 0,
                     **fit_options) -> np.ndarray:
    """The alphas of ``replicates`` semi-parametric bootstrap spectra of a fit (module docstring, steps 2-3).

    Parameters
    ----------
    eigenvalues : array-like, shape (N,)
        The spectrum ``fit`` was made from (any order; values <= the fit's threshold are not resampled).
    fit : PowerLawFit
        Its fit (:func:`~toolkit.metrics.powerlaw.fit_power_law` with ``fit_options``).
    replicates : int
    seed : int
        Of ``numpy.random.default_rng``.
    **fit_options
        As :func:`~toolkit.metrics.powerlaw.fit_power_law` takes them (the same as ``fit``'s).

    Returns
    -------
    numpy.ndarray, shape (replicates,), float64
        NaN for a replicate whose fit is degenerate.
    """
    threshold = fit_options.get("threshold", EVALS_THRESHOLD)
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))
    lam = lam[lam > threshold]
    xmin, a = float(fit.xmin), float(fit.alpha)
    clipped = fit.xmax < lam[-1] if math.isfinite(fit.xmax) else False
    above = lam[lam > fit.xmax] if clipped else lam[:0]  # the clipped fingers: kept as they are
    below = lam[lam < xmin]
    n = lam.size - above.size
    p_tail = min(1.0, fit.num_tail / n)
    # the power law's CDF on [xmin, xmax] (xmax = inf unless the fit clipped it), inverted
    top = (fit.xmax / xmin) ** (1.0 - a) if clipped else 0.0
    rng = np.random.default_rng(seed)
    out = np.empty(replicates)
    for r in range(replicates):
        n_tail = int(rng.binomial(n, p_tail)) if below.size else n
        u = rng.random(n_tail)
        tail = xmin * (1.0 - u * (1.0 - top)) ** (1.0 / (1.0 - a))
        body = below[rng.integers(0, below.size, n - n_tail)] if below.size else below
        try:
            out[r] = fit_power_law(np.concatenate([body, tail, above]), **fit_options).alpha
        except DegenerateMatrix:
            out[r] = math.nan
    return out


def alpha_interval(eigenvalues, fit: PowerLawFit | None = None, *, level: float = LEVEL,
                   replicates: int = REPLICATES, seed: int = 0, **fit_options) -> tuple[float, float]:
    """The ``level`` percentile interval of alpha from :func:`bootstrap_alphas`.

    Parameters
    ----------
    eigenvalues : array-like, shape (N,)
    fit : PowerLawFit, optional
        The spectrum's fit (made here when not given).
    level : float, default 0.95
    replicates, seed, **fit_options
        As :func:`bootstrap_alphas`.

    Returns
    -------
    (float, float)
        ``(lower, upper)``.

    Raises
    ------
    DegenerateMatrix
        The spectrum cannot be fitted, or fewer than half the replicates could.
    """
    fit = fit if fit is not None else fit_power_law(eigenvalues, **fit_options)
    alphas = bootstrap_alphas(eigenvalues, fit, replicates=replicates, seed=seed, **fit_options)
    good = alphas[np.isfinite(alphas)]
    if good.size < replicates / 2:
        raise DegenerateMatrix(f"only {good.size} of {replicates} bootstrap spectra could be fitted", "alpha_ci")
    lo, hi = np.quantile(good, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _interval(s: torch.Tensor, name: str, replicates: int, seed: int, fit_options: dict) -> tuple[float, float]:
    """The interval of the cell's fit, once per singular-value tensor and options (both bounds read it)."""
    def compute():
        try:
            fit = spectrum_fit(s, **fit_options)
        except DegenerateMatrix as e:
            raise DegenerateMatrix(e.reason, name) from None
        sv = s.detach().to("cpu", torch.float64).numpy()
        return alpha_interval(sv * sv, fit, replicates=replicates, seed=seed, **fit_options)

    if s is None:
        return compute()
    key = ("alpha_ci", int(replicates), int(seed), *sorted((k, str(v)) for k, v in fit_options.items()))
    return _INTERVALS.get(s, key, compute)


def alpha_ci_lower(w, s: torch.Tensor, *, replicates: int = REPLICATES, seed: int = 0, **fit_options) -> float:
    """Lower end of alpha's 95 % interval (semi-parametric bootstrap, xmin chosen again; module docstring)."""
    return _interval(s, "alpha_ci_lower", replicates, seed, fit_options)[0]


def alpha_ci_upper(w, s: torch.Tensor, *, replicates: int = REPLICATES, seed: int = 0, **fit_options) -> float:
    """Upper end of alpha's 95 % interval (semi-parametric bootstrap, xmin chosen again; module docstring)."""
    return _interval(s, "alpha_ci_upper", replicates, seed, fit_options)[1]


_CI_OPTIONS = {**FIT_METRIC_OPTIONS, "replicates": REPLICATES, "seed": 0}
_CI_REFERENCE = "Clauset, Shalizi & Newman (2009), SIAM Rev. 51(4), sections 3.4 and 4.1 (semi-parametric bootstrap)"
for _name, _func, _end in (("alpha_ci_lower", alpha_ci_lower, "lower"), ("alpha_ci_upper", alpha_ci_upper, "upper")):
    register_metric(
        _name, _func, long_name=f"alpha, 95 % interval ({_end} end)", units="1",
        description=(f"{_end} end of the 2.5-97.5 % percentile interval of alpha over {REPLICATES} semi-parametric "
                     "bootstrap spectra (power law above xmin, resampled eigenvalues below it; xmin chosen again "
                     "in each), which includes xmin's uncertainty; seeded"),
        reference=_CI_REFERENCE, needs_singular_values=True, options=_CI_OPTIONS, opt_in=True,
    )
