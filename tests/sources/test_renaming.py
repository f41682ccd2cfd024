"""The renaming tables of :mod:`toolkit.sources.renaming` against the installed ``transformers``, and the
lazy renamer against ``transformers``' own, name for name."""

from __future__ import annotations

import pytest

from toolkit.sources.renaming import LEGACY_PATTERNS, PLAIN_KEYS, lookup_keys, plain_renamer, transformers_renamer

cm = pytest.importorskip("transformers.conversion_mapping")
WeightRenaming = pytest.importorskip("transformers.core_model_loading").WeightRenaming

#: Names of real checkpoints, and names each legacy renaming rewrites.
NAMES = [
    "model.layers.0.self_attn.q_proj.weight", "model.layers.11.mlp.gate_proj.weight", "lm_head.weight",
    "transformer.h.0.attn.c_attn.weight", "bert.encoder.layer.0.attention.output.LayerNorm.weight",
    "bert.embeddings.LayerNorm.gamma", "bert.embeddings.LayerNorm.beta", "encoder.conv.weight_g",
    "encoder.conv.weight_v", "model.language_model.model.layers.0.mlp.up_proj.weight",
    "language_model.model.model.norm.weight", "model.LayerNorm.gammas", "model.embed.weight_gate",
]


def test_plain_keys_have_no_conversion_mapping():
    mapped = sorted(k for k in PLAIN_KEYS if cm.get_checkpoint_conversion_mapping(k) is not None)
    assert mapped == []


def test_legacy_patterns_are_transformers_legacy_renamings():
    legacy = cm.get_checkpoint_conversion_mapping("legacy")
    assert all(isinstance(t, WeightRenaming) and t.scope_prefix is None for t in legacy)
    assert tuple(t.compiled_sources.pattern for t in legacy) == LEGACY_PATTERNS


@pytest.mark.parametrize("config", [
    {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    {"model_type": "bert", "architectures": ["BertModel"]},
    {"model_type": "gpt2"},
    {},
])
def test_plain_renamer_renames_as_transformers(config):
    exact = transformers_renamer(config)  # transformers.conversion_mapping is imported: the exact route
    fast = plain_renamer(config)
    assert [fast(n) for n in NAMES] == [exact(n) for n in NAMES]
    assert fast("bert.embeddings.LayerNorm.gamma") == "bert.embeddings.LayerNorm.weight"
    assert fast("model.LayerNorm.gammas") == "model.LayerNorm.gammas"


@pytest.mark.parametrize("config, plain", [
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, True),
    ({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]}, False),  # embed_out -> lm_head
    ({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"]}, False),
    ({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]}, False),  # not listed
    ({"model_type": 3, "architectures": "LlamaForCausalLM"}, True),  # no key of a string type: none searched
])
def test_lookup_keys_decide_the_route(config, plain):
    assert all(k in PLAIN_KEYS for k in lookup_keys(config)) is plain


def test_gpt_neox_renaming_still_applies():
    rename = transformers_renamer({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]})
    assert rename("embed_out.weight") == "lm_head.weight"
