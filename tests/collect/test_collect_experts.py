"""The expert dimension of the grid, on hand-made cells: means, NaN propagation, names, attrs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toolkit.collect.assemble.grid import build_grid_dataset
from toolkit.collect.cells import Cell
from toolkit.metrics.registry import resolve_metrics

METRICS = resolve_metrics(["frobenius_norm", "stable_rank"], kind="weight")


def _cell(name, fro, sr, reasons=None):
    return Cell(name, (4, 8), {"frobenius_norm": fro, "stable_rank": sr}, dict(reasons or {}))


def test_mean_over_experts_and_nan_propagation():
    name = "model.layers.1.mlp.experts.{}.gate_proj.weight"
    cells = {(0, "attn.q"): _cell("model.layers.0.self_attn.q_proj.weight", 1.0, 2.0),
             (1, "mlp.router"): _cell("model.layers.1.mlp.gate.weight", 0.5, 1.5)}
    cells.update({(1, "mlp.gate", e): _cell(name.format(e), fro, 1.0 + e)
                  for e, fro in enumerate([1.0, 2.0, 4.0, 9.0])})
    cells[(1, "mlp.gate", 2)].values["stable_rank"] = math.nan
    cells[(1, "mlp.gate", 2)].reasons["stable_rank"] = "all zeros"
    ds = build_grid_dataset(2, cells, METRICS, {"model_type": "x"})
    assert list(ds.component.values)[7:] == ["mlp.router"]  # extras only where the model has them
    assert ds.frobenius_norm.sel(layer=1, component="mlp.gate").item() == 4.0  # (1 + 2 + 4 + 9) / 4
    assert math.isnan(ds.stable_rank.sel(layer=1, component="mlp.gate").item())  # one expert NaN: the mean is NaN
    assert "expert 2: all zeros" in ds.nan_reason.sel(layer=1, component="mlp.gate").item()
    np.testing.assert_array_equal(ds.frobenius_norm_per_expert.sel(layer=1, component="mlp.gate"), [1, 2, 4, 9])
    assert np.isnan(ds.frobenius_norm_per_expert.sel(layer=0)).all()
    assert ds.parameter_name.sel(layer=1, component="mlp.gate").item() == name.format("*")
    assert ds.parameter_name_per_expert.sel(layer=1, component="mlp.gate", expert=3).item() == name.format(3)
    assert ds.n_rows.sel(layer=1, component="mlp.gate").item() == 4
    assert ds.num_experts == 4 and list(ds.moe_layers) == [1]
    assert ds.moe_layers.dtype == np.int64
    assert "MoE layers (layers 1; Dataset attr moe_layers)" in ds.frobenius_norm.attrs["expert_reduction"]
    assert ds.frobenius_norm_per_expert.attrs["long_name"] == ds.frobenius_norm.attrs["long_name"]


def test_dense_grid_is_unchanged():
    ds = build_grid_dataset(1, {(0, "attn.q"): _cell("q", 1.0, 2.0)}, METRICS, {})
    assert list(ds.component.values) == ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.up", "mlp.down", "mlp.gate"]
    assert "expert" not in ds.dims and "moe_layers" not in ds.attrs
    assert "expert_reduction" not in ds.frobenius_norm.attrs


@pytest.mark.parametrize("names, want", [
    (["a.experts.0.w1", "a.experts.1.w1"], "a.experts.*.w1"),
    (["l.1.experts.1.w1.weight", "l.1.experts.2.w1.weight"], "l.1.experts.*.w1.weight"),
    (["layers.1.stack#expert=0", "layers.1.stack#expert=1"], "layers.1.stack#expert=*"),
    (["layers.1.stack", "layers.1.stack"], "layers.1.stack"),  # a GGUF stack read whole: one name
])
def test_name_of_the_mean_cell(names, want):
    from toolkit.collect.assemble.experts import _pattern

    experts = [1, 2] if names[0].startswith("l.1") else list(range(len(names)))
    assert _pattern(names, experts) == want
