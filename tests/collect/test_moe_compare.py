"""``compare`` and ``compare_series`` per routed expert: which experts did the update move?

The target is the base with one expert's matrix changed by hand, so the
answer is known: ``relative_change_per_expert`` is ‖ΔW‖_F / ‖W‖_F (computed
here with torch) for that expert and 0 for every other, and
``update_sparsity_per_expert`` is the fraction of unchanged entries.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import toolkit
from toolkit.testing import write_tiny_moe_checkpoint

METRICS = ["relative_change", "update_sparsity"]


def _edited(base, folder, name: str, edit):
    """A copy of ``base`` with tensor ``name`` replaced by ``edit(tensor)``; returns (before, after)."""
    shutil.copytree(base, folder)
    state = load_file(folder / "model.safetensors")
    before = state[name].clone()
    state[name] = edit(state[name].clone())
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    return before, state[name]


@pytest.mark.parametrize("family, name, component, expert, cut", [
    # per-expert 2-D tensors: expert 1's up projection, first 5 rows
    ("qwen3_moe", "model.layers.2.mlp.experts.1.up_proj.weight", "mlp.up", 1, lambda w: w),
    # a gpt-oss stack: expert 2's gate columns (every other column of gate_up_proj[2], stored (in, out))
    ("gpt_oss", "model.layers.1.mlp.experts.gate_up_proj", "mlp.gate", 2, lambda w: w[2][:, ::2].T),
])
def test_compare_finds_the_one_expert_that_moved(family, name, component, expert, cut, tmp_path):
    base = write_tiny_moe_checkpoint(tmp_path / "base", family)

    def edit(w):
        if w.ndim == 3:
            w[2, :5, ::2] += 0.5  # 5 input rows of expert 2's gate (the even columns)
        else:
            w[:5] += 0.5
        return w

    before, after = _edited(base, tmp_path / "target", name, edit)
    layer = int(name.split(".")[2])
    ds = toolkit.compare(base, tmp_path / "target", METRICS, progress=False, cache=False)
    moved = ds.relative_change_per_expert.sel(layer=layer, component=component)
    w0, w1 = cut(before).double(), cut(after).double()
    want = (torch.linalg.matrix_norm(w1 - w0) / torch.linalg.matrix_norm(w0)).item()
    assert moved.sel(expert=expert).item() == pytest.approx(want, rel=1e-9)
    others = moved.drop_sel(expert=expert).values
    np.testing.assert_array_equal(others, 0.0)
    sparsity = ds.update_sparsity_per_expert.sel(layer=layer, component=component, expert=expert).item()
    assert sparsity == pytest.approx(float((w1 == w0).double().mean()))
    assert ds.relative_change.sel(layer=layer, component=component).item() == pytest.approx(want / 4, rel=1e-9)
    rest = ds.relative_change_per_expert.where(ds.relative_change_per_expert.component != component)
    assert float(rest.max()) == 0.0


def test_compare_series_keeps_the_expert_dimension(tmp_path):
    base = write_tiny_moe_checkpoint(tmp_path / "step-0", "olmoe", num_layers=2)
    _edited(base, tmp_path / "step-1", "model.layers.0.mlp.experts.3.down_proj.weight", lambda w: w * 1.5)
    ds = toolkit.compare_series([base, tmp_path / "step-1"], metrics=METRICS, progress=False, cache=False)
    assert ds.relative_change_per_expert.dims == ("checkpoint", "layer", "component", "expert")
    got = ds.relative_change_per_expert.sel(layer=0, component="mlp.down")
    np.testing.assert_allclose(got.sel(checkpoint=1).values, [0, 0, 0, 0.5], atol=1e-12)
    np.testing.assert_array_equal(got.sel(checkpoint=0).values, 0.0)
