r"""Whether a cell's metrics from float32-Gram eigenvalues are the float64 route's, within stated tolerances.

Given the served eigenvalues :math:`\hat\lambda_i` and a bound :math:`\delta`
with :math:`|\hat\lambda_i - \tilde\lambda_i| \le \delta` for every i
(:mod:`toolkit.metrics.eigen_bound`; :math:`\tilde\lambda_i` the float64
route's), :func:`certify` bounds each requested metric over every spectrum
within :math:`\delta` of the served one, by interval arithmetic on monotone
pieces (no linearisation), and says whether the bound is within the metric's
tolerance (:data:`TOLERANCES`). A metric it has no bound for, a fit option
beyond WeightWatcher's default, or a degenerate case fails the certificate
(the cell is then recomputed in float64: a certificate never guesses).

The power-law fit and its columns are certified by
:mod:`toolkit.metrics.certificate_fit` (the KS margin of the chosen xmin and
the interval of alpha).
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.metrics.certificate_fit import FitBounds
from toolkit.metrics.eigen_bound import U64, EigenvalueBound, gamma

#: Served-precision labels (the Dataset variable ``precision_served``).
FLOAT32, FLOAT64 = "float32", "float64"
ALPHA_TOL = 1e-3
REL_TOL = 1e-5
#: Squared norms (eigenvalues of WᵀW: xmin, xmax) follow from the norms' tolerance: (1 + 1e-5)^2 - 1.
SQUARED_TOL = (1.0 + REL_TOL) ** 2 - 1.0
_LOG_TOL = math.log10((1.0 + REL_TOL) ** 2)  # log10 of a squared norm: the norm within REL_TOL relative
#: Metric -> (kind, tolerance): "rel" relative to the float64 value, "abs" absolute, "abs_alpha" absolute
#: alpha's tolerance times max(1, |log10 lambda_max|) (alpha carried through that factor), "exact" equal.
TOLERANCES = {
    "spectral_norm": ("rel", REL_TOL), "stable_rank": ("rel", REL_TOL), "effective_rank": ("rel", REL_TOL),
    "condition_number": ("rel", REL_TOL), "spectral_entropy": ("rel", REL_TOL),
    "log_norm": ("abs", _LOG_TOL), "log_spectral_norm": ("abs", _LOG_TOL),
    "matrix_rank": ("exact", 0.0), "rank_loss": ("exact", 0.0), "num_pl_spikes": ("exact", 0.0),
    "alpha": ("abs", ALPHA_TOL), "alpha_sigma": ("abs", ALPHA_TOL), "alpha_ks_distance": ("abs", ALPHA_TOL),
    "alpha_xmin": ("rel", SQUARED_TOL), "alpha_xmax": ("rel", SQUARED_TOL),
    "alpha_weighted": ("abs_alpha", ALPHA_TOL), "log_alpha_norm": ("abs_alpha", ALPHA_TOL),
}
_FIT_METRICS = frozenset({"alpha", "alpha_sigma", "alpha_ks_distance", "alpha_xmin", "alpha_xmax", "num_pl_spikes",
                          "alpha_weighted", "log_alpha_norm"})
_RANK_METRICS = frozenset({"matrix_rank", "rank_loss", "condition_number", "spectral_entropy"})


def certify(metrics, lam: np.ndarray, bound: EigenvalueBound, shape: tuple[int, int]) -> str:
    r"""Why the float32-Gram spectrum ``lam`` may not serve ``metrics`` (``""``: it may).

    Parameters
    ----------
    metrics : sequence of toolkit.metrics.Metric
        Those that read the singular values (others are not checked).
    lam : numpy.ndarray, shape (k,), float64
        Served eigenvalues of :math:`W^\top W`, descending, :math:`\ge 0`.
    bound : EigenvalueBound
        :math:`\delta` and :math:`\|W\|_F^2` (:func:`~toolkit.metrics.eigen_bound.certified_spectrum`).
    shape : (int, int)
        The matrix shape.

    Returns
    -------
    str
        ``""`` when every metric is certified within its :data:`TOLERANCES`
        entry, else the first failure ("alpha: the KS choice of xmin may
        change (margin 2e-05 < 4e-05)").
    """
    if lam.size == 0 or not lam[0] > 0.0:
        return "no positive eigenvalue"
    ctx = _Context(lam, bound, shape)
    names = {m.name for m in metrics if m.needs_singular_values}
    for m in metrics:
        options = dict(m.options)
        if m.name in _FIT_METRICS and (options.get("fix_fingers") or options.get("xmax")):
            return f"{m.name}: fit options beyond the default are not certified"
    for name in sorted(names):
        if name not in TOLERANCES:
            return f"{name}: no error bound for this metric"
        why = ctx.check(name)
        if why:
            return f"{name}: {why}"
    return ""


class _Context:
    """The intervals of one spectrum, computed once and shared by the metrics' checks."""

    def __init__(self, lam: np.ndarray, bound: EigenvalueBound, shape: tuple[int, int]):
        self.lam, self.delta, self.bound = lam, bound.delta, bound
        self.k = lam.size
        self.big = max(shape)
        self.lo = np.maximum(lam - self.delta, 0.0)
        self.hi = lam + self.delta
        self._fit = None

    # ------------------------------------------------------------- helpers
    def check(self, name: str) -> str:
        kind, tol = TOLERANCES[name]
        got = getattr(self, "_" + name)()
        if isinstance(got, str):
            return got
        value, low, high = got
        if kind == "exact":
            return "" if low == high == value else "may differ"
        err = max(value - low, high - value)
        if kind == "rel":
            if not low > 0.0:
                return "not bounded away from 0"
            err /= low
        elif kind == "abs_alpha":
            tol *= max(1.0, abs(math.log10(self.lam[0])))
        err += 1e-12 * abs(value) if kind != "rel" else 1e-12  # the metric's own float64 arithmetic
        return "" if err <= tol else f"error bound {err:.2g} > {tol:.2g} ({kind})"

    def _sum_interval(self) -> tuple[float, float, float]:
        """Σλ served, and an interval holding the float64 route's Σλ (its trace relation to ||W||_F^2)."""
        total = float(self.lam.sum())
        slack = abs(total - self.bound.frobenius2) + self.bound.frobenius2_error \
            + self.k * self.bound.reference + 2 * gamma(self.k) * total
        return total, total - slack, total + slack

    def _ranks_resolved(self) -> str:
        floor = 4 * self.big * U64 * float(self.hi[0])  # the float64 route's zeroing floor on lambda, and more
        return "" if float(self.lo[-1]) > floor else "an eigenvalue within the bound of 0 (the rank may differ)"

    # ------------------------------------------------------------- norms and ranks
    def _spectral_norm(self):
        return math.sqrt(self.lam[0]), math.sqrt(self.lo[0]), math.sqrt(self.hi[0])

    def _log_spectral_norm(self):
        if not self.lo[0] > 0:
            return "lambda_max within the bound of 0"
        return math.log10(self.lam[0]), math.log10(self.lo[0]), math.log10(self.hi[0])

    def _log_norm(self):
        total, low, high = self._sum_interval()
        if not low > 0:
            return "||W||_F^2 within the bound of 0"
        return math.log10(total), math.log10(low), math.log10(high)

    def _stable_rank(self):
        total, low, high = self._sum_interval()
        return total / self.lam[0], low / self.hi[0], high / max(self.lo[0], 1e-300)

    def _effective_rank(self):
        h, h_lo, h_hi = _entropy_interval(np.sqrt(self.lam), np.sqrt(self.lo), np.sqrt(self.hi))
        return math.exp(h), math.exp(h_lo), math.exp(h_hi)

    def _matrix_rank(self):
        why = self._ranks_resolved()
        return why or (float(self.k), float(self.k), float(self.k))

    def _rank_loss(self):
        why = self._ranks_resolved()
        return why or (0.0, 0.0, 0.0)

    def _condition_number(self):
        why = self._ranks_resolved()
        if why:
            return why
        s = np.sqrt(self.lam[[0, -1]])
        return s[0] / s[1], math.sqrt(self.lo[0] / self.hi[-1]), math.sqrt(self.hi[0] / self.lo[-1])

    def _spectral_entropy(self):
        why = self._ranks_resolved()
        if why or self.k < 2:
            return why or "rank below 2"
        h, h_lo, h_hi = _entropy_interval(self.lam, self.lo, self.hi)
        r = math.log(self.k)
        return h / r, h_lo / r, h_hi / r

    # ------------------------------------------------------------- the power-law fit
    def fit(self):
        if self._fit is None:
            self._fit = FitBounds.of(self.lam, self.delta)
        return self._fit

    def _alpha(self):
        f = self.fit()
        return f if isinstance(f, str) else (f.alpha, f.alpha_lo, f.alpha_hi)

    def _alpha_sigma(self):
        f = self.fit()
        if isinstance(f, str):
            return f
        root = math.sqrt(f.n)
        return (f.alpha - 1) / root, (f.alpha_lo - 1) / root, (f.alpha_hi - 1) / root

    def _alpha_ks_distance(self):
        f = self.fit()
        return f if isinstance(f, str) else (f.d, f.d - f.slack, f.d + f.slack)

    def _alpha_xmin(self):
        f = self.fit()
        return f if isinstance(f, str) else (f.xmin, f.xmin - self.delta, f.xmin + self.delta)

    def _alpha_xmax(self):
        f = self.fit()
        top = self.lam[0]
        return f if isinstance(f, str) else (top, top - self.delta, top + self.delta)

    def _num_pl_spikes(self):
        f = self.fit()
        if isinstance(f, str):
            return f
        return float(f.spikes), float(f.spikes_lo), float(f.spikes_hi)

    def _alpha_weighted(self):
        f = self.fit()
        if isinstance(f, str):
            return f
        logs = [math.log10(self.lo[0]), math.log10(self.hi[0])]
        corners = [a * g for a in (f.alpha_lo, f.alpha_hi) for g in logs]
        return f.alpha * math.log10(self.lam[0]), min(corners), max(corners)

    def _log_alpha_norm(self):
        f = self.fit()
        if isinstance(f, str):
            return f
        with np.errstate(divide="ignore"):
            ln_lo, ln_hi, ln = np.log(self.lo), np.log(self.hi), np.log(self.lam)
        low = np.minimum(f.alpha_lo * ln_lo, f.alpha_hi * ln_lo)
        high = np.maximum(f.alpha_lo * ln_hi, f.alpha_hi * ln_hi)
        lg = math.log(10.0)
        return _logsumexp(f.alpha * ln) / lg, _logsumexp(low) / lg, _logsumexp(high) / lg


def _entropy_interval(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float, float]:
    r"""Shannon entropy :math:`H = -\sum p_i\ln p_i`, :math:`p = v/\sum v`, and an interval holding it for
    every vector with :math:`lo \le v \le hi` entrywise (:math:`H = \ln S - A/S`, :math:`S = \sum v_i`,
    :math:`A = \sum v_i \ln v_i`, bounded term by term; scale-free, so scaled by ``hi.max()`` first)."""
    scale = float(hi.max())
    v, lo, hi = v / scale, lo / scale, hi / scale

    def xlogx(t):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0)

    s, s_lo, s_hi = float(v.sum()), float(lo.sum()), float(hi.sum())
    if not s_lo > 0.0:
        return math.log(s) - float(xlogx(v).sum()) / s, -math.inf, math.inf
    a = float(xlogx(v).sum())
    a_hi = float(np.maximum(xlogx(lo), xlogx(hi)).sum())  # t ln t is convex: its max on [lo, hi] at an end
    a_lo = float(xlogx(np.clip(1.0 / math.e, lo, hi)).sum())  # its min: at 1/e, clipped to [lo, hi]
    ratios = [a_lo / s_lo, a_lo / s_hi, a_hi / s_lo, a_hi / s_hi]
    h = math.log(s) - a / s
    slack = 8 * gamma(v.size) * (abs(math.log(s)) + abs(a) / s + 1.0)
    return h, math.log(s_lo) - max(ratios) - slack, math.log(s_hi) - min(ratios) + slack


def _logsumexp(z: np.ndarray) -> float:
    top = float(np.max(z))
    if not math.isfinite(top):
        return top
    return top + math.log(float(np.sum(np.exp(z - top))))
