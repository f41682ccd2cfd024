"""Issue 42: a tail with no spread (eigenvalues equal within rounding) is NaN with its reason.

Before, an orthogonal matrix (every eigenvalue 1, up to rounding) got alpha ~ 7.6e7 (1.4e15 in the issue's
case), an interval around it, the same alpha_farms and an ERG tail of 256 (93 in the issue's): rounding
noise fitted as a power law. A matrix with two distinct singular values got alpha ~ 1.2e8 from its top
cluster.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from toolkit.metrics.compute import compute_weight_metrics
from toolkit.metrics.power_law_tail import UNIT_ROUNDOFF32, flat_reason
from toolkit.metrics.powerlaw import fit_power_law

FITTED = ["alpha", "alpha_ci_lower", "alpha_ci_upper", "alpha_ci_xmin_lower", "alpha_ci_xmin_upper", "alpha_farms",
          "alpha_xmin", "num_pl_spikes", "erg_gap"]
ERG = ["erg_num_spikes", "erg_xmin", "erg_xmin_rescaled"]


def orthogonal(d: int, seed: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))[0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_orthogonal_matrix_is_nan_everywhere(dtype):
    w = torch.from_numpy(orthogonal(256, 0)).to(dtype)
    s = np.linalg.svd(w.double().numpy(), compute_uv=False)
    assert 0 < s.max() - s.min() < 1e-5  # rounding noise, no power law
    got = compute_weight_metrics(w, FITTED + ERG)
    for name in FITTED:
        assert math.isnan(got[name].value) and "equal within rounding" in got[name].reason, (name, got[name])
    for name in ERG:
        assert math.isnan(got[name].value) and "flat spectrum" in got[name].reason, (name, got[name])


def test_two_distinct_singular_values():
    """Half the singular values 2, half 1: the fit's tail is the top cluster (no spread): NaN. The ERG tail
    is defined (it spans both clusters): t* = 128 + ceil(128 ln 1.6 / -ln 0.4) = 194, from the values.
    ``alpha_farms`` is not asked: it fits the pooled spectra of 100 x 200 windows, whose singular values are
    spread (a window of U diag(s) V^T is no such product), so its tail is a real one."""
    w = torch.from_numpy(orthogonal(256, 1) * np.where(np.arange(256) < 128, 2.0, 1.0)).float()
    fitted = [name for name in FITTED if name != "alpha_farms"]
    got = compute_weight_metrics(w, fitted + ERG)
    for name in fitted:
        assert math.isnan(got[name].value) and "equal within rounding" in got[name].reason, (name, got[name])
    assert got["erg_num_spikes"].value == 128 + math.ceil(128 * math.log(1.6) / -math.log(0.4))


def test_flat_reason_threshold():
    """Spread against 2 u sqrt(N) lambda_max, u = 2^-24 (Weyl, float32 rounding of W)."""
    n = 400
    edge = 2 * UNIT_ROUNDOFF32 * math.sqrt(n)
    assert flat_reason(1.0 - 0.9 * edge, 1.0, n)
    assert not flat_reason(1.0 - 1.1 * edge, 1.0, n)
    assert flat_reason(0.0, 0.0, n)


def test_a_spread_tail_is_fitted_as_before():
    """A tail spread just beyond rounding is fitted (alpha large but finite), as the default fit did."""
    rng = np.random.default_rng(3)
    lam = np.sort(rng.pareto(2.5, 500) + 1.0)
    fit = fit_power_law(lam)
    assert 2.0 < fit.alpha < 5.0
    x = lam[lam >= fit.xmin]
    n = x.size
    want = 1 + n / np.log(x / fit.xmin).sum()  # Clauset et al. (2009) eq. 3.1
    assert fit.alpha == pytest.approx(want, rel=1e-12)
