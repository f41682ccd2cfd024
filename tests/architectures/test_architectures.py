"""Every family: a saved tiny checkpoint maps to a complete layer x component grid."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from toolkit.architectures import COMPONENTS, resolve_adapter
from toolkit.testing import TINY_FAMILIES, write_tiny_checkpoint

ENCODERS_AND_UNGATED = {"bert", "roberta", "gpt2", "gpt_neox", "phi"}
NUM_LAYERS = 28


def read_checkpoint(path):
    """``(config dict, {name: tensor})`` of a saved checkpoint (all shards)."""
    config = json.loads((path / "config.json").read_text())
    tensors = {}
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(f, "pt") as s:
            tensors.update({k: s.get_tensor(k) for k in s.keys()})
    return config, tensors


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {fam: write_tiny_checkpoint(root / fam, fam, num_layers=NUM_LAYERS) for fam in TINY_FAMILIES}


def expected_components(family):
    return tuple(c for c in COMPONENTS if not (c == "mlp.gate" and family in ENCODERS_AND_UNGATED))


def grid(adapter, tensors):
    cells = {}
    for name, t in tensors.items():
        for p in adapter.pieces(name):
            assert (p.layer, p.component) not in cells, f"{name} and {cells[p.layer, p.component]} collide"
            cells[p.layer, p.component] = p
            w = p.extract(t)
            assert w.ndim == 2 and w.dtype == t.dtype
    return cells


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_complete_grid_28_layers(checkpoints, family):
    config, tensors = read_checkpoint(checkpoints[family])
    adapter = resolve_adapter(config, list(tensors))
    assert adapter.family == config["model_type"]
    assert adapter.num_layers == NUM_LAYERS
    comps = expected_components(family)
    assert adapter.components == comps
    cells = grid(adapter, tensors)
    assert set(cells) == {(i, c) for i in range(NUM_LAYERS) for c in comps}
    adapter.check_layers(layer for layer, _ in cells)
    # only .weight matrices are components; norms, biases, embeddings are not
    for name, t in tensors.items():
        if not name.endswith(".weight") or t.ndim != 2 or "embed" in name:
            assert adapter.pieces(name) == [], name


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_shapes_follow_config(checkpoints, family):
    config, tensors = read_checkpoint(checkpoints[family])
    adapter = resolve_adapter(config, list(tensors))
    cells = grid(adapter, tensors)
    d = adapter.dims
    shapes = {c: tuple(p.extract(tensors[p.parameter_name]).shape) for (i, c), p in cells.items() if i == 5}
    hidden = d.hidden_size
    assert shapes["attn.q"] == (d.q_rows, hidden)
    assert shapes["attn.k"] == shapes["attn.v"] == (d.kv_rows, hidden)
    assert shapes["attn.o"] == (hidden, d.q_rows)
    assert shapes["mlp.up"] == (d.intermediate_size, hidden)
    assert shapes["mlp.down"] == (hidden, d.intermediate_size)
    if "mlp.gate" in shapes:
        assert shapes["mlp.gate"] == shapes["mlp.up"]
    gqa = family not in {"gpt2", "gpt_neox", "bert", "roberta"}
    assert (d.kv_rows < d.q_rows) == gqa


@pytest.mark.parametrize("family", ["phi3", "gpt2", "gemma3"])
def test_sharded_checkpoint(tmp_path, family):
    path = write_tiny_checkpoint(tmp_path / family, family, num_layers=NUM_LAYERS, max_shard_size="40KB")
    assert len(list(path.glob("*.safetensors"))) > 1
    config, tensors = read_checkpoint(path)
    adapter = resolve_adapter(config, list(tensors))
    cells = grid(adapter, tensors)
    assert len(cells) == NUM_LAYERS * len(expected_components(family))


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox", "bert", "gemma3"])
def test_bare_model_without_task_prefix(tmp_path, family):
    path = write_tiny_checkpoint(tmp_path / family, family, num_layers=3, head=False)
    config, tensors = read_checkpoint(path)
    adapter = resolve_adapter(config, list(tensors))
    cells = grid(adapter, tensors)
    assert len(cells) == 3 * len(expected_components(family))


def test_bf16_storage_kept(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "q", "qwen2", num_layers=2, dtype=torch.bfloat16)
    config, tensors = read_checkpoint(path)
    cells = grid(resolve_adapter(config, list(tensors)), tensors)
    p = cells[1, "attn.k"]
    assert p.extract(tensors[p.parameter_name]).dtype == torch.bfloat16


@pytest.mark.parametrize("family", ["llama", "phi3", "gpt2", "gpt_neox", "bert", "gemma3", "gemma3_text"])
def test_module_names_in_loaded_model(tmp_path, family):
    """``module_name`` names the module of the model ``from_pretrained`` loads,
    and that module's weight is the stored tensor (gemma3 renames on load)."""
    import transformers

    path = write_tiny_checkpoint(tmp_path / family, family, num_layers=2)
    config, tensors = read_checkpoint(path)
    adapter = resolve_adapter(config, list(tensors))
    cls = getattr(transformers, config["architectures"][0])
    model = cls.from_pretrained(path)
    bare = transformers.AutoModel.from_pretrained(path)
    for name, t in tensors.items():
        for p in adapter.pieces(name):
            module = model.get_submodule(p.module_name)
            torch.testing.assert_close(module.weight.detach(), t, rtol=0, atol=0)
            assert adapter.find_module(bare, p).weight.shape == t.shape


@pytest.mark.parametrize("model_type", ["gemma3", "gemma3_text"])
def test_gemma3_flat_config_as_from_gguf(model_type):
    """GGUF-derived configs say gemma3 or gemma3_text, flat keys, ``model.layers`` names."""
    config = {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": 640, "num_attention_heads": 4,
              "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 2048}
    names = [f"model.layers.{i}.{m}.weight" for i in range(2) for m in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm")]
    adapter = resolve_adapter(config, names)
    cells = {(p.layer, p.component) for n in names for p in adapter.pieces(n)}
    assert len(cells) == 14 and adapter.dims.kv_rows == 256
