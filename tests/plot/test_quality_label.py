"""The ``quality`` coordinate of ``weight_stats``: WeightWatcher's over/under-trained label per cell."""

from __future__ import annotations

import numpy as np
import pytest

import toolkit
from toolkit.testing import write_tiny_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("q") / "m", "bert", num_layers=2, seed=14)


def test_quality_follows_alpha_and_the_thresholds(ckpt, tmp_path):
    ds = toolkit.weight_stats(ckpt, ["alpha"], progress=False, cache=False)
    alpha = ds.alpha.values
    finite = alpha[np.isfinite(alpha)]
    over, under = float(np.quantile(finite, 0.3)), float(np.quantile(finite, 0.7))
    ds = toolkit.weight_stats(ckpt, ["alpha"], progress=False, cache=False, quality_thresholds=(over, under))
    q = ds.quality.values
    for a, label, n in zip(alpha.ravel(), q.ravel(), ds.n_rows.values.ravel(), strict=True):
        if n == 0:
            assert label == "not fitted: no such matrix in this model"  # BERT has no gate
        elif not np.isfinite(a):
            assert label.startswith("not fitted")
        else:
            assert label == ("over-trained" if a < over else "under-trained" if a > under else "ok")
    assert {"over-trained", "ok", "under-trained"} <= set(q.ravel())
    assert ds.quality.attrs["over_trained_below"] == over and ds.quality.attrs["under_trained_above"] == under
    toolkit.save(ds, tmp_path / "q.nc")
    np.testing.assert_array_equal(toolkit.load(tmp_path / "q.nc").quality.values, q)


def test_no_alpha_no_quality_and_bad_thresholds_are_refused(ckpt):
    assert "quality" not in toolkit.weight_stats(ckpt, ["frobenius_norm"], progress=False, cache=False).coords
    for bad in [(6, 2), (float("nan"), 6), "ab", (1,)]:
        with pytest.raises(toolkit.ToolkitError, match="quality_thresholds"):
            toolkit.weight_stats(ckpt, ["alpha"], progress=False, cache=False, quality_thresholds=bad)
