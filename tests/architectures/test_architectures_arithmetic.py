"""Splits checked by the modules' own arithmetic, not only by shape.

Two checks on a tiny random float64 model of each family:

1. every piece: the owning module's output at ``out_index`` equals
   ``x @ extract(W).T + bias[out_index]`` for the module's input ``x``;
2. q, k, v: what the attention function of ``transformers`` receives
   (captured through a registered ``AttentionInterface``) equals
   ``x @ W.T + b`` reshaped to heads, and the gated MLP's ``down`` input
   equals ``act(x @ W_gate.T) * (x @ W_up.T)``. Positions are all zero, so
   the rotary embedding is the identity and q, k are the raw projections.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from toolkit.architectures import resolve_adapter
from toolkit.testing import tiny_model

LAYERS = 2


def build(family):
    model = tiny_model(family, num_layers=LAYERS, seed=1).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    config = model.config.to_dict()
    names = list(model.state_dict())
    return model, resolve_adapter(config, names), model.state_dict()


def run(model, module_names):
    """Inputs and outputs of the named modules during one forward pass."""
    seen = {}
    hooks = [
        model.get_submodule(n).register_forward_hook(
            lambda m, args, out, n=n: seen.__setitem__(n, (args[0].detach(), out.detach()))
        )
        for n in module_names
    ]
    ids = torch.randint(3, 100, (2, 5))
    with torch.no_grad():
        model(input_ids=ids, position_ids=torch.zeros_like(ids))
    for h in hooks:
        h.remove()
    return seen


def project(x, piece, state):
    w = piece.extract(state[piece.parameter_name])
    y = x @ w.T
    bias = state.get(piece.parameter_name[: -len("weight")] + "bias")
    if bias is not None:
        y = y + (bias if piece.out_index is None else bias[piece.out_index])
    return y


@pytest.mark.parametrize("family", ["phi3", "gpt2", "gpt_neox", "llama", "qwen2", "bert", "phi", "gemma3"])
def test_every_piece_reproduces_its_module_output(family):
    model, adapter, state = build(family)
    by_name = adapter.map_names(state)
    seen = run(model, {p.module_name for ps in by_name.values() for p in ps})
    assert len(by_name) and all(p.module_name in seen for ps in by_name.values() for p in ps)
    for ps in by_name.values():
        for p in ps:
            x, out = seen[p.module_name]
            want = out if p.out_index is None else out[..., p.out_index]
            torch.testing.assert_close(project(x, p, state), want, rtol=1e-10, atol=1e-10)


@pytest.fixture
def capture_attention():
    """Register an attention function that records (query, key, value) per module."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    records = {}

    def capture(module, query, key, value, attention_mask, **kwargs):
        records[module] = (query.detach(), key.detach(), value.detach())
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("toolkit_test_capture", capture)
    return records


def heads(y, n_heads):
    """(batch, seq, heads*head_dim) -> (batch, heads, seq, head_dim), as the modules reshape."""
    b, s, _ = y.shape
    return y.view(b, s, n_heads, -1).transpose(1, 2)


@pytest.mark.parametrize("family", ["phi3", "gpt2", "gpt_neox", "llama", "qwen2", "bert", "phi", "gemma"])
def test_qkv_are_what_attention_receives(family, capture_attention):
    model, adapter, state = build(family)
    model.set_attn_implementation("toolkit_test_capture")
    pieces = [p for ps in adapter.map_names(state).values() for p in ps]
    seen = run(model, {p.module_name for p in pieces})
    attn_by_layer = {}
    for module, qkv in capture_attention.items():
        layer = next(i for i, blk in enumerate(_blocks(model)) if any(m is module for m in blk.modules()))
        attn_by_layer[layer] = qkv
    assert sorted(attn_by_layer) == list(range(LAYERS))
    d = adapter.dims
    for p in pieces:
        if p.component not in ("attn.q", "attn.k", "attn.v"):
            continue
        q, k, v = attn_by_layer[p.layer]
        got = {"attn.q": q, "attn.k": k, "attn.v": v}[p.component]
        n = d.num_attention_heads if p.component == "attn.q" else d.num_key_value_heads
        want = heads(project(seen[p.module_name][0], p, state), n)
        torch.testing.assert_close(want, got, rtol=1e-10, atol=1e-10)
    assert (k.shape[1] < q.shape[1]) == (family in {"phi3", "llama", "qwen2", "phi", "gemma"})


def _blocks(model):
    names = ("model.layers", "transformer.h", "gpt_neox.layers", "bert.encoder.layer", "model.language_model.layers")
    for name in names:
        try:
            return model.get_submodule(name)
        except AttributeError:
            continue
    raise AssertionError("no block list")


@pytest.mark.parametrize("family", ["phi3", "llama"])
def test_gate_and_up_order(family):
    model, adapter, state = build(family)
    pieces = defaultdict(dict)
    for ps in adapter.map_names(state).values():
        for p in ps:
            pieces[p.layer][p.component] = p
    seen = run(model, {p.module_name for by_c in pieces.values() for p in by_c.values()})
    for by_c in pieces.values():
        mlp = model.get_submodule(by_c["mlp.down"].module_name.rsplit(".", 1)[0])
        act = getattr(mlp, "act_fn", None) or mlp.activation_fn
        x = seen[by_c["mlp.up"].module_name][0]
        want = act(project(x, by_c["mlp.gate"], state)) * project(x, by_c["mlp.up"], state)
        torch.testing.assert_close(want, seen[by_c["mlp.down"].module_name][0], rtol=1e-10, atol=1e-10)
