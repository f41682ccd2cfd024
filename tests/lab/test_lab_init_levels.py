"""Norms and score scale of an untrained ViT (toolkit.lab.levels): exact relations at depth 1."""

import math

import pytest
import torch

from toolkit.lab import ViT
from toolkit.lab.levels import cube_threshold, initial_levels


def test_one_layer_shares_its_scores_so_the_divisors_are_exact():
    t = initial_levels(image_size=16, patch_size=4, dim=16, heads=2, depth=1, images=4)
    assert t.index.tolist() == ["softmax", "x/1", "x/16", "x³/1", "x³/16"] and (t["N"] == 17).all()
    for col in ("score_mean_abs", "score_p99_abs", "score_fraction_above_1"):
        assert t[col].nunique() == 1  # one layer, one seed: the same scores for every activation
    assert t.loc["x/16", "attention_norm"] == pytest.approx(t.loc["x/1", "attention_norm"] / 16, rel=1e-12)
    assert t.loc["x³/16", "attention_norm"] == pytest.approx(t.loc["x³/1", "attention_norm"] / 16, rel=1e-12)
    assert 1 - 1e-9 <= t.loc["softmax", "attention_norm"] <= math.sqrt(17)
    assert t.loc["x/1", "attention_norm"] >= 17 * t.loc["x/1", "score_mean_abs"]  # ‖S‖_F / N = rms >= mean |S|


def test_timm_initialisation_and_the_cube_threshold():
    torch.manual_seed(0)
    model = ViT(dim=64, depth=1, heads=2, init_std=0.02)
    w = model.blocks[0].attn.qkv.weight.detach()
    assert float(w.abs().max()) <= 0.04 and float(w.std()) == pytest.approx(0.02 * 0.88, rel=0.1)  # truncated at 2σ
    assert float(model.blocks[0].attn.qkv.bias.detach().abs().max()) == 0.0
    assert cube_threshold(17) == pytest.approx((math.sqrt(15) * 17) ** (-1 / 3)) == pytest.approx(0.2476, abs=1e-4)
    small = initial_levels(["x³/1"], dim=64, heads=2, depth=1, images=4, init_std=0.02)
    default = initial_levels(["x³/1"], dim=64, heads=2, depth=1, images=4)
    assert small.loc["x³/1", "score_mean_abs"] < default.loc["x³/1", "score_mean_abs"] / 2
