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
    # the old default hid the structure: the median white, the upper half of the bar over three decades
    old = prepare_heatmap(ds, "condition_number", center="median", robust=False)
    norm = old.norm()
    assert norm(166.0) < 0.55 and norm(2000.0) < 0.6  # 166 and 2000 both look like the median
    new = p.norm()
    assert new(2000.0) - new(166.0) > 0.2  # on the log scale they are far apart


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
    assert norms[0].vcenter == norms[1].vcenter == pytest.approx(np.median(pooled))
    assert (norms[0].vmin, norms[0].vmax) == (norms[1].vmin, norms[1].vmax)
