"""precision="float32-certified": the eigenvalue bound holds, certified cells agree with float64 within the
stated tolerances, and an ambiguous KS choice is refused and served in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import toolkit
from toolkit.errors import InvalidOptionError
from toolkit.metrics.certificate import FLOAT32, FLOAT64, TOLERANCES, certify
from toolkit.metrics.certificate_fit import FitBounds
from toolkit.metrics.eigen_bound import certified_spectrum
from toolkit.metrics.evaluate import evaluate_matrix
from toolkit.metrics.fit_options import FitOptions
from toolkit.metrics.powerlaw import fit_power_law, fit_with_scores
from toolkit.metrics.registry import resolve_metrics
from toolkit.metrics.spectral import SMALL_VALUE_METRICS, singular_values
from toolkit.sources import open_source

CERT = "float32-certified"
#: Every default spectral metric but those that read the smallest singular values (the effective rank
#: too), which a float32 Gram cannot resolve to 1e-5: they make most cells fall back
#: (test_small_value_metrics_fall_back).
SERVABLE = [n for n in TOLERANCES if n not in SMALL_VALUE_METRICS | {"effective_rank"}] + ["frobenius_norm"]


def _bf16(m, n, seed, scale=0.02):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, n, generator=g) * scale).to(torch.bfloat16).float()


def _with_spectrum(m, n, lam, seed=0):
    """A float32 (m, n) matrix whose W^T W has the eigenvalues ``lam`` (float64 construction)."""
    rng = np.random.default_rng(seed)
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal((m, k)))
    v, _ = np.linalg.qr(rng.standard_normal((n, k)))
    s = np.sqrt(np.sort(np.asarray(lam, dtype=np.float64))[::-1])
    return torch.from_numpy((u * s) @ v.T).to(torch.float32)


def _trained_like(m, n, seed):
    """A random matrix whose spectrum is a bulk under a power-law tail (density exponent ~2.7), as in trained
    layers."""
    rng = np.random.default_rng(seed)
    k = min(m, n)
    tail = (1 - rng.random(k // 4)) ** (-1 / 1.7)
    return _with_spectrum(m, n, np.concatenate([rng.uniform(0.02, 0.1, k - tail.size), tail]), seed)


def _deviation(name, got, ref):
    kind = TOLERANCES.get(name, ("rel", 1e-5))[0]
    if kind == "rel":
        return abs(got - ref) / abs(ref), TOLERANCES[name][1] if name in TOLERANCES else 1e-12
    return abs(got - ref), TOLERANCES[name][1] if name in TOLERANCES else 0.0


def _assert_within_tolerances(got: dict, ref: dict, top_eigenvalue: float):
    for name, r in ref.items():
        g = got[name]
        if math.isnan(r):
            assert math.isnan(g), name
            continue
        kind, tol = TOLERANCES.get(name, ("rel", 1e-12))
        if kind == "abs_alpha":
            tol *= max(1.0, abs(math.log10(top_eigenvalue)))
        err = abs(g - r) if kind != "rel" else abs(g - r) / abs(r)
        assert err <= tol, (name, g, r, err, tol)


# ---------------------------------------------------------------- the eigenvalue bound


@pytest.mark.parametrize("shape,seed", [((600, 200), 0), ((200, 600), 1), ((384, 384), 2)])
def test_delta_bounds_the_eigenvalue_error_on_random_matrices(shape, seed):
    w = _bf16(*shape, seed)
    lam, bound = certified_spectrum(w)
    ref = np.linalg.eigvalsh(w.double().numpy().T @ w.double().numpy() if shape[0] > shape[1]
                             else w.double().numpy() @ w.double().numpy().T)[::-1]
    lam64 = singular_values(w).numpy() ** 2
    assert np.abs(lam - lam64).max() <= bound.delta
    assert np.abs(lam - np.clip(ref, 0, None)).max() <= bound.delta
    # the Gram part bounds the float32 product's actual error (numpy float64 product and 2-norm)
    x = w.numpy()
    g32 = (x.T @ x if shape[0] > shape[1] else x @ x.T).astype(np.float64)
    x64 = x.astype(np.float64)
    g64 = x64.T @ x64 if shape[0] > shape[1] else x64 @ x64.T
    assert np.linalg.norm(g32 - g64, 2) <= bound.gram
    assert bound.frobenius2 == pytest.approx(float(np.sum(x64 * x64)), rel=1e-12)
    assert bound.delta < 1e-4 * lam[0]  # an a-posteriori bound, not gamma_K ||W||_F^2 (~0.05 lambda_max here)


def test_delta_bounds_the_eigenvalue_error_on_real_matrices(smollm2_path, minilm_dir):
    source = open_source(smollm2_path)
    records = [r for r in source.tensors() if r.name.startswith("model.layers.3.") and len(r.shape) == 2]
    source = open_source(minilm_dir)
    records += [r for r in source.tensors() if ".layer.2." in r.name and len(r.shape) == 2]
    assert len(records) >= 10
    for rec in records:
        w = rec.read().float().contiguous()
        lam, bound = certified_spectrum(w)
        lam64 = singular_values(w).numpy() ** 2
        err = np.abs(lam - lam64).max()
        assert err <= bound.delta, rec.name
        assert bound.delta < 1e3 * max(err, 1e-7 * lam64[0]), rec.name  # and not vacuous


def test_certified_spectrum_refuses_other_dtypes():
    with pytest.raises(ValueError, match="float32 CPU matrix"):
        certified_spectrum(torch.ones(4, 3, dtype=torch.float64))


# ---------------------------------------------------------------- served cells agree with float64


def _check_cells(matrices, names=SERVABLE):
    metrics = resolve_metrics(names, kind="weight")
    served = []
    for w in matrices:
        r32 = evaluate_matrix(w, metrics, precision=CERT)
        r64 = evaluate_matrix(w, metrics)
        served.append(r32.precision_served)
        lam_top = float(singular_values(w)[0]) ** 2
        if r32.precision_served == FLOAT32:
            assert r32.certificate == ""
            _assert_within_tolerances(r32.values, r64.values, lam_top)
        else:
            assert r32.precision_served == FLOAT64 and r32.certificate
            assert r32.values == pytest.approx(r64.values, nan_ok=True, rel=0, abs=0)  # the float64 route itself
    return served


def test_random_matrices_served_cells_within_tolerance():
    matrices = [_bf16(1536, 576, s) for s in range(2)] + [_bf16(576, 1536, 2), _bf16(512, 512, 3)]
    matrices += [_trained_like(1200, 400, s) for s in range(3)] + [_trained_like(300, 900, 3)]
    served = _check_cells(matrices)
    assert served.count(FLOAT32) >= 2  # the mode serves trained-like spectra (random bulks mostly fall back)


def test_real_matrices_served_cells_within_tolerance(smollm2_path, minilm_dir):
    """Both bundled models, a few layers through weight_stats: every float32 cell within tolerance."""
    out = {}
    for source, layers in ((smollm2_path, [0, 14, 29]), (minilm_dir, [0, 3, 5])):
        d32 = toolkit.weight_stats(source, SERVABLE, layers=layers, progress=False, cache=False, precision=CERT)
        d64 = toolkit.weight_stats(source, SERVABLE, layers=layers, progress=False, cache=False)
        assert d32.attrs["spectral_precision"] == CERT and "precision_served" not in d64
        present = d32.n_rows.values > 0
        served = d32.precision_served.values
        assert set(served[present]) <= {FLOAT32, FLOAT64} and set(served[~present]) <= {""}
        f32 = served == FLOAT32
        lam_top = d64.spectral_norm.values ** 2
        for name in SERVABLE:
            got, ref = d32[name].values, d64[name].values
            f64 = served == FLOAT64
            np.testing.assert_array_equal(got[f64], ref[f64])  # recomputed cells: the float64 numbers
            kind, tol = TOLERANCES.get(name, ("rel", 1e-12))
            tol = tol * np.maximum(1.0, np.abs(np.log10(lam_top[f32]))) if kind == "abs_alpha" else tol
            err = np.abs(got[f32] - ref[f32]) / (np.abs(ref[f32]) if kind == "rel" else 1.0)
            assert np.all(err <= tol), (source, name, err.max())
        out[str(source)] = f32.sum() / present.sum()
    assert all(v > 0.3 for v in out.values()), out  # most cells are certified in float32


def test_small_value_metrics_fall_back():
    """A float32 Gram cannot resolve the smallest singular values of an ill-conditioned matrix to 1e-5:
    asked for the condition number, the cell is refused and recomputed in float64."""
    lam = np.logspace(0, -6, 200)
    w = _with_spectrum(400, 200, lam, seed=3)
    metrics = resolve_metrics(["spectral_norm", "condition_number"], kind="weight")
    r = evaluate_matrix(w, metrics, precision=CERT)
    assert r.precision_served == FLOAT64 and r.certificate.startswith("condition_number")
    assert r.values["condition_number"] == evaluate_matrix(w, metrics).values["condition_number"]
    good = _with_spectrum(400, 200, np.linspace(1.0, 0.5, 200), seed=3)
    r = evaluate_matrix(good, metrics, precision=CERT)
    assert r.precision_served == FLOAT32
    assert r.values["condition_number"] == pytest.approx(math.sqrt(2.0), rel=1e-5)


# ---------------------------------------------------------------- the KS margin


def _ambiguous_spectrum():
    """400 eigenvalues: a bulk scaled by theta under a power-law tail, theta bisected to where the KS
    argmin jumps between two candidates, so that their D agree to ~1e-16."""
    rng = np.random.default_rng(5)
    tail = (1 - rng.random(150)) ** (-1 / 1.5)
    bulk = rng.uniform(0.2, 1.0, 250)

    def spectrum(theta):
        return np.sort(np.concatenate([bulk * theta, tail]))

    def argmin(theta):
        return fit_with_scores(spectrum(theta))[1].index

    lo, hi = 0.5, 2.0
    assert argmin(lo) != argmin(hi)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if argmin(mid) == argmin(lo) else (lo, mid)
    return spectrum(lo)


def test_ambiguous_ks_choice_is_served_in_float64():
    lam = _ambiguous_spectrum()
    _, scores = fit_with_scores(lam)
    d = np.sort(scores.d_lower)
    assert d[1] - d[0] < 1e-9  # two candidates with (near-)equal KS distance
    w = _with_spectrum(600, 400, lam)
    metrics = resolve_metrics(["alpha", "spectral_norm"], kind="weight")
    r = evaluate_matrix(w, metrics, precision=CERT)
    assert r.precision_served == FLOAT64
    assert "KS choice of xmin" in r.certificate
    assert r.values["alpha"] == evaluate_matrix(w, metrics).values["alpha"]


def test_fit_certificate_holds_under_perturbations_within_delta():
    """An independent check of the fit's intervals: spectra moved by up to delta (random signs, and the
    extreme moves) refitted by fit_power_law keep the xmin and stay within the alpha interval."""
    rng = np.random.default_rng(1)
    lam = np.sort(np.concatenate([rng.uniform(0.5, 1.0, 300), (1 - rng.random(100)) ** (-1 / 1.2)]))
    delta = 1e-7 * lam[-1]
    fb = FitBounds.of(lam[::-1].copy(), delta)
    assert not isinstance(fb, str), fb
    for trial in range(20):
        moves = [rng.uniform(-1, 1, lam.size), np.sign(rng.standard_normal(lam.size)),
                 np.ones(lam.size), -np.ones(lam.size)][trial % 4]
        fit = fit_power_law(np.sort(lam + delta * moves))
        assert abs(fit.xmin - fb.xmin) <= delta * (1 + 1e-9)  # the same candidate, moved by at most delta
        assert fb.alpha_lo <= fit.alpha <= fb.alpha_hi
        assert abs(fit.ks_distance - fb.d) <= fb.slack
    assert fb.alpha_hi - fb.alpha_lo < 1e-3


def test_certify_refuses_what_it_cannot_bound():
    lam = np.linspace(2.0, 1.0, 50)
    _, bound = certified_spectrum(_with_spectrum(100, 50, lam))
    alpha = resolve_metrics(["alpha"], kind="weight")
    assert certify(alpha, lam[::-1].copy(), bound, (100, 50)) == ""
    clipped = FitOptions(fix_fingers="clip_xmax").apply(alpha)
    assert "fit options" in certify(clipped, lam[::-1].copy(), bound, (100, 50))
    assert "small-N" in certify(alpha, np.linspace(2.0, 1.0, 12), bound, (100, 12))
    mp = resolve_metrics(["spectral_norm", "mp_softrank"], kind="weight")  # an opt-in metric with no bound
    assert "mp_softrank: no error bound" in certify(mp, lam[::-1].copy(), bound, (100, 50))


# ---------------------------------------------------------------- the pass


def test_weight_stats_precision_served_is_cached(tmp_path, monkeypatch, minilm_dir):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    kw = dict(metrics=["alpha", "stable_rank"], layers=[1, 4], progress=False, precision=CERT)
    first = toolkit.weight_stats(minilm_dir, **kw)
    again = toolkit.weight_stats(minilm_dir, **kw)  # from the cache
    np.testing.assert_array_equal(first.precision_served.values, again.precision_served.values)
    np.testing.assert_array_equal(first.alpha.values, again.alpha.values)
    assert first.precision_served.attrs["long_name"] and "float64" in first.precision_served.attrs["description"]
    d64 = toolkit.weight_stats(minilm_dir, **{**kw, "precision": "float64"})
    assert not np.array_equal(d64.stable_rank.values, first.stable_rank.values, equal_nan=True) or \
        (first.precision_served.values != FLOAT32).all()


def test_every_default_metric_on_minilm(minilm_dir, tmp_path):
    """With every default metric (the small-value ones included) a served cell is within every tolerance and a
    refused one is the float64 cell; the variable survives a NetCDF round trip."""
    d32 = toolkit.weight_stats(minilm_dir, progress=False, cache=False, precision=CERT)
    d64 = toolkit.weight_stats(minilm_dir, progress=False, cache=False)
    served = d32.precision_served.values
    lam_top = d64.spectral_norm.values ** 2
    for name in TOLERANCES:
        got, ref = d32[name].values, d64[name].values
        np.testing.assert_array_equal(got[served == FLOAT64], ref[served == FLOAT64])
        f32 = (served == FLOAT32) & np.isfinite(ref)
        kind, tol = TOLERANCES[name]
        tol = tol * np.maximum(1.0, np.abs(np.log10(lam_top[f32]))) if kind == "abs_alpha" else tol
        err = np.abs(got[f32] - ref[f32]) / (np.abs(ref[f32]) if kind == "rel" else 1.0)
        assert np.all(err <= tol), (name, err.max())
    toolkit.save(d32, tmp_path / "c.nc")
    back = toolkit.load(tmp_path / "c.nc")
    np.testing.assert_array_equal(back.precision_served.values, served)


def test_invalid_precision_names_the_certified_mode(minilm_dir):
    with pytest.raises(InvalidOptionError, match="float32-certified"):
        toolkit.weight_stats(minilm_dir, ["alpha"], progress=False, precision="float16")


def test_float32_overflowing_product_is_served_in_float64():
    """Finite entries whose float32 Gram overflows (|w| ~ 1e20): the certified mode recomputes the cell in
    float64 instead of a NaN cell the float64 route would not give; precision='float32' names the way out."""
    w = _trained_like(300, 200, 7) * 1e20
    metrics = resolve_metrics(["spectral_norm", "stable_rank"], kind="weight")
    got = evaluate_matrix(w, metrics, precision=CERT)
    assert got.precision_served == FLOAT64 and "float32" in got.certificate
    s = np.linalg.svd(w.double().numpy(), compute_uv=False)
    assert got.values["spectral_norm"] == pytest.approx(s[0], rel=1e-12)
    assert got.values["stable_rank"] == pytest.approx(float((s**2).sum() / s[0] ** 2), rel=1e-10)
    plain = evaluate_matrix(w, metrics, precision="float32")
    assert math.isnan(plain.values["spectral_norm"])
    assert "overflows float32" in plain.reasons["spectral_norm"] and "float64" in plain.reasons["spectral_norm"]


def test_cached_cells_never_mix_served_precisions(tmp_path, monkeypatch, minilm_dir):
    """A wider certified run over a cache of a narrower one: a cell labelled 'float64' holds the float64 route's
    values for every metric (not float32-served ones from the cache), and the run equals an uncached one."""
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    kw = dict(layers=[0, 1], progress=False)
    toolkit.weight_stats(minilm_dir, ["alpha", "stable_rank"], precision=CERT, **kw)
    wide = ["alpha", "stable_rank", "condition_number"]  # condition_number sends most cells to float64
    cached = toolkit.weight_stats(minilm_dir, wide, precision=CERT, **kw)
    fresh = toolkit.weight_stats(minilm_dir, wide, precision=CERT, cache=False, **kw)
    d64 = toolkit.weight_stats(minilm_dir, wide, cache=False, **kw)
    served = cached.precision_served.values
    assert (served == FLOAT64).any()
    np.testing.assert_array_equal(served, fresh.precision_served.values)
    for name in wide:
        np.testing.assert_array_equal(cached[name].values, fresh[name].values)
        np.testing.assert_array_equal(cached[name].values[served == FLOAT64], d64[name].values[served == FLOAT64])


def test_cached_spectrum_follows_the_served_precision(tmp_path, monkeypatch, minilm_dir):
    """keep_spectra over a narrower certified cache: a cell served in float64 keeps the float64 eigenvalues
    (numpy's, of the matrix), not the float32 Gram's cached by the narrower run."""
    from safetensors.torch import load_file

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    kw = dict(layers=[0], components="attn.q", progress=False, keep_spectra=True, precision=CERT)
    first = toolkit.weight_stats(minilm_dir, ["alpha", "stable_rank"], **kw)
    assert str(first.precision_served.item()) == FLOAT32
    wide = toolkit.weight_stats(minilm_dir, ["alpha", "stable_rank", "condition_number"], **kw)
    assert str(wide.precision_served.item()) == FLOAT64
    w = load_file(str(minilm_dir / "model.safetensors"))
    q = next(v for k, v in w.items() if "layer.0." in k and "query.weight" in k).double().numpy()
    lam = np.linalg.svd(q, compute_uv=False) ** 2
    got = wide.eigenvalues.values.ravel()[: lam.size]
    np.testing.assert_allclose(got, lam, rtol=1e-9, atol=1e-12 * lam[0])


def test_spectrum_asked_later_is_the_one_that_served_the_cached_cell(tmp_path, monkeypatch, minilm_dir):
    """A cell cached as served in float64 (condition_number), then asked again with keep_spectra: its eigenvalues
    are the float64 route's (numpy's), matching its label, not a float32 Gram spectrum computed alone."""
    from safetensors.torch import load_file

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    kw = dict(layers=[0], components="attn.q", progress=False, precision=CERT)
    names = ["alpha", "condition_number"]
    assert str(toolkit.weight_stats(minilm_dir, names, **kw).precision_served.item()) == FLOAT64
    again = toolkit.weight_stats(minilm_dir, names, keep_spectra=True, **kw)
    assert str(again.precision_served.item()) == FLOAT64
    w = load_file(str(minilm_dir / "model.safetensors"))
    q = next(v for k, v in w.items() if "layer.0." in k and "query.weight" in k).double().numpy()
    lam = np.linalg.svd(q, compute_uv=False) ** 2
    np.testing.assert_allclose(again.eigenvalues.values.ravel()[: lam.size], lam, rtol=1e-9, atol=1e-12 * lam[0])
