"""Singular values, computed once per matrix, and the metrics built on them.

:func:`singular_values` is the one place the toolkit factorises a weight
matrix; every spectral metric (``spectral_norm``, ``stable_rank``,
``effective_rank``, ``condition_number``, ``alpha``) reads its result ``s``
(float64, descending, length ``min(m, n)``).
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np
import torch

from toolkit.metrics.registry import DegenerateMatrix, register_metric

# Elements of W per float64 block while forming the Gram matrix (32 MiB; two
# passes may run at once, see toolkit.collect.stream).
_GRAM_BLOCK = 1 << 22
# float64 input whose spectrum is worse conditioned than this is redone by SVD.
_GRAM_MAX_COND = 1e4
_EPS64 = torch.finfo(torch.float64).eps


def _resolve_device(device) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_device(device, *, available: bool = True) -> torch.device:
    """The ``torch.device`` named by ``device``, checked before any work.

    Parameters
    ----------
    device : str, torch.device or None
        ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` (CUDA when available)
        or None (= ``"auto"``).
    available : bool, default True
        Also check that this process can use it (False for a driver that
        hands the work to Dask workers, which may have GPUs it lacks).

    Raises
    ------
    ToolkitError
        An unknown device string, a device type other than CPU or CUDA, or a
        CUDA device this process cannot use (no CUDA build of torch, no
        GPU, or an index beyond the GPUs present).
    """
    from toolkit.errors import ToolkitError

    try:
        dev = _resolve_device(device)
    except (RuntimeError, TypeError) as exc:
        raise ToolkitError(f"invalid device {device!r} ({exc}); use 'cpu', 'cuda', 'cuda:N' or 'auto'") from None
    if dev.type not in ("cpu", "cuda"):
        raise ToolkitError(f"device {device!r}: the spectral work runs on 'cpu' or 'cuda', not {dev.type!r}")
    if available and dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA" if torch.version.cuda is None
                   else "torch sees no GPU (torch.cuda.is_available() is False)")
            raise ToolkitError(f"device {device!r} is not available: {why}; pass device='cpu' "
                               "(or 'auto', which picks CUDA only when it is there)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ToolkitError(f"device {device!r} is not available: {torch.cuda.device_count()} GPU(s) here")
    return dev


def _gram(w: torch.Tensor) -> torch.Tensor:
    """The smaller Gram matrix, W Wᵀ or WᵀW, accumulated in float64 by blocks."""
    m, n = w.shape
    wide = m <= n  # (m, m) = W Wᵀ; else (n, n) = WᵀW
    k = m if wide else n
    g = torch.zeros(k, k, dtype=torch.float64, device=w.device)
    step = max(1, _GRAM_BLOCK // k)
    for blk in (w.split(step, dim=1) if wide else w.split(step, dim=0)):
        b = blk.to(torch.float64)
        g.addmm_(b, b.T) if wide else g.addmm_(b.T, b)
    return g


class _GramBuffers(threading.local):
    """Per-thread float64 buffers of the CPU Gram route, reused from matrix to matrix
    inside :func:`reuse_buffers`.

    A pass measures hundreds of matrices of a few shapes; allocating the
    32 MiB block and the Gram matrix afresh for each made glibc raise its
    mmap threshold and serve them from the heap, where freed blocks of two
    threads fragmented it: peak RSS grew by ~400 MiB over a 28-layer pass
    (benchmarks/bench_scale.py, 'all' mode). Outside :func:`reuse_buffers`
    (a notebook's main thread, a Dask worker's) each call gets fresh
    buffers, so no thread holds hundreds of MiB between calls.
    """

    depth = 0

    def take(self, name: str, size: int) -> np.ndarray:
        if not self.depth:
            return np.empty(size, dtype=np.float64)
        buf = getattr(self, name, None)
        if buf is None or buf.size < size:
            setattr(self, name, None)  # free the old one first
            buf = np.empty(size, dtype=np.float64)
            setattr(self, name, buf)
        return buf[:size]

    def release(self) -> None:
        for name in [k for k in vars(self) if k != "depth"]:
            delattr(self, name)


@contextlib.contextmanager
def reuse_buffers():
    """Within this context, the calling thread keeps its Gram buffers from one matrix to the next
    (freed when the outermost context of the thread exits).

    Used by each pipeline thread of a pass (:class:`toolkit.collect.executors.SerialExecutor`).
    """
    _BUFFERS.depth += 1
    try:
        yield
    finally:
        _BUFFERS.depth -= 1
        if not _BUFFERS.depth:
            _BUFFERS.release()


_BUFFERS = _GramBuffers()


def _gram_eigenvalues_cpu(w: torch.Tensor) -> torch.Tensor:
    """Eigenvalues (ascending, float64) of the smaller Gram matrix of a CPU tensor.

    Blocks as :func:`_gram`, in NumPy, in reused buffers (:class:`_GramBuffers`):
    each block is converted into one float64 buffer and ``b.T @ b`` (one
    buffer, once transposed) makes NumPy call BLAS ``dsyrk``, the symmetric
    product in half the flops of a general one; ``numpy.linalg.eigvalsh``
    then diagonalises the sum. Both release the GIL, so two passes run side
    by side. On one core this is 1.5-2x faster than ``addmm_`` +
    ``torch.linalg.eigvalsh`` for 576-1536 wide matrices. (SciPy's in-place
    ``dsyrk``/``dsyevd`` would save the product buffer, but its BLAS ran two
    threads' calls 1.3-2x slower than NumPy's on this machine.)
    """
    m, n = w.shape
    wide = m <= n
    k = m if wide else n
    step = max(1, _GRAM_BLOCK // k)
    g = _BUFFERS.take("gram", k * k).reshape(k, k)
    g.fill(0.0)
    product = _BUFFERS.take("product", k * k).reshape(k, k)
    block = _BUFFERS.take("block", k * min(step, n if wide else m))
    for blk in (w.split(step, dim=1) if wide else w.split(step, dim=0)):
        rows, cols = blk.shape
        b = torch.from_numpy(block[: rows * cols]).view(rows, cols)
        b.copy_(blk)
        x = b.numpy()
        if wide:
            np.matmul(x, x.T, out=product)
        else:
            np.matmul(x.T, x, out=product)
        g += product
    if not np.isfinite(g).all():
        _raise_nonfinite(w)
    return torch.from_numpy(np.linalg.eigvalsh(g))


def singular_values(w: torch.Tensor, *, device="cpu", method: str = "auto") -> torch.Tensor:
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
    memory bound). Measured on 2 shared CPU cores: 2048 x 2048, 2-4 s
    against ~10 s (float32 ``svdvals``); 2048 x 8192, ~10 s against 30-60 s;
    about equal for small or very tall float32 matrices (3072 x 768).
    On the CPU :math:`G` is formed with BLAS ``dsyrk`` (NumPy's ``b.T @ b``,
    :math:`mnk/2` multiply-adds, only the symmetric half) and diagonalised
    with ``numpy.linalg.eigvalsh``, both releasing the GIL (one core:
    1536 x 576, 26 ms against 44 ms for ``addmm_`` + ``torch.linalg.eigvalsh``;
    8960 x 1536, 0.7 s against 1.1 s).

    *Accuracy.* Forming :math:`G` squares the condition number. The
    eigenvalues carry an absolute error
    :math:`\delta\lambda \approx c\,\epsilon_{64}\,\sigma_{max}^2` (``c`` a
    small multiple of 1, at worst :math:`\max(m, n)`), a relative error
    :math:`c\,\epsilon_{64}\,\kappa_i^2/2` on :math:`\sigma_i`,
    :math:`\kappa_i = \sigma_{max}/\sigma_i`: about 1e-8 at
    :math:`\kappa_i = 10^4`. Smaller :math:`\sigma_i` keep an absolute error
    :math:`\le \sqrt{c\,\epsilon_{64}}\,\sigma_{max}` (at worst ~1e-6
    :math:`\sigma_{max}` for 4096 x 11008), no worse than a float32 SVD's own
    :math:`\sim\max(m,n)\,\epsilon_{32}\,\sigma_{max}`. So for float32 (or
    lower-precision) weights, Gram-in-float64 is at least as accurate as the
    SVD in their precision, and never slower; it is never done in float32.
    Only float64 input can ask for more, hence the SVD fallback for
    ill-conditioned float64 input. Accuracy floors (values at or below
    become 0): Gram, :math:`\sqrt{\max(m,n)\,\epsilon_{64}}\,\sigma_{max}`;
    SVD, :math:`\max(m,n)\,\epsilon\,\sigma_{max}` (the NumPy
    ``matrix_rank`` tolerance).

    *Device.* On CUDA the same float64 Gram route runs on the GPU in torch
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
    if not w.is_floating_point():
        w = w.to(torch.float32)
    w = w.to(_resolve_device(device))
    m, n = w.shape
    big = max(m, n)
    if method == "svd":
        s = _svd(w)
    else:
        if w.device.type == "cpu":
            lam = _gram_eigenvalues_cpu(w)
        else:
            g = _gram(w)
            if not bool(torch.isfinite(g).all()):
                _raise_nonfinite(w)
            lam = torch.linalg.eigvalsh(g)
        lam = lam.flip(0).clamp_min_(0.0)
        s = lam.sqrt_()
        floor = math.sqrt(big * _EPS64) * float(s[0])
        if method == "auto" and w.dtype == torch.float64 and s.numel() > 1:
            if float(s[-1]) <= float(s[0]) / _GRAM_MAX_COND:
                s = _svd(w)
            else:
                s[s <= floor] = 0.0
        else:
            s[s <= floor] = 0.0
    return s.cpu()


def _svd(w: torch.Tensor) -> torch.Tensor:
    x = w if w.dtype in (torch.float32, torch.float64) else w.to(torch.float32)
    s = torch.linalg.svdvals(x).to(torch.float64)
    if not bool(torch.isfinite(s).all()):
        _raise_nonfinite(w)
    s[s <= max(x.shape) * torch.finfo(x.dtype).eps * float(s[0])] = 0.0
    return s


def _raise_nonfinite(w: torch.Tensor):
    bad = int((~torch.isfinite(w)).sum())
    if bad:
        raise DegenerateMatrix(f"matrix contains NaN/Inf ({bad} entries)")
    raise DegenerateMatrix("entries too large: W^T W overflows float64")


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
