"""The one-pass pair sums behind the entry-wise diff metrics and compare's totals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import toolkit
from _compare_data import tiny, variant
from toolkit.collect.compare import compare
from toolkit.collect.measure import pairs as pair_cells
from toolkit.metrics.diff import DiffContext, compute_diff_metrics
from toolkit.metrics.pair_sums import (
    _SPLIT,
    CHUNK,
    PairSums,
    count_nonfinite,
    delta_sums_against,
    pair_sums,
    pair_sums_against,
)
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



# ------------------------------------------------------------------ against math.fsum


def fsum_reference(b: torch.Tensor, t: torch.Tensor) -> dict:
    """Each sum as math.fsum of the float64 terms (exact products for bf16/float16/float32 input, so
    the reference is the correctly rounded sum), with the sum of the terms' magnitudes (the error scale)."""
    x, y = b.double().numpy().ravel(), t.double().numpy().ravel()
    d = y - x
    terms = {"sumsq_base": x * x, "sumsq_target": y * y, "dot": x * y, "sumsq_delta": d * d}
    return {k: (math.fsum(v.tolist()), math.fsum(np.abs(v).tolist())) for k, v in terms.items()}


def bits_unchanged(b: torch.Tensor, t: torch.Tensor) -> int:
    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[b.element_size()]
    return int((b.reshape(-1).view(view) == t.reshape(-1).view(view)).sum())


#: Unit roundoff of float64 and the probabilistic factor of Higham & Mary (2019), "A new approach to probabilistic
#: rounding error analysis", SIAM J. Sci. Comput. 41(5), Thm. 2.4: a float64 sum of L terms, in any order (any
#: BLAS blocking or thread split), is within lambda sqrt(L) u sum|terms| of the exact sum with probability at
#: least 1 - 2 L exp(-lambda^2 (1 - u)^2 / 2) (lambda = 8: above 1 - 1e-9 for L = 2^16).
U, LAMBDA = 2.0**-53, 8.0


def summation_bound(name: str, n: int, chunk: int, float64_input: bool) -> float:
    """The relative error bound of one of pair_sums' sums, from how it is computed: inside a chunk the sum of
    (t - b)^2 is one float64 dot of the chunk (L = chunk) and the Gram sums one product per 1/_SPLIT of it; the
    chunks' and parts' sums are added exactly (math.fsum). Products of float32-or-narrower entries are exact in
    float64; of float64 entries they (and t - b) round once more (3 u)."""
    size = max(1, min(chunk, n))
    run = size if name == "sumsq_delta" else max(1, size // _SPLIT) + _SPLIT
    return LAMBDA * math.sqrt(run) * U + (3 * U if float64_input else 0.0)


def assert_matches_fsum(s: PairSums, b: torch.Tensor, t: torch.Tensor, chunk: int = CHUNK) -> None:
    """Each sum of ``s`` within its computation's error bound (:func:`summation_bound`) of the correctly rounded
    one, whatever the thread count or BLAS."""
    f64 = torch.float64 in (b.dtype, t.dtype)
    for name, (value, scale) in fsum_reference(b, t).items():
        rel = summation_bound(name, b.numel(), chunk, f64)
        assert abs(getattr(s, name) - value) <= rel * scale, (name, getattr(s, name), value, rel)


def _pair(shape, dtype, seed, offset=0.0, scale=0.02, step=1e-3):
    g = torch.Generator().manual_seed(seed)
    b = offset + scale * torch.randn(shape, generator=g, dtype=torch.float64)
    moved = torch.rand(shape, generator=g) < 1 / 3
    t = b + step * torch.randn(shape, generator=g, dtype=torch.float64) * moved
    return b.to(dtype), t.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [1, 1000, 4096, 1 << 16])
def test_sums_match_fsum_with_a_ragged_last_chunk(dtype, chunk):
    b, t = _pair((61, 97), dtype, seed=4)  # 5917 entries: the last chunk is ragged for every chunk size
    s = pair_sums(b, t, chunk=chunk)
    assert_matches_fsum(s, b, t, chunk)
    assert s.unchanged == bits_unchanged(b, t) and s.n == b.numel()
    tol = 5e-4
    ref = int((t.double() - b.double()).abs().le(tol).sum())
    assert pair_sums(b, t, tol, chunk=chunk).unchanged == ref


def test_a_last_chunk_of_one_entry():
    b, t = _pair((3, 11, 3), torch.bfloat16, seed=5)  # 99 entries, chunks of 98
    s = pair_sums(b, t, chunk=98)
    assert_matches_fsum(s, b, t, 98)
    assert s.unchanged == bits_unchanged(b, t)


@pytest.mark.parametrize("dtype, offset, step", [(torch.float32, 1e3, 1e-6), (torch.float64, 1e6, 1e-9),
                                                 (torch.bfloat16, -300.0, 2.0)])
def test_large_offsets_keep_the_update_sum_accurate(dtype, offset, step):
    # sum (t - b)^2 is summed directly: as sum t^2 - 2 sum bt + sum b^2 it would lose ~12 digits here
    b, t = _pair((50, 300), dtype, seed=6, offset=offset, scale=1e-2, step=step)
    s = pair_sums(b, t, chunk=4096)
    assert_matches_fsum(s, b, t, 4096)
    ref_delta = fsum_reference(b, t)["sumsq_delta"][0]
    assert ref_delta > 0 and s.sumsq_delta == pytest.approx(ref_delta, rel=1e-13)


def test_float32_extremes_stay_finite_and_exact():
    b = torch.tensor([3e38, -3e38, 1e-38, 1e-45, 0.0, 2.0], dtype=torch.float32)
    t = torch.tensor([-3e38, 3e38, 1e-45, 1e-38, -0.0, 2.0], dtype=torch.float32)
    s = pair_sums(b, t, chunk=4)
    assert s.finite and not s.identical
    assert_matches_fsum(s, b, t, 4)
    assert s.unchanged == 1  # 2.0 only: 0.0 and -0.0 differ in their bits


def test_nan_and_inf_entries_anywhere():
    b, t = _pair((40, 50), torch.bfloat16, seed=7)
    b[3, 4], t[20, 1] = float("nan"), float("inf")
    b[30, 30] = t[30, 30] = float("-inf")  # equal bits: unchanged at tolerance 0, not under a tolerance
    for chunk in (64, 1 << 16):
        s = pair_sums(b, t, chunk=chunk)
        assert not s.finite and not s.identical
        assert math.isnan(s.sumsq_base) and math.isinf(s.sumsq_target)
        assert s.unchanged == bits_unchanged(b, t)
        with np.errstate(invalid="ignore"):
            ref = int(np.count_nonzero(np.abs(t.double().numpy() - b.double().numpy()) <= 1e-2))
        assert pair_sums(b, t, 1e-2, chunk=chunk).unchanged == ref
    nan_both = torch.tensor([float("nan")], dtype=torch.bfloat16)
    assert pair_sums(nan_both, nan_both.clone()).unchanged == 1  # same bits
    assert pair_sums(nan_both, nan_both.clone(), 1.0).unchanged == 0  # |NaN| <= tol is false


def test_infinities_of_both_signs_across_chunks():
    # chunk dots of +inf and -inf: NaN (no error from the exact chunk summation)
    b = torch.tensor([float("inf"), float("inf"), 1.0])
    t = torch.tensor([1.0, -1.0, 1.0])
    s = pair_sums(b, t, chunk=1)
    assert math.isnan(s.dot) and s.sumsq_base == math.inf and not s.finite


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_identical_tensors_give_an_exact_zero_update(dtype):
    b, _ = _pair((70, 33), dtype, seed=8)
    for tol in (0.0, 1e-6):
        s = pair_sums(b, b.clone(), tol, chunk=1000)
        assert s.sumsq_delta == 0.0 and s.identical and s.unchanged == s.n == b.numel()
        assert s.sumsq_base == s.sumsq_target == s.dot
        assert_matches_fsum(s, b, b, 1000)
    z = torch.zeros(5, dtype=dtype)
    nz = -z
    s = pair_sums(z, nz)
    assert s.identical and s.unchanged == 0 and pair_sums(z, nz, 1e-9).unchanged == 5


def test_the_tolerance_is_inclusive():
    step = 2.0 ** -7  # one bf16 ulp at 1.0
    b = torch.ones(10, dtype=torch.bfloat16)
    t = b.clone()
    t[::2] = 1.0 + step
    assert pair_sums(b, t, step).unchanged == 10
    assert pair_sums(b, t, math.nextafter(step, 0.0)).unchanged == 5
    b32, t32 = b.float(), t.float()  # mixed dtypes: rounded to bf16, then the same rule
    assert pair_sums(b32, t, step).unchanged == 10 and pair_sums(b, t32, math.nextafter(step, 0.0)).unchanged == 5
    assert pair_sums(b32, t32, step).unchanged == 10


def test_empty_tensors():
    s = pair_sums(torch.zeros(0, 4, dtype=torch.bfloat16), torch.zeros(0, 4, dtype=torch.bfloat16))
    assert s == PairSums() and s.finite


def test_default_chunks_sum_float32_within_the_summation_bound():
    # float32 products are exact in float64, so only the summation inside a chunk (or part) rounds; the
    # chunks' sums are added exactly, so the error does not grow with the tensor: 3 chunks here
    g = torch.Generator().manual_seed(9)
    b = 0.02 * torch.randn(3 << 16, generator=g)
    t = b + 1e-3 * torch.randn(3 << 16, generator=g)
    assert_matches_fsum(pair_sums(b, t), b, t)


@pytest.mark.parametrize("tolerance", [0.0, 5e-4])
@pytest.mark.parametrize("chunk", [1000, 1 << 16])
def test_sums_against_several_bases_are_each_pairs_own(tolerance, chunk):
    """One pass over a target against several bases (a watched run's first and previous record, a base in
    another dtype, the target itself) gives each pair's pair_sums: sums within float64 summation order,
    counts exact."""
    b, t = _pair((61, 97), torch.float32, seed=7)
    previous = (t.double() - 1e-3 * (torch.rand(t.shape, dtype=torch.float64) < 0.5)).to(torch.float32)
    bases = [b, previous, b.to(torch.bfloat16), t.clone()]
    got = pair_sums_against(t, bases, tolerance, chunk=chunk)
    for base, s in zip(bases, got, strict=True):
        want = pair_sums(base, t, tolerance, chunk=chunk)
        for name in ("sumsq_base", "sumsq_target", "dot", "sumsq_delta"):
            assert getattr(s, name) == pytest.approx(getattr(want, name), rel=1e-14, abs=1e-300), name
        assert (s.unchanged, s.n) == (want.unchanged, want.n)
    assert got[3].identical and got[3].unchanged == t.numel()
    assert got[0].sumsq_delta == pytest.approx(reference(b, t)["sumsq_delta"], rel=1e-13)
    with pytest.raises(ValueError, match="shapes differ"):
        pair_sums_against(t, [b, b[:-1]])
    assert pair_sums_against(t, []) == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [1, 1000, 1 << 16])
def test_the_difference_sums_alone_are_the_pairs_own(dtype, chunk):
    """delta_sums_against: sum (t - b)^2 within its summation bound of the correctly rounded sum (math.fsum) and
    the unchanged entries by the stored bits, for each base, ragged last chunk; signed zeros count as changed
    (their bits differ), as pair_sums counts them."""
    b, t = _pair((61, 97), dtype, seed=11)
    t[0, :3] = torch.tensor([0.0, -0.0, 0.0], dtype=dtype)
    b[0, :3] = torch.tensor([-0.0, -0.0, 0.0], dtype=dtype)
    previous = t.clone()
    previous[5:9] += 1e-2
    got = delta_sums_against(t, [b, previous, t.clone()], chunk=chunk)
    for base, (dd, unchanged) in zip([b, previous, t], got, strict=True):
        value, scale = fsum_reference(base, t)["sumsq_delta"]
        rel = summation_bound("sumsq_delta", t.numel(), chunk, dtype == torch.float64)
        assert abs(dd - value) <= rel * scale
        assert unchanged == bits_unchanged(base, t) == pair_sums(base, t, chunk=chunk).unchanged
    assert got[2] == (0.0, t.numel()) and got[0][1] == bits_unchanged(b, t) < t.numel() - 1
    assert pair_sums(b, t).unchanged == got[0][1]  # 0.0 against -0.0 is a change in both


def test_the_difference_sums_alone_with_non_finite_entries_and_where_they_do_not_apply():
    b, t = _pair((40, 50), torch.float32, seed=12)
    t[3, 4], b[7, 1], t[9, 9], b[9, 9] = float("nan"), float("inf"), float("inf"), float("inf")
    (dd, unchanged), = delta_sums_against(t, [b])
    assert math.isnan(dd) and unchanged == bits_unchanged(b, t)
    assert delta_sums_against(t.to(torch.bfloat16), [b.to(torch.bfloat16)]) is None  # no NumPy bfloat16
    assert delta_sums_against(t, [b.double()]) is None  # mixed dtypes: the coarser one's rule, pair_sums_against
    with pytest.raises(ValueError, match="shapes differ"):
        delta_sums_against(t, [b[:-1]])
