"""The reading of notebook 05 says what the numbers say, whichever way they fall; the three allocations share
one budget."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from toolkit.analysis.sweep import ALLOCATIONS, allocation_for, reading


def result(table: dict, dense: float = 20.0) -> dict:
    """A pruning_sweep result from ``{sparsity: (uniform, alpha, reverse)}`` perplexities."""
    rows = [{"sparsity": s, "allocation": a, "perplexity": p}
            for s, values in table.items() for a, p in zip(ALLOCATIONS, values, strict=True)]
    return {"dense_perplexity": dense, "tokens": 1536, "rows": rows,
            "settings": {"epsilon": 0.2, "sparsities": list(table)}}


def test_the_predicted_order_holding_everywhere():
    text = reading(result({0.5: (40.0, 30.0, 50.0), 0.7: (400.0, 300.0, 900.0)}))
    assert text.startswith("On this model and text the allocation AlphaPruning predicts")
    assert "At 50% sparsity: uniform 40.0, alpha-allocated 30.0 (0.75x of uniform), reverse 50.0 (1.25x)" in text
    assert "best to worst: alpha, uniform, reverse alpha. The predicted order holds." in text
    assert "Perplexities up to 900 mean the pruned model no longer writes usable text" in text


def test_the_predicted_order_failing_or_mixed_is_said_so():
    none = reading(result({0.5: (30.0, 40.0, 35.0)}))
    assert "held at none of the sparsities tried" in none and "does not hold" in none
    assert "no longer writes usable text" not in none  # 40 is not 10x the dense 20
    mixed = reading(result({0.5: (30.0, 25.0, 35.0), 0.7: (300.0, 350.0, 200.0)}))
    assert "held at 50% but not at 70%." in mixed


def test_the_three_allocations_spend_one_budget():
    rng = np.random.default_rng(1)
    ds = xr.Dataset({"alpha": (("layer", "component"), rng.uniform(2, 8, (6, 3)))},
                    coords={"layer": range(6), "component": ["a", "b", "c"],
                            "n_rows": (("layer", "component"), rng.integers(8, 64, (6, 3))),
                            "n_cols": (("layer", "component"), rng.integers(8, 64, (6, 3)))})
    w = (ds.n_rows * ds.n_cols).values
    shares = {name: allocation_for(ds, name, 0.6, epsilon=0.2).values for name in ALLOCATIONS}
    for s in shares.values():
        assert (s * w).sum() / w.sum() == pytest.approx(0.6, abs=1e-12)
    assert np.allclose(shares["uniform"], 0.6)
    assert np.corrcoef(shares["alpha"].ravel(), shares["reverse alpha"].ravel())[0, 1] < -0.99
    with pytest.raises(ValueError, match="unknown allocation 'random'"):
        allocation_for(ds, "random", 0.6)
