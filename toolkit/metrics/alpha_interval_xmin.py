r"""A 95 % interval of alpha that accounts for the choice of :math:`x_{min}`: a semi-parametric bootstrap.

The default interval (:mod:`toolkit.metrics.alpha_interval`) holds the fit's :math:`x_{min}`: it is exact for a
tail whose start is known, and covers less than its level when the KS rule chose the start, because the choice
itself varies from sample to sample (on a Pareto tail above a uniform bulk, the fitted alpha's spread is up to
1.5x the fixed tail's: ``benchmarks/bench_alpha_coverage.py``). Here every bootstrap replicate chooses its
:math:`x_{min}` again, as Clauset, Shalizi & Newman (2009, SIAM Rev. 51(4), §4.1, the semi-parametric bootstrap
of their goodness-of-fit test) build their synthetic data sets:

1. the :math:`N` kept eigenvalues (above the fit's threshold, after its ``xmax`` clipping), the :math:`n` of the
   fit's tail and the :math:`N - n` below :math:`x_{min}` (the bulk);
2. ``replicates`` synthetic spectra of :math:`N` values: :math:`n^* \sim \mathrm{Binomial}(N, n/N)` drawn from the
   fitted power law :math:`p(x) \propto x^{-\hat\alpha}` above :math:`x_{min}`, the other :math:`N - n^*` drawn
   with replacement from the bulk;
3. each refitted by the toolkit's default fit (:func:`~toolkit.metrics.powerlaw.fit_power_law`, its exact KS
   search: :math:`x_{min}` chosen again), giving :math:`\hat\alpha^*`; all at once
   (:func:`~toolkit.metrics.powerlaw_batch.fit_alphas`: the replicates share their length, and each one's
   :math:`\hat\alpha^*` is the one the fit gives it alone);
4. the interval inverts the pivot :math:`(\hat\alpha^* - 1)/(\hat\alpha - 1)` on the log scale, by the normal
   approximation with the replicates' mean (the bias, the MLE's small-tail bias included) and standard deviation,
   its quantile Student's t with :math:`B - 1` degrees of freedom times :math:`\sqrt{1 + 1/B}` (the mean and
   deviation are themselves estimated from the :math:`B` replicates;
   :func:`~toolkit.metrics.alpha_interval.lognormal_pivot_interval`; Davison & Hinkley 1997, *Bootstrap Methods
   and their Application*, §5.2). With 30 replicates the percentile ends would each rest on less than one
   replicate, and the normal quantile 1.96 covers less than its level (the mean and deviation of 30 draws are
   noisy); the coverage of all three on a Pareto tail above a uniform bulk, tails of 30-1000 values:
   ``benchmarks/bench_alpha_coverage.py`` (README). 30 replicates cost about 0.7x the first version's 50
   (their refits are most of an interval's work).

The draws are seeded from the kept spectrum (a coarse, scale-free fingerprint:
:func:`~toolkit.metrics.alpha_interval.spectrum_rng`) and ``seed``: the same spectrum gives the same interval, bit
for bit (and the same as when every replicate was refitted alone, before the batch), and the same matrix scaled or
with its rows or columns permuted the same draws. Another ``seed`` gives another interval: with 30 replicates its
ends move by about 7 % (relative standard deviation over 20 seeds, a Gaussian 512 x 1024 and a Student-t(3)
768 x 2048 matrix): the Monte Carlo error, which the coverage figures include. The 30 fits cost
about 4 ms of CPU for 576 eigenvalues. Its columns ``alpha_ci_xmin_lower`` / ``alpha_ci_xmin_upper`` are the
default interval of alpha, measured whenever the default metrics are (the explorer's hover, drill-down and the
mark of an uncertain alpha read them; :mod:`toolkit.metrics.alpha_interval`'s, xmin held, is opt-in). Coverage:
``benchmarks/bench_alpha_coverage.py``; cost against the ``alpha`` pass: ``benchmarks/bench_xmin_interval.py``.
"""

from __future__ import annotations

import numpy as np
import torch

from toolkit.metrics.alpha_interval import (
    CI_OPTIONS,
    CI_REFERENCE,
    LEVEL,
    cell_interval,
    lognormal_pivot_interval,
    spectrum_rng,
)
from toolkit.metrics.power_law_tail import EVALS_THRESHOLD, PowerLawFit
from toolkit.metrics.powerlaw import fit_power_law
from toolkit.metrics.powerlaw_batch import fit_alphas
from toolkit.metrics.registry import DegenerateMatrix, register_metric

__all__ = ["XMIN_REPLICATES", "alpha_interval_xmin", "semiparametric_alphas", "semiparametric_spectra"]

#: Bootstrap replicates of the interval (one whole fit each; module docstring, step 4).
XMIN_REPLICATES = 30


def _kept(eigenvalues, threshold: float, xmax: int | None) -> np.ndarray:
    """The eigenvalues the default fit keeps, ascending: above ``threshold``, the ``|xmax|`` largest clipped."""
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64).ravel())
    lam = lam[: lam.size - abs(int(xmax))] if xmax else lam
    return lam[lam > threshold]


def semiparametric_spectra(eigenvalues, fit: PowerLawFit, *, replicates: int = XMIN_REPLICATES, seed: int = 0,
                           threshold: float = EVALS_THRESHOLD, xmax: int | None = None) -> np.ndarray:
    r"""The ``replicates`` semi-parametric bootstrap spectra of a fit (module docstring, steps 1-2).

    Parameters
    ----------
    eigenvalues : array-like, shape (N,)
    fit : PowerLawFit
        The spectrum's default fit.
    replicates : int, default 30
    seed : int
        Mixed with the kept spectrum's bytes into the generator's seed.
    threshold, xmax
        The fit's options: the spectra are drawn from the kept, clipped eigenvalues.

    Returns
    -------
    numpy.ndarray, shape (replicates, N), float64
        Row :math:`b`: :math:`N - n^*_b` values drawn with replacement from the bulk and :math:`n^*_b` from the
        power law :math:`p(x) \propto x^{-\hat\alpha}`, :math:`x \ge x_{min}` (inverse CDF), ascending. Every
        value is above ``threshold`` (the bulk's are kept eigenvalues, the tail's at least :math:`x_{min}`).
    """
    x = _kept(eigenvalues, threshold, xmax)
    N, n, B = x.size, int(fit.num_tail), int(replicates)
    bulk = x[: N - n]
    rng = spectrum_rng(x, seed)
    tails = rng.binomial(N, n / N, size=B) if bulk.size else np.full(B, N)
    in_tail = np.arange(N)[None, :] >= (N - tails)[:, None]  # row b: its last tails[b] places
    out = np.empty((B, N))
    out[in_tail] = fit.xmin * (1.0 - rng.random(int(tails.sum()))) ** (-1.0 / (fit.alpha - 1.0))
    if bulk.size:
        out[~in_tail] = bulk[rng.integers(0, bulk.size, B * N - int(tails.sum()))]
    out.sort(axis=1)
    return out


def semiparametric_alphas(eigenvalues, fit: PowerLawFit | None = None, *, replicates: int = XMIN_REPLICATES,
                          seed: int = 0, threshold: float = EVALS_THRESHOLD, xmax: int | None = None,
                          min_eigenvalues: int | None = None, fix_fingers=None, **_finger_options) -> np.ndarray:
    r"""The exponents :math:`\hat\alpha^*` of ``replicates`` semi-parametric bootstrap spectra, each refitted
    with :math:`x_{min}` chosen again (module docstring, steps 1-3).

    Parameters
    ----------
    eigenvalues : array-like, shape (N,)
    fit : PowerLawFit, optional
        The spectrum's default fit (made here when not given).
    replicates : int, default 30
    seed : int
        Mixed with the kept spectrum's bytes into the generator's seed.
    threshold, xmax, min_eigenvalues
        The fit's options (:func:`~toolkit.metrics.powerlaw.fit_power_law`); the replicates are drawn from the
        kept, clipped spectrum (:func:`semiparametric_spectra`) and refitted all at once by the batched default
        fit (:func:`~toolkit.metrics.powerlaw_batch.fit_alphas`: each replicate's alpha is the one
        ``fit_power_law`` gives it alone).
    fix_fingers : None
        Only the default fit is bootstrapped (the options of the other fits, ``max_fingers`` and the like,
        are accepted and not used).

    Returns
    -------
    numpy.ndarray, shape (B,), float64
        ``B <= replicates``: a replicate the fit refuses (a degenerate spectrum) is left out.

    Raises
    ------
    DegenerateMatrix
        The spectrum cannot be fitted.
    ValueError
        ``fix_fingers`` other than None, or fewer than 10 replicates.
    """
    if fix_fingers or int(replicates) < 10:
        raise ValueError(f"semiparametric_alphas bootstraps the default fit with >= 10 replicates, got "
                         f"fix_fingers={fix_fingers!r}, replicates={replicates}")
    options = {"threshold": threshold} | ({"min_eigenvalues": min_eigenvalues} if min_eigenvalues else {})
    fit = fit if fit is not None else fit_power_law(_kept(eigenvalues, threshold, xmax), **options)
    spectra = semiparametric_spectra(eigenvalues, fit, replicates=replicates, seed=seed, threshold=threshold,
                                     xmax=xmax)
    stars = fit_alphas(spectra, tail_hint=int(fit.num_tail),
                       **({"min_eigenvalues": min_eigenvalues} if min_eigenvalues else {}))
    return stars[np.isfinite(stars)]


def alpha_interval_xmin(eigenvalues, fit: PowerLawFit | None = None, *, level: float = LEVEL,
                        replicates: int = XMIN_REPLICATES, seed: int = 0, **fit_options) -> tuple[float, float]:
    """The ``level`` interval of alpha with :math:`x_{min}` chosen again in every replicate (module docstring).

    Parameters
    ----------
    eigenvalues : array-like, shape (N,)
    fit : PowerLawFit, optional
        The spectrum's default fit (made here with ``fit_options`` when not given).
    level : float, default 0.95
    replicates, seed, **fit_options
        As :func:`semiparametric_alphas`.

    Returns
    -------
    (float, float)
        ``(lower, upper)``.

    Raises
    ------
    DegenerateMatrix
        The spectrum cannot be fitted, or fewer than 10 replicates could be.
    ValueError
        ``level`` outside (0, 1), fewer than 10 replicates or a ``fix_fingers`` fit.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"alpha_interval_xmin needs 0 < level < 1, got {level}")
    if fit is None:
        fit = fit_power_law(eigenvalues, **fit_options)
    stars = semiparametric_alphas(eigenvalues, fit, replicates=replicates, seed=seed, **fit_options)
    if stars.size < 10:
        raise DegenerateMatrix(f"only {stars.size} of {replicates} bootstrap spectra could be fitted", "alpha_ci")
    return lognormal_pivot_interval(fit.alpha, stars, level)


def _cell(s: torch.Tensor, name: str, replicates: int, seed: int, fit_options: dict) -> tuple[float, float]:
    """The cell's interval with xmin chosen again (a fit with a finger fix has none: only the default fit is)."""
    if fit_options.get("fix_fingers"):
        raise DegenerateMatrix(f"fix_fingers={fit_options['fix_fingers']!r}: only the default fit is bootstrapped "
                               "(alpha_ci_lower / alpha_ci_upper, opt-in, hold this fit's xmin)", name)
    return cell_interval(s, name, replicates, seed, fit_options, alpha_interval_xmin)


def alpha_ci_xmin_lower(w, s: torch.Tensor, *, replicates: int = XMIN_REPLICATES, seed: int = 0,
                        **fit_options) -> float:
    """Lower end of alpha's 95 % interval with xmin chosen again in every replicate (module docstring)."""
    return _cell(s, "alpha_ci_xmin_lower", replicates, seed, fit_options)[0]


def alpha_ci_xmin_upper(w, s: torch.Tensor, *, replicates: int = XMIN_REPLICATES, seed: int = 0,
                        **fit_options) -> float:
    """Upper end of alpha's 95 % interval with xmin chosen again in every replicate (module docstring)."""
    return _cell(s, "alpha_ci_xmin_upper", replicates, seed, fit_options)[1]


for _name, _func, _end in (("alpha_ci_xmin_lower", alpha_ci_xmin_lower, "lower"),
                           ("alpha_ci_xmin_upper", alpha_ci_xmin_upper, "upper")):
    register_metric(
        _name, _func, long_name=f"alpha, 95 % interval, xmin chosen again ({_end} end)", units="1",
        description=(f"{_end} end of alpha's 95 % interval with xmin chosen again: {XMIN_REPLICATES} semi-parametric "
                     "bootstrap spectra (bulk below xmin resampled, tail drawn from the fitted power law), each "
                     "refitted by the default fit, the log of the ratio (alpha* - 1)/(alpha - 1) as the pivot, "
                     "normal approximation with a Student-t quantile; seeded from the spectrum; one whole fit per "
                     "replicate"),
        reference=CI_REFERENCE + "; Clauset, Shalizi & Newman (2009), section 4.1 (the semi-parametric bootstrap)",
        needs_singular_values=True, options={**CI_OPTIONS, "replicates": XMIN_REPLICATES},
    )
