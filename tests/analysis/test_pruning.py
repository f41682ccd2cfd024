"""Magnitude pruning: the exact count, ties broken by position, and a model put back as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from toolkit.analysis.pruning import magnitude_prune_, pruned
from toolkit.analysis.wanda import input_feature_norms, wanda_prune_
from toolkit.errors import SelectionError


def test_the_smallest_magnitudes_go_first_by_hand():
    w = torch.tensor([[0.5, -0.1, 2.0], [-3.0, 0.2, -0.05]])
    assert magnitude_prune_(w, 0.5) == 3
    assert w.tolist() == [[0.5, 0.0, 2.0], [-3.0, 0.0, 0.0]]


@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.7, 1.0])
def test_ties_are_broken_by_position_and_the_count_is_exact(sparsity):
    # quantized weights: few distinct levels, many ties at the threshold
    w = torch.tensor(np.random.default_rng(0).integers(-3, 4, size=(40, 25)), dtype=torch.float32)
    before = w.clone()
    k = magnitude_prune_(w, sparsity)
    assert k == round(sparsity * 1000)
    zeroed = (w == 0) & (before != 0)
    assert int((w == 0).sum()) == max(k, int((before == 0).sum()))  # k zeros at least (zeros are the smallest)
    if zeroed.any() and (w != 0).any():  # every kept weight is at least as large as every zeroed one
        assert before[w != 0].abs().min() >= before[zeroed].abs().max()
    ties = (before.abs() == before[zeroed].abs().max()).reshape(-1) if zeroed.any() else None
    if ties is not None:  # among ties at the threshold, the first by position were zeroed
        idx = ties.nonzero().squeeze(1)
        gone = (w.reshape(-1)[idx] == 0).int()
        assert (gone.diff() <= 0).all()


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(config).eval()


def allocation(values, components=("attn.q", "attn.k", "attn.v", "attn.o", "mlp.up", "mlp.down", "mlp.gate")):
    return xr.DataArray(np.asarray(values, dtype=float), dims=("layer", "component"),
                        coords={"layer": [0, 1], "component": list(components)})


def test_pruned_zeroes_each_matrix_to_its_share_and_puts_the_model_back():
    model = tiny_llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    share = allocation([[0.5, 0.25, 0.0, 0.75, 0.5, 0.5, np.nan], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]])
    with pruned(model, share) as zeroed:
        q0 = model.model.layers[0].self_attn.q_proj.weight
        assert zeroed[0, "attn.q"] == 128 and int((q0 == 0).sum()) == 128  # 16 x 16 at 50 %
        assert int((model.model.layers[0].self_attn.o_proj.weight == 0).sum()) == 192
        assert int((model.model.layers[1].mlp.gate_proj.weight == 0).sum()) == round(0.7 * 512)
        assert torch.equal(model.model.layers[0].mlp.gate_proj.weight, before["model.layers.0.mlp.gate_proj.weight"])
        assert (0, "mlp.gate") not in zeroed  # NaN: left alone
        assert torch.equal(model.model.embed_tokens.weight, before["model.embed_tokens.weight"])
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_a_cell_the_model_lacks_is_refused():
    model = tiny_llama()
    with pytest.raises(SelectionError, match="layer 0 mlp.router"):
        with pruned(model, allocation([[0.5], [0.5]], components=("mlp.router",))):
            pass


def test_wanda_zeroes_each_rows_lowest_magnitude_times_input_norm_by_hand():
    w = torch.tensor([[1.0, -2.0, 3.0, 0.5], [4.0, 0.1, -0.2, 1.0]])
    norms = torch.tensor([1.0, 0.1, 1.0, 10.0])  # scores: [1, .2, 3, 5], [4, .01, .2, 10]
    assert wanda_prune_(w, 0.5, norms) == 4
    assert torch.equal(w, torch.tensor([[0.0, 0.0, 3.0, 0.5], [4.0, 0.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match="one norm per column"):
        wanda_prune_(w, 0.5, torch.ones(3))


class _Tokens:
    """A tokenizer of a text of digits: one token per character."""

    def __call__(self, text, return_tensors=None, add_special_tokens=False):
        return {"input_ids": torch.tensor([[int(c) for c in text if c.isdigit()]])}


def test_input_feature_norms_are_the_norms_of_each_modules_inputs():
    from types import SimpleNamespace

    model = tiny_llama()
    loaded = SimpleNamespace(model=model, tokenizer=_Tokens())
    text = "0123456789" * 5
    norms = input_feature_norms(loaded, text, window=16)
    seen = []
    handle = model.model.layers[1].mlp.down_proj.register_forward_pre_hook(lambda m, a: seen.append(a[0]))
    ids = torch.tensor([[int(c) for c in text]])
    with torch.no_grad():
        for s in range(0, 50, 16):
            model(input_ids=ids[:, s:s + 16])
    handle.remove()
    x = torch.cat([t.reshape(-1, t.shape[-1]) for t in seen]).double()
    torch.testing.assert_close(norms[1, "mlp.down"], x.norm(dim=0), rtol=1e-10, atol=1e-12)
    assert len(norms) == 14 and norms[0, "attn.q"].shape == (16,)
    share = allocation([[0.5] * 7, [0.25] * 7])
    with pruned(model, share, norms=norms) as zeroed:
        down = model.model.layers[1].mlp.down_proj.weight  # 16 x 32: 8 per row at 25 %
        assert zeroed[1, "mlp.down"] == 128 and ((down == 0).sum(1) == 8).all()
