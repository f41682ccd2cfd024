"""Phi-3: fused ``qkv_proj`` and ``gate_up_proj``.

From ``transformers`` 5 ``modeling_phi3.py``: ``Phi3Attention.qkv_proj`` is
an ``nn.Linear`` with ``num_attention_heads * head_dim + 2 *
num_key_value_heads * head_dim`` output rows, and ``forward`` slices its
output as ``q = qkv[..., :query_pos]``, ``k`` the next
``num_key_value_heads * head_dim``, ``v`` the rest (contiguous, not per
head). ``Phi3MLP.gate_up_proj`` has ``2 * intermediate_size`` rows and
``forward`` does ``gate, up = gate_up_proj(x).chunk(2, dim=-1)``: gate
first, then up. ``head_dim`` defaults to ``hidden_size // num_attention_heads``.
"""

from __future__ import annotations

from toolkit.architectures.adapter import FamilyAdapter, register_architecture
from toolkit.architectures.split import Split


@register_architecture("phi3")
class Phi3Adapter(FamilyAdapter):
    """Phi-3 / Phi-3.5 / Phi-4 (``model_type`` ``phi3``)."""

    prefixes = ("model.", "")
    layers = "layers"
    modules = {
        "self_attn.qkv_proj": Split(("attn.q", "attn.k", "attn.v"), lambda d: (d.q_rows, d.kv_rows, d.kv_rows)),
        "self_attn.o_proj": "attn.o",
        "mlp.gate_up_proj": Split(("mlp.gate", "mlp.up"), lambda d: (d.intermediate_size, d.intermediate_size)),
        "mlp.down_proj": "mlp.down",
    }
