"""The spectrum of the update in ``compare``: ``delta_alpha`` and ``delta_matrix_rank`` of dW = W_t - W_b."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import toolkit
from toolkit.metrics.powerlaw import fit_power_law
from toolkit.testing import write_tiny_checkpoint

NAME = "model.layers.1.mlp.down_proj.weight"


def updated(base, where, update) -> None:
    shutil.copytree(base, where)
    tensors = load_file(str(base / "model.safetensors"))
    for name, t in tensors.items():
        if name.endswith("proj.weight"):
            tensors[name] = (t.double() + update(t.shape, name)).to(t.dtype).contiguous()
    save_file(tensors, str(where / "model.safetensors"), metadata={"format": "pt"})


def test_update_rank_and_alpha_against_numpy(tmp_path):
    base = write_tiny_checkpoint(tmp_path / "base", "llama", num_layers=2, seed=21)
    gen = torch.Generator().manual_seed(0)

    def low_rank(shape, name):
        return 0.05 * torch.randn(shape[0], 2, generator=gen, dtype=torch.float64) @ torch.randn(
            2, shape[1], generator=gen, dtype=torch.float64)

    def full_rank(shape, name):
        return 0.02 * torch.randn(*shape, generator=gen, dtype=torch.float64)

    updated(base, tmp_path / "lowrank", low_rank)
    updated(base, tmp_path / "full", full_rank)
    metrics = ["delta_alpha", "delta_matrix_rank", "delta_stable_rank"]
    low = toolkit.compare(base, tmp_path / "lowrank", metrics, progress=False, cache=False)
    assert set(np.unique(low.delta_matrix_rank.values)) == {2.0}  # every cell: a rank-2 update
    assert "delta_alpha" in str(low.nan_reason.sel(layer=0, component="attn.q").values)  # 2 eigenvalues: no fit
    full = toolkit.compare(base, tmp_path / "full", metrics, progress=False, cache=False)
    b = load_file(str(base / "model.safetensors"))[NAME].double()
    t = load_file(str(tmp_path / "full" / "model.safetensors"))[NAME].double()
    d = (t - b).numpy()
    lam = np.linalg.eigvalsh(d.T @ d if d.shape[0] >= d.shape[1] else d @ d.T)
    assert float(full.delta_alpha.sel(layer=1, component="mlp.down")) == pytest.approx(
        fit_power_law(lam).alpha, rel=1e-6)
    assert float(full.delta_matrix_rank.sel(layer=1, component="mlp.down")) == np.linalg.matrix_rank(d)
    same = toolkit.compare(base, base, ["delta_alpha"], progress=False, cache=False)
    assert np.isnan(same.delta_alpha.values).all() and "unchanged" in str(same.nan_reason.values)
