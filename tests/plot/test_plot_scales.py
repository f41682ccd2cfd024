"""Honest colour by default: which scale a heatmap gets, what its colorbar says, one norm when shared."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from _stats_data import make_stats  # noqa: E402
from toolkit.plot import heatmap, heatmaps, prepare_heatmap  # noqa: E402
from toolkit.plot.scales import resolve_scale, shared_scale  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def heavy_tailed(n_layers=30, seed=0):
    """A condition-number-like metric: most cells near 20-200, a tail up to 84,700 (issue 27's numbers)."""
    ds = make_stats(n_layers, seed=seed)
    rng = np.random.default_rng(seed)
    values = 21.8 * 10 ** rng.uniform(0, 1, (n_layers, 7))
    values[rng.random((n_layers, 7)) < 0.15] *= 100
    values[0, 0], values[1, 1] = 84_700.0, 21.8
    ds["condition_number"] = (("layer", "component"), values, {"long_name": "Condition number", "units": "1"})
    return ds


def test_a_metric_spanning_decades_defaults_to_log():
    ds = heavy_tailed()
    p = prepare_heatmap(ds, "condition_number")
    assert p.scale == "log" and p.center is None
    assert p.cbar_label.endswith("log scale")
    new = p.norm()
    assert new(2000.0) - new(166.0) > 0.2  # on the log scale they are far apart


def test_diverging_is_one_scale_both_sides_of_its_centre_in_decades_for_a_log_metric():
    """Issue 36, item 2: white = 21.8 with 4.3-21.8 below and 21.8-84,700 above was a two-slope linear
    scale (cells at 100-1000 white, 5-13 deep blue). Now one slope in decades, symmetric about the centre."""
    ds = heavy_tailed()
    ds["condition_number"][2, 2] = 4.3
    p = prepare_heatmap(ds, "condition_number", scale="diverging", robust=False)
    median = float(np.median(ds["condition_number"].values))
    assert p.log and p.center == pytest.approx(median)
    # symmetric in decades about the median (84,700 / median decades each side), but the bar stops at 1
    # (issue 45, item 2: it ran down to median ** 2 / 84,700, below any condition number): the colour map is
    # cut there, at 0.5 - log10(median) / (2 * log10(84,700 / median)) of it
    half = np.log10(84_700.0 / median)
    assert p.vmax == pytest.approx(84_700.0) and p.vmin == 1.0
    assert p.span == pytest.approx((0.5 - np.log10(median) / (2 * half), 1.0))
    norm = p.norm()

    def position(x):  # where x sits on the whole blue-white-orange map
        return p.span[0] + norm(x) * (p.span[1] - p.span[0])

    assert position(median) == pytest.approx(0.5)
    for k in (2.0, 10.0, 100.0):  # k times the centre is as orange as the centre / k is blue
        assert position(median * k) - 0.5 == pytest.approx(0.5 - position(median / k))
    assert position(500.0) > 0.6  # cells at 100-1000 are no longer drawn white
    assert "log scale" in p.cbar_label and "white = median" in p.cbar_label
    rgba = p.face_colors()
    assert tuple(rgba[0, 0, :3]) == pytest.approx(matplotlib.colors.to_rgb("#b34d00"))  # 84,700: the darkest orange


def test_linear_diverging_spans_the_same_distance_below_and_above():
    """The published look (centre = median) of a skewed metric: one shade of blue is as far from the
    centre as the same shade of orange, so the short side does not use every blue."""
    ds = make_stats(12)
    values = ds["stable_rank"].values.copy()
    values[0, 0] = 0.5  # one high outlier: far above, little below
    ds["stable_rank"].values = values
    p = prepare_heatmap(ds, "stable_rank", center="median", robust=False)
    assert not p.log and p.center == pytest.approx(float(np.median(values)))
    # 0.5 - median on both sides would reach below 0, which a stable rank never is: the bar stops at 0
    assert p.vmax == pytest.approx(0.5) and p.vmin == 0.0
    assert p.span == pytest.approx((0.5 - p.center / (2 * (0.5 - p.center)), 1.0))
    norm = p.norm()

    def position(x):
        return p.span[0] + norm(x) * (p.span[1] - p.span[0])

    assert position(p.center + 0.01) - 0.5 == pytest.approx(0.5 - position(p.center - 0.01))
    assert p.cbar_ticks[2] == pytest.approx(p.center)
    # a typed limit keeps the centre white: the range is widened to the same distance on the other side
    q = prepare_heatmap(ds, "stable_rank", center=0.09, vmin=0.08, vmax=0.095)
    assert (q.vmin, q.vmax, q.center) == pytest.approx((0.08, 0.10, 0.09))
    shared = shared_scale([values, values * 2], scale="diverging", robust=False)
    assert shared.vmax - shared.center == pytest.approx(shared.center - shared.vmin)


def test_narrow_or_signed_ranges_stay_linear_and_sequential():
    ds = make_stats(12)  # 0.075 .. 0.105
    assert resolve_scale(ds["stable_rank"].values) == ("sequential", None)
    signed = np.array([-3.0, 0.5, 2000.0])  # decades, but not all positive: no log
    assert resolve_scale(signed) == ("sequential", None)
    p = prepare_heatmap(ds, "stable_rank")
    assert p.scale == "sequential" and p.cbar_label.endswith("linear scale")


def test_diverging_only_around_a_natural_or_asked_centre():
    ds = make_stats(12)
    ds["stable_rank_difference"] = ds["stable_rank"] - 0.09
    ds["stable_rank_difference"].attrs.update(long_name="Stable rank (target − base)", natural_center=0.0)
    p = prepare_heatmap(ds, "stable_rank_difference")
    assert p.scale == "diverging" and p.center == 0.0 and p.cbar_label.endswith("white = 0")
    assert p.norm()(0.0) == pytest.approx(0.5)
    median = prepare_heatmap(ds, "stable_rank", center="median")  # one argument away: the published look
    assert median.scale == "diverging"
    assert median.center == pytest.approx(np.median(ds["stable_rank"].values))
    assert "white = median" in median.cbar_label
    assert prepare_heatmap(ds, "stable_rank", scale="diverging").cbar_label == median.cbar_label
    assert prepare_heatmap(ds, "stable_rank", scale="sequential", center="median").center is None
    with pytest.raises(ValueError, match="scale"):
        prepare_heatmap(ds, "stable_rank", scale="cubic")


def test_face_colours_are_the_colours_matplotlib_paints():
    for ds, metric, kws in [(heavy_tailed(), "condition_number", {}), (make_stats(12, gate=False), "stable_rank",
                                                                       {"center": "median"})]:
        p = prepare_heatmap(ds, metric, **kws)
        ax = heatmap(ds, metric, **kws)
        mesh = ax.collections[0]
        painted = mesh.to_rgba(mesh.get_array()).reshape(*p.values.shape, 4)
        faces = p.face_colors()
        finite = ~p.nan_mask
        np.testing.assert_allclose(faces[finite], painted[finite])
        assert (faces[~finite][:, 3] == 0).all()  # no value: transparent (drawn hatched)
        bar = p.colorbar()
        assert len(bar["ticks"]) == len(p.cbar_ticks) and bar["label"] == p.cbar_label
        assert all(0.0 <= pos <= 1.0 for pos, _ in bar["ticks"])


def test_a_shared_scale_is_one_norm_with_one_centre():
    a, b = make_stats(12, seed=1), make_stats(12, seed=2)
    b["stable_rank"] = b["stable_rank"] * 0.7  # another median
    one = shared_scale([a["stable_rank"].values, b["stable_rank"].values], center="median")
    pa = prepare_heatmap(a, "stable_rank", **one.keywords())
    pb = prepare_heatmap(b, "stable_rank", **one.keywords())
    assert (pa.scale, pa.vmin, pa.vmax, pa.center) == (pb.scale, pb.vmin, pb.vmax, pb.center)
    pooled = np.concatenate([a["stable_rank"].values.ravel(), b["stable_rank"].values.ravel()])
    assert pa.center == pytest.approx(np.median(pooled))
    value = float(np.median(pooled))
    assert pa.norm()(value) == pb.norm()(value) == pytest.approx(0.5)  # one value, one colour in both
    fig = heatmaps([a, b], "stable_rank", share_scale=True, center="median")
    norms = [ax.collections[0].norm for ax in fig.axes[:2]]
    assert norms[0](value) == norms[1](value) == pytest.approx(0.5)
    assert (norms[0].vmin, norms[0].vmax) == (norms[1].vmin, norms[1].vmax)
