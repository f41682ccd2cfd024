r"""The certificate of the power-law fit: the chosen xmin stays the KS argmin, and alpha's interval.

Served eigenvalues :math:`\hat\lambda_i`, and :math:`\delta` with
:math:`|\hat\lambda_i - \tilde\lambda_i| \le \delta` for the float64 route's
:math:`\tilde\lambda_i` (sorted, :mod:`toolkit.metrics.eigen_bound`). The fit
is WeightWatcher's default (:mod:`toolkit.metrics.powerlaw`; Clauset, Shalizi
& Newman 2009, *SIAM Review* 51(4), eqs. (3.7) and (3.9)): every kept
eigenvalue but the largest is a candidate xmin, identified here by its tail
size :math:`n` (the top :math:`n` eigenvalues), which is the same in both
routes whatever the threshold keeps.

- *Kept set.* The float64 route keeps :math:`\tilde\lambda > 10^{-5}`; its
  candidates are among those of :math:`\hat\lambda > 10^{-5} - \delta` (the
  served ones and the few "maybe" ones within :math:`\delta` below the
  threshold), and each of its kept eigenvalues is above the threshold, so
  :math:`\tilde x \in [\max(\hat x - \delta, 10^{-5}), \hat x + \delta]`.
- *Alpha.* For candidate :math:`j` (bottom :math:`x_j`, tail size :math:`n_j`),
  :math:`S_j = \sum_{l>j}\ln(x_l/x_j)` lies in
  :math:`[\sum_{l>j}\ln(\hat x_l - \delta) - (n_j-1)\ln(\hat x_j+\delta),\;
  \sum_{l>j}\ln(\hat x_l + \delta) - (n_j-1)\ln(\hat x_j-\delta)]` (each term
  is monotone in each eigenvalue), so :math:`\alpha_j = 1 + n_j/S_j` lies in
  :math:`[\alpha^-_j, \alpha^+_j]` (eq. 3.7), widened by the float64 rounding
  of the sums (:math:`4\gamma_N` of the magnitudes summed).
- *KS distances, near the served value.* Every term
  :math:`F_j(r) = 1 - r^{1-\alpha_j}`, :math:`r = x_{j+t}/x_j \ge 1`, moves by
  at most :math:`s_j = 1 - e^{-(\alpha^+_j - 1)\rho_j} + \Delta\alpha_j/(e(\alpha^-_j - 1))`,
  :math:`\rho_j = \ln\frac{\hat x_j+\delta}{\hat x_j-\delta}`
  (:math:`|\partial F/\partial\ln r| = (\alpha-1)r^{1-\alpha} \le \alpha - 1` and
  :math:`|\ln r_{new} - \ln r| \le \rho_j`; :math:`|\partial F/\partial\alpha| = \ln r\,r^{1-\alpha} \le
  1/(e(\alpha-1))`), and :math:`t/n_j` does not move, so
  :math:`|\tilde D_j - \hat D_j| \le s_j` (eq. 3.9).
- *KS distances, by intervals.* :math:`F` increases with :math:`r` and with
  :math:`\alpha` (:math:`r \ge 1`, :math:`\alpha > 1`), so on 65 sampled
  offsets :math:`t` each term lies in
  :math:`[F(r^-, \alpha^-), F(r^+, \alpha^+)]` and
  :math:`\tilde D_j \ge \max_t \mathrm{dist}(t/n_j, [F^-, F^+])`: the bound for
  candidates far below xmin, whose :math:`s_j` is useless.
- *The KS margin.* The float64 route picks the served xmin (index :math:`i`)
  when every other candidate's lower bound exceeds :math:`\hat D_i + s_i`;
  then :math:`|\tilde\alpha - \hat\alpha| \le \max(\hat\alpha - \alpha^-_i, \alpha^+_i - \hat\alpha)`,
  :math:`|\tilde D - \hat D| \le s_i`, and ``num_pl_spikes`` is the same when
  :math:`\hat x_{i-1} + \delta < \hat x_i - \delta`.
WeightWatcher's small-N fit (fewer than 20 kept eigenvalues) is not certified.
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.metrics.eigen_bound import U64, gamma
from toolkit.metrics.power_law_tail import BLOCK_ELEMENTS, EVALS_THRESHOLD

__all__ = ["FitBounds", "alpha_intervals", "ks_lower_bounds", "ks_slack"]

_SMALL_N = 20  # toolkit.metrics.powerlaw.SMALL_N
_SAMPLES = 64


class FitBounds:
    """The served fit at its xmin and the intervals holding the float64 route's (:meth:`of`).

    Attributes
    ----------
    alpha, alpha_lo, alpha_hi : float
        Served alpha and the interval holding the float64 route's.
    d, slack : float
        Served KS distance; the float64 route's is within ``slack`` of it.
    xmin : float
    n : int
        Tail size.
    spikes, spikes_lo, spikes_hi : int
        Served ``num_pl_spikes`` and the range of the float64 route's (-1: unknown).
    """

    __slots__ = ("alpha", "alpha_lo", "alpha_hi", "d", "slack", "xmin", "n", "spikes", "spikes_lo", "spikes_hi")

    @classmethod
    def of(cls, lam: np.ndarray, delta: float):
        """The bounds of the default fit of ``lam`` (any order), or why there are none (a str)."""
        from toolkit.metrics.powerlaw import fit_with_scores
        from toolkit.metrics.registry import DegenerateMatrix

        x_all = np.sort(lam[lam > EVALS_THRESHOLD - delta])  # every candidate the float64 route may have
        x = x_all[x_all > EVALS_THRESHOLD]  # the served ones
        extra = x_all.size - x.size
        if x_all.size < _SMALL_N or x.size < _SMALL_N:
            return f"{x.size} eigenvalues above the threshold: the small-N fit is not certified"
        try:
            fit, scores = fit_with_scores(x)
        except DegenerateMatrix as e:
            return e.reason
        a_lo, a_hi = alpha_intervals(x_all, delta)
        a_lo[extra:] = np.minimum(a_lo[extra:], scores.alpha)
        a_hi[extra:] = np.maximum(a_hi[extra:], scores.alpha)
        lower = ks_lower_bounds(x_all, delta, a_lo, a_hi)
        slack = ks_slack(x, delta, scores.alpha, a_lo[extra:], a_hi[extra:])
        lower[extra:] = np.maximum(lower[extra:], scores.d_lower - slack)
        i = scores.index
        top = fit.ks_distance + slack[i]
        others = np.delete(lower, extra + i)
        if others.size and not float(others.min()) > top:
            return (f"the KS choice of xmin may change (another candidate's D may be as low as "
                    f"{float(others.min()):.4g}, the chosen one's as high as {top:.4g})")
        out = cls()
        out.alpha, out.alpha_lo, out.alpha_hi = fit.alpha, float(a_lo[extra + i]), float(a_hi[extra + i])
        out.d, out.slack, out.xmin, out.n = fit.ks_distance, float(slack[i]), fit.xmin, fit.num_tail
        out.spikes = fit.num_pl_spikes
        below = x_all[extra + i - 1] if extra + i > 0 else -math.inf
        out.spikes_lo = out.spikes_hi = fit.num_tail if below + delta < x[i] - delta else -1
        return out


def alpha_intervals(x: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Every candidate's :math:`[\alpha^-_j, \alpha^+_j]` (module docstring) over spectra within ``delta``
    of ``x`` (ascending, shape (N,)): two arrays of shape (N - 1,)."""
    n = np.arange(x.size, 1, -1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ln_lo = np.log(np.maximum(x - delta, EVALS_THRESHOLD))  # a kept eigenvalue is above the threshold
        ln_hi = np.log(x + delta)
        above_hi = np.cumsum(ln_hi[::-1])[::-1][1:]  # sum_{l > j} ln(x_l + delta)
        above_lo = np.cumsum(ln_lo[::-1])[::-1][1:]
        s_hi = above_hi - (n - 1) * ln_lo[:-1]
        s_lo = above_lo - (n - 1) * ln_hi[:-1]
        big = np.maximum(np.abs(ln_lo), np.abs(ln_hi))
        magnitude = np.cumsum(big[::-1])[::-1][1:] + (n - 1) * big[:-1]
    rounding = 4 * gamma(x.size) * magnitude
    s_hi = s_hi + rounding
    s_lo = np.nan_to_num(s_lo - rounding, nan=0.0, neginf=0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_lo = np.where(np.isfinite(s_hi), 1.0 + n / s_hi, 1.0)
        a_hi = np.where(s_lo > 0, 1.0 + n / np.where(s_lo > 0, s_lo, 1.0), np.inf)
    return a_lo, a_hi


def ks_slack(x: np.ndarray, delta: float, alpha: np.ndarray, a_lo: np.ndarray, a_hi: np.ndarray) -> np.ndarray:
    r"""Every served candidate's :math:`s_j \ge |\tilde D_j - \hat D_j|` (module docstring), at most 1."""
    c = x[:-1]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        rho = np.log((c + delta) / np.maximum(c - delta, EVALS_THRESHOLD))
        move_r = -np.expm1(-(a_hi - 1.0) * rho)
        move_a = np.maximum(a_hi - alpha, alpha - a_lo) / (math.e * (a_lo - 1.0))
        rounding = 16 * U64 * (1.0 + alpha * np.log(x[-1] / c))
        s = move_r + move_a + rounding
    s[~np.isfinite(s) | (a_lo <= 1.0)] = 1.0
    return np.minimum(s, 1.0)


def ks_lower_bounds(x: np.ndarray, delta: float, a_lo: np.ndarray, a_hi: np.ndarray) -> np.ndarray:
    r"""A lower bound on every candidate's :math:`\tilde D_j` by intervals on 65 sampled offsets (module
    docstring); ``x`` ascending, shape (N,); returns shape (N - 1,)."""
    N = x.size
    n = np.arange(N, 1, -1, dtype=np.float64)
    out = np.zeros(N - 1)
    grid = np.linspace(0.0, 1.0, _SAMPLES + 1)
    rows = max(1, BLOCK_ELEMENTS // (_SAMPLES + 1))
    for a in range(0, N - 1, rows):
        j = np.arange(a, min(a + rows, N - 1))
        t = (grid[None, :] * (n[j, None] - 1.0)).astype(np.int64)
        top = x[j[:, None] + t]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            r_lo = np.maximum(1.0, (top - delta) / (x[j, None] + delta))
            r_hi = (top + delta) / np.maximum(x[j, None] - delta, EVALS_THRESHOLD)
            f_lo = -np.expm1((1.0 - np.maximum(a_lo[j, None], 1.0)) * np.log(r_lo))
            f_hi = -np.expm1((1.0 - a_hi[j, None]) * np.log(r_hi))
        f_lo = np.nan_to_num(f_lo, nan=0.0)
        f_hi = np.nan_to_num(f_hi, nan=1.0)
        f_hi[t == 0] = 0.0  # r = 1 exactly at the tail's own bottom
        f_lo[t == 0] = 0.0
        emp = t / n[j, None]
        gap = np.maximum(np.maximum(f_lo - emp, emp - f_hi), 0.0)
        out[j] = gap.max(axis=1)
    return np.maximum(out - 16 * U64, 0.0)

