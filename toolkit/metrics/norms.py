"""Entry-wise statistics of a weight matrix: norms, scale, tails.

None of these needs the singular values. Each is a pure function
``f(w, s) -> float`` (``s`` ignored) registered with ``kind="weight"``;
undefined cases raise :class:`~toolkit.metrics.registry.DegenerateMatrix`.

All of them read the same few reductions of the entries, accumulated in
float64: the sum and the central second and fourth moments (one chunked
pass, :func:`central_moments`) and the largest magnitude. Like the singular
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

# Elements per chunk of the float64 moment pass (two 2 MiB buffers): large enough
# that the per-chunk Python calls cost little (two pipelines then hardly contend
# for the GIL), small enough to stay in the CPU cache. Measured on 2 cores, norms
# mode of benchmarks/bench_scale.py: 2^13 3.1 s, 2^16 2.3 s, 2^18 2.2 s.
_CHUNK = 1 << 18

_memo = threading.local()


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


def count_nonfinite(w: torch.Tensor) -> int:
    """Number of NaN/Inf entries; the memoised moment pass when there are none."""
    if math.isfinite(entry_sum(w)):
        return 0
    return int((~torch.isfinite(w)).sum())


def central_moments(w: torch.Tensor) -> tuple[float, float, float]:
    r"""``(mean, m2, m4)`` of the entries, :math:`m_k = \frac{1}{N}\sum (W_{ij} - \bar W)^k`.

    One pass over the entries, in float64: chunk by chunk (``_CHUNK``
    entries, converted into a reused float64 buffer that stays in the CPU
    cache), the chunk's exact mean and centred sums :math:`M_2, M_3, M_4`;
    chunks are merged with the exact pairwise update formulas, so no
    moment is ever formed as a difference of large raw power sums. A
    NaN/Inf entry makes the mean non-finite. Memoised per tensor.

    References
    ----------
    Chan, Golub & LeVeque (1979), "Updating formulae and a pairwise algorithm
    for computing sample variances", Stanford CS report STAN-CS-79-773;
    Pébay (2008), "Formulas for robust, one-pass parallel computation of
    covariances and arbitrary-order statistical moments", Sandia report
    SAND2008-6212, eqs. 3.1 and 3.2.
    """
    memo = _shared(w)
    key = ("moments", _CHUNK)  # the chunking is part of the key, so a test can vary it
    if key not in memo:
        x = _flat(w.detach())
        if x.device.type != "cpu":
            x = x.cpu()
        n = x.numel()
        size = max(1, min(_CHUNK, n))
        bt = torch.empty(size, dtype=torch.float64)  # torch converts any dtype (bf16 too) into it
        buf, sq = bt.numpy(), np.empty(size, dtype=np.float64)
        mean, m2, m4 = _moment_pass(x, bt, buf, sq, size)
        memo[key] = (mean, m2 / n, m4 / n)
    return memo[key]


def _moment_pass(x, bt, buf, sq, size) -> tuple[float, float, float]:
    """Mean and centred sums M2, M4 of ``x`` chunk by chunk (see :func:`central_moments`)."""
    n = x.numel()
    na = 0
    mean = m2 = m3 = m4 = 0.0
    for start in range(0, n, size):
        stop = min(n, start + size)
        k = stop - start
        d, d2 = (buf, sq) if k == size else (buf[:k], sq[:k])
        (bt if k == size else bt[:k]).copy_(x[start:stop])
        mb = float(d.sum()) / k
        np.subtract(d, mb, out=d)
        np.multiply(d, d, out=d2)
        b2, b3, b4 = float(d2.sum()), float(d2 @ d), float(d2 @ d2)
        if na == 0:
            mean, m2, m3, m4 = mb, b2, b3, b4
        else:
            mean, m2, m3, m4 = _merge(na, mean, m2, m3, m4, k, mb, b2, b3, b4)
        na += k
    return mean, m2, m4


def _merge(na, ma, a2, a3, a4, nb, mb, b2, b3, b4):
    """Mean and centred sums M2, M3, M4 of the union of two sets (Pébay 2008, eqs. 3.1-3.2)."""
    n = na + nb
    delta = mb - ma
    dn = delta / n
    m2 = a2 + b2 + delta * dn * na * nb
    m3 = a3 + b3 + delta * dn * dn * na * nb * (na - nb) + 3.0 * dn * (na * b2 - nb * a2)
    m4 = (a4 + b4 + delta * dn ** 3 * na * nb * (na * na - na * nb + nb * nb)
          + 6.0 * dn * dn * (na * na * b2 + nb * nb * a2) + 4.0 * dn * (na * b3 - nb * a3))
    return ma + dn * nb, m2, m3, m4


def max_abs(w: torch.Tensor) -> float:
    """Largest entry magnitude, from ``torch.aminmax`` (no copy). Memoised per tensor."""
    memo = _shared(w)
    if "max_abs" not in memo:
        lo, hi = torch.aminmax(_flat(w))
        memo["max_abs"] = max(-float(lo), float(hi))
    return memo["max_abs"]


def sum_of_squares(w: torch.Tensor) -> float:
    r""":math:`\sum_{ij} W_{ij}^2` in float64, from the central moments
    (:math:`N (m_2 + \bar W^2)`). Memoised per tensor."""
    mean, m2, _ = central_moments(w)
    return w.numel() * (m2 + mean * mean)


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
    return math.sqrt(sum_of_squares(w))


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
