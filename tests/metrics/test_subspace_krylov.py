"""The fast routes of the diff metrics against exact ones (NumPy's SVD in float64).

- ``subspace.top_left`` (block Krylov with a residual estimate, exact fallback) gives the same top-k left
  subspace, and so the same ``subspace_overlap``, within the stated accuracy (4 x TOLERANCE = 1e-5), on
  separated, clustered and degenerate top singular values, wide and tall, and on the bundled SmolLM2's
  matrices;
- ``difference_singular_values`` (one float64 Gram of the stored pair's difference) gives NumPy's
  singular values of ΔW;
- the built-in diff metrics make no float32 copy of either side.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from toolkit.metrics import subspace
from toolkit.metrics.diff import DiffContext, compute_diff_metrics
from toolkit.metrics.registry import DegenerateMatrix
from toolkit.metrics.spectral import difference_singular_values

K = 16
STATED = 4 * subspace.TOLERANCE  # the overlap's stated accuracy
pytestmark = pytest.mark.usefixtures("one_thread")


def with_spectrum(m: int, n: int, s: np.ndarray, seed: int) -> np.ndarray:
    """An m x n float64 matrix with singular values ``s`` (length min(m, n)) and random singular vectors."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((m, len(s))))
    v, _ = np.linalg.qr(rng.standard_normal((n, len(s))))
    return (u * s) @ v.T


def exact_left(w: np.ndarray, k: int = K) -> np.ndarray:
    return np.linalg.svd(w, full_matrices=False)[0][:, :k]


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a.T @ b) ** 2).sum()) / a.shape[1]


@pytest.fixture
def krylov_everywhere(monkeypatch):
    """Small test matrices take the Krylov route too; count the exact fallbacks."""
    monkeypatch.setattr(subspace, "MIN_KRYLOV_SIDE", 1)
    calls = []
    exact = subspace.exact_top_subspace
    monkeypatch.setattr(subspace, "exact_top_subspace", lambda *a, **kw: calls.append(1) or exact(*a, **kw))
    return calls


def power_law(d: int, p: float = 0.5) -> np.ndarray:
    return np.arange(1, d + 1, dtype=float) ** -p


@pytest.mark.parametrize("shape", [(200, 300), (300, 200)])
def test_separated_spectrum_takes_krylov_and_matches_svd(shape, krylov_everywhere):
    w = with_spectrum(*shape, power_law(min(shape)), seed=1)
    u = subspace.top_left(torch.from_numpy(w), K).numpy()
    assert not krylov_everywhere  # converged: no fallback
    assert u.shape == (shape[0], K)
    np.testing.assert_allclose(u.T @ u, np.eye(K), atol=1e-10)
    assert 1 - overlap(u, exact_left(w)) <= STATED


def test_overlap_of_two_matrices_matches_svd(krylov_everywhere):
    """A base and a fine-tuned target (10 % of entries moved): the metric against the exact subspaces."""
    rng = np.random.default_rng(2)
    base = with_spectrum(240, 360, power_law(240, 0.4), seed=3)
    mask = rng.random(base.shape) < 0.1
    target = base + mask * rng.standard_normal(base.shape) * 0.05
    got = compute_diff_metrics(torch.from_numpy(base), torch.from_numpy(target), ["subspace_overlap"])
    want = overlap(exact_left(base), exact_left(target))
    assert not krylov_everywhere
    assert 0.05 < want < 0.999  # a real change, neither identical nor unrelated subspaces
    assert abs(got["subspace_overlap"].value - want) <= STATED


def test_nearly_degenerate_top_values_fall_back_to_the_exact_route(krylov_everywhere):
    """sigma_16 / sigma_17 = 1 + 1e-9 (a float64 matrix: clear of its rounding): the Krylov bound cannot
    certify the subspace; the exact route's basis comes back."""
    s = power_law(150)
    s[K] = s[K - 1] * (1 - 1e-9)
    w = torch.from_numpy(with_spectrum(150, 220, s, seed=4))
    got = subspace.top_left(w, K)
    assert krylov_everywhere
    torch.testing.assert_close(got, subspace.exact_top_left(w, K), rtol=0, atol=0)


def test_clustered_top_values_agree_within_the_stated_accuracy(krylov_everywhere):
    """Sixteen top values within 1e-3 of each other, then a 1 % gap: whichever route, the overlap of the
    computed subspace with SVD's is within the stated accuracy."""
    s = power_law(180, 0.3)
    s[:K] = 1.0 + 1e-3 * np.linspace(1, 0, K)
    s[K:] = np.minimum(s[K:], 0.99)
    w = with_spectrum(180, 260, s, seed=5)
    u = subspace.top_left(torch.from_numpy(w), K).numpy()
    assert 1 - overlap(u, exact_left(w)) <= STATED


def test_a_gaussian_matrix_is_correct_whatever_the_route(krylov_everywhere):
    """An unstructured matrix (top values clustered at the Marchenko-Pastur edge)."""
    w = np.random.default_rng(6).standard_normal((160, 400))
    u = subspace.top_left(torch.from_numpy(w).to(torch.bfloat16), K).numpy()
    wb = torch.from_numpy(w).to(torch.bfloat16).double().numpy()
    assert 1 - overlap(u, exact_left(wb)) <= STATED


def test_rank_below_k_is_degenerate(krylov_everywhere):
    s = np.zeros(100)
    s[:10] = power_law(10)
    w = torch.from_numpy(with_spectrum(100, 130, s, seed=7))
    with pytest.raises(DegenerateMatrix, match="rank below"):
        subspace.top_left(w, K)


def test_nonfinite_is_degenerate(krylov_everywhere):
    w = torch.from_numpy(with_spectrum(80, 90, power_law(80), seed=8))
    w[3, 4] = float("nan")
    with pytest.raises(DegenerateMatrix):
        subspace.top_left(w, K)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(90, 140), (140, 90)])
def test_difference_singular_values_match_svd(shape, dtype):
    g = torch.Generator().manual_seed(9)
    base = torch.randn(shape, generator=g).to(dtype)
    target = (base.double() + (torch.rand(shape, generator=g) < 0.1) * torch.randn(shape, generator=g)).to(dtype)
    want = np.linalg.svd(target.double().numpy() - base.double().numpy(), compute_uv=False)
    got = difference_singular_values(base, target).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * want[0])


def test_builtin_metrics_make_no_float32_copies():
    g = torch.Generator().manual_seed(10)
    base = torch.randn(64, 96, generator=g).to(torch.bfloat16)
    target = (base.float() + 0.1 * torch.randn(64, 96, generator=g)).to(torch.bfloat16)
    ctx = DiffContext(base, target)
    values = compute_diff_metrics(base, target, ctx=ctx)
    assert all(np.isfinite(v.value) for v in values.values())
    assert not {"base", "target", "delta"} & set(vars(ctx))  # the cached float32 copies were never made
    d = target.double().numpy() - base.double().numpy()
    s = np.linalg.svd(d, compute_uv=False)
    assert values["delta_stable_rank"].value == pytest.approx((s ** 2).sum() / s[0] ** 2, rel=1e-9)
    p = s / s.sum()
    assert values["delta_effective_rank"].value == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-9)


def test_bundled_smollm2_matrices(smollm2_path, krylov_everywhere):
    """Real trained matrices (576 x 576 attention, 1536 x 576 and 576 x 1536 MLP; the Krylov route, which
    at this size would leave them to the exact one): each side's subspace and a fine-tune's overlap
    against NumPy's SVD."""
    import toolkit

    src = toolkit.open_source(smollm2_path)
    names = ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight",
             "model.layers.1.mlp.down_proj.weight")
    records = {r.name: r for r in src.tensors() if r.name in names}
    rng = np.random.default_rng(11)
    routes = []
    for name in names:
        base = records[name].read().to(torch.float32)
        mask = torch.from_numpy(rng.random(tuple(base.shape)) < 0.1)
        target = base + mask * 0.05 * base.abs().mean() * torch.from_numpy(rng.standard_normal(tuple(base.shape)))
        found = subspace.krylov_top(base, K)
        routes.append(found is not None)
        ub = exact_left(base.double().numpy())
        assert 1 - overlap(subspace.top_left(base, K).numpy(), ub) <= STATED, name
        got = compute_diff_metrics(base, target.float(), ["subspace_overlap"])["subspace_overlap"].value
        assert abs(got - overlap(ub, exact_left(target.float().double().numpy()))) <= STATED, name
    assert any(routes)  # the fast route is taken on real weights


def test_the_other_side_of_a_pair_skips_an_attempt_the_first_side_gave_up(monkeypatch):
    """A Gaussian base (top values clustered at the Marchenko-Pastur edge: no gap the Krylov route can
    certify): the base gives the attempt up; the fine-tuned side goes straight to the exact route, and both
    sides' subspaces are the exact route's."""
    monkeypatch.setattr(subspace, "MIN_KRYLOV_SIDE", 1)
    attempts = []
    krylov = subspace.krylov_top
    monkeypatch.setattr(subspace, "krylov_top", lambda *a, **kw: attempts.append(1) or krylov(*a, **kw))
    rng = np.random.default_rng(7)
    base = torch.from_numpy(rng.standard_normal((640, 900)))
    target = base + torch.from_numpy((rng.random((640, 900)) < 0.1) * rng.standard_normal((640, 900)) * 0.05)
    ctx = DiffContext(base, target)
    b, t = ctx.top_subspace("base", K), ctx.top_subspace("target", K)
    assert attempts == [1] and b.krylov_gave_up and not t.krylov_gave_up
    for got, w in ((b, base), (t, target)):
        torch.testing.assert_close(got.vectors, subspace.exact_top_left(w, K), rtol=0, atol=0)
