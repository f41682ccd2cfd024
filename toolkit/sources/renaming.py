"""The names ``transformers`` loads a checkpoint's tensors under, and when that needs ``transformers`` at all.

``transformers`` renames some stored tensors on load (its checkpoint conversion
mapping: gemma3's ``language_model.`` prefix, GPT-NeoX's ``embed_out.``, the
``legacy`` renamings such as ``LayerNorm.gamma -> LayerNorm.weight``).
:func:`transformers_renamer` applies those renamings; importing the mapping
costs a second and pulls ``accelerate`` and ``sympy``. For the families whose
checkpoints ``transformers`` loads under their stored names
(:data:`PLAIN_KEYS`) a name is renamed only when one of the legacy patterns
(:data:`LEGACY_PATTERNS`) matches it, so the mapping is imported only then.
Both tables mirror the installed ``transformers``: ``tests/sources/test_renaming.py``
checks them against it, name for name.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Callable

#: Config ``model_type`` values and ``architectures`` class names for which ``transformers``' checkpoint
#: conversion mapping has no entry (so only the legacy renamings apply to their checkpoints).
PLAIN_KEYS = frozenset({
    "bert", "BertForMaskedLM", "BertLMHeadModel", "BertModel",
    "gemma", "GemmaForCausalLM", "GemmaModel", "gemma2", "Gemma2ForCausalLM", "Gemma2Model",
    "gemma3_text", "Gemma3ForCausalLM", "Gemma3TextModel",
    "gpt2", "GPT2LMHeadModel", "GPT2Model", "gpt_neox", "GPTNeoXModel",
    "gpt_oss", "GptOssForCausalLM", "GptOssModel",
    "granite", "GraniteForCausalLM", "GraniteModel",
    "llama", "LlamaForCausalLM", "LlamaModel", "llama4_text", "Llama4ForCausalLM", "Llama4TextModel",
    "mistral", "MistralForCausalLM", "MistralModel",
    "olmo", "OlmoForCausalLM", "OlmoModel", "olmo2", "Olmo2ForCausalLM", "Olmo2Model",
    "phi", "PhiForCausalLM", "PhiModel", "phi3", "Phi3ForCausalLM", "Phi3Model",
    "qwen2", "Qwen2ForCausalLM", "Qwen2Model", "qwen3", "Qwen3ForCausalLM", "Qwen3Model",
    "roberta", "RobertaForCausalLM", "RobertaForMaskedLM", "RobertaModel",
    "smollm3", "SmolLM3ForCausalLM", "SmolLM3Model",
    "xlm-roberta", "XLMRobertaForCausalLM", "XLMRobertaForMaskedLM", "XLMRobertaModel",
})

#: The match patterns of ``transformers``' ``legacy`` renamings (each ``WeightRenaming.compiled_sources``):
#: a name none of them finds is loaded under its stored name by every family of :data:`PLAIN_KEYS`.
LEGACY_PATTERNS = (
    r"(?P<g0>LayerNorm.gamma(?!\w))",
    r"(?P<g0>LayerNorm.beta(?!\w))",
    r"(?P<g0>.weight_g(?!\w))",
    r"(?P<g0>.weight_v(?!\w))",
    r"(?P<g0>^model\.language_model\.model(?!\w))|(?P<g1>^language_model\.model\.model(?!\w))",
)
_LEGACY = re.compile("|".join(re.sub(r"\(\?P<g\d+>", "(?:", p) for p in LEGACY_PATTERNS))  # groups unnamed


def lookup_keys(config: dict) -> list[str]:
    """The keys ``transformers``' conversion mapping is searched by, in order: the config's
    ``architectures`` class names, then its ``model_type`` (entries that are no string left out)."""
    architectures = config.get("architectures")
    keys = [*(architectures if isinstance(architectures, list) else []), config.get("model_type")]
    return [k for k in keys if k and isinstance(k, str)]


def loads_plain(config: dict) -> bool:
    """Whether only the legacy renamings can apply to the checkpoint of ``config``: every lookup key is
    one of :data:`PLAIN_KEYS` (a config with none is searched for nothing), and no mapping registered at
    run time can differ (``transformers.conversion_mapping`` not imported yet)."""
    if "transformers.conversion_mapping" in sys.modules:
        return False
    return all(key in PLAIN_KEYS for key in lookup_keys(config))


def transformers_renamer(config: dict) -> Callable[[str], str]:
    """The key renaming ``transformers`` applies on load, as a function.

    Uses ``transformers``' own checkpoint conversion mapping for the config's
    architecture class (else its ``model_type``) plus the ``legacy`` renamings
    (``LayerNorm.gamma -> LayerNorm.weight``...). Only one-to-one renamings are
    applied; converters that fuse several stored tensors into one parameter
    (MoE experts into ``gate_up_proj``) are not, so such tensors keep their
    stored names. Identity when ``transformers`` has no such mapping.

    For a family of :data:`PLAIN_KEYS` the mapping is imported on the first
    name a legacy pattern finds, never for a checkpoint without one.

    Parameters
    ----------
    config : dict
        The checkpoint's config (``architectures``, ``model_type``).

    Returns
    -------
    callable
        ``stored name -> loaded name``.
    """
    return plain_renamer(config) if loads_plain(config) else _LazyRenamer(config)


def plain_renamer(config: dict) -> Callable[[str], str]:
    """The renamer of a checkpoint only the legacy renamings can apply to (:func:`loads_plain`): a name
    no pattern of :data:`LEGACY_PATTERNS` finds is returned as it is, any other is renamed by
    ``transformers`` (imported then)."""
    exact = _LazyRenamer(config)
    return lambda name: exact(name) if _LEGACY.search(name) else name


class _LazyRenamer:
    """``transformers``' renaming for ``config``, built on the first name."""

    def __init__(self, config: dict):
        self._config = config
        self._rename: Callable[[str], str] | None = None

    def __call__(self, name: str) -> str:
        if self._rename is None:
            self._rename = _from_transformers(self._config)
        return self._rename(name)


def _from_transformers(config: dict) -> Callable[[str], str]:
    """The renaming of ``transformers``' conversion mapping (imports it); identity without ``transformers``."""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, apply_renamings
    except ImportError:
        return lambda name: name
    renamings = []
    for key in lookup_keys(config):
        found = get_checkpoint_conversion_mapping(key)
        if found is not None:
            renamings += [copy.deepcopy(t) for t in found if isinstance(t, WeightRenaming)]
            break
    legacy = get_checkpoint_conversion_mapping("legacy") or []
    renamings += [copy.deepcopy(t) for t in legacy if isinstance(t, WeightRenaming)]
    if not renamings:
        return lambda name: name
    return lambda name: apply_renamings(name, renamings)
