"""One config normaliser: sources fill the standard keys with it, architectures read their sizes through it."""

from __future__ import annotations

import pytest

from toolkit.architectures import Dims, resolve_adapter
from toolkit.config_keys import PLAIN_DEFAULTS, STANDARD_KEYS, normalize_config
from toolkit.testing import TINY_FAMILIES, tiny_config


def _expected_dims(config) -> tuple:
    """The sizes as ``transformers`` itself reads them off its config object."""
    text = config.get_text_config()
    heads, hidden = text.num_attention_heads, text.hidden_size
    inner = getattr(text, "intermediate_size", None)
    if inner is None and text.model_type == "gpt2":
        inner = text.n_inner or 4 * hidden
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    return (text.num_hidden_layers, hidden, heads, getattr(text, "num_key_value_heads", None) or heads,
            head_dim, inner)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_sources_and_architectures_read_the_same_sizes(family):
    config = tiny_config(family, num_layers=3)
    raw = config.to_diff_dict()  # what config.json holds: only what differs from the class defaults
    raw.setdefault("model_type", config.model_type)
    from_source = normalize_config(raw)  # what a source hands out
    dims = Dims.from_config(raw)
    assert Dims.from_config(from_source) == dims == resolve_adapter(from_source, []).dims
    assert (dims.num_layers, dims.hidden_size, dims.num_attention_heads, dims.num_key_value_heads, dims.head_dim,
            dims.intermediate_size) == _expected_dims(config)
    assert {k: from_source[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                        "hidden_size", "head_dim")} == {
        "num_hidden_layers": dims.num_layers, "num_attention_heads": dims.num_attention_heads,
        "num_key_value_heads": dims.num_key_value_heads, "hidden_size": dims.hidden_size,
        "head_dim": dims.head_dim}
    assert normalize_config(from_source) == from_source  # idempotent


def test_aliases_text_config_and_defaults_without_transformers():
    gpt2 = normalize_config({"n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None}, use_transformers=False)
    assert {k: gpt2.get(k) for k in STANDARD_KEYS[:6]} == {
        "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 12, "hidden_size": 768,
        "intermediate_size": 3072, "head_dim": 64}
    assert gpt2["n_layer"] == 12 and "model_type" not in gpt2  # every key kept, nothing invented
    t5_like = normalize_config({"num_layers": 6, "d_model": 512, "num_heads": 8}, use_transformers=False)
    assert (t5_like["num_hidden_layers"], t5_like["hidden_size"], t5_like["head_dim"]) == (6, 512, 64)
    multimodal = normalize_config({"model_type": "gemma3", "text_config": {
        "num_hidden_layers": 26, "hidden_size": 1152, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 256}}, use_transformers=False)
    assert (multimodal["num_hidden_layers"], multimodal["head_dim"], multimodal["num_key_value_heads"]) == (26, 256, 1)
    assert normalize_config({"hidden_size": 8, "num_hidden_layers": 2, "n_layer": 5}, use_transformers=False)[
        "num_hidden_layers"] == 2  # a standard key the config has wins over an alias


def test_transformers_fills_what_only_its_config_class_knows():
    raw = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
    plain, full = normalize_config(raw, use_transformers=False), normalize_config(raw)
    assert plain.get("vocab_size") is None and full["vocab_size"] == 32000  # LlamaConfig's default
    assert full["num_key_value_heads"] == plain["num_key_value_heads"] == 4
    unknown = normalize_config({"model_type": "no_such_family", "n_layer": 3})
    assert unknown == {"model_type": "no_such_family", "n_layer": 3, "num_hidden_layers": 3}


@pytest.mark.parametrize("family", ["llama", "qwen2", "phi3", "bert", "gpt_neox"])
def test_a_complete_config_reads_the_same_without_transformers(family, tmp_path):
    """The config.json save_pretrained writes for these families gives every standard key, or leaves out
    only those the class derives as the plain defaults do: it is not handed to transformers' config class."""
    import json

    from toolkit.config_keys import _from_transformers, complete
    from toolkit.testing import write_tiny_checkpoint

    raw = json.loads((write_tiny_checkpoint(tmp_path, family, num_layers=2) / "config.json").read_text())
    for config in (raw, {k: v for k, v in raw.items() if k != "tie_word_embeddings"}):  # older files lack it
        assert complete(config)
        asked = dict(config)  # transformers' class, asked anyway, adds only what is derived without it
        _from_transformers(asked)
        assert normalize_config(config) == normalize_config(asked, use_transformers=False)


@pytest.mark.parametrize("model_type", sorted(PLAIN_DEFAULTS))
def test_tied_default_is_the_config_classes(model_type):
    from transformers import AutoConfig

    from toolkit.config_keys import TIED_DEFAULT

    assert TIED_DEFAULT[model_type] is AutoConfig.for_model(model_type).get_text_config().tie_word_embeddings


@pytest.mark.parametrize("model_type", sorted(PLAIN_DEFAULTS))
def test_plain_defaults_are_the_config_classes_defaults(model_type):
    """Each key PLAIN_DEFAULTS lets a config leave out is filled by the class as the plain defaults fill it
    (or not at all: BertConfig has no head_dim), alone and all together."""
    from toolkit.config_keys import _from_transformers

    config = tiny_config(model_type, num_layers=3)
    raw = {**config.to_dict(), "model_type": model_type}
    for left_out in [{k} for k in PLAIN_DEFAULTS[model_type]] + [set(PLAIN_DEFAULTS[model_type])]:
        partial = {k: v for k, v in raw.items() if k not in left_out}
        asked = dict(partial)
        _from_transformers(asked)
        assert normalize_config(asked, use_transformers=False) == normalize_config(partial, use_transformers=False)


def test_complete_refuses_a_config_that_leaves_out_what_only_the_class_knows():
    from toolkit.config_keys import TIED_DEFAULT, complete

    assert set(TIED_DEFAULT) == set(PLAIN_DEFAULTS)  # every entry is checked against its class above

    llama = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "intermediate_size": 96, "vocab_size": 100, "tie_word_embeddings": False}
    assert complete(llama)  # kv heads and head_dim: LlamaConfig's defaults are the plain ones
    assert not complete({**llama, "model_type": "mistral"})  # MistralConfig's num_key_value_heads is 8
    assert not complete({k: v for k, v in llama.items() if k != "vocab_size"})  # LlamaConfig's 32000
    assert normalize_config({k: v for k, v in llama.items() if k != "tie_word_embeddings"})[
        "tie_word_embeddings"] is False  # LlamaConfig's default, known without it
    assert not complete({**llama, "model_type": "t5"})
    assert not complete({**llama, "model_type": ["llama"]})  # no model_type to look up
