"""alpha's bootstrap interval: coverage of a known exponent, width, seeding, and the Dataset variables."""

from __future__ import annotations

import numpy as np
import pytest

import toolkit
from toolkit.metrics.alpha_interval import alpha_interval, bootstrap_alphas
from toolkit.metrics.powerlaw import fit_power_law

TRUE_ALPHA = 2.5


def _spectrum(seed: int, n_bulk: int = 600, n_tail: int = 200) -> np.ndarray:
    """A uniform bulk below 1 and a Pareto tail of exponent TRUE_ALPHA above 1 (the issue's spectra, smaller)."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(0.0, 1.0, n_bulk), (1.0 - rng.random(n_tail)) ** (-1.0 / (TRUE_ALPHA - 1.0))])


@pytest.mark.slow
def test_intervals_cover_the_true_exponent_and_are_not_wider_than_the_spread():
    """At least 85 % of 95 % intervals over independent spectra cover alpha = 2.5, and their mean width is at
    most 1.5x the width a perfect 95 % interval would have (2 x 1.96 x the spread of the fitted alpha over the
    spectra, which includes xmin's choice)."""
    draws = 40
    fits, covered, widths = [], 0, []
    for i in range(draws):
        lam = _spectrum(1000 + i)
        fit = fit_power_law(lam)
        lo, hi = alpha_interval(lam, fit, replicates=60, seed=i)
        fits.append(fit.alpha)
        covered += lo <= TRUE_ALPHA <= hi
        widths.append(hi - lo)
    assert covered >= 0.85 * draws, f"{covered}/{draws} cover alpha = {TRUE_ALPHA}"
    ideal = 2 * 1.96 * float(np.std(fits, ddof=1))
    assert np.mean(widths) <= 1.5 * ideal, (np.mean(widths), ideal)
    # and wider than WeightWatcher's sigma alone would make it: the choice of xmin adds spread
    sigma = np.mean([(a - 1) / np.sqrt(fit_power_law(_spectrum(1000 + i)).num_tail) for i, a in enumerate(fits)])
    assert np.mean(widths) > 2 * 1.96 * sigma


def test_the_same_seed_gives_the_same_interval():
    lam = _spectrum(7)
    fit = fit_power_law(lam)
    a = bootstrap_alphas(lam, fit, replicates=12, seed=3)
    assert np.array_equal(a, bootstrap_alphas(lam, fit, replicates=12, seed=3))
    assert not np.array_equal(a, bootstrap_alphas(lam, fit, replicates=12, seed=4))
    lo, hi = alpha_interval(lam, fit, replicates=12, seed=3)
    assert (lo, hi) == tuple(np.quantile(a[np.isfinite(a)], [0.025, 0.975]))


def test_the_interval_is_in_the_dataset_beside_alpha(tmp_path):
    from toolkit.testing import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    names = ["alpha", "alpha_ci_lower", "alpha_ci_upper"]
    ds = toolkit.weight_stats(path, names, progress=False, cache=False, components=["attn.q", "mlp.down"])
    for name in names[1:]:
        assert ds[name].dims == ("layer", "component") and "bootstrap" in ds[name].attrs["description"]
    lo, a, hi = (ds[n].values for n in ("alpha_ci_lower", "alpha", "alpha_ci_upper"))
    fitted = np.isfinite(a)
    assert fitted.any() and (np.isfinite(lo) == fitted).all()
    assert (lo[fitted] <= hi[fitted]).all()
    again = toolkit.weight_stats(path, names, progress=False, cache=False, components=["attn.q", "mlp.down"])
    np.testing.assert_array_equal(again.alpha_ci_lower.values, ds.alpha_ci_lower.values)  # seeded


def test_the_hover_of_alpha_shows_its_interval_and_tail(tmp_path):
    """Where alpha is shown, its quality is too: the interval, the tail's eigenvalue count and range."""
    from toolkit.plot import prepare_heatmap
    from toolkit.testing import write_tiny_checkpoint
    from toolkit.widgets.cells import Panel, PanelFacts

    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    ds = toolkit.weight_stats(path, ["alpha", "alpha_ci_lower", "alpha_ci_upper", "num_pl_spikes", "alpha_xmin",
                                     "alpha_xmax"], progress=False, cache=False, components=["mlp.down"])
    prepared = prepare_heatmap(ds, "alpha")
    facts = PanelFacts(Panel("m", ds, {}), prepared, "alpha")
    j = list(prepared.cols).index("mlp.down")
    text = "\n".join(facts.lines(0, j))
    cell = ds.sel(layer=0, component="mlp.down")
    assert f"{int(cell.num_pl_spikes)} eigenvalues" in text
    assert "95 % interval: " in text and "range λmax / xmin = " in text
    plain = PanelFacts(Panel("m", ds, {}), prepare_heatmap(ds, "alpha_xmin"), "alpha_xmin")
    assert "95 % interval" not in "\n".join(plain.lines(0, j))
