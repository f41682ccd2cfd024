"""Properties of the metrics over random shapes and values (hypothesis)."""

import math

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from toolkit.metrics import compute_weight_metrics
from toolkit.metrics.diff import compute_diff_metrics

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)
any_float = st.floats(allow_nan=True, allow_infinity=True, width=32)
# Zero or at least 2^-100 (8e-31) in magnitude: scaled by 1e-2..1e2 these stay normal float32 numbers, so scaling
# is exact up to rounding (a subnormal such as 1.4e-45 * 0.5 rounds to 0 and the ranks change for real).
scalable = st.one_of(st.just(0.0), st.floats(2.0**-100, 1e3, width=32), st.floats(-1e3, -(2.0**-100), width=32))


@st.composite
def matrices(draw, elements=finite):
    m = draw(st.integers(1, 24))
    n = draw(st.integers(1, 24))
    return torch.from_numpy(draw(arrays(np.float32, (m, n), elements=elements)))


def _vals(w):
    return {k: v.value for k, v in compute_weight_metrics(w).items()}


def _close(a, b, rel=1e-3):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-6)


@SETTINGS
@given(matrices(elements=any_float))
def test_no_metric_raises_on_any_values(w):
    out = compute_weight_metrics(w)
    for name, mv in out.items():
        assert isinstance(mv.value, float)
        if math.isnan(mv.value):
            assert mv.reason, name


@SETTINGS
@given(matrices())
def test_rank_bounds(w):
    v = _vals(w)
    rank = np.linalg.matrix_rank(w.double().numpy())
    if rank == 0:
        return
    assert 1 - 1e-6 <= v["stable_rank"] <= rank * (1 + 1e-6) + 1e-6
    assert 1 - 1e-6 <= v["effective_rank"] <= min(w.shape) * (1 + 1e-6)


@SETTINGS
@given(matrices())
def test_invariant_to_transposition(w):
    a, b = _vals(w), _vals(w.T.contiguous())
    names = ["frobenius_norm", "rms", "spectral_norm", "stable_rank", "effective_rank", "kurtosis", "max_abs_over_rms"]
    for name in names:
        assert _close(a[name], b[name]), (name, a[name], b[name])


@SETTINGS
@given(matrices(elements=scalable), st.floats(1e-2, 1e2))
def test_ranks_invariant_to_scaling(w, c):
    a, b = _vals(w), _vals(w * c)
    for name in ["stable_rank", "effective_rank"]:
        assert _close(a[name], b[name], rel=1e-3), (name, a[name], b[name])


@SETTINGS
@given(matrices())
def test_relative_change_with_itself_is_zero(w):
    d = compute_diff_metrics(w, w.clone(), ["relative_change", "update_sparsity"])
    if float(w.norm()) > 0:
        assert d["relative_change"].value == 0.0
    assert d["update_sparsity"].value == 1.0


@SETTINGS
@given(matrices(), matrices())
def test_update_sparsity_in_unit_interval(a, b):
    if a.shape != b.shape:
        b = torch.zeros_like(a) + b.flatten()[0]
    d = compute_diff_metrics(a, b, ["update_sparsity", "update_density"])
    s, dn = d["update_sparsity"].value, d["update_density"].value
    assert 0.0 <= s <= 1.0
    assert math.isclose(s + dn, 1.0)
