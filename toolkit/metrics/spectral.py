"""Singular values, computed once per matrix, and the metrics built on them.

:func:`singular_values` is the one place the toolkit factorises a weight
matrix; every spectral metric (``spectral_norm``, ``stable_rank``,
``effective_rank``, ``condition_number``, ``alpha``) reads its result ``s``
(float64, descending, length ``min(m, n)``).
"""

from __future__ import annotations

import math

import torch

from toolkit.devices import resolve_device
from toolkit.metrics.gram import (  # noqa: F401 - _BUFFERS and reuse_buffers are used from here
    _BUFFERS,
    _gram,
    _gram_eigenvalues_cpu,
    _gram_eigenvalues_cpu32,
    _raise_nonfinite,
    gram_scale,
    reuse_buffers,
)
from toolkit.metrics.registry import DegenerateMatrix, register_metric, use_singular_values

# float64 input whose spectrum is worse conditioned than this is redone by SVD.
_GRAM_MAX_COND = 1e4
_EPS64 = torch.finfo(torch.float64).eps
_EPS32 = torch.finfo(torch.float32).eps
#: The precisions of the Gram route (``singular_values(..., precision=)``).
PRECISIONS = ("float64", "float32")
#: The self-certifying mode of :func:`~toolkit.metrics.evaluate.evaluate_matrix` and ``weight_stats``: float32
#: Gram where :mod:`toolkit.metrics.certificate` certifies a cell, float64 elsewhere.
CERTIFIED = "float32-certified"
#: Every ``precision=`` a pass takes.
PASS_PRECISIONS = (*PRECISIONS, CERTIFIED)


def precision_floor(shape: tuple[int, int], precision: str = "float64") -> float:
    r"""The accuracy floor of the Gram route, relative to :math:`\sigma_{max}`: :math:`\sqrt{\max(m, n)\,\epsilon}`.

    Singular values at or below ``floor * sigma_max`` are not resolved by the
    Gram route in that precision (``epsilon`` of float64 or float32):
    :func:`singular_values` sets them to 0 in float64; in float32 see
    :func:`float32_resolves`.
    """
    eps = _EPS32 if precision == "float32" else _EPS64
    return math.sqrt(max(shape) * eps)


#: Metrics that read the smallest singular values (condition number, the numerical rank and what
#: is normalised by it), which the float32 Gram route resolves only for well-conditioned matrices.
SMALL_VALUE_METRICS = frozenset({"condition_number", "matrix_rank", "rank_loss", "spectral_entropy"})

#: float32 Gram results are trusted for :data:`SMALL_VALUE_METRICS` only when sigma_min is at
#: least this many times the float32 rounding level f = sqrt(sqrt(max(m, n)) eps32) sigma_max:
#: then the relative error of sigma_min, about (f / sigma_min)^2 / 2, is at most 1 / (2 * 70^2) = 1e-4.
FLOAT32_MARGIN = 70.0


def float32_resolves(s: torch.Tensor, shape: tuple[int, int]) -> str:
    r"""Why a float32 spectrum cannot give the metrics of its smallest singular values (``""`` when it can).

    Parameters
    ----------
    s : torch.Tensor, shape (k,)
        Singular values from ``singular_values(..., precision="float32")``, descending.
    shape : (int, int)
        The matrix shape.

    Returns
    -------
    str
        ``""`` when :math:`\sigma_{min} \ge 70 f`,
        :math:`f = \sqrt{\sqrt{\max(m,n)}\,\epsilon_{32}}\,\sigma_{max}` (then every
        singular value is resolved, the matrix has full numerical rank, and
        :math:`\kappa` is known to about 1e-4 relative), else the reason to
        record with the NaN of those metrics.

    Notes
    -----
    An eigenvalue of a float32 Gram matrix carries an absolute error of
    about :math:`\sqrt{\max(m,n)}\,\epsilon_{32}\,\sigma_{max}^2` (rounding errors of
    the products add up like a random walk; the worst case is :math:`\max(m,n)`
    times :math:`\epsilon_{32}\sigma_{max}^2`), so :math:`\sigma_i` has a relative
    error of about :math:`(f / \sigma_i)^2 / 2`. Measured on random bf16
    matrices of 7B shapes: 512 x 3584 and 18944 x 3584
    (:math:`\sigma_{min}/\sigma_{max}` 0.46 and 0.40) give :math:`\sigma_{min}`
    within 1e-6 of float64; 3584 x 3584 (2.7e-4) gives 0 (unresolved). Below
    70 f the condition number, the numerical rank (NumPy's tolerance
    :math:`\max(m,n)\,\epsilon_{64}\,\sigma_{max}` is far below f) and the entropy
    normalised by it cannot be trusted.
    """
    if s is None or s.numel() == 0 or float(s[0]) == 0.0:
        return ""  # the metric itself says why
    floor = math.sqrt(math.sqrt(max(shape)) * _EPS32)
    ratio = float(s[-1]) / float(s[0])
    if ratio >= FLOAT32_MARGIN * floor:
        return ""
    return (f"precision='float32' resolves sigma_min only above {FLOAT32_MARGIN * floor:.2g} sigma_max here "
            f"(found {ratio:.2g}, condition number > {1 / (FLOAT32_MARGIN * floor):.3g}); rerun with "
            "precision='float64'")


def singular_values(w: torch.Tensor, *, device="cpu", method: str = "auto",
                    precision: str = "float64") -> torch.Tensor:
    r"""Singular values of a weight matrix, descending, as float64 on the CPU.

    Parameters
    ----------
    w : torch.Tensor, shape (m, n)
        Any floating dtype; not modified.
    device : str or torch.device, default "cpu"
        Where to compute (``"cuda"``, ``"cuda:1"``, ``"auto"`` = CUDA when
        available). The result always comes back to the CPU.
    method : {"auto", "gram", "svd"}
        ``"gram"``: :math:`\sigma_i = \sqrt{\lambda_i(G)}` with
        :math:`G = WW^\top` or :math:`W^\top W` (the smaller one, min(m, n)
        squared), formed and diagonalised (``eigvalsh``) in float64.
        ``"svd"``: ``torch.linalg.svdvals`` in the input's precision (at least
        float32). ``"auto"``: Gram, except that float64 input whose spectrum
        is worse conditioned than 1e4 is redone by float64 SVD.
    precision : {"float64", "float32"}, default "float64"
        Of the Gram route's product. ``"float32"`` forms the Gram matrix in
        float32 and diagonalises it in float64 (faster on large
        shapes: ``benchmarks/README.md``; see Notes for what it resolves); no SVD fallback, no zeroing
        below the floor (negative eigenvalues are clipped to 0).

    Returns
    -------
    torch.Tensor, shape (min(m, n),), float64
        Descending. Values below the route's accuracy floor are set to 0
        (see Notes), so a rank-deficient matrix has exact zeros.

    Raises
    ------
    DegenerateMatrix
        NaN/Inf entries, an empty matrix or a tensor that is not 2-D.

    Notes
    -----
    *Cost.* The Gram route costs :math:`mnk` flops of matrix product (BLAS 3,
    the fastest kernel there is) plus a :math:`k \times k` symmetric
    eigensolve, :math:`k = \min(m, n)`; the SVD route bidiagonalises the
    whole :math:`m \times n` matrix (:math:`\approx 4mnk` flops, largely
    memory bound), so the Gram route is the faster one except for small or
    very tall matrices, where the two are about equal (measured figures:
    ``benchmarks/README.md``). On the CPU :math:`G` is formed with BLAS ``dsyrk`` (NumPy's ``b.T @ b``,
    :math:`mnk/2` multiply-adds, only the symmetric half) and diagonalised
    with ``numpy.linalg.eigvalsh``, both releasing the GIL (and faster than
    ``addmm_`` + ``torch.linalg.eigvalsh`` on one core).

    *Accuracy.* Forming :math:`G` squares the condition number. The
    eigenvalues carry an absolute error
    :math:`\delta\lambda \approx c\,\epsilon_{64}\,\sigma_{max}^2` (``c`` a
    small multiple of 1, at worst about :math:`m + n`: the product's and the
    eigensolver's; ``tests/metrics/test_fast_route_properties.py``), a relative error
    :math:`c\,\epsilon_{64}\,\kappa_i^2/2` on :math:`\sigma_i`,
    :math:`\kappa_i = \sigma_{max}/\sigma_i`: about 1e-8 at
    :math:`\kappa_i = 10^4`. Smaller :math:`\sigma_i` keep an absolute error
    :math:`\le \sqrt{c\,\epsilon_{64}}\,\sigma_{max}` (at worst ~1e-6
    :math:`\sigma_{max}` for 4096 x 11008), no worse than a float32 SVD's own
    :math:`\sim\max(m,n)\,\epsilon_{32}\,\sigma_{max}`. So for float32 (or
    lower-precision) weights, Gram-in-float64 is at least as accurate as the
    SVD in their precision, and never slower; by default it is never done in
    float32. Only float64 input can ask for more, hence the SVD fallback for
    ill-conditioned float64 input. Accuracy floors (values at or below
    become 0): Gram, :math:`\sqrt{\max(m,n)\,\epsilon_{64}}\,\sigma_{max}`;
    SVD, :math:`\max(m,n)\,\epsilon\,\sigma_{max}` (the NumPy
    ``matrix_rank`` tolerance).

    *precision="float32".* :math:`G` formed in float32 (``ssyrk``), then
    widened and diagonalised in float64 (``dsyevd``): the product is most of
    the work for tall matrices, where ``ssyrk`` is about twice as fast as
    ``dsyrk`` (figures: ``benchmarks/bench_scale.py --shapes 7b``, published
    in ``benchmarks/README.md``). The eigenvalues then carry an
    absolute error of about :math:`\sqrt{\max(m,n)}\,\epsilon_{32}\,\sigma_{max}^2`
    (measured: 2e-7 to 3e-7 relative on the tail of random 7B-shape
    matrices), so the large singular values, and with them the spectral
    norm, stable rank, effective rank and the power-law fit of the tail,
    agree with float64 to about 1e-5 (alpha); the smallest ones do not,
    which :func:`float32_resolves` judges for the metrics that read them.
    The eigensolve is not done in float32: ``ssyevd`` itself moved the tail
    by 1e-5 to 3e-5 relative and alpha by up to 0.14 on the same matrices
    (``docs/scaling.md``).

    *Device.* On CUDA the same Gram route runs on the GPU in torch
    (``addmm_`` + ``torch.linalg.eigvalsh``; fast on data-centre GPUs,
    consumer GPUs have slow float64).

    Examples
    --------
    >>> singular_values(torch.eye(3))
    tensor([1., 1., 1.], dtype=torch.float64)
    """
    if w.ndim != 2 or w.numel() == 0:
        raise DegenerateMatrix(f"expected a non-empty 2-D matrix, got shape {tuple(w.shape)}")
    if method not in ("auto", "gram", "svd"):
        raise ValueError(f"method must be 'auto', 'gram' or 'svd', got {method!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'float64' or 'float32', got {precision!r}")
    if not w.is_floating_point():
        w = w.to(torch.float32)
    w = w.to(resolve_device(device))
    scale = gram_scale(w) if method != "svd" else 1.0
    if scale != 1.0:  # a float64 matrix whose Gram leaves float64's range: scaled by a power of two (exact)
        return singular_values(w * scale, device=device, method=method, precision=precision) / scale
    m, n = w.shape
    big = max(m, n)
    if method == "svd":
        s = _svd(w)
    elif precision == "float32":
        if w.device.type == "cpu":
            lam = _gram_eigenvalues_cpu32(w)
        else:
            g = _gram(w, torch.float32)
            if not bool(torch.isfinite(g).all()):
                _raise_nonfinite(w)
            lam = torch.linalg.eigvalsh(g.to(torch.float64))
        s = lam.flip(0).clamp_min_(0.0).sqrt_()
    else:
        if w.device.type == "cpu":
            lam = _gram_eigenvalues_cpu(w)
        else:
            g = _gram(w)
            if not bool(torch.isfinite(g).all()):
                _raise_nonfinite(w)
            lam = torch.linalg.eigvalsh(g)
        s = lam.flip(0).clamp_min_(0.0).sqrt_()
        if method == "auto" and w.dtype == torch.float64 and s.numel() > 1 \
                and float(s[-1]) <= float(s[0]) / _GRAM_MAX_COND:
            s = _svd(w)
        else:
            s = resolved(s, big)
    return s.cpu()


def resolved(s: torch.Tensor, big: int) -> torch.Tensor:
    r"""``s`` (descending singular values from a float64 Gram matrix) with the values at or below the Gram
    route's floor :math:`\sqrt{\max(m, n)\,\epsilon_{64}}\,\sigma_{max}` set to 0 (in place), ``big`` = max(m, n)."""
    s[s <= math.sqrt(big * _EPS64) * float(s[0])] = 0.0
    return s


def difference_singular_values(base: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    r"""Singular values of :math:`\Delta W = T - B` of two CPU tensors as stored, float64, descending.

    The route of :func:`singular_values` (``method="gram"``, float64): one
    float64 Gram matrix of :math:`\Delta W`, summed from float64 blocks of the
    difference (:func:`toolkit.metrics.gram.float64_blocks`; no float32 or
    float64 copy of either side or of :math:`\Delta W`), and ``eigvalsh``.
    Same accuracy and floor as :func:`singular_values`; :math:`\Delta W` is
    formed in float64, exact for bf16/fp16/float32 values.

    Raises
    ------
    DegenerateMatrix
        NaN/Inf entries, an empty matrix or a tensor that is not 2-D.
    """
    if base.ndim != 2 or base.numel() == 0:
        raise DegenerateMatrix(f"expected a non-empty 2-D matrix, got shape {tuple(base.shape)}")
    scale = gram_scale(base, target)
    if scale != 1.0:  # float64 sides whose difference's Gram could leave float64's range (gram_scale)
        return difference_singular_values(base * scale, target * scale) / scale
    s = _gram_eigenvalues_cpu(target, base).flip(0).clamp_min_(0.0).sqrt_()
    return resolved(s, max(base.shape))


def _svd(w: torch.Tensor) -> torch.Tensor:
    x = w if w.dtype in (torch.float32, torch.float64) else w.to(torch.float32)
    s = torch.linalg.svdvals(x).to(torch.float64)
    if not bool(torch.isfinite(s).all()):
        _raise_nonfinite(w)
    s[s <= max(x.shape) * torch.finfo(x.dtype).eps * float(s[0])] = 0.0
    return s


def _top(s: torch.Tensor, name: str) -> float:
    if s is None or s.numel() == 0:
        raise DegenerateMatrix("no singular values", name)
    top = float(s[0])
    if top == 0.0:
        raise DegenerateMatrix("all-zero matrix", name)
    return top


def spectral_norm(w, s: torch.Tensor) -> float:
    r"""Spectral norm :math:`\|W\|_2 = \sigma_{max}`.

    Notes
    -----
    WeightWatcher's column named ``spectral_norm`` is :math:`\sigma_{max}^2`
    (= :math:`\lambda_{max}`, the largest eigenvalue of :math:`W^\top W`);
    this metric is :math:`\sigma_{max}` itself. The zero matrix has norm 0.

    References
    ----------
    Golub & Van Loan, *Matrix Computations*, 4th ed. (2013), eq. 2.3.8.
    """
    if s is None or s.numel() == 0:
        raise DegenerateMatrix("no singular values", "spectral_norm")
    return float(s[0])


def stable_rank(w, s: torch.Tensor) -> float:
    r"""Stable (numerical) rank :math:`\|W\|_F^2 / \|W\|_2^2 = \sum_i \sigma_i^2 / \sigma_{max}^2`.

    Between 1 (rank one) and :math:`\min(m, n)` (all singular values equal).
    Same as WeightWatcher's ``stable_rank`` (``norm / spectral_norm`` there,
    both in squared units).

    Raises
    ------
    DegenerateMatrix
        All-zero matrix (0/0).

    References
    ----------
    Rudelson, M. & Vershynin, R. (2007). Sampling from large matrices: an
    approach through geometric functional analysis. *J. ACM* 54(4), 21.
    """
    top = _top(s, "stable_rank")
    return float(((s / top) ** 2).sum())


def effective_rank(w, s: torch.Tensor) -> float:
    r"""Effective rank :math:`\exp H(p)`, :math:`p_i = \sigma_i / \sum_j \sigma_j`.

    Notes
    -----
    :math:`H(p) = -\sum_i p_i \ln p_i` (Shannon entropy, nats, with
    :math:`0 \ln 0 = 0`). Between 1 (rank one) and :math:`\min(m, n)`.

    Raises
    ------
    DegenerateMatrix
        All-zero matrix.

    References
    ----------
    Roy, O. & Vetterli, M. (2007). The effective rank: a measure of effective
    dimensionality. *EUSIPCO 2007*, 606-610, Definition 1.
    """
    _top(s, "effective_rank")
    p = s[s > 0]
    p = p / p.sum()
    return float(torch.exp(-(p * torch.log(p)).sum()))


def condition_number(w, s: torch.Tensor) -> float:
    r"""Condition number :math:`\kappa = \sigma_{max} / \sigma_{min}` over the :math:`\min(m, n)` values.

    Notes
    -----
    A rank-deficient matrix (:math:`\sigma_{min} = 0`, i.e. below the accuracy
    floor of :func:`singular_values`) has :math:`\kappa = +\infty`, which is
    its mathematical value, so ``inf`` is returned, not NaN.

    Raises
    ------
    DegenerateMatrix
        All-zero matrix (0/0).

    References
    ----------
    Golub & Van Loan, *Matrix Computations*, 4th ed. (2013), sec. 2.6.2.
    """
    top = _top(s, "condition_number")
    low = float(s[-1])
    return math.inf if low == 0.0 else top / low


use_singular_values(singular_values)  # what Metric.evaluate computes a spectral metric from when given none
register_metric(
    "spectral_norm",
    spectral_norm,
    long_name="spectral norm",
    units="1",
    description="||W||_2 = sigma_max, the largest singular value (WeightWatcher's 'spectral_norm' is sigma_max^2)",
    reference="Golub & Van Loan, Matrix Computations (2013), eq. 2.3.8",
    needs_singular_values=True,
)
register_metric(
    "stable_rank",
    stable_rank,
    long_name="stable rank",
    units="1",
    description="||W||_F^2 / sigma_max^2 = sum_i sigma_i^2 / sigma_max^2",
    reference="Rudelson & Vershynin (2007), J. ACM 54(4):21",
    needs_singular_values=True,
)
register_metric(
    "effective_rank",
    effective_rank,
    long_name="effective rank",
    units="1",
    description="exp(-sum_i p_i ln p_i), p_i = sigma_i / sum_j sigma_j",
    reference="Roy & Vetterli (2007), EUSIPCO, Definition 1",
    needs_singular_values=True,
)
register_metric(
    "condition_number",
    condition_number,
    long_name="condition number",
    units="1",
    description="sigma_max / sigma_min over min(m, n) singular values; inf when rank-deficient",
    reference="Golub & Van Loan, Matrix Computations (2013), sec. 2.6.2",
    needs_singular_values=True,
)
