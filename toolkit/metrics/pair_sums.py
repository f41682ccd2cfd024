r"""One pass over a pair of stored tensors: every entry-wise sum a diff needs.

The entry-wise diff metrics (relative change, cosine similarity, update
sparsity) and the per-tensor and whole-model totals of ``compare`` read
the same few sums over the entries of a base tensor :math:`B` and a target
tensor :math:`T` of the same shape:

- :math:`\sum b^2`, :math:`\sum t^2`, :math:`\sum b t`, :math:`\sum (t - b)^2`
  accumulated in float64 (each stored value converts to float64 exactly, so
  the only rounding is the summation's);
- the number of unchanged entries (see :mod:`toolkit.metrics.diff` for the
  rule: bit equality in the coarser storage dtype, or
  :math:`|t - b| \le` ``tolerance``);
- the number of entries.

:func:`pair_sums` computes all of them in one pass over the stored bytes:
the tensors are walked in chunks of :data:`CHUNK` entries, each chunk is
converted to float64 into two reused buffers that stay in the CPU cache,
the sums are BLAS dot products on those buffers, and unchanged entries are
counted on integer views of the stored bits. Neither side is ever
converted whole (no float32 or float64 copy of the matrix), so the pass
costs about what converting both sides to float32 costs, and its extra
memory is two chunk buffers.

Threads: the dot products run on NumPy's BLAS with its current thread
count. Several passes at once must each get fewer BLAS threads, or every
call waits at a barrier for a descheduled thread (measured at load 6 on 2
cores: 7.2 ms per 2^18-entry dot with 2 BLAS threads against 0.34 ms with
one). :func:`toolkit.collect.stream.map_tensors` sets that limit for the
passes of ``weight_stats`` and ``compare``; Dask workers run with
``OMP_NUM_THREADS=1``.

A NaN/Inf entry makes :math:`\sum b^2` or :math:`\sum t^2` non-finite
(a squared float32 value cannot overflow float64); :attr:`PairSums.finite`
tells, and :func:`count_nonfinite` counts them when needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

#: Entries per chunk (two float64 buffers of 2 MiB). Measured on 2 cores with two pipelines
#: (benchmarks/bench_scale.py, compare mode): 2^15 took 4.2 s, 2^17 2.9 s, 2^18 2.6-2.7 s,
#: 2^19 3.0 s, 2^20 3.8 s. Smaller chunks pay more Python calls per entry (and the two
#: pipelines contend for the GIL between calls); larger ones fall out of the cache.
CHUNK = 1 << 18

#: Mantissa bits of the float dtypes, to pick the coarser side.
MANTISSA = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23, torch.float64: 52}
_INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def comparison_dtype(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """The dtype two stored tensors are compared in: the one with fewer mantissa bits.

    Raises
    ------
    TypeError
        A dtype that is not bfloat16, float16, float32 or float64.
    """
    for d in (a, b):
        if d not in MANTISSA:
            raise TypeError(f"cannot compare stored dtype {d}; expected one of {sorted(map(str, MANTISSA))}")
    return a if MANTISSA[a] <= MANTISSA[b] else b


@dataclass(frozen=True)
class PairSums:
    """Sums over the entries of one (base, target) pair, float64 accumulation.

    Attributes
    ----------
    sumsq_base, sumsq_target : float
        :math:`\\sum b^2`, :math:`\\sum t^2` (squared Frobenius norms, weight units squared).
    dot : float
        :math:`\\sum b t` (Frobenius inner product).
    sumsq_delta : float
        :math:`\\sum (t - b)^2`, summed directly (never as a difference of the others).
    unchanged : int
        Entries unchanged under the rule and ``tolerance`` of the pass.
    n : int
        Entries.
    """

    sumsq_base: float = 0.0
    sumsq_target: float = 0.0
    dot: float = 0.0
    sumsq_delta: float = 0.0
    unchanged: int = 0
    n: int = 0

    def __add__(self, other: PairSums) -> PairSums:
        return PairSums(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def finite(self) -> bool:
        """No NaN/Inf entry on either side."""
        return math.isfinite(self.sumsq_base) and math.isfinite(self.sumsq_target)

    @property
    def identical(self) -> bool:
        """Both sides hold the same values (as read; -0.0 equals 0.0); False when not finite."""
        return self.finite and self.sumsq_delta == 0.0


def flat_entries(x: torch.Tensor) -> torch.Tensor:
    """The entries of ``x`` as a 1-D tensor, without a copy when ``x`` or its transpose is contiguous
    (the sums do not depend on the order of the entries)."""
    if x.is_contiguous():
        return x.view(-1)
    if x.ndim == 2 and x.T.is_contiguous():
        return x.T.view(-1)
    return x.reshape(-1)


def pair_sums(base: torch.Tensor, target: torch.Tensor, tolerance: float = 0.0, *, chunk: int = CHUNK) -> PairSums:
    r"""Every entry-wise sum of one pair, in one chunked float64 pass (see module docstring).

    Parameters
    ----------
    base, target : torch.Tensor
        Same shape, any layout, in their storage dtypes (bfloat16, float16,
        float32 or float64; a dequantised GGUF tensor is float32), on the CPU.
    tolerance : float, default 0.0
        0: an entry is unchanged when its bits are equal in the comparison
        dtype (:func:`comparison_dtype`); > 0: when :math:`|t - b| \le`
        ``tolerance`` after rounding both sides to that dtype.
    chunk : int
        Entries per chunk (a tuning knob; the result does not depend on it
        beyond float64 summation order).

    Returns
    -------
    PairSums

    Raises
    ------
    ValueError
        The shapes differ.
    TypeError
        A dtype other than the four float dtypes.
    """
    if base.shape != target.shape:
        raise ValueError(f"shapes differ: {tuple(base.shape)} vs {tuple(target.shape)}")
    cmp = comparison_dtype(base.dtype, target.dtype)
    b, t = flat_entries(base.detach()), flat_entries(target.detach())
    n = b.numel()
    size = max(1, min(chunk, n))
    # torch converts any float dtype (bf16 included) into the float64 buffers;
    # NumPy does the rest on views of them (its per-call cost is a few times lower).
    xt, yt = torch.empty(size, dtype=torch.float64), torch.empty(size, dtype=torch.float64)
    x, y = xt.numpy(), yt.numpy()
    bits = None
    if tolerance <= 0 and b.dtype == cmp and t.dtype == cmp:  # both stored in the comparison dtype
        view = _INT_VIEW[cmp.itemsize]
        bits = (b.view(view).numpy(), t.view(view).numpy())
    return PairSums(*_pass(b, t, x, y, xt, yt, size, bits, cmp, tolerance), n)


def _pass(b, t, x, y, xt, yt, size, bits, cmp, tolerance) -> tuple:
    n = b.numel()
    bb = tt = bt = dd = 0.0
    unchanged = 0
    for start in range(0, n, size):
        stop = min(n, start + size)
        k = stop - start
        xs, ys = (x, y) if k == size else (x[:k], y[:k])
        (xt if k == size else xt[:k]).copy_(b[start:stop])
        (yt if k == size else yt[:k]).copy_(t[start:stop])
        bb += float(xs @ xs)
        tt += float(ys @ ys)
        bt += float(xs @ ys)
        if bits is not None:  # unchanged: the stored bits are equal
            unchanged += int(np.count_nonzero(bits[0][start:stop] == bits[1][start:stop]))
        else:
            unchanged += _count_unchanged_chunk(b[start:stop], t[start:stop], cmp, tolerance)
        np.subtract(ys, xs, out=ys)
        dd += float(ys @ ys)
    return bb, tt, bt, dd, unchanged


def _count_unchanged_chunk(b: torch.Tensor, t: torch.Tensor, cmp: torch.dtype, tolerance: float) -> int:
    rb, rt = b.to(cmp), t.to(cmp)
    if tolerance > 0:
        return int(((rt.to(torch.float64) - rb.to(torch.float64)).abs() <= tolerance).sum())
    bits = _INT_VIEW[cmp.itemsize]
    return int((rb.view(bits) == rt.view(bits)).sum())


def count_nonfinite(*tensors: torch.Tensor) -> int:
    """NaN/Inf entries over ``tensors`` (for the reason of a non-finite pair)."""
    return sum(int((~torch.isfinite(x)).sum()) for x in tensors)
