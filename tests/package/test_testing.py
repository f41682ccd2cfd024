"""toolkit.testing.write_tiny_checkpoint writes real transformers checkpoints."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from toolkit.testing import TINY_FAMILIES, tiny_config, write_tiny_checkpoint


def tensors(path):
    out = {}
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(f, "pt") as s:
            out.update({k: s.get_tensor(k) for k in s.keys()})
    return out


def test_files_config_and_layers(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "llama", "llama", num_layers=3)
    assert {p.name for p in path.iterdir()} >= {"config.json", "model.safetensors"}
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 3
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # GQA
    names = tensors(path)
    assert "model.layers.2.self_attn.k_proj.weight" in names and "model.layers.3.mlp.up_proj.weight" not in names


def test_sharded_dtype_and_seed(tmp_path):
    a = write_tiny_checkpoint(tmp_path / "a", "gpt2", num_layers=4, dtype=torch.bfloat16, max_shard_size="30KB")
    b = write_tiny_checkpoint(tmp_path / "b", "gpt2", num_layers=4, dtype=torch.bfloat16, max_shard_size="30KB")
    c = write_tiny_checkpoint(tmp_path / "c", "gpt2", num_layers=4, seed=1)
    assert len(list(a.glob("model-*-of-*.safetensors"))) > 1 and (a / "model.safetensors.index.json").exists()
    ta, tb, tc = tensors(a), tensors(b), tensors(c)
    assert json.loads((a / "config.json").read_text())["n_layer"] == 4
    assert all(t.dtype == torch.bfloat16 for t in ta.values())
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    w = "transformer.h.0.attn.c_attn.weight"
    assert not torch.equal(ta[w].float(), tc[w].float())


def test_every_family_config():
    for family in TINY_FAMILIES:
        cfg = tiny_config(family, num_layers=5)
        text = getattr(cfg, "text_config", cfg)
        assert text.num_hidden_layers == 5
        assert cfg.model_type == family


def test_unknown_family():
    with pytest.raises(KeyError, match="families: llama"):
        tiny_config("mamba")
