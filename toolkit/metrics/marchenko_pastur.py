r"""Marchenko-Pastur (MP) fit of the bulk of a spectrum: ``mp_softrank``, ``mp_num_spikes``, ``mp_bulk_max``.

Follows WeightWatcher 0.7.7's ``analyze(mp_fit=True)`` (``mp_fit``,
``fit_density_with_range``, ``resid_mp`` there), from its documented
procedure:

1. :math:`\lambda_i = \sigma_i^2`, all :math:`M = \min(m, n)` of them,
   rescaled to mean 1: :math:`\tilde\lambda_i = \lambda_i M / \sum_j \lambda_j`;
   aspect ratio :math:`Q = N / M`, :math:`N = \max(m, n)`.
2. The empirical density: a kernel density estimate with the linear
   (triangular) kernel of bandwidth 0.1, :math:`\hat\rho(x) = \frac{1}{Mh}\sum_i
   \max(0, 1 - |x - \tilde\lambda_i|/h)`, on 1000 equally spaced points of
   :math:`[0, \max\tilde\lambda + 0.5]`; points where :math:`\hat\rho < 0.01`
   are left out of the residual.
3. :math:`\sigma` minimises :math:`\sum_x (\rho_{MP}(x; Q, \sigma) - \hat\rho(x))^2`,
   with :math:`\rho_{MP}(x) = \sqrt{(b - x)(x - a)} / (2\pi\sigma^2 x / Q)`,
   :math:`a, b = \sigma^2 (1 \mp Q^{-1/2})^2`; a :math:`\sigma` whose bulk edge
   :math:`b` lies left of the density's peak or beyond the last point kept,
   or whose :math:`a` lies right of the peak, scores a residual of 1000 at
   every point (the peak: the first grid point of maximal density, maxima
   within 1e-12 relative counting as tied; the estimate has flat stretches,
   and WeightWatcher's pick among tied points falls to rounding, the one
   source of disagreement seen: 1 matrix in 210 of SmolLM2-135M).
   The search is ``scipy.optimize.brute`` on the grid
   :math:`\sigma \in [0.05 s_0, 2 s_0)` in steps of :math:`0.01 s_0`,
   :math:`s_0 = \sqrt{\max\tilde\lambda}/(1 + Q^{-1/2})`, polished by its
   default Nelder-Mead finish (``scipy.optimize.fmin``). For a square
   matrix (:math:`Q = 1`) the fit is of the singular values
   :math:`\sqrt{\tilde\lambda}` to WeightWatcher's quarter-circle density
   :math:`\sqrt{4 - x^2}/(\pi\sigma^2)`.
4. Bulk edge :math:`\lambda_+ = \sigma^2 (1 + Q^{-1/2})^2`; Tracy-Widom margin
   :math:`\lambda_+ + \sqrt{Q^{-1/2} \lambda_+^{2/3} M^{-2/3}}`;
   ``mp_num_spikes`` = eigenvalues beyond it; ``mp_softrank`` =
   :math:`\lambda_+ / \tilde\lambda_{max}`; ``mp_bulk_max`` = :math:`\lambda_+`
   back in the units of :math:`\lambda` (divided by :math:`M/\sum\lambda`).

The fit is memoised per singular-value tensor, so the three metrics cost one
fit. The KDE is computed once per fit (WeightWatcher recomputes it at every
trial :math:`\sigma`, the bulk of its cost); the objective is the same function.

These are opt-in metrics: ``weight_stats(metrics=None)`` does not compute
them; name them in ``metrics``.

References
----------
Marchenko, V. A. & Pastur, L. A. (1967). Distribution of eigenvalues for some
sets of random matrices. *Math. USSR-Sbornik* 1(4), 457-483.
Martin, C. H. & Mahoney, M. W. (2021). *JMLR* 22(165), sec. 4-5 (MP soft rank,
bulk edge, spikes). Tracy, C. A. & Widom, H. (1994). *Commun. Math. Phys.* 159, 151-174.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
import torch

from toolkit.metrics.registry import DegenerateMatrix, register_metric
from toolkit.metrics.tensor_memo import TensorMemo

BANDWIDTH = 0.1  # WeightWatcher mp_fit: bw
DENSITY_FLOOR = 0.01  # resid_mp: THRESH
GRID_POINTS = 1000  # resid_mp: xde
PENALTY = 1000.0  # resid_mp: residual of an inadmissible sigma
PEAK_TIE = 1e-12  # densities this close (relative) to the maximum tie for the peak
_MAX_BLOCK = 1 << 21  # elements of one block of the KDE


class MPFit(NamedTuple):
    """Result of :func:`fit_marchenko_pastur`.

    Attributes
    ----------
    sigma : float
        Fitted scale of the rescaled spectrum (mean eigenvalue 1).
    bulk_max : float
        Bulk edge :math:`\\lambda_+`, in the units of the input eigenvalues.
    softrank : float
        :math:`\\lambda_+ / \\lambda_{max}` (scale-free).
    num_spikes : int
        Eigenvalues beyond the bulk edge plus the Tracy-Widom margin.
    """

    sigma: float
    bulk_max: float
    softrank: float
    num_spikes: int


def linear_kde(data: np.ndarray, points: np.ndarray, bandwidth: float) -> np.ndarray:
    r"""Kernel density estimate with the linear kernel, :math:`\frac{1}{nh}\sum_i \max(0, 1 - |x - d_i|/h)`.

    The density of ``sklearn.neighbors.KernelDensity(kernel="linear", bandwidth=h)``
    (WeightWatcher's estimator), to rounding, computed directly in blocks.
    """
    data = np.asarray(data, dtype=np.float64).ravel()
    points = np.asarray(points, dtype=np.float64).ravel()
    out = np.empty(points.size)
    rows = max(1, _MAX_BLOCK // max(1, data.size))
    for a in range(0, points.size, rows):
        d = np.abs(points[a : a + rows, None] - data[None, :])
        np.subtract(1.0, d / bandwidth, out=d)
        np.maximum(d, 0.0, out=d)
        out[a : a + rows] = d.sum(axis=1)
    return out / (data.size * bandwidth)


def _mp_density(x: np.ndarray, q: float, sigma) -> tuple[np.ndarray, float, float]:
    """Marchenko-Pastur density of ratio ``q`` and scale ``sigma`` at ``x`` (0 outside the bulk)."""
    lo = (sigma * (1.0 - 1.0 / math.sqrt(q))) ** 2
    hi = (sigma * (1.0 + 1.0 / math.sqrt(q))) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.nan_to_num(np.sqrt((hi - x) * (x - lo)) / (2.0 * np.pi * sigma * sigma * x / q))
    return rho, lo, hi


def _quarter_circle(x: np.ndarray, sigma) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(np.sqrt(4.0 - x * x) / (np.pi * sigma * sigma))


def fit_marchenko_pastur(eigenvalues, n_rows: int, n_cols: int) -> MPFit:
    r"""Marchenko-Pastur fit of the bulk of the eigenvalues of :math:`W^\top W` (see the module docstring).

    Parameters
    ----------
    eigenvalues : array-like, 1-D
        :math:`\lambda_i \ge 0`, all of them (zeros included), any order. Several
        independent spectra of the same shape may be concatenated (the
        shuffled-matrix replicas of ``rand_num_spikes``).
    n_rows, n_cols : int
        Shape of the matrix: :math:`Q = \max/\min`, and :math:`M = \min` in the
        Tracy-Widom margin.

    Returns
    -------
    MPFit

    Raises
    ------
    DegenerateMatrix
        No positive eigenvalue, or a spectrum whose density never reaches the floor.
    """
    from scipy import optimize

    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64).ravel())
    big, small = max(n_rows, n_cols), min(n_rows, n_cols)
    total = float(lam.sum()) if lam.size else 0.0
    if not total > 0.0:
        raise DegenerateMatrix("all-zero matrix: no bulk to fit")
    q = big / small
    wscale = math.sqrt(lam.size) / math.sqrt(total)  # rescale to mean eigenvalue 1 (WeightWatcher's W_scale)
    scale2 = wscale * wscale
    x = scale2 * lam
    top = float(x[-1])
    data = np.sqrt(x) if q == 1.0 else x
    grid = np.linspace(0.0, float(data.max()) + 0.5, GRID_POINTS)
    dens = linear_kde(data, grid, BANDWIDTH)
    keep = dens > DENSITY_FLOOR
    if not keep.any():
        raise DegenerateMatrix("Marchenko-Pastur fit: the spectral density never reaches 0.01")
    xs, ys = grid[keep], dens[keep]
    # The first grid point of maximal density. The linear kernel's estimate has flat stretches, so the
    # maximum is often reached at two neighbouring points in exact arithmetic: the first is taken, where
    # WeightWatcher's choice among them falls to the rounding of its KDE.
    peak = float(xs[np.flatnonzero(ys >= ys.max() * (1.0 - PEAK_TIE))[0]])
    last = float(xs[-1])

    def objective(p, *_):
        sigma = p
        if q == 1.0:
            r = _quarter_circle(xs, sigma) - ys
        else:
            rho, lo, hi = _mp_density(xs, q, sigma)
            if np.any((hi < peak) | (hi > last) | (lo > peak)):
                return PENALTY * PENALTY * xs.size
            r = rho - ys
        return float(np.sum(r * r))

    s0 = math.sqrt(top / (1.0 + 1.0 / math.sqrt(q)) ** 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        found = optimize.brute(objective, (slice(0.05 * s0, 2.0 * s0, 0.01 * s0),), full_output=True)
    sigma = float(np.ravel(found[0])[0])
    edge = (sigma * (1.0 + 1.0 / math.sqrt(q))) ** 2
    margin = math.sqrt(edge ** (2.0 / 3.0) * small ** (-2.0 / 3.0) / math.sqrt(q))
    spikes = int(np.count_nonzero(x > edge + margin))
    return MPFit(sigma, edge / scale2, edge / top, spikes)


_FITS = TensorMemo()


def shared_mp_fit(w, s: torch.Tensor) -> MPFit:
    """:func:`fit_marchenko_pastur` of a cell's shared singular values, once per tensor."""
    if s is None or s.numel() == 0:
        raise DegenerateMatrix("no singular values")
    n_rows, n_cols = (int(w.shape[0]), int(w.shape[1])) if w is not None and w.ndim == 2 else (s.numel(), s.numel())

    def compute() -> MPFit:
        sv = s.detach().to("cpu", torch.float64).numpy()
        return fit_marchenko_pastur(sv * sv, n_rows, n_cols)

    return _FITS.get(s, ("mp", n_rows, n_cols), compute)


def mp_softrank(w, s) -> float:
    r"""MP soft rank :math:`\lambda_+ / \lambda_{max}`: bulk edge of the fitted Marchenko-Pastur
    law over the largest eigenvalue (WeightWatcher's ``mp_softrank``; near 1 for a random matrix,
    small when a few large eigenvalues stand far out of the bulk).

    Raises
    ------
    DegenerateMatrix
        All-zero matrix.
    """
    return shared_mp_fit(w, s).softrank


def mp_num_spikes(w, s) -> float:
    r"""Eigenvalues beyond the fitted MP bulk edge plus its Tracy-Widom margin
    (WeightWatcher's ``num_spikes``).

    Raises
    ------
    DegenerateMatrix
        All-zero matrix.
    """
    return float(shared_mp_fit(w, s).num_spikes)


def mp_bulk_max(w, s) -> float:
    r"""Bulk edge :math:`\lambda_+ = \sigma^2(1 + Q^{-1/2})^2` of the fitted MP law, in the units of
    the eigenvalues of :math:`W^\top W` (WeightWatcher's ``bulk_max``).

    Raises
    ------
    DegenerateMatrix
        All-zero matrix.
    """
    return shared_mp_fit(w, s).bulk_max


_REF = ("Marchenko & Pastur (1967) Math. USSR-Sb. 1(4); Martin & Mahoney (2021) JMLR 22(165); "
        "WeightWatcher 0.7.7 analyze(mp_fit=True) column ")
_HOW = ("MP fit of lambda_i = sigma_i^2 rescaled to mean 1: linear-kernel KDE (bandwidth 0.1, 1000 points), "
        "sigma by least squares (scipy brute grid 0.05-2 s0 + fmin), Q = max(m,n)/min(m,n)")

MP_METRICS = [
    dict(name="mp_softrank", func=mp_softrank, long_name="MP soft rank",
         description=f"mp_softrank = lambda_+ / lambda_max, lambda_+ = sigma^2 (1 + Q^-1/2)^2 ({_HOW})",
         reference=_REF + "mp_softrank"),
    dict(name="mp_num_spikes", func=mp_num_spikes, long_name="eigenvalues beyond the MP bulk",
         description=f"mp_num_spikes = #{{i : lambda_i > lambda_+ + sqrt(Q^-1/2 lambda_+^(2/3) M^(-2/3))}} "
                     f"(Tracy-Widom margin; {_HOW})",
         reference=_REF + "num_spikes"),
    dict(name="mp_bulk_max", func=mp_bulk_max, long_name="MP bulk edge",
         description=f"mp_bulk_max = lambda_+ = sigma^2 (1 + Q^-1/2)^2 in units of lambda ({_HOW})",
         reference=_REF + "bulk_max"),
]


def register_opt_in(specs: list[dict]) -> None:
    """Register ``specs`` (keyword dicts of ``register_metric``) as opt-in spectral weight metrics,
    computed only when named in ``metrics=`` (``register_metric(..., opt_in=True)``)."""
    for spec in specs:
        register_metric(**{"units": "1", "needs_singular_values": True, **spec}, opt_in=True)


register_opt_in(MP_METRICS)
