"""DeepSeek-V2 / V3 (and Kimi K2, ``model_type`` ``deepseek_v3``): multi-head latent attention and MoE.

Latent attention (MLA), from ``transformers`` 5 ``modeling_deepseek_v3.py``
(``DeepseekV3Attention``): queries are ``q_b_proj(norm(q_a_proj(x)))`` (or
``q_proj(x)`` when ``q_lora_rank`` is null); keys and values come from one
latent, ``kv_a_proj_with_mqa(x)``, whose first ``kv_lora_rank`` outputs go
through ``kv_b_proj``; ``forward`` views that output as ``(heads,
qk_nope_head_dim + v_head_dim)`` and splits each head into its key part
(the no-rope part; the rope part of the key is ``kv_a_proj_with_mqa``'s last
``qk_rope_head_dim`` outputs, shared by all heads) and its value. So:

- ``attn.q`` = ``q_b_proj`` (or ``q_proj``); ``attn.o`` = ``o_proj``;
- ``attn.k`` / ``attn.v`` = per head, rows ``[0, qk_nope_head_dim)`` /
  ``[qk_nope_head_dim, qk_nope_head_dim + v_head_dim)`` of each head's block
  of ``kv_b_proj`` (a :class:`~toolkit.architectures.Split` with one group
  per head);
- ``attn.q_a`` = ``q_a_proj``, ``attn.kv_a`` = ``kv_a_proj_with_mqa`` (the
  low-rank down-projections).

The MLP: layers ``< first_k_dense_replace`` are dense (``mlp.gate_proj``...),
the others hold ``n_routed_experts`` routed experts, the router ``mlp.gate``
(its ``e_score_correction_bias`` is no matrix) and ``n_shared_experts``
shared experts fused into one ``mlp.shared_experts`` MLP. The multi-token
prediction layers of the hub checkpoints (``model.layers.{num_hidden_layers}``
and on, ``num_nextn_predict_layers`` of them) are not part of the model
``transformers`` loads (``_keys_to_ignore_on_load_unexpected``) and get no cells.
"""

from __future__ import annotations

import re

from toolkit.architectures.adapter import register_architecture
from toolkit.architectures.base import Piece
from toolkit.architectures.llama import LLAMA_MODULES
from toolkit.architectures.moe import SWIGLU_EXPERT, MoEAdapter
from toolkit.architectures.split import Split

__all__ = ["DeepseekAdapter"]

_MLP = {k: v for k, v in LLAMA_MODULES.items() if k.startswith("mlp.")}


@register_architecture("deepseek_v2", "deepseek_v3")
class DeepseekAdapter(MoEAdapter):
    """DeepSeek-V2, V2-Lite, V3, R1, Kimi K2: latent attention, routed and shared experts, dense first layers."""

    num_experts_keys = ("n_routed_experts",)
    expert_modules = {"mlp.experts": SWIGLU_EXPERT}

    def __init__(self, config: dict):
        from toolkit.config_keys import text_config

        cfg = text_config(config)
        nope, v = cfg.get("qk_nope_head_dim"), cfg.get("v_head_dim")
        self.modules = {
            **_MLP,
            "self_attn.q_proj": "attn.q",
            "self_attn.q_b_proj": "attn.q",
            "self_attn.q_a_proj": "attn.q_a",
            "self_attn.kv_a_proj_with_mqa": "attn.kv_a",
            "self_attn.kv_b_proj": Split(("attn.k", "attn.v"), (nope, v), lambda d: d.num_attention_heads),
            "self_attn.o_proj": "attn.o",
            "mlp.gate": "mlp.router",
            "mlp.shared_experts.up_proj": "mlp.shared.up",
            "mlp.shared_experts.down_proj": "mlp.shared.down",
            "mlp.shared_experts.gate_proj": "mlp.shared.gate",
        }
        super().__init__(config)
        self._block = re.compile(rf"^(?:{'|'.join(re.escape(p) for p in self.prefixes)})layers\.(\d+)\.")

    def pieces(self, name: str) -> list[Piece]:
        """As :meth:`MoEAdapter.pieces`; nothing for the multi-token prediction layers."""
        m = self._block.match(name)
        extra = self.config.get("num_nextn_predict_layers") or 0
        if m is not None and self.num_layers is not None and isinstance(extra, int) and \
                self.num_layers <= int(m[1]) < self.num_layers + extra:
            return []
        return super().pieces(name)
