"""Near-constant panels never pass for structure (issue 36, items 1 and 5): labels carry the digits that
tell the values apart, the figure says how tight the values are, a constant panel is one pale colour."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from _stats_data import make_stats  # noqa: E402
from toolkit.plot import heatmap, prepare_heatmap  # noqa: E402
from toolkit.plot._style import SEQUENTIAL_COLORS  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def rms_like(n_layers=8, seed=0):
    """RMS of a random 7B-shaped checkpoint: every cell 0.0200 within 0.1 %."""
    ds = make_stats(n_layers, seed=seed)
    rng = np.random.default_rng(seed)
    ds["rms"] = (("layer", "component"), 0.02 * (1 + rng.uniform(-5e-4, 5e-4, (n_layers, 7))),
                 {"long_name": "RMS of the entries", "units": "1"})
    ds["frobenius_norm"] = (("layer", "component"), rng.uniform(27.094, 27.098, (n_layers, 7)),
                            {"long_name": "Frobenius norm", "units": "1"})
    return ds


@pytest.mark.parametrize("metric", ["rms", "frobenius_norm"])
def test_ticks_and_cells_of_a_near_constant_panel_tell_values_apart(metric):
    ds = rms_like()
    p = prepare_heatmap(ds, metric)
    labels = p.tick_labels()
    assert len(set(labels)) == len(labels) >= 3  # were "0.02 0.02 0.02" and "27.1 27.1 27.1"
    v = np.unique(p.values)
    spread = v.max() - v.min()
    text = {x: p.format(x) for x in v}
    assert all(abs(float(text[x]) - x) <= spread / 40 for x in v)  # hover and cell labels: a 20th of the spread
    apart = [(a, b) for a in v for b in v if b - a > spread / 20]
    assert apart and all(text[a] != text[b] for a, b in apart)
    ax = heatmap(ds, metric)
    drawn = [t.get_text() for t in ax.figure.axes[-1].get_yticklabels()]
    assert drawn == labels
    assert p.caption.startswith("all within ") and p.caption in ax.get_xlabel()


def test_a_near_constant_panel_says_so_on_the_figure():
    p = prepare_heatmap(rms_like(), "rms")
    assert p.caption == "all within 0.06 % of 0.02"
    assert p.caption in p.notes
    assert p.constant is None
    ordinary = prepare_heatmap(make_stats(8), "stable_rank")  # 0.075 .. 0.105: real contrast, no note
    assert ordinary.caption == "" and ordinary.digits == 3


def test_rank_loss_all_zero_is_not_painted_mid_orange():
    ds = make_stats(6)
    ds["rank_loss"] = (("layer", "component"), np.zeros((6, 7)), {"long_name": "Rank loss", "units": "1"})
    p = prepare_heatmap(ds, "rank_loss")
    assert p.constant == 0.0 and p.caption == "constant: 0"
    faces = p.face_colors()[..., :3].reshape(-1, 3)
    assert np.allclose(faces, matplotlib.colors.to_rgb(SEQUENTIAL_COLORS[0]), atol=1 / 255)  # the palest colour
    assert p.tick_labels() == ["0"]


@pytest.mark.parametrize("units", ["1", "1 ", "[1]", "dimensionless"])
def test_dimensionless_units_print_no_brackets(units):
    ds = make_stats(4)
    ds["stable_rank"].attrs["units"] = units
    p = prepare_heatmap(ds, "stable_rank")
    assert "[1]" not in p.cbar_label and "(dimensionless)" in p.cbar_label
    ds["stable_rank"].attrs["units"] = "nat"
    assert "[nat]" in prepare_heatmap(ds, "stable_rank").cbar_label


def test_panels_on_one_scale_print_one_value_alike():
    ds = make_stats(6, checkpoints=3)
    from toolkit.plot.scales import shared_scale

    one = shared_scale([ds["stable_rank"].sel(checkpoint=c).values for c in ds.checkpoint.values])
    prepared = [prepare_heatmap(ds, "stable_rank", checkpoint=c, **one.keywords()) for c in ds.checkpoint.values]
    assert {p.digits for p in prepared} == {one.digits}
    assert len({p.cbar_label for p in prepared}) == 1 and len({tuple(p.tick_labels()) for p in prepared}) == 1
