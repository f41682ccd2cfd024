r"""FARMS: the power-law exponent of the average ESD of fixed-aspect-ratio submatrices.

The fitted alpha of a matrix's ESD depends on its shape: a pure random matrix of aspect
ratio :math:`q = \text{rows}/\text{cols}` has a Marchenko-Pastur ESD whose edge and shape
change with :math:`q`, so an MLP matrix (:math:`q \approx 5`) and an attention one
(:math:`q = 1`) do not compare. FARMS (Fixed-Aspect-Ratio Matrix Subsampling; Hu et al.,
"Eigenspectrum Analysis of Neural Networks without Aspect Ratio Bias", ICML 2025,
arXiv:2506.06280) measures instead the average ESD of submatrices that all have one aspect
ratio:

1. cut :math:`W` (:math:`m \times n`, taken with :math:`m \ge n`, transposed otherwise) into
   square :math:`n \times n` blocks of consecutive rows: :math:`\lceil m/n \rceil` of them, the
   last one aligned to the end (so every row is in a block, and blocks overlap only there);
2. the eigenvalues of :math:`B^\top B` of each block, pooled: the average ESD (blocks of one
   size, so each weighs the same);
3. the default power-law fit (:func:`~toolkit.metrics.powerlaw.fit_power_law`, WeightWatcher's)
   of the pooled eigenvalues: ``alpha_farms``.

A square matrix is its own single block, so its ``alpha_farms`` is its ``alpha``. The blocks are
diagonalised in float64 (Gram route, :func:`~toolkit.metrics.spectral.singular_values`): about
:math:`m/n` times one :math:`n \times n` eigensolve, so it is opt-in.
``benchmarks/bench_farms.py`` measures the bias on Gaussian matrices of :math:`q` = 1, 2, 4, 8.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from toolkit.metrics.powerlaw import FIT_METRIC_OPTIONS, fit_power_law
from toolkit.metrics.registry import DegenerateMatrix, register_metric

__all__ = ["farms_blocks", "farms_eigenvalues", "alpha_farms"]

REFERENCE = ("Hu, Y. et al. (2025), Eigenspectrum Analysis of Neural Networks without Aspect Ratio Bias, "
             "ICML 2025, arXiv:2506.06280 (FARMS)")


def farms_blocks(shape: tuple[int, int]) -> list[slice]:
    """The row slices of the square blocks of a matrix of ``shape`` (its longer side first: rows).

    Parameters
    ----------
    shape : (int, int)
        ``(m, n)`` with ``m >= n``.

    Returns
    -------
    list of slice
        ``ceil(m / n)`` slices of ``n`` rows: consecutive, the last aligned to the end.
    """
    m, n = shape
    if n <= 0 or m < n:
        raise ValueError(f"a ({m}, {n}) matrix has no n x n blocks of rows: pass it with its longer side first")
    starts = [i * n for i in range(m // n)]
    if m % n:
        starts.append(m - n)
    return [slice(s, s + n) for s in starts]


def farms_eigenvalues(w: torch.Tensor) -> np.ndarray:
    r"""The pooled eigenvalues of :math:`B^\top B` over the square blocks :math:`B` of ``w`` (steps 1-2).

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)

    Returns
    -------
    numpy.ndarray, shape (ceil(m/n) * n,), float64
        Descending within each block; blocks in order.

    Raises
    ------
    DegenerateMatrix
        Not a 2-D matrix, or empty.
    """
    from toolkit.metrics.spectral import singular_values

    if w.ndim != 2 or w.numel() == 0:
        raise DegenerateMatrix("not a non-empty 2-D matrix", "alpha_farms")
    x = w if w.shape[0] >= w.shape[1] else w.T
    parts = [singular_values(x[rows]).numpy() ** 2 for rows in farms_blocks(tuple(x.shape))]
    return np.concatenate(parts)


def alpha_farms(w: torch.Tensor, s=None, **fit_options) -> float:
    """``alpha`` of the average ESD of ``w``'s square blocks (module docstring), WeightWatcher's default fit.

    Raises
    ------
    DegenerateMatrix
        Where the pooled spectrum cannot be fitted (too few eigenvalues above the threshold, zeros).
    """
    lam = farms_eigenvalues(w)
    if not lam.size or not math.isfinite(float(lam.max())) or float(lam.max()) == 0.0:
        raise DegenerateMatrix("all-zero matrix", "alpha_farms")
    try:
        return float(fit_power_law(lam, **{k: v for k, v in fit_options.items() if v is not None}).alpha)
    except DegenerateMatrix as e:
        raise DegenerateMatrix(e.reason, "alpha_farms") from None


register_metric(
    "alpha_farms", alpha_farms, long_name="power-law exponent alpha of the FARMS average ESD", units="1",
    description=("alpha (WeightWatcher's fit) of the pooled eigenvalues of B^T B over the square n x n blocks B "
                 "of consecutive rows of W (m x n, m >= n; ceil(m/n) blocks, the last aligned to the end): the "
                 "ESD at one aspect ratio, q = 1, whatever the matrix's shape"),
    reference=REFERENCE, options=dict(FIT_METRIC_OPTIONS), opt_in=True,
)
