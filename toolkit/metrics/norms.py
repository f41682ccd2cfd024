"""Entry-wise statistics of a weight matrix: norms, scale, tails.

None of these needs the singular values. Each is a pure function
``f(w, s) -> float`` (``s`` ignored) registered with ``kind="weight"``;
undefined cases raise :class:`~toolkit.metrics.registry.DegenerateMatrix`.
Reductions run in float32 for float32 input (torch's blocked sums keep the
relative error near 1e-7) except kurtosis, whose fourth moment is accumulated
in float64.
"""

from __future__ import annotations

import math

import torch

from toolkit.metrics.registry import DegenerateMatrix, register_metric

# Elements per chunk when a float64 copy is needed (bounds the temporary memory).
_CHUNK = 1 << 22


def _flat(w: torch.Tensor) -> torch.Tensor:
    if w.ndim != 2:
        raise DegenerateMatrix(f"expected a 2-D matrix, got shape {tuple(w.shape)}")
    if w.numel() == 0:
        raise DegenerateMatrix("empty matrix")
    return w.reshape(-1)


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
    v = float(torch.linalg.vector_norm(_flat(w)))
    if not math.isfinite(v):
        raise _nonfinite(w, "frobenius_norm")
    return v


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
    x = _flat(w)
    n = x.numel()
    mean = sum(float(c.sum(dtype=torch.float64)) for c in x.split(_CHUNK)) / n
    m2 = m4 = 0.0
    for c in x.split(_CHUNK):
        d = c.to(torch.float64) - mean
        d2 = d * d
        m2 += float(d2.sum())
        m4 += float((d2 * d2).sum())
    m2 /= n
    m4 /= n
    if not (math.isfinite(m2) and math.isfinite(m4)):
        raise _nonfinite(w, "kurtosis")
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
    return float(w.abs().max()) / r


_DIMLESS = "1"

register_metric(
    "frobenius_norm",
    frobenius_norm,
    long_name="Frobenius norm",
    units=_DIMLESS,
    description="||W||_F = sqrt(sum_ij W_ij^2)",
    reference="Golub & Van Loan, Matrix Computations (2013), eq. 2.3.1",
)
register_metric(
    "rms",
    rms,
    long_name="RMS of entries",
    units=_DIMLESS,
    description="rms = ||W||_F / sqrt(m n) for W of shape (m, n)",
    reference="root mean square of the matrix entries",
)
register_metric(
    "kurtosis",
    kurtosis,
    long_name="excess kurtosis of entries",
    units=_DIMLESS,
    description="m4 / m2^2 - 3 with central moments m_k over all entries (Fisher, biased; 0 for Gaussian)",
    reference="Fisher (1930); matches scipy.stats.kurtosis(fisher=True, bias=True)",
)
register_metric(
    "max_abs_over_rms",
    max_abs_over_rms,
    long_name="max |W| / RMS",
    units=_DIMLESS,
    description="max_ij |W_ij| / (||W||_F / sqrt(m n)) (crest factor)",
    reference="crest factor (peak-to-RMS ratio) of the matrix entries",
)
