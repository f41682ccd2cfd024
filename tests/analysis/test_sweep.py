"""Notebook 05's grid: the paired bootstrap of perplexity ratios over held-out windows, a reading that counts wins
and losses only beyond that noise, and the three allocations on one budget."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr

from toolkit.analysis.sweep import ALLOCATIONS, allocation_for, paired_ratio, reading


def test_paired_ratio_against_a_hand_bootstrap():
    rng = np.random.default_rng(0)
    counts = rng.integers(100, 128, 12)
    base = counts * rng.uniform(3.0, 4.0, 12)
    got = base + counts * rng.normal(0.1, 0.05, 12)
    r = paired_ratio(got, base, counts, replicates=4000, seed=3)
    assert r["ratio"] == pytest.approx(math.exp((got.sum() - base.sum()) / counts.sum()))
    assert r["ppl"] == pytest.approx(math.exp(got.sum() / counts.sum()))
    idx = np.random.default_rng(3).integers(0, 12, (4000, 12))  # the same draws, by hand
    ratios = np.exp((got[idx].sum(1) - base[idx].sum(1)) / counts[idx].sum(1))
    assert (r["lo"], r["hi"]) == tuple(np.quantile(ratios, [0.025, 0.975]))
    assert 1 < r["lo"] < r["ratio"] < r["hi"]
    same = paired_ratio(base, base, counts)
    assert same["ratio"] == same["lo"] == same["hi"] == 1.0


def row(pruner, metric, eps, ratio, lo, hi, ppl=50.0):
    return {"pruner": pruner, "sparsity": 0.5, "allocation": "alpha", "metric": metric, "epsilon": eps,
            "perplexity": ppl, "ratio": ratio, "lo": lo, "hi": hi}


def result(rows, dense=20.0):
    return {"dense_perplexity": dense, "tokens": 1536, "windows": 12, "rows": rows,
            "settings": {"pruners": ["magnitude", "wanda"], "metrics": ["alpha", "alpha_peak"], "level": 0.95,
                         "window": 128}}


def test_the_reading_counts_only_what_clears_the_noise():
    rows = [row("magnitude", "alpha", 0.1, 0.8, 0.7, 0.9), row("magnitude", "alpha", 0.2, 0.95, 0.85, 1.05),
            row("magnitude", "alpha_peak", 0.1, 1.3, 1.1, 1.5, ppl=900.0), row("wanda", "alpha", 0.1, 0.9, 0.85, 0.97),
            {**row("wanda", "alpha_peak", 0.3, 0, 0, 0), "refused": "too large"}]
    text = reading(result(rows))
    assert text.startswith("Of the 4 settings of the grid (sparsity, ε, metric, pruner) the alpha allocation wins in "
                           "2, loses in 1, within the noise in 1; its wins: 0.80x to 0.90x of uniform's perplexity; "
                           "its losses: 1.30x")
    assert "1 setting(s) were refused" in text
    assert "- magnitude, ranked by `alpha`: wins in 1, loses in 0, within the noise in 1; its wins: 0.80x" in text
    assert "- wanda, ranked by `alpha_peak`: wins in 0, loses in 0, within the noise in 0 (of 0)" in text
    assert "Perplexities up to 900 mean the pruned model no longer writes usable text" in text
    assert "every" not in text
    assert "lies wholly beyond 0.98x or 1.02x: a margin of 2% for the noise of one held-out text" in text


def test_a_ratio_within_the_margin_is_no_win_however_tight_its_interval():
    """Issue 45, item 6: 0.99x [0.985, 0.995] was a win; one held-out text's windows say nothing of another text."""
    rows = [row("magnitude", "alpha", 0.1, 0.99, 0.985, 0.995), row("wanda", "alpha", 0.1, 0.97, 0.96, 0.979),
            row("wanda", "alpha_peak", 0.1, 1.01, 1.005, 1.015)]
    text = reading(result(rows))
    assert "wins in 1, loses in 0, within the noise in 2; its wins: 0.97x" in text
    assert "wins in 2, loses in 1" in reading(result(rows), margin=0.0)  # the old rule: the interval excludes 1


def test_the_three_allocations_spend_one_budget():
    rng = np.random.default_rng(1)
    ds = xr.Dataset({"alpha": (("layer", "component"), rng.uniform(2, 8, (6, 3)))},
                    coords={"layer": range(6), "component": ["a", "b", "c"],
                            "n_rows": (("layer", "component"), rng.integers(8, 64, (6, 3))),
                            "n_cols": (("layer", "component"), rng.integers(8, 64, (6, 3)))})
    w = (ds.n_rows * ds.n_cols).values
    shares = {name: allocation_for(ds, name, 0.6, epsilon=0.2).values for name in ALLOCATIONS}
    for s in shares.values():
        assert (s * w).sum() / w.sum() == pytest.approx(0.6, abs=1e-12)
    assert np.allclose(shares["uniform"], 0.6)
    assert np.corrcoef(shares["alpha"].ravel(), shares["reverse alpha"].ravel())[0, 1] < -0.99
    with pytest.raises(ValueError, match="unknown allocation 'random'"):
        allocation_for(ds, "random", 0.6)
