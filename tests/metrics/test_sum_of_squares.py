"""The sum of squares' own pass (:func:`toolkit.metrics.norms.sum_of_squares` without the moment pass) against
``math.fsum`` of the exactly squared entries, and the NaN/Inf check that reads it."""

import math

import numpy as np
import pytest
import torch
from test_moments import CASES

import toolkit.metrics.norms as norms
from toolkit.metrics.evaluate import evaluate_matrix
from toolkit.metrics.norms import count_nonfinite, sum_of_squares
from toolkit.metrics.registry import get_metric


def _fsum_of_squares(w: torch.Tensor) -> float:
    a = w.to(torch.float64).numpy().ravel()
    return math.fsum(a * a)  # float16/bfloat16/float32 squares are exact in float64


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("chunk", [None, 7777, 1])
def test_the_own_pass_equals_fsum_of_the_exact_squares(case, chunk, monkeypatch):
    w = CASES[case]()
    if chunk is not None:
        monkeypatch.setattr(norms, "_CHUNK", chunk if chunk > 1 else w.numel() - 1)  # last chunk: one entry
    got = sum_of_squares(w)
    assert ("moments", norms._CHUNK) not in norms._shared(w)  # its own pass, not the moment pass
    # within a dot product's rounding per chunk (a few units in the 15th digit), however the entries lie
    assert got == pytest.approx(_fsum_of_squares(w), rel=1e-13, abs=0.0)
    assert count_nonfinite(w) == 0


def test_a_transposed_view_and_a_non_contiguous_slice_read_the_same_entries():
    w = CASES["ordinary"]()
    assert sum_of_squares(w.T) == pytest.approx(_fsum_of_squares(w), rel=1e-13)
    sl = w[::3, 1::2]
    assert sum_of_squares(sl) == pytest.approx(_fsum_of_squares(sl.contiguous()), rel=1e-13)


def test_after_the_moment_pass_the_moments_serve_it():
    w = CASES["large mean, tiny spread"]()
    mean, m2, _ = norms.central_moments(w)
    assert sum_of_squares(w) == w.numel() * (m2 + mean * mean)
    assert sum_of_squares(w) == pytest.approx(_fsum_of_squares(w), rel=1e-12)


@pytest.mark.parametrize("bad,count", [(float("nan"), 1), (float("inf"), 1), (-float("inf"), 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_nonfinite_entries_are_counted_from_the_squares(bad, count, dtype, monkeypatch):
    monkeypatch.setattr(norms, "_CHUNK", 7777)
    w = CASES["ordinary"]().to(dtype)
    w.view(-1)[54_321] = bad
    if count == 2:
        w.view(-1)[-1] = -bad  # +inf and -inf in different chunks
    assert not math.isfinite(sum_of_squares(w))
    assert count_nonfinite(w) == count
    assert ("moments", norms._CHUNK) not in norms._shared(w)


def test_float64_entries_whose_squares_overflow_are_finite_entries():
    w = torch.full((30, 20), 1e200, dtype=torch.float64)
    assert sum_of_squares(w) == math.inf
    assert count_nonfinite(w) == 0  # checked entry by entry: none is NaN/Inf


def test_a_cell_reads_one_reduction_the_moments_only_where_a_metric_needs_them():
    w = CASES["ordinary"]()
    norm, rms = get_metric("frobenius_norm"), get_metric("rms")
    r = evaluate_matrix(w, [norm, rms])
    assert set(norms._shared(w)) == {("sum_of_squares", norms._CHUNK)}
    assert r.values["frobenius_norm"] == pytest.approx(math.sqrt(_fsum_of_squares(w)), rel=1e-13)
    assert r.values["rms"] == pytest.approx(np.sqrt(np.mean(w.double().numpy() ** 2)), rel=1e-13)
    w2 = CASES["heavy tails"]()
    evaluate_matrix(w2, [norm, get_metric("kurtosis")])
    assert ("moments", norms._CHUNK) in norms._shared(w2)
    assert sum_of_squares(w2) == pytest.approx(_fsum_of_squares(w2), rel=1e-12)
