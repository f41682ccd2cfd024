"""The order a pass's pipelines claim its tensors (toolkit.collect.execute.schedule): each layer's costliest
first, layers in the plan's order; and a pass measured in that order gives every cell its own result."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

import toolkit
from toolkit.collect.execute.schedule import claim_order, unit_cost


def unit(layer, shape, work_left=True, *, cell_shape=None):
    """A tensor's work as the schedule reads it: its stored record's shape, its cells' work left and layer (a
    cell's own shape is known only for some passes)."""
    cells = () if layer is None else (SimpleNamespace(piece=SimpleNamespace(layer=layer), shape=cell_shape,
                                                      work_left=work_left),)
    return SimpleNamespace(records=(SimpleNamespace(shape=shape),), cells=cells)


def test_unit_cost_by_hand():
    assert unit_cost(unit(0, (3, 5))) == 3 * 5 * 3 + 27
    assert unit_cost(unit(0, (5, 3))) == 5 * 3 * 3 + 27
    assert unit_cost(unit(0, (5, 3), work_left=False)) == 0.0  # every metric cached
    assert unit_cost(unit(None, (5, 3))) == 0.0  # no cell
    assert unit_cost(unit(0, (2, 3, 4))) == 6 * 4 * 4 + 64  # leading dims folded into the rows
    fused = SimpleNamespace(records=(SimpleNamespace(shape=(12, 2)),), cells=tuple(
        SimpleNamespace(piece=SimpleNamespace(layer=0), shape=(4, 2), work_left=True) for _ in range(3)))
    assert unit_cost(fused) == 3 * (4 * 2 * 2 + 8)  # a fused QKV: its three cells where their shapes are known
    pair = SimpleNamespace(pair=SimpleNamespace(target=SimpleNamespace(shape=(2, 4))),
                           cells=(SimpleNamespace(piece=SimpleNamespace(layer=1), shape=None, work_left=True),))
    assert unit_cost(pair) == 2 * 4 * 2 + 8
    assert unit_cost(SimpleNamespace()) == 0.0


def test_each_layer_costliest_first_layers_in_plan_order():
    """A Qwen2.5-7B layer's order (q, k, v, o, gate, up, down) becomes the three MLP matrices, then q and o,
    then k and v (ties in plan order); an embedding between layers stays where it was."""
    h, kv, inter = 3584, 512, 18944
    layer = [(h, h), (kv, h), (kv, h), (h, h), (inter, h), (inter, h), (h, inter)]
    units = [unit(None, (1024, h))] + [unit(0, s) for s in layer] + [unit(1, s) for s in layer]
    order = claim_order(units)
    assert sorted(order) == list(range(len(units)))
    assert order == [0, 5, 6, 7, 1, 4, 2, 3, 12, 13, 14, 8, 11, 9, 10]


def test_a_pass_in_claim_order_puts_every_cell_in_its_place(tmp_path):
    """A two-layer checkpoint whose matrices grow within each layer: the cells equal torch's own norms and
    singular values of each stored matrix, whatever order the pipelines measured them in."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
           "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
           "vocab_size": 32}
    tensors = {"model.embed_tokens.weight": torch.randn(32, 16, generator=g)}
    shapes = {"self_attn.q_proj": (16, 16), "self_attn.k_proj": (8, 16), "self_attn.v_proj": (8, 16),
              "self_attn.o_proj": (16, 16), "mlp.gate_proj": (48, 16), "mlp.up_proj": (48, 16),
              "mlp.down_proj": (16, 48)}
    for i in range(2):
        for name, shape in shapes.items():
            tensors[f"model.layers.{i}.{name}.weight"] = torch.randn(*shape, generator=g)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(__import__("json").dumps(cfg))
    ds = toolkit.weight_stats(str(tmp_path), metrics=["frobenius_norm", "spectral_norm"], cache=False,
                              progress=False)
    comp = {"self_attn.q_proj": "attn.q", "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
            "self_attn.o_proj": "attn.o", "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.up",
            "mlp.down_proj": "mlp.down"}
    for i in range(2):
        for name, c in comp.items():
            w = tensors[f"model.layers.{i}.{name}.weight"].double()
            cell = ds.sel(layer=i, component=c)
            np.testing.assert_allclose(float(cell.frobenius_norm), float(torch.linalg.norm(w)), rtol=1e-6)
            np.testing.assert_allclose(float(cell.spectral_norm), float(torch.linalg.svdvals(w)[0]), rtol=1e-6)
