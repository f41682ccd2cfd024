"""The explorer's interaction, driven from Python: hover texts, clicks, models side by side, exports.

What the browser shows on hover is ``view.spec["panels"][k]["hover"]``, made in
Python, and the colours it paints are ``view.spec["panels"][k]["colors"]``; a
click (or Enter) arrives as the message the browser sends. The real-browser
side is in ``tests/end_to_end/test_browser.py`` and ``tests/end_to_end/test_browser_explorer.py``.
"""

import csv
import io
import struct

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from _stats_data import make_stats, with_heads  # noqa: E402
from toolkit.plot._style import color_limits  # noqa: E402
from toolkit.widgets import explore  # noqa: E402

PNG_MAGIC = b"\x89PNG"


def _png_size(png: bytes) -> tuple[int, int]:
    return struct.unpack(">II", png[16:24])


def _with_spectra(ds, seed=5):
    """Add ``eigenvalues`` (layer, component, index): those of WᵀW for a random 64 x 32 W per cell."""
    rng = np.random.default_rng(seed)
    n_l, n_c = ds.sizes["layer"], ds.sizes["component"]
    lam = np.empty((n_l, n_c, 32))
    for i in range(n_l):
        for j in range(n_c):
            w = rng.standard_t(3, (64, 32))
            lam[i, j] = np.sort(np.linalg.eigvalsh(w.T @ w))[::-1]
    return ds.assign(eigenvalues=(("layer", "component", "index"), lam, {"long_name": "eigenvalues of WᵀW"}))


def _click(ex, panel, row, col):
    """What the browser sends when a cell is clicked (or Enter pressed on it)."""
    ex.view._handle_message(ex.view, {"event": "open", "panel": panel, "row": row, "col": col}, [])


def test_hover_text_has_value_tensor_shape_and_reason_and_is_what_the_browser_shows():
    ds = make_stats(10, gate=False)
    ex = explore(ds)
    value = float(ds["stable_rank"].sel(layer=3, component="mlp.down"))
    text = ex.hover_text(3, "mlp.down")
    assert text.splitlines() == ["layer 3, mlp.down", f"Stable rank: {value:.3g}",
                                 "tensor: model.layers.3.mlp.down.weight", "shape: 64 × 32"]
    gate = ex.hover_text(3, "mlp.gate")
    assert "Stable rank: NaN" in gate and gate.endswith("undefined: architecture has no mlp.gate")
    (panel,) = ex.view.spec["panels"]
    assert (len(panel["rows"]), len(panel["cols"])) == (10, 7)
    assert panel["hover"][3][5] == text  # row 0 is layer 0, at the bottom
    assert panel["hover"][0][0].startswith("layer 0, attn.q")
    with pytest.raises(ValueError, match="layers 0..9"):
        ex.hover_text(12, "attn.q")


def test_the_browser_paints_the_colours_of_the_saved_figure():
    """Each cell's colour in the spec is the one matplotlib paints for the saved PNG (one norm, one colour
    map), and hatched cells get none."""
    from matplotlib.figure import Figure

    from toolkit.plot import draw_heatmap

    ds = make_stats(8, gate=False)
    ex = explore(ds)
    for scale in ("auto", "log", "diverging"):
        ex.controls["scale"].value = scale
        mesh = draw_heatmap(ex.current, ax=Figure().add_subplot()).collections[0]
        painted = mesh.to_rgba(mesh.get_array()).reshape(8, 7, 4)
        colors = ex.view.spec["panels"][0]["colors"]
        for i in range(8):
            for j in range(7):
                if np.isnan(ex.current.values[i, j]):
                    assert colors[i][j] is None
                    continue
                rgb = [int(colors[i][j][k:k + 2], 16) / 255 for k in (1, 3, 5)]
                np.testing.assert_allclose(rgb, painted[i, j, :3], atol=0.5 / 255 + 1e-9)


def test_click_draws_the_cells_spectrum_beside_the_heatmap():
    ds = _with_spectra(make_stats(6))
    ex = explore(ds)
    _click(ex, 0, 2, 5)  # row 2 = layer 2, column 5 = mlp.down
    dd = ex.cell
    assert (dd.layer, dd.column) == (2, "mlp.down")
    assert dd.kinds == ["esd", "singular_values"]
    np.testing.assert_array_equal(dd.eigenvalues, ds["eigenvalues"].sel(layer=2, component="mlp.down").values)
    assert ex.drill.spec["panels"] == dd.panels and [p["role"] for p in dd.panels] == dd.kinds
    assert ex.view.selected == [0, 2, 5]  # the opened cell is outlined
    assert "layer 2, mlp.down" in ex.cell_text.value and "model.layers.2.mlp.down.weight" in ex.cell_text.value
    assert any("entry histogram" in n and "not a local file" in n for n in dd.notes)  # says why not
    again = ex.show_cell(4, "attn.k")  # the scripted click
    assert (again.layer, again.column) == (4, "attn.k")
    _click(ex, 0, 99, 0)  # outside the grid: ignored
    assert ex.cell is again


def test_click_without_stored_spectra_says_how_to_get_them():
    ex = explore(make_stats(6))
    assert "No spectrum is stored" in ex.view.spec["hint"]  # no promise of a spectrum that cannot come
    dd = ex.show_cell(1, "attn.q")
    assert dd.kinds == [] and dd.panels == [] and ex.drill.spec["panels"] == []
    assert any("keep_spectra=True" in n for n in dd.notes) and "keep_spectra=True" in ex.drill.spec["note"]


def test_comparison_drill_down_names_the_update_and_its_relative_change():
    ds = _with_spectra(make_stats(6))
    ds["eigenvalues"].attrs["matrix"] = "ΔW = W_target − W_base"
    ds["relative_change"] = (("layer", "component"), np.full((6, 7), 0.0125), {"long_name": "relative change"})
    ex = explore(ds, "stable_rank")
    dd = ex.show_cell(3, "mlp.up")
    assert all(t.startswith("ΔW = W_target − W_base: layer 3 mlp.up") for t in dd.titles)
    assert "relative change: 0.0125" in ex.cell_text.value


def test_entry_histogram_reads_the_one_matrix_from_a_local_checkpoint(tmp_path, cache):
    import torch
    from safetensors.torch import load_file

    import toolkit
    from toolkit.testing import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path / "tiny", "llama", num_layers=2)
    ds = toolkit.weight_stats(path, ["stable_rank"], keep_spectra=True, progress=False)
    ex = explore(ds)
    dd = ex.show_cell(1, "mlp.down")
    assert dd.kinds == ["esd", "singular_values", "entries"]
    from toolkit.widgets.cell_matrix import read_cell_matrix

    stored = next(v for k, v in load_file(path / "model.safetensors").items() if "layers.1.mlp.down_proj" in k)
    np.testing.assert_array_equal(read_cell_matrix(ds, 1, "mlp.down"), stored.to(torch.float32).numpy())
    assert f"{stored.numel():,} entries" in dd.titles[-1]


def test_models_side_by_side_keep_their_own_layer_axes_and_share_one_scale():
    models = [make_stats(n, seed=n) for n in (28, 36, 48)]
    ex = explore(models, labels=["small", "medium", "large"])
    c = ex.controls
    assert c["view"].value == "side" and [v for _, v in c["view"].options] == ["side", "difference", "ratio"]
    assert [p.rows[-1] for p in ex.prepared] == [27, 35, 47]
    assert c["range"].value == "shared"  # panels of one metric share one scale by default (issue 36, item 3)
    assert [len(p["rows"]) for p in ex.view.spec["panels"]] == [28, 36, 48]
    assert ex.hover_text(40, "attn.v", panel=2).startswith("layer 40, attn.v")
    c["range"].value = "separate"
    assert len({p.vmin for p in ex.prepared}) == 3  # separate colour ranges
    assert all(p["cbar"] for p in ex.view.spec["panels"]) and ex.view.spec["shared_cbar"] is None
    c["range"].value = "shared"
    pooled = np.concatenate([m["stable_rank"].values.ravel() for m in models])
    lo, hi, _ = color_limits(pooled, scale="sequential")
    assert {(p.scale, p.vmin, p.vmax, p.center) for p in ex.prepared} == {("sequential", lo, hi, None)}
    assert ex.view.spec["shared_cbar"] and not any(p["cbar"] for p in ex.view.spec["panels"])  # one colour bar
    c["scale"].value = "diverging"  # one norm: the same centre too (the pooled median), not each panel's own
    assert len({(p.vmin, p.vmax, p.center) for p in ex.prepared}) == 1
    assert ex.prepared[0].center == pytest.approx(np.median(pooled))
    # the colour bar (the page's shared one too) says white is the pooled median, and of which panels
    # (issue 45, item 1); each panel gives its own median under it
    said = "(median of small, medium, large pooled)"
    assert all(p.cbar_label.endswith(said) for p in ex.prepared)
    assert ex.view.spec["shared_cbar"]["label"].endswith(said)
    own = float(np.median(models[2]["stable_rank"].values))
    assert f"median of this panel: {ex.prepared[2].format(own)}" in ex.view.spec["panels"][2]["xlabel"]
    c["view"].value = "difference"  # 28 vs 48 layers: the grids do not line up
    assert ex.current is None and "do not line up" in ex.message
    c["base"].value, c["target"].value = 0, 0
    assert ex.current is not None and np.all(ex.current.values == 0)


def test_difference_and_ratio_of_two_models_on_the_same_grid():
    a, b = make_stats(12, seed=1, source="org/base"), make_stats(12, seed=2, source="org/tuned")
    ex = explore([a, b])
    ex.controls["view"].value = "difference"
    np.testing.assert_allclose(ex.current.values, b["stable_rank"].values - a["stable_rank"].values)
    assert ex.current.center == 0.0 and "org/tuned − org/base" in ex.current.title
    text = ex.hover_text(4, "attn.o")
    va, vb = (float(d["stable_rank"].sel(layer=4, component="attn.o")) for d in (a, b))
    assert f"org/base: {va:.3g}; org/tuned: {vb:.3g}" in text
    ex.controls["view"].value = "ratio"
    np.testing.assert_allclose(ex.current.values, b["stable_rank"].values / a["stable_rank"].values)
    assert ex.current.center == 1.0 and ex.current.units == "1"
    a["stable_rank"][2, 0] = 0.0  # a zero base has no ratio, and the hover says so
    zero = explore([a, b])
    zero.controls["view"].value = "ratio"
    assert np.isnan(zero.current.values[2, 0])
    assert zero.hover_text(2, "attn.q").endswith("undefined: the base is 0: no ratio")


def test_a_checkpoint_dimension_gives_the_same_views_named_by_step():
    ds = make_stats(8, checkpoints=3).assign_coords(checkpoint=np.arange(3), step=("checkpoint", [0, 2, 4]))
    ex = explore(ds)
    c = ex.controls
    assert [label for label, _ in c["checkpoint"].options] == ["step 0", "step 2", "step 4"]
    c["checkpoint"].value = 2
    assert "step 4" in ex.current.title and "checkpoint=" not in ex.current.title
    c["view"].value = "side"
    assert len(ex.prepared) == 3 and c["checkpoint"].disabled
    assert ["step 4" in p.title for p in ex.prepared] == [False, False, True]
    c["view"].value = "difference"
    np.testing.assert_allclose(ex.current.values, (ds["stable_rank"][2] - ds["stable_rank"][0]).values)


def test_manual_colour_limits_and_a_bad_one():
    ex = explore(make_stats(10))
    ex.controls["vmin"].value = "0.08"
    ex.controls["vmax"].value = "0.1"
    assert (ex.current.vmin, ex.current.vmax) == (0.08, 0.1) and ex.current.clipped
    ex.controls["vmax"].value = ""  # empty: automatic again
    assert ex.current.vmin == 0.08 and ex.current.vmax == pytest.approx(
        np.percentile(ex.ds["stable_rank"].values, 98))
    ex.show_cell(3, "attn.q")
    ex.controls["vmin"].value = "abc"  # the figure stays, with automatic limits, and says why
    assert ex.current is not None and ex.message == "" and ex.view.layout.display == ""
    assert "&#x27;abc&#x27; is not a number: automatic limits used" in ex.limits_note.value
    assert ex.current.vmin == pytest.approx(np.percentile(ex.ds["stable_rank"].values, 2))
    assert ex.cell is not None and ex.view.selected  # the opened cell is still shown: it stays open
    ex.controls["vmin"].value, ex.controls["vmax"].value = "0.1", "0.08"  # min above max
    assert ex.current is not None and "is not below max" in ex.limits_note.value
    ex.controls["vmin"].value, ex.controls["vmax"].value = "", ""
    assert ex.limits_note.value == ""


def test_exports_name_metric_and_selection_and_never_overwrite(tmp_path):
    ds = make_stats(6, checkpoints=2)
    ex = explore(ds, "spectral_norm", out_dir=tmp_path)
    ex.controls["checkpoint"].value = "ckpt-1"
    magic = {"png": PNG_MAGIC, "svg": b"<?xml", "pdf": b"%PDF"}
    for fmt, head in magic.items():
        ex.controls["format"].value = fmt
        ex.controls["save_figure"].click()
        assert "Saved" in ex.status.value, ex.status.value
        path = tmp_path / f"test-org_tiny-model_spectral_norm_ckpt-1_step_1000.{fmt}"
        assert path.read_bytes().startswith(head), sorted(p.name for p in tmp_path.iterdir())
    ex.controls["format"].value = "png"
    second = ex.save_figure()
    assert second.name == "test-org_tiny-model_spectral_norm_ckpt-1_step_1000-2.png"
    rows = list(csv.DictReader(io.StringIO(ex.save_csv().read_text())))
    assert len(rows) == 6 * 7 and rows[0].keys() == {"panel", "layer", "component", "spectral_norm"}
    got = {(int(r["layer"]), r["component"]): float(r["spectral_norm"]) for r in rows}
    want = ds["spectral_norm"].sel(checkpoint="ckpt-1")
    assert got[(4, "mlp.up")] == float(want.sel(layer=4, component="mlp.up"))


def test_top_cells_table_lists_the_extremes_of_the_shown_metric():
    ds = make_stats(9)
    ex = explore(ds, "frobenius_norm")
    v = ds["frobenius_norm"].values
    order = np.argsort(v, axis=None)[::-1][:5]
    html = ex.top.value
    for flat in order:
        i, j = np.unravel_index(flat, v.shape)
        assert f"<td>{i}</td>" in html
    from toolkit.plot.numbers import distinct_digits, format_column

    d = distinct_digits(v.ravel()[order], ex.prepared[0].digits)  # the rows' digits tell them apart
    texts = format_column(v.ravel()[order], d)
    assert html.index(f"<td>{texts[0]}</td>") < html.index(f"<td>{texts[1]}</td>")
    ex.controls["rank"].value = "lowest"
    low = np.sort(v, axis=None)[:5]
    d = distinct_digits(low, ex.prepared[0].digits)
    assert f"<td>{format_column(low, d)[0]}</td>" in ex.top.value


def test_top_cells_carry_the_same_digits_in_one_notation():
    """The table read "192.3 / 192 / 191.2" and "1 / 0.9976" (trailing zeros dropped), and a relative change
    "0.0053" beside a colour bar in scientific notation: every row now has the same significant digits, in
    one notation, by the hover's rule (format_value, trailing zeros kept)."""
    import re

    ds = make_stats(4)
    v = np.full(ds["frobenius_norm"].shape, 150.0)
    v[0, :3] = [192.31, 192.0, 191.2]
    ds["frobenius_norm"].values[:] = v
    ex = explore(ds, "frobenius_norm")
    top = re.findall(r"<td>([0-9.e+-]+)</td></tr>", ex.top.value)
    assert top[:3] == ["192.3", "192.0", "191.2"], ex.top.value
    v = np.full(v.shape, 0.9)
    v[1, :2] = [1.0, 0.9976]
    ds["frobenius_norm"].values[:] = v
    ex = explore(ds, "frobenius_norm")
    assert re.findall(r"<td>([0-9.e+-]+)</td></tr>", ex.top.value)[:2] == ["1.000", "0.9976"]
    v = np.linspace(0, 0.0053, v.size).reshape(v.shape)  # a relative change: the top values below 1e-3 too
    ds["frobenius_norm"].values[:] = v
    ex = explore(ds, "frobenius_norm")
    ex.controls["rank"].value = "lowest"
    texts = re.findall(r"<td>([0-9.e+-]+)</td></tr>", ex.top.value)
    assert texts[0] == "0" and all("e-0" in t for t in texts[1:]), texts  # one notation, not 0.0053 beside 1.9e-4


def _moe(n_layers=6, n_experts=4):
    ds = make_stats(n_layers)
    rng = np.random.default_rng(3)
    raw = rng.uniform(2, 6, (n_layers, 7, n_experts))
    raw[:, :4] = np.nan  # attention has no experts
    ds = ds.assign_coords(expert=np.arange(n_experts))
    ds["alpha_per_expert"] = (("layer", "component", "expert"), raw, {"long_name": "alpha per expert"})
    return ds, raw


def test_expert_selector_offers_mean_max_min_and_a_layer_by_expert_heatmap():
    ds, raw = _moe()
    ex = explore(ds, "alpha_per_expert")
    c = ex.controls
    assert [v for _, v in c["expert"].options] == ["mean", "max", "min", 0, 1, 2, 3]
    assert c["expert"].value == "mean"
    np.testing.assert_allclose(ex.current.values[:, 4:], raw[:, 4:].mean(axis=2))
    c["expert"].value = "max"
    np.testing.assert_allclose(ex.current.values[:, 4:], raw[:, 4:].max(axis=2))
    c["expert"].value = 1
    np.testing.assert_array_equal(ex.current.values, raw[..., 1])
    with ex.hold():
        c["columns"].value = "expert"
        c["component"].value = "mlp.down"
    assert ex.current.col_dim == "expert" and ex.current.cols == (0, 1, 2, 3)
    np.testing.assert_array_equal(ex.current.values, raw[:, 5, :])
    assert c["expert"].disabled and not c["component"].disabled
    assert all(t.disabled for t in c["components"].values())
    assert ex.hover_text(2, 3).startswith("layer 2, expert 3\nalpha per expert: ")
    c["metric"].value = "stable_rank"  # no expert dim: back to components
    assert ex.current.col_dim == "component" and c["columns"].disabled


def test_head_selector_reduces_too():
    ds = with_heads(make_stats(5), n_heads=3)
    ex = explore(ds, "head_norm")
    np.testing.assert_allclose(ex.current.values, ds["head_norm"].mean("head").values)
    ex.controls["head"].value = "min"
    np.testing.assert_allclose(ex.current.values, ds["head_norm"].min("head").values)


def test_step_zero_of_a_series_is_drawn_hatched_with_the_reason_on_hover():
    ds = make_stats(6, checkpoints=2).assign_coords(checkpoint=np.arange(2), step=("checkpoint", [0, 4]))
    values = np.random.default_rng(0).uniform(1, 2, (2, 6, 7))
    values[0] = np.nan
    ds["delta_stable_rank"] = (("checkpoint", "layer", "component"), values, {"long_name": "stable rank of ΔW"})
    reason = np.full((2, 6, 7), "", dtype=object)
    reason[0] = "delta_stable_rank: zero update"
    ds = ds.assign_coords(nan_reason=(("checkpoint", "layer", "component"), reason.astype(str)))
    ex = explore(ds, "delta_stable_rank")
    ex.controls["checkpoint"].value = 0
    assert ex.current is not None, ex.message  # was "Nothing to draw"
    assert ex.current.caption.endswith("zero update")
    assert ex.hover_text(2, "attn.q").endswith("undefined: zero update")


def test_values_in_cells_grow_the_figure_at_30_layers():
    ex = explore(make_stats(30))
    plain = _png_size(ex.figure_png())
    ex.controls["annotate"].value = True
    ex.render()
    grown = _png_size(ex.figure_png())
    assert grown[1] >= plain[1] * 1.4 and grown[0] > plain[0]


def test_labels_are_not_cut_and_sit_next_to_their_controls():
    import ipywidgets as W

    ex = explore(make_stats(6, checkpoints=2))
    c = ex.controls
    for key in ("save_figure", "save_csv", "save_netcdf"):
        assert c[key].layout.width == "auto", key
    for key in ("metric", "checkpoint", "filename", "vmin", "vmax"):
        assert c[key].style.description_width == "initial", key

    def holder(widget):
        stack = list(ex.widget.children)
        while stack:
            box = stack.pop()
            kids = getattr(box, "children", ())
            if widget in kids:
                return box
            stack.extend(kids)
        return None

    for key, label in (("scale", "colour"), ("range", "colour range"), ("view", "view")):
        box = holder(c[key])
        assert isinstance(box.children[0], W.Label) and box.children[0].value == label, key


def test_comparison_click_reads_both_checkpoints_for_the_update(tmp_path, cache):
    import torch

    import toolkit
    from _compare_data import tiny, variant

    base = tiny(tmp_path / "base", num_layers=2, dtype=torch.float32)
    target = variant(base, tmp_path / "target", lambda k, v: v * 1.5 if "layers.1.mlp.up_proj" in k else v)
    diff = toolkit.compare(base, target, ["relative_change"], progress=False)
    ex = explore(diff)
    dd = ex.show_cell(1, "mlp.up")  # W_t = 1.5 W_b: every row moved by half its norm
    assert dd.kinds == ["update_entries", "row_change"], dd.notes
    np.testing.assert_allclose(dd.row_change, 0.5, rtol=1e-6)
    assert "ΔW entries" in dd.titles[0]
    np.testing.assert_array_equal(ex.show_cell(0, "mlp.up").row_change, 0.0)  # untouched matrix
    assert "relative weight change: 0.5\n" in ex.hover_text(1, "mlp.up")


def test_a_component_no_model_has_keeps_its_hatched_column_but_no_toggle():
    ds = make_stats(6, gate=False)  # as BERT: no mlp.gate matrix at all
    ds = ds.assign_coords(parameter_name=ds.parameter_name.where(ds.component != "mlp.gate", ""),
                          n_rows=ds.n_rows.where(ds.component != "mlp.gate", 0),
                          nan_reason=ds.nan_reason.where(ds.component != "mlp.gate", ""))
    ex = explore(ds)
    assert "mlp.gate" not in ex.controls["components"] and ex.absent == ["mlp.gate"]
    assert "mlp.gate" in ex.current.cols  # the column stays (hatched), so datasets of any family line up
    assert ex.hover_text(2, "mlp.gate").endswith("undefined: no mlp.gate matrix in this layer of the model")
    notes = [w.value for row in ex.widget.children for w in getattr(row, "children", ()) if hasattr(w, "value")
             and isinstance(w.value, str)]
    assert any("no mlp.gate in this model" in n for n in notes)
    ds["stable_rank"][1, 0] = np.nan  # a matrix that exists but has no value, and no reason recorded
    assert "NaN for this matrix and the Dataset records no reason" in explore(ds).hover_text(1, "attn.q")


def test_the_ratio_view_of_a_series_opens_on_a_base_that_is_not_all_zero():
    ds = make_stats(6, checkpoints=3).assign_coords(checkpoint=np.arange(3), step=("checkpoint", [0, 2, 4]))
    change = np.random.default_rng(1).uniform(0.01, 0.02, (3, 6, 7))
    change[0] = 0.0  # step 0 against itself
    ds["relative_change"] = (("checkpoint", "layer", "component"), change, {"long_name": "relative change"})
    ex = explore(ds, "relative_change")
    assert ex.controls["base"].value == 1 and ex.controls["target"].value == 2
    ex.controls["view"].value = "ratio"
    assert np.isfinite(ex.current.values).all()  # not empty, as it was with base = step 0
    np.testing.assert_allclose(ex.current.values, change[2] / change[1])


def test_moe_metric_menu_has_no_two_labels_alike():
    """Issue 36, item 5: ``stable_rank`` (mean over experts) and ``stable_rank_per_expert`` had one label."""
    import xarray as xr

    from toolkit.widgets._controls import metric_options

    ds = make_stats(4)
    for name in ("stable_rank", "spectral_norm"):
        per = np.stack([ds[name].values * (1 + 0.1 * e) for e in range(3)], axis=-1)
        ds[f"{name}_per_expert"] = xr.DataArray(per, dims=("layer", "component", "expert"), attrs=ds[name].attrs)
    ds["twin"] = ds["stable_rank"].copy()  # a long_name shared for another reason: the name tells them apart
    ex = explore(ds)
    labels = [label for label, _ in ex.controls["metric"].options]
    assert len(set(labels)) == len(labels)
    options = dict((name, label) for label, name in metric_options(ds, list(ds.data_vars)))
    long_name = ds["stable_rank"].attrs["long_name"]
    assert options["stable_rank_per_expert"] == f"{long_name} (per expert)"
    assert options["twin"] == f"{long_name} (twin)" and options["stable_rank"] == f"{long_name} (stable_rank)"
    assert options["spectral_norm"] == ds["spectral_norm"].attrs["long_name"]


def test_the_drill_down_hint_is_said_once():
    """Issue 36, item 5: the hint was printed under the heatmap and again in the side panel."""
    ex = explore(make_stats(6))
    hint = ex.view.spec["hint"]
    assert hint.startswith("Click a cell")
    assert hint not in ex.cell_text.value and "Click a cell" not in ex.cell_text.value
    ex.show_cell(2, "attn.q")
    ex.cell_panel.clear()
    assert "Click a cell" not in ex.cell_text.value


def test_hover_and_top_cells_of_a_near_constant_panel_tell_values_apart():
    """Issue 36, item 1: RMS all 0.0200 within 0.1 %: top cells were all "0.02"."""
    ds = make_stats(6)
    ds["stable_rank"] = 0.02 * (1 + 1e-3 * ds["stable_rank"] / 0.105)
    ex = explore(ds, "stable_rank")
    p = ex.prepared[0]
    assert p.digits >= 5 and p.caption.startswith("all within")
    import re

    top = re.findall(r"<td>(0\.0200[0-9]*)</td>", ex.top.value)
    assert len(top) == 5 and len(set(top)) == 5
    i, j = np.unravel_index(np.nanargmax(p.values), p.values.shape)
    assert p.format(p.values[i, j]) in ex.hover_text(p.rows[i], p.cols[j])
    assert p.caption in ex.view.spec["panels"][0]["xlabel"]  # said on the page too
