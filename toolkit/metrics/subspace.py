r"""Top-k left singular subspaces of a weight matrix: block Krylov with a certificate, exact fallback.

``subspace_overlap`` (:mod:`toolkit.metrics.diff`) needs only the top-``k``
left singular subspace of each side, not the whole spectrum. The exact route,
:func:`exact_top_left`, forms the smaller Gram matrix in float64 and computes
only its top ``k + 1`` eigenpairs (LAPACK's selected-eigenvalue driver
``dsyevx`` through ``scipy.linalg.eigh(..., subset_by_index=..., driver="evx")``:
measured at order 2048 on one thread, 0.66 s against 1.59 s for NumPy's
full ``eigh`` and 0.74 s for ``eigvalsh``; in a second, loaded run 1.84 s
against 3.54 s for torch's ``eigh``, the route before issue 42). :func:`top_left` computes the same
subspace by randomized block Krylov (:mod:`toolkit.metrics.krylov`) and falls
back to the exact route when its bound is above the stated accuracy.

Stated accuracy
---------------
:func:`top_left` takes the Krylov result only when its bound on the largest
principal angle, :math:`\|\sin\Theta\|_2 \le \|R\|_F / (\theta_k - \lambda^+)`
(Davis-Kahan), is at most :data:`TOLERANCE`; :mod:`toolkit.metrics.krylov`
says when :math:`\lambda^+` is a proven upper bound on :math:`\lambda_{k+1}`
(the trace bound :math:`\mathrm{tr}(A) - \sum_{i\le k}\theta_i`) and when an
estimate over fresh random directions from a seed drawn from the matrix (a
probability statement). The left subspace of a tall ``W`` is
:math:`W\hat V_k`, whose angles to the exact one are at most those of
:math:`\hat V_k` (multiplying by ``W`` scales the unwanted components by
:math:`\sigma_{k+j}/\sigma_k \le 1`). The overlap of two subspaces,
:math:`\mathrm{tr}(P_bP_t)/k` with projectors :math:`P`, moves by at most
:math:`\|\hat P - P\|_* / k \le 2\|\sin\Theta\|_2` per side, so
``subspace_overlap`` is within :math:`4\cdot` :data:`TOLERANCE` = 1e-5 of the
exact route's value. The exact route :func:`exact_top_left` is taken when the
bound is not reached within :data:`MAX_APPLICATIONS` applications, or shrinks
too slowly to, below :data:`MIN_KRYLOV_SIDE`, and off the CPU.

A subspace that is not determined
---------------------------------
Where the gap at ``k`` is not above what rounding can move, the top-``k``
subspace is not a property of the matrix: a solver returns some rotation
inside the cluster of :math:`\sigma_k \approx \sigma_{k+1}` (issue 42: 0.7254
against NumPy's 0.7196 on the same pair). :func:`check_separated` raises
:class:`~toolkit.metrics.registry.DegenerateMatrix` (NaN with its reason in
the Dataset) when

.. math:: \sigma_k - \sigma_{k+1} \le \max(\epsilon_{store}, \epsilon_{solve}),

- :math:`\epsilon_{store} = 4u\,\mathrm{rms}(W) = 4u\,\|W\|_F/\sqrt{mn}`, :math:`u`
  the unit roundoff of the stored dtype (:math:`2^{-8}` bf16, :math:`2^{-11}`
  fp16, :math:`2^{-24}` fp32, :math:`2^{-53}` fp64). To first order a
  perturbation :math:`E` turns :math:`v_k` towards :math:`v_{k+1}` by
  :math:`u_{k+1}^\top E v_k / (\sigma_k - \sigma_{k+1})` (Stewart & Sun 1990,
  *Matrix Perturbation Theory*, ch. V, sec. 2); for the rounding of the stored
  entries (independent, :math:`|e_{ij}| \le u|w_{ij}|`) that coupling has a
  standard deviation of about :math:`u\,\mathrm{rms}(W)/\sqrt 3`. A gap within
  four of them is one that rounding the trained values to the stored dtype
  could have closed or opened: the stored value, not the training, picked the
  basis. This is an estimate from a model of rounding, not a bound (the
  worst case, Wedin 1972, BIT 12, is :math:`\|E\|_2 \le u\|W\|_F`, which
  would make most bf16 layers NaN: on the bundled SmolLM2's matrices the gap
  at 16 is 0.2 to 2 times :math:`u_{bf16}\,\mathrm{rms}(W)(\sqrt m + \sqrt n)`,
  and from 2 (median 25) times :math:`\epsilon_{store}` for bf16);
- :math:`\epsilon_{solve} = (m + n)\,u_{64}\,\sigma_1^2 / (\sigma_k + \sigma_{k+1})`:
  the float64 Gram matrix and its eigensolver (backward error about
  :math:`(m + n)u_{64}\|W\|_2^2`, Higham 2002, sec. 3.5, and Parlett, thm. 4.5.1)
  cannot tell the two values apart.

The rule is each side's own: a gap smaller than :math:`\|W_t - W_b\|_2` is
not made NaN. Such a gap is resolved on both sides, and the reordering an
update makes there (an SVD-style fine-tune rescaling singular values by 0.5
to 2 moves directions across ``k``) is the change the overlap exists to
report.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from toolkit.metrics import gram as gram_module
from toolkit.metrics.gram import _syrk_into, float64_blocks, gram_scale, gram_side
from toolkit.metrics.krylov import MAX_APPLICATIONS, OVERSAMPLING, TOLERANCE, gram_apply, krylov_top
from toolkit.metrics.registry import DegenerateMatrix

__all__ = ["MAX_APPLICATIONS", "MIN_KRYLOV_SIDE", "OVERSAMPLING", "TOLERANCE", "TopSubspace", "check_separated",
           "exact_top_left", "exact_top_subspace", "gram_apply", "krylov_top", "top_left", "top_subspace"]

#: Below this many rows in the smaller Gram matrix the exact route is cheaper (and is taken; the ``min_side``
#: argument of :func:`top_left`). Measured, one thread: SmolLM2's 1536 x 576, exact 0.23 s, Krylov 0.72 s;
#: Qwen2.5-7B's 3584 x 3584 (load 6), exact Gram + ``eigvalsh`` alone 32 s, Krylov 8.0 s; 18944 x 3584, 24 s
#: and 7.5 s.
MIN_KRYLOV_SIDE = 1024
#: Unit roundoff of each storage dtype (the stored values' rounding, :func:`check_separated`).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24,
                 torch.float64: 2.0 ** -53}


class TopSubspace(NamedTuple):
    r"""A top-``k`` left singular subspace and the bounds on the singular values at its edge.

    Attributes
    ----------
    vectors : torch.Tensor, shape (out, k), float64, on the CPU
        Orthonormal basis.
    sigma_k : float
        A lower bound on :math:`\sigma_k` of the matrix as given (the ``k``-th Ritz value of the Krylov route,
        by Cauchy interlacing; the ``k``-th eigenvalue of the exact route less its solver error).
    sigma_next : float
        An upper bound on :math:`\sigma_{k+1}` (0 when ``k`` is the whole side): the exact route's plus its
        solver error, proven; the Krylov route's :math:`\sqrt{\lambda^+}`, proven where ``proven``, else the
        residual estimate of :mod:`toolkit.metrics.krylov` (a probability statement over its seed).
    proven : bool
        Both bounds are proofs (up to float64 rounding).
    krylov_gave_up : bool
        The Krylov route was tried and could not certify the subspace (the exact route's answer is here): a
        hint for the cost of a matrix like this one (:func:`top_subspace`'s ``krylov``), never for a value.
    """

    vectors: torch.Tensor
    sigma_k: float
    sigma_next: float
    proven: bool
    krylov_gave_up: bool = False


def _edge(lam_k: float, lam_next: float, pad: float, scale: float) -> tuple[float, float]:
    """(lower bound on sigma_k, upper bound on sigma_k+1) from Gram eigenvalues of ``w * scale``, padded."""
    return (float(np.sqrt(max(lam_k - pad, 0.0))) / scale, float(np.sqrt(max(lam_next + pad, 0.0))) / scale)


def in_gram_range(w: torch.Tensor) -> torch.Tensor:
    """``w``, or ``w`` times :func:`~toolkit.metrics.gram.gram_scale` (a power of two, exact) when its float64
    Gram matrix would leave float64's normal range. The subspace does not depend on the scale, nor does
    :func:`check_separated`'s rule (relative)."""
    scale = gram_scale(w)
    return w if scale == 1.0 else w * scale


def gram64(w: torch.Tensor) -> np.ndarray:
    """The smaller Gram matrix of ``w`` (CPU), float64, summed over float64 blocks by BLAS ``dsyrk`` into its
    lower triangle (the upper one stays 0; no float64 copy of ``w``, half the flops of a full product)."""
    wide, d = gram_side(w)
    g = np.zeros((d, d))
    for blk in float64_blocks(w, "block", entries=gram_module.PAIR_BLOCK):
        _syrk_into(g, blk, wide)
    return g


def check_separated(values, trace: float, shape, dtype, k: int) -> None:
    r"""Raise :class:`DegenerateMatrix` unless the top-``k`` subspace is determined (module docstring).

    Parameters
    ----------
    values : sequence of float
        :math:`\lambda_1, \lambda_k, \lambda_{k+1}` (or an upper bound on :math:`\lambda_{k+1}`) of the
        Gram matrix, :math:`\lambda = \sigma^2`.
    trace : float
        :math:`\|W\|_F^2`.
    shape : (m, n)
    dtype : torch.dtype
        The stored dtype (its unit roundoff).
    k : int

    Raises
    ------
    DegenerateMatrix
        Rank below ``k``, or :math:`\sigma_k - \sigma_{k+1} \le \max(\epsilon_{store}, \epsilon_{solve})`.
    """
    top, kth, nxt = (float(v) for v in values)
    m, n = shape
    if not top > 0 or kth <= max(m, n) * 1e-15 * top:
        raise DegenerateMatrix(f"rank below k={k}: the top-{k} singular subspace is not unique")
    sk, sn = np.sqrt(kth), np.sqrt(max(nxt, 0.0))
    store = 4 * UNIT_ROUNDOFF.get(dtype, 2.0 ** -24) * np.sqrt(max(trace, 0.0) / (m * n))
    solve = (m + n) * 2.0 ** -53 * top / (sk + sn)
    if sk - sn <= max(store, solve):
        raise DegenerateMatrix(
            f"sigma_{k} - sigma_{k + 1} = {sk - sn:.3g} is within rounding ({max(store, solve):.3g}, of the stored "
            f"values or the float64 solver): the top-{k} singular subspace is not determined")


def exact_top_left(w: torch.Tensor, k: int, *, device="cpu") -> torch.Tensor:
    """The basis of :func:`exact_top_subspace` (``.vectors``): shape (out, k), float64, on the CPU."""
    return exact_top_subspace(w, k, device=device).vectors


def exact_top_subspace(w: torch.Tensor, k: int, *, device="cpu") -> TopSubspace:
    r"""Orthonormal basis of the top-``k`` left singular subspace of ``w``, from the float64 Gram matrix.

    The eigenvectors of :math:`WW^\top` when ``out <= in``; else :math:`U_k = W V_k \Sigma_k^{-1}` from the
    eigenvectors :math:`V_k` of :math:`W^\top W`. On the CPU only the top ``k + 1`` eigenpairs are computed
    (``dsyevx``, module docstring); on another device torch's full ``eigh``. Accuracy: angles of about
    :math:`\epsilon_{64}\,\sigma_1^2 / (\sigma_k^2 - \sigma_{k+1}^2)`.

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
    k : int
        Clipped to ``min(out, in)``.
    device : str
        Where the Gram matrix and its eigenvectors are computed.

    Returns
    -------
    TopSubspace
        The basis, shape (out, k), float64, on the CPU, and :math:`\sigma_k`, :math:`\sigma_{k+1}` padded by
        the solver's error :math:`(m + n)\,u_{64}\,\sigma_1^2` on the Gram eigenvalues (proven bounds).

    Raises
    ------
    DegenerateMatrix
        Non-finite entries, rank below ``k``, or a top-``k`` subspace not determined
        (:func:`check_separated`).

    Notes
    -----
    A float64 ``w`` with entries past :math:`2^{\pm 250}` is scaled by a power of two first
    (:func:`in_gram_range`).
    """
    m, n = w.shape
    k = max(1, min(int(k), m, n))
    scale = gram_scale(w)
    w = in_gram_range(w)
    wide, d = gram_side(w)
    on_cpu = torch.device(device).type == "cpu" and w.device.type == "cpu"
    if on_cpu:
        gram = gram64(w)
    else:
        from toolkit.metrics.gram import _gram

        gram = _gram(w.to(device=device))
    finite = np.isfinite(gram).all() if on_cpu else bool(torch.isfinite(gram).all())
    if not finite:
        raise DegenerateMatrix("matrix contains NaN/Inf")
    top = min(d, k + 1)
    if on_cpu:
        import scipy.linalg  # here, not at import: a quarter of a second that only a subspace comparison uses

        trace = float(np.trace(gram))
        lam, vec = scipy.linalg.eigh(gram, lower=True, subset_by_index=[d - top, d - 1], driver="evx",
                                     overwrite_a=True, check_finite=False)
        lam, vec = lam[::-1], vec[:, ::-1][:, :k].copy()  # positive strides (k = 1 included)
    else:
        trace = float(torch.trace(gram))
        lam_t, vec_t = torch.linalg.eigh(gram)
        lam, vec = lam_t.flip(0)[:top].cpu().numpy(), vec_t.flip(1)[:, :k]
    nxt = lam[k] if top > k else 0.0
    check_separated((lam[0], lam[k - 1], nxt), trace, (m, n), w.dtype, k)
    edge = _edge(float(lam[k - 1]), float(nxt), (m + n) * 2.0 ** -53 * float(lam[0]), scale)
    if on_cpu:
        if not wide:
            vec = _left_from_right(w, vec, lam[:k])
        return TopSubspace(torch.from_numpy(vec), *edge, True)
    if not wide:  # U_k = W V_k / sigma_k, row block by row block
        x = w.to(device=device)
        step = max(1, (1 << 22) // max(m, n))
        sig = torch.as_tensor(np.sqrt(lam[:k]), device=vec.device)
        vec = torch.cat([blk.to(torch.float64) @ vec for blk in x.split(step, dim=0)]) / sig
    return TopSubspace(vec.cpu(), *edge, True)


def _left_from_right(w: torch.Tensor, vec: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """:math:`U_k = W V_k / \\sigma_k` of a tall ``w``, row block by row block (the span is what counts;
    :math:`\\sigma_k` keeps it orthonormal)."""
    out = np.empty((w.shape[0], vec.shape[1]))
    row = 0
    for blk in float64_blocks(w, "block", entries=gram_module.PAIR_BLOCK):
        out[row: row + blk.shape[0]] = blk @ vec
        row += blk.shape[0]
    return out / np.sqrt(lam)


def top_left(w: torch.Tensor, k: int, *, device="cpu", tolerance: float = TOLERANCE,
             min_side: int | None = None) -> torch.Tensor:
    """The basis of :func:`top_subspace` (``.vectors``): shape (out, k), float64, on the CPU."""
    return top_subspace(w, k, device=device, tolerance=tolerance, min_side=min_side).vectors


def top_subspace(w: torch.Tensor, k: int, *, device="cpu", tolerance: float = TOLERANCE,
                 min_side: int | None = None, krylov: bool = True) -> TopSubspace:
    r"""Orthonormal basis of the top-``k`` left singular subspace of ``w``: block Krylov, exact fallback.

    Same subspace as :func:`exact_top_left` within the stated accuracy (module docstring): a bound
    :math:`\|\sin\Theta\|_2 \le` ``tolerance`` (default :data:`TOLERANCE` = 2.5e-6; the overlap is then
    within 1e-5), proven or a probability statement as :mod:`toolkit.metrics.krylov` says. Matrices with a
    smaller side below ``min_side``, a device other than the CPU, and matrices where the bound is not
    reached go the exact route; a Krylov result whose gap at ``k`` is not clear of the rounding rule
    (:func:`check_separated`) is decided by the exact route too.

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
        Any float dtype as stored (bf16 is converted block by block).
    k : int
        Clipped to ``min(out, in)``.
    device : str
    tolerance : float
    min_side : int, optional
        The smallest Gram side that takes the Krylov route (default :data:`MIN_KRYLOV_SIDE`; tests lower it).
    krylov : bool, default True
        False: the exact route without a Krylov attempt (a caller that knows the attempt would be given up,
        e.g. the fine-tuned side of a pair whose base gave it up: it costs time, never changes a value).

    Returns
    -------
    TopSubspace
        The basis, shape (out, k), float64, on the CPU, and the bounds on :math:`\sigma_k` and
        :math:`\sigma_{k+1}` (:class:`TopSubspace`).

    Raises
    ------
    DegenerateMatrix
        Non-finite entries, rank below ``k``, or a top-``k`` subspace that is not determined.
    """
    m, n = w.shape
    k = max(1, min(int(k), m, n))
    scale = gram_scale(w)
    w = in_gram_range(w)
    wide, d = gram_side(w)
    side = MIN_KRYLOV_SIDE if min_side is None else min_side
    if not krylov or torch.device(device).type != "cpu" or w.device.type != "cpu" or d < side:
        return _unscaled(exact_top_subspace(w, k, device=device), scale)
    found = krylov_top(w, k, tolerance=tolerance)
    if found is None:
        return _unscaled(exact_top_subspace(w, k, device=device), scale)._replace(krylov_gave_up=True)
    try:
        check_separated((found.values[0], found.values[-1], found.upper), found.trace, (m, n), w.dtype, k)
    except DegenerateMatrix:  # lambda+ bounds lambda_k+1 from above: the exact one decides
        return _unscaled(exact_top_subspace(w, k, device=device), scale)._replace(krylov_gave_up=True)
    vec = found.vectors
    if not wide:
        vec = _left_from_right(w, vec, found.values)
    edge = _edge(float(found.values[-1]), float(found.upper), (m + n) * 2.0 ** -53 * float(found.values[0]), scale)
    return TopSubspace(torch.from_numpy(np.ascontiguousarray(vec)), *edge, bool(found.proven))


def _unscaled(found: TopSubspace, scale: float) -> TopSubspace:
    """``found`` of ``w * scale`` (already in range: the exact route's own scale is 1) as ``w``'s."""
    return found if scale == 1.0 else found._replace(sigma_k=found.sigma_k / scale,
                                                      sigma_next=found.sigma_next / scale)
