"""The one-pass pair sums behind the entry-wise diff metrics and compare's totals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import toolkit
from _compare_data import tiny, variant
from toolkit.collect import pair_cells
from toolkit.collect.compare import compare
from toolkit.metrics.diff import DiffContext, compute_diff_metrics
from toolkit.metrics.pair_sums import PairSums, count_nonfinite, pair_sums
from toolkit.metrics.registry import register_metric, unregister_metric


def reference(b: torch.Tensor, t: torch.Tensor) -> dict:
    """The sums by NumPy in float64 from whole float64 copies."""
    x, y = b.double().numpy().ravel(), t.double().numpy().ravel()
    return {"sumsq_base": float(x @ x), "sumsq_target": float(y @ y), "dot": float(x @ y),
            "sumsq_delta": float((y - x) @ (y - x))}


def test_hand_computed_sums():
    b = torch.tensor([[1.0, 2.0], [0.0, -3.0]], dtype=torch.bfloat16)
    t = torch.tensor([[1.0, 2.5], [0.0, -1.0]], dtype=torch.bfloat16)
    s = pair_sums(b, t)
    # 1 + 4 + 0 + 9; 1 + 6.25 + 0 + 1; 1 + 5 + 0 + 3; 0 + 0.25 + 0 + 4
    assert (s.sumsq_base, s.sumsq_target, s.dot, s.sumsq_delta) == (14.0, 8.25, 9.0, 4.25)
    assert (s.unchanged, s.n) == (2, 4) and s.finite and not s.identical
    assert pair_sums(b, b.clone()).identical


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("chunk", [7, 1 << 15])
def test_sums_match_numpy_for_every_chunk_size(dtype, chunk):
    g = torch.Generator().manual_seed(1)
    b = (torch.randn(37, 23, generator=g) * 0.02).to(dtype)
    t = (b.float() + 1e-3 * torch.randn(37, 23, generator=g) * (torch.rand(37, 23, generator=g) < 0.3)).to(dtype)
    s, ref = pair_sums(b, t, chunk=chunk), reference(b, t)
    for name, value in ref.items():
        assert getattr(s, name) == pytest.approx(value, rel=1e-13), name
    same = int((b.float() == t.float()).sum())  # no -0.0 / NaN here, so value and bit equality agree
    assert s.unchanged == same and s.n == b.numel()


def test_layout_does_not_matter():
    g = torch.Generator().manual_seed(2)
    b = torch.randn(12, 9, generator=g).bfloat16()
    t = (b.float() * 1.01).bfloat16()
    whole = pair_sums(b, t)
    for view in (lambda x: x.T, lambda x: x[::2], lambda x: x.view(3, 4, 9)[:, ::2].reshape(-1, 9)):
        part = pair_sums(view(b), view(t))
        ref = reference(view(b), view(t))
        assert part.sumsq_base == pytest.approx(ref["sumsq_base"], rel=1e-13)
        assert part.sumsq_delta == pytest.approx(ref["sumsq_delta"], rel=1e-13)
    assert pair_sums(b.T, t.T).dot == pytest.approx(whole.dot, rel=1e-13)


def test_mixed_dtypes_are_judged_in_the_coarser_one():
    b32 = torch.tensor([1.0 + 2**-12, 1.0, 2.0], dtype=torch.float32)
    t16 = b32.bfloat16()  # the bf16 rounding of the base: no smaller change could be stored
    s = pair_sums(b32, t16)
    assert s.unchanged == 3
    assert s.sumsq_delta == pytest.approx(2**-24)  # the continuous sums use the values as read
    assert pair_sums(b32, t16, tolerance=1e-6).unchanged == 3
    t16[2] = 2.015625  # one bf16 ulp above 2
    assert pair_sums(b32, t16).unchanged == 2
    assert pair_sums(b32, t16, tolerance=0.01).unchanged == 2 and pair_sums(b32, t16, tolerance=0.02).unchanged == 3


def test_non_finite_entries():
    b = torch.tensor([1.0, float("nan"), 2.0])
    t = torch.tensor([1.0, 1.0, float("inf")])
    s = pair_sums(b, t)
    assert not s.finite and not s.identical
    assert count_nonfinite(b, t) == 2
    assert pair_sums(torch.tensor([3e38]), torch.tensor([3e38])).finite  # float32 max squared fits float64


def test_pair_sums_add_up():
    a, b = PairSums(1.0, 2.0, 3.0, 4.0, 5, 6), PairSums(0.5, 0.5, 0.5, 0.5, 1, 2)
    assert a + b == PairSums(1.5, 2.5, 3.5, 4.5, 6, 8)


def test_errors():
    with pytest.raises(ValueError, match="shapes differ"):
        pair_sums(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(TypeError, match="int8"):
        pair_sums(torch.zeros(2, dtype=torch.int8), torch.zeros(2))


def test_entrywise_metrics_never_convert_the_matrices():
    g = torch.Generator().manual_seed(3)
    b = torch.randn(16, 8, generator=g).bfloat16()
    t = (b.float() * 2).bfloat16()
    ctx = DiffContext(b, t)
    got = compute_diff_metrics(b, t, ["relative_change", "cosine_similarity", "update_sparsity"], ctx=ctx)
    assert "base" not in ctx.__dict__ and "target" not in ctx.__dict__  # no float32 copy was made
    assert got["relative_change"].value == pytest.approx(1.0, rel=1e-12)
    assert got["cosine_similarity"].value == pytest.approx(1.0, rel=1e-12)
    compute_diff_metrics(b, t, ["delta_stable_rank"], ctx=ctx)
    assert ctx.base.dtype == torch.float32  # a spectral metric does read them


def test_a_user_metric_that_reads_only_the_sums_gets_no_matrices():
    seen = []

    def delta_rms(base, target, ctx):
        seen.append((base, target))
        return math.sqrt(ctx.sums.sumsq_delta / ctx.sums.n)

    register_metric("delta_rms_test", delta_rms, long_name="rms of the update", kind="diff",
                    needs_matrices=False)
    try:
        b = torch.zeros(4, 4)
        got = compute_diff_metrics(b, b + 0.5, ["delta_rms_test"])["delta_rms_test"]
        assert got.value == 0.5 and seen == [(None, None)]
        assert not toolkit.get_metric("delta_rms_test").needs_matrices
    finally:
        unregister_metric("delta_rms_test")


def test_row_blocks_of_a_safetensors_record(tmp_path):
    w = torch.arange(60, dtype=torch.float32).reshape(10, 6).bfloat16()
    save_file({"x": w}, str(tmp_path / "m.safetensors"))
    from toolkit.sources.safetensors_ import SafetensorsSource

    src = SafetensorsSource.from_file(tmp_path / "m.safetensors", config={}, location=str(tmp_path))
    rec = next(src.tensors())
    blocks = list(rec.row_blocks(max_entries=20))  # 3 rows (18 entries) per block
    assert [tuple(b.shape) for b in blocks] == [(3, 6), (3, 6), (3, 6), (1, 6)]
    assert torch.equal(torch.cat(blocks), w) and blocks[0].dtype == torch.bfloat16
    assert [tuple(b.shape) for b in rec.row_blocks(max_entries=1000)] == [(10, 6)]


def test_embedding_totals_from_row_blocks_equal_whole_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", "off")
    base = tiny(tmp_path / "base")
    target = variant(base, tmp_path / "t", lambda k, v: v * 2 if "embed" in k else v)
    whole = compare(base, target, ["relative_change"], progress=False)
    monkeypatch.setattr(pair_cells, "BLOCK_ENTRIES", 7)  # a few rows per block
    blocks = compare(base, target, ["relative_change"], progress=False)
    name = next(n for n in whole.tensor.values if "embed" in n)
    assert float(whole.tensor_relative_change.sel(tensor=name)) == 1.0
    np.testing.assert_allclose(blocks.tensor_relative_change, whole.tensor_relative_change, rtol=1e-12)
    assert float(blocks.model_update_sparsity) == float(whole.model_update_sparsity)

