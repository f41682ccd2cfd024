"""GPT-NeoX / Pythia: fused ``query_key_value`` interleaved per head.

From ``transformers`` 5 ``modeling_gpt_neox.py``: ``GPTNeoXAttention.forward``
does ``query_key_value(x).view(..., -1, 3 * head_size)`` and then
``chunk(3, dim=-1)``, so the output rows are ``[h0_q, h0_k, h0_v, h1_q,
...]``, each ``head_size = hidden_size // num_attention_heads`` rows. The
pieces' ``out_index`` is therefore a LongTensor. ``attention.dense`` is the
output projection, ``mlp.dense_h_to_4h`` up and ``mlp.dense_4h_to_h`` down.
Names: ``gpt_neox.layers.{i}...`` (``GPTNeoXForCausalLM``) or ``layers.{i}``.
"""

from __future__ import annotations

from toolkit.architectures.adapter import FamilyAdapter, register_architecture
from toolkit.architectures.split import Split


@register_architecture("gpt_neox")
class GPTNeoXAdapter(FamilyAdapter):
    """GPT-NeoX, Pythia."""

    prefixes = ("gpt_neox.", "")
    layers = "layers"
    modules = {
        "attention.query_key_value": Split(
            ("attn.q", "attn.k", "attn.v"),
            lambda d: (d.hidden_size // d.num_attention_heads,) * 3,
            groups=lambda d: d.num_attention_heads,
        ),
        "attention.dense": "attn.o",
        "mlp.dense_h_to_4h": "mlp.up",
        "mlp.dense_4h_to_h": "mlp.down",
    }
