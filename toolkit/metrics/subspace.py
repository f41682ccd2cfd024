r"""Top-k left singular subspaces of a weight matrix: block Krylov with a residual check, exact fallback.

``subspace_overlap`` (:mod:`toolkit.metrics.diff`) needs only the top-``k``
left singular subspace of each side, not the whole spectrum. The exact route,
:func:`exact_top_left`, forms the smaller Gram matrix in float64 and
diagonalises it with eigenvectors (``eigh``, about :math:`9d^3` flops for
:math:`d = \min(m, n)`, plus :math:`mnd` for the product). :func:`top_left`
computes the same subspace by the randomized block Krylov method and falls
back to the exact route only when its a-posteriori error estimate is above
the stated accuracy.

Method
------
On the smaller Gram operator :math:`A` (:math:`W^\top W` or :math:`WW^\top`,
applied as :math:`\sum_i W_i^\top (W_i X)` over float64 blocks of ``W``, one
read of ``W`` per application and no float64 copy of it), a Gaussian start
block of ``b = k + oversampling`` columns (fixed seed: the result is
reproducible) spans the Krylov space
:math:`\mathcal{K}_q = [Q_0, AQ_0, \dots, A^{q-1}Q_0]`, orthonormalised block
by block (classical Gram-Schmidt twice). After each application the
Rayleigh-Ritz step on :math:`\mathcal{K}_q` (with :math:`AK` kept exactly,
no recurrence) gives Ritz values :math:`\theta_1 \ge \theta_2 \ge \dots` and
Ritz vectors :math:`\hat V_k` with residual :math:`R = A\hat V_k - \hat V_k
\Theta_k`. References: Musco & Musco (2015), "Randomized block Krylov methods
for stronger and faster approximate singular value decomposition", NeurIPS;
Halko, Martinsson & Tropp (2011), SIAM Rev. 53(2), 217-288, sec. 4.

Stated accuracy
---------------
By the Davis-Kahan :math:`\sin\Theta` theorem (Davis & Kahan 1970, SIAM J.
Numer. Anal. 7(1); Parlett, *The Symmetric Eigenvalue Problem*, thm. 11.7.1)
the largest principal angle between :math:`\hat V_k` and the exact top-k
eigenvector space obeys :math:`\|\sin\Theta\|_2 \le \|R\|_2 / \delta`,
:math:`\delta = \theta_k - \lambda_{k+1}`. :math:`\lambda_{k+1}` is estimated
by :math:`\theta_{k+1} + \|r_{k+1}\|` (a Ritz value lies within its residual of
an eigenvalue; a random start misses an eigenvector of the top ``b`` with
probability zero, HMT 2011 sec. 10), so the estimate
:math:`\epsilon = \|R\|_F / (\theta_k - \theta_{k+1} - \|r_{k+1}\|)` is an
a-posteriori estimate, not a proof. The left subspace of a tall ``W`` is
:math:`W\hat V_k`, whose angles to the exact one are at most those of
:math:`\hat V_k` (multiplying by ``W`` scales the unwanted components by
:math:`\sigma_{k+j}/\sigma_k \le 1`). The overlap of two subspaces,
:math:`\mathrm{tr}(P_bP_t)/k` with projectors :math:`P`, moves by at most
:math:`\|\hat P - P\|_* / k \le 2\|\sin\Theta\|_2` per side, so
``subspace_overlap`` is within :math:`2(\epsilon_b + \epsilon_t)` of the exact
route's value. :func:`top_left` iterates until :math:`\epsilon \le`
:data:`TOLERANCE` (then the overlap is within :math:`4\cdot` :data:`TOLERANCE`
= 1e-5 of the exact value) and falls back to :func:`exact_top_left` when it
does not within :data:`MAX_APPLICATIONS` applications, or shrinks too slowly to (clustered or
degenerate :math:`\sigma_k \approx \sigma_{k+1}`, where the subspace itself
is ill-conditioned), or when ``W`` is close to rank below ``k``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from toolkit.metrics import gram as gram_module
from toolkit.metrics.gram import float64_blocks, gram_side
from toolkit.metrics.registry import DegenerateMatrix

#: Stated accuracy: the estimated largest principal angle (sin) between the computed and the exact
#: top-k subspace at which :func:`top_left` stops; ``subspace_overlap`` is then within 4 x this.
TOLERANCE = 2.5e-6
#: Extra columns of the Krylov block beyond ``k``.
OVERSAMPLING = 8
#: Applications of the Gram operator (reads of W) before the exact route takes over.
MAX_APPLICATIONS = 16
#: Below this many rows in the smaller Gram matrix the exact route is cheaper (and is taken). Measured, one
#: thread: SmolLM2's 1536 x 576, exact 0.23 s, Krylov 0.72 s; Qwen2.5-7B's 3584 x 3584 (load 6), exact
#: Gram + ``eigvalsh`` alone 32 s (``eigh`` with vectors more), Krylov 8.0 s; 18944 x 3584, 24 s and 7.5 s.
MIN_KRYLOV_SIDE = 1024
_SEED = 20260


def exact_top_left(w: torch.Tensor, k: int, *, device="cpu") -> torch.Tensor:
    r"""Orthonormal basis of the top-``k`` left singular subspace of ``w``, by a full float64 ``eigh``.

    Computed in float64 from the smaller Gram matrix: the eigenvectors of
    :math:`WW^\top` when ``out <= in``; else :math:`U_k = W V_k \Sigma_k^{-1}`
    from the eigenvectors :math:`V_k` of :math:`W^\top W`. Accuracy: that of
    LAPACK's ``syevd`` on the float64 Gram matrix, angles of about
    :math:`\epsilon_{64}\,\sigma_1^2 / (\sigma_k^2 - \sigma_{k+1}^2)`.

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
    k : int
        Clipped to ``min(out, in)``.

    Returns
    -------
    torch.Tensor, shape (out, k), float64, on the CPU

    Raises
    ------
    DegenerateMatrix
        Rank below ``k`` (the subspace is not unique) or non-finite entries.
    """
    x = w.to(device=device)
    m, n = x.shape
    k = max(1, min(int(k), m, n))
    wide, d = gram_side(x)
    gram = torch.zeros((d, d), dtype=torch.float64, device=x.device)
    step = max(1, (1 << 22) // max(m, n))
    for blk in (x.split(step, dim=1) if wide else x.split(step, dim=0)):
        b = blk.to(torch.float64)
        gram.addmm_(b, b.T) if wide else gram.addmm_(b.T, b)
    if not bool(torch.isfinite(gram).all()):
        raise DegenerateMatrix("matrix contains NaN/Inf")
    lam, vec = torch.linalg.eigh(gram)
    lam, vec = lam.flip(0)[:k], vec.flip(1)[:, :k]
    _check_rank(float(lam[0]), float(lam[-1]), max(m, n), k)
    if not wide:  # U_k = W V_k / sigma_k, row block by row block
        vec = torch.cat([blk.to(torch.float64) @ vec for blk in x.split(step, dim=0)]) / lam.sqrt()
    return vec.cpu()


def _check_rank(top: float, kth: float, big: int, k: int) -> None:
    if kth <= big * 1e-15 * top or top <= 0:
        raise DegenerateMatrix(f"rank below k={k}: the top-{k} singular subspace is not unique")


def gram_apply(w: torch.Tensor, x: np.ndarray) -> np.ndarray:
    """:math:`AX` for the smaller Gram matrix :math:`A` of ``w`` (:func:`~toolkit.metrics.gram.gram_side`),
    float64, one read of ``w`` in float64 blocks of :data:`~toolkit.metrics.gram.PAIR_BLOCK` entries (no
    float64 copy of ``w``; 4 MiB of buffer)."""
    wide, _ = gram_side(w)
    out = np.zeros_like(x)
    for blk in float64_blocks(w, "block", entries=gram_module.PAIR_BLOCK):
        out += blk @ (blk.T @ x) if wide else blk.T @ (blk @ x)
    return out


def _orthonormal_to(z: np.ndarray, basis: np.ndarray | None) -> np.ndarray:
    """Columns of ``z`` made orthonormal and orthogonal to ``basis`` (classical Gram-Schmidt twice, then QR)."""
    if basis is not None:
        for _ in range(2):
            z = z - basis @ (basis.T @ z)
    q, _ = np.linalg.qr(z)
    return q


def krylov_top(w: torch.Tensor, k: int, *, tolerance: float = TOLERANCE,
               max_applications: int = MAX_APPLICATIONS, oversampling: int = OVERSAMPLING,
               start: np.ndarray | None = None):
    r"""Top-``k`` eigenvectors of the smaller Gram matrix of ``w`` by randomized block Krylov (module docstring).

    Parameters
    ----------
    w : torch.Tensor, shape (m, n), on the CPU
    k : int
        At most ``min(m, n)``.
    tolerance : float
        Stop when the estimated :math:`\|\sin\Theta\|_2` is at most this.
    max_applications : int
        Applications of the Gram operator (reads of ``w``) at most.
    oversampling : int
        Block size ``k + oversampling``.
    start : numpy.ndarray, shape (d, j), optional
        A warm start: the leading columns of the start block (the rest, at least ``oversampling // 2``,
        stay Gaussian). The fine-tuned side starts from the base's top Ritz vectors
        (:func:`top_left`'s ``share``), usually one or two applications from its own subspace; the
        stopping rule does not depend on the start.

    Returns
    -------
    (vectors, values, estimate, block) or None
        ``vectors`` (d, k) float64 orthonormal, ``values`` the k Ritz values (eigenvalues of the Gram
        matrix, descending), ``estimate`` the error estimate reached, ``block`` the top
        ``k + oversampling`` Ritz vectors (a warm start for a nearby matrix); None when it did not reach
        ``tolerance`` (or the Krylov space is exhausted), so the caller takes the exact route.
    """
    _, d = gram_side(w)
    b = min(d, k + oversampling)
    q = np.random.default_rng(_SEED).standard_normal((d, b))
    if start is not None:
        keep = min(start.shape[1], b - oversampling // 2)
        q[:, :keep] = start[:, :keep]
    q = _orthonormal_to(q, None)
    basis, images = q, gram_apply(w, q)
    previous = math.inf
    for done in range(1, max_applications + 1):
        if not np.isfinite(images).all():
            raise DegenerateMatrix("matrix contains NaN/Inf")
        vec, theta, estimate = _ritz(basis, images, k, b)
        if estimate <= tolerance:
            return vec[:, :k], theta, estimate, vec
        if done == max_applications or basis.shape[1] + b > d or _hopeless(
                previous, estimate, tolerance, max_applications - done):
            return None  # the exact route takes over
        previous = estimate
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


def _ritz(basis: np.ndarray, images: np.ndarray, k: int, b: int):
    r"""Rayleigh-Ritz on span(``basis``) with ``images`` = A ``basis``: the top-``b`` Ritz vectors (b > k), the
    top-k Ritz values and the estimate :math:`\|R\|_F / (\theta_k - \theta_{k+1} - \|r_{k+1}\|)` (inf
    without a gap)."""
    h = basis.T @ images
    theta, s = np.linalg.eigh((h + h.T) / 2)
    theta, s = theta[::-1], s[:, ::-1]
    vec = basis @ s[:, :b]
    res = images @ s[:, : k + 1] - vec[:, : k + 1] * theta[: k + 1]
    norms = np.linalg.norm(res, axis=0)
    gap = theta[k - 1] - theta[k] - norms[k]
    if theta[0] <= 0 or theta[k - 1] <= 1e-12 * theta[0] or gap <= 0:
        return vec, theta[:k].copy(), math.inf
    return vec, theta[:k].copy(), float(np.sqrt((norms[:k] ** 2).sum())) / gap


def top_left(w: torch.Tensor, k: int, *, device="cpu", tolerance: float = TOLERANCE,
             share: dict | None = None) -> torch.Tensor:
    r"""Orthonormal basis of the top-``k`` left singular subspace of ``w``: block Krylov, exact fallback.

    Same subspace as :func:`exact_top_left` within the stated accuracy (module
    docstring): an estimated :math:`\|\sin\Theta\|_2 \le` ``tolerance``
    (default :data:`TOLERANCE` = 2.5e-6; the overlap is then within 1e-5). Matrices with a smaller side below
    :data:`MIN_KRYLOV_SIDE`, a device other than the CPU, and matrices where
    the estimate is not reached go the exact route.

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
        Any float dtype as stored (bf16 is converted block by block).
    k : int
        Clipped to ``min(out, in)``.
    share : dict, optional
        Warm starts shared between nearby matrices (a pair's base and target): read as the start of
        :func:`krylov_top` and filled with its Ritz block, keyed by shape and ``k``.

    Returns
    -------
    torch.Tensor, shape (out, k), float64, on the CPU

    Raises
    ------
    DegenerateMatrix
        Rank below ``k`` or non-finite entries (from either route).
    """
    m, n = w.shape
    k = max(1, min(int(k), m, n))
    wide, d = gram_side(w)
    if torch.device(device).type != "cpu" or w.device.type != "cpu" or d < MIN_KRYLOV_SIDE:
        return exact_top_left(w, k, device=device)
    key = (tuple(w.shape), k)
    found = krylov_top(w, k, tolerance=tolerance, start=None if share is None else share.get(key))
    if found is None:
        return exact_top_left(w, k, device=device)
    vec, theta, _, block = found
    if share is not None:
        share[key] = block
    _check_rank(float(theta[0]), float(theta[-1]), max(m, n), k)
    if not wide:  # U_k = W V_k / sigma_k (the span is what counts; sigma_k keeps it orthonormal)
        out = np.empty((m, k))
        row = 0
        for blk in float64_blocks(w, "block", entries=gram_module.PAIR_BLOCK):
            out[row: row + blk.shape[0]] = blk @ vec
            row += blk.shape[0]
        vec = out / np.sqrt(theta)
    return torch.from_numpy(np.ascontiguousarray(vec))
