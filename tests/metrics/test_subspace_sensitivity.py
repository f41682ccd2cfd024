"""``subspace_overlap_sensitivity``: Wedin's bound beside the overlap, against NumPy's SVD (issue 42).

The value must be an upper bound on ``||dW||_2 / delta`` (delta the gap at k across the pair, from NumPy's
singular values) and close to it, and ``subspace_overlap >= 1 - s^2`` wherever ``s < 1``, on adversarial
families: SVD-style rescaling, swapped top directions, clusters at k, small and huge scales, both routes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from toolkit.metrics import subspace
from toolkit.metrics.diff import DiffContext, compute_diff_metrics
from toolkit.metrics.registry import DegenerateMatrix


def svd_sensitivity(b: np.ndarray, t: np.ndarray, k: int) -> float:
    sb, st = np.linalg.svd(b, compute_uv=False), np.linalg.svd(t, compute_uv=False)
    gap = max(st[k - 1] - sb[k], sb[k - 1] - st[k])
    return np.linalg.norm(t - b, 2) / gap if gap > 0 else math.inf


def svd_overlap(b: np.ndarray, t: np.ndarray, k: int) -> float:
    ub, ut = np.linalg.svd(b)[0][:, :k], np.linalg.svd(t)[0][:, :k]
    return float(np.sum((ub.T @ ut) ** 2) / k)


def with_spectrum(rng, m, n, s):
    u, _ = np.linalg.qr(rng.standard_normal((m, m)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (u[:, : len(s)] * s) @ v[:, : len(s)].T, u, v


def measured(b, t, k):
    got = compute_diff_metrics(torch.from_numpy(b), torch.from_numpy(t), k=k)
    return got["subspace_overlap"], got["subspace_overlap_sensitivity"]


def families(rng):
    """(name, base, target) pairs, float64, 60 x 40."""
    s = np.linspace(10.0, 1.0, 40)
    b, u, v = with_spectrum(rng, 60, 40, s)
    yield "small update", b, b + 1e-3 * rng.standard_normal(b.shape)
    yield "moderate update", b, b + 0.05 * rng.standard_normal(b.shape)
    z = rng.uniform(0.5, 2.0, 40)  # SVD-style fine-tune: same vectors, values rescaled (SVF / PiSSA-like)
    yield "svd-style rescale", b, (u[:, :40] * (s * z)) @ v.T
    yield "top directions swapped", b, (u[:, :40] * s[::-1]) @ v.T
    c = s.copy()
    c[3:6] = 5.0 + np.array([1e-6, 0.0, -1e-6])  # a cluster across k = 4
    bc, _, _ = with_spectrum(rng, 60, 40, c)
    yield "cluster across k", bc, bc + 1e-4 * rng.standard_normal(bc.shape)
    yield "huge scale", b * 1e150, (b + 0.01 * rng.standard_normal(b.shape)) * 1e150
    yield "tiny scale", b * 1e-150, (b + 0.01 * rng.standard_normal(b.shape)) * 1e-150


@pytest.mark.parametrize("k", [1, 4, 16])
def test_sensitivity_bounds_and_equals_wedin_from_numpy(k):
    rng = np.random.default_rng(k)
    seen = 0
    for name, b, t in families(rng):
        overlap, sens = measured(b, t, k)
        ref = svd_sensitivity(b, t, k)
        if math.isnan(sens.value):
            assert ref == math.inf or ref > 1e3 or "not determined" in sens.reason, (name, ref, sens.reason)
            continue
        seen += 1
        # an upper bound on Wedin's s, within the exact route's solver padding
        assert sens.value >= ref * (1 - 1e-9), name
        assert sens.value == pytest.approx(ref, rel=1e-6), name
        if sens.value < 1:
            assert overlap.value >= 1 - sens.value ** 2 - 1e-9, name
            assert svd_overlap(b, t, k) >= 1 - sens.value ** 2 - 1e-9, name
    assert seen >= 4


def test_swapped_top_directions_are_flagged_not_bounded():
    """A target whose top directions are the base's bottom ones: the overlap is 0 and the sensitivity says the
    update is far beyond the gap at k (s >> 1), never a small number."""
    rng = np.random.default_rng(7)
    s = np.linspace(10.0, 1.0, 40)
    b, u, v = with_spectrum(rng, 60, 40, s)
    t = (u[:, :40] * s[::-1]) @ v.T
    overlap, sens = measured(b, t, 4)
    assert overlap.value == pytest.approx(svd_overlap(b, t, 4), abs=1e-9) and overlap.value < 1e-9
    assert sens.value == pytest.approx(svd_sensitivity(b, t, 4), rel=1e-9) and sens.value > 10


def test_gap_across_the_pair_is_at_least_the_mean_own_gap():
    """The two terms of delta sum to the two sides' own gaps at k, so delta >= their mean: reordered values
    (the 1st-4th and 5th-8th exchanged, vectors kept) leave the sorted spectra equal and delta = the own gap."""
    rng = np.random.default_rng(8)
    s = np.linspace(10.0, 1.0, 40)
    b, u, v = with_spectrum(rng, 60, 40, s)
    z = s.copy()
    z[:4], z[4:8] = s[4:8], s[:4]
    t = (u[:, :40] * z) @ v.T
    overlap, sens = measured(b, t, 4)
    assert overlap.value < 1e-9
    assert sens.value == pytest.approx(np.linalg.norm(t - b, 2) / (s[3] - s[4]), rel=1e-9)


def test_near_degenerate_base_reads_as_not_separated():
    """sigma_4 - sigma_5 = 1e-4 of the base, an update of norm ~1e-2: s >> 1 whatever the overlap says."""
    rng = np.random.default_rng(3)
    s = np.linspace(10.0, 1.0, 40)
    s[4] = s[3] - 1e-4
    b, _, _ = with_spectrum(rng, 60, 40, s)
    e = rng.standard_normal(b.shape)
    t = b + 1e-2 * e / np.linalg.norm(e, 2)
    _, sens = measured(b, t, 4)
    assert math.isnan(sens.value) or sens.value >= 1
    ref = svd_sensitivity(b, t, 4)
    assert ref >= 1


def test_unchanged_pair_is_zero():
    b = np.random.default_rng(0).standard_normal((30, 20))
    _, sens = measured(b, b.copy(), 4)
    assert sens.value == 0.0


def test_krylov_route_is_an_upper_bound_of_the_exact():
    """A 1200 x 1024 spiked pair takes the Krylov route on both sides: its s is at least the exact route's
    and within 1e-4 of it (Ritz values of a spiked spectrum converge far below the tolerance)."""
    rng = np.random.default_rng(11)
    m, n, k = 1200, 1024, 8
    spikes = np.geomspace(200.0, 20.0, 24)
    lo = rng.standard_normal((m, n)) / np.sqrt(m)
    u = np.linalg.qr(rng.standard_normal((m, 24)))[0]
    v = np.linalg.qr(rng.standard_normal((n, 24)))[0]
    b = lo + (u * spikes) @ v.T
    t = b + 0.05 * rng.standard_normal((m, n)) / np.sqrt(m)
    wb, wt = torch.from_numpy(b.astype(np.float32)), torch.from_numpy(t.astype(np.float32))
    ctx = DiffContext(wb, wt)
    fast = [ctx.top_subspace(side, k) for side in ("base", "target")]
    exact = [subspace.exact_top_subspace(w, k) for w in (wb, wt)]
    sb = np.linalg.svd(wb.double().numpy(), compute_uv=False)
    st = np.linalg.svd(wt.double().numpy(), compute_uv=False)
    for f, e, sv in zip(fast, exact, (sb, st), strict=True):
        assert f.sigma_k <= sv[k - 1] * (1 + 1e-12) and f.sigma_next >= sv[k] * (1 - 1e-12)
        assert e.sigma_k <= sv[k - 1] * (1 + 1e-12) and e.sigma_next >= sv[k] * (1 - 1e-12)
    from toolkit.metrics.diff import subspace_overlap_sensitivity

    got = subspace_overlap_sensitivity(wb, wt, ctx, k=k)
    ref = svd_sensitivity(wb.double().numpy(), wt.double().numpy(), k)
    assert ref * (1 - 1e-9) <= got <= ref * (1 + 1e-4)


def test_bounds_carry_the_matrix_scale():
    """A float64 matrix past the Gram range is scaled by a power of two inside; the bounds are the matrix's own."""
    rng = np.random.default_rng(5)
    s = np.linspace(10.0, 1.0, 20)
    b, _, _ = with_spectrum(rng, 30, 20, s)
    got = subspace.top_subspace(torch.from_numpy(b * 1e200), 4)
    assert got.sigma_k == pytest.approx(10.0 * 1e200 - (10.0 - 1.0) / 19 * 3 * 1e200, rel=1e-9)
    assert got.sigma_next == pytest.approx(s[4] * 1e200, rel=1e-9)


def test_degenerate_side_raises_for_the_sensitivity_too():
    w = torch.eye(8, dtype=torch.float64)
    ctx = DiffContext(w, w * 1.5)
    from toolkit.metrics.diff import subspace_overlap_sensitivity

    with pytest.raises(DegenerateMatrix):
        subspace_overlap_sensitivity(w, w * 1.5, ctx, k=3)
