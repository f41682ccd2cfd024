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
from toolkit.architectures.moe import SWIGLU_EXPERT, MoEAdapter, class_defaults
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

    def sparse_layer(self, layer: int) -> bool | None:
        """``layer >= first_k_dense_replace`` (``DeepseekV3DecoderLayer``, ``DeepseekV2DecoderLayer``; the
        config class's default when the config lacks it); None for a value that is no count."""
        from toolkit.config_keys import text_config

        first = text_config(self.config).get("first_k_dense_replace")
        if first is None:
            first = class_defaults(self.config.get("model_type")).get("first_k_dense_replace", 0)
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            return None
        return layer >= first

    def config_problems(self) -> list[str]:
        """As :meth:`MoEAdapter.config_problems`, and the group routing of ``DeepseekV3TopkRouter``:
        ``n_group`` divides the experts, ``topk_group`` picks between 1 and ``n_group`` groups, and the
        experts per token fit in the picked groups."""
        found = super().config_problems()
        count = self.num_experts
        groups, picked, used = (self.config_value(k) for k in ("n_group", "topk_group", "num_experts_per_tok"))
        if groups is None and picked is None:
            return found
        if not (isinstance(groups, int) and isinstance(picked, int)) or groups < 1 or count % groups \
                or not 1 <= picked <= groups:
            return [*found, f"n_group={groups!r}, topk_group={picked!r}: n_group must divide the {count} routed "
                            "experts and topk_group be between 1 and n_group"]
        if isinstance(used, int) and used > picked * (count // groups):
            found.append(f"num_experts_per_tok={used} experts per token, more than the {picked} x {count // groups} "
                         "experts of the topk_group groups picked")
        return found

    def has_shared_expert(self) -> bool:
        return self.shared_size() is not None

    def shared_size(self) -> int | None:
        """``moe_intermediate_size * n_shared_experts`` (``DeepseekV3MoE.shared_experts``)."""
        size, count = self.optional_int("moe_intermediate_size"), self.optional_int("n_shared_experts")
        return None if size is None or count is None else size * count

    def expected_components(self, layer: int) -> tuple[str, ...] | None:
        """As :meth:`MoEAdapter.expected_components`, with ``attn.q_a`` only where ``q_lora_rank`` is set."""
        found = super().expected_components(layer)
        return tuple(c for c in found if c != "attn.q_a" or self._latent()["q_lora_rank"] is not None)

    def _latent(self) -> dict:
        from toolkit.config_keys import text_config

        cfg = text_config(self.config)
        return {k: cfg.get(k) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                         "v_head_dim")}

    def expected_shape(self, piece: Piece):
        """Latent attention as ``DeepseekV3Attention`` builds it: q (heads·(nope + rope), q_lora_rank or
        hidden), q_a (q_lora_rank, hidden), kv_a (kv_lora_rank + rope, hidden), k (heads·nope,
        kv_lora_rank), v (heads·v_head_dim, kv_lora_rank), o (hidden, heads·v_head_dim); the MLP as
        :meth:`MoEAdapter.expected_shape`."""
        from toolkit.architectures.expected import Expected, product

        if not piece.component.startswith("attn."):
            return super().expected_shape(piece)
        c, h, heads = self._latent(), self.dims.hidden_size, self.dims.num_attention_heads
        nope, rope, v, q_rank, kv_rank = (c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"],
                                          c["q_lora_rank"], c["kv_lora_rank"])
        qk = nope + rope if isinstance(nope, int) and isinstance(rope, int) else None
        kv_a = kv_rank + rope if isinstance(kv_rank, int) and isinstance(rope, int) else None
        shapes = {
            "attn.q": (product(heads, qk), q_rank if q_rank is not None else h),
            "attn.q_a": (q_rank, h),
            "attn.kv_a": (kv_a, h),
            "attn.k": (product(heads, nope), kv_rank),
            "attn.v": (product(heads, v), kv_rank),
            "attn.o": (h, product(heads, v)),
        }
        rows, cols = shapes.get(piece.component, (None, None))
        return Expected(rows, cols, "num_attention_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, "
                        "q_lora_rank, kv_lora_rank, hidden_size")

    def pieces(self, name: str) -> list[Piece]:
        """As :meth:`MoEAdapter.pieces`; nothing for the multi-token prediction layers."""
        m = self._block.match(name)
        extra = self.config.get("num_nextn_predict_layers") or 0
        if m is not None and self.num_layers is not None and isinstance(extra, int) and \
                self.num_layers <= int(m[1]) < self.num_layers + extra:
            return []
        return super().pieces(name)
