"""Moments on non-finite and extreme values: NaN and inf propagate as NumPy's float64 reductions do, and
values past 1e77 give inf, not an OverflowError."""

import math

import numpy as np
import pytest
import torch

from toolkit.activations.hooks import Moments


def _moments(*batches) -> Moments:
    m = Moments()
    for b in batches:
        m.add(b.clone())
    return m


@pytest.mark.parametrize("where", ["first", "later"])
def test_a_nan_activation_makes_max_abs_nan_as_numpy_does(where):
    g = torch.Generator().manual_seed(1)
    clean = torch.randn(5, 4, generator=g)
    bad = torch.tensor([[math.nan, 1.0, -2.0, 3.0]])
    batches = (bad, clean) if where == "first" else (clean, bad)
    m = _moments(*batches)
    ref = np.abs(np.concatenate([b.double().numpy().ravel() for b in batches])).max()
    assert math.isnan(ref)
    assert math.isnan(m.max_abs) and math.isnan(m.mean)  # was the largest finite |x|, while the mean was NaN
    m.add(clean)  # stays NaN after later finite batches
    assert math.isnan(m.max_abs)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("first", [False, True])
def test_an_infinite_activation_makes_rms_inf_as_numpy_does(sign, first):
    g = torch.Generator().manual_seed(2)
    batches = (torch.randn(6, 4, generator=g) * sign + 0.5 * sign, torch.tensor([[math.inf, 1.0, 2.0, 3.0]]))
    batches = batches[::-1] if first else batches  # first: the centre came out inf and every mean NaN
    x = np.concatenate([b.double().numpy().ravel() for b in batches])
    m = _moments(*batches)
    assert m.rms == np.sqrt((x * x).mean()) == math.inf  # was NaN (inf - inf inside)
    assert m.mean == x.mean() and m.max_abs == np.abs(x).max()


def test_float64_values_past_1e77_give_inf_kurtosis_terms_not_an_overflow_error():
    g = torch.Generator().manual_seed(3)
    base = torch.randn(8, 3, generator=g, dtype=torch.float64)
    m = _moments(base, base * 0 + 1e200)  # the second batch's offset from the centre is 1e200
    x = np.concatenate([base.numpy().ravel(), np.full(base.numel(), 1e200)])
    assert m.mean == pytest.approx(x.mean(), rel=1e-12)
    assert m.max_abs == np.abs(x).max()
    with np.errstate(over="ignore", invalid="ignore"):
        d = x - x.mean()
        ref = (d**4).mean() / (d**2).mean() ** 2 - 3  # overflows in float64 too: inf / inf
    assert math.isnan(ref)
    assert not math.isfinite(m.kurtosis)  # was OverflowError: (34, 'Numerical result out of range')


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kurtosis_of_small_noise_on_a_1e6_offset_matches_numpy_in_float64(dtype):
    g = torch.Generator().manual_seed(4)
    batches = [(1e6 + torch.randn(n, 64, generator=g, dtype=torch.float64) ** 3).to(dtype) for n in (100, 1, 37, 250)]
    m = _moments(*batches)
    x = np.concatenate([b.double().numpy().ravel() for b in batches])  # the values as stored, in float64
    d = x - x.mean()
    ref = (d**4).mean() / (d**2).mean() ** 2 - 3  # heavy-tailed: about 50
    assert ref > 10
    assert m.kurtosis == pytest.approx(ref, rel=1e-5)
    assert m.mean == pytest.approx(x.mean(), rel=1e-12)
    assert m.rms == pytest.approx(np.sqrt((x * x).mean()), rel=1e-12)


@pytest.mark.parametrize("first, rest", [(lambda g: torch.full((1, 64), 1e4),
                                          lambda g: torch.randn(1000, 64, generator=g)),
                                         (lambda g: torch.randn(4, 64, generator=g) + 100,
                                          lambda g: torch.randn(4000, 64, generator=g)),
                                         (lambda g: torch.randn(3, 64, generator=g),
                                          lambda g: 0.01 * torch.randn(2000, 64, generator=g) + 3)])
@pytest.mark.parametrize("owned", [False, True])
def test_a_first_batch_unlike_the_rest_costs_no_precision(first, rest, owned):
    g = torch.Generator().manual_seed(5)
    batches = [first(g), rest(g), rest(g)]
    m = Moments()
    for b in batches:
        m.add(b.clone(), owned=owned)
    x = np.concatenate([b.double().numpy().ravel() for b in batches])
    d = x - x.mean()
    # the centre was the first batch's mean for good: relative errors 1e-5 (mean) to 2e-4 (kurtosis)
    assert m.mean == pytest.approx(x.mean(), rel=1e-7)
    assert m.rms == pytest.approx(np.sqrt((x * x).mean()), rel=1e-7)
    assert m.kurtosis == pytest.approx((d**4).mean() / (d**2).mean() ** 2 - 3, rel=1e-6)
    cols = np.concatenate([b.double().numpy() for b in batches])
    np.testing.assert_allclose(m.feature_sumsq().numpy(), (cols**2).sum(0), rtol=1e-6)


@pytest.mark.parametrize("scale", [1e-20, 1e-12, 1e10])
def test_float32_values_whose_fourth_powers_leave_float32_match_numpy(scale):
    g = torch.Generator().manual_seed(6)
    x32 = torch.randn(500, 64, generator=g) * scale  # (x - c)^4 under- or overflows float32
    m = _moments(x32)
    x = x32.double().numpy().ravel()
    d = x - x.mean()
    assert m.kurtosis == pytest.approx((d**4).mean() / (d**2).mean() ** 2 - 3, rel=1e-5)  # was -3 / inf
    assert m.rms == pytest.approx(np.sqrt((x * x).mean()), rel=1e-6)
    assert m.mean == pytest.approx(x.mean(), rel=1e-5, abs=1e-6 * scale)


def _reference(batches):
    """NumPy's float64 moments of every value (an independent computation)."""
    x = np.concatenate([b.double().numpy().ravel() for b in batches])
    with np.errstate(all="ignore"):
        d = x - x.mean()
        return x.mean(), np.sqrt((x * x).mean()), (d**4).mean() / (d**2).mean() ** 2 - 3, np.abs(x).max()


@pytest.mark.parametrize("second", [False, True])
def test_finite_float32_values_near_the_float32_maximum(second):
    """Issue 42: finite float32 values near 3e38 gave NaN (the first batch's float32 mean overflowed)."""
    g = torch.Generator().manual_seed(4)
    big = (3.0e38 + 2e37 * torch.rand(6, 5, generator=g)).to(torch.float32)
    big[0, :2] = -3.0e38
    batches = (big, torch.randn(3, 5, generator=g)) if second else (big,)
    m = _moments(*batches)
    mean, rms, kurt, top = _reference(batches)
    assert m.mean == pytest.approx(mean, rel=1e-12)
    assert m.rms == pytest.approx(rms, rel=1e-12)
    assert m.kurtosis == pytest.approx(kurt, rel=1e-9)
    assert m.max_abs == top


@pytest.mark.parametrize("order", [1, -1])
def test_plus_and_minus_inf_in_different_batches_give_numpy_rms(order):
    """Issue 42: +inf in one batch and -inf in another gave an RMS of NaN; NumPy gives inf (the mean NaN)."""
    batches = (torch.tensor([[math.inf, 1.0, -2.0]]), torch.tensor([[3.0, -math.inf, 2.0]]))[::order]
    m = _moments(*batches)
    mean, rms, _, top = _reference(batches)
    assert rms == math.inf and m.rms == math.inf
    assert math.isnan(mean) and math.isnan(m.mean)
    assert m.max_abs == top == math.inf
    np.testing.assert_array_equal(m.feature_sumsq().numpy(), [math.inf, math.inf, 8.0])
