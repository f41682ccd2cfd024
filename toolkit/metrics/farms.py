r"""FARMS: the power-law exponent of the pooled ESD of fixed-aspect-ratio windows of a matrix.

The fitted alpha of a matrix's ESD depends on its shape: a pure random matrix of aspect
ratio :math:`q` has a Marchenko-Pastur ESD whose edge and shape change with :math:`q`, so an
MLP matrix (:math:`q \approx 4`) and an attention one (:math:`q = 1`) do not compare. FARMS
(Fixed-Aspect-Ratio Matrix Subsampling; Hu et al., "Eigenspectrum Analysis of Neural Networks
without Aspect Ratio Bias", ICML 2025, arXiv:2506.06280) fits instead the ESD pooled over
submatrices that all have one shape. The authors' code is the specification here
(github.com/HUST-AI-HYZ/FARMS, commit 8e07c3f): ``LLM_Pruning/lib/sampling.py`` (``fixed_sampling``,
called by ``sampled_eigs`` from ``net_esd_estimator_farms`` in ``LLM_Pruning/lib/esd_utils_farms.py``),
with the defaults of ``LLM_Pruning/main.py`` (``--num_row_samples 100 --Q_ratio 2.0
--sampling_ops_per_dim 10``) and the fit its ``alpha_peak_farms`` metric asks for
(``fix_fingers='xmin_peak'``, ``analysis_esd`` in ``esd_utils_farms.py``):

1. windows (:func:`farms_windows`): ``h = 100`` rows by ``int(h * Q) = 200`` columns of ``W`` as stored
   (out, in); row steps ``max(1, (m - h) // (P - 1))`` with ``P = 10`` positions per dimension,
   ``min(P, max(1, (m - h) // step + 1))`` positions, the start of position ``i`` at
   ``min(i * step, m - h)``; columns likewise; every row position with every column position
   (at most 100 windows, overlapping where the matrix is less than 10 windows long);
2. the squared singular values of every window, pooled (:func:`farms_eigenvalues`);
3. the authors' ``xmin_peak`` fit of the pooled values (:func:`fit_peak_authors`): ``alpha_farms``.

Where the code leaves a case open the toolkit chooses, and says so: a matrix smaller than the
window in either dimension gets the largest window of the same aspect ratio that fits
(``h = min(100, m, floor(n / Q))``; the authors' ``main.py`` lowers ``num_row_samples`` to
``min(m, n)`` in its sanity check, and ``fixed_sampling`` as written would slice from a negative
start); values are computed in float64 on the CPU (the authors: float32, on the GPU); a window's
singular values at or below :math:`\sqrt{\max(h, c)\,\epsilon_{64}}\,\sigma_1` are zeros, the
resolution of every other spectrum of the toolkit (the float64 Gram route's,
:func:`toolkit.metrics.spectral.resolved`, so ``alpha`` and ``alpha_farms`` agree on what counts as
zero: about 2e-7 of the window's largest, below any trained window's smallest singular value and
above the float32 rounding of a low-rank product), and zeros are dropped. The authors keep them
(``filter_zeros=False``): on a window of rank below ``h`` (a low-rank matrix, or rows pruned to zero,
FARMS's own use case) their fit lands on rounding noise, ~1e-26, and its alpha is set by how small
that noise is (1.2-1.3 for any rank-1 matrix; 2.16 for a Gaussian 768 x 2048 matrix with a tenth of its
rows zeroed, against 10.9 unpruned). As the authors' ``eigs_num_thresh=5`` skips a matrix with fewer
than 5 pooled eigenvalues, fewer than 5 positive ones is NaN with that reason (a 2 x 2 matrix's one
1 x 2 window would otherwise give an alpha from two values).

The authors' LLaMA runs (``LLM_Pruning/scripts/llm_pruning_main.txt``) used 2000 x 2000 windows
(``Q = 1``) on 15 x 15 positions; pass ``rows``, ``ratio``, ``positions`` for those.
``benchmarks/bench_farms.py`` measures the aspect-ratio bias with and without it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from toolkit.metrics.power_law_tail import PowerLawFit, exact_ks_distances, flat_reason, tail_alphas
from toolkit.metrics.registry import DegenerateMatrix, register_metric

__all__ = ["farms_windows", "farms_eigenvalues", "fit_peak_authors", "alpha_farms", "FARMS_DEFAULTS"]

REFERENCE = ("Hu, Y. et al. (2025), Eigenspectrum Analysis of Neural Networks without Aspect Ratio Bias, "
             "ICML 2025, arXiv:2506.06280 (FARMS); code: github.com/HUST-AI-HYZ/FARMS, LLM_Pruning/lib/sampling.py "
             "(fixed_sampling) and lib/esd_utils_farms.py (analysis_esd, fix_fingers='xmin_peak')")
#: The authors' defaults (``LLM_Pruning/main.py``): window rows, columns per row, positions per dimension.
FARMS_DEFAULTS = {"rows": 100, "ratio": 2.0, "positions": 10}
#: Bins of the log10 histogram whose fullest bin is the peak (``analysis_esd``'s ``bins=100``).
PEAK_BINS = 100
#: The fewest pooled eigenvalues fitted (``net_esd_estimator_farms``'s ``eigs_num_thresh=5``: it skips the matrix).
MIN_EIGENVALUES = 5
_EPS64 = float(np.finfo(np.float64).eps)
#: Bytes of windows stacked for one batched SVD (the authors' 100 windows of 100 x 200: 16 MB, one batch).
_BATCH_BYTES = 64 << 20


def _starts(length: int, window: int, positions: int) -> list[int]:
    """Start offsets of the windows along one dimension (``fixed_sampling``'s step and count rule)."""
    step = max(1, (length - window) // max(1, positions - 1))
    count = min(positions, max(1, (length - window) // step + 1))
    return [min(i * step, length - window) for i in range(count)]


def farms_windows(shape: tuple[int, int], rows: int = 100, ratio: float = 2.0,
                  positions: int = 10) -> list[tuple[slice, slice]]:
    """The windows FARMS pools for a matrix of ``shape``: (row slice, column slice) pairs.

    Parameters
    ----------
    shape : (int, int)
        ``(m, n)`` of the matrix as stored (out, in).
    rows : int, default 100
        Window rows ``h`` (the authors' ``num_row_samples``).
    ratio : float, default 2.0
        Window columns per row, ``Q``: the window is ``h x int(h * Q)``.
    positions : int, default 10
        Positions per dimension (``sampling_ops_per_dim``).

    Returns
    -------
    list of (slice, slice)
        Row-major: every row position with every column position; all windows of one shape.

    Raises
    ------
    ValueError
        A non-positive option, or a matrix with no window of that aspect ratio (``floor(n / Q) < 1``).
    """
    m, n = shape
    if not (rows >= 1 and math.isfinite(ratio) and ratio > 0 and positions >= 1):
        raise ValueError(f"FARMS windows need rows >= 1, ratio > 0, positions >= 1; got {rows}, {ratio}, {positions}")
    h = min(int(rows), m, math.floor(n / ratio))
    c = int(h * ratio)
    if h < 1 or c < 1:
        raise ValueError(f"a ({m}, {n}) matrix holds no window of aspect ratio {ratio:g}")
    return [(slice(r, r + h), slice(s, s + c)) for r in _starts(m, h, positions) for s in _starts(n, c, positions)]


def farms_eigenvalues(w: torch.Tensor, rows: int = 100, ratio: float = 2.0, positions: int = 10) -> np.ndarray:
    r"""The pooled eigenvalues :math:`\sigma_i^2` of the FARMS windows of ``w`` (steps 1-2), ascending.

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
    rows, ratio, positions
        As :func:`farms_windows`.

    Returns
    -------
    numpy.ndarray, float64, ascending
        ``min(h, int(h Q))`` values per window; those of singular values at or below the toolkit's
        resolution, :math:`\sqrt{\max(h, c)\,\epsilon_{64}}\,\sigma_1` of the window, are 0.

    Raises
    ------
    DegenerateMatrix
        Not a non-empty 2-D matrix, or one too small for a window.
    """
    if w.ndim != 2 or w.numel() == 0:
        raise DegenerateMatrix("not a non-empty 2-D matrix", "alpha_farms")
    try:
        windows = farms_windows(tuple(w.shape), rows, ratio, positions)
    except ValueError as e:
        raise DegenerateMatrix(str(e), "alpha_farms") from None
    x = w.detach().to("cpu", torch.float64)
    h, c = windows[0][0].stop - windows[0][0].start, windows[0][1].stop - windows[0][1].start
    per = max(1, _BATCH_BYTES // (8 * h * c))  # windows stacked at a time: memory bounded whatever ``positions``
    parts = []
    for i in range(0, len(windows), per):
        sv = torch.linalg.svdvals(torch.stack([x[r, cols] for r, cols in windows[i:i + per]]))  # descending rows
        sv[sv <= math.sqrt(max(h, c) * _EPS64) * sv[:, :1]] = 0.0  # below the toolkit's resolution: zero
        parts.append(sv.square().reshape(-1).numpy())
    return np.sort(np.concatenate(parts))


def fit_peak_authors(x: np.ndarray, bins: int = PEAK_BINS) -> PowerLawFit:
    r"""The FARMS authors' ``xmin_peak`` power-law fit (``analysis_esd``, ``fix_fingers='xmin_peak'``).

    Parameters
    ----------
    x : numpy.ndarray, 1-D
        Eigenvalues (any order); non-positive ones are dropped.
    bins : int, default 100
        Of the log10 histogram.

    Returns
    -------
    PowerLawFit
        ``alpha``, ``xmin``, ``ks_distance`` (the authors' ``D``), ``num_tail``, ``sigma = (alpha - 1)/sqrt(n)``.

    Raises
    ------
    DegenerateMatrix
        Fewer than two eigenvalues, no candidate xmin with :math:`\alpha > 1` (the authors' code returns
        the unfitted 0 there), or a tail whose eigenvalues are equal within rounding
        (:func:`~toolkit.metrics.power_law_tail.flat_reason`; the authors' code fits the noise).

    Notes
    -----
    With :math:`\lambda` ascending and :math:`p = 10^{e_k}`, :math:`e_k` the left edge of the fullest of
    ``bins`` equal bins of :math:`\log_{10}\lambda` over its range: the candidates are the positions
    :math:`i \le N - 2` with :math:`\log_{10}(0.95 p) \le \lambda_i \le 1.5 p` (the code compares the
    eigenvalue with the log of the lower end, as WeightWatcher's does; ties are separate candidates), each
    with the MLE :math:`\alpha_i = 1 + n_i / \sum_{j \ge i} \ln(\lambda_j / \lambda_i)` and, where
    :math:`\alpha_i > 1`, :math:`D_i = \max_{t < n_i} |1 - (\lambda_{i+t}/\lambda_i)^{1 - \alpha_i} - t/n_i|`,
    else :math:`D_i = 1`; the fit is the first candidate of least :math:`D_i`. Unlike
    :func:`toolkit.metrics.xmin_peak.fit_xmin_peak` (the ``powerlaw`` package's reading) there is no
    preference for :math:`0 < \alpha < 3` and ties are not merged.
    """
    x = np.sort(np.asarray(x, dtype=np.float64).ravel())
    x = x[x > 0]
    if x.size < 2:
        raise DegenerateMatrix(f"too short a spectrum: {x.size} positive eigenvalue(s)", "alpha_farms")
    counts, edges = np.histogram(np.log10(x), bins=bins)
    peak = 10.0 ** edges[int(np.argmax(counts))]
    idx = np.flatnonzero((x[:-1] >= math.log10(0.95 * peak)) & (x[:-1] <= 1.5 * peak))
    alpha_all, n_all, _ = tail_alphas(np.log(x))
    ok = idx[np.isfinite(alpha_all[idx]) & (alpha_all[idx] > 1.0)]
    if not ok.size:
        raise DegenerateMatrix(f"no candidate xmin in [log10(0.95 p), 1.5 p], p = {peak:.4g}, with alpha > 1",
                               "alpha_farms")
    d = exact_ks_distances(x, ok, alpha_all, n_all)
    d = np.where(np.isfinite(d), d, 1.0)
    k = int(np.argmin(d))
    i, a, tail = int(ok[k]), float(alpha_all[ok[k]]), int(n_all[ok[k]])
    flat = flat_reason(float(x[i]), float(x[-1]), x.size)  # a tail of rounding noise has no exponent (issue 42)
    if flat:
        raise DegenerateMatrix(flat, "alpha_farms")
    return PowerLawFit(a, float(x[i]), float(d[k]), tail, sigma=(a - 1.0) / math.sqrt(tail), xmax=float(x[-1]),
                       num_pl_spikes=tail, raw_alpha=a)


def alpha_farms(w: torch.Tensor, s=None, *, rows: int = 100, ratio: float = 2.0, positions: int = 10) -> float:
    """FARMS alpha of ``w``: the authors' ``xmin_peak`` fit of the pooled ESD of its windows (module docstring).

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
    s : ignored
        The metric reads the windows, not the matrix's singular values.
    rows, ratio, positions
        The window and its placement (:func:`farms_windows`); defaults are the authors'.

    Returns
    -------
    float

    Raises
    ------
    DegenerateMatrix
        A matrix too small for a window, an all-zero one, fewer than 5 positive pooled eigenvalues (the
        authors' ``eigs_num_thresh``), or a pooled spectrum the fit cannot take.
    """
    lam = farms_eigenvalues(w, rows, ratio, positions)
    if not lam.size or not math.isfinite(float(lam[-1])) or float(lam[-1]) == 0.0:
        raise DegenerateMatrix("all-zero matrix", "alpha_farms")
    positive = int(np.count_nonzero(lam > 0))
    if positive < MIN_EIGENVALUES:
        raise DegenerateMatrix(f"too short a pooled spectrum: {positive} positive eigenvalue(s) of the windows, "
                               f"fewer than {MIN_EIGENVALUES} (the FARMS authors skip such a matrix)", "alpha_farms")
    return float(fit_peak_authors(lam).alpha)


register_metric(
    "alpha_farms", alpha_farms, long_name="power-law exponent alpha of the FARMS pooled ESD", units="1",
    description=("alpha of the pooled eigenvalues of the h x int(hQ) windows of W (h = 100, Q = 2 by default) on "
                 "a grid of up to 10 x 10 positions over rows and columns, fitted with the FARMS authors' "
                 "xmin_peak rule (xmin in [log10(0.95 p), 1.5 p] of the log-histogram peak p, least one-sided KS D)"),
    reference=REFERENCE, options=dict(FARMS_DEFAULTS), opt_in=True,
)
