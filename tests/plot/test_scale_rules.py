"""The display rules on numbers (issue 45): domain, limits, bounded diverging scales, constant panels, what a
centre is the centre of, ticks; and the figures, the explorer and the page taking them from one place."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from _stats_data import make_stats  # noqa: E402
from toolkit.plot import heatmaps, prepare_heatmap  # noqa: E402
from toolkit.plot.panel_scale import panel_scale  # noqa: E402
from toolkit.plot.scale_rules import (  # noqa: E402
    bounded_diverging,
    centre_text,
    colorbar_ticks,
    colour_span,
    constant_limits,
    data_limits,
    domain,
    holding,
    pooled_centre_of,
    symmetric_limits,
)
from toolkit.plot.scales import shared_scale  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_domain_of_built_in_metrics_and_cf_attrs():
    assert domain("update_sparsity") == (0.0, 1.0) == domain("subspace_overlap") == domain("update_density")
    assert domain("condition_number") == (1.0, math.inf)
    assert domain("frobenius_norm") == (0.0, math.inf)
    assert domain("my_metric") == (-math.inf, math.inf)
    assert domain("my_metric", {"valid_range": [2, 3]}) == (2.0, 3.0)
    assert domain("condition_number", {"valid_min": 0.0}) == (0.0, math.inf)  # the attrs win
    assert holding((1.0, math.inf), [0.5, 3.0, np.nan]) == (0.5, math.inf)  # never hides a value


def test_data_limits_robust_and_plain():
    v = np.arange(101, dtype=float)  # percentiles 2 and 98 of 0..100 are 2 and 98
    assert data_limits(v) == (2.0, 98.0)
    assert data_limits(v, robust=False) == (0.0, 100.0)
    assert data_limits([-1.0, 0.0, 4.0, np.inf], robust=False, positive=True) == (4.0, 4.0)


def test_symmetric_limits_by_hand():
    assert symmetric_limits(0.5, 3.0, 1.0) == (-1.0, 3.0)  # 2 above: 2 below
    assert symmetric_limits(-4.0, 1.0, 0.0) == (-4.0, 4.0)
    assert symmetric_limits(2.0, 1000.0, 10.0, log=True) == pytest.approx((0.1, 1000.0))  # 2 decades each side


def test_a_diverging_bar_stops_at_the_metric_bound_and_keeps_one_slope():
    # a ratio 0.5 .. 3 around 1 would run to -1; it stops at 0, half of the way down to -1:
    # the map's ends lie 2 from the centre, so 0 is at 0.5 - 1 / 4 = 0.25 of the map
    assert bounded_diverging(0.5, 3.0, 1.0, (0.0, math.inf)) == (0.0, 3.0, (0.25, 1.0))
    assert bounded_diverging(0.5, 3.0, 1.0) == (-1.0, 3.0, (0.0, 1.0))  # unbounded: the whole map
    # a condition number 4.3 .. 84,700 around 21.8: 3.589 decades above, so down to 0.00561; cut at 1
    lo, hi, span = bounded_diverging(4.3, 84_700.0, 21.8, (1.0, math.inf), log=True)
    half = math.log10(84_700 / 21.8)
    assert (lo, hi) == (1.0, 84_700.0) and span == pytest.approx((0.5 - math.log10(21.8) / (2 * half), 1.0))
    assert span[0] == pytest.approx(0.3135, abs=1e-4)
    # an overlap 0.2 .. 0.9 around 0.8 would reach 1.4 above 1: cut at 1, 0.2 of the 0.6 half above 0.8
    lo, hi, span = bounded_diverging(0.2, 0.9, 0.8, (0.0, 1.0))
    assert (lo, hi) == (0.2, 1.0) and span == pytest.approx((0.0, 0.5 + 0.2 / 1.2))
    assert colour_span(0.0, 2.0, 1.0, 2.0) == (0.25, 0.75)


def test_a_constant_panel_is_one_colour_with_no_made_up_range():
    assert constant_limits(1.0, "sequential") == (1.0, 1.0, (0.0, 0.0))  # never [1.0, 1.1] for a fraction
    assert constant_limits(0.0, "diverging") == (0.0, 0.0, (0.5, 0.5))
    s = panel_scale(np.ones((3, 2)), metric="update_sparsity")
    assert (s.vmin, s.vmax, s.ticks, s.caption) == (1.0, 1.0, (1.0,), "constant: 1")


def test_centre_text_says_what_white_is_the_centre_of():
    assert pooled_centre_of(3) == "median of 3 panels pooled"
    assert pooled_centre_of(3, ["step 0", "step 2", "step 4"]) == "median of step 0, step 2, step 4 pooled"
    assert centre_text(0.7719, of="median of step 0, step 2, step 4 pooled") == \
        "white = 0.772 (median of step 0, step 2, step 4 pooled)"
    assert centre_text(0.671, of="median") == "white = median 0.671"
    assert centre_text(1.0) == "white = 1"
    assert centre_text(21.8, of="median", log=True) == "white = median 21.8, log scale"


def test_colorbar_ticks_by_hand():
    assert colorbar_ticks("diverging", 0.0, 2.0, 1.0) == (0.0, 0.5, 1.0, 1.5, 2.0)
    assert colorbar_ticks("diverging", 1.0, 100.0, 10.0, log=True) == pytest.approx((1.0, 10 ** 0.5, 10.0,
                                                                                      10 ** 1.5, 100.0))
    assert colorbar_ticks("log", 1.0, 1000.0, None) == (1.0, 10.0, 100.0, 1000.0)


def test_panel_scale_of_a_fraction_around_its_median_stops_at_one():
    v = np.array([[0.2, 0.8], [0.8, 0.9]])  # median 0.8; 0.6 below it, so symmetric would reach 1.4
    s = panel_scale(v, metric="update_sparsity", scale="diverging", robust=False)
    assert (s.vmin, s.vmax, s.center) == (pytest.approx(0.2), 1.0, 0.8)
    assert s.span == pytest.approx((0.0, 0.5 + 0.2 / 1.2))
    assert s.ticks == pytest.approx((0.2, 0.5, 0.8, 0.9, 1.0))
    assert s.text == "white = median 0.8"


def _sparsity_series():
    """Update sparsity of a series: step 0 all 1 (no update yet), steps 2 and 4 lower (issue 45, item 1)."""
    ds = make_stats(4, checkpoints=3)
    ds = ds.assign_coords(checkpoint=np.arange(3), step=("checkpoint", [0, 2, 4]))
    values = np.stack([np.ones((4, 7)), np.full((4, 7), 0.8), np.full((4, 7), 0.6)])
    values[2, 0, :] = 0.5  # step 4: median 0.6
    ds["update_sparsity"] = (("checkpoint", "layer", "component"), values, {"long_name": "update sparsity"})
    return ds


def test_panels_on_one_scale_say_their_centre_is_pooled_and_over_what():
    ds = _sparsity_series()
    pooled = float(np.median(ds["update_sparsity"].values))  # 0.8: pulled up by step 0's ones
    fig = heatmaps(ds, "update_sparsity", center="median")
    label = fig.axes[-1].get_ylabel()
    assert f"white = {pooled:g} (median of step 0, step 2, step 4 pooled)" in label
    assert "median of this panel: 0.6" in fig.axes[2].get_xlabel()  # step 4's own, under its panel
    one = shared_scale([ds["update_sparsity"].sel(checkpoint=i).values for i in range(3)], center="median")
    assert one.center_of == "median of 3 panels pooled" and one.center == pooled
    p = prepare_heatmap(ds, "update_sparsity", checkpoint=2, **one.keywords())
    assert p.cbar_label.endswith("white = 0.8 (median of 3 panels pooled)")
    assert p.vmax == 1.0  # 0.8 + (0.8 - 0.5) would pass a fraction's maximum
    alone = prepare_heatmap(ds, "update_sparsity", checkpoint=2, center="median")
    assert alone.cbar_label.endswith("white = median 0.6") and "median of this panel" not in alone.caption


def test_a_natural_centre_is_not_called_pooled():
    one = shared_scale([np.array([0.5, 2.0]), np.array([1.5, 3.0])], attrs={"natural_center": 1.0})
    assert one.center == 1.0 and one.center_of == ""


def test_panels_of_one_value_everywhere_share_no_made_up_range():
    """A series whose update sparsity is 1 in every panel: no [0.95, 1.05] band across a fraction's maximum."""
    ds = _sparsity_series()
    ds["update_sparsity"][:] = 1.0
    one = shared_scale([ds["update_sparsity"].sel(checkpoint=i).values for i in range(3)])
    assert "vmin" not in one.keywords() and "vmax" not in one.keywords()
    p = prepare_heatmap(ds, "update_sparsity", checkpoint=1, **one.keywords())
    assert (p.vmin, p.vmax, p.constant, p.caption) == (1.0, 1.0, 1.0, "constant: 1")
