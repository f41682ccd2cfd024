"""Architectures: which stored tensor is which (layer, component).

Public API
----------
resolve_adapter(config, parameter_names, mapping=None) -> Adapter
    Pick the family from ``config["model_type"]`` (or use a user mapping).
Mapping
    Your own ``{component: regex}`` mapping, with transposed and fused tensors.
Split
    A fused tensor's split, sizes declared from the config.
register_architecture(*model_types, overwrite=False)
    Class decorator registering a :class:`FamilyAdapter` subclass.
registered_architectures()
    ``{model_type: adapter class}``.

Families: llama, mistral, qwen2, qwen3, olmo, olmo2, granite, smollm3
(:mod:`.llama`); gemma, gemma2, gemma3, gemma3_text (:mod:`.gemma`); phi3;
phi; gpt2; gpt_neox; bert, roberta, xlm-roberta (:mod:`.bert`); mixture-of-experts
mixtral, qwen2_moe, qwen3_moe, olmoe, gpt_oss, llama4, llama4_text (:mod:`.moe`); deepseek_v2, deepseek_v3
with latent attention (:mod:`.mla`).
"""

from __future__ import annotations

from toolkit.architectures import bert, gemma, gpt2, gpt_neox, llama, mla, moe, phi, phi3  # noqa: F401  (register)
from toolkit.architectures.adapter import FamilyAdapter, register_architecture, registered_architectures
from toolkit.architectures.base import Adapter, Dims, Piece
from toolkit.architectures.mapping import Mapping
from toolkit.architectures.resolve import resolve_adapter
from toolkit.architectures.split import Split
from toolkit.architectures.vocabulary import ALL_COMPONENTS, COMPONENTS, EXTRA_COMPONENTS

__all__ = [
    "ALL_COMPONENTS",
    "COMPONENTS",
    "EXTRA_COMPONENTS",
    "Adapter",
    "Dims",
    "FamilyAdapter",
    "Mapping",
    "Piece",
    "Split",
    "register_architecture",
    "registered_architectures",
    "resolve_adapter",
]
