"""``weight_stats(fit=FitOptions(...))``: fix_fingers, xmax, WeightWatcher's skip rules, seed, the truncated power law.

References are independent of the code under test: NumPy's eigenvalues of the stored matrices, the
``powerlaw`` package (the one WeightWatcher calls for ``xmin_peak`` and ``fit="TPL"``), WeightWatcher's
WWFit written out as plain loops (``brute_force``, ``ww_clip_xmax_reference``), SciPy's quadrature and
its Jensen-Shannon distance.
"""

from __future__ import annotations

import warnings

import numpy as np
import powerlaw
import pytest
import scipy.integrate
import scipy.spatial.distance
import xarray as xr
from safetensors.torch import load_file
from test_metrics_esd import ww_clip_xmax_reference
from test_metrics_powerlaw import brute_force

import toolkit
from toolkit.errors import InvalidOptionError
from toolkit.metrics.fit_options import FitOptions
from toolkit.metrics.powerlaw import fit_power_law
from toolkit.metrics.truncated_powerlaw import fit_truncated_power_law
from toolkit.metrics.xmin_peak import fit_xmin_peak
from toolkit.testing import write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("cache")
FIT = ["alpha", "alpha_xmin", "num_pl_spikes"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("fit") / "m", "llama", num_layers=2, seed=5)


def eigenvalues(ckpt, name) -> np.ndarray:
    w = load_file(str(ckpt / "model.safetensors"))[name].double().numpy()
    return np.linalg.eigvalsh(w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T)


def powerlaw_xmin_peak(x) -> powerlaw.Fit:
    """The ``powerlaw`` package's fit that WeightWatcher 0.7.7's ``fix_fingers="xmin_peak"`` asks for: xmin
    searched between 0.95 and 1.5 times the peak of a 100-bin histogram of log10(lambda)."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    counts, edges = np.histogram(np.log10(x), bins=100)
    peak = 10 ** edges[np.argmax(counts)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return powerlaw.Fit(x, xmin=(np.log10(0.95 * peak), 1.5 * peak), verbose=False)


def reference_fit(lam, fix_fingers=None, xmax=None) -> tuple[float, float]:
    """(alpha, xmin) of WeightWatcher's fit of ``lam`` with the options, from the independent references."""
    lam = np.sort(lam)
    if fix_fingers == "clip_xmax":
        (_, a, xmin, _), _, _ = ww_clip_xmax_reference(lam)
        return a, xmin
    if fix_fingers == "xmin_peak":
        ref = powerlaw_xmin_peak(lam[lam > 1e-5])
        return ref.alpha, ref.xmin
    _, a, xmin, _ = brute_force(lam[:-xmax] if xmax else lam)
    return a, xmin


@pytest.mark.parametrize("fit, kwargs", [
    (FitOptions(fix_fingers="clip_xmax"), dict(fix_fingers="clip_xmax")),
    (FitOptions(fix_fingers="xmin_peak"), dict(fix_fingers="xmin_peak")),
    ({"xmax": 2}, dict(xmax=2)),
])
def test_fit_options_reach_every_fit_column(ckpt, fit, kwargs):
    ds = toolkit.weight_stats(ckpt, FIT, progress=False, fit=fit)
    default = toolkit.weight_stats(ckpt, FIT, progress=False)
    lam = eigenvalues(ckpt, "model.layers.1.mlp.gate_proj.weight")
    alpha, xmin = reference_fit(lam, **kwargs)
    cell = ds.sel(layer=1, component="mlp.gate")
    assert float(cell.alpha) == pytest.approx(alpha, rel=1e-9)
    assert float(cell.alpha_xmin) == pytest.approx(xmin, rel=1e-9)
    kept = np.sort(lam)[:-kwargs["xmax"]] if "xmax" in kwargs else lam  # xmax=K: the K largest leave every column
    assert float(cell.num_pl_spikes) == np.count_nonzero(kept >= xmin * (1 - 1e-12))
    # the cache did not hand back the default fit (the options are in the key)
    assert not np.allclose(ds.alpha.values, default.alpha.values, equal_nan=True)
    assert ds.attrs["fit_fix_fingers"] == kwargs.get("fix_fingers", "none")
    assert ds.attrs["fit_xmax"] == kwargs.get("xmax", 0)
    assert "fix_fingers=" in ds.alpha.attrs["fit_options"]


def test_attrs_survive_netcdf(ckpt, tmp_path):
    ds = toolkit.weight_stats(ckpt, ["alpha"], progress=False, fit=FitOptions(fix_fingers="clip_xmax", seed=3))
    ds.to_netcdf(tmp_path / "d.nc")
    back = xr.open_dataset(tmp_path / "d.nc")
    assert back.attrs["fit_fix_fingers"] == "clip_xmax" and int(back.attrs["fit_seed"]) == 3
    assert int(back.attrs["fit_max_N"]) == 0  # off
    assert FitOptions.from_attrs(back.attrs) == FitOptions(fix_fingers="clip_xmax", seed=3)
    back.close()


def test_a_kept_spectrum_carries_its_fit_with_the_runs_options(ckpt):
    """keep_spectra measures alpha and alpha_xmin with the spectrum (with the run's fit options), so the ESD
    figure draws the fit the run made and computes nothing."""
    from toolkit.plot.esd_figure import prepare_esd

    fit = FitOptions(fix_fingers="clip_xmax")
    ds = toolkit.weight_stats(ckpt, ["stable_rank"], progress=False, keep_spectra=True, fit=fit)
    assert {"alpha", "alpha_xmin", "stable_rank"} <= set(ds.data_vars)
    p = prepare_esd(ds, layer=1, component="mlp.gate")
    lam = eigenvalues(ckpt, "model.layers.1.mlp.gate_proj.weight")
    assert p.alpha == pytest.approx(reference_fit(lam, fix_fingers="clip_xmax")[0], rel=1e-9)
    assert p.alpha == float(ds.alpha.sel(layer=1, component="mlp.gate"))
    bare = ds.drop_vars(["alpha", "alpha_xmin"])  # a Dataset without the fit: drawn without one, not refitted
    q = prepare_esd(bare, layer=1, component="mlp.gate")
    assert np.isnan(q.alpha) and "no fit stored" in q.quality


def _heavy_tailed_spectra():
    """Eigenvalues of Student-t matrices of several shapes and tails: where the KS-best xmin falls inside,
    and at the edges of, the peak's range differs between them."""
    for seed in range(12):
        rng = np.random.default_rng(seed + 1)
        m, n = [(300, 120), (200, 200), (500, 150), (120, 400)][seed % 4]
        w = rng.standard_t([3, 4, 2.5][seed % 3], size=(m, n))
        yield np.sort(np.linalg.svd(w, compute_uv=False) ** 2)


# four of the twelve (powerlaw's fit is slow): a PEAK_BINS of 101 fails all four; an upper end
# of the range at 1.4 x the peak fails 2, 7 and 11
@pytest.mark.parametrize("k", [0, 2, 7, 11])
def test_xmin_peak_equals_the_powerlaw_package(k):
    x = list(_heavy_tailed_spectra())[k]
    got = fit_xmin_peak(x)
    ref = powerlaw_xmin_peak(x)  # as WeightWatcher 0.7.7
    assert got.alpha == pytest.approx(ref.alpha, rel=1e-12)
    assert got.xmin == ref.xmin and got.ks_distance == pytest.approx(ref.D, rel=1e-12)
    assert got.sigma == pytest.approx(ref.sigma, rel=1e-12)
    assert got.num_pl_spikes == int(np.sum(x >= ref.xmin))
    assert fit_power_law(x, fix_fingers="xmin_peak") == got


def _tpl_sample(alpha, lam, n, seed):
    """n draws of x^-alpha e^(-lam x) on x >= 1: power-law proposals, accepted with e^(-lam (x - 1))."""
    rng = np.random.default_rng(seed)
    out = np.empty(0)
    while out.size < n:
        x = (1 - rng.random(4 * n)) ** (-1 / (alpha - 1))
        out = np.concatenate([out, x[rng.random(x.size) < np.exp(-lam * (x - 1))]])
    return out[:n]


def quad_moments(alpha: float, lam: float) -> tuple[float, float]:
    """Model means of ln t and t for the density proportional to t^-alpha e^(-lam t) on t >= 1, by SciPy's
    quadrature (the score equations of the truncated power law's MLE: they equal the sample's means)."""
    def integral(f):
        return scipy.integrate.quad(lambda t: f(t) * t ** -alpha * np.exp(-lam * t), 1, np.inf,
                                    epsabs=0, epsrel=1e-12, limit=500)[0]

    z = integral(lambda t: 1.0)
    return integral(np.log) / z, integral(lambda t: t) / z


def test_truncated_power_law_is_the_mle():
    x = 3.0 * _tpl_sample(2.2, 0.05, 2000, seed=2)  # xmin = 3: lambda is in 1 / units of x
    fit = fit_truncated_power_law(x)
    assert fit.xmin == x.min() and fit.n == x.size
    # the score equations, by independent quadrature: model means of ln(x / xmin) and x / xmin = the sample's
    mean_log, mean_t = quad_moments(fit.alpha, fit.lam * fit.xmin)
    assert mean_log == pytest.approx(np.log(x / fit.xmin).mean(), rel=1e-6)
    assert mean_t == pytest.approx((x / fit.xmin).mean(), rel=1e-6)
    # the powerlaw package's numerical fit at the same xmin: the same optimum, to its optimiser's tolerance
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = powerlaw.Fit(x, xmin=fit.xmin, verbose=False).truncated_power_law
        ref_ll = float(np.sum(ref.loglikelihoods(x)))
    assert fit.alpha == pytest.approx(ref.alpha, rel=2e-3) and fit.lam == pytest.approx(ref.Lambda, rel=2e-2)
    assert fit.loglik >= ref_ll - 1e-6
    # and near the truth (2000 draws)
    assert fit.alpha == pytest.approx(2.2, abs=0.15) and fit.lam == pytest.approx(0.05 / 3.0, rel=0.3)


def test_tpl_metrics_use_the_power_law_tail(ckpt):
    ds = toolkit.weight_stats(ckpt, ["alpha_xmin", "alpha_tpl", "tpl_lambda"], progress=False)
    assert "alpha_tpl" in toolkit.list_metrics(opt_in=True) and "alpha_tpl" not in toolkit.list_metrics()
    # attn.q of layer 0: an interior optimum (most tiny cells end on the bound alpha = 0, where the alpha
    # score equation does not hold)
    lam = eigenvalues(ckpt, "model.layers.0.self_attn.q_proj.weight")
    cell = ds.sel(layer=0, component="attn.q")
    _, _, xmin, n = brute_force(lam)  # WeightWatcher's xmin, from the loops
    assert float(cell.alpha_xmin) == pytest.approx(xmin, rel=1e-9)
    tail = np.sort(lam)[-n:]
    alpha, lam_tpl = float(cell.alpha_tpl), float(cell.tpl_lambda)
    # the maximum-likelihood truncated power law of that tail: its score equations, by SciPy's quadrature
    mean_log, mean_t = quad_moments(alpha, lam_tpl * xmin)
    assert mean_log == pytest.approx(np.log(tail / xmin).mean(), rel=1e-6)
    assert mean_t == pytest.approx((tail / xmin).mean(), rel=1e-6)
    with warnings.catch_warnings():  # and the powerlaw package's numerical fit at that xmin, to its tolerance
        warnings.simplefilter("ignore")
        ref = powerlaw.Fit(tail, xmin=tail[0], verbose=False).truncated_power_law
    assert alpha == pytest.approx(ref.alpha, rel=2e-3) and lam_tpl == pytest.approx(ref.Lambda, rel=2e-2)


def test_weightwatcher_skip_rules_blank_cells(ckpt):
    ds = toolkit.weight_stats(ckpt, ["alpha", "frobenius_norm"], progress=False,
                              fit=FitOptions.like_weightwatcher(min_evals=20))
    k = ds.sel(layer=0, component="attn.k")  # 16 x 32: M = 16 < 20
    assert np.isnan(float(k.alpha)) and np.isnan(float(k.frobenius_norm))
    assert "M = 16 < min_evals = 20 (WeightWatcher skips it)" in str(k.nan_reason.values)
    assert str(k.quality.values).startswith("not fitted: M = 16 < min_evals = 20")
    assert np.isfinite(float(ds.alpha.sel(layer=0, component="mlp.up")))  # 64 x 32: kept
    assert ds.attrs["fit_min_evals"] == 20 and ds.attrs["fit_max_N"] == 50000


def test_seed_reaches_the_randomized_metrics(ckpt):
    a = toolkit.weight_stats(ckpt, ["rand_distance"], progress=False, fit={"seed": 1})
    b = toolkit.weight_stats(ckpt, ["rand_distance"], progress=False, fit={"seed": 2})
    again = toolkit.weight_stats(ckpt, ["rand_distance"], progress=False, fit={"seed": 1})
    assert not np.allclose(a.rand_distance.values, b.rand_distance.values, equal_nan=True)
    np.testing.assert_array_equal(a.rand_distance.values, again.rand_distance.values)


def shuffled_distance(w: np.ndarray, seed: int) -> float:
    """rand_distance of ``w`` for ``seed``, independently: the documented seeded permutation of the entries
    (``numpy.random.default_rng((seed, 0))``), NumPy's singular values, SciPy's Jensen-Shannon distance of the
    sorted spectra (a shuffle keeps the sum of the eigenvalues, so the two definitions agree)."""
    perm = np.random.default_rng((seed, 0)).permutation(w.size)
    shuffled = w.reshape(-1)[perm].reshape(w.shape)
    lam = np.sort(np.linalg.svd(w, compute_uv=False) ** 2)
    lam_rand = np.sort(np.linalg.svd(shuffled, compute_uv=False) ** 2)
    return float(scipy.spatial.distance.jensenshannon(lam, lam_rand))


def test_options_left_at_their_defaults_keep_a_metrics_own(ckpt):
    """A metric registered with its own seed keeps it unless ``fit`` sets the seed (it once got seed 0)."""
    from toolkit.metrics.registry import get_metric, register_metric, unregister_metric

    base = get_metric("rand_distance")
    register_metric("rand_distance_seed3", base.func, long_name="rand distance, seed 3",
                    needs_singular_values=True, options={"seed": 3})
    try:
        ds = toolkit.weight_stats(ckpt, ["rand_distance", "rand_distance_seed3"], progress=False)
        w = load_file(str(ckpt / "model.safetensors"))["model.layers.0.self_attn.q_proj.weight"].double().numpy()
        cell = dict(layer=0, component="attn.q")
        assert float(ds.rand_distance_seed3.sel(**cell)) == pytest.approx(shuffled_distance(w, 3), rel=1e-6)
        assert float(ds.rand_distance.sel(**cell)) == pytest.approx(shuffled_distance(w, 0), rel=1e-6)
        assert float(ds.rand_distance_seed3.sel(**cell)) != float(ds.rand_distance.sel(**cell))
        forced = toolkit.weight_stats(ckpt, ["rand_distance_seed3"], progress=False, fit={"seed": 1})
        assert float(forced.rand_distance_seed3.sel(**cell)) == pytest.approx(shuffled_distance(w, 1), rel=1e-6)
    finally:
        unregister_metric("rand_distance_seed3")


@pytest.mark.parametrize("bad, word", [
    (dict(fix_fingers="peak"), "fix_fingers"), (dict(xmax=0), "xmax"), (dict(xmax=2.0), "xmax"),
    (dict(xmax=3, fix_fingers="clip_xmax"), "refuses the two together"), (dict(seed=-1), "seed"),
    (dict(min_evals=True), "min_evals"),
])
def test_bad_fit_options_are_named(bad, word):
    with pytest.raises(InvalidOptionError, match=word):
        FitOptions(**bad)


def test_fit_argument_is_checked_before_any_work(ckpt):
    with pytest.raises(InvalidOptionError, match="fit"):
        toolkit.weight_stats(ckpt, ["alpha"], progress=False, fit="clip_xmax")
    with pytest.raises(InvalidOptionError, match="unknown: \\['fixfingers'\\]"):
        toolkit.weight_stats(ckpt, ["alpha"], progress=False, fit={"fixfingers": "clip_xmax"})


def test_cli_fit_flags(ckpt, tmp_path):
    from toolkit.cli import main

    out = tmp_path / "w.nc"
    assert main(["weights", str(ckpt), "--metrics", "alpha", "--fix-fingers", "clip_xmax", "--max-n", "40",
                 "-q", "-o", str(out)]) == 0
    back = xr.open_dataset(out)
    assert back.attrs["fit_fix_fingers"] == "clip_xmax" and int(back.attrs["fit_max_N"]) == 40
    assert np.isnan(back.alpha.sel(layer=0, component="mlp.up"))  # 64 x 32: N = 64 > 40
    back.close()
