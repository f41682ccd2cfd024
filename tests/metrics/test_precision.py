"""weight_stats(..., precision="float32"): agreement with float64, what float32 cannot resolve, cache and attrs."""

import math

import numpy as np
import pytest
import torch

import toolkit
from toolkit.collect.measure.weights import WeightMeasurement
from toolkit.errors import InvalidOptionError
from toolkit.metrics.powerlaw import fit_power_law
from toolkit.metrics.spectral import (
    SMALL_VALUE_METRICS,
    effective_rank,
    float32_resolves,
    singular_values,
    stable_rank,
)
from toolkit.testing import write_tiny_checkpoint


def _with_spectrum(m: int, n: int, sv, seed: int = 0) -> torch.Tensor:
    """A float32 (m, n) matrix with singular values ``sv`` (the rest 0)."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((m, m)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    k = min(m, n)
    s = np.zeros(k)
    s[: len(sv)] = sv
    return torch.from_numpy((u[:, :k] * s) @ v[:, :k].T).to(torch.float32)


@pytest.mark.parametrize("shape", [(600, 150), (150, 600), (256, 256)])
def test_float32_spectrum_against_float64_svd(shape):
    """The large singular values, stable rank and effective rank, against NumPy's float64 SVD."""
    w = (torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 0.02).to(torch.bfloat16).float()
    ref = np.linalg.svd(w.double().numpy(), compute_uv=False)
    s32 = singular_values(w, precision="float32")
    assert s32.dtype == torch.float64 and s32.shape == (min(shape),)
    top = ref[: min(shape) // 2]  # the upper half of the spectrum, well above float32's rounding
    np.testing.assert_allclose(s32.numpy()[: top.size], top, rtol=1e-5)
    ref_t = torch.from_numpy(ref)
    assert stable_rank(w, s32) == pytest.approx(stable_rank(w, ref_t), rel=1e-5)
    assert effective_rank(w, s32) == pytest.approx(effective_rank(w, ref_t), rel=1e-4)


@pytest.mark.parametrize("seed", [0, 3])
def test_float32_alpha_of_a_random_bulk_against_float64(seed):
    """A 2048 x 2048 random bf16 matrix (a Marchenko-Pastur bulk, alpha ~20, where the fit is steep):
    the float32 Gram route's alpha within 1e-4 of float64's. A float32 eigensolve (``ssyevd``) moved
    it by 3-4e-3 on these two seeds (up to 0.14 on 7B shapes); the float32 product alone by ~1e-5."""
    w = (torch.randn(2048, 2048, generator=torch.Generator().manual_seed(seed)) * 0.02).to(torch.bfloat16)
    a64 = fit_power_law(singular_values(w).numpy() ** 2).alpha
    a32 = fit_power_law(singular_values(w, precision="float32").numpy() ** 2).alpha
    assert a64 > 6  # the regime where the fit is most sensitive to the eigenvalues
    assert abs(a32 - a64) < 1e-4


def test_float32_input_bf16_input_same():
    """A bf16 tensor is converted exactly to float32 first: the same numbers as its float32 copy."""
    w = (torch.randn(300, 80, generator=torch.Generator().manual_seed(2))).to(torch.bfloat16)
    np.testing.assert_array_equal(singular_values(w, precision="float32").numpy(),
                                  singular_values(w.float(), precision="float32").numpy())


def test_float32_resolves_judges_small_singular_values():
    good = _with_spectrum(400, 100, np.linspace(1.0, 0.5, 100))  # kappa 2
    s = singular_values(good, precision="float32")
    assert float32_resolves(s, good.shape) == ""
    assert float(s[0] / s[-1]) == pytest.approx(2.0, rel=1e-4)
    bad = _with_spectrum(400, 100, np.logspace(0, -4, 100))  # kappa 1e4: sigma_min at 1e-8 of lambda_max
    s = singular_values(bad, precision="float32")
    reason = float32_resolves(s, bad.shape)
    assert "precision='float64'" in reason and "condition number" in reason


def test_unresolved_metrics_are_nan_with_reason():
    from toolkit.metrics.evaluate import evaluate_matrix
    from toolkit.metrics.registry import resolve_metrics

    metrics = resolve_metrics(["stable_rank", "condition_number", "matrix_rank", "rank_loss", "spectral_entropy"],
                              kind="weight")
    bad = _with_spectrum(400, 100, np.logspace(0, -4, 100))
    r32 = evaluate_matrix(bad, metrics, precision="float32")
    r64 = evaluate_matrix(bad, metrics)
    for name in SMALL_VALUE_METRICS:
        assert math.isnan(r32.values[name]) and "float64" in r32.reasons[name], name
        assert math.isfinite(r64.values[name]), name
    assert r64.values["condition_number"] == pytest.approx(1e4, rel=1e-3)
    assert r32.values["stable_rank"] == pytest.approx(r64.values["stable_rank"], rel=1e-5)
    good = _with_spectrum(400, 100, np.linspace(1.0, 0.5, 100))
    g32, g64 = evaluate_matrix(good, metrics, precision="float32"), evaluate_matrix(good, metrics)
    assert g32.values["matrix_rank"] == g64.values["matrix_rank"] == 100
    assert g32.values["rank_loss"] == 0
    assert g32.values["condition_number"] == pytest.approx(2.0, rel=1e-4)
    assert g32.values["spectral_entropy"] == pytest.approx(g64.values["spectral_entropy"], rel=1e-5)


def test_precision_is_part_of_the_cache_key():
    m64 = WeightMeasurement.make(["frobenius_norm", "stable_rank"])
    m32 = WeightMeasurement.make(["frobenius_norm", "stable_rank"], precision="float32")
    assert m64.keys["frobenius_norm"] == m32.keys["frobenius_norm"]  # no spectrum: the same number
    assert m64.keys["stable_rank"] != m32.keys["stable_rank"]
    assert m64.keys == WeightMeasurement.make(["frobenius_norm", "stable_rank"], precision="float64").keys


def test_weight_stats_float32(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=3)
    metrics = ["stable_rank", "effective_rank", "spectral_norm", "condition_number"]
    d64 = toolkit.weight_stats(path, metrics, progress=False)  # cached first: float32 must not reuse it
    d32 = toolkit.weight_stats(path, metrics, progress=False, precision="float32")
    assert d64.attrs["spectral_precision"] == "float64" and d32.attrs["spectral_precision"] == "float32"
    for name in ("stable_rank", "effective_rank", "spectral_norm"):
        np.testing.assert_allclose(d32[name].values, d64[name].values, rtol=1e-4, equal_nan=True)
    assert not np.array_equal(d32.stable_rank.values, d64.stable_rank.values, equal_nan=True)  # computed anew
    kappa32, kappa64 = d32.condition_number.values, d64.condition_number.values
    resolved = np.isfinite(kappa32)
    np.testing.assert_allclose(kappa32[resolved], kappa64[resolved], rtol=1e-4)
    reasons = d32.nan_reason.values[~resolved & np.isfinite(kappa64)]
    assert reasons.size and all("precision='float64'" in str(r) for r in reasons)
    again = toolkit.weight_stats(path, metrics, progress=False, precision="float32")  # from the cache
    np.testing.assert_array_equal(again.stable_rank.values, d32.stable_rank.values)
    d32.to_netcdf(tmp_path / "d32.nc")
    import xarray as xr

    with xr.open_dataset(tmp_path / "d32.nc") as back:
        assert back.attrs["spectral_precision"] == "float32"


@pytest.mark.parametrize("bad", ["float16", "double", 32, None])
def test_bad_precision_is_refused_before_any_work(bad):
    with pytest.raises(InvalidOptionError, match="precision"):
        toolkit.weight_stats("/nonexistent/folder", precision=bad)


def test_cli_flag():
    from toolkit.cli import build_parser

    assert build_parser().parse_args(["weights", "--precision", "float32"]).precision == "float32"
    assert build_parser().parse_args(["weights"]).precision == "float64"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_gram_route_of_cuda_on_the_cpu(dtype):
    """The route --device cuda takes (torch addmm_ by blocks + torch eigvalsh), run here on the CPU."""
    from toolkit.metrics.gram import _gram

    w = torch.randn(500, 120, generator=torch.Generator().manual_seed(3))
    g = _gram(w, dtype)
    assert g.dtype == dtype and g.shape == (120, 120)
    ref = w.double().T @ w.double()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(g.double().numpy(), ref.numpy(), rtol=tol, atol=tol * float(ref.abs().max()))
    np.testing.assert_allclose(torch.linalg.eigvalsh(g).double().flip(0).sqrt().numpy(),
                               np.linalg.svd(w.double().numpy(), compute_uv=False), rtol=10 * tol)
