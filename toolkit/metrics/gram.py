"""The Gram route of :func:`toolkit.metrics.spectral.singular_values`: W Wᵀ or WᵀW and its eigenvalues.

The product in float64 (blocked, the default) or float32 (whole matrix), on
the CPU in NumPy with per-thread reused buffers, on CUDA in torch; the
eigensolve always in float64.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import threading

import numpy as np
import torch

from toolkit.metrics.registry import DegenerateMatrix

# Elements of W per float64 block while forming the Gram matrix (32 MiB; two
# passes may run at once, see toolkit.collect.execute.stream).
_GRAM_BLOCK = 1 << 22
#: Elements per float64 block of the passes over a compared pair (the difference's Gram matrix, two buffers,
#: and the Krylov products and Gram matrices of toolkit.metrics.subspace): 16 MiB a buffer. Issue 38 chose
#: 4 MiB (dsyrk on one thread: 0.43 s per 1170 columns from 146-column blocks up, 0.48 s in 1170-column ones);
#: at the default thread count the Krylov products (24 columns) are memory-bound on such narrow blocks:
#: Qwen2.5-7B's mlp.up (18944 x 3584, two threads, load 1.6), one product 1.2 s in 4 MiB blocks, 0.5 s in
#: 16 MiB ones, 0.35 s in 64 MiB; its Gram matrix 3.1 s, 2.4 s, 2.2 s (issue 42).
PAIR_BLOCK = 1 << 21
# Buffers from this size on are freed after each matrix (_GramBuffers.drop_large).
_MAPPED = 64 << 20


def _gram(w: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The smaller Gram matrix, W Wᵀ or WᵀW, accumulated in ``dtype`` by blocks."""
    m, n = w.shape
    wide = m <= n  # (m, m) = W Wᵀ; else (n, n) = WᵀW
    k = m if wide else n
    g = torch.zeros(k, k, dtype=dtype, device=w.device)
    step = max(1, _GRAM_BLOCK // k)
    for blk in (w.split(step, dim=1) if wide else w.split(step, dim=0)):
        b = blk.to(dtype)
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

    def take(self, name: str, size: int, dtype=np.float64) -> np.ndarray:
        if not self.depth:
            return np.empty(size, dtype=dtype)
        if np.dtype(dtype) != np.float64:
            name = f"{name}_{np.dtype(dtype).name}"
        buf = getattr(self, name, None)
        if buf is None or buf.size < size:
            setattr(self, name, None)  # free the old one first
            buf = np.empty(size, dtype=dtype)
            setattr(self, name, buf)
        return buf[:size]

    def release(self) -> None:
        for name in [k for k in vars(self) if k != "depth"]:
            delattr(self, name)

    def drop_large(self, *names: str) -> None:
        """Free the buffers ``names`` of at least :data:`_MAPPED` bytes now. glibc serves them from their own
        memory mappings (its mmap threshold stops at 32 MiB), so freeing them fragments no heap, and a
        7B-shaped pass need not hold a 3584 x 3584 float64 product while it diagonalises or reads on."""
        for name in names:
            buf = getattr(self, name, None)
            if buf is not None and buf.nbytes >= _MAPPED:
                delattr(self, name)


@contextlib.contextmanager
def reuse_buffers():
    """Within this context, the calling thread keeps its Gram buffers from one matrix to the next
    (freed when the outermost context of the thread exits).

    Used by each pipeline thread of a pass (:class:`toolkit.collect.execute.executors.SerialExecutor`).
    """
    _BUFFERS.depth += 1
    try:
        yield
    finally:
        _BUFFERS.depth -= 1
        if not _BUFFERS.depth:
            _BUFFERS.release()


_BUFFERS = _GramBuffers()


def _gram_eigenvalues_cpu(w: torch.Tensor, minus: torch.Tensor | None = None) -> torch.Tensor:
    """Eigenvalues (ascending, float64) of the smaller Gram matrix of a CPU tensor (of ``w - minus`` when
    ``minus`` is given, formed block by block: no full-size copy of the difference).

    Blocks as :func:`_gram`, in NumPy, in reused buffers (:class:`_GramBuffers`);
    torch's ``eigvalsh`` (:func:`_eigvalsh`) then diagonalises the sum. Both
    release the GIL, so two passes run side by side.

    - One matrix (``minus`` None): each block is converted into one float64
      buffer and ``b.T @ b`` (one buffer, once transposed) makes NumPy call
      BLAS ``dsyrk`` into a product buffer added to the sum. On one core
      this beats ``addmm_`` + ``torch.linalg.eigvalsh`` for 576-1536 wide
      matrices.
    - A difference: the two sides' blocks (:data:`PAIR_BLOCK` entries) go
      into two float64 buffers, are subtracted in place, and each block's
      product is added to one triangle of the sum tile by tile
      (:func:`_syrk_into`): no k x k product buffer, so a 7B-shaped pair holds
      the Gram matrix, its copy inside ``eigvalsh``, 32 MiB of blocks and a
      26 MB tile (issue 38; a k x k product buffer is 103 MB at k = 3584).
    """
    wide, k = gram_side(w)
    g = _BUFFERS.take("gram", k * k).reshape(k, k)
    g.fill(0.0)
    if minus is None:
        product = _BUFFERS.take("product", k * k).reshape(k, k)
        for x in float64_blocks(w, "block"):
            if wide:
                np.matmul(x, x.T, out=product)
            else:
                np.matmul(x.T, x, out=product)
            g += product
        del product
        _BUFFERS.drop_large("product")  # not needed while diagonalising
    else:
        for x in float64_blocks(w, "block", minus, entries=PAIR_BLOCK):
            _syrk_into(g, x, wide)
    if not np.isfinite(g).all():
        _raise_nonfinite(w if minus is None else torch.stack([w, minus]))
    lam = _eigvalsh(g)  # the lower triangle (all a difference's sum fills)
    del g
    _BUFFERS.drop_large("gram")
    return lam


#: Largest side of a tile of the Gram matrix summed by one product in :func:`_syrk_into` (a 2048 x 2048
#: float64 product buffer is 32 MiB; Qwen2.5-7B's order 3584 is summed in 2 x 2 tiles of 1792).
GRAM_TILE = 2048


def _syrk_into(g: np.ndarray, x: np.ndarray, wide: bool) -> None:
    """Add :math:`XX^\\top` (``wide``) or :math:`X^\\top X` of the C-ordered block ``x`` to the lower triangle
    of the C-ordered symmetric ``g`` in place, tile by tile: the tiles at and below the diagonal, the diagonal
    ones whole (so the upper triangle inside them holds the same sums; the rest of it is left as it was).

    NumPy's ``matmul`` computes each tile of the lower triangle into a reused product buffer of at most
    :data:`GRAM_TILE` squared entries (BLAS ``dsyrk`` on the diagonal tiles, which NumPy recognises as
    :math:`A^\\top A`, ``dgemm`` below them: the flops of one ``dsyrk``), and the tile is added to ``g``.
    SciPy's ``blas.dsyrk`` did it without the buffer, but SciPy's BLAS and LAPACK wrappers hold the GIL for
    the whole call, so the two pipelines of a pass (:mod:`toolkit.collect.execute.stream`) summed their Gram
    matrices one after the other: two one-thread sums of 1170 x 3584 blocks took 4.5 s side by side against
    2.2 s alone; NumPy's release the GIL (2.4 s for both, 2.35 s alone in 2 x 2 tiles; issue 42)."""
    d = g.shape[0]
    side = -(-d // -(-d // GRAM_TILE))  # equal tiles of at most GRAM_TILE
    buf = _BUFFERS.take("gram_tile", side * side)
    edges = [(a, min(d, a + side)) for a in range(0, d, side)]
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf entries: the caller's finiteness check says so
        for i, (a0, a1) in enumerate(edges):
            xa = x[a0:a1] if wide else x[:, a0:a1]
            for b0, b1 in edges[: i + 1]:
                xb = x[b0:b1] if wide else x[:, b0:b1]
                out = buf[: (a1 - a0) * (b1 - b0)].reshape(a1 - a0, b1 - b0)
                np.matmul(xa, xb.T, out=out) if wide else np.matmul(xa.T, xb, out=out)
                g[a0:a1, b0:b1] += out


#: Binary exponents of the largest |entry| beyond which a float64 Gram matrix leaves float64's normal range
#: (entries of 2^-250 square to 2^-500, summed over rows still far from 2^-1022; 2^250 squared, times 2^22
#: rows, stays below 2^1024).
GRAM_EXPONENTS = (-250, 250)


def gram_scale(*tensors: torch.Tensor) -> float:
    r"""A power of two :math:`2^{-e}` that brings the largest :math:`|w_{ij}|` of float64 ``tensors`` near 1
    when their Gram matrix would leave float64's normal range, else 1.0.

    Only float64 entries can: a float32 entry lies in :math:`[2^{-149}, 2^{128}]`, whose square is normal in
    float64. Below :math:`2^{-250}` a Gram matrix is subnormal and loses its digits (singular values of a
    1e-160 matrix were 2e-5 off, relative); above :math:`2^{250}` it overflows to inf. Scaling by a power of
    two is exact, and singular values and subspaces scale with it (divide by the factor afterwards).
    """
    peak = 0.0
    for t in tensors:
        if t.dtype != torch.float64 or not t.numel():
            return 1.0
        lo, hi = (float(v) for v in torch.aminmax(t))
        peak = max(peak, -lo, hi)
    if not (math.isfinite(peak) and peak > 0):
        return 1.0  # zeros, or NaN / inf: the finiteness checks report them
    exponent = math.frexp(peak)[1]
    return 1.0 if GRAM_EXPONENTS[0] < exponent < GRAM_EXPONENTS[1] else math.ldexp(1.0, -exponent)


#: Entries of ``W`` hashed into :func:`data_seed` (evenly spaced, plus the shape).
SEED_SAMPLE = 4096


def data_seed(w: torch.Tensor) -> int:
    """A seed drawn from the matrix: BLAKE2b of its shape and of :data:`SEED_SAMPLE` evenly spaced entries (as
    float64). Reproducible for the same values, different for different matrices, never a constant: a
    probability statement over random vectors from it holds unless the matrix was built knowing the vectors,
    i.e. by inverting the hash (issue 42: a fixed seed in the source let a matrix be built against its block).
    Used by the Krylov start (:mod:`toolkit.metrics.krylov`) and the float32 certificate's probes
    (:mod:`toolkit.metrics.eigen_bound`)."""
    m, n = w.shape
    count = min(SEED_SAMPLE, m * n)
    # integer spacing: float32 linspace rounds past the last entry from 2**24 entries on (issue 42's 18944 x 3584)
    idx = torch.arange(count, dtype=torch.int64) * (m * n - 1) // max(count - 1, 1)
    sample = w.detach()[idx // n, idx % n].to("cpu", torch.float64).numpy()  # no copy of a strided view
    h = hashlib.blake2b(np.asarray(w.shape, dtype=np.int64).tobytes() + sample.tobytes(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def gram_side(w: torch.Tensor) -> tuple[bool, int]:
    """``(wide, k)``: whether the smaller Gram matrix of ``w`` (m, n) is :math:`WW^\\top` (m <= n), and its size
    k = min(m, n)."""
    m, n = w.shape
    return m <= n, min(m, n)


def float64_blocks(w: torch.Tensor, buffer: str, minus: torch.Tensor | None = None, *,
                   entries: int | None = None):
    """Yield ``w`` (m, n) in float64 NumPy blocks of about ``entries`` entries (default :data:`_GRAM_BLOCK`):
    blocks of columns when the smaller Gram matrix is :math:`WW^\\top` (m <= n), of rows otherwise, so that the
    Gram matrix is the sum of the blocks' own. Every block is a view of one reused buffer (named ``buffer``):
    use it before the next. With ``minus`` (same shape), the blocks are those of ``w - minus``: ``minus``'s
    block is converted into a second reused buffer (``buffer + "_minus"``) and subtracted in place in float64
    (exact for bfloat16, float16 and float32 values unless their exponents lie more than 29 binades apart); no
    temporary is allocated per block (torch's mixed-dtype ``sub_`` made one, and a 33 MB temporary a block
    grew the heap by ~370 MB over a 7B-shaped matrix)."""
    m, n = w.shape
    wide, k = gram_side(w)
    step = max(1, (entries or _GRAM_BLOCK) // k)
    size = k * min(step, n if wide else m)
    block = _BUFFERS.take(buffer, size)
    other = _BUFFERS.take(f"{buffer}_minus", size) if minus is not None else None
    blocks = w.split(step, dim=1 if wide else 0)
    subs = minus.split(step, dim=1 if wide else 0) if minus is not None else (None,) * len(blocks)
    for blk, sub in zip(blocks, subs, strict=True):
        x = _into(block, blk)
        if sub is not None:
            with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: the finiteness check reports it
                np.subtract(x, _into(other, sub), out=x)
        yield x


def _into(buf: np.ndarray, blk: torch.Tensor) -> np.ndarray:
    """``blk`` converted into the front of the flat float64 ``buf``, as a C-ordered (rows, cols) NumPy view."""
    rows, cols = blk.shape
    b = torch.from_numpy(buf[: rows * cols]).view(rows, cols)
    b.copy_(blk)
    return b.numpy()


@functools.cache
def _blas_controller():
    """threadpoolctl's view of the BLAS libraries loaded (inspected once: 22 us a call to limit, not ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


#: Largest order of a float64 matrix diagonalised by NumPy's LAPACK on one thread (see :func:`_eigvalsh`).
NUMPY_EIGVALSH_MAX = 1536


def _eigvalsh(g: np.ndarray) -> torch.Tensor:
    """Eigenvalues (ascending, float64) of the symmetric matrix ``g`` (not modified; its lower triangle is
    read; any strides), by NumPy's LAPACK (OpenBLAS ``dsyevd``) or torch's (MKL's ``syevd``), whichever is the
    faster here.

    Measured on 2 AMD EPYC cores, one BLAS thread per call (a pass's two pipelines), per matrix:

    ==========  ==============  ===============  =====================  ======================
    order k     torch, alone    NumPy, alone     torch, two at once     NumPy, two at once
    ==========  ==============  ===============  =====================  ======================
    576         25.8 ms         18.0 ms          22.2 ms                9.7 ms
    1536        330 ms          316 ms           433 ms                 149 ms
    3584        3.02 s          5.02 s           3.26 s                 2.53 s
    ==========  ==============  ===============  =====================  ======================

    torch's calls do not run side by side (two at once take as long as one after the other, though
    torch releases the GIL); NumPy's do. With two threads per call NumPy's is the faster too (order 576:
    16 ms against 21.5 ms; 1536: 185 ms against 247 ms). So a float64 matrix of order at most
    :data:`NUMPY_EIGVALSH_MAX` goes to NumPy; larger orders and float32 (torch's ``ssyevd`` is the faster
    alone at every order from 576) stay with torch. The route depends on the matrix only, never on the
    threads a call is given, and NumPy's runs on one BLAS thread (OpenBLAS's ``dsyevd`` on two threads sums
    in another order, a few ulps apart), so a cell measured alone (one pipeline, every thread) equals the
    same cell measured in a whole pass (two pipelines of one thread) bit for bit, and a cached value is the
    value a fresh run gives. Both are LAPACK's tridiagonal reduction and divide-and-conquer; they agree to a few
    ulps of ``λ_max`` (``tests/metrics/test_gram_eigvalsh.py``).
    """
    if g.dtype == np.float64 and g.shape[0] <= NUMPY_EIGVALSH_MAX:
        with _blas_controller().limit(limits=1, user_api="blas"):
            return torch.from_numpy(np.linalg.eigvalsh(g, UPLO="L"))
    # torch.from_numpy takes no negative stride (a reversed view); NumPy's route takes any
    return torch.linalg.eigvalsh(torch.from_numpy(g if min(g.strides, default=0) >= 0 else g.copy())).to(torch.float64)


def gram32_cpu(w: torch.Tensor) -> np.ndarray:
    """The smaller Gram matrix of a CPU tensor, formed in float32 and widened to float64.

    The whole matrix in one BLAS ``ssyrk`` (NumPy's ``x @ x.T`` / ``x.T @ x``
    on one buffer), no blocks: a float32 tensor is used as it is, another
    dtype is converted once into a reused float32 buffer.

    Returns
    -------
    numpy.ndarray, shape (k, k), float64, k = min(m, n)
        The float32 product's values, exactly, in this thread's reused
        ``product`` buffer (:class:`_GramBuffers`): valid until the next call.

    Raises
    ------
    DegenerateMatrix
        NaN/Inf entries, or a product that overflows float32.
    """
    m, n = w.shape
    wide = m <= n
    k = m if wide else n
    if w.dtype == torch.float32 and w.is_contiguous():
        x = w.numpy()
    else:
        x = _BUFFERS.take("whole", m * n, np.float32).reshape(m, n)
        torch.from_numpy(x).copy_(w)
    g = _BUFFERS.take("gram", k * k, np.float32).reshape(k, k)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        np.matmul(x, x.T, out=g) if wide else np.matmul(x.T, x, out=g)
    if not np.isfinite(g).all():
        _raise_nonfinite(w, "float32 (precision='float64' computes it)")
    g64 = _BUFFERS.take("product", k * k).reshape(k, k)
    g64[...] = g
    return g64


def _gram_eigenvalues_cpu32(w: torch.Tensor) -> torch.Tensor:
    """Eigenvalues (ascending, float64) of :func:`gram32_cpu`'s matrix, diagonalised in float64
    (:func:`_eigvalsh`, ``dsyevd``).

    The float32 eigensolver (``ssyevd``) was measured to move the eigenvalues
    of the tail by 1e-5 to 3e-5 relative and the power-law alpha of random
    7B-shape matrices by up to 0.14, while the float32 product moves them by
    about 3e-7 and alpha by 1e-5 (``docs/scaling.md``). See
    :func:`toolkit.metrics.spectral.singular_values` for what this precision resolves.
    """
    return _eigvalsh(gram32_cpu(w))


def _raise_nonfinite(w: torch.Tensor, product: str = "float64"):
    bad = int((~torch.isfinite(w)).sum())
    if bad:
        raise DegenerateMatrix(f"matrix contains NaN/Inf ({bad} entries)")
    raise DegenerateMatrix(f"entries too large: W^T W overflows {product}")
