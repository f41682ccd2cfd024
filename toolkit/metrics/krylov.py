r"""Randomized block Krylov for the top-k eigenvectors of a Gram operator, with a certificate of what it has not seen.

The fast route of :func:`toolkit.metrics.subspace.top_left`. On the smaller
Gram operator :math:`A` of ``W`` (:math:`W^\top W` or :math:`WW^\top`, applied
as :math:`\sum_i W_i^\top (W_i X)` over float64 blocks of ``W``: one read of
``W`` per application, no float64 copy of it), a start block of
``b = k + oversampling`` columns spans the Krylov space
:math:`\mathcal{K}_q = [Q_0, AQ_0, \dots, A^{q-1}Q_0]`, orthonormalised block
by block (classical Gram-Schmidt twice). After each application the
Rayleigh-Ritz step on :math:`\mathcal{K}_q` (with :math:`AK` kept exactly, no
recurrence) gives Ritz values :math:`\theta_1 \ge \theta_2 \ge \dots`, Ritz
vectors :math:`\hat V` and residuals :math:`r_j = \|A\hat v_j - \theta_j \hat v_j\|`.
References: Musco & Musco (2015), "Randomized block Krylov methods for stronger
and faster approximate singular value decomposition", NeurIPS; Halko,
Martinsson & Tropp (2011), SIAM Rev. 53(2), 217-288, sec. 4.

The start
---------
The start block is ``b`` Gaussian columns drawn from a seed taken from the
matrix itself (:func:`~toolkit.metrics.gram.data_seed`: a hash of its shape
and of 4096 of its entries), never a constant: a matrix cannot be built
against a seed it determines without inverting the hash. There is no warm
start. Before issue 42 the fine-tuned side started from the base's Ritz block;
where the fine-tune keeps the base's singular vectors (SVD-style updates,
:math:`U\,\mathrm{diag}(s z)\,V^\top`) those columns are exact eigenvectors,
their residual is zero after one application, and the route stopped without
having looked at the rest of the spectrum (0.9375 for an exact 0.75). Keeping
a few fresh Gaussian columns beside the warm ones and two applications at
least does not cure it: on 150 targets with one to three directions raised
from far outside the block to just above :math:`\theta_k` (300 x 300, k = 16)
such a start answered 79 times and 16 of them were wrong, where the cold start
answered 113 times, all right. The route never stops before
:data:`MIN_APPLICATIONS` applications.

What is proven and what is a probability statement
--------------------------------------------------
Let :math:`\hat V_k` be the top-k Ritz vectors, :math:`R = A\hat V_k - \hat V_k\Theta_k`.
By the Davis-Kahan :math:`\sin\Theta` theorem (Davis & Kahan 1970, SIAM J. Numer.
Anal. 7(1); Parlett, *The Symmetric Eigenvalue Problem*, thm. 11.7.1), if every
eigenvalue of :math:`A` outside its top-k eigenspace is at most
:math:`\lambda^+ < \theta_k`, the largest principal angle between :math:`\hat V_k`
and that eigenspace obeys :math:`\|\sin\Theta\|_2 \le \|R\|_F / (\theta_k - \lambda^+)`.
Two values of :math:`\lambda^+` are used:

- **Proven** (the trace bound): by Courant-Fischer,
  :math:`\lambda_{k+1} \le \lambda_{max}(P_\perp A P_\perp) \le \mathrm{tr}(P_\perp A P_\perp)
  = \mathrm{tr}(A) - \sum_{i \le k}\theta_i` with :math:`P_\perp = I - \hat V_k\hat V_k^\top`
  (:math:`A \succeq 0`). :math:`\mathrm{tr}(A) = \|W\|_F^2` is summed exactly (float64) in the first
  application. Where :math:`\mathrm{tr}(A) - \sum\theta < \theta_k` the stopping rule is a proof, up to
  float64 rounding, whatever the start; it holds for spectra whose top k carry most of the mass
  (spiked, low-rank plus small noise) and rarely for a trained layer's heavy tail.
- **Estimated** otherwise: :math:`\lambda^+ = \max_{k < j \le b}(\theta_j + r_j)`, the largest
  upper end of the residual intervals of the block's other Ritz pairs (each holds an eigenvalue). It is
  an upper bound on :math:`\lambda_{k+1}` only if the Krylov space is not nearly orthogonal to the
  eigenvectors above it: for a Gaussian start this fails with a probability that falls with the number
  of applications and with the gap (Kuczyński & Woźniakowski 1992, SIAM J. Matrix Anal. Appl. 13(4),
  for one start vector; Musco & Musco 2015, thm. 1, for a block), never zero. Every direction of
  :math:`\mathcal{K}_q` comes from the random start, and one with a Rayleigh quotient above
  :math:`\theta_k` would be a Ritz pair above :math:`\theta_k`: this is the check that no fresh
  direction rises above the block. It is a probability statement over the seed, not a proof: property
  tests (``tests/metrics/test_krylov_properties.py``) hold it against the exact route on inputs built
  to defeat it.

:func:`krylov_top` stops when the bound so obtained is at most ``tolerance`` and says which kind it
reached (:attr:`KrylovResult.proven`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from toolkit.metrics import gram as gram_module
from toolkit.metrics.gram import data_seed, float64_blocks, gram_side
from toolkit.metrics.registry import DegenerateMatrix

__all__ = ["MAX_APPLICATIONS", "MIN_APPLICATIONS", "OVERSAMPLING", "TOLERANCE", "KrylovResult", "data_seed",
           "gram_apply", "krylov_top"]

#: Stated accuracy: the bound on the largest principal angle (sin) between the computed and the exact
#: top-k subspace at which the route stops (``subspace_overlap`` is then within 4 x this).
TOLERANCE = 2.5e-6
#: Extra columns of the Krylov block beyond ``k``.
OVERSAMPLING = 8
#: Applications of the Gram operator (reads of W) before the route gives up (the exact route takes over).
MAX_APPLICATIONS = 16
#: Applications of the Gram operator before the route may stop (the fresh columns have been multiplied).
MIN_APPLICATIONS = 2
#: Applications after which a top-k residual that shrinks too slowly sends the matrix to the exact route
#: (:func:`_slow_residual`; in the first ones a spiked spectrum's residual may grow).
RATE_FROM = 3


class KrylovResult(NamedTuple):
    """What :func:`krylov_top` found.

    Attributes
    ----------
    vectors : numpy.ndarray, shape (d, k)
        Orthonormal top-k Ritz vectors (float64).
    values : numpy.ndarray, shape (k,)
        Their Ritz values, descending.
    estimate : float
        The bound on :math:`\\|\\sin\\Theta\\|_2` reached (module docstring).
    applications : int
        Reads of ``W`` made.
    proven : bool
        The estimate rests on the trace bound (a proof), not on the residual estimate of
        :math:`\\lambda_{k+1}` (a probability statement).
    upper : float
        The :math:`\\lambda^+` used: an upper bound (``proven``) or estimate of :math:`\\lambda_{k+1}`.
    trace : float
        :math:`\\mathrm{tr}(A) = \\|W\\|_F^2`.
    """

    vectors: np.ndarray
    values: np.ndarray
    estimate: float
    applications: int
    proven: bool
    upper: float
    trace: float


def gram_apply(w: torch.Tensor, x: np.ndarray, *, trace: list | None = None) -> np.ndarray:
    """:math:`AX` for the smaller Gram matrix :math:`A` of ``w`` (:func:`~toolkit.metrics.gram.gram_side`),
    float64, one read of ``w`` in float64 blocks of :data:`~toolkit.metrics.gram.PAIR_BLOCK` entries (no
    float64 copy of ``w``; 16 MiB of buffer). ``trace``: append :math:`\\mathrm{tr}(A) = \\|W\\|_F^2` (float64
    sums of the same blocks)."""
    wide, _ = gram_side(w)
    out = np.zeros_like(x)
    total = 0.0
    for blk in float64_blocks(w, "block", entries=gram_module.PAIR_BLOCK):
        out += blk @ (blk.T @ x) if wide else blk.T @ (blk @ x)
        if trace is not None:
            total += float(np.einsum("ij,ij->", blk, blk))
    if trace is not None:
        trace.append(total)
    return out


def _orthonormal_to(z: np.ndarray, basis: np.ndarray | None) -> np.ndarray:
    """Columns of ``z`` made orthonormal and orthogonal to ``basis`` (classical Gram-Schmidt twice, then QR)."""
    if basis is not None:
        for _ in range(2):
            z = z - basis @ (basis.T @ z)
    q, _ = np.linalg.qr(z)
    return q


def start_block(w: torch.Tensor, d: int, b: int) -> np.ndarray:
    """The orthonormal (d, b) start: Gaussian columns from :func:`~toolkit.metrics.gram.data_seed`."""
    return _orthonormal_to(np.random.default_rng(data_seed(w)).standard_normal((d, b)), None)


def krylov_top(w: torch.Tensor, k: int, *, tolerance: float = TOLERANCE,
               max_applications: int = MAX_APPLICATIONS, oversampling: int = OVERSAMPLING,
               min_applications: int = MIN_APPLICATIONS) -> KrylovResult | None:
    r"""Top-``k`` eigenvectors of the smaller Gram matrix of ``w`` by randomized block Krylov (module docstring).

    Parameters
    ----------
    w : torch.Tensor, shape (m, n), on the CPU
    k : int
        At most ``min(m, n)``.
    tolerance : float
        Stop when the bound on :math:`\|\sin\Theta\|_2` is at most this.
    max_applications : int
        Applications of the Gram operator (reads of ``w``) at most.
    oversampling : int
        Block size ``k + oversampling``.
    min_applications : int
        Applications before the route may stop.

    Returns
    -------
    KrylovResult or None
        None when ``tolerance`` is not reached (or the Krylov space is exhausted, or the estimate shrinks
        too slowly to reach it): the caller takes the exact route.

    Raises
    ------
    DegenerateMatrix
        Non-finite entries.
    """
    _, d = gram_side(w)
    b = min(d, k + oversampling)
    if b <= k:
        return None  # no room for a Ritz pair beyond k: the exact route
    trace: list = []
    basis = start_block(w, d, b)
    images = gram_apply(w, basis, trace=trace)
    previous = previous_residual = math.inf
    for done in range(1, max_applications + 1):
        if not (np.isfinite(images).all() and math.isfinite(trace[0])):
            raise DegenerateMatrix("matrix contains NaN/Inf")
        vec, theta, bounds, residual = _ritz(basis, images, k, b, trace[0])
        proven = bounds[0][0] <= tolerance
        estimate, upper = bounds[0] if proven else bounds[1]
        if done >= min_applications and estimate <= tolerance:
            return KrylovResult(vec[:, :k], theta[:k].copy(), estimate, done, proven, upper, trace[0])
        estimate = min(bounds[0][0], bounds[1][0])
        left = max_applications - done
        if done == max_applications or basis.shape[1] + b > d or _hopeless(previous, estimate, tolerance, left) or (
                done >= RATE_FROM and basis.shape[1] + left * b < d  # else the space fills: Ritz is exact
                and _slow_residual(previous_residual, residual, theta[k - 1] - theta[k], tolerance, left)):
            return None
        previous, previous_residual = estimate, residual
        q = _orthonormal_to(images[:, -b:], basis)
        basis, images = np.hstack([basis, q]), np.hstack([images, gram_apply(w, q)])
    return None


def _hopeless(previous: float, estimate: float, tolerance: float, left: int) -> bool:
    """Whether the estimate, shrinking at its last rate, cannot reach ``tolerance`` in ``left`` more steps
    (twice the steps it would need are allowed: the rate grows with the Krylov space)."""
    if not math.isfinite(previous) or not math.isfinite(estimate):
        return False
    if estimate >= previous:
        return True
    return math.log(estimate / tolerance) / math.log(previous / estimate) > 2 * left


def _slow_residual(previous: float, residual: float, gap: float, tolerance: float, left: int) -> bool:
    r"""Whether the top-k residual :math:`\|R\|_F`, shrinking at its last rate, cannot reach the most
    favourable stopping point, ``tolerance`` :math:`\times (\theta_k - \theta_{k+1})` (the bound with
    :math:`\lambda^+` at its least, :math:`\theta_{k+1}`), in twice the ``left`` applications.

    The estimated bound stays infinite while the block's lower Ritz pairs are unconverged, so
    :func:`_hopeless` cannot judge those steps; the residual can. A top spectrum without a clear gap
    (plain Gaussian noise of Qwen2.5-7B's shapes: :math:`\theta_k - \theta_{k+1}` about 0.1-1 % of
    :math:`\theta_k`, the residual shrinking 1.3-1.5x an application) is given up after :data:`RATE_FROM`
    applications instead of :data:`MAX_APPLICATIONS`; the spiked spectra of ``benchmarks/bench_compare.py``
    shrink it 3-30x an application and go on. Not asked where the Krylov space would fill the whole space
    within the applications left (small matrices: the Rayleigh-Ritz step is then exact). Giving up only
    sends the matrix to the exact route: it never changes a value, only what it costs."""
    if not (math.isfinite(previous) and math.isfinite(residual)) or residual <= 0.0:
        return False
    if not gap > 0.0 or residual >= previous:
        return True
    need = residual / (tolerance * gap)
    return need > 1.0 and math.log(need) / math.log(previous / residual) > 2 * left


def _ritz(basis: np.ndarray, images: np.ndarray, k: int, b: int, trace: float):
    r"""Rayleigh-Ritz on span(``basis``) with ``images`` = A ``basis``: the top-``b`` Ritz vectors (b > k), all
    Ritz values and two ``(bound, lambda+)``: the proven (trace) one and the estimated one (module docstring),
    bound :math:`\|R\|_F / (\theta_k - \lambda^+)`, inf without a gap, and :math:`\|R\|_F` of the top k."""
    h = basis.T @ images
    theta, s = np.linalg.eigh((h + h.T) / 2)
    theta, s = theta[::-1], s[:, ::-1]
    vec = basis @ s[:, :b]
    res = images @ s[:, :b] - vec * theta[:b]
    norms = np.linalg.norm(res, axis=0)
    top = float(np.sqrt((norms[:k] ** 2).sum()))
    uppers = (max(0.0, trace - float(theta[:k].sum())), float((theta[k:b] + norms[k:b]).max()))
    usable = theta[0] > 0 and theta[k - 1] > 1e-12 * theta[0]
    return vec, theta, [(top / (theta[k - 1] - u) if usable and u < theta[k - 1] else math.inf, u)
                        for u in uppers], top
