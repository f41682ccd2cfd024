"""alpha_allocation: AlphaPruning's mapping on hand-computed grids, its budget, its mirror, its refusals."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from toolkit.analysis import alpha_allocation
from toolkit.errors import InvalidOptionError


def grid(alpha, rows, cols) -> xr.Dataset:
    """A (layer, component) Dataset of ``alpha`` with the matrix shapes as coordinates."""
    alpha = np.asarray(alpha, dtype=float)
    layers, comps = range(alpha.shape[0]), [f"c{i}" for i in range(alpha.shape[1])]
    shape = alpha.shape
    return xr.Dataset(
        {"alpha": (("layer", "component"), alpha)},
        coords={"layer": list(layers), "component": comps,
                "n_rows": (("layer", "component"), np.broadcast_to(rows, shape)),
                "n_cols": (("layer", "component"), np.broadcast_to(cols, shape))})


def weighted_mean(s: xr.DataArray) -> float:
    w = (s.n_rows * s.n_cols).values.astype(float)
    ok = np.isfinite(s.values)
    return float((s.values[ok] * w[ok]).sum() / w[ok].sum())


def test_three_layers_of_equal_size_by_hand():
    # layer means 2, 3, 4 -> m = 0.8, 1.0, 1.2 (eps 0.2); sum(w m) = sum(w): scale = S
    ds = grid([[1.0, 3.0], [3.0, 3.0], [5.0, 3.0]], 4, 4)
    s = alpha_allocation(ds, 0.5, epsilon=0.2)
    np.testing.assert_allclose(s.values, [[0.4, 0.4], [0.5, 0.5], [0.6, 0.6]], rtol=1e-12)
    assert s.dims == ("layer", "component") and s.name == "sparsity"
    assert s.attrs["units"] == "1" and "2410.10912" in s.attrs["reference"]
    assert s.attrs["budget"] == 0.5 and s.attrs["epsilon"] == 0.2 and s.attrs["allocation"] == "alpha"


def test_the_size_weighted_mean_is_the_budget_exactly():
    # two layers, metrics 1 and 3 -> m = 0.7, 1.3 (eps 0.3); sizes 100 and 300 (w: 2 cells of 10x5, of 10x15)
    # sum(w m) = 100*0.7 + 300*1.3 = 460, sum(w) = 400: s = m * 0.6 * 400 / 460
    ds = grid([[1.0, 1.0], [3.0, 3.0]], 10, [[5, 5], [15, 15]])
    s = alpha_allocation(ds, 0.6, epsilon=0.3)
    np.testing.assert_allclose(s.values[:, 0], [0.7 * 0.6 * 400 / 460, 1.3 * 0.6 * 400 / 460], rtol=1e-12)
    assert weighted_mean(s) == pytest.approx(0.6, abs=1e-15)


@pytest.mark.parametrize("budget", [0.0, 0.1, 0.5, 0.7, 0.8])
def test_random_grids_keep_the_budget_and_order_by_alpha(budget):
    rng = np.random.default_rng(int(budget * 10))
    ds = grid(rng.uniform(2, 6, size=(12, 7)), rng.integers(64, 512, size=(12, 7)), rng.integers(64, 512, size=(12, 7)))
    for granularity in ("layer", "matrix"):
        s = alpha_allocation(ds, budget, epsilon=0.2, granularity=granularity)
        assert weighted_mean(s) == pytest.approx(budget, abs=1e-12)
        metric = ds.alpha.values if granularity == "matrix" else np.repeat(ds.alpha.mean("component").values[:, None],
                                                                            7, axis=1)
        order = np.argsort(metric.ravel(), kind="stable")
        assert (np.diff(s.values.ravel()[order]) >= -1e-15).all()  # monotone: higher alpha, higher sparsity


def test_layer_granularity_gives_one_sparsity_per_layer_and_matrix_its_own():
    ds = grid([[1.0, 5.0], [3.0, 3.0]], 8, 8)
    by_layer = alpha_allocation(ds, 0.5, epsilon=0.2)
    assert np.ptp(by_layer.values, axis=1).max() == 0 and np.allclose(by_layer.values, 0.5)  # both means 3
    by_matrix = alpha_allocation(ds, 0.5, epsilon=0.2, granularity="matrix")
    np.testing.assert_allclose(by_matrix.values, [[0.4, 0.6], [0.5, 0.5]], rtol=1e-12)


def test_reverse_is_the_mirror():
    # symmetric metrics (m = 0.8, 1.0, 1.2 and their mirror): reverse = 2 S - forward
    ds = grid([[2.0], [3.0], [4.0]], 16, 16)
    fwd = alpha_allocation(ds, 0.7, epsilon=0.2)
    rev = alpha_allocation(ds, 0.7, epsilon=0.2, reverse=True)
    np.testing.assert_allclose(rev.values, 1.4 - fwd.values, rtol=1e-12)
    np.testing.assert_allclose(rev.values[::-1], fwd.values, rtol=1e-12)
    assert rev.attrs["allocation"] == "reverse alpha" and weighted_mean(rev) == pytest.approx(0.7, abs=1e-15)


def test_epsilon_zero_and_constant_alpha_are_uniform():
    varied = grid([[2.0, 9.0], [4.0, 3.0]], [[3, 5], [7, 9]], 4)
    np.testing.assert_allclose(alpha_allocation(varied, 0.5, epsilon=0.0).values, 0.5, rtol=1e-12)
    flat = grid([[3.0, 3.0], [3.0, 3.0]], 4, 4)
    np.testing.assert_allclose(alpha_allocation(flat, 0.5).values, 0.5, rtol=1e-12)


def test_nan_alpha_is_left_out_of_the_layer_mean_and_an_unfitted_layer_sits_mid_range():
    # layer means: 2 (the NaN left out), NaN (no fitted matrix -> m = 1), 4 -> m = 0.8, 1.0, 1.2
    ds = grid([[2.0, np.nan], [np.nan, np.nan], [4.0, 4.0]], 4, 4)
    s = alpha_allocation(ds, 0.5, epsilon=0.2)
    np.testing.assert_allclose(s.values, [[0.4, 0.4], [0.5, 0.5], [0.6, 0.6]], rtol=1e-12)
    per_matrix = alpha_allocation(ds, 0.5, epsilon=0.2, granularity="matrix")  # unfitted cells: m = 1
    np.testing.assert_allclose(per_matrix.values, np.array([[0.8, 1.0], [1.0, 1.0], [1.2, 1.2]]) * 0.5 * 6 / 6.2,
                               rtol=1e-12)  # sum(m) = 6.2 over 6 cells of one size


def test_a_missing_matrix_gets_no_sparsity_and_no_weight():
    # column c1 of layer 1 has no matrix (BERT's gate): NaN out, left out of min/max and of the budget
    ds = grid([[1.0, 1.0], [3.0, 99.0]], [[4, 4], [4, 0]], 4)
    s = alpha_allocation(ds, 0.5, epsilon=0.2)
    assert np.isnan(s.values[1, 1])
    # layer metrics 1 and 3 -> m 0.8 (2 cells), 1.2 (1 cell); sum(w m) = 16 (1.6 + 1.2) = 44.8, sum(w) = 48
    np.testing.assert_allclose(s.values[0], 0.8 * 0.5 * 48 / 44.8, rtol=1e-12)
    assert weighted_mean(s) == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize("kwargs, option", [
    ({"sparsity": 1.0}, "sparsity"), ({"sparsity": -0.1}, "sparsity"), ({"sparsity": float("nan")}, "sparsity"),
    ({"sparsity": 0.5, "epsilon": 1.0}, "epsilon"), ({"sparsity": 0.5, "epsilon": -0.1}, "epsilon"),
    ({"sparsity": 0.5, "granularity": "block"}, "granularity"), ({"sparsity": 0.5, "reverse": "yes"}, "reverse"),
])
def test_bad_options_are_one_typed_error(kwargs, option):
    with pytest.raises(InvalidOptionError) as info:
        alpha_allocation(grid([[2.0]], 4, 4), **kwargs)
    assert info.value.option == option and info.value.where == "toolkit.analysis.alpha_allocation"


def test_a_dataset_without_alpha_is_refused_with_the_way_out():
    no_alpha = grid([[2.0]], 4, 4).rename({"alpha": "stable_rank"})
    with pytest.raises(InvalidOptionError, match=r"metrics=\['alpha'\]") as info:
        alpha_allocation(no_alpha, 0.5)
    assert info.value.option == "ds"
    with pytest.raises(InvalidOptionError):
        alpha_allocation(grid([[2.0]], 4, 4).reset_coords(["n_rows", "n_cols"], drop=True), 0.5)


def test_an_epsilon_too_wide_for_the_budget_is_refused_not_clipped():
    # one small layer of high alpha and a big one of low alpha: the small one's sparsity exceeds 1 at S = 0.9
    ds = grid([[1.0], [9.0]], [[100], [1]], 100)
    with pytest.raises(InvalidOptionError, match=r"layer 1 c0 a sparsity of 14.5\d\d >= 1") as info:
        alpha_allocation(ds, 0.9, epsilon=0.9)
    assert info.value.option == "epsilon" and info.value.where == "toolkit.analysis.alpha_allocation"
