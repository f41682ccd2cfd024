"""Every built-in metric against independent NumPy/SciPy values, hand-computed
values, and the degenerate matrices (one row, rank 1, identity, zeros, NaN/Inf)."""

import math

import numpy as np
import pytest
import scipy.stats
import torch

from toolkit.metrics import DegenerateMatrix, compute_weight_metrics, singular_values
from toolkit.metrics.norms import frobenius_norm, kurtosis, max_abs_over_rms, rms
from toolkit.metrics.spectral import condition_number, effective_rank, spectral_norm, stable_rank


def numpy_reference(a: np.ndarray) -> dict:
    a = a.astype(np.float64)
    s = np.linalg.svd(a, compute_uv=False)
    p = s / s.sum()
    r = np.sqrt(np.mean(a**2))
    return {
        "frobenius_norm": np.linalg.norm(a, "fro"),
        "rms": r,
        "kurtosis": scipy.stats.kurtosis(a.ravel(), fisher=True, bias=True),
        "max_abs_over_rms": np.abs(a).max() / r,
        "spectral_norm": s[0],
        "stable_rank": (s**2).sum() / s[0] ** 2,
        "effective_rank": np.exp(-(p * np.log(p)).sum()),
        "condition_number": s[0] / s[-1],
    }


@pytest.mark.parametrize("shape", [(7, 7), (40, 13), (9, 31), (64, 200)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_against_numpy_scipy(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_t(5, size=shape)  # heavy-ish tails so kurtosis is not ~0
    w = torch.from_numpy(a).to(dtype)
    ref = numpy_reference(w.double().numpy())  # reference on the exact stored values
    got = compute_weight_metrics(w, list(ref))
    for name, want in ref.items():
        assert got[name].reason == "", name
        assert got[name].value == pytest.approx(want, rel=1e-6), name


def test_hand_computed_2x2():
    w = torch.tensor([[3.0, 0.0], [0.0, 4.0]])
    s = singular_values(w)
    assert s.tolist() == pytest.approx([4.0, 3.0], rel=1e-12)
    assert frobenius_norm(w) == pytest.approx(5.0)
    assert rms(w) == pytest.approx(2.5)
    assert max_abs_over_rms(w) == pytest.approx(1.6)
    # entries 3, 0, 0, 4: m2 = 51/16, m4 = 2997/256, so m4/m2^2 = 2997/2601
    assert kurtosis(w) == pytest.approx(2997 / 2601 - 3, rel=1e-12)
    assert spectral_norm(w, s) == pytest.approx(4.0)
    assert stable_rank(w, s) == pytest.approx(25 / 16)
    h = -(4 / 7 * math.log(4 / 7) + 3 / 7 * math.log(3 / 7))
    assert effective_rank(w, s) == pytest.approx(math.exp(h))
    assert condition_number(w, s) == pytest.approx(4 / 3)


def test_hand_computed_3x3_singular():
    # block [[1, 1], [1, 1]] has singular values 2, 0; plus the entry 2
    w = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    s = singular_values(w)
    assert s.tolist() == pytest.approx([2.0, 2.0, 0.0], abs=1e-12)
    assert s[-1] == 0.0  # below the accuracy floor -> exactly 0
    assert frobenius_norm(w) == pytest.approx(math.sqrt(8))
    assert stable_rank(w, s) == pytest.approx(2.0)
    assert effective_rank(w, s) == pytest.approx(2.0)
    assert condition_number(w, s) == math.inf


def test_rectangular_2x3():
    w = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    s = singular_values(w)
    assert s.tolist() == pytest.approx([2.0, 1.0])
    assert condition_number(w, s) == pytest.approx(2.0)  # over min(m, n) = 2 values
    assert stable_rank(w, s) == pytest.approx(5 / 4)
    assert rms(w) == pytest.approx(math.sqrt(5 / 6))


@pytest.mark.parametrize("n", [1, 5, 64])
def test_identity(n):
    out = compute_weight_metrics(torch.eye(n))
    assert out["spectral_norm"].value == pytest.approx(1.0)
    assert out["stable_rank"].value == pytest.approx(n)
    assert out["effective_rank"].value == pytest.approx(n)
    assert out["condition_number"].value == pytest.approx(1.0)
    assert out["frobenius_norm"].value == pytest.approx(math.sqrt(n))
    assert math.isnan(out["alpha"].value) and out["alpha"].reason  # too short, or all-equal tail


@pytest.mark.parametrize("shape", [(30, 20), (5, 300), (257, 64)])
def test_rank_one(shape):
    rng = np.random.default_rng(0)
    w = torch.from_numpy(np.outer(rng.standard_normal(shape[0]), rng.standard_normal(shape[1])).astype(np.float32))
    out = compute_weight_metrics(w)
    assert out["stable_rank"].value == pytest.approx(1.0, rel=1e-6)
    assert out["effective_rank"].value == pytest.approx(1.0, rel=1e-6)
    assert out["condition_number"].value == math.inf
    assert math.isnan(out["alpha"].value) and "too short" in out["alpha"].reason
    assert out["spectral_norm"].value == pytest.approx(float(np.linalg.norm(w.numpy())), rel=1e-6)


def test_one_row():
    w = torch.tensor([[1.0, -2.0, 2.0, 0.0]])
    out = compute_weight_metrics(w)
    assert out["spectral_norm"].value == pytest.approx(3.0)
    assert out["stable_rank"].value == pytest.approx(1.0)
    assert out["effective_rank"].value == pytest.approx(1.0)
    assert out["condition_number"].value == pytest.approx(1.0)  # one singular value
    assert out["rms"].value == pytest.approx(1.5)
    assert out["max_abs_over_rms"].value == pytest.approx(2 / 1.5)
    assert math.isnan(out["alpha"].value) and "1 eigenvalue above" in out["alpha"].reason


def test_all_zeros():
    out = compute_weight_metrics(torch.zeros(6, 4))
    assert out["frobenius_norm"] == (0.0, "")
    assert out["rms"] == (0.0, "")
    assert out["spectral_norm"] == (0.0, "")
    for name in ["stable_rank", "effective_rank", "condition_number", "max_abs_over_rms", "alpha"]:
        assert math.isnan(out[name].value) and out[name].reason == "all-zero matrix", name
    assert math.isnan(out["kurtosis"].value) and "zero variance" in out["kurtosis"].reason


def test_constant_matrix_kurtosis_undefined():
    with pytest.raises(DegenerateMatrix, match="zero variance"):
        kurtosis(torch.full((3, 3), 2.5))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_inf_entries(bad):
    w = torch.randn(8, 5)
    w[2, 3] = bad
    out = compute_weight_metrics(w)
    for name, v in out.items():
        assert math.isnan(v.value), name
        assert "NaN/Inf" in v.reason and "1 entries" in v.reason, name
    with pytest.raises(DegenerateMatrix, match="NaN/Inf"):
        frobenius_norm(w)
    with pytest.raises(DegenerateMatrix, match="NaN/Inf"):
        singular_values(w)


def test_kurtosis_chunked_matches_scipy(monkeypatch):
    import toolkit.metrics.norms as norms

    g = torch.Generator().manual_seed(0)
    w = torch.randn(600, 500, generator=g) + 3.0  # offset mean: moments are central
    ref = scipy.stats.kurtosis(w.numpy().astype(np.float64).ravel(), fisher=True, bias=True)
    whole = kurtosis(w)
    monkeypatch.setattr(norms, "_CHUNK", 7777)  # many uneven chunks
    assert kurtosis(w) == pytest.approx(ref, rel=1e-9, abs=1e-12)
    assert kurtosis(w) == pytest.approx(whole, rel=1e-12, abs=1e-14)
    assert abs(whole) < 0.05  # Gaussian entries


def test_max_abs_over_rms_single_spike():
    w = torch.zeros(10, 10)
    w[3, 4] = -7.0
    assert max_abs_over_rms(w) == pytest.approx(10.0)  # sqrt(mn)
