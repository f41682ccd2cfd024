"""alpha's fit in the explorer: its quality beside it in the drill-down, and the "fit" menu (fix_fingers, xmax)."""

from __future__ import annotations

import numpy as np
import pytest

from _stats_data import make_stats, with_spectra
from toolkit.errors import ToolkitError
from toolkit.metrics.fit_options import FitOptions
from toolkit.widgets import explore
from toolkit.widgets.drilldown import drill_down
from toolkit.widgets.fit_choice import CHOICES, NO_SPECTRA

NAMES = ["alpha", "alpha_xmin", "alpha_xmax", "num_pl_spikes", "alpha_ci_lower", "alpha_ci_upper"]


def _fitted_stats():
    """A 4-layer Dataset with spectra and alpha's fit columns set by hand at layer 1 attn.k and mlp.up."""
    ds = with_spectra(make_stats(4))
    shape = (4, ds.sizes["component"])
    values = {"alpha": 3.0, "alpha_ci_lower": 2.7, "alpha_ci_upper": 3.3, "num_pl_spikes": 120.0,
              "alpha_xmin": 0.5, "alpha_xmax": 40.0}
    for name, v in values.items():
        ds[name] = (("layer", "component"), np.full(shape, v), {"long_name": name, "units": "1"})
    k = list(ds.component.values).index("attn.k")
    ds["alpha"][1, k], ds["alpha_ci_lower"][1, k], ds["alpha_ci_upper"][1, k] = 2.5, 2.0, 3.5
    ds["num_pl_spikes"][1, k], ds["alpha_xmin"][1, k], ds["alpha_xmax"][1, k] = 30, 2.0, 20.0
    return ds


def _same(shown, given) -> bool:
    """``shown`` is ``given`` itself, or ``given`` with the ranking variable added: every variable of ``given``
    in the very same array (not a refit's copy)."""
    extra = set(shown.data_vars) - set(given.data_vars)
    return shown is given or (extra == {"alpha_ci_relative_width"}
                              and all(np.shares_memory(shown[v].values, given[v].values) for v in given.data_vars))


def test_the_drill_down_shows_alpha_with_its_interval_count_and_range():
    ds = _fitted_stats()
    dd = drill_down(ds, 1, "attn.k")
    # hand-computed: width (3.5 - 2.0) / 2.5 = 0.6 > 0.5: marked (the measured interval decides; the tail of
    # 30 < 50 eigenvalues stands in only where there is none, issue 45, item 3)
    assert dd.fit == ["α = 2.5", "95 % interval: 2 to 3.5", "tail: 30 eigenvalues, range λmax / xmin = 10",
                      "uncertain: 95 % interval 2 to 3.5 is 60 % of alpha (> 50 %) (marked on the heatmap)"]
    assert dd.spec()["title"] == " · ".join(dd.fit)
    # width 0.6 / 3 = 0.2, 120 eigenvalues: not marked; range 40 / 0.5 = 80
    assert drill_down(ds, 1, "mlp.up").fit == ["α = 3", "95 % interval: 2.7 to 3.3",
                                               "tail: 120 eigenvalues, range λmax / xmin = 80"]
    assert drill_down(ds.drop_vars("alpha"), 1, "attn.k").fit == []  # no alpha, no fit line


def test_the_explorer_marks_the_uncertain_cell_and_its_drill_down_says_so():
    ex = explore(_fitted_stats(), "alpha")
    marks = ex.current.marks
    assert marks.sum() == 1 and marks[1, list(ex.current.cols).index("attn.k")]
    dd = ex.show_cell(1, "attn.k")
    assert any(line.endswith("(marked on the heatmap)") for line in dd.fit)
    assert ex.drill.spec["title"].startswith("α = 2.5 · ")


def test_a_marked_cell_is_uncertain_in_the_drill_down_title_and_hover_whatever_the_stored_label():
    """The stored quality label said "ok" for cells the heatmap marks (81 of 157 in a real run): the ESD's
    title and the hover give the mark's verdict (toolkit.plot.fit_marks) instead."""
    from toolkit.plot.fit_marks import uncertain_alpha

    ds = _fitted_stats()
    ds = ds.assign_coords(quality=(("layer", "component"), np.full(ds["alpha"].shape, "ok")))
    k = list(ds.component.values).index("mlp.up")
    ds["num_pl_spikes"][2, k] = 48  # the tail is short and no interval was measured: the tail decides
    ds["alpha"][2, k] = 4.06
    ds["alpha_ci_lower"][2, k], ds["alpha_ci_upper"][2, k] = np.nan, np.nan
    assert bool(uncertain_alpha(ds).sel(layer=2, component="mlp.up"))
    dd = drill_down(ds, 2, "mlp.up")
    assert "α = 4.06 (uncertain: 48 tail eigenvalues < 50)" in dd.esd.title
    assert "(ok)" not in dd.esd.title
    assert drill_down(ds, 0, "mlp.up").esd.title.endswith("α = 3 (ok)")  # unmarked: the stored label
    ex = explore(ds, "alpha")
    assert "uncertain: 48 tail eigenvalues < 50" in ex.hover_text(2, "mlp.up")
    spec = ex.view.spec["panels"][0]
    said = np.array([["uncertain:" in h for h in row] for row in spec["hover"]])
    np.testing.assert_array_equal(said, np.asarray(spec["marks"]))  # one verdict: the marked cells, no other


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    import toolkit
    from toolkit.testing import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path_factory.mktemp("fit") / "m", "llama", num_layers=2)

    def run(**fit):
        return toolkit.weight_stats(path, NAMES, progress=False, cache=False, keep_spectra=True,
                                    fit=FitOptions(**fit))

    return {"default": run(), "clip": run(fix_fingers="clip_xmax"), "xmax": run(xmax=1)}


def test_the_fit_menu_refits_from_the_stored_spectra(measured):
    ex = explore(measured["default"], "alpha")
    menu = ex.controls["fit"]
    assert list(menu.options) == list(CHOICES) and menu.value == "default" and not menu.disabled
    n = ex.renders
    menu.value = "fix_fingers='clip_xmax'"
    assert ex.renders > n
    np.testing.assert_array_equal(ex.ds.alpha.values, measured["clip"].alpha.values)
    np.testing.assert_array_equal(ex.current.values, measured["clip"].alpha.values)
    assert ex.fit_choice.fit == FitOptions(fix_fingers="clip_xmax")
    # the opened cell's drill-down draws the fit shown
    dd = ex.show_cell(1, "mlp.down")
    assert dd.esd.alpha == float(measured["clip"].alpha.sel(layer=1, component="mlp.down"))
    menu.value = "xmax=1: largest eigenvalue left out"
    np.testing.assert_array_equal(ex.ds.alpha.values, measured["xmax"].alpha.values)
    assert ex.cell is not None and ex.cell.esd.alpha == float(measured["xmax"].alpha.sel(layer=1, component="mlp.down"))
    menu.value = "default"
    # the measured Dataset itself, not a refit of it (with alpha's interval ranked beside it: the same arrays)
    assert _same(ex.ds, measured["default"])


def test_explore_starts_from_a_fit_given(measured):
    ex = explore(measured["default"], "alpha", fit={"fix_fingers": "clip_xmax"})
    assert ex.controls["fit"].value == "fix_fingers='clip_xmax'"
    np.testing.assert_array_equal(ex.ds.alpha.values, measured["clip"].alpha.values)
    # measured with clip_xmax: the menu starts there, and "default" refits back to the default's numbers
    ex = explore(measured["clip"], "alpha")
    assert ex.controls["fit"].value == "fix_fingers='clip_xmax'"
    ex.controls["fit"].value = "default"
    np.testing.assert_array_equal(ex.ds.alpha.values, measured["default"].alpha.values)
    # options off the menu get an entry of their own
    ex = explore(measured["default"], "alpha", fit=FitOptions(fix_fingers="clip_xmax", max_fingers=4))
    assert ex.controls["fit"].value == "fix_fingers='clip_xmax', max_fingers=4"


def test_without_spectra_the_menu_is_disabled_and_a_fit_cannot_be_given(measured):
    plain = measured["default"].drop_vars("eigenvalues")
    ex = explore(plain, "alpha")
    assert ex.controls["fit"].disabled and ex.controls["fit"].tooltip == NO_SPECTRA
    with pytest.raises(ToolkitError, match="keep_spectra=True"):
        explore(plain, "alpha", fit={"xmax": 1})
    assert _same(explore(plain, "alpha", fit={}).ds, plain)  # the options it was measured with: nothing to refit
    no_fit = explore(make_stats(4))
    assert no_fit.controls["fit"].layout.display == "none"  # no fit column: no menu


def test_the_menu_waits_while_a_pass_measures(measured):
    from toolkit.widgets.explorer import Explorer

    ex = Explorer(measured["default"], "alpha", pending=True)  # as the live view makes it
    assert ex.controls["fit"].disabled
    ex.set_data(measured["default"])  # newer cells, still measuring
    assert ex.controls["fit"].disabled
    ex.pending = False  # the pass ended
    assert not ex.controls["fit"].disabled
    ex.set_data(measured["default"])
    assert not ex.controls["fit"].disabled


def test_the_mark_limit_is_set_in_the_explorer():
    """Issue 45, item 3: the stated limit of the mark is a control (shown with alpha); the marks, the notes and the
    hover follow it. By hand: widths (3.5 - 2.0) / 2.5 = 0.6 (layer 1 attn.k) and 0.6 / 3 = 0.2 (every other cell)."""
    ex = explore(_fitted_stats(), "alpha")
    c = ex.controls
    assert c["mark_width"].value == 0.5 and c["mark_width"].layout.display == ""
    assert ex.current.marks.sum() == 1
    c["mark_width"].value = 0.7  # no interval is wider than 70 % of alpha: no mark
    assert ex.current.marks.sum() == 0 and ex.current.mark_width == 0.7
    c["mark_width"].value = 0.15  # every cell's interval (0.2, 0.6) is wider than 15 % of alpha
    assert ex.current.marks.all()
    assert "95 % interval > 15 % of alpha" in ex.view.spec["panels"][0]["xlabel"]
    assert "(> 15 %)" in ex.hover_text(0, "attn.q")
    c["metric"].value = "num_pl_spikes"
    assert c["mark_width"].layout.display == "none"  # the mark is alpha's


def test_the_metric_menu_ranks_alphas_interval_from_trust_to_do_not():
    """Issue 45, item 3: the interval's relative width is a metric the explorer offers (a heatmap ranking the
    cells), computed anew from the shown fit's interval. By hand: (3.5 - 2.0) / 2.5 = 0.6 at layer 1 attn.k,
    (3.3 - 2.7) / 3 = 0.2 everywhere else; the stated limit (0.5) lies between them."""
    ex = explore(_fitted_stats(), "alpha")
    options = [value for _, value in ex.controls["metric"].options]
    assert "alpha_ci_relative_width" in options
    ex.controls["metric"].value = "alpha_ci_relative_width"
    values = ex.current.values
    k = list(ex.current.cols).index("attn.k")
    assert values[1, k] == pytest.approx(0.6)
    others = np.delete(values.ravel(), 1 * values.shape[1] + k)
    np.testing.assert_allclose(others, 0.2)
    assert ex.current.long_name == "relative width of alpha's 95 % interval"
    assert "alpha_ci_relative_width" not in _fitted_stats()  # the Dataset given is left as it was


def test_the_exported_page_offers_the_ranking_too():
    from toolkit.widgets.export import page_data

    page = page_data(_fitted_stats(), metrics=["alpha", "alpha_ci_relative_width"])
    assert page["metrics"] == ["alpha", "alpha_ci_relative_width"]
    cbar = page["heatmaps"]["alpha_ci_relative_width"]["panels"][0]["cbar"]
    assert "relative width of alpha's 95 % interval" in cbar["label"]
