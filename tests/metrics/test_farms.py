"""alpha_farms against the FARMS authors' procedure, re-typed here from their repository.

The reference below re-types, loop for loop, ``fixed_sampling`` (LLM_Pruning/lib/sampling.py) and the
``fix_fingers='xmin_peak'`` branch of ``analysis_esd`` (LLM_Pruning/lib/esd_utils_farms.py) of
github.com/HUST-AI-HYZ/FARMS (commit 8e07c3f), in float64; the package computes the same thing vectorised.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from toolkit.errors import DegenerateMatrix
from toolkit.metrics.farms import alpha_farms, farms_eigenvalues, farms_windows, fit_peak_authors


def authors_windows_eigs(matrix, num_row_samples=100, Q_ratio=2.0, sampling_ops_per_dim=10):
    rows, cols = matrix.shape
    num_col_samples = int(num_row_samples * Q_ratio)
    row_step = max(1, (rows - num_row_samples) // (sampling_ops_per_dim - 1))
    col_step = max(1, (cols - num_col_samples) // (sampling_ops_per_dim - 1))
    num_row_windows = min(sampling_ops_per_dim, max(1, (rows - num_row_samples) // row_step + 1))
    num_col_windows = min(sampling_ops_per_dim, max(1, (cols - num_col_samples) // col_step + 1))
    all_eigs = []
    for i in range(num_row_windows):
        for j in range(num_col_windows):
            row_start = min(i * row_step, rows - num_row_samples)
            col_start = min(j * col_step, cols - num_col_samples)
            sub = matrix[row_start:row_start + num_row_samples, col_start:col_start + num_col_samples]
            all_eigs.append(torch.square(torch.linalg.svdvals(sub)))
    return torch.sort(torch.cat(all_eigs)).values


def authors_alpha_peak(eigs, bins=100):
    nz_eigs = torch.sort(eigs).values
    N = len(nz_eigs)
    log_nz_eigs = torch.log(nz_eigs)
    alphas = torch.zeros(N - 1, dtype=eigs.dtype)
    Ds = torch.ones(N - 1, dtype=eigs.dtype)
    hist = torch.log10(nz_eigs)
    min_e, max_e = hist.min(), hist.max()
    counts = torch.histc(hist, bins, min=float(min_e), max=float(max_e))
    boundaries = torch.linspace(float(min_e), float(max_e), bins + 1, dtype=eigs.dtype)
    xmin2 = 10 ** boundaries[torch.argmax(counts)]
    xmin_min, xmin_max = torch.log10(0.95 * xmin2), 1.5 * xmin2
    for i, xmin in enumerate(nz_eigs[:-1]):
        if xmin < xmin_min:
            continue
        if xmin > xmin_max:
            break
        n = float(N - i)
        seq = torch.arange(n, dtype=eigs.dtype)
        alpha = 1 + n / (torch.sum(log_nz_eigs[i:]) - n * log_nz_eigs[i])
        alphas[i] = alpha
        if alpha > 1:
            Ds[i] = torch.max(torch.abs(1 - (nz_eigs[i:] / xmin) ** (-alpha + 1) - seq / n))
    k = torch.argmin(Ds)
    return float(alphas[k]), float(Ds[k])


def _student(shape, seed, df=3.0):
    g = np.random.default_rng(seed)
    return torch.from_numpy(g.standard_t(df, size=shape))


@pytest.mark.parametrize("shape, seed, kind, opts", [
    ((300, 700), 1, "gauss", dict(rows=40, ratio=2.0, positions=6)),
    ((1000, 250), 2, "t", dict(rows=30, ratio=1.0, positions=7)),
    ((128, 576), 3, "gauss", dict(rows=50, ratio=3.0, positions=5)),
    pytest.param((576, 1536), 0, "t", {}, marks=pytest.mark.slow),  # the authors' defaults: 10,000 values
])
def test_alpha_farms_is_the_authors_procedure(shape, seed, kind, opts):
    w = _student(shape, seed) if kind == "t" else torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                                                                 dtype=torch.float64)
    names = {"rows": "num_row_samples", "ratio": "Q_ratio", "positions": "sampling_ops_per_dim"}
    want_eigs = authors_windows_eigs(w, **{names[k]: v for k, v in opts.items()})
    got_eigs = farms_eigenvalues(w, **opts)
    np.testing.assert_allclose(got_eigs, want_eigs.numpy(), rtol=1e-10, atol=1e-10 * float(want_eigs.max()))
    want_alpha, want_d = authors_alpha_peak(want_eigs)
    fit = fit_peak_authors(got_eigs)
    assert fit.alpha == pytest.approx(want_alpha, rel=1e-9)
    assert fit.ks_distance == pytest.approx(want_d, rel=1e-9, abs=1e-12)
    assert alpha_farms(w, **opts) == pytest.approx(want_alpha, rel=1e-9)


def test_windows_grid_and_shape():
    win = farms_windows((576, 1536))
    assert len(win) == 100
    assert {(r.stop - r.start, c.stop - c.start) for r, c in win} == {(100, 200)}
    assert win[0] == (slice(0, 100), slice(0, 200))
    assert win[-1] == (slice(468, 568), slice(1332, 1532))  # steps (576 - 100) // 9 = 52, (1536 - 200) // 9 = 148
    assert farms_windows((105, 205)) == [(slice(r, r + 100), slice(c, c + 200)) for r in range(6) for c in range(6)]


def test_a_matrix_smaller_than_the_window_gets_the_largest_window_of_its_ratio():
    win = farms_windows((64, 1000))
    assert {(r.stop - r.start, c.stop - c.start) for r, c in win} == {(64, 128)}
    win = farms_windows((576, 150))
    assert {(r.stop - r.start, c.stop - c.start) for r, c in win} == {(75, 150)}
    with pytest.raises(ValueError, match="no window"):
        farms_windows((10, 1))


def test_degenerate_inputs_are_typed():
    with pytest.raises(DegenerateMatrix, match="all-zero"):
        alpha_farms(torch.zeros(300, 300))
    with pytest.raises(DegenerateMatrix):
        alpha_farms(torch.ones(3))
    with pytest.raises(DegenerateMatrix, match="too short"):
        fit_peak_authors(np.array([1.0]))


def test_sigma_is_the_mle_standard_error():
    fit = fit_peak_authors(farms_eigenvalues(_student((400, 800), 5), rows=40, positions=5))
    assert fit.sigma == pytest.approx((fit.alpha - 1) / math.sqrt(fit.num_tail))


def _resolved_reference(w, rows, positions):
    """The authors' windows (re-typed above) with each window's singular values at or below
    sqrt(max(h, c) eps64) of its largest dropped, by NumPy's SVD: what alpha_farms fits."""
    kept = []
    for r, c in farms_windows(tuple(w.shape), rows, 2.0, positions):
        s = np.linalg.svd(w[r, c].numpy().astype(np.float64), compute_uv=False)
        h, cols = r.stop - r.start, c.stop - c.start
        kept.append(s[s > math.sqrt(max(h, cols) * np.finfo(np.float64).eps) * s[0]] ** 2)
    return np.sort(np.concatenate(kept))


@pytest.mark.parametrize("noise", [0.0, 1e-30, 1e-20])
def test_rows_pruned_to_zero_fit_the_weights_not_the_rounding_noise(noise):
    # FARMS's own use case: a tenth of the rows pruned. Windows of rank below h leave singular values at
    # float64 rounding (~1e-16 of the largest); fitted, they set alpha by how small that noise is. Zeros
    # and values below the toolkit's resolution give the same alpha, that of the resolved windows.
    g = torch.Generator().manual_seed(4)
    w = torch.randn(400, 900, generator=g, dtype=torch.float64)
    pruned = torch.randperm(400, generator=g)[:40]
    w[pruned] = noise * torch.randn(40, 900, generator=g, dtype=torch.float64)
    want = fit_peak_authors(_resolved_reference(w, 40, 6)).alpha
    assert alpha_farms(w, rows=40, positions=6) == pytest.approx(want, rel=1e-9)
    lam = farms_eigenvalues(w, rows=40, positions=6)
    assert lam[lam > 0].min() > 1e-6 * lam.max()  # no rounding noise pooled


def test_a_low_rank_product_in_float32_is_fitted_on_its_resolved_values():
    # rank 4, stored in float32: the product's rounding leaves values ~1e-7 of the largest in every window,
    # below the toolkit's resolution (as for alpha, whose Gram route drops them too)
    g = torch.Generator().manual_seed(5)
    w = torch.randn(512, 4, generator=g) @ torch.randn(4, 1024, generator=g)
    lam = farms_eigenvalues(w)
    assert int(np.count_nonzero(lam)) == 4 * len(farms_windows(tuple(w.shape)))
    assert alpha_farms(w) == pytest.approx(fit_peak_authors(_resolved_reference(w, 100, 10)).alpha, rel=1e-9)


def test_fewer_than_five_pooled_eigenvalues_is_nan_as_the_authors_skip_it():
    # the authors' eigs_num_thresh=5; a 2 x 2 matrix has one 1 x 2 window, two values
    two_by_two = torch.randn(2, 2, generator=torch.Generator().manual_seed(0))
    one_by_four = torch.randn(1, 4, generator=torch.Generator().manual_seed(1))  # three 1 x 2 windows
    for w in (two_by_two, one_by_four):
        with pytest.raises(DegenerateMatrix, match="fewer than 5"):
            alpha_farms(w)


def test_bad_window_options_are_typed_and_many_windows_are_batched(monkeypatch):
    w = _student((300, 600), 6)
    for bad in (float("nan"), float("inf"), 0.0, -1.0):
        with pytest.raises(DegenerateMatrix, match="ratio > 0"):
            alpha_farms(w, ratio=bad)
    # windows are stacked a bounded number at a time: the same pooled values in batches of 7 windows as in one
    whole = farms_eigenvalues(w, rows=40, positions=12)
    monkeypatch.setattr("toolkit.metrics.farms._BATCH_BYTES", 7 * 8 * 40 * 80)
    np.testing.assert_array_equal(farms_eigenvalues(w, rows=40, positions=12), whole)
