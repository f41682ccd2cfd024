"""Layer x component heatmaps: prepared data, orientation, colours, NaN cells, panels."""

import subprocess
import sys
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from _stats_data import make_stats, with_heads, with_kv_heads, with_massive_activation  # noqa: E402
from toolkit.errors import EmptyInputError, UnknownMetricError  # noqa: E402
from toolkit.plot import heatmap, heatmaps, metric_names, prepare_heatmap  # noqa: E402
from toolkit.plot._style import SEQUENTIAL_COLORS, cmap  # noqa: E402


@pytest.fixture(autouse=True)
def _no_figure_left_open():
    plt.close("all")
    yield
    plt.close("all")


def test_prepared_values_equal_the_dataset_selection():
    ds = make_stats(20, checkpoints=3)
    comps = ["mlp.down", "attn.q", "attn.v"]  # given out of order
    p = prepare_heatmap(ds, "spectral_norm", checkpoint="ckpt-1", layers=(3, 10), components=comps)
    expected = ds["spectral_norm"].sel(checkpoint="ckpt-1", layer=slice(3, 10),
                                       component=["attn.q", "attn.v", "mlp.down"]).values
    np.testing.assert_array_equal(p.values, expected)
    assert p.rows == tuple(range(3, 11))
    assert p.cols == ("attn.q", "attn.v", "mlp.down")  # canonical order
    assert p.col_labels == ("attn.q", "attn.v", "mlp.down")  # as the Dataset names them (issue 45, item 6)
    assert p.selection == {"checkpoint": "ckpt-1"}
    assert "ckpt-1" in p.title and "Spectral norm" in p.title and "test-org/tiny-model" in p.title


def test_selection_by_a_coordinate_along_an_extra_dimension():
    ds = make_stats(6, checkpoints=3)
    p = prepare_heatmap(ds, "stable_rank", step=2000)
    np.testing.assert_array_equal(p.values, ds["stable_rank"].sel(checkpoint="ckpt-2").values)


def test_layer_zero_is_drawn_at_the_bottom():
    ds = make_stats(28)
    ax = heatmap(ds, "stable_rank")
    p = prepare_heatmap(ds, "stable_rank")
    assert ax.get_ylim() == (0, 28)  # increasing upwards: row 0 at the bottom
    mesh = ax.collections[0]
    drawn = np.asarray(mesh.get_array()).reshape(28, 7)  # pcolormesh rows go from y=0 upwards
    np.testing.assert_array_equal(drawn[0], ds["stable_rank"].sel(layer=0).values)
    np.testing.assert_array_equal(drawn[-1], ds["stable_rank"].sel(layer=27).values)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["0", "4", "8", "12", "16", "20", "24", "27"]  # every 4 and the last
    ys = [t.get_position()[1] for t in ax.get_yticklabels()]
    assert ys == sorted(ys) and ys[0] < ys[-1]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "attn.q", "attn.k", "attn.v", "attn.o", "mlp.up", "mlp.down", "mlp.gate"]
    assert p.yticks[0] == 0 and p.ytick_labels[-1] == "27"


def test_tick_next_to_the_last_layer_is_dropped():
    p = prepare_heatmap(make_stats(30), "stable_rank")
    assert p.ytick_labels == ("0", "4", "8", "12", "16", "20", "24", "29")


def test_narrow_band_uses_the_full_colour_range():
    ds = make_stats(28)  # stable_rank in 0.075 .. 0.105
    values = ds["stable_rank"].values
    plain = prepare_heatmap(ds, "stable_rank")  # no natural centre, one decade: sequential, robust limits
    assert plain.scale == "sequential" and plain.center is None
    assert plain.vmin == pytest.approx(np.percentile(values, 2))
    assert plain.vmax == pytest.approx(np.percentile(values, 98))
    p = prepare_heatmap(ds, "stable_rank", center="median")  # the published blue-white-orange look
    assert p.scale == "diverging" and "white = median" in p.cbar_label
    assert p.vmin < p.center < p.vmax
    assert p.center == pytest.approx(np.median(values))
    lo, hi = np.percentile(values, [2, 98])  # the wider side sets the distance on both sides of the median
    assert p.vmax - p.center == pytest.approx(p.center - p.vmin) == pytest.approx(max(hi - p.center, p.center - lo))
    assert p.vmin <= lo and p.vmax >= hi and 0.06 < p.vmin and p.vmax < 0.12
    norm = p.norm()
    assert norm(p.vmin) == pytest.approx(0) and norm(p.vmax) == pytest.approx(1)
    assert norm(p.center) == pytest.approx(0.5)
    assert p.extend != "neither"
    full = prepare_heatmap(ds, "stable_rank", robust=False, center="median")
    assert full.vmin <= values.min() and full.vmax >= values.max() and full.extend == "neither"
    assert values.min() in (full.vmin, ) or values.max() == pytest.approx(full.vmax)


def test_colour_map_runs_blue_white_orange():
    cm = cmap("diverging")
    low, mid, high = (np.array(cm(x)[:3]) for x in (0.0, 0.5, 1.0))
    assert low[2] > low[0]  # blue
    np.testing.assert_allclose(mid, 1.0, atol=0.01)  # white
    assert high[0] > high[1] > high[2]  # orange


def test_colorbar_has_three_to_five_ticks_and_units():
    ds = make_stats(12)
    for scale in ("diverging", "sequential", "log"):
        ax = heatmap(ds, "frobenius_norm", scale=scale)
        cbar_ax = ax.figure.axes[-1]
        ticks = cbar_ax.get_yticks()
        assert 3 <= len(ticks) <= 5, (scale, ticks)
        assert "Frobenius norm" in cbar_ax.get_ylabel() and "dimensionless" in cbar_ax.get_ylabel()
        plt.close(ax.figure)
    assert prepare_heatmap(ds, "frobenius_norm", scale="sequential").center is None
    assert prepare_heatmap(ds, "frobenius_norm", center=0.5, robust=False).center == 0.5  # limits widen


def test_nan_column_is_hatched_and_ignored_by_the_colours():
    ds = make_stats(12, gate=False)
    p = prepare_heatmap(ds, "stable_rank", center="median")
    gate = p.cols.index("mlp.gate")
    assert p.nan_mask[:, gate].all() and not p.nan_mask[:, :gate].any()
    finite = ds["stable_rank"].values[:, :gate]
    assert p.center == pytest.approx(np.median(finite))
    ax = heatmap(ds, "stable_rank", annotate=True)
    hatched = [a for a in ax.patches if a.get_hatch()]
    assert len(hatched) == 12
    assert "NaN" in ax.get_xlabel()
    assert len(ax.texts) == 12 * 6  # annotations only on cells with a value


def test_head_variable_draws_heads_as_columns():
    ds = with_heads(make_stats(6))
    p = prepare_heatmap(ds, "attn_entropy")
    assert p.col_dim == "head" and p.cols == (0, 1, 2, 3)
    np.testing.assert_array_equal(p.values, ds["attn_entropy"].values)
    p2 = prepare_heatmap(ds, "head_norm", head=2)
    np.testing.assert_array_equal(p2.values, ds["head_norm"].sel(head=2).values)


def test_clear_errors():
    ds = make_stats(6, checkpoints=2)
    with pytest.raises(UnknownMetricError, match="stable_rank"):
        prepare_heatmap(ds, "no_such_metric")
    with pytest.raises(ValueError, match="checkpoint="):
        prepare_heatmap(ds, "stable_rank")
    with pytest.raises(ValueError, match="ckpt-0"):
        prepare_heatmap(ds, "stable_rank", checkpoint="nope")
    with pytest.raises(ValueError, match="attn.q"):
        prepare_heatmap(ds, "stable_rank", checkpoint="ckpt-0", components=["attn.x"])
    with pytest.raises(EmptyInputError):
        prepare_heatmap(ds, "stable_rank", checkpoint="ckpt-0", components=[])
    with pytest.raises(ValueError, match="scale"):
        prepare_heatmap(ds, "stable_rank", checkpoint="ckpt-0", scale="cubic")


def test_panels_of_models_with_different_depths():
    models = [make_stats(n, seed=n) for n in (28, 36, 48)]
    fig = heatmaps(models, "stable_rank", share_scale=False)
    axes = fig.axes[:3]  # the panels come first, their colorbars after
    assert [ax.get_ylim()[1] for ax in axes] == [28, 36, 48]
    assert len(fig.axes) == 6
    limits = {ax.collections[0].norm.vmin for ax in axes}
    assert len(limits) == 3  # own colour range per panel


def test_panels_of_one_metric_share_one_scale_by_default():
    """Issue 36, item 3: the steps of a series on one scale, so a small step does not look as changed."""
    ds = make_stats(12, checkpoints=3)
    fig = heatmaps(ds, "stable_rank")
    panels = fig.axes[:3]
    assert len(fig.axes) == 4  # three panels, one colorbar
    norms = {(ax.collections[0].norm.vmin, ax.collections[0].norm.vmax) for ax in panels}
    assert len(norms) == 1
    assert ["step 0" in ax.get_title() or "ckpt-0" in ax.get_title() for ax in panels][0]


def test_two_metrics_side_by_side():
    fig = heatmaps(make_stats(12), ["spectral_norm", "stable_rank"])
    assert "Spectral norm" in fig.axes[0].get_title() and "Stable rank" in fig.axes[1].get_title()


def test_figures_do_not_pile_up():
    ds = make_stats(8)
    before = len(plt.get_fignums())
    for _ in range(5):
        plt.close(heatmap(ds, "stable_rank").figure)
    assert len(plt.get_fignums()) == before


def test_import_is_lazy_and_names_stay_functions():
    code = ("import sys, types, toolkit.plot as tp; assert 'matplotlib' not in sys.modules, 'matplotlib imported';"
            "assert type(tp) is types.ModuleType, type(tp);"  # a plain module: no class swapped in
            "import toolkit.plot.heatmap_figure, toolkit.plot.layer_grid_figure, toolkit.plot.lines, "
            "toolkit.plot._panels;"
            "bad = [n for n in tp.__all__ if isinstance(getattr(tp, n), types.ModuleType)]; assert not bad, bad;"
            "assert tp.heatmap is toolkit.plot.heatmap_figure.heatmap and tp.layer_grid.__name__ == 'layer_grid';"
            "assert callable(tp.heatmap) and callable(tp.heatmaps) and callable(tp.prepare_heatmap)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_plot_submodule_is_named_like_a_plot_function():
    """The cause of a function shadowed by its module: ``import toolkit.plot.<name>`` sets the package's ``<name>``."""
    import pkgutil

    import toolkit.plot as tp

    assert sorted({m.name for m in pkgutil.iter_modules(tp.__path__)} & set(tp.__all__)) == []


def test_infinite_values_are_drawn_beyond_the_colorbar_not_as_missing():
    ds = make_stats(8)
    ds["stable_rank"][2, 3] = np.inf  # e.g. the condition number of a rank-deficient matrix
    p = prepare_heatmap(ds, "stable_rank")
    assert not p.nan_mask.any() and np.isfinite([p.vmin, p.vmax]).all()
    assert p.extend in ("max", "both")
    ax = heatmap(ds, "stable_rank", annotate=True)
    assert not [a for a in ax.patches if a.get_hatch()]
    assert "inf" in [t.get_text() for t in ax.texts]
    mesh = ax.collections[0]
    drawn = np.asarray(mesh.get_array()).reshape(8, 7)[2, 3]
    assert mesh.cmap(float(mesh.norm(drawn))) == tuple(mesh.cmap.get_over())


def test_kv_head_variable_draws_kv_heads_as_columns():
    ds = with_kv_heads(make_stats(10), n_heads=9, n_kv=3)  # grouped-query attention, as SmolLM2-135M
    assert {"query_head_rms", "key_head_rms", "value_head_rms"} <= set(metric_names(ds))
    p = prepare_heatmap(ds, "key_head_rms")
    assert p.col_dim == "kv_head" and p.cols == (0, 1, 2) and p.col_labels == ("0", "1", "2")
    assert p.col_axis_label == "kv_head"
    np.testing.assert_array_equal(p.values, ds["key_head_rms"].values)
    ax = heatmap(ds, "key_head_rms")
    assert ax.get_xlabel() == "kv_head" and ax.get_xlim() == (0, 3)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
    drawn = np.asarray(ax.collections[0].get_array()).reshape(10, 3)
    np.testing.assert_array_equal(drawn, ds["key_head_rms"].values)
    plt.close(ax.figure)
    ax = heatmap(ds, "query_head_rms")  # the query heads: 9 columns, labelled "head"
    assert ax.get_xlabel() == "head" and len(ax.get_xticklabels()) == 9
    plt.close(ax.figure)
    assert heatmap(ds, "stable_rank").get_xlabel() == ""  # components: the tick labels say it


def test_kv_head_selected_when_another_dimension_is_the_columns():
    ds = with_kv_heads(make_stats(6), n_heads=4, n_kv=2)
    rng = np.random.default_rng(0)
    ds["kv_norm"] = (("layer", "component", "kv_head"), rng.uniform(size=(6, 7, 2)), {"long_name": "kv norm"})
    p = prepare_heatmap(ds, "kv_norm", kv_head=1)
    assert p.col_dim == "component"
    np.testing.assert_array_equal(p.values, ds["kv_norm"].sel(kv_head=1).values)
    with pytest.raises(ValueError, match="kv_head="):
        prepare_heatmap(ds, "kv_norm")


@pytest.mark.parametrize("scale", ["diverging", "sequential", "log"])
def test_robust_off_shows_a_massive_activation_as_the_extreme(scale):
    ds = with_massive_activation(make_stats(12))
    values = ds["max_abs_activation"].values
    ax = heatmap(ds, "max_abs_activation", scale=scale, robust=False)
    mesh = ax.collections[0]
    assert values.max() == 28_000.0 and np.median(values) < 2
    if scale == "diverging":  # symmetric in decades about the median: the far side sets both
        assert mesh.norm.vmax == pytest.approx(values.max()) and mesh.norm.vmin <= values.min()
        assert mesh.norm.vmin * mesh.norm.vmax == pytest.approx(float(np.median(values)) ** 2)
    else:
        assert (mesh.norm.vmin, mesh.norm.vmax) == (values.min(), values.max())
    assert mesh.colorbar.extend == "neither"  # nothing clipped: no arrow on the colorbar
    outlier = np.asarray(mesh.get_array()).reshape(12, 7)[2, 5]
    assert mesh.norm(outlier) == pytest.approx(1.0)  # the top colour, inside the bar
    plt.close(ax.figure)

    ax = heatmap(ds, "max_abs_activation", scale=scale)  # robust (the default): 98th percentile
    mesh = ax.collections[0]
    assert mesh.norm.vmax < 10 and mesh.colorbar.extend in ("max", "both")
    assert prepare_heatmap(ds, "max_abs_activation", scale=scale).clipped
    assert not prepare_heatmap(ds, "max_abs_activation", scale=scale, robust=False).clipped


def test_model_name_for_titles():
    from toolkit.plot._select import model_name

    snapshot = "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/" + "a" * 40
    assert model_name({"source": snapshot}) == "Qwen/Qwen2.5-7B"
    assert model_name({"source": "/opt/pkgs/all-MiniLM-L6-v2/model"}) == "all-MiniLM-L6-v2/model"
    assert model_name({"source": "/data/runs/SmolLM2.Q4_1.gguf"}) == "SmolLM2.Q4_1.gguf"
    assert model_name({"source": "Qwen/Qwen2.5-7B"}) == "Qwen/Qwen2.5-7B"
    assert model_name({"model_name": "step-40 vs step-0", "source": "/x"}) == "step-40 vs step-0"


def test_colorbar_ticks_share_one_notation():
    from toolkit.plot._style import format_ticks

    assert format_ticks([8.54e-4, 0.00177, 0.0035], "sequential") == ["8.54e-04", "1.77e-03", "3.50e-03"]
    assert format_ticks([0.5, 1.0, 2.25], "diverging") == ["0.5", "1", "2.25"]
    assert format_ticks([1e-4, 1e-3, 0.05], "log") == ["$10^{-4}$", "$10^{-3}$", "5.00e-02"]


def _series_at_step_zero(n_layers=6):
    """A compare_series-like Dataset: checkpoints 0..2 (steps 0, 2, 4); delta_alpha undefined at step 0."""
    ds = make_stats(n_layers, checkpoints=3)
    ds = ds.assign_coords(checkpoint=np.arange(3), step=("checkpoint", [0, 2, 4]))
    values = np.random.default_rng(4).uniform(2, 4, (3, n_layers, 7))
    values[0] = np.nan
    ds["delta_alpha"] = (("checkpoint", "layer", "component"), values, {"long_name": "alpha of the update"})
    reason = np.full((3, n_layers, 7), "", dtype=object)
    reason[0] = "delta_alpha, delta_matrix_rank: zero update (W_t = W_b); subspace_overlap: no update"
    ds = ds.assign_coords(nan_reason=(("checkpoint", "layer", "component"), reason.astype(str)))
    zeros = np.zeros((3, n_layers, 7))
    ds["relative_change"] = (("checkpoint", "layer", "component"), zeros, {"long_name": "relative change"})
    ds["update_sparsity"] = (("checkpoint", "layer", "component"), zeros + 1.0, {"long_name": "update sparsity"})
    return ds


def test_wholly_undefined_panel_is_hatched_with_its_stored_reason():
    ds = _series_at_step_zero()
    p = prepare_heatmap(ds, "delta_alpha", checkpoint=0)  # raised "no finite value" before
    assert p.nan_mask.all() and p.caption == "alpha of the update is undefined in every cell: zero update (W_t = W_b)"
    assert set(p.reasons.ravel()) == {"zero update (W_t = W_b)"}  # this metric's part of nan_reason only
    ax = heatmap(ds, "delta_alpha", checkpoint=0)
    assert len([a for a in ax.patches if a.get_hatch()]) == 6 * 7
    assert "zero update" in ax.get_xlabel()
    assert prepare_heatmap(ds, "delta_alpha", checkpoint=1).caption == ""  # defined there


def test_reason_for_picks_the_metric_out_of_a_joined_nan_reason():
    from toolkit.plot._select import reason_for

    text = "delta_alpha, delta_matrix_rank: zero update; alpha: too few eigenvalues (3 < 5)"
    assert reason_for(text, "delta_matrix_rank") == "zero update"
    assert reason_for(text, "alpha") == "too few eigenvalues (3 < 5)"
    assert reason_for("no such matrix in this model", "alpha") == "no such matrix in this model"
    assert reason_for("", "alpha") == ""


def test_constant_panel_says_so_in_one_pale_colour():
    ds = _series_at_step_zero()
    change = prepare_heatmap(ds, "relative_change", checkpoint=0)
    assert change.constant == 0.0 and change.caption == "constant: 0"
    assert (change.vmin, change.vmax) == (0.0, 0.0)  # one value, no made-up range
    assert change.cbar_ticks == (0.0,)
    sparsity = prepare_heatmap(ds, "update_sparsity", checkpoint=0)
    # issue 45, item 2: not [1.0, 1.1], above a fraction's maximum; one pale colour, its tick in the middle
    assert (sparsity.vmin, sparsity.vmax, sparsity.span) == (1.0, 1.0, (0.0, 0.0))
    assert np.allclose(sparsity.face_colors()[..., :3], matplotlib.colors.to_rgb(SEQUENTIAL_COLORS[0]), atol=1e-6)
    bar = sparsity.colorbar(5)
    assert bar["ticks"] == [(0.5, "constant: 1")] and len({tuple(c) for c in bar["colors"]}) == 1
    ax = heatmap(ds, "update_sparsity", checkpoint=0)
    assert [t.get_text() for t in ax.figure.axes[-1].get_yticklabels()] == ["constant: 1"]
    assert "constant: 1" in ax.get_xlabel()
    ds["update_sparsity"].attrs["valid_max"] = 0.5  # CF attrs win over the built-in table
    from toolkit.plot.scale_rules import domain

    assert domain("update_sparsity", ds["update_sparsity"].attrs) == (0.0, 0.5)
    assert domain("some_new_metric") == (-np.inf, np.inf)


def test_steps_are_named_by_their_step_not_their_index():
    ds = _series_at_step_zero()
    p = prepare_heatmap(ds, "relative_change", checkpoint=2)
    assert "step 4" in p.title and "checkpoint" not in p.title
    assert "(step 4)" in prepare_heatmap(ds, "relative_change", step=4).title
    labelled = make_stats(6, checkpoints=2)  # labels that say more than a position are kept
    assert "ckpt-1 (step 1000)" in prepare_heatmap(labelled, "stable_rank", checkpoint="ckpt-1").title


def test_long_title_of_a_narrow_heatmap_stays_inside_the_figure():
    from matplotlib.figure import Figure

    from toolkit.plot.heatmap_figure import auto_figsize, draw_heatmap

    ds = with_kv_heads(make_stats(30, source="/models/SmolLM2-135M-Instruct.Q4_1.gguf"), n_heads=9, n_kv=3)
    p = prepare_heatmap(ds, "key_head_rms")
    assert len(p.title) > 55
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=auto_figsize(*p.values.shape), layout="constrained")
    ax = draw_heatmap(p, ax=fig.add_subplot())
    FigureCanvasAgg(fig).draw()  # runs the constrained layout
    box, page = ax.title.get_window_extent(), fig.bbox
    assert "\n" in ax.get_title()
    assert box.x0 >= page.x0 - 0.5 and box.x1 <= page.x1 + 0.5 and box.y1 <= page.y1 + 0.5


def test_values_in_cells_stay_readable_at_30_layers_or_say_why_not():
    from matplotlib.figure import Figure

    from toolkit.plot.heatmap_figure import MIN_VALUE_FONT, auto_figsize, draw_heatmap

    p = prepare_heatmap(make_stats(30), "stable_rank")
    fig = Figure(figsize=auto_figsize(30, 7, annotate=True), layout="constrained")
    ax = draw_heatmap(p, ax=fig.add_subplot(), annotate=True)
    assert len(ax.texts) == 30 * 7
    assert min(t.get_fontsize() for t in ax.texts) >= 6.0  # was 4 pt (~5 px) at 30 layers
    small = Figure(figsize=auto_figsize(30, 7), layout="constrained")  # the unannotated size: too small
    ax = draw_heatmap(p, ax=small.add_subplot(), annotate=True)
    if not ax.texts:
        assert "values in cells off" in ax.get_xlabel()
    else:
        assert min(t.get_fontsize() for t in ax.texts) >= MIN_VALUE_FONT


def _with_experts(n_layers=5, n_experts=4):
    ds = make_stats(n_layers)
    rng = np.random.default_rng(9)
    values = rng.uniform(2, 5, (n_layers, 7, n_experts))
    values[..., :4, :] = np.nan  # attention has no experts
    values[1, 4, 2] = np.nan  # one expert's fit failed
    ds = ds.assign_coords(expert=np.arange(n_experts))
    ds["alpha_per_expert"] = (("layer", "component", "expert"), values, {"long_name": "alpha per expert"})
    return ds


def test_expert_dimension_is_reduced_or_selected_and_can_be_the_columns():
    ds = _with_experts()
    raw = ds["alpha_per_expert"].values
    with warnings.catch_warnings():  # all-NaN attention cells: "mean of empty slice"
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(raw, axis=2)
    p = prepare_heatmap(ds, "alpha_per_expert", expert="mean")
    np.testing.assert_allclose(p.values, mean)
    assert p.values[1, 4] == pytest.approx(np.mean(raw[1, 4, [0, 1, 3]]))  # NaN skipped
    assert "mean over expert" in p.title
    np.testing.assert_array_equal(prepare_heatmap(ds, "alpha_per_expert", expert="max").values[:, 4:],
                                  np.nanmax(raw[:, 4:], axis=2))
    np.testing.assert_array_equal(prepare_heatmap(ds, "alpha_per_expert", expert=2).values, raw[..., 2])
    per_expert = prepare_heatmap(ds, "alpha_per_expert", component="mlp.up")  # (layer, expert)
    assert per_expert.col_dim == "expert" and per_expert.cols == (0, 1, 2, 3)
    np.testing.assert_array_equal(per_expert.values, raw[:, 4, :])
    with pytest.raises(ValueError, match="mean / max / min"):
        prepare_heatmap(ds, "alpha_per_expert")


def test_small_models_label_every_layer_and_large_ones_every_fourth():
    assert prepare_heatmap(make_stats(6), "stable_rank").ytick_labels == ("0", "1", "2", "3", "4", "5")  # BERT
    assert prepare_heatmap(make_stats(12), "stable_rank").ytick_labels == ("0", "2", "4", "6", "8", "11")
    assert prepare_heatmap(make_stats(28), "stable_rank").ytick_labels[-2:] == ("24", "27")


def test_numbers_are_printed_one_way_everywhere():
    from toolkit.plot._style import format_value

    # issue 27 saw 9.7e+03, 1.90e+04 and 6e+03 in one table
    assert [format_value(x) for x in (9700.0, 19000.0, 6000.0)] == ["9700", "1.90e+04", "6000"]
    assert [format_value(x) for x in (0.0912, 35.5, 9996.0, 8.54e-4, 0.0)] == ["0.0912", "35.5", "1.00e+04",
                                                                                "8.54e-04", "0"]


def test_a_per_expert_metric_without_an_expert_is_a_typed_error_saying_how_to_choose():
    """heatmap(ds, "stable_rank_per_expert") raised an untyped ValueError: a ToolkitError naming the
    dimension, its labels and the three ways out (one expert, a reduction, experts as columns)."""
    from toolkit.errors import ExtraDimensionError, ToolkitError

    ds = _with_experts()
    with pytest.raises(ExtraDimensionError) as e:
        heatmap(ds, "alpha_per_expert")
    assert isinstance(e.value, ToolkitError) and (e.value.dim, e.value.labels) == ("expert", [0, 1, 2, 3])
    for way in ("expert=0", "expert='mean'", "component='mlp.up'"):
        assert way in str(e.value)
