"""Gemma, Gemma 2 and Gemma 3: llama names, plus Gemma 3's multimodal prefix.

``transformers`` 5 ``modeling_gemma*.py`` name the blocks like llama
(``model.layers.{i}.self_attn.q_proj.weight``, ``mlp.{gate,up,down}_proj``);
the extra norms (``pre_feedforward_layernorm``, ``q_norm``...) are 1-D and no
component. ``Gemma3ForConditionalGeneration`` (``model_type`` ``gemma3``)
saves the text blocks as ``language_model.model.layers.{i}...`` and names
them ``model.language_model.layers.{i}...`` once loaded (the ``llava`` key
renaming in ``conversion_mapping.py``); both are accepted, and the SigLIP
``vision_tower`` layers are left out. A text-only Gemma 3 (``gemma3_text``,
``Gemma3ForCausalLM``, also what GGUF files hold even when their config says
``gemma3``) uses ``model.layers.{i}``.
"""

from __future__ import annotations

from toolkit.architectures.adapter import FamilyAdapter, register_architecture
from toolkit.architectures.llama import LLAMA_MODULES


@register_architecture("gemma", "gemma2", "gemma3", "gemma3_text")
class GemmaAdapter(FamilyAdapter):
    """Gemma, Gemma 2, Gemma 3 (multimodal or text-only)."""

    prefixes = ("model.language_model.", "language_model.model.", "language_model.", "model.", "")
    module_prefix = {"language_model.model.": "model.language_model.", "language_model.": "model.language_model."}
    layers = "layers"
    modules = LLAMA_MODULES
