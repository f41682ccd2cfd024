"""The mark of an uncertain alpha: which cells get it (hand-built Dataset), drawn by matplotlib and sent to the page."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

from toolkit.plot import draw_heatmap, prepare_heatmap  # noqa: E402
from toolkit.plot.fit_marks import MAX_RELATIVE_WIDTH, MIN_TAIL, mark_note, uncertain_alpha  # noqa: E402

NAN = np.nan
# rows: layers 0, 1, 2; columns: attn.q, attn.k
ALPHA = [[4.0, 4.0], [3.0, NAN], [2.0, 2.0]]
LOWER = [[3.5, 2.9], [2.9, NAN], [1.5, NAN]]
UPPER = [[4.5, 5.1], [3.1, NAN], [2.5, NAN]]
TAIL = [[200, 200], [30, 10], [200, 49]]
# (0, q): width 1.0 / 4 = 0.25, 200 eigenvalues: fine
# (0, k): width 2.2 / 4 = 0.55 > 0.5: marked
# (1, q): width 0.2 / 3, with 30 < 50 eigenvalues: not marked, the measured interval decides (issue 45, item 3:
#         the tail's size stands in only where no interval was measured)
# (1, k): no alpha: nothing to mark (its tail of 10 does not matter)
# (2, q): width 1.0 / 2 = 0.5, exactly the limit: not marked (the limit is "wider than")
# (2, k): no interval, 49 < 50 eigenvalues: marked
EXPECTED = np.array([[False, True], [False, False], [False, True]])


def _ds(**drop) -> xr.Dataset:
    dims = ("layer", "component")
    ds = xr.Dataset(coords={"layer": [0, 1, 2], "component": ["attn.q", "attn.k"]})
    for name, values in (("alpha", ALPHA), ("alpha_ci_lower", LOWER), ("alpha_ci_upper", UPPER),
                         ("num_pl_spikes", TAIL)):
        if name not in drop:
            ds[name] = (dims, np.asarray(values, dtype=float), {"long_name": name, "units": "1"})
    return ds


def test_the_limits_are_the_stated_ones():
    assert (MAX_RELATIVE_WIDTH, MIN_TAIL) == (0.5, 50)
    assert "50 %" in mark_note() and "< 50 eigenvalues" in mark_note()


def test_cells_beyond_either_limit_are_marked():
    np.testing.assert_array_equal(uncertain_alpha(_ds()).values, EXPECTED)
    np.testing.assert_array_equal(prepare_heatmap(_ds(), "alpha").marks, EXPECTED)


def test_each_limit_alone():
    # the interval alone: (0, k) only ((2, k) has none, (1, q) is narrow)
    np.testing.assert_array_equal(uncertain_alpha(_ds(num_pl_spikes=1)).values,
                                  [[False, True], [False, False], [False, False]])
    # the tail alone: (1, q) and (2, k)
    np.testing.assert_array_equal(uncertain_alpha(_ds(alpha_ci_lower=1, alpha_ci_upper=1)).values,
                                  [[False, False], [True, False], [False, True]])
    # a stricter width: (2, q) at 0.5 and (0, q) at 0.25 now too
    np.testing.assert_array_equal(uncertain_alpha(_ds(num_pl_spikes=1), max_relative_width=0.2).values,
                                  [[True, True], [False, False], [True, False]])


def test_no_marks_without_the_facts_or_for_another_metric():
    assert uncertain_alpha(_ds(alpha_ci_lower=1, alpha_ci_upper=1, num_pl_spikes=1)) is None
    assert prepare_heatmap(_ds(alpha_ci_lower=1, alpha_ci_upper=1, num_pl_spikes=1), "alpha").marks is None
    assert prepare_heatmap(_ds(), "alpha_ci_lower").marks is None
    assert prepare_heatmap(_ds()["alpha"]).marks is None  # a DataArray carries no quality columns


def test_the_marks_follow_the_selection():
    p = prepare_heatmap(_ds(), "alpha", layers=(1, 2), components=["attn.k"])
    np.testing.assert_array_equal(p.marks, EXPECTED[1:, 1:])
    stacked = xr.concat([_ds(), _ds(alpha_ci_lower=1, alpha_ci_upper=1)], dim="checkpoint")
    stacked = stacked.assign_coords(checkpoint=["a", "b"])
    np.testing.assert_array_equal(prepare_heatmap(stacked, "alpha", checkpoint="a").marks, EXPECTED)


def test_the_figure_draws_the_corner_and_says_what_it_means():
    p = prepare_heatmap(_ds(), "alpha")
    ax = draw_heatmap(p)
    try:
        corners = [patch for patch in ax.patches if patch.get_gid() == "alpha-uncertain"]
        assert len(corners) == 2
        # each corner touches its cell's top-right point: (col + 1, row + 1)
        tops = sorted(tuple(np.round(c.get_xy().max(axis=0), 6)) for c in corners)
        assert tops == [(2.0, 1.0), (2.0, 3.0)]  # (0, k), (2, k) as (col + 1, row + 1)
        assert mark_note() in ax.get_xlabel()
    finally:
        plt.close(ax.figure)
    plain = draw_heatmap(prepare_heatmap(_ds(), "alpha_ci_upper"))
    try:
        assert not [c for c in plain.patches if c.get_gid() == "alpha-uncertain"]
        assert mark_note() not in plain.get_xlabel()
    finally:
        plt.close(plain.figure)


def test_the_page_gets_the_same_marks():
    from toolkit.widgets.heatmap_spec import panel

    p = prepare_heatmap(_ds(), "alpha")
    got = panel(p, [[""] * 2] * 3)
    assert got["marks"] == EXPECTED.tolist()
    assert mark_note() in got["xlabel"]
    assert panel(prepare_heatmap(_ds(), "alpha_ci_lower"), [[""] * 2] * 3)["marks"] is None


@pytest.mark.parametrize("alpha,lo,hi,marked", [(4.0, 3.0, 5.0, False), (4.0, 3.0, 5.01, True), (6.0, 4.6, 7.6, False)])
def test_the_width_is_relative_to_alpha(alpha, lo, hi, marked):
    ds = xr.Dataset({name: (("layer", "component"), [[v]]) for name, v in
                     (("alpha", alpha), ("alpha_ci_lower", lo), ("alpha_ci_upper", hi))},
                    coords={"layer": [0], "component": ["attn.q"]})
    assert bool(uncertain_alpha(ds).values[0, 0]) is marked


def test_the_relative_width_is_a_metric_that_ranks_the_cells():
    """Issue 45, item 3: (hi - lo) / alpha by hand: 1/4, 2.2/4, 0.2/3, none, 1/2, none."""
    from toolkit.plot.fit_marks import WIDTH_NAME, relative_width, with_relative_width
    from toolkit.plot.scale_rules import domain

    width = relative_width(_ds())
    np.testing.assert_allclose(width.values, [[0.25, 0.55], [0.2 / 3, NAN], [0.5, NAN]])
    assert width.name == WIDTH_NAME and domain(WIDTH_NAME, width.attrs) == (0.0, np.inf)
    ds = with_relative_width(_ds())
    assert with_relative_width(ds) is ds and relative_width(_ds(alpha_ci_upper=1)) is None
    p = prepare_heatmap(ds, WIDTH_NAME)  # a heatmap of its own: from "trust" (0.067) to "do not" (0.55)
    assert p.scale == "sequential" and p.long_name == "relative width of alpha's 95 % interval"


def test_the_mark_limit_is_a_stated_parameter():
    strict = prepare_heatmap(_ds(), "alpha", mark_width=0.2)  # (0, q) at 0.25 and (2, q) at 0.5 now too
    np.testing.assert_array_equal(strict.marks, [[True, True], [False, False], [True, True]])
    assert "95 % interval > 20 % of alpha" in "\n".join(strict.notes)
    lax = prepare_heatmap(_ds(), "alpha", mark_width=0.6)
    np.testing.assert_array_equal(lax.marks, [[False, False], [False, False], [False, True]])  # only the proxy
    from toolkit.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="mark_width"):
        prepare_heatmap(_ds(), "alpha", mark_width=0)


def test_the_interval_that_chooses_xmin_again_is_read_first():
    """With both intervals in the Dataset, the default one (xmin chosen again) decides the mark, the relative width,
    the verdict and the hover; with only the one holding xmin, that one does (issue 44: the default interval)."""
    from toolkit.plot.fit_marks import cell_verdict, interval_columns, relative_width
    from toolkit.widgets.cells import fit_quality_lines

    held = _ds()
    both = held.assign(alpha_ci_xmin_lower=xr.full_like(held.alpha, 1.0), alpha_ci_xmin_upper=held.alpha * 2)
    # xmin chosen again: (0, q) 1 to 8 around 4 is 175 % wide: marked; (0, k) and the others likewise where finite
    assert interval_columns(both) == ("alpha_ci_xmin_lower", "alpha_ci_xmin_upper")
    assert interval_columns(held) == ("alpha_ci_lower", "alpha_ci_upper")
    assert interval_columns({"alpha_ci_xmin_lower": 1.0}) is None
    np.testing.assert_allclose(relative_width(both).values, (2 * np.asarray(ALPHA) - 1) / np.asarray(ALPHA))
    np.testing.assert_allclose(relative_width(held).values,
                               (np.asarray(UPPER) - np.asarray(LOWER)) / np.asarray(ALPHA))
    assert cell_verdict(both, 0, "attn.q").startswith("uncertain: 95 % interval 1 to 8 ")
    assert cell_verdict(held, 0, "attn.q") == ""
    assert fit_quality_lines({"alpha_ci_lower": 3.5, "alpha_ci_upper": 4.5, "alpha_ci_xmin_lower": 1.0,
                              "alpha_ci_xmin_upper": 8.0})[0] == "95 % interval: 1 to 8"
    assert fit_quality_lines({"alpha_ci_lower": 3.5, "alpha_ci_upper": 4.5})[0] == "95 % interval: 3.5 to 4.5"
