"""The cross-run table and figure of notebook 04's "What sets the level of each curve"."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from test_lab_plot import LABELS, make_lab  # noqa: E402

from toolkit.errors import EmptyInputError  # noqa: E402
from toolkit.plot.lab_levels import COLUMNS, level_table, levels_figure  # noqa: E402


def _runs():
    small, big = make_lab(epochs=6), make_lab(epochs=6, done=3)
    big.attrs["num_tokens"] = 65
    for k in ("score_mean_abs", "score_p99_abs", "score_fraction_above_1"):  # layer l: 0.1 * (l + 1)
        big[k] = big["attention_norm"] * 0 + 0.1 * (big["layer"] + 1)
    return {"N = 17": small, "N = 65": big}


def test_level_table_by_hand():
    t = level_table(_runs())
    assert list(t.columns) == list(COLUMNS) and len(t) == 10
    assert t.index.get_level_values("activation").tolist() == LABELS * 2
    assert (t["epoch"] == 3).all()  # the last epoch both runs completed
    # norm = (1 + a) 10^(e/6) (1 + l/10) (1 + 0.01 h): mean over heads 1.015, over layers 1.55
    for a, label in enumerate(LABELS):
        row = t.loc[("N = 65", label)]
        assert row["N"] == 65 and row["sqrt_N"] == pytest.approx(math.sqrt(65))
        assert row["attention_norm"] == pytest.approx((1 + a) * 10 ** 0.5 * 1.55 * 1.015)
        assert row["attention_norm_max"] == pytest.approx((1 + a) * 10 ** 0.5 * 2.1 * 1.03 * 1.1)  # up to epoch 3
        assert row["score_fraction_above_1"] == pytest.approx(0.65)  # mean of 0.1 .. 1.2
    assert t.loc[("N = 17", "softmax"), "sqrt_N"] == pytest.approx(math.sqrt(17))
    assert np.isnan(t.loc[("N = 17", "x/1"), "score_mean_abs"])  # that run has no score statistics
    assert level_table(_runs(), epoch=1)["epoch"].eq(1).all()
    with pytest.raises(EmptyInputError, match="0..3"):
        level_table(_runs(), epoch=5)
    with pytest.raises(EmptyInputError):
        level_table({})


def test_levels_figure_draws_the_table():
    t = level_table(_runs())
    fig = levels_figure(t)
    try:
        (ax,) = fig.axes
        lines = {line.get_label(): line for line in ax.get_lines()}
        np.testing.assert_allclose(lines["x³/1"].get_ydata(), t.xs("x³/1", level="activation")["attention_norm"])
        np.testing.assert_allclose(lines["softmax, largest single image"].get_ydata(),
                                   t.xs("softmax", level="activation")["attention_norm_max"])
        assert ax.get_yscale() == "log" and [x.get_text() for x in ax.get_xticklabels()] == [
            "N = 17\n(√N = 4.12)", "N = 65\n(√N = 8.06)"]
        assert "epoch 3" in ax.get_title()
    finally:
        plt.close(fig)


def test_score_scale_panels_mark_where_a_cube_equals_x():
    from toolkit.plot.layer_grid_figure import prepare_layer_grid

    big = _runs()["N = 65"]
    d = prepare_layer_grid(big, "score_p99_abs")
    assert d.log and d.bound == 1.0 and d.bound_label == "|S| = 1 (x³ = x)"
    np.testing.assert_allclose(d.values[4, 0, :4], 0.5)  # layer 4: 0.1 * 5, recorded epochs
    assert np.isnan(d.values[:, :, 4:]).all()  # epochs the run has not reached
    f = prepare_layer_grid(big, "score_fraction_above_1")
    assert not f.log and f.bound is None
    n = prepare_layer_grid(big, "attention_norm")
    assert n.bound == pytest.approx(math.sqrt(65)) and n.bound_label == "√N = 8.06"
