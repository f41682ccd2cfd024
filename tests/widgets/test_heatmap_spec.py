"""toolkit.widgets.heatmap_spec: the colour bar the browser is given (issue 45, item 5)."""

from __future__ import annotations

from _stats_data import make_stats
from toolkit.plot import prepare_heatmap
from toolkit.widgets import heatmap_spec


def test_a_constant_panel_gets_one_swatch_colour_and_a_ranged_one_its_gradient():
    ds = make_stats(8)
    ranged = heatmap_spec.colorbar(prepare_heatmap(ds, "stable_rank"))
    ds["stable_rank"] = ds["stable_rank"] * 0 + 1.0
    constant = heatmap_spec.colorbar(prepare_heatmap(ds, "stable_rank"))
    assert constant["constant"] is True and constant["colors"] == ["#fff7ec"]  # the palest of the map
    assert constant["ticks"] == [[0.5, "constant: 1"]]
    assert ranged["constant"] is False and len(ranged["colors"]) == 33 and len(set(ranged["colors"])) > 20
