"""The hook plan of ``activation_stats``, made from a model's modules without running it."""

from __future__ import annotations

import pytest

from toolkit.activations.hook_plan import plan_hooks
from toolkit.collect.plan.selection import Selection
from toolkit.errors import SelectionError
from toolkit.testing import tiny_model

COMPONENTS = ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.up", "mlp.down", "mlp.gate")


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", num_layers=3)


def _ran(model):
    """A forward pre-hook on every module that records a call: the plan must make none."""
    calls = []
    handles = [m.register_forward_pre_hook(lambda *a: calls.append(1)) for m in model.modules()]
    return calls, handles


def test_the_plan_of_a_decoder_names_every_module_it_hooks(llama):
    calls, handles = _ran(llama)
    try:
        plan = plan_hooks(llama, Selection())
    finally:
        for h in handles:
            h.remove()
    assert not calls  # made without a forward pass
    assert set(plan.pieces) == {(layer, c) for layer in range(3) for c in COMPONENTS}
    layers = llama.model.layers
    for layer in range(3):
        blk = layers[layer]
        assert plan.weights[layer, "attn.q"] is blk.self_attn.q_proj.weight
        assert plan.weights[layer, "mlp.down"] is blk.mlp.down_proj.weight
        assert plan.attention_modules[layer] is blk.self_attn
        assert {id(m) for m in plan.layer_modules[layer]} == {
            id(getattr(blk.self_attn, n)) for n in ("q_proj", "k_proj", "v_proj", "o_proj")} | {
            id(getattr(blk.mlp, n)) for n in ("up_proj", "down_proj", "gate_proj")}
    # each module feeds exactly the cell it holds (llama fuses none)
    assert sorted(t.key for ts in plan.targets.values() for t in ts) == sorted(plan.pieces)
    assert plan.causal and plan.has_loss and not plan.routers and plan.num_layers == 3


def test_a_selection_hooks_only_its_modules(llama):
    plan = plan_hooks(llama, Selection.of(layers=[1], components="mlp.*"))
    assert set(plan.pieces) == {(1, "mlp.up"), (1, "mlp.down"), (1, "mlp.gate")}
    assert plan.attention_modules == {}  # no attention component selected: no maps recorded
    assert set(plan.layer_modules) == {1}
    plan = plan_hooks(llama, Selection.of(layers=-1, components="attn.v"))
    assert set(plan.pieces) == {(2, "attn.v")} and set(plan.attention_modules) == {2}
    with pytest.raises(SelectionError):
        plan_hooks(llama, Selection.of(layers=7))


def test_an_encoder_is_planned_without_a_loss():
    bert = tiny_model("bert", num_layers=2, head=False)
    plan = plan_hooks(bert, Selection())
    assert not plan.causal and not plan.has_loss
    assert (0, "mlp.gate") not in plan.pieces and (1, "attn.o") in plan.pieces
