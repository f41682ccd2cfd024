"""The explorer's parts, each built on its own over a hand-made (layer x component) Dataset: the model set and
its panels, the cell panel (top cells, hover text, opening and following a cell), the saver, the controls."""

import csv
import io
import re

import numpy as np
import pytest
import xarray as xr

from toolkit.errors import EmptyInputError
from toolkit.widgets.cell_panel import CellPanel
from toolkit.widgets.cells import PanelFacts, Shown
from toolkit.widgets.control_panel import ControlPanel
from toolkit.widgets.heatmap_view import HeatmapView
from toolkit.widgets.model_set import ModelSet
from toolkit.widgets.saver import Saver

V = np.array([[1.5, 2.0, 3.25], [4.0, 0.5, 6.0], [7.5, 8.0, 2.5]])
COMPONENTS = ["attn.q", "attn.k", "mlp.up"]
SELECTION = dict(metric="stable_rank", scale="auto", robust=False, layers=(0, 2), components=None, vmin=None,
                 vmax=None)


def _ds(values=V):
    return xr.Dataset({"stable_rank": (("layer", "component"), values, {"long_name": "Stable rank"})},
                      coords={"layer": [0, 1, 2], "component": COMPONENTS})


def _shown(models: ModelSet, **selection) -> Shown:
    metric, panels, prepared, _ = models.prepare({**SELECTION, **selection})
    return Shown(panels, prepared, [PanelFacts(p, q, metric) for p, q in zip(panels, prepared, strict=True)])


def _top(panel: CellPanel) -> list[tuple]:
    return re.findall(r"<tr><td>(\d)</td><td>([^<]+)</td><td>([^<]+)</td></tr>", panel.top.value)


def test_the_model_set_makes_the_panels_of_each_view():
    models = ModelSet([_ds(np.zeros((3, 3))), _ds(V), _ds(2 * V)], labels=["zero", "a", "b"])
    assert [e[0] for e in models.entries] == ["zero", "a", "b"] and models.ds is models.models[0][1]
    assert models.default_base("stable_rank") == 1  # "zero" is all 0: a ratio over it would be empty
    assert [p.label for p in models.panel_list("side")] == ["zero", "a", "b"]
    assert [p.label for p in models.panel_list("one")] == ["zero"]
    metric, panels, prepared, shared = models.prepare(SELECTION, view="difference", base=1, target=2)
    assert metric == "stable_rank" and not shared and panels[0].combine == "difference"
    assert panels[0].label == "b" and panels[0].base[0] == "a"
    np.testing.assert_array_equal(prepared[0].values, V)  # 2V - V
    _, _, ratio, _ = models.prepare(SELECTION, view="ratio", base=1, target=2)
    np.testing.assert_array_equal(ratio[0].values, np.full((3, 3), 2.0))
    _, _, side, shared = models.prepare(SELECTION, view="side", shared_range=True)
    assert shared and len(side) == 3 and len({(q.vmin, q.vmax) for q in side}) == 1  # one colour scale


def test_the_model_set_takes_newer_data_under_the_same_label():
    models = ModelSet(_ds(), labels=["m"], pending=True)
    assert models.pending is True and models.fit_choice.dropdown.disabled
    models.set_data(_ds(V + 10))
    assert models.models[0][0] == "m" and len(models.entries) == 1
    np.testing.assert_array_equal(models.ds["stable_rank"].values, V + 10)


def test_the_cell_panel_lists_the_top_cells_and_the_hover_text():
    panel = CellPanel(HeatmapView(), read_entries=False)
    panel.update(_shown(ModelSet(_ds(), labels=["m"])))
    assert _top(panel) == [("2", "attn.k", "8.00"), ("2", "attn.q", "7.50"), ("1", "mlp.up", "6.00"),
                           ("1", "attn.q", "4.00"), ("0", "mlp.up", "3.25")]  # one column, three digits each
    panel.rank.value = "lowest"  # redrawn by the panel's own toggle
    assert [v for _, _, v in _top(panel)] == ["0.500", "1.50", "2.00", "2.50", "3.25"]
    assert panel.hover_text(1, "attn.k") == "layer 1, attn.k\nStable rank: 0.5"
    with pytest.raises(ValueError, match="no cell at layer 5"):
        panel.hover_text(5, "attn.k")


def test_the_cell_panel_opens_follows_and_clears_a_cell():
    view = HeatmapView()
    panel = CellPanel(view, read_entries=False)
    models = ModelSet(_ds(), labels=["m"])
    panel.update(_shown(models))
    dd = panel.show_cell(2, "mlp.up")
    assert view.selected == [0, 2, 2] and panel.opened == (2, "mlp.up") and panel.cell is dd
    assert "layer 2, mlp.up" in panel.cell_text.value and "Stable rank: 2.5" in panel.cell_text.value
    assert any("read_entries=False" in n for n in dd.notes) and panel.spectrum_thread() is None
    panel.update(_shown(models, layers=(1, 2)))  # still shown: kept open, at its new row
    assert view.selected == [0, 1, 2] and panel.opened == (2, "mlp.up")
    panel.update(_shown(models, layers=(0, 1)))  # no longer shown: cleared
    assert view.selected == [] and panel.opened is None and panel.cell is None and panel.cell_text.value == ""
    panel.update(Shown(message="nothing"))
    assert panel.top.value == ""
    with pytest.raises(EmptyInputError, match="nothing"):
        panel.show_cell(0, "attn.q")


def test_the_cell_panel_hint_promises_only_what_a_cell_gives():
    panel = CellPanel(HeatmapView(), read_entries=False)
    panels = _shown(ModelSet(_ds(), labels=["m"])).panels
    assert "No spectrum is stored" in panel.hint(panels)
    assert "spectra are per matrix" in panel.hint(panels, per_matrix=False)
    assert panel.hint([]) == ""


def test_the_saver_writes_the_numbers_shown(tmp_path):
    shown = _shown(ModelSet(_ds(), labels=["m"]))
    ds = _ds()
    saver = Saver(tmp_path, "mine", shown=lambda: shown, models=lambda: [("m", ds)],
                  describe=lambda: ["stable_rank", "layers0-1"])
    path = saver.save_csv()
    assert path == tmp_path / "mine_stable_rank_layers0-1.csv"
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert len(rows) == 9 and {r["panel"] for r in rows} == {"m"}
    for r in rows:
        assert float(r["stable_rank"]) == float(ds["stable_rank"].sel(layer=int(r["layer"]),
                                                                      component=r["component"]))
    assert saver.save_csv() == tmp_path / "mine_stable_rank_layers0-1-2.csv"  # never overwritten
    saver.controls["filename"].value = " "
    nc = saver.save_netcdf()
    assert nc == tmp_path / "statistics.nc"
    np.testing.assert_array_equal(xr.open_dataset(nc)["stable_rank"].values, V)
    saver.controls["format"].value = "svg"
    saver.controls["save_figure"].click()  # the button: saved, and said in the status line
    assert (tmp_path / "statistics_stable_rank_layers0-1.svg").read_bytes().lstrip().startswith(b"<?xml")
    assert "statistics_stable_rank_layers0-1.svg" in saver.status.value


def test_the_saver_says_why_nothing_is_saved(tmp_path):
    saver = Saver(tmp_path, "mine", shown=lambda: Shown(message="no layers"), models=lambda: [],
                  describe=lambda: [])
    with pytest.raises(EmptyInputError, match="no figure to save: no layers"):
        saver.save_figure()
    saver.report(saver.save_csv)
    assert saver.status.value == "Could not save: no numbers to save: no layers"
    assert list(tmp_path.iterdir()) == []


def test_the_control_panel_selects_and_names_what_is_drawn():
    models = ModelSet(_ds(), labels=["m"])
    panel = ControlPanel(models, ["stable_rank"])
    c = panel.controls
    assert panel.selection() == SELECTION | dict(scale="auto", robust=True, components=COMPONENTS,
                                                               mark_width=0.5)
    c["components"]["attn.k"].value = False
    c["vmin"].value, c["vmax"].value = "abc", "7"
    c["layers"].value = (1, 2)
    kws = panel.selection()
    assert kws["components"] == ["attn.q", "mlp.up"] and (kws["vmin"], kws["vmax"]) == (None, 7.0)
    assert "&#x27;abc&#x27; is not a number" in panel.limits_note.value
    assert panel.describe() == ["stable_rank", "", "", "layers1-2"] and panel.view() == "one"
    assert panel.pair() == {} and not panel.shared_range() and panel.per_matrix()
    changes = []
    panel.observe(lambda ch: changes.append(("metric", ch["new"])), lambda ch: changes.append(("other", ch["new"])))
    c["scale"].value = "log"
    assert changes == [("other", "log")]
