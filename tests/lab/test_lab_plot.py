"""The lab's layer grid (prepared data, then the drawn figure) and its widget panel."""

import base64
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from toolkit.errors import EmptyInputError, UnknownMetricError  # noqa: E402
from toolkit.lab.dataset import build_dataset, new_history  # noqa: E402
from toolkit.plot.layer_grid_figure import (  # noqa: E402
    ACTIVATION_COLORS,
    LAYER_NOTE,
    draw_layer_grid,
    layer_grid,
    prepare_layer_grid,
    series_colors,
    training_curves,
)
from toolkit.widgets.lab import lab_explorer  # noqa: E402

LABELS = ["softmax", "x/1", "x/16", "x³/1", "x³/16"]


def make_lab(labels=LABELS, epochs=6, depth=12, heads=4, done=None):
    """A synthetic lab Dataset: norm = (1 + activation index) * 10**(epoch/epochs) * (1 + layer/10)."""
    rng = np.random.default_rng(0)
    hists = {}
    for a, label in enumerate(labels):
        h = new_history()
        for e in range((done or epochs) + 1):
            norm = (1 + a) * 10 ** (e / epochs) * (1 + np.arange(depth) / 10)
            h["attention_norm_head"].append(np.repeat(norm[:, None], heads, 1) * (1 + 0.01 * np.arange(heads)))
            h["attention_norm_max"].append(h["attention_norm_head"][-1] * 1.1)
            for k in ("train_loss", "test_loss"):
                h[k].append(2.3 * 0.7 ** e)
            for k in ("train_accuracy", "test_accuracy"):
                h[k].append(min(1.0, 0.1 + 0.15 * e + 0.01 * rng.random()))
            h["skipped_steps"].append(0)
            h["epoch_time"].append(float("nan") if e == 0 else 0.5)
        hists[label] = h
    return build_dataset(hists, epochs=epochs, depth=depth, heads=heads, attrs={"num_tokens": 17})


def test_prepared_grid_is_three_by_four_layers_with_one_series_per_activation():
    d = prepare_layer_grid(make_lab(), "attention_norm")
    assert d.values.shape == (12, 5, 7) and (d.nrows, d.ncols) == (3, 4)
    assert d.panel_titles == tuple(f"layer {i}" for i in range(12))  # 0-based, as every figure
    assert d.series == tuple(LABELS) and d.colors == tuple(ACTIVATION_COLORS[a] for a in LABELS)
    assert d.log and d.bound == pytest.approx(math.sqrt(17))
    lo, hi = d.ylim  # whole decades around the data and √N, shared by every panel
    assert lo == 1.0 and hi == 1000.0 and lo <= d.values.min() and d.values.max() <= hi
    np.testing.assert_allclose(d.values[3, 1], 2 * 10 ** (np.arange(7) / 6) * 1.3 * 1.015)  # mean of heads
    np.testing.assert_array_equal(d.x, np.arange(7))


def test_selection_keeps_colours_and_picks_heads_and_layers():
    ds = make_lab(labels=[*LABELS, "x²/4"])
    d = prepare_layer_grid(ds, "attention_norm_head", activations=["x²/4", "x/16"], layers=[0, 11], head=2)
    assert d.series == ("x²/4", "x/16") and d.colors[1] == ACTIVATION_COLORS["x/16"]
    assert d.colors[0] == prepare_layer_grid(ds, activations=["x²/4"]).colors[0]
    assert d.panel_titles == ("layer 0", "layer 11") and (d.nrows, d.ncols) == (1, 2)
    assert d.selection == {"head": 2}
    np.testing.assert_allclose(d.values[1, 1], 3 * 10 ** (np.arange(7) / 6) * 2.1 * 1.02)


def test_run_level_variables_give_one_linear_panel():
    d = prepare_layer_grid(make_lab(), "test_accuracy")
    assert d.values.shape == (1, 5, 7) and d.panel_titles == ("test accuracy",)
    assert not d.log and d.bound is None and d.ylim == (0.0, 1.02)
    assert prepare_layer_grid(make_lab(), "train_loss").log


def test_unfinished_rows_are_gaps_and_bad_requests_are_typed_errors():
    d = prepare_layer_grid(make_lab(done=3), "attention_norm")
    assert np.isnan(d.values[:, :, 4:]).all() and np.isfinite(d.values[:, :, :4]).all()
    ds = make_lab()
    with pytest.raises(UnknownMetricError) as err:
        prepare_layer_grid(ds, "spectral_norm")
    assert "attention_norm" in err.value.known
    with pytest.raises(EmptyInputError):
        prepare_layer_grid(ds, activations=[])
    with pytest.raises(EmptyInputError, match="relu"):
        prepare_layer_grid(ds, activations=["relu"])
    with pytest.raises(EmptyInputError):
        prepare_layer_grid(ds, layers=[])


def test_drawn_grid_shares_limits_log_scale_and_one_legend():
    fig = layer_grid(make_lab(), "attention_norm")
    try:
        axes = [ax for ax in fig.axes if ax.get_visible()]
        assert [ax.get_title() for ax in axes] == [f"layer {i}" for i in range(12)]
        assert fig.get_suptitle() == f"attention norm ({LAYER_NOTE})"
        assert {ax.get_yscale() for ax in axes} == {"log"}
        assert {ax.get_ylim() for ax in axes} == {(1.0, 1000.0)}
        assert all(len(ax.get_lines()) == 6 for ax in axes)  # 5 activations + √N
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == [*LABELS, "√N = 4.12"]
        colors = {ax.get_lines()[1].get_color() for ax in axes}
        assert colors == {ACTIVATION_COLORS["x/1"]}
    finally:
        plt.close(fig)


def test_the_title_of_a_two_layer_grid_stays_inside_the_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from toolkit.widgets.lab import grid_figure

    fig = grid_figure(prepare_layer_grid(make_lab(), "attention_norm", layers=[0, 1]))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = fig._suptitle.get_window_extent(canvas.get_renderer())
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, "the title is clipped"
    assert fig.get_suptitle().replace("\n", " ") == f"attention norm ({LAYER_NOTE})"


def test_a_run_level_variable_is_titled_once():
    fig = layer_grid(make_lab(), "test_accuracy")
    try:
        (ax,) = [a for a in fig.axes if a.get_visible()]
        assert ax.get_title() == "" and fig.get_suptitle() == "test accuracy"
    finally:
        plt.close(fig)


def test_caller_figure_is_used_and_left_open():
    fig = Figure()
    out = draw_layer_grid(prepare_layer_grid(make_lab(), layers=[0, 1, 2, 3, 4]), fig=fig, legend="panel")
    assert out is fig and len(fig.axes) == 8 and sum(ax.get_visible() for ax in fig.axes) == 5
    assert all(ax.get_legend() is not None for ax in fig.axes if ax.get_visible())
    assert plt.get_fignums() == []
    fig = training_curves(make_lab())
    try:
        assert [ax.get_title() for ax in fig.axes] == ["train loss", "test accuracy"]
    finally:
        plt.close(fig)


def _drawn(ex) -> dict:
    """What the browser is given to draw."""
    return ex.chart.spec


def test_widget_panel_redraws_one_chart_per_change():
    ex = lab_explorer(make_lab())
    c = ex.controls
    assert [v for _, v in c["metric"].options][:4] == ["attention_norm", "attention_norm_head", "attention_norm_max",
                                                       "train_loss"]  # no score scale recorded: not offered
    spec = _drawn(ex)
    assert c["scale"].value == "log" and len(spec["panels"]) == 12 and spec["ncols"] == 4
    assert [p["title"] for p in spec["panels"]] == [f"layer {i}" for i in range(12)]
    first = spec["panels"][3]
    assert [s["label"] for s in first["series"]] == [*LABELS, "√N = 4.12"]
    assert first["y"] == {"log": True, "lim": [1.0, 1000.0]}  # the same limits in every panel
    np.testing.assert_allclose([v for v in first["series"][1]["y"]], ex.current.values[3, 1])
    assert spec["title"] == f"attention norm ({LAYER_NOTE})"
    c["activations"].value = ("softmax", "x³/1")
    c["layers"].value = (0, 5, 11)
    assert ex.current.series == ("softmax", "x³/1") and ex.current.panels == (0, 5, 11)
    assert [p["title"] for p in _drawn(ex)["panels"]] == ["layer 0", "layer 5", "layer 11"]
    c["metric"].value = "test_accuracy"
    assert c["scale"].value == "linear" and not ex.current.log and ex.current.values.shape == (1, 2, 7)
    (panel,) = _drawn(ex)["panels"]
    assert panel["title"] == "" and _drawn(ex)["title"] == "test accuracy"  # titled once, not twice
    c["scale"].value = "log"
    assert ex.current.log and _drawn(ex)["panels"][0]["y"]["log"]
    c["activations"].value = ()  # nothing to draw: the message, and no old chart under it
    assert "pick at least one" in ex.status.value
    assert _drawn(ex) == {} and ex.current is None and "image/png" not in ex._repr_mimebundle_()
    c["activations"].value = ("x/16",)
    assert ex.status.value == "" and ex.current.series == ("x/16",) and len(_drawn(ex)["panels"]) == 1
    bundle = ex._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"])[:4] == b"\x89PNG"  # static image for viewers without widgets
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert plt.get_fignums() == []


def test_explorer_labels_are_whole_and_the_head_menu_says_why_it_is_off():
    ex = lab_explorer(make_lab(depth=4))
    c = ex.controls
    for key in ("metric", "activations", "layers", "head"):
        assert c[key].style.description_width == "initial", key  # "layers (from 0)", not "layers (fro…"
    assert c["head"].disabled and [label for label, _ in c["head"].options] == ["— (no heads)"]
    assert c["head"].index == 0 and c["head"].label == "— (no heads)"  # an index: the menu is never blank


def test_explorer_head_selector_draws_the_chosen_head():
    ds = make_lab(depth=4)
    ex = lab_explorer(ds)
    c = ex.controls
    assert c["head"].disabled and c["head"].value is None  # attention_norm has no head dim
    c["metric"].value = "attention_norm_head"
    assert not c["head"].disabled and ex.current.selection == {"head": "mean"}
    assert [label for label, _ in c["head"].options] == ["mean over heads", "max over heads", "head 0", "head 1",
                                                         "head 2", "head 3"]
    np.testing.assert_allclose(ex.current.values[:, 2], ds["attention_norm_head"].sel(activation="x/16")
                               .mean("head").transpose("layer", "epoch").values)
    c["head"].value = 3
    assert ex.current.selection == {"head": 3}
    want = ds["attention_norm_head"].sel(activation="x/16", head=3).transpose("layer", "epoch").values
    np.testing.assert_array_equal(ex.current.values[:, 2], want)  # (1 + 2) * ... * 1.03, not the mean
    assert not np.allclose(want, ds["attention_norm_head"].sel(activation="x/16").mean("head")
                           .transpose("layer", "epoch").values)
    c["head"].value = "max"  # the largest head: what "softmax never crosses √N" is about
    assert ex.current.selection == {"head": "max"} and "max over heads" in _drawn(ex)["title"]
    np.testing.assert_array_equal(ex.current.values[:, 2], want)  # head 3 is the largest here
    np.testing.assert_array_equal(ex.current.values, ds["attention_norm_head"].max("head")
                                  .transpose("layer", "activation", "epoch").values)
    c["metric"].value = "test_loss"
    assert c["head"].disabled and ex.current.selection == {}
    for bad in (7, "min", True):
        with pytest.raises(EmptyInputError, match="heads"):
            prepare_layer_grid(ds, "attention_norm_head", head=bad)


def test_max_over_heads_answers_what_the_mean_hides():
    """Notebook 04's "softmax reaches 3.99, just under √N" is the largest head of the largest image: the mean
    over heads of the committed run never comes near it, the max over heads does."""
    from toolkit.lab import load_result

    ds = load_result()
    top = ds["attention_norm_max"].sel(activation="softmax")
    mean = prepare_layer_grid(ds, "attention_norm_max", activations=["softmax"]).values
    peak = prepare_layer_grid(ds, "attention_norm_max", activations=["softmax"], head="max").values
    assert np.nanmax(peak) == pytest.approx(float(top.max())) and np.nanmax(mean) < np.nanmax(peak)
    assert round(float(np.nanmax(peak)), 2) == 3.99 < math.sqrt(17)


@pytest.mark.parametrize("var", ["attention_norm_max", "score_fraction_above_1", "attention_norm_head"])
@pytest.mark.parametrize("layers", [None, [0, 1]])
def test_a_long_y_label_fits_its_panel(var, layers):
    """"largest attention norm per head" ran past the top and bottom of a 2.4-inch panel: measured after the
    layout, every y label is now no taller than its Axes (wrapped between words)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from toolkit.widgets.lab import grid_figure

    ds = make_lab()
    ds["score_fraction_above_1"] = ds["attention_norm"] / 100  # a long name on a variable without heads
    ds["score_fraction_above_1"].attrs.update(long_name="share of |score| above 1", units="1")
    fig = grid_figure(prepare_layer_grid(ds, var, layers=layers))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    labelled = [ax for ax in fig.axes if ax.get_ylabel()]
    assert labelled
    for ax in labelled:
        label = ax.yaxis.label
        assert label.get_window_extent(renderer).height <= ax.get_window_extent(renderer).height
        assert " ".join(label.get_text().split()) == ds[var].attrs["long_name"]  # every word kept
    if var == "attention_norm_max":
        assert "\n" in labelled[0].get_ylabel()  # it needed a second line


@pytest.mark.parametrize("var,layers", [("test_accuracy", None), ("attention_norm", None),
                                        ("attention_norm", [0, 1])])
def test_legend_lies_inside_the_explorer_figure(var, layers):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from toolkit.widgets.lab import grid_figure

    fig = grid_figure(prepare_layer_grid(make_lab(), var, layers=layers))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    (legend,) = fig.legends
    box, page = legend.get_window_extent(canvas.get_renderer()), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    assert [t.get_text() for t in legend.get_texts()][:5] == LABELS  # every activation named


def test_training_curves_legend_inside():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = training_curves(make_lab(), ["train_loss", "test_loss", "test_accuracy"], figsize=(7, 3))
    try:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box = fig.legends[0].get_window_extent(canvas.get_renderer())
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1
        assert [t.get_text() for t in fig.legends[0].get_texts()] == LABELS
    finally:
        plt.close(fig)


def _cvd_views(hex_colors):
    """Each colour as seen with normal vision and full deuteranomaly, protanomaly, tritanomaly."""
    from colorspacious import cspace_convert

    rgb = np.array([[int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)] for h in hex_colors])
    views = [rgb]
    for cvd in ("deuteranomaly", "protanomaly", "tritanomaly"):
        sim = cspace_convert(rgb, {"name": "sRGB1+CVD", "cvd_type": cvd, "severity": 100}, "sRGB1")
        views.append(np.clip(sim, 0, 1))
    return views


def test_five_activation_colours_stay_distinct_for_colour_blind_readers():
    from colorspacious import deltaE

    colors = [ACTIVATION_COLORS[a] for a in LABELS]
    worst = min(deltaE(v[i], v[j], input_space="sRGB1") for v in _cvd_views(colors)
                for i in range(5) for j in range(i + 1, 5))
    assert worst > 20  # CAM02-UCS; seaborn's colorblind orange vs vermillion was 9.9
    old = ["#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc"]
    assert min(deltaE(v[1], v[3], input_space="sRGB1") for v in _cvd_views(old)) < 12  # the defect, measured
    white = min(deltaE(v[i], [1, 1, 1], input_space="sRGB1") for v in _cvd_views(colors) for i in range(5))
    assert white > 30  # every line visible on the white axes
    assert len(set(colors)) == 5 and not set(colors) & set(series_colors(["a", "b", "c"], ["a", "b", "c"]))
