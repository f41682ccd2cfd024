r"""The truncated power law of the ESD tail: ``alpha_tpl`` and ``tpl_lambda`` (opt-in).

The tail :math:`\lambda \ge x_{min}` of the eigenvalues of :math:`W^\top W`
(``x_min`` from the power-law fit, :func:`~toolkit.metrics.powerlaw.spectrum_fit`,
with the same options) is fitted by maximum likelihood to the truncated
power law of Clauset, Shalizi & Newman (2009, Table 1)

.. math::
    p(x) = \frac{x^{-\alpha} e^{-\lambda x}}{Z(\alpha, \lambda)}, \quad x \ge x_{min},
    \qquad Z = x_{min}^{1-\alpha} E_\alpha(\lambda x_{min}),

:math:`E_\alpha(z) = \int_1^\infty t^{-\alpha} e^{-z t}\,dt` (the generalised
exponential integral, :math:`= z^{\alpha-1}\Gamma(1-\alpha, z)`), with
:math:`\alpha \ge 0`, :math:`\lambda \ge 0` (:math:`\lambda = 0` is the plain power law,
which needs :math:`\alpha > 1`). With :math:`y = x / x_{min}` and :math:`\beta = \lambda x_{min}`
the log-likelihood is
:math:`\ell = -\alpha \sum \ln y_i - \beta \sum y_i - n \ln E_\alpha(\beta)`;
at its maximum the model's means of :math:`\ln y` and :math:`y` equal the sample's
(the score equations). WeightWatcher's ``fit="TPL"`` (through the ``powerlaw``
package) chooses xmin by the KS distance of the truncated fit itself; here
xmin is the power law's, so a TPL and a PL fit of one cell share their tail.

Both metrics share one fit per matrix (memoised per singular-value tensor and
options). Opt-in: name them in ``metrics=``.

References
----------
Clauset, A., Shalizi, C. R. & Newman, M. E. J. (2009). Power-law distributions
in empirical data. *SIAM Review* 51(4), 661-703, Table 1 and sec. 3.
Martin, C. H. & Mahoney, M. W. (2021). *JMLR* 22(165) (truncated power laws of ESDs).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from toolkit.metrics.marchenko_pastur import register_opt_in
from toolkit.metrics.powerlaw import FIT_METRIC_OPTIONS, spectrum_fit
from toolkit.metrics.registry import DegenerateMatrix
from toolkit.metrics.tensor_memo import TensorMemo

ALPHA_BOUNDS = (0.0, 30.0)  # alpha >= 0 (the powerlaw package's lower bound); at 30 the fit is refused
BETA_MAX = 1e4  # lambda * xmin beyond this: the tail is one point's worth of an exponential
LOG_BETA_MIN = -30.0  # lambda * xmin below e^-30: the plain power law


class TPLFit(NamedTuple):
    """Result of :func:`fit_truncated_power_law`.

    Attributes
    ----------
    alpha : float
        Exponent :math:`\\alpha` [WeightWatcher's ``alpha`` with ``fit="TPL"``].
    lam : float
        Exponential cut-off rate :math:`\\lambda` (1 / units of the eigenvalues) [``Lambda``].
    xmin : float
        Start of the tail.
    loglik : float
        Maximised log-likelihood of the tail (natural log, density in the eigenvalues' units).
    n : int
        Eigenvalues in the tail.
    """

    alpha: float
    lam: float
    xmin: float
    loglik: float
    n: int


def tail_moments(alpha: float, beta: float) -> tuple[float, float, float]:
    r"""``(ln E, <ln t>, <t>)`` of the density :math:`t^{-\alpha} e^{-\beta t} / E_\alpha(\beta)` on :math:`t \ge 1`.

    :math:`E_\alpha(\beta) = \int_1^\infty t^{-\alpha} e^{-\beta t} dt`, :math:`\beta > 0`, by
    ``scipy.integrate.quad`` of :math:`(1+u)^{-\alpha} e^{-\beta u}` on :math:`u \ge 0` (times
    :math:`e^{-\beta}`); the two means are the gradient of :math:`\ln E` (minus it).
    """
    import warnings

    from scipy import integrate

    def integral(g) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", integrate.IntegrationWarning)
            return integrate.quad(lambda u: g(u) * math.exp(-alpha * math.log1p(u) - beta * u), 0.0, math.inf,
                                  epsabs=0.0, epsrel=1e-11, limit=400)[0]

    i0 = integral(lambda u: 1.0)
    if not (i0 > 0 and math.isfinite(i0)):
        return math.inf, math.nan, math.nan
    return -beta + math.log(i0), integral(math.log1p) / i0, integral(lambda u: 1.0 + u) / i0


def fit_truncated_power_law(tail) -> TPLFit:
    r"""Maximum-likelihood truncated power law of ``tail`` (all of it, from its smallest value up).

    Parameters
    ----------
    tail : array-like, 1-D
        The tail eigenvalues :math:`\lambda \ge x_{min} > 0`; ``x_min`` is their minimum.

    Returns
    -------
    TPLFit

    Raises
    ------
    DegenerateMatrix
        Fewer than 2 distinct values, or a likelihood maximal at the edge of the search
        (:math:`\alpha` at the upper end of :data:`ALPHA_BOUNDS`: the tail is not a truncated power law).

    Notes
    -----
    The model is an exponential family in :math:`(\alpha, \beta)` with statistics
    :math:`(-\ln y, -y)`, so the mean negative log-likelihood
    :math:`\alpha \overline{\ln y} + \beta \bar y + \ln E_\alpha(\beta)` is convex, with
    gradient :math:`(\overline{\ln y} - \langle \ln t\rangle, \bar y - \langle t\rangle)`
    (:func:`tail_moments`). L-BFGS-B with that gradient, on :math:`(\alpha, \ln\beta)`,
    :math:`\alpha \in [0, 30]` (:math:`\alpha \ge 0` and :math:`\lambda \ge 0`, the
    ``powerlaw`` package's bounds: at :math:`\alpha = 0` the tail is a plain exponential),
    :math:`\ln\beta \in [-30, \ln 10^4]` (:math:`\beta \to 0` is the plain power law),
    from the power law's MLE.
    """
    from scipy import optimize

    x = np.sort(np.asarray(tail, dtype=np.float64).ravel())
    if x.size < 2 or not x[0] > 0 or x[-1] == x[0]:
        raise DegenerateMatrix(f"truncated power law: {x.size} tail eigenvalues with {np.unique(x).size} distinct "
                               "values (needs at least 2)", "alpha_tpl")
    xmin, n = float(x[0]), x.size
    y = x / xmin
    s1, s2 = float(np.log(y).mean()), float(y.mean())

    def nll(p):  # minus the mean log-likelihood in y (the constant ln xmin dropped), and its gradient
        a, b = float(p[0]), math.exp(float(p[1]))
        log_e, mean_log, mean_t = tail_moments(a, b)
        if not math.isfinite(log_e):
            return 1e300, np.zeros(2)
        return a * s1 + b * s2 + log_e, np.array([s1 - mean_log, (s2 - mean_t) * b])

    a0 = min(max(1.0 + 1.0 / s1, 1.01), ALPHA_BOUNDS[1] - 1.0)
    best = optimize.minimize(nll, np.array([a0, math.log(min(0.1 / s2, BETA_MAX))]), jac=True, method="L-BFGS-B",
                             bounds=[ALPHA_BOUNDS, (LOG_BETA_MIN, math.log(BETA_MAX))],
                             options={"ftol": 1e-15, "gtol": 1e-9, "maxiter": 500})
    a, b = float(best.x[0]), math.exp(float(best.x[1]))
    if not best.fun < 1e299 or abs(a - ALPHA_BOUNDS[1]) < 1e-6:
        raise DegenerateMatrix(f"truncated power law: the likelihood of the {n} tail eigenvalues is maximal at the "
                               f"search bound alpha = {a:.3g} (not a truncated power law)", "alpha_tpl")
    return TPLFit(a, b / xmin, xmin, float(-n * best.fun - n * math.log(xmin)), n)


_FITS = TensorMemo()


def tpl_fit(s: torch.Tensor, **fit_options) -> TPLFit:
    """The truncated fit of the tail of :math:`\\lambda_i = \\sigma_i^2` from the power-law fit's xmin
    (up to its xmax), once per singular-value tensor and options."""

    def compute() -> TPLFit:
        pl = spectrum_fit(s, **fit_options)
        lam = s.detach().to("cpu", torch.float64).numpy() ** 2
        return fit_truncated_power_law(lam[(lam >= pl.xmin) & (lam <= pl.xmax)])

    return _FITS.get(s, ("tpl", *sorted(fit_options.items(), key=lambda kv: kv[0])), compute)


def alpha_tpl(w, s, **fit_options) -> float:
    r"""Exponent :math:`\alpha` of the truncated power law :math:`x^{-\alpha} e^{-\lambda x}` of the ESD tail.

    Raises
    ------
    DegenerateMatrix
        Where the power-law fit is undefined, or the tail has fewer than 2 distinct values.
    """
    try:
        return tpl_fit(s, **fit_options).alpha
    except DegenerateMatrix as e:
        raise DegenerateMatrix(e.reason, "alpha_tpl") from None


def tpl_lambda(w, s, **fit_options) -> float:
    r"""Cut-off rate :math:`\lambda` of the truncated power law of the ESD tail (1 / eigenvalue units).

    Raises
    ------
    DegenerateMatrix
        As :func:`alpha_tpl`.
    """
    try:
        return tpl_fit(s, **fit_options).lam
    except DegenerateMatrix as e:
        raise DegenerateMatrix(e.reason, "tpl_lambda") from None


_REF = ("Clauset, Shalizi & Newman (2009) SIAM Rev. 51(4), Table 1; Martin & Mahoney (2021) JMLR 22(165); "
        "WeightWatcher 0.7.7 analyze(fit='TPL') column ")
_DESC = ("MLE of p(x) = x^-alpha exp(-lambda x) / Z on the tail lambda_i = sigma_i^2 >= xmin of the power-law fit "
         "(same options), Z = xmin^(1-alpha) E_alpha(lambda xmin), lambda >= 0")

TPL_METRICS = [
    dict(name="alpha_tpl", func=alpha_tpl, long_name="truncated power-law exponent", description="alpha of " + _DESC,
         reference=_REF + "alpha", options=dict(FIT_METRIC_OPTIONS)),
    dict(name="tpl_lambda", func=tpl_lambda, long_name="truncated power-law cut-off rate",
         description="lambda of " + _DESC + "; in 1 / units of the eigenvalues", reference=_REF + "Lambda",
         options=dict(FIT_METRIC_OPTIONS)),
]

register_opt_in(TPL_METRICS)
