"""Float64 matrices that float32 cannot hold: NaN with the reason, never a cast's Inf or zeros.

The weight metrics read every matrix in float32. A float64 checkpoint's matrix of entries ~1e150 was reported
as "NaN/Inf entries", one of ~1e-150 as an all-zero matrix of Frobenius norm 0 and rank 0 (a wrong number).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import toolkit
from toolkit.metrics.evaluate import evaluate_matrix, float32_range_reason
from toolkit.metrics.registry import resolve_metrics
from toolkit.testing import write_tiny_checkpoint

METRICS = resolve_metrics(None, kind="weight")


def _w(seed=0, shape=(60, 140)):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("scale", [2.0 ** 500, 2.0 ** -500, 1e39, 1e-33])
def test_out_of_range_float64_is_nan_with_the_reason(scale):
    r = evaluate_matrix(_w() * scale, METRICS)
    assert all(math.isnan(v) for v in r.values.values())
    assert r.reasons.keys() == r.values.keys()
    assert all("float64 entries of largest magnitude" in why and "power of two" in why for why in r.reasons.values())


def test_in_range_float64_is_measured_as_its_float32_cast():
    # one entry far below the rest (below float32's rounding of the largest) does not refuse the matrix
    w = _w(1)
    w[3, 4] = 1e-45
    assert float32_range_reason(w) == ""
    got = evaluate_matrix(w, METRICS).values
    want = evaluate_matrix(w.to(torch.float32), METRICS).values
    assert got.keys() == want.keys()
    for name in got:
        assert got[name] == want[name] or (math.isnan(got[name]) and math.isnan(want[name])), name


def test_the_range_rule_by_hand():
    assert float32_range_reason(torch.tensor([1.0, 3.5e38], dtype=torch.float64))
    assert float32_range_reason(torch.tensor([1e-32, 0.0], dtype=torch.float64))
    assert not float32_range_reason(torch.tensor([1e-30, 0.0, 1e-50], dtype=torch.float64))
    assert not float32_range_reason(torch.tensor([math.inf, math.nan, 1.0], dtype=torch.float64))  # the NaN check's
    assert not float32_range_reason(torch.zeros(3, dtype=torch.float64))  # all zero: the metrics say so
    assert not float32_range_reason(torch.full((2,), 1e30, dtype=torch.float32) * 1e8)  # not float64


def test_a_float64_checkpoint_with_one_matrix_out_of_range(tmp_path):
    folder = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2, dtype=torch.float64)
    file = next(folder.glob("*.safetensors"))
    tensors = load_file(file)
    name = next(n for n in tensors if n.endswith("layers.1.self_attn.q_proj.weight"))
    tensors[name] = tensors[name] * 2.0 ** 600
    save_file(tensors, file, metadata={"format": "pt"})
    ds = toolkit.weight_stats(str(folder), progress=False, cache=False)
    cell = dict(layer=1, component="attn.q")
    assert np.isnan(float(ds.frobenius_norm.sel(**cell))) and np.isnan(float(ds.alpha.sel(**cell)))
    assert "float64 entries of largest magnitude" in str(ds.nan_reason.sel(**cell).values)
    other = dict(layer=0, component="attn.q")
    w0 = tensors[next(n for n in tensors if n.endswith("layers.0.self_attn.q_proj.weight"))]
    assert float(ds.frobenius_norm.sel(**other)) == pytest.approx(float(torch.linalg.norm(w0)), rel=1e-6)


@pytest.mark.parametrize("e", [-1000, -500, 0, 600, 1000])
def test_the_entry_wise_metrics_of_float64_at_any_scale(e):
    # the entry-wise metrics read float64 as stored: the Frobenius norm and RMS equal NumPy's of the unscaled
    # matrix times 2^e (the squares overflowed past ~1e154: NaN "undefined"; underflowed below ~1e-154: 0);
    # kurtosis, whose fourth moments cannot be held, says which way they left float64's range
    entrywise = [m for m in METRICS if m.any_dtype]
    w = _w(2)
    r = evaluate_matrix(w * 2.0 ** e, entrywise)
    want = float(np.linalg.norm(w.numpy()))
    assert r.values["frobenius_norm"] == pytest.approx(math.ldexp(want, e), rel=1e-12)
    assert r.values["rms"] == pytest.approx(math.ldexp(want / math.sqrt(w.numel()), e), rel=1e-12)
    plain = evaluate_matrix(w, entrywise).values
    assert r.values["max_abs_over_rms"] == pytest.approx(plain["max_abs_over_rms"], rel=1e-12)
    if abs(e) >= 500:
        assert math.isnan(r.values["kurtosis"])
        assert r.reasons["kurtosis"].startswith("entries too " + ("large" if e > 0 else "small"))
    else:
        assert r.values["kurtosis"] == pytest.approx(plain["kurtosis"], rel=1e-12)
