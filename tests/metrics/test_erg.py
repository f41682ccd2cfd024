"""The ERG / det X = 1 tail (``toolkit.metrics.erg``): hand-computed spectra, the definition's own O(k^2)
product search, and the metrics on matrices of known singular values.

WeightWatcher's own numbers on the bundled models are compared in
``tests/end_to_end/test_weightwatcher_golden.py`` (the ``ww_*_erg.csv`` tables)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from toolkit.metrics import compute_weight_metrics, fit_power_law, get_metric
from toolkit.metrics.erg import ErgTail, erg_tail

ERG = ["erg_num_spikes", "erg_gap", "erg_xmin", "erg_xmin_rescaled"]


def by_products(lam) -> tuple[int, float]:
    """The definition read literally: rescale to mean 1, multiply the largest first, stop below 1."""
    lam = sorted((float(x) for x in lam), reverse=True)
    mean = sum(lam) / len(lam)
    prod = 1.0
    for t, x in enumerate(lam, start=1):
        prod *= x / mean
        if prod < 1.0:
            return t, x
    raise AssertionError("no tail")


def with_singular_values(sv, rows: int, seed: int = 0) -> torch.Tensor:
    """A (rows, len(sv)) float64 matrix U diag(sv) V^T with random orthonormal U, V."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(rows, len(sv), generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(len(sv), len(sv), generator=g, dtype=torch.float64))
    return u @ torch.diag(torch.as_tensor(sv, dtype=torch.float64)) @ v.T


def test_hand_computed_tail():
    # mean 1.5: rescaled 8/3, 2/3, 1/3, 1/3; products 8/3, 16/9, 16/27 < 1 -> three eigenvalues
    assert erg_tail([4.0, 1.0, 0.5, 0.5]) == ErgTail(3, 0.5, pytest.approx(1 / 3, rel=1e-15))
    # any order is read the same
    assert erg_tail([0.5, 4.0, 0.5, 1.0]).num_spikes == 3


def test_a_product_of_exactly_one_is_not_below_one():
    # mean 2: rescaled 2, 1, 1/2, 1/2 (exact in binary); products 2, 2, 1 (not < 1), 1/2 -> all four
    tail = erg_tail([4.0, 2.0, 1.0, 1.0])
    assert tail == ErgTail(4, 1.0, 0.5)


def test_rank_one_matrix_tail_is_the_spike_and_one_zero():
    # rescaled 3, 0, 0: 3 * 0 = 0 < 1 at the second eigenvalue
    assert erg_tail([9.0, 0.0, 0.0]) == ErgTail(2, 0.0, 0.0)
    assert erg_tail([9.0, -1e-18, 0.0]).num_spikes == 2  # eigensolver rounding below 0 reads as 0


@pytest.mark.parametrize("seed", range(6))
def test_equals_the_product_search_on_heavy_tailed_spectra(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(20, 400))
    lam = rng.pareto(1.0 + 3.0 * rng.random(), size=k) + rng.random(k)  # a power-law tail over a bulk
    t, x = by_products(lam)
    tail = erg_tail(lam)
    assert (tail.num_spikes, tail.xmin) == (t, x)
    assert tail.xmin_rescaled == pytest.approx(x * k / lam.sum(), rel=1e-14)
    assert tail.num_spikes >= 2  # the largest rescaled eigenvalue is >= the mean, 1


def test_a_product_that_overflows_float64_is_still_counted():
    # 1000 eigenvalues 1 and 1200 of 1e-12: rescaled 2.2 (to 1e-12) and 2.2e-12; 2.2^1000 ~ 1e342 overflows.
    # The log-sum 1000 ln 2.2 = 788.46 falls by ln(2.2e-12) = -26.84 per small one: 30 of them take it below 0.
    lam = np.concatenate([np.ones(1000), np.full(1200, 1e-12)])
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.prod(lam[:1000] * lam.size / lam.sum()))
    assert 1000 * math.log(2.2) + 29 * math.log(2.2e-12) > 0 > 1000 * math.log(2.2) + 30 * math.log(2.2e-12)
    assert erg_tail(lam) == ErgTail(1030, 1e-12, pytest.approx(2.2e-12, rel=1e-9))


def test_scale_invariant_count_and_rescaled_value():
    lam = np.random.default_rng(7).pareto(2.0, 300) + 0.1
    a, b = erg_tail(lam), erg_tail(25.0 * lam)
    assert a.num_spikes == b.num_spikes and a.xmin_rescaled == pytest.approx(b.xmin_rescaled, rel=1e-13)
    assert b.xmin == pytest.approx(25.0 * a.xmin, rel=1e-15)


@pytest.mark.parametrize("lam, why", [([1.0], "at least 2"), ([0.0, 0.0], "all-zero"), ([2.0, 2.0, 2.0], "flat"),
                                      ([1.0, math.nan], "non-finite")])
def test_undefined_spectra_raise_with_a_reason(lam, why):
    from toolkit.metrics import DegenerateMatrix

    with pytest.raises(DegenerateMatrix, match=why):
        erg_tail(lam)


def test_metrics_on_a_matrix_of_known_singular_values():
    # eigenvalues 4, 1, 0.5, 0.5 (the hand-computed spectrum): 3 in the tail, its smallest 0.5, rescaled 1/3
    # (the matrix is measured in float32, as weights are: its eigenvalues move by ~1e-7 relative)
    w = with_singular_values(np.sqrt([4.0, 1.0, 0.5, 0.5]), rows=9)
    got = compute_weight_metrics(w, ERG)
    assert got["erg_num_spikes"].value == 3.0
    assert got["erg_xmin"].value == pytest.approx(0.5, rel=1e-6)
    assert got["erg_xmin_rescaled"].value == pytest.approx(1 / 3, rel=1e-6)
    # four eigenvalues are too few for the power-law fit: the gap is undefined, with alpha's reason
    assert math.isnan(got["erg_gap"].value)
    assert got["erg_gap"].reason == compute_weight_metrics(w, ["alpha"])["alpha"].reason != ""


def test_gap_is_the_erg_tail_less_the_power_law_tail():
    rng = np.random.default_rng(0)
    lam = np.sort(rng.pareto(2.5, 120) + 0.05)[::-1]
    w = with_singular_values(np.sqrt(lam), rows=300)
    got = compute_weight_metrics(w, [*ERG, "num_pl_spikes"])
    t, x = by_products(lam)
    assert got["erg_num_spikes"].value == t
    assert got["erg_xmin"].value == pytest.approx(x, rel=1e-6)
    assert got["erg_gap"].value == t - fit_power_law(lam).num_pl_spikes == t - got["num_pl_spikes"].value
    # the gap follows the fit's options (here clip_xmax moves xmin: 83 tail eigenvalues instead of 14)
    clip = fit_power_law(lam, fix_fingers="clip_xmax").num_pl_spikes
    assert clip != fit_power_law(lam).num_pl_spikes
    assert get_metric("erg_gap").evaluate(w, fix_fingers="clip_xmax").value == t - clip


def test_opt_in_like_weightwatchers_erg_option():
    from toolkit.metrics import resolve_metrics

    assert all(get_metric(n).opt_in for n in ERG)
    assert not set(ERG) & {m.name for m in resolve_metrics(None)}
    assert "detX_num" in get_metric("erg_num_spikes").reference and "ERG_gap" in get_metric("erg_gap").reference
