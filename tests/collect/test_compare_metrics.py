"""The diff metrics on hand-built matrices with known answers (no files)."""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.metrics.diff import (
    DiffContext,
    compute_diff_metrics,
    count_unchanged,
    top_left_singular_vectors,
)
from toolkit.metrics.pair_sums import comparison_dtype


def values(base, target, **kw):
    return {k: v.value for k, v in compute_diff_metrics(base, target, **kw).items()}


def test_comparison_dtype_is_the_coarser_side():
    assert comparison_dtype(torch.float32, torch.bfloat16) == torch.bfloat16
    assert comparison_dtype(torch.float16, torch.bfloat16) == torch.bfloat16
    assert comparison_dtype(torch.float64, torch.float32) == torch.float32
    with pytest.raises(TypeError, match="int8"):
        comparison_dtype(torch.int8, torch.float32)


def test_unchanged_is_bitwise_in_the_storage_dtype():
    b = torch.tensor([1.0, -2.0, 0.0, 3.0], dtype=torch.bfloat16)
    t = b.clone()
    t[3] = torch.nextafter(t[3:4].float(), torch.tensor([10.0])).bfloat16()  # float32 ulp: rounds back
    assert count_unchanged(b, t) == 4
    t[3] = (b[3:4].view(torch.int16) + 1).view(torch.bfloat16)  # one bf16 ulp
    t[2] = -0.0  # another bit pattern, same value: changed, bit for bit
    assert count_unchanged(b, t) == 2
    assert count_unchanged(b, t, tolerance=0.05) == 4
    # float32 base against a bf16 target: judged in bf16
    b32 = torch.tensor([1.0 + 2**-12, 1.0], dtype=torch.float32)
    assert count_unchanged(b32, b32.bfloat16()) == 2
    assert count_unchanged(b32, b32) == 2 and count_unchanged(b32, b32 + 2**-12) == 0


def test_rank_one_update():
    torch.manual_seed(0)
    w = torch.randn(12, 8, dtype=torch.float64)
    u, v = torch.randn(12, 1, dtype=torch.float64), torch.randn(1, 8, dtype=torch.float64)
    got = values(w, w + u @ v)
    assert got["delta_stable_rank"] == pytest.approx(1.0)
    assert got["delta_effective_rank"] == pytest.approx(1.0, abs=1e-6)
    assert got["relative_change"] == pytest.approx(float(torch.linalg.norm(u @ v) / torch.linalg.norm(w)), rel=1e-6)
    assert got["update_sparsity"] == 0.0 and got["update_density"] == 1.0


def test_orthogonal_matrices_and_subspaces():
    base = torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.5]))
    swap = torch.diag(torch.tensor([0.5, 1.0, 2.0, 3.0]))  # top directions exchanged
    got = values(base, swap, k=2)
    assert got["subspace_overlap"] == pytest.approx(0.0, abs=1e-12)
    assert got["cosine_similarity"] == pytest.approx((1.5 + 2 + 2 + 1.5) / (9 + 4 + 1 + 0.25))
    assert values(base, swap, k=4)["subspace_overlap"] == pytest.approx(1.0)  # the whole space
    rot = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    assert values(rot, torch.eye(2))["cosine_similarity"] == pytest.approx(0.0)


def test_degenerate_cases_are_nan_with_a_reason():
    z = torch.zeros(4, 3)
    got = compute_diff_metrics(z, torch.ones(4, 3))
    assert math.isnan(got["relative_change"].value) and "all zeros" in got["relative_change"].reason
    same = compute_diff_metrics(torch.eye(3), torch.eye(3))
    assert "unchanged" in same["delta_stable_rank"].reason and same["subspace_overlap"].value == 1.0
    low = torch.zeros(5, 4)
    low[0, 0] = 1.0
    got = compute_diff_metrics(low, 2 * low + 0.0, ["subspace_overlap"], k=2)
    assert "rank below k=2" in got["subspace_overlap"].reason


def test_tall_and_wide_subspaces_agree_with_svd():
    torch.manual_seed(1)
    for shape in ((40, 10), (10, 40)):
        w = torch.randn(*shape, dtype=torch.float64)
        u = top_left_singular_vectors(w, 3)
        ref = torch.linalg.svd(w, full_matrices=False).U[:, :3]
        assert u.shape == (shape[0], 3) and u.dtype == torch.float64
        assert float((u.T @ ref).pow(2).sum()) == pytest.approx(3.0, rel=1e-10)


def test_context_shares_work_and_reuses_bases():
    torch.manual_seed(2)
    w = torch.randn(16, 8)
    ctx = DiffContext(w, w * 3)
    first = ctx.top_subspace("base", 4)
    assert ctx.top_subspace("base", 4) is first and ctx.left_basis("base", 4) is first.vectors
    reused = DiffContext(w, w + 1, bases={("base", 4): first})
    assert reused.left_basis("base", 4) is first.vectors
    with pytest.raises(ValueError, match="shapes differ"):
        DiffContext(w, w.T)
