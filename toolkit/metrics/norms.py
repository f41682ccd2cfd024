"""Entry-wise statistics of a weight matrix: norms, scale, tails.

None of these needs the singular values. Each is a pure function
``f(w, s) -> float`` (``s`` ignored) registered with ``kind="weight"``;
undefined cases raise :class:`~toolkit.metrics.registry.DegenerateMatrix`.

All of them read the same few reductions of the entries, accumulated in
float64: the mean and the central second and fourth moments (one chunked,
cache-resident pass, :func:`central_moments`) and the largest magnitude. Like the singular
values, these are computed once per matrix and shared: they are memoised on the last tensor object seen (checked by
identity and ``Tensor._version``, so an in-place change recomputes), which
is how :func:`~toolkit.metrics.evaluate.evaluate_matrix` and every metric
of one cell read them in a single pass over the data.
"""

from __future__ import annotations

import math
import threading
import weakref

import numpy as np
import torch

from toolkit.metrics.pair_sums import flat_entries
from toolkit.metrics.registry import DegenerateMatrix, register_metric

# Entries per chunk of the float64 moment pass. Its buffer holds two float64 rows
# of this length (the centred entries and their squares, 1 MiB at 2^16), which stay
# in a core's L2 cache (2 MiB on the benchmark machine) through the chunk's three
# passes; larger chunks spill out of it and smaller ones pay more per-call overhead.
# Measured (central_moments of an 8960 x 1536 float32 matrix, one thread, 2 shared
# cores): 2^14 2.1, 2^15 1.6, 2^16 1.4, 2^17 1.9, 2^18 2.7 ns an entry (the previous
# seven-pass version: 3.2-3.7 at 2^18).
_CHUNK = 1 << 16

# The sums about a pivot c are accepted when (mean - c)^2 <= _PIVOT_TOL * mean((x - c)^2),
# i.e. |mean - c| <= sigma / 32 roughly; the conversion to central sums then loses at most
# a factor 1 + _PIVOT_TOL (M2) or about 1.15 (M4) in relative precision.
_PIVOT_TOL = 2.0 ** -10
# At most this many passes over one chunk (the first, then re-centred ones): one for
# trained weights, two when |mean| / sigma is large (up to about 1e13), three for some
# constant float64 chunks (re-centred exactly on their value).
_MAX_PASSES = 4

_memo = threading.local()
# Below this a float64 sum of squares may hold subnormal terms (bits lost): 2^52 times the smallest normal.
_SQUARES_NORMAL = float(np.finfo(np.float64).tiny) * 2.0 ** 52


def _shared(w: torch.Tensor) -> dict:
    """The dict of reductions already computed for ``w`` (a fresh one for a new tensor)."""
    try:
        version = w._version
    except RuntimeError:  # an inference-mode tensor keeps no version counter: no memo
        return {}
    entry = getattr(_memo, "entry", None)
    if entry is None or entry[0]() is not w or entry[1] != version:
        entry = (weakref.ref(w), version, {})
        _memo.entry = entry
    return entry[2]


def entry_sum(w: torch.Tensor) -> float:
    """Sum of the entries accumulated in float64 (NaN/Inf when an entry is; never
    overflows for float32 input), from the one moment pass. Memoised per tensor."""
    mean, _, _ = central_moments(w)
    return mean * w.numel()


#: The entry-wise metrics that read the central moments (the others read only the sum of squares and the
#: largest magnitude): :func:`count_nonfinite` runs the moment pass first for them, so one pass serves both.
MOMENT_METRICS = frozenset({"kurtosis"})


def count_nonfinite(w: torch.Tensor, *, moments: bool = False) -> int:
    """Number of NaN/Inf entries, from a reduction the metrics read anyway: the moment pass where it is
    memoised or ``moments`` is asked for (a metric of :data:`MOMENT_METRICS` will read it), else the
    sum of squares (:func:`sum_of_squares`, a finite sum has no NaN/Inf entry); only when that is not finite
    are the entries checked one by one."""
    memo = _shared(w)
    if moments or ("moments", _CHUNK) in memo:
        finite = math.isfinite(entry_sum(w))
    else:
        finite = math.isfinite(sum_of_squares(w))
    if finite:
        return 0
    return int((~torch.isfinite(w)).sum())


def central_moments(w: torch.Tensor) -> tuple[float, float, float]:
    r"""``(mean, m2, m4)`` of the entries, :math:`m_k = \frac{1}{N}\sum (W_{ij} - \bar W)^k`.

    One pass over the entries in float64, chunk by chunk (``_CHUNK``
    entries), any floating dtype. Each chunk is converted into a reused
    float64 buffer that stays in the CPU cache, shifted by a pivot
    :math:`c` (:math:`d = x - c`), squared, and reduced in two calls to
    the shifted sums :math:`T_p = \sum d^p`, :math:`p = 1..4`. The pivot
    is 0 (no shift) while the chunks' means are small beside their spread,
    as for trained weights, and the previous chunk's mean otherwise. A
    chunk's sums are kept only when the pivot lies near its mean,
    :math:`\delta^2 \le 2^{-10}\, T_2 / k` with :math:`\delta = T_1 / k`
    (``_PIVOT_TOL``); else the chunk, still in the cache, is reduced again
    about :math:`c + \delta`. So the chunk's mean :math:`c + \delta` and
    central sums

    .. math::

        M_2 = T_2 - k\delta^2, \quad
        M_3 = T_3 - 3\delta T_2 + 2k\delta^3, \quad
        M_4 = T_4 - 4\delta T_3 + 6\delta^2 T_2 - 3k\delta^4

    lose at most a factor of about 1.15 in relative precision to
    cancellation, however large the mean is beside the spread (a constant
    chunk is re-centred on its exact value: :math:`M_2 = 0`). The chunks
    are then combined about the grand mean :math:`\bar W` with
    :math:`\Delta_c = \bar x_c - \bar W`:
    :math:`M_2 = \sum_c (M_{2,c} + k_c\Delta_c^2)` and
    :math:`M_4 = \sum_c (M_{4,c} + 4\Delta_c M_{3,c} + 6\Delta_c^2 M_{2,c}
    + k_c\Delta_c^4)` (terms free of cancellation beyond a small bounded
    factor), so no moment is formed as a difference of large raw power
    sums. :math:`\Delta_c` is formed from the pivots' offsets and the
    :math:`\delta`'s, never from rounded chunk means, and the grand mean's
    offset is corrected once (the corrected two-pass algorithm of Chan et
    al. 1983), so a mean :math:`10^{12}` times the spread still gives
    :math:`m_2, m_4` to float64 rounding. A NaN/Inf entry makes the
    mean non-finite. Memoised per tensor (the key includes ``_CHUNK``).

    References
    ----------
    Chan, Golub & LeVeque (1983), "Algorithms for computing the sample
    variance: analysis and recommendations", The American Statistician
    37(3), 242-247 (shifted sums: the error grows with
    :math:`(\bar x - c)^2 / \sigma^2`);
    Pébay (2008), "Formulas for robust, one-pass parallel computation of
    covariances and arbitrary-order statistical moments", Sandia report
    SAND2008-6212, section 3 (combining central sums of disjoint sets by
    binomial expansion about the combined mean; eqs. 3.1 and 3.2 for two sets).
    """
    memo = _shared(w)
    key = ("moments", _CHUNK)  # the chunking is part of the key, so a test can vary it
    if key not in memo:
        x = _flat(w.detach())
        if x.device.type != "cpu":
            x = x.cpu()
        n = x.numel()
        mean, m2, m4 = _moment_pass(x, max(1, min(_CHUNK, n)))
        memo[key] = (mean, m2 / n, m4 / n)
    return memo[key]


def _moment_pass(x: torch.Tensor, size: int) -> tuple[float, float, float]:
    """Mean and central sums M2, M4 of the 1-D ``x``, ``size`` entries a chunk (see :func:`central_moments`)."""
    n = x.numel()
    nchunks = -(-n // size)
    buf = torch.empty(2, size, dtype=torch.float64)  # rows: d = x - c (torch converts any dtype), d^2
    sums = torch.empty(nchunks, 4, dtype=torch.float64)  # per chunk: T1, T2 | T3, T4
    pivots = np.zeros(nchunks)
    pivot = 0.0
    for i, start in enumerate(range(0, n, size)):
        k = min(size, n - start)
        b = buf if k == size else buf[:, :k]
        d, d2 = b[0], b[1]
        chunk, out = x[start:start + k], sums[i]
        c, delta = pivot, 0.0
        for attempt in range(_MAX_PASSES):
            if attempt:
                c += delta  # re-centre on this chunk's mean (d^4 overflowing about 0 is fixed so too)
            d.copy_(chunk)
            if c != 0.0:
                d.sub_(c)  # exact (Sterbenz) for entries within a factor 2 of c
            torch.mul(d, d, out=d2)
            torch.sum(b, dim=1, out=out[:2])  # T1, T2
            torch.mv(b, d2, out=out[2:])  # T3, T4
            t1, t2, _, t4 = out.tolist()
            delta = t1 / k
            if not math.isfinite(delta):  # a NaN/Inf entry: nothing to refine, the mean shows it
                break
            if delta * delta <= _PIVOT_TOL * (t2 / k) and math.isfinite(t4):
                break
        pivots[i] = c
        if math.isfinite(delta):  # the next chunk starts from 0 or, in an offset matrix, this one's mean
            mc = c + delta
            pivot = 0.0 if mc * mc <= _PIVOT_TOL * (t2 / k - delta * delta + mc * mc) else mc
    counts = np.full(nchunks, float(size))
    counts[-1] = n - size * (nchunks - 1)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf entries: a non-finite mean, no warning
        return _combine(n, counts, pivots, *sums.numpy().T)


def _combine(n, counts, pivots, t1, t2, t3, t4) -> tuple[float, float, float]:
    """Grand mean and central sums M2, M4 from each chunk's count, pivot and shifted sums T1..T4."""
    delta = t1 / counts  # chunk mean - pivot, kept apart: c + delta would round at |c|'s scale
    c2 = t2 - t1 * delta
    c3 = t3 - delta * (3.0 * t2 - 2.0 * t1 * delta)
    c4 = t4 - delta * (4.0 * t3 - delta * (6.0 * t2 - 3.0 * t1 * delta))
    # Each chunk's mean less the grand mean, dm, from the pivots' offsets from the first
    # pivot (exact when they lie within a factor 2 of it) and the deltas; the grand mean's
    # offset g is corrected once, as in the corrected two-pass algorithm (Chan et al. 1983).
    ref = pivots[0]
    shift = pivots - ref
    g = float(np.dot(counts, shift + delta)) / n
    dm = (shift - g) + delta
    r = float(np.dot(counts, dm)) / n
    dm -= r
    mean = ref + (g + r)  # exact for a constant matrix
    m2 = float(np.sum(c2 + counts * dm * dm))
    m4 = float(np.sum(c4 + dm * (4.0 * c3 + dm * (6.0 * c2 + counts * dm * dm))))
    return mean, m2, m4


def max_abs(w: torch.Tensor) -> float:
    """Largest entry magnitude, from ``torch.aminmax`` (no copy). Memoised per tensor."""
    memo = _shared(w)
    if "max_abs" not in memo:
        lo, hi = torch.aminmax(_flat(w))
        memo["max_abs"] = max(-float(lo), float(hi))
    return memo["max_abs"]


def sum_of_squares(w: torch.Tensor) -> float:
    r""":math:`\sum_{ij} W_{ij}^2` in float64. Memoised per tensor.

    Its own chunked pass (:func:`_square_pass`: each chunk converted into a reused float64 buffer and
    dotted with itself, the chunks' sums added with :func:`math.fsum`; the products of float16, bfloat16 and
    float32 entries are exact in float64), about a quarter of the moment pass's time; from the central
    moments (:math:`N (m_2 + \bar W^2)`) when those are already memoised. NaN/Inf entries give a NaN/Inf
    sum, as do float64 entries past about :math:`10^{154}` (their squares overflow).
    """
    memo = _shared(w)
    key = ("sum_of_squares", _CHUNK)
    if key not in memo:
        if ("moments", _CHUNK) in memo:
            mean, m2, _ = memo[("moments", _CHUNK)]
            n = w.numel()
            with np.errstate(over="ignore"):  # entries past ~1e154: an Inf sum, as the pass gives
                memo[key] = float(np.float64(n) * (np.float64(m2) + np.float64(mean) * mean))  # m2 per entry
        else:
            x = _flat(w.detach())
            memo[key] = _square_pass(x if x.device.type == "cpu" else x.cpu(), max(1, min(_CHUNK, x.numel())))
    return memo[key]


def _square_pass(x: torch.Tensor, size: int) -> float:
    r""":math:`\sum x^2` of the 1-D ``x`` in float64, ``size`` entries a chunk (see :func:`sum_of_squares`)."""
    n = x.numel()
    buf = torch.empty(size, dtype=torch.float64)
    parts = torch.empty(-(-n // size), dtype=torch.float64)
    for i, start in enumerate(range(0, n, size)):
        b = buf[:min(size, n - start)]
        b.copy_(x[start:start + b.numel()])
        torch.dot(b, b, out=parts[i])
    sums = parts.tolist()
    return math.fsum(sums) if all(map(math.isfinite, sums)) else float(parts.sum())


def _flat(w: torch.Tensor) -> torch.Tensor:
    if w.ndim != 2:
        raise DegenerateMatrix(f"expected a 2-D matrix, got shape {tuple(w.shape)}")
    if w.numel() == 0:
        raise DegenerateMatrix("empty matrix")
    return flat_entries(w)


def _nonfinite(w: torch.Tensor, name: str) -> DegenerateMatrix:
    n = int((~torch.isfinite(w)).sum())
    return DegenerateMatrix(f"matrix contains NaN/Inf ({n} entries)", name)


def frobenius_norm(w: torch.Tensor, s=None) -> float:
    r"""Frobenius norm :math:`\|W\|_F = \sqrt{\sum_{ij} W_{ij}^2}`.

    WeightWatcher's ``norm`` column is the square, :math:`\|W\|_F^2 = \sum_i \lambda_i`.

    Float64 entries whose squares leave float64's normal range (past about :math:`10^{154}`, or all below
    about :math:`10^{-145}`) are summed scaled by the power of two of the largest magnitude,
    :math:`\|W\|_F = 2^e \|2^{-e} W\|_F` (exact scaling), as LAPACK's ``dnrm2`` scales its sum.

    Raises
    ------
    DegenerateMatrix
        NaN/Inf entries.

    References
    ----------
    Golub & Van Loan, *Matrix Computations*, 4th ed. (2013), eq. 2.3.1.
    """
    _flat(w)
    if count_nonfinite(w):
        raise _nonfinite(w, "frobenius_norm")
    total = sum_of_squares(w)
    if _SQUARES_NORMAL <= total < math.inf or total == 0.0 and max_abs(w) == 0.0:
        return math.sqrt(total)
    e = math.frexp(max_abs(w))[1]  # the squares overflowed or lost bits below float64's normal range
    return math.ldexp(math.sqrt(sum_of_squares(w.detach() * math.ldexp(1.0, -e))), e)


def rms(w: torch.Tensor, s=None) -> float:
    r"""Root mean square of the entries, :math:`\|W\|_F / \sqrt{mn}`.

    Raises
    ------
    DegenerateMatrix
        NaN/Inf entries.
    """
    return frobenius_norm(w) / math.sqrt(w.numel())


def kurtosis(w: torch.Tensor, s=None) -> float:
    r"""Excess (Fisher) kurtosis of the entries, biased estimator.

    Notes
    -----
    :math:`\kappa = m_4 / m_2^2 - 3`, :math:`m_k = \frac{1}{N}\sum (W_{ij} - \bar W)^k`
    over all :math:`N = mn` entries; equals
    ``scipy.stats.kurtosis(w.ravel(), fisher=True, bias=True)``. Gaussian
    entries give 0; heavy-tailed (outlier) weights give large positive values.
    Moments are accumulated in float64, in chunks.

    Raises
    ------
    DegenerateMatrix
        Constant matrix (zero variance: kurtosis undefined); NaN/Inf entries.

    References
    ----------
    Fisher, R. A. (1930); scipy.stats.kurtosis.
    """
    _flat(w)
    if count_nonfinite(w):
        raise _nonfinite(w, "kurtosis")
    _, m2, m4 = central_moments(w)
    if not (math.isfinite(m2) and math.isfinite(m4)):
        raise DegenerateMatrix("entries too large: their fourth powers overflow float64", "kurtosis")
    if m2 <= 0.0 or m2 * m2 == 0.0:
        x = _flat(w.detach())
        if float(x.max()) != float(x.min()):  # a spread whose moments underflow float64 (float64 entries ~1e-80)
            raise DegenerateMatrix("entries too small: the square of their variance underflows float64",
                                   "kurtosis")
        raise DegenerateMatrix("constant matrix: zero variance", "kurtosis")
    return m4 / (m2 * m2) - 3.0


def max_abs_over_rms(w: torch.Tensor, s=None) -> float:
    r"""Largest entry magnitude in units of the RMS, :math:`\max|W_{ij}| / \mathrm{rms}(W)`.

    Notes
    -----
    A crest factor: at most :math:`\sqrt{mn}` (one non-zero entry), about
    :math:`\sqrt{2 \ln(mn)}` for Gaussian entries; large values flag outlier
    weights.

    Raises
    ------
    DegenerateMatrix
        All-zero matrix (0/0); NaN/Inf entries.
    """
    r = rms(w)
    if r == 0.0:
        raise DegenerateMatrix("all-zero matrix", "max_abs_over_rms")
    return max_abs(w) / r


_DIMLESS = "1"

register_metric(
    "frobenius_norm",
    frobenius_norm,
    long_name="Frobenius norm",
    units=_DIMLESS,
    any_dtype=True,
    description="||W||_F = sqrt(sum_ij W_ij^2)",
    reference="Golub & Van Loan, Matrix Computations (2013), eq. 2.3.1",
)
register_metric(
    "rms",
    rms,
    long_name="RMS of entries",
    units=_DIMLESS,
    any_dtype=True,
    description="rms = ||W||_F / sqrt(m n) for W of shape (m, n)",
    reference="root mean square of the matrix entries",
)
register_metric(
    "kurtosis",
    kurtosis,
    long_name="excess kurtosis of entries",
    units=_DIMLESS,
    any_dtype=True,
    description="m4 / m2^2 - 3 with central moments m_k over all entries (Fisher, biased; 0 for Gaussian)",
    reference="Fisher (1930); matches scipy.stats.kurtosis(fisher=True, bias=True)",
)
register_metric(
    "max_abs_over_rms",
    max_abs_over_rms,
    long_name="max |W| / RMS",
    units=_DIMLESS,
    any_dtype=True,
    description="max_ij |W_ij| / (||W||_F / sqrt(m n)) (crest factor)",
    reference="crest factor (peak-to-RMS ratio) of the matrix entries",
)
