"""prepare_heatmap on extreme input: layers stored out of order with a layer range, a diverging scale in
decades far from 1 (the centre's square under- or overflows), a typed limit at or below 0 on a log scale."""

import math

import numpy as np
import pytest
import xarray as xr

from toolkit.plot import prepare_heatmap
from toolkit.plot._style import symmetric_limits


def _ds(values, layers=None):
    values = np.asarray(values, dtype=float)
    layers = list(range(values.shape[0])) if layers is None else layers
    return xr.Dataset({"m": (("layer", "component"), values)},
                      coords={"layer": layers, "component": [f"c{j}" for j in range(values.shape[1])]})


def test_a_layer_range_over_layers_stored_out_of_order_keeps_every_layer_in_it():
    values = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    ds = _ds(values, layers=[2, 0, 3, 1])
    q = prepare_heatmap(ds, "m", layers=(1, 3))  # was: "the selection leaves no cell"
    order = np.argsort([2, 0, 3, 1])
    expected = values[order][1:4]  # layers 1, 2, 3
    assert q.rows == (1, 2, 3)
    np.testing.assert_array_equal(q.values, expected)


@pytest.mark.parametrize("exponent", [160.0, -200.0])
def test_a_diverging_scale_in_decades_far_from_1_is_symmetric_and_finite(exponent):
    values = 10.0 ** (exponent + np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 10.0]]))
    q = prepare_heatmap(_ds(values), "m", scale="diverging", robust=False)
    assert q.log and q.center == pytest.approx(float(np.median(values)), rel=1e-12)
    lo, hi, c = math.log10(q.vmin), math.log10(q.vmax), math.log10(q.center)
    assert all(math.isfinite(x) for x in (lo, hi, c))  # was vmin = inf (1e160) or vmax = 0 (1e-200)
    # the same number of decades on both sides; the wider side (up to the maximum) sets it
    assert hi - c == pytest.approx(c - lo, abs=1e-9)
    assert q.vmax == values.max() and q.vmin <= values.min()
    assert all(math.isfinite(t) and q.vmin * (1 - 1e-12) <= t <= q.vmax * (1 + 1e-12) for t in q.cbar_ticks)


def test_symmetric_limits_in_decades_keep_the_far_end_exact():
    lo, hi = symmetric_limits(1e-300, 1e-290, 1e-299, log=True)
    assert hi == 1e-290 and lo > 0 and math.log10(lo) == pytest.approx(2 * -299 - -290, abs=1e-9)  # was 0


@pytest.mark.parametrize("vmin", [0.0, -0.0, -1.0])
def test_a_typed_limit_at_or_below_0_on_a_log_scale_says_so(vmin):
    values = np.array([[1.0, 10.0], [100.0, 1000.0]])
    with pytest.raises(ValueError, match="log scale needs positive colour limits"):  # was "math domain error"
        prepare_heatmap(_ds(values), "m", scale="log", vmin=vmin, vmax=500.0)


def test_a_metric_undefined_in_every_cell_draws_its_hatched_panel_on_a_log_scale_too():
    import matplotlib.pyplot as plt

    from toolkit.plot import heatmap

    ds = _ds(np.full((2, 3), np.nan))
    q = prepare_heatmap(ds, "m", scale="log")
    assert q.caption == "m is undefined in every cell" and 0 < q.vmin < q.vmax
    assert np.asarray(q.face_colors()).shape[:2] == (2, 3)  # was ValueError: Invalid vmin or vmax (LogNorm)
    ax = heatmap(ds, "m", scale="log")  # the figure too
    plt.close(ax.figure)
