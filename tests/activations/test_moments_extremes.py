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
