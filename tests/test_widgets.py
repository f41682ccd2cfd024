"""The explorer widget driven from Python: one figure after any number of changes."""

import base64

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from _stats_data import make_stats, with_heads, with_kv_heads, with_massive_activation  # noqa: E402
from toolkit.io import load  # noqa: E402
from toolkit.widgets import explore, explore_model  # noqa: E402

PNG_MAGIC = b"\x89PNG"


def _shown_png(ex) -> bytes:
    (out,) = ex.output.outputs  # exactly one output: the view
    assert out["output_type"] == "display_data"
    assert out["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.view.model_id
    return base64.b64decode(ex.view.png)


def test_controls_cover_metrics_and_every_extra_dimension():
    ds = with_heads(make_stats(10, checkpoints=3))
    ex = explore(ds)
    c = ex.controls
    labels = [label for label, _ in c["metric"].options]
    assert labels[:3] == ["Stable rank", "Spectral norm", "Frobenius norm"]  # from long_name
    assert {"checkpoint", "head", "scale", "layers", "annotate", "save_figure", "save_csv", "save_netcdf"} <= set(c)
    assert [label for label, _ in c["checkpoint"].options] == ["ckpt-0 (step 0)", "ckpt-1 (step 1000)",
                                                               "ckpt-2 (step 2000)"]
    assert [v for _, v in c["scale"].options] == ["diverging", "sequential", "log"]
    assert (c["layers"].min, c["layers"].max) == (0, 9)
    assert list(c["components"]) == ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.up", "mlp.down", "mlp.gate"]
    assert c["head"].disabled  # stable_rank has no head dimension
    c["metric"].value = "attn_entropy"  # (layer, head): heads are the columns
    assert c["head"].disabled and all(t.disabled for t in c["components"].values())
    assert ex.current.col_dim == "head"
    c["metric"].value = "head_norm"  # (checkpoint?, layer, component, head): head is a selector
    assert not c["head"].disabled
    assert c["head"].value == "mean"  # reducible dims start at the mean over them
    np.testing.assert_allclose(ex.current.values, ds["head_norm"].mean("head").values)
    c["head"].value = 2
    np.testing.assert_array_equal(ex.current.values, ds["head_norm"].sel(head=2).values)


def test_plotted_array_follows_the_controls():
    ds = make_stats(16, checkpoints=3)
    ex = explore(ds)
    c = ex.controls
    c["metric"].value = "spectral_norm"
    c["checkpoint"].value = "ckpt-2"
    c["layers"].value = (4, 11)
    c["components"]["attn.k"].value = False
    expected = ds["spectral_norm"].sel(checkpoint="ckpt-2", layer=slice(4, 11)).drop_sel(component="attn.k")
    np.testing.assert_array_equal(ex.current.values, expected.values)
    assert ex.current.rows == tuple(range(4, 12)) and "attn.k" not in ex.current.cols
    assert _shown_png(ex).startswith(PNG_MAGIC)


def test_output_holds_one_figure_after_many_changes_and_no_figure_leaks():
    ds = make_stats(12, checkpoints=2)
    figs_before = len(plt.get_fignums())
    ex = explore(ds)
    c = ex.controls
    metrics = ["stable_rank", "spectral_norm", "frobenius_norm"]
    seen = set()
    for i in range(7):  # 35 changes
        c["metric"].value = metrics[i % 3]
        c["checkpoint"].value = f"ckpt-{i % 2}"
        c["layers"].value = (i % 4, 11)
        c["scale"].value = ("diverging", "sequential", "log")[i % 3]
        c["annotate"].value = bool(i % 2)
        assert len(ex.output.outputs) == 1
        seen.add(_shown_png(ex))
    assert len(seen) == 7  # every round drew a new figure
    assert len(plt.get_fignums()) == figs_before
    sel = ex.selection()
    np.testing.assert_array_equal(
        ex.current.values,
        ds[sel["metric"]].sel(checkpoint=sel["checkpoint"], layer=slice(*sel["layers"])).values)


def test_change_during_a_render_leaves_no_stale_figure(monkeypatch):
    import toolkit.widgets.explorer as explorer_mod

    ex = explore(make_stats(8))
    real = explorer_mod.figure_png
    calls = []

    def slow_png(prepared, **kws):
        calls.append(prepared[0].metric)
        if len(calls) == 1:  # the user picks another metric while the first figure is drawn
            ex.controls["metric"].value = "frobenius_norm"
        return real(prepared, **kws)

    monkeypatch.setattr(explorer_mod, "figure_png", slow_png)
    ex.controls["metric"].value = "spectral_norm"
    assert calls == ["spectral_norm", "frobenius_norm"]
    assert ex.current.metric == "frobenius_norm" and len(ex.output.outputs) == 1
    assert "Frobenius norm" in ex.view.panels[0]["hover"][0][0]


def test_hold_batches_changes_into_one_render():
    ex = explore(make_stats(8))
    n = ex.renders
    with ex.hold():
        ex.controls["metric"].value = "spectral_norm"
        ex.controls["scale"].value = "log"
        ex.controls["layers"].value = (2, 5)
    assert ex.renders == n + 1 and ex.current.scale == "log"


def test_empty_selection_shows_a_message_not_a_stale_figure():
    ex = explore(make_stats(8))
    with ex.hold():
        for t in ex.controls["components"].values():
            t.value = False
    (out,) = ex.output.outputs
    assert out["output_type"] == "stream" and "Nothing to draw" in out["text"]
    assert ex.current is None
    ex.controls["components"]["mlp.up"].value = True
    assert ex.current.cols == ("mlp.up",)


def test_save_buttons_write_png_and_netcdf(tmp_path):
    ds = make_stats(8)
    ex = explore(ds, out_dir=tmp_path)
    ex.controls["save_figure"].click()
    ex.controls["save_netcdf"].click()
    png = tmp_path / "test-org_tiny-model_stable_rank.png"
    nc = tmp_path / "test-org_tiny-model.nc"
    assert png.read_bytes().startswith(PNG_MAGIC), ex.status.value
    assert "Saved" in ex.status.value
    back = load(nc)
    np.testing.assert_array_equal(back["stable_rank"].values, ds["stable_rank"].values)


def test_static_fallback_in_the_display_bundle():
    bundle = explore(make_stats(8))._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_MAGIC)


def test_explore_model_reports_progress_then_shows_the_panel(monkeypatch):
    import toolkit

    ds = make_stats(6)
    seen = {}

    def fake_weight_stats(source=None, metrics=None, *, progress=True, **kws):
        for i in range(1, 4):
            progress(i, 3, f"model.layers.{i}.weight")
        seen.update(source=source, metrics=metrics, kws=kws, progress=progress)
        return ds

    monkeypatch.setattr(toolkit, "weight_stats", fake_weight_stats, raising=False)
    ex = explore_model("some/model", ["stable_rank"], revision="main")
    assert seen["source"] == "some/model" and seen["metrics"] == ["stable_rank"]
    assert seen["kws"] == {"revision": "main"}
    bar = seen["progress"].bar
    assert (bar.value, bar.max) == (3, 3)
    assert ex.ds is ds and ex.widget.children[-3] is not None and len(ex.output.outputs) == 1


def test_explore_model_shows_the_failure_in_the_widget(monkeypatch):
    import toolkit
    from toolkit.errors import SourceNotFoundError

    def failing(source=None, metrics=None, *, progress=True, **kws):
        raise SourceNotFoundError(source, "no such folder")

    monkeypatch.setattr(toolkit, "weight_stats", failing, raising=False)
    with pytest.raises(SourceNotFoundError):
        explore_model("/no/such/model")


def _drawn_axes(ex):
    """The Axes the explorer's PNG is drawn from (same prepared data, same drawing function)."""
    from matplotlib.figure import Figure

    from toolkit.plot import draw_heatmap

    return draw_heatmap(ex.current, ax=Figure().add_subplot())


def test_kv_head_variables_are_offered_and_drawn_with_kv_heads_as_columns():
    ds = with_kv_heads(with_heads(make_stats(10), n_heads=6), n_heads=6, n_kv=2)
    ex = explore(ds)
    c = ex.controls
    offered = [v for _, v in c["metric"].options]
    assert {"key_head_rms", "value_head_rms", "query_head_rms", "attn_entropy"} <= set(offered)
    assert "kv_head" not in c  # only ever the columns: nothing to select
    assert "head" in c  # head_norm (layer, component, head) needs a head
    labels = dict((v, label) for label, v in c["metric"].options)
    assert labels["key_head_rms"] == "key RMS per key/value head"
    c["metric"].value = "key_head_rms"
    assert ex.current.col_dim == "kv_head" and ex.current.cols == (0, 1)
    np.testing.assert_array_equal(ex.current.values, ds["key_head_rms"].values)
    assert c["head"].disabled and all(t.disabled for t in c["components"].values())
    assert _shown_png(ex).startswith(PNG_MAGIC) and "key RMS" in ex.view.panels[0]["hover"][0][0]
    ax = _drawn_axes(ex)
    assert ax.get_xlabel() == "kv_head" and [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]
    c["layers"].value = (3, 6)
    np.testing.assert_array_equal(ex.current.values, ds["key_head_rms"].sel(layer=slice(3, 6)).values)
    c["metric"].value = "query_head_rms"  # back to the 6 query heads
    assert ex.current.values.shape == (4, 6) and _drawn_axes(ex).get_xlabel() == "head"
    c["metric"].value = "head_norm"
    assert not c["head"].disabled and ex.current.col_dim == "component"


def test_robust_checkbox_switches_between_percentile_and_true_limits():
    ds = with_massive_activation(make_stats(12))
    values = ds["max_abs_activation"].values
    ex = explore(ds, "max_abs_activation")
    box = ex.controls["robust"]
    assert box.value is True and box.description == "robust colour limits"
    assert any(box in getattr(row, "children", ()) for row in ex.widget.children)  # on screen
    assert ex.current.vmax < 10 and ex.current.extend in ("max", "both")  # the 28,000 cell is clipped
    ax = _drawn_axes(ex)
    assert ax.collections[0].colorbar.extend == ex.current.extend  # arrow at the clipped end
    robust_png, n = _shown_png(ex), ex.renders
    box.value = False
    assert ex.renders == n + 1 and len(ex.output.outputs) == 1 and _shown_png(ex) != robust_png
    assert ex.selection()["robust"] is False
    assert (ex.current.vmin, ex.current.vmax) == (values.min(), values.max()) == (values.min(), 28_000.0)
    assert ex.current.extend == "neither"
    mesh = _drawn_axes(ex).collections[0]
    assert (mesh.norm.vmin, mesh.norm.vmax) == (values.min(), values.max()) and mesh.colorbar.extend == "neither"
    ex.controls["scale"].value = "log"  # stays off across a scale change
    assert (ex.current.vmin, ex.current.vmax) == pytest.approx((values.min(), 28_000.0))
    assert ex.current.scale == "log" and not ex.current.clipped
    box.value = True
    assert ex.current.vmax < 10 and ex.current.clipped
