r"""An a-posteriori bound on how far the float32-Gram eigenvalues can be from the float64 route's.

:func:`certified_spectrum` forms the smaller Gram matrix :math:`\hat G` of
:math:`W` in float32 (one BLAS ``ssyrk``), diagonalises it in float64, and
bounds, for every :math:`i`, the distance between its eigenvalues
:math:`\hat\lambda_i` and the ones the float64 route
(:func:`~toolkit.metrics.spectral.singular_values`, ``precision="float64"``)
computes, :math:`\tilde\lambda_i` (both sorted), by one number
:math:`\delta` (:class:`EigenvalueBound`). Three parts, by the triangle
inequality through the exact eigenvalues :math:`\lambda_i` of
:math:`G = W^\top W`:

``gram``
    :math:`\|\hat G - G\|_2`, the float32 product's rounding error, so that
    :math:`|\lambda_i(\hat G) - \lambda_i| \le \|\hat G - G\|_2` (Weyl's
    theorem: Horn & Johnson, *Matrix Analysis*, 2nd ed., Thm 4.3.1). It is
    *measured*, not taken from an a-priori bound: the a-priori bound
    :math:`|\hat G - G| \le \gamma_K |W|^\top|W|` (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2nd ed., 2002, eq. (3.13)) gives
    :math:`\gamma_K \|W\|_F^2`, about 0.2 :math:`\lambda_{max}` on a random
    3584 x 3584 matrix, where the error is 3e-7 :math:`\lambda_{max}`. Here
    :math:`r` Gaussian probes :math:`\omega_j` give
    :math:`E\omega_j = \hat G\omega_j - A^\top(A\omega_j)`, :math:`E = \hat G - G`,
    the second product in float64 from the float32 entries (exact), and for
    any matrix :math:`B`, :math:`\|B\|_2 \le a\sqrt{2/\pi}\,\max_j \|B\omega_j\|`
    except with probability :math:`a^{-r}` (Halko, Martinsson & Tropp 2011,
    *SIAM Review* 53(2), Lemma 4.1; Woolfe, Liberty, Rokhlin & Tygert 2008):
    :math:`r = 24`, :math:`a = 3`. With :math:`B = E` this sees about
    :math:`\|E\|_F`, some :math:`\sqrt{k}` times :math:`\|E\|_2` for a
    random-like :math:`E`; with :math:`B = E^3` (:math:`E` symmetric, so
    :math:`\|E^3\|_2 = \|E\|_2^3`; three passes over :math:`W`) the cube root
    is within a small factor of :math:`\|E\|_2`. The smaller of the two is
    used: a failure probability of at most :math:`2 \cdot 3^{-24} \approx 7 \cdot 10^{-12}`
    per matrix, over the probes (no model of the rounding errors is
    assumed), drawn from a seed hashed from the matrix
    (:func:`~toolkit.metrics.gram.data_seed`), not a constant. The float64 rounding of each product,
    :math:`\le \gamma^{(64)}_{2(K+k)+b}(\|W\|_F^2 + \|\hat G\|_F)\|y\|`
    per column :math:`y` (Higham eq. (3.13), Lemma 3.3), is added, carried
    through the powers with the first bound on :math:`\|E\|_2`.
``solver``
    the float64 eigensolver's backward error on :math:`\hat G`: the computed
    values are exact for :math:`\hat G + F`, :math:`\|F\|_2 \le p(k)\,u_{64}\|\hat G\|_2`
    (LAPACK Users' Guide, 3rd ed., sec. 4.7; Demmel, *Applied Numerical
    Linear Algebra*, 1997, sec. 5.2), with the generous :math:`p(k) = k^2`
    (the LUG's error bounds take :math:`p(k) = 1`): at most 3e-9
    :math:`\lambda_{max}` for k = 3584, far below ``gram``.
``reference``
    the float64 route's own distance to the exact :math:`\lambda_i`: its
    blocked ``dsyrk``, :math:`\gamma^{(64)}_K\|W\|_F^2` (rigorous), its
    ``dsyevd``, :math:`k^2 u_{64}\lambda_{max}`, and its zeroing of
    :math:`\sigma \le \sqrt{\max(m,n)\,\epsilon_{64}}\,\sigma_{max}`
    (:math:`\max(m,n)\,\epsilon_{64}\lambda_{max}`).

Then :math:`|\hat\lambda_i - \tilde\lambda_i| \le \delta` = the sum, for every
:math:`i` (the clipping of negative values to 0, done by both routes, only
moves a value towards the exact one, which is :math:`\ge 0`).

Notation: :math:`G = A^\top A`, :math:`A = W` when :math:`m > n`, else
:math:`W^\top`; :math:`K = \max(m, n)`, :math:`k = \min(m, n)`; :math:`u_{64} = 2^{-53}`,
:math:`\gamma_K = K u / (1 - K u)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from toolkit.metrics.gram import _eigvalsh, data_seed, float64_blocks, gram32_cpu, gram_side
from toolkit.metrics.registry import DegenerateMatrix

U64 = 2.0**-53
#: Gaussian probes of the Gram error and the factor ``a`` of the bound (failure probability ``a ** -PROBES``).
PROBES = 24
PROBE_FACTOR = 3.0
#: A fixed seed a caller may pass (``seed=PROBE_SEED``). By default the probes' seed is drawn from the matrix
#: (gram.data_seed): a cell's certificate stays reproducible, and no constant in the source fixes the probes a
#: matrix could be built against (issue 42).
PROBE_SEED = 20240529


def gamma(n: float, u: float = U64) -> float:
    """Higham's :math:`\\gamma_n = nu / (1 - nu)` (Accuracy and Stability, eq. (3.8))."""
    nu = n * u
    if nu >= 1.0:
        return math.inf
    return nu / (1.0 - nu)


@dataclass(frozen=True)
class EigenvalueBound:
    r"""How far every float32-route eigenvalue can be from the float64 route's.

    Attributes
    ----------
    delta : float
        :math:`\delta`: :math:`|\hat\lambda_i - \tilde\lambda_i| \le \delta` for
        every i (sorted eigenvalues of :math:`W^\top W`), the sum of the three below.
    gram : float
        Bound on :math:`\|\hat G - G\|_2` (probabilistic over the probes, see the module docstring).
    solver : float
        The float64 eigensolver's backward error on :math:`\hat G`.
    reference : float
        The float64 route's own error (product, eigensolver, zeroing floor).
    frobenius2 : float
        :math:`\|W\|_F^2`, summed in float64 from the entries.
    frobenius2_error : float
        Bound on the rounding error of ``frobenius2`` (:math:`\gamma^{(64)}_{mn}\|W\|_F^2`).
    """

    delta: float
    gram: float
    solver: float
    reference: float
    frobenius2: float
    frobenius2_error: float


def certified_spectrum(w: torch.Tensor, *, probes: int = PROBES, seed: int | None = None,
                       accept=None) -> tuple[np.ndarray, EigenvalueBound]:
    r"""Eigenvalues of :math:`W^\top W` from a float32 Gram matrix, with the bound :math:`\delta` on their error.

    Parameters
    ----------
    w : torch.Tensor, shape (m, n), float32, on the CPU
        Not modified.
    probes : int, default 24
        Gaussian probes of the Gram error (the failure probability of
        ``gram`` is at most :math:`2 \cdot 3^{-probes}`).
    seed : int, optional
        Of the probes; default :func:`~toolkit.metrics.gram.data_seed` of ``w`` (drawn from the matrix, not
        a constant: the probability statement is over the probes, for a matrix not built knowing them).
    accept : callable, optional
        ``accept(lam, bound) -> bool`` with the one-pass bound (:math:`B = E`):
        True returns it, skipping the two more passes of :math:`B = E^3`
        (e.g. when the certificate already holds with it). Default: always
        the tighter bound.

    Returns
    -------
    lam : numpy.ndarray, shape (min(m, n),), float64
        Descending; negative values clipped to 0.
    bound : EigenvalueBound

    Raises
    ------
    DegenerateMatrix
        NaN/Inf entries or a product that overflows float32.
    ValueError
        A tensor that is not a float32 CPU matrix.

    Notes
    -----
    Cost beyond the float32 route: one or three passes over :math:`W` in float64
    blocks, each two products with the ``probes`` columns (:math:`4Kk\cdot probes`
    flops, BLAS 3) and one with :math:`\hat G` (:math:`2k^2 \cdot probes`).
    """
    if w.ndim != 2 or w.dtype != torch.float32 or w.device.type != "cpu":
        raise ValueError(f"certified_spectrum needs a float32 CPU matrix, got {w.dtype} {tuple(w.shape)} "
                         f"on {w.device}")
    m, n = (int(d) for d in w.shape)
    big, k = max(m, n), min(m, n)
    g = gram32_cpu(w)  # float64 copy of the float32 product (a reused buffer)
    omega = np.random.default_rng(data_seed(w) if seed is None else seed).standard_normal((k, probes))
    g_fro = float(np.linalg.norm(g))
    c = PROBE_FACTOR * math.sqrt(2.0 / math.pi)
    ys, slips, fro2 = [omega], [], None

    def step():  # y_{t+1} = (G^ - AᵀA) y_t in float64, and the bound on its rounding per column
        nonlocal fro2
        y = ys[-1]
        a_y, f2, blocks = _exact_products(w, y)
        fro2 = f2 if fro2 is None else fro2
        ys.append(g @ y - a_y)
        # Higham eq. (3.13) on the products, Lemma 3.3 for the chain
        rnd = gamma(2 * (big + k) + blocks + 4) * (fro2 * (1 + gamma(m * n)) + g_fro)
        slips.append(rnd * np.linalg.norm(y, axis=0))
        return np.linalg.norm(ys[-1], axis=0) * (1 + gamma(k + 2))

    one = c * float(np.max(step() + slips[0]))  # ||E|| <= c max ||E w_j||: HMT Lemma 4.1 with B = E
    lam = _eigvalsh(g).numpy()[::-1].copy()
    top = max(abs(float(lam[0])), abs(float(lam[-1])))
    np.clip(lam, 0.0, None, out=lam)
    bound = _bound(one, top, big, k, m * n, fro2)
    if accept is not None and accept(lam, bound):
        return lam, bound
    step()
    # B = E^3 (E symmetric: ||E^3|| = ||E||^3): E^3 w = y3 - E^2 e1 - E e2 - e3, ||E|| <= one
    cube = step() + one * one * slips[0] + one * slips[1] + slips[2]
    return lam, _bound(min(one, (c * float(np.max(cube))) ** (1.0 / 3.0)), top, big, k, m * n, fro2)


def _bound(gram: float, top: float, big: int, k: int, mn: int, fro2: float) -> EigenvalueBound:
    """The :class:`EigenvalueBound` of a Gram-error bound ``gram`` (module docstring)."""
    solver = gamma(k * k) * top
    top_exact = top + solver + gram
    # the float64 route: its product, its eigensolver, its zeroing floor max(m, n) eps64 lambda_max (eps64 = 2 u64)
    reference = gamma(big) * fro2 * (1 + gamma(mn)) + gamma(k * k) * top_exact + 4 * big * U64 * top_exact
    return EigenvalueBound(gram + solver + reference, gram, solver, reference, fro2, gamma(mn) * fro2)


def _exact_products(w: torch.Tensor, omega: np.ndarray) -> tuple[np.ndarray, float, int]:
    r""":math:`A^\top(A\Omega)` and :math:`\|W\|_F^2` in float64, by blocks of rows of :math:`A`."""
    wide, _ = gram_side(w)  # wide: G = W Wᵀ, A = Wᵀ, blocks of columns of W
    out = np.zeros_like(omega)
    fro2 = 0.0
    count = 0
    for x in float64_blocks(w, "probe_block"):
        if wide:
            out += x @ (x.T @ omega)
        else:
            out += x.T @ (x @ omega)
        flat = x.reshape(-1)
        fro2 += float(flat @ flat)
        count += 1
    if not math.isfinite(fro2):
        raise DegenerateMatrix("entries too large: ||W||_F^2 overflows float64")
    return out, fro2, count
