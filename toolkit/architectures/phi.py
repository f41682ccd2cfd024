"""Phi-1 / Phi-1.5 / Phi-2 (``model_type`` ``phi``): separate q/k/v, no gate.

From ``transformers`` 5 ``modeling_phi.py``: ``model.layers.{i}.self_attn.
{q,k,v}_proj`` and ``self_attn.dense`` (the output projection), MLP
``mlp.fc1`` (up) and ``mlp.fc2`` (down), all ``nn.Linear`` with biases.
"""

from __future__ import annotations

from toolkit.architectures.adapter import FamilyAdapter, register_architecture


@register_architecture("phi")
class PhiAdapter(FamilyAdapter):
    """Phi-1, Phi-1.5, Phi-2."""

    prefixes = ("model.", "")
    layers = "layers"
    modules = {
        "self_attn.q_proj": "attn.q",
        "self_attn.k_proj": "attn.k",
        "self_attn.v_proj": "attn.v",
        "self_attn.dense": "attn.o",
        "mlp.fc1": "mlp.up",
        "mlp.fc2": "mlp.down",
    }
