"""The batched default fit (toolkit.metrics.powerlaw_batch) against the fit of one spectrum at a time, on the
same bootstrap draws, and against an independent brute-force KS scan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.errors import DegenerateMatrix
from toolkit.metrics.alpha_interval_xmin import semiparametric_alphas, semiparametric_spectra
from toolkit.metrics.powerlaw import fit_power_law
from toolkit.metrics.powerlaw_batch import fit_alphas


def one_at_a_time(spectra: np.ndarray) -> np.ndarray:
    """The oracle: ``fit_power_law`` on each row alone (the interval's route before the batch), NaN where it
    refuses the row."""
    out = []
    for row in spectra:
        try:
            out.append(fit_power_law(row).alpha)
        except DegenerateMatrix:
            out.append(np.nan)
    return np.array(out)


def brute_force_alpha(x: np.ndarray) -> float:
    """WeightWatcher 0.7.7's standard fit as it is written (``WW_powerlaw.fit_power_law_standard``), every
    candidate scored in full, N >= 20: alpha_i = 1 + n / sum ln(x_j / x_i), D_i = max_t |1 - (x_{i+t}/x_i)^(1-a)
    - t/n|, D = 1 where alpha <= 1, first argmin."""
    x = np.sort(x)
    d, a = np.ones(x.size - 1), np.empty(x.size - 1)
    for i in range(x.size - 1):
        tail = x[i:]
        with np.errstate(divide="ignore"):
            a[i] = 1.0 + tail.size / np.sum(np.log(tail / x[i]))
        if a[i] > 1.0:
            d[i] = np.max(np.abs(1.0 - (tail / x[i]) ** (1.0 - a[i]) - np.arange(tail.size) / tail.size))
    return float(a[np.argmin(d)])


def _heavy(rng, n=600):
    """Eigenvalues of a Student-t(3) matrix's Gram (a heavy tail above a bulk)."""
    w = rng.standard_t(3, size=(n, 2 * n)) / np.sqrt(2 * n)
    return np.linalg.eigvalsh(w @ w.T)


def _marchenko_pastur(rng, n=400):
    """Eigenvalues of a Gaussian matrix's Gram: no tail to speak of (Marchenko-Pastur)."""
    w = rng.standard_normal((n, 2 * n)) / np.sqrt(2 * n)
    return np.linalg.eigvalsh(w @ w.T)


def _short_tail(rng):
    """30 Pareto(2.5) values above 1 over 90 uniform ones below (the coverage benchmark's shortest tail)."""
    return np.concatenate([rng.uniform(0.0, 1.0, 90), (1.0 - rng.random(30)) ** (-1.0 / 1.5)])


def _ties(rng):
    """Values on a grid of 0.5: long runs of equal eigenvalues, in the bulk and in the tail."""
    return np.round(2.0 * (1.0 - rng.random(400)) ** (-1.0 / 1.2)) / 2.0 + 0.5


def _pruned(rng):
    """A long spectrum (3000 values): the fit prunes in several rounds of bounds (K = 8, 32, 128)."""
    return np.concatenate([rng.uniform(0.0, 1.0, 2500), (1.0 - rng.random(500)) ** (-1.0 / 2.0)])


SPECTRA = {"heavy_tailed": _heavy, "marchenko_pastur": _marchenko_pastur, "short_tail_of_30": _short_tail,
           "ties": _ties, "pruned": _pruned}


@pytest.mark.parametrize("name", sorted(SPECTRA))
def test_the_batched_fit_equals_the_fit_of_each_replicate_alone(name):
    """The semi-parametric replicates of a spectrum refitted all at once give, row by row, the alpha
    ``fit_power_law`` gives each alone (within 1e-12 relative; the same rows refused)."""
    rng = np.random.default_rng([44, len(name)])
    lam = SPECTRA[name](rng)
    fit = fit_power_law(lam)
    spectra = semiparametric_spectra(lam, fit, replicates=60 if name != "pruned" else 12, seed=1)
    batched, alone = fit_alphas(spectra), one_at_a_time(spectra)
    assert np.isfinite(alone).sum() >= 0.9 * alone.size
    # probing first around the fit's tail (the interval's route) changes the cost, not the result
    np.testing.assert_array_equal(fit_alphas(spectra, tail_hint=int(fit.num_tail)), batched)
    np.testing.assert_array_equal(np.isnan(batched), np.isnan(alone))
    np.testing.assert_allclose(batched, alone, rtol=1e-12, atol=0)
    # the interval's replicates are these fits, the refused ones left out
    np.testing.assert_allclose(semiparametric_alphas(lam, fit, replicates=spectra.shape[0], seed=1),
                               alone[np.isfinite(alone)], rtol=1e-12, atol=0)


def test_the_batched_fit_equals_a_brute_force_ks_scan():
    """Rows of the heavy-tailed, tied and short-tailed replicates against WeightWatcher's O(N^2) scan."""
    rng = np.random.default_rng(7)
    for make in (_heavy, _ties, _short_tail):
        lam = make(rng)
        rows = semiparametric_spectra(lam, fit_power_law(lam), replicates=10, seed=2)
        np.testing.assert_allclose(fit_alphas(rows), [brute_force_alpha(r) for r in rows], rtol=1e-12, atol=0)


def test_small_and_degenerate_rows():
    """N < 20 (WeightWatcher's small-N fit), a flat row, rows shorter than min_eigenvalues: as the fit alone."""
    rng = np.random.default_rng(3)
    small = np.sort(np.concatenate([rng.uniform(0.1, 1.0, (20, 6)), 1.0 + rng.pareto(1.5, (20, 10))], axis=1))
    small[3] = 2.0  # flat: refused
    small[4, -9:] = small[4, -9]  # the top 9 values equal: the small-N fit skips the flat tails
    batched, alone = fit_alphas(small), one_at_a_time(small)
    assert np.isnan(alone[3]) and np.isfinite(alone).sum() == 19
    np.testing.assert_array_equal(np.isnan(batched), np.isnan(alone))
    np.testing.assert_allclose(batched, alone, rtol=1e-12, atol=0)
    assert np.isnan(fit_alphas(small[:, :7])).all()  # fewer than 8 values
    flat = np.vstack([np.full(50, 3.0), np.linspace(1.0, 1.0 + 1e-9, 50), np.geomspace(1.0, 100.0, 50)])
    np.testing.assert_array_equal(np.isnan(fit_alphas(flat)), np.isnan(one_at_a_time(flat)))
    with pytest.raises(ValueError, match="stack"):
        fit_alphas(np.ones(30))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(n=st.integers(20, 260), rows=st.integers(1, 12), scale=st.floats(-3.0, 12.0),
       exponent=st.floats(1.05, 40.0), grid=st.sampled_from([0.0, 1e-3, 0.25]), seed=st.integers(0, 2**32 - 1),
       hint=st.one_of(st.none(), st.integers(1, 600)))
def test_the_batched_fit_on_stacks_built_to_defeat_it(n, rows, scale, exponent, grid, seed, hint):
    """Rows far from 1 (5e-5 .. 1e18, above the threshold: large logarithms, the approximate distances' bound
    widest), steep and shallow tails (exponents 1.05 .. 40), values rounded to a grid (ties), with or without a
    tail size to probe first (any, also one longer than the rows): row by row as the single fit."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(5, n))
    x = np.concatenate([rng.uniform(0.05, 1.0, (rows, n - k)), (1.0 - rng.random((rows, k))) ** (-1 / (exponent - 1))],
                       axis=1)
    if grid:
        x = np.round(x / grid) * grid + grid
    x = np.sort(np.minimum(x, 1e6) * 10.0 ** scale, axis=1)
    batched, alone = fit_alphas(x, tail_hint=hint), one_at_a_time(x)
    np.testing.assert_array_equal(np.isnan(batched), np.isnan(alone))
    np.testing.assert_allclose(batched, alone, rtol=1e-12, atol=0)


@pytest.mark.parametrize("threads", [1, 2])
def test_exp_minus_one_is_within_its_stated_absolute_bound_of_expm1(threads):
    """The fits' deviations take e^z - 1 by torch's exp (one intra-op thread, as in a pipeline) or NumPy's: within
    2^-52 of NumPy's expm1 for every z <= 0 (tiny, subnormal-producing, -0, -inf), NaN kept, computed in place."""
    import torch

    from toolkit.metrics.power_law_tail import exp_minus_one

    rng = np.random.default_rng(3)
    z = -np.concatenate([np.logspace(-320, 3, 20_000), rng.uniform(0, 50, 20_000), [0.0, -0.0, 700.0, 745.1, np.inf]])
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = exp_minus_one(z.copy())
        buf = np.array([-1.0, np.nan, -0.5])
        out = exp_minus_one(buf)
    finally:
        torch.set_num_threads(before)
    assert np.max(np.abs(got - np.expm1(z))) <= 2.0 ** -52
    assert got[-1] == -1.0
    assert out is buf and np.isnan(out[1]) and abs(out[0] - np.expm1(-1.0)) <= 2.0 ** -52
