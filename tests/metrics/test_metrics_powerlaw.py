"""alpha: synthetic Pareto samples, a brute-force reference of WeightWatcher's
default fit, degenerate spectra and the cost of the xmin search."""

import math

import numpy as np
import pytest
import torch

from toolkit.metrics import DegenerateMatrix, fit_power_law, get_metric, singular_values
from toolkit.metrics.powerlaw import alpha as alpha_metric


def brute_force(eigenvalues, thresh=1e-5):
    """WeightWatcher 0.7.7 WWFit, written out as plain loops (O(N^2))."""
    x = np.sort(np.asarray(eigenvalues, dtype=np.float64))
    x = x[x > thresh]
    N = len(x)
    small = N < 20
    best = (np.inf, None, None, None)
    for i in range(N - 1):
        n = N - i
        tail = x[i:]
        s = float(np.sum(np.log(tail / x[i])))
        if small and (n < 8 or s <= 1e-12):
            continue
        a = 1 + (n - 1 if small else n) / s if s > 0 else np.inf
        if not a > 1:
            continue
        d = max(abs(1 - (tail[t] / x[i]) ** (1 - a) - t / n) for t in range(n))
        if d < best[0]:
            best = (d, a, x[i], n)
    return best


def pareto(alpha, n, xmin=1.0, seed=0):
    """Continuous Pareto samples, density proportional to x^-alpha for x >= xmin."""
    u = np.random.default_rng(seed).uniform(size=n)
    return xmin * u ** (-1.0 / (alpha - 1.0))


def test_pareto_alpha_2_5_recovered():
    assert fit_power_law(pareto(2.5, 5000, seed=0)).alpha == pytest.approx(2.5, abs=0.1)


@pytest.mark.parametrize("a", [2.0, 2.5, 4.0])
def test_pareto_many_seeds(a):
    fits = [fit_power_law(pareto(a, 5000, xmin=0.3, seed=seed)) for seed in range(10)]
    est = np.array([f.alpha for f in fits])
    assert abs(np.median(est) - a) < 0.05 * (a - 1)
    assert np.max(np.abs(est - a)) < 0.15 * (a - 1)  # a few standard errors (a - 1)/sqrt(n)
    assert all(f.xmin >= 0.3 and f.num_tail >= 500 for f in fits)


def test_bulk_plus_power_law_tail_finds_xmin():
    rng = np.random.default_rng(1)
    bulk = rng.uniform(0.05, 0.9, 3000)
    tail = pareto(3.0, 2000, xmin=1.0, seed=2)
    fit = fit_power_law(np.concatenate([bulk, tail]))
    assert fit.alpha == pytest.approx(3.0, abs=0.15)
    assert 0.9 <= fit.xmin <= 1.5 and fit.num_tail > 800


def _spectra():
    rng = np.random.default_rng(7)
    out = []
    for k, (m, n) in enumerate([(20, 30), (25, 25), (60, 200), (150, 150), (300, 90), (12, 40), (9, 9), (15, 15)]):
        w = rng.standard_normal((m, n)) if k % 2 else rng.standard_t(2.5, size=(m, n))
        out.append(np.linalg.svd(w, compute_uv=False) ** 2)
    out.append(pareto(2.2, 400, seed=3))
    out.append(np.round(pareto(3.0, 300, seed=4), 1))  # many ties
    out.append(np.concatenate([np.full(5, 1e-7), pareto(2.0, 100, seed=5)]))  # below-threshold values
    return out


@pytest.mark.parametrize("ev", _spectra(), ids=lambda ev: f"N{len(ev)}")
def test_matches_brute_force_weightwatcher(ev):
    d, a, xmin, n_tail = brute_force(ev)
    fit = fit_power_law(ev)
    assert fit.alpha == pytest.approx(a, rel=1e-9)
    assert fit.xmin == xmin
    assert fit.ks_distance == pytest.approx(d, rel=1e-9)
    assert fit.num_tail == n_tail


def test_metric_uses_squared_singular_values_unnormalised():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(80, 200, generator=g) * 0.05
    s = singular_values(w)
    assert alpha_metric(w, s) == pytest.approx(brute_force(s.numpy() ** 2)[1], rel=1e-9)
    assert get_metric("alpha").evaluate(w).value == pytest.approx(fit_power_law(s.numpy() ** 2).alpha)


def test_scale_invariant_above_threshold_and_threshold_drops_tiny():
    ev = pareto(2.7, 600, seed=9)
    a = fit_power_law(ev).alpha
    assert fit_power_law(ev * 1e3).alpha == pytest.approx(a, rel=1e-9)
    assert fit_power_law(np.concatenate([ev, np.full(50, 1e-6), [0.0]])).alpha == pytest.approx(a, rel=1e-12)


def test_degenerate_spectra():
    with pytest.raises(DegenerateMatrix, match="7 eigenvalues above 1e-05"):
        fit_power_law(np.arange(1.0, 8.0))
    with pytest.raises(DegenerateMatrix, match="all eigenvalues of the tail are equal"):
        fit_power_law(np.ones(12))  # small-N path
    with pytest.raises(DegenerateMatrix, match="all eigenvalues of the tail are equal"):
        fit_power_law(np.ones(50))  # standard path
    with pytest.raises(DegenerateMatrix, match="0 eigenvalues"):
        fit_power_law(np.full(30, 1e-6))
    fit_power_law(np.arange(1.0, 9.0))  # 8 is enough
    v = get_metric("alpha").evaluate(torch.eye(40))
    assert math.isnan(v.value) and "equal" in v.reason


def test_long_spectrum_matches_brute_force():
    # 1200 eigenvalues, a bulk and a power-law tail: the vectorised xmin search (its speed is the benchmarks'
    # business) gives the loops' fit
    rng = np.random.default_rng(0)
    ev = np.concatenate([rng.uniform(0.2, 3.0, 1100), pareto(2.5, 100, xmin=3.0, seed=1)])
    d, a, xmin, n_tail = brute_force(ev)
    fit = fit_power_law(ev)
    assert (fit.xmin, fit.num_tail) == (xmin, n_tail)
    assert fit.alpha == pytest.approx(a, rel=1e-9) and fit.ks_distance == pytest.approx(d, rel=1e-9)
