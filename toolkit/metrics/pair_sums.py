r"""One pass over a pair of stored tensors: every entry-wise sum a diff needs.

The entry-wise diff metrics (relative change, cosine similarity, update
sparsity) and the per-tensor and whole-model totals of ``compare`` read
the same few sums over the entries of a base tensor :math:`B` and a target
tensor :math:`T` of the same shape:

- :math:`\sum b^2`, :math:`\sum t^2`, :math:`\sum b t`, :math:`\sum (t - b)^2`
  accumulated in float64 (each stored value converts to float64 exactly; for
  bfloat16, float16 and float32 values the products are exact too, and so is
  :math:`t - b` unless the two exponents lie more than 29 binades apart, so
  the only rounding is the summation's; float64 input rounds its products);
- the number of unchanged entries (see :mod:`toolkit.metrics.diff` for the
  rule: bit equality in the coarser storage dtype, or
  :math:`|t - b| \le` ``tolerance``);
- the number of entries.

:func:`pair_sums` computes all of them in one pass over the stored bytes:
the tensors are walked in chunks of :data:`CHUNK` entries; each chunk of
both sides is converted once to float64 into the two rows of a reused
buffer (1 MiB, which stays in a core's L2 cache), and reduced there in
three calls: the 2 x 2 Gram matrices of the rows' :data:`_SPLIT` equal
parts (one ``torch.bmm``: :math:`\sum b^2, \sum b t, \sum t^2`; one
``torch.mm`` more for the rest of a chunk not a multiple of them), the
difference :math:`t - b` written into a third reused row, and its dot product
with itself (:math:`\sum (t - b)^2`, summed directly). Unchanged entries are counted
on integer views of the stored bits or, with a tolerance, on the
difference row. The parts' and chunks' sums are added with :func:`math.fsum`.
Neither side is ever converted whole (no float32 or float64 copy of the
matrix), and the extra memory is the 1.5 MiB of rows.
:func:`pair_sums_against` is the same pass over one target and several
bases (one row each), the target converted once; :func:`delta_sums_against`
forms only the difference's sums, for a caller that has the sums of squares.

Threads: the Gram products run on torch's intra-op threads, the dot
product on NumPy's BLAS, each with its current thread count. Several
passes at once must each get fewer threads, or every call waits at a
barrier for a descheduled thread (measured at load 6 on 2 cores: 7.2 ms
per 2^18-entry dot with 2 BLAS threads against 0.34 ms with one).
:func:`toolkit.collect.execute.stream.map_tensors` sets both limits for the
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

#: Entries per chunk (two float64 rows of 512 KiB, in L2 through the chunk's reductions).
#: Measured on 2 shared cores (load ~4): pair_sums of an 8960 x 1536 bf16 pair, one thread,
#: 2^15 29.0, 2^16 28.7, 2^17 39.2 ms with one Gram product a chunk, 30.8 ms at 2^16 with the
#: _SPLIT parts (the previous four-dot version, 2 MiB buffers at 2^18: 53.8-55.5 ms); compare
#: mode of benchmarks/bench_scale.py (two pipelines) 2^15 9.5-10.2, 2^16 9.5-10.8, 2^17
#: 11.6-11.9, 2^18 12.1-12.5 s. Larger chunks fall out of the cache; smaller ones pay more
#: Python calls per entry (and the pipelines share the GIL between calls).
CHUNK = 1 << 16

#: Each chunk's Gram product is taken over this many equal parts at once (one ``torch.bmm``, as fast
#: as one ``torch.mm`` here): MKL's product over 2^16 entries summed a float32 pair's squares to
#: 1e-14 relative (math.fsum), over 2^13 to 1e-16, as NumPy's dot does.
_SPLIT = 8

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
    return pair_sums_against(target, [base], tolerance, chunk=chunk)[0]


def pair_sums_against(target: torch.Tensor, bases, tolerance: float = 0.0, *, chunk: int = CHUNK) -> list[PairSums]:
    r""":func:`pair_sums` of ``(base, target)`` for each of ``bases``, in one pass that converts ``target`` once.

    A watched run (:mod:`toolkit.monitor.record`) compares each record's matrix with the first record's and
    the previous one's: one pass over the three tensors instead of two passes over two pairs. Each chunk of
    the target and of every base goes into one row of the reused float64 buffer; one ``torch.bmm`` gives the
    Gram matrix of all the rows (:math:`\sum t^2`, :math:`\sum b_i^2`, :math:`\sum b_i t`, and the
    unused :math:`\sum b_i b_j`), then each :math:`t - b_i` is formed and summed as in :func:`pair_sums`.
    Each result is :func:`pair_sums` of its pair up to the order of float64 summation inside the Gram products.

    Parameters
    ----------
    target : torch.Tensor
    bases : sequence of torch.Tensor
        Each the shape of ``target``.
    tolerance : float, default 0.0
    chunk : int

    Returns
    -------
    list of PairSums
        One per base, in order.

    Raises
    ------
    ValueError
        A base's shape differs from the target's.
    TypeError
        A dtype other than the four float dtypes.
    """
    for base in bases:
        if base.shape != target.shape:
            raise ValueError(f"shapes differ: {tuple(base.shape)} vs {tuple(target.shape)}")
    t = flat_entries(target.detach())
    sides = []
    for base in bases:
        cmp = comparison_dtype(base.dtype, target.dtype)
        b = flat_entries(base.detach())
        bits = None
        if tolerance <= 0 and b.dtype == cmp and t.dtype == cmp:  # both stored in the comparison dtype
            view = _INT_VIEW[cmp.itemsize]
            bits = (b.view(view).numpy(), t.view(view).numpy())
        sides.append((b, bits, cmp))
    n = t.numel()
    return [PairSums(*sums, n) for sums in _pass(t, sides, max(1, min(chunk, n)), tolerance)]


#: The dtypes :func:`delta_sums_against` reads as NumPy arrays (bfloat16 has no NumPy dtype).
_NUMPY_DTYPES = (torch.float16, torch.float32, torch.float64)


def delta_sums_against(target: torch.Tensor, bases, *, chunk: int = CHUNK) -> list[tuple[float, int]] | None:
    r"""Only the difference's sums of ``(base, target)`` for each of ``bases``: :math:`\sum (t - b)^2` and the
    entries whose stored bits are equal, in one pass; None where this route does not apply.

    For a caller that has :math:`\sum t^2` and each :math:`\sum b^2` already (a watched run measures each
    record's sum of squares, :func:`toolkit.metrics.norms.sum_of_squares`, and keeps them for the records after):
    no Gram product and no float64 copy of either side. Each chunk of :math:`t - b` is formed by NumPy's
    float64 subtraction of the stored values (cast in the ufunc's own buffer: exact for float16 and float32
    values, as in :func:`pair_sums`; float64 values round; the target's chunk cast once for all bases), summed
    as a dot product with itself, the chunks' sums added with :func:`math.fsum`; unchanged entries are counted on
    integer views of the stored bits (the rule of :func:`pair_sums` with ``tolerance=0``). Measured on a 1536 x
    576 float32 matrix against two bases, one thread: 2.0 ms (2.3 ms casting the target once per base) against
    4.7 ms for :func:`pair_sums_against`.

    Parameters
    ----------
    target : torch.Tensor
    bases : sequence of torch.Tensor
        Each the shape of ``target``.
    chunk : int

    Returns
    -------
    list of (float, int) or None
        ``(sumsq_delta, unchanged)`` per base, in order; None when a side is not on the CPU, the sides'
        dtypes differ or one is not float16, float32 or float64 (then use :func:`pair_sums_against`).

    Raises
    ------
    ValueError
        A base's shape differs from the target's.
    """
    for base in bases:
        if base.shape != target.shape:
            raise ValueError(f"shapes differ: {tuple(base.shape)} vs {tuple(target.shape)}")
    sides = [target, *bases]
    if any(x.dtype != target.dtype or x.device.type != "cpu" for x in sides) or target.dtype not in _NUMPY_DTYPES:
        return None
    t, *bs = (flat_entries(x.detach()).numpy() for x in sides)
    view = np.dtype(f"i{target.dtype.itemsize}")  # the stored bits
    n = t.size
    size = max(1, min(chunk, n))
    nchunks = -(-n // size)
    diff = np.empty(size)
    wide = np.empty(size) if t.dtype != np.float64 else None  # the target's chunk in float64, once for every base
    dd = np.empty((len(bs), nchunks))
    unchanged = [0] * len(bs)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: the NaN sums tell, no warning
        for i, start in enumerate(range(0, n, size)):
            stop = min(n, start + size)
            d, tc = diff[:stop - start], t[start:stop]
            tw = tc if wide is None else wide[:stop - start]
            if wide is not None:
                np.copyto(tw, tc)
            for j, b in enumerate(bs):
                np.subtract(tw, b[start:stop], out=d)  # float64 minus the stored values, cast exactly
                dd[j, i] = d @ d
                unchanged[j] += int(np.count_nonzero(tc.view(view) == b[start:stop].view(view)))
    return [(_total(dd[j]), unchanged[j]) for j in range(len(bs))]


def _pass(t, sides, size, tolerance) -> list[tuple]:
    """The sums of the 1-D ``t`` against each ``(b, bits, cmp)`` of ``sides`` over chunks of ``size`` entries
    (see :func:`pair_sums` and :func:`pair_sums_against`)."""
    n = t.numel()
    nb = len(sides)
    nchunks = -(-n // size)
    buf = torch.empty(1 + nb, size, dtype=torch.float64)  # rows: t, then each b (torch converts any float dtype)
    rows_np = buf.numpy()
    diff = np.empty(size)  # t - b
    # per chunk: the Gram matrices of the rows' _SPLIT equal parts and of the few entries left: row 0 with
    # itself is sum t^2, with row i sum b_i t, row i with itself sum b_i^2
    grams = torch.zeros(nchunks, _SPLIT + 1, 1 + nb, 1 + nb, dtype=torch.float64)
    dd = np.empty((nb, nchunks))  # per base and chunk: sum (t - b)^2
    unchanged = [0] * nb
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: the NaN sums tell, no warning
        for i, start in enumerate(range(0, n, size)):
            stop = min(n, start + size)
            k = stop - start
            rows, x = (buf, rows_np) if k == size else (buf[:, :k], rows_np[:, :k])
            tc = t[start:stop]
            rows[0].copy_(tc)
            for j, (b, _, _) in enumerate(sides):
                rows[1 + j].copy_(b[start:stop])
            part = k // _SPLIT
            if part:
                v = rows[:, :part * _SPLIT].view(1 + nb, _SPLIT, part).transpose(0, 1)  # no copy
                torch.bmm(v, v.transpose(1, 2), out=grams[i, :_SPLIT])
            if k > part * _SPLIT:
                rest = rows[:, part * _SPLIT:]
                torch.mm(rest, rest.T, out=grams[i, _SPLIT])
            d = diff[:k]
            for j, (b, bits, cmp) in enumerate(sides):
                same = b.dtype == cmp and t.dtype == cmp  # then t - b in float64 is the rounded sides' difference
                if bits is None and not same:  # mixed dtypes: rounded to the comparison dtype first
                    unchanged[j] += _count_unchanged_chunk(b[start:stop], tc, cmp, tolerance)
                np.subtract(x[0], x[1 + j], out=d)
                dd[j, i] = d @ d
                if bits is not None:  # unchanged: the stored bits are equal
                    unchanged[j] += int(np.count_nonzero(bits[0][start:stop] == bits[1][start:stop]))
                elif same:  # |t - b| <= tolerance, with t - b already in the buffer
                    unchanged[j] += int(np.count_nonzero(np.abs(d) <= tolerance))
        g = grams.numpy().reshape(nchunks * (_SPLIT + 1), 1 + nb, 1 + nb)
        return [(_total(g[:, 1 + j, 1 + j]), _total(g[:, 0, 0]), _total(g[:, 0, 1 + j]), _total(dd[j]), unchanged[j])
                for j in range(nb)]


def _total(parts: np.ndarray) -> float:
    """The sum of the chunks' sums, correctly rounded (math.fsum) when they are finite."""
    if np.isfinite(parts).all():
        return math.fsum(parts.tolist())
    return float(np.sum(parts))  # NaN/Inf: fsum raises on inf + -inf; NaN or Inf either way


def _count_unchanged_chunk(b: torch.Tensor, t: torch.Tensor, cmp: torch.dtype, tolerance: float) -> int:
    rb, rt = b.to(cmp), t.to(cmp)
    if tolerance > 0:
        return int(((rt.to(torch.float64) - rb.to(torch.float64)).abs() <= tolerance).sum())
    bits = _INT_VIEW[cmp.itemsize]
    return int((rb.view(bits) == rt.view(bits)).sum())


def count_nonfinite(*tensors: torch.Tensor) -> int:
    """NaN/Inf entries over ``tensors`` (for the reason of a non-finite pair)."""
    return sum(int((~torch.isfinite(x)).sum()) for x in tensors)
