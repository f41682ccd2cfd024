"""Llama-style decoders: separate q/k/v/o projections and a gated MLP.

Names after loading, from ``transformers`` 5 ``modeling_llama.py`` (and the
copies in mistral, qwen2, qwen3, olmo, olmo2, granite, smollm3):
``model.layers.{i}.self_attn.{q,k,v,o}_proj.weight`` and
``model.layers.{i}.mlp.{gate,up,down}_proj.weight``, each an ``nn.Linear``
stored (out, in). With grouped-query attention (GQA) ``k_proj`` and
``v_proj`` have ``num_key_value_heads * head_dim`` rows, fewer than
``q_proj``'s ``num_attention_heads * head_dim``. qwen2 adds q/k/v biases,
qwen3 and olmo2 add ``q_norm`` / ``k_norm`` (1-D, no component). The
``model.`` prefix is absent in a bare ``LlamaModel`` checkpoint.
"""

from __future__ import annotations

from toolkit.architectures.adapter import FamilyAdapter, register_architecture

LLAMA_MODULES = {
    "self_attn.q_proj": "attn.q",
    "self_attn.k_proj": "attn.k",
    "self_attn.v_proj": "attn.v",
    "self_attn.o_proj": "attn.o",
    "mlp.up_proj": "mlp.up",
    "mlp.down_proj": "mlp.down",
    "mlp.gate_proj": "mlp.gate",
}


@register_architecture("llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2", "granite", "smollm3")
class LlamaAdapter(FamilyAdapter):
    """Llama, Mistral, Qwen2, Qwen3, OLMo, OLMo 2, Granite, SmolLM3."""

    prefixes = ("model.", "")
    layers = "layers"
    modules = LLAMA_MODULES
