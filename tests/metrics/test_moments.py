"""The chunked float64 moment pass (:func:`toolkit.metrics.norms.central_moments`) against an
independent NumPy float64 computation: ordinary weights, a large mean with a tiny spread,
extreme magnitudes, bf16/float16/float64 input, many ragged chunks, constant and NaN/Inf input."""

import math

import pytest
import torch

import toolkit.metrics.norms as norms
from toolkit.metrics.norms import central_moments, count_nonfinite, entry_sum, sum_of_squares


def reference_moments(w: torch.Tensor) -> tuple[float, float, float]:
    """(mean, m2, m4) of the entries in float64: the correctly rounded mean (``math.fsum``), the
    entries' exact differences from it, a second, corrected centring, then ``fsum`` of the powers."""
    a = w.to(torch.float64).numpy().ravel()
    n = a.size
    mu = math.fsum(a) / n
    d = a - mu  # exact (Sterbenz) where the entries lie within a factor 2 of the mean
    delta = math.fsum(d) / n
    e = d - delta
    e2 = e * e
    return mu + delta, math.fsum(e2) / n, math.fsum(e2 * e2) / n


def _rand(shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


CASES = {
    "ordinary": lambda: _rand((400, 300), dtype=torch.float64).mul(0.02).add(1e-4).float(),
    "large mean, tiny spread": lambda: (1e3 + 1e-3 * _rand((400, 300), 1)).float(),
    "large mean, tiny spread, float64": lambda: 1e6 + 1e-6 * _rand((400, 300), 2),
    "scale 1e30": lambda: (1e30 * (_rand((400, 300), 3) + 3.0)).float(),
    "scale 1e-30": lambda: (1e-30 * (_rand((400, 300), 4) - 0.5)).float(),
    "heavy tails": lambda: (0.02 * _rand((400, 300), 5) ** 3).float(),
    "bf16": lambda: (0.02 * _rand((400, 300), 6) + 0.01).bfloat16(),
    "float16": lambda: (0.02 * _rand((400, 300), 7) - 0.003).half(),
    "offset halves": lambda: torch.cat([0.01 * _rand((200, 300), 8), 500.0 + 0.01 * _rand((200, 300), 9)]).float(),
    "offset then centred": lambda: torch.cat([-7.0 + 1e-3 * _rand((200, 300), 10), 1e-3 * _rand((200, 300), 11)]),
    "d^4 overflows about 0, float64": lambda: 1e80 + 1e70 * _rand((400, 300), 12),
}


def _check(w, ref, rel=1e-12):
    mean, m2, m4 = central_moments(w)
    # the mean on the scale of the entries (a mean near 0 has no relative accuracy to speak of)
    assert abs(mean - ref[0]) <= rel * (abs(ref[0]) + math.sqrt(ref[1])), (mean, ref[0])
    assert m2 == pytest.approx(ref[1], rel=rel, abs=0.0)
    assert m4 == pytest.approx(ref[2], rel=rel, abs=0.0)
    return mean, m2, m4


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("chunk", [None, 7777, 1 << 12])
def test_matches_float64_reference(case, chunk, monkeypatch):
    w = CASES[case]()
    ref = reference_moments(w)
    if chunk is not None:
        monkeypatch.setattr(norms, "_CHUNK", chunk)  # 7777: 16 chunks, the last one ragged
    _check(w, ref)
    n = w.numel()
    assert sum_of_squares(w) == pytest.approx(n * (ref[1] + ref[0] ** 2), rel=1e-12)
    assert entry_sum(w) == pytest.approx(n * ref[0], rel=1e-12, abs=1e-12 * n * math.sqrt(ref[1]))
    assert count_nonfinite(w) == 0


def test_chunkings_agree_to_rounding(monkeypatch):
    w = CASES["large mean, tiny spread"]()
    whole = central_moments(w)
    for chunk in [1, 3, 1000, 65535]:
        small = w[:40, :50] if chunk < 100 else w  # one-entry chunks: a smaller matrix
        ref = reference_moments(small)
        monkeypatch.setattr(norms, "_CHUNK", chunk)
        got = _check(small, ref)
        if small is w:
            assert got == pytest.approx(whole, rel=1e-13)


def test_ragged_last_chunk_of_one_entry(monkeypatch):
    w = CASES["ordinary"]()[:101, :99]  # 9999 entries
    monkeypatch.setattr(norms, "_CHUNK", 9998)  # one full chunk and a last chunk of one entry
    _check(w, reference_moments(w))


def test_non_contiguous_and_transposed_input(monkeypatch):
    base = CASES["large mean, tiny spread"]()
    monkeypatch.setattr(norms, "_CHUNK", 5000)
    for w in [base.T, base[::2, 1::3], base.T[:, ::2]]:
        _check(w, reference_moments(w.contiguous()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("value", [2.5, 0.1, -3.3e-5, 7.0e20])
@pytest.mark.parametrize("chunk", [None, 777])
def test_constant_matrix_has_zero_central_moments(dtype, value, chunk, monkeypatch):
    if dtype is torch.float16 and abs(value) > 6e4:
        pytest.skip("outside float16's range")
    if chunk is not None:
        monkeypatch.setattr(norms, "_CHUNK", chunk)
    w = torch.full((301, 203), value, dtype=dtype)
    v = float(w[0, 0])
    mean, m2, m4 = central_moments(w)
    assert mean == v
    assert m2 == 0.0 and m4 == 0.0


def test_constant_float64_matrix_with_inexact_sums():
    w = torch.full((1000, 999), 0.1 + 2**-55, dtype=torch.float64)  # 53 significant bits
    mean, m2, m4 = central_moments(w)
    assert mean == pytest.approx(0.1, rel=1e-15)
    assert m2 <= 1e-30 * mean * mean and m4 <= 1e-60 * mean**4


def test_two_values_far_from_zero(monkeypatch):
    # all but one entry equal: the spread is one float32 step at 1e3 over sqrt(N)
    w = torch.full((300, 300), 1000.0)
    w[17, 33] = torch.nextafter(torch.tensor(1000.0), torch.tensor(2000.0))
    ref = reference_moments(w)
    assert ref[1] > 0
    for chunk in [None, 4096]:
        if chunk is not None:
            monkeypatch.setattr(norms, "_CHUNK", chunk)
        _check(w, ref)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", [0, 54_321, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_a_nonfinite_entry_makes_the_mean_nonfinite(bad, where, dtype, monkeypatch):
    w = CASES["large mean, tiny spread"]().to(dtype)
    w.view(-1)[where] = bad
    for chunk in [None, 7777]:
        if chunk is not None:
            monkeypatch.setattr(norms, "_CHUNK", chunk)
        mean, m2, _ = central_moments(w)
        assert not math.isfinite(mean)
        assert not math.isfinite(entry_sum(w))
        assert count_nonfinite(w) == 1


def test_plus_and_minus_inf_give_nan_mean(monkeypatch):
    w = CASES["ordinary"]()
    w[0, 0], w[-1, -1] = float("inf"), -float("inf")
    monkeypatch.setattr(norms, "_CHUNK", 7777)  # in different chunks
    assert math.isnan(central_moments(w)[0])
    assert count_nonfinite(w) == 2


def test_memo_follows_version_and_chunk(monkeypatch):
    w = CASES["ordinary"]()
    first = central_moments(w)
    assert central_moments(w) is first
    monkeypatch.setattr(norms, "_CHUNK", 7777)
    assert central_moments(w) is not first
    w.mul_(2.0)
    mean, m2, m4 = central_moments(w)
    assert mean == pytest.approx(2 * first[0], rel=1e-12)
    assert m2 == pytest.approx(4 * first[1], rel=1e-12)
    assert m4 == pytest.approx(16 * first[2], rel=1e-12)
