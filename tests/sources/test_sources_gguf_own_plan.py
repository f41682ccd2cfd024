"""The toolkit's own GGUF table (toolkit.sources.gguf.own_plan) against the transformers path it stands in for.

``TransformersPlan`` is the transformers path (its config, name map and tensor processors;
tests/sources/test_sources_gguf.py checks it and the source against ``from_pretrained``
tensor by tensor). Here the own table must give the same config (keys in the
same order), the same parameter names and shapes in the same order, the same
dropped tensors and bit-identical tensors, and opening a covered file must not
import transformers at all.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from toolkit.sources.gguf.own_plan import OwnPlan, parameter_name
from toolkit.sources.gguf.table import read_gguf_table
from toolkit.sources.gguf.transformers_plan import TransformersPlan

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _write(path, arch: str, *, name: str = "tiny", tied: bool = True, extra: bool = False):
    """A 2-layer GGUF of a llama-style ``arch`` (qwen2: q/k/v biases; qwen3: q/k norms), F16 matrices."""
    import gguf

    hidden, heads, kv, ffn, vocab = 64, 4, 2, 96, 64
    hd = hidden // heads
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])

    def add(n, shape, f16=True):
        a = rng.standard_normal(shape).astype(np.float32)
        w.add_tensor(n, a.astype(np.float16) if f16 and len(shape) == 2 else a)

    add("token_embd.weight", (vocab, hidden))
    for b in range(2):
        add(f"blk.{b}.attn_norm.weight", (hidden,))
        add(f"blk.{b}.attn_q.weight", (hidden, hidden))
        add(f"blk.{b}.attn_k.weight", (kv * hd, hidden))
        add(f"blk.{b}.attn_v.weight", (kv * hd, hidden))
        if arch == "qwen2":
            add(f"blk.{b}.attn_q.bias", (hidden,))
            add(f"blk.{b}.attn_k.bias", (kv * hd,))
            add(f"blk.{b}.attn_v.bias", (kv * hd,))
        if arch == "qwen3":
            add(f"blk.{b}.attn_q_norm.weight", (hd,))
            add(f"blk.{b}.attn_k_norm.weight", (hd,))
        add(f"blk.{b}.attn_output.weight", (hidden, hidden))
        add(f"blk.{b}.ffn_norm.weight", (hidden,))
        add(f"blk.{b}.ffn_gate.weight", (ffn, hidden))
        add(f"blk.{b}.ffn_up.weight", (ffn, hidden))
        add(f"blk.{b}.ffn_down.weight", (hidden, ffn))
    add("output_norm.weight", (hidden,))
    if not tied:
        add("output.weight", (vocab, hidden))
    if extra:
        add("rope_freqs.weight", (hd // 2,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _assert_same_as_transformers(path):
    table = read_gguf_table(path)
    own, ref = OwnPlan.of(table), TransformersPlan(str(path), table)
    assert own is not None
    assert own.raw_config == ref.raw_config and list(own.raw_config) == list(ref.raw_config)
    assert list(own.outputs.items()) == list(ref.outputs.items())
    assert own.dropped == ref.dropped
    for name, (group, _) in own.outputs.items():
        mine, theirs = own.materialise(group), ref.materialise(ref.outputs[name][0])
        assert list(mine) == [name] and list(theirs) == [name]
        assert mine[name].dtype == theirs[name].dtype and torch.equal(mine[name], theirs[name]), name
    return own


@pytest.mark.parametrize("arch, options", [
    ("llama", {}), ("llama", {"tied": False, "extra": True}),
    ("qwen2", {}), ("qwen3", {"tied": False}),
])
def test_own_table_equals_transformers(tmp_path, arch, options):
    own = _assert_same_as_transformers(_write(tmp_path / "m.gguf", arch, **options))
    if options.get("extra"):
        assert own.dropped == ["rope_freqs.weight"]


def test_bundled_smollm2_equals_transformers(smollm2_path):
    own = _assert_same_as_transformers(smollm2_path)
    assert len(own.outputs) == 272 and own.raw_config["num_hidden_layers"] == 30


def test_tiny_llama_files_equal_transformers(tiny_gguf_dir):
    for path in sorted(tiny_gguf_dir.glob("*.gguf")):
        _assert_same_as_transformers(path)


def test_anything_unknown_goes_the_transformers_way(tmp_path):
    table = read_gguf_table(_write(tmp_path / "m.gguf", "llama"))
    assert OwnPlan.of(table) is not None
    odd = dataclasses.replace(table.tensors[3], name="blk.0.attn_qkv.weight")  # a fused layout: not ours
    assert OwnPlan.of(dataclasses.replace(table, tensors=(*table.tensors[:3], odd, *table.tensors[4:]))) is None
    gemma = dataclasses.replace(table, metadata={**table.metadata, "general.architecture": "gemma3"})
    assert OwnPlan.of(gemma) is None
    q = next(i for i, t in enumerate(table.tensors) if t.name == "blk.1.attn_q.weight")
    wrong = dataclasses.replace(table.tensors[q], shape=(48, 64))  # not the 64 x 64 the metadata's model has
    assert OwnPlan.of(dataclasses.replace(table, tensors=(*table.tensors[:q], wrong, *table.tensors[q + 1:]))) is None
    heads = dataclasses.replace(table, metadata={**table.metadata, "llama.attention.head_count": 3})  # 64 / 3
    assert OwnPlan.of(heads) is None
    # renamed 'mistral' by transformers, whose gguf-py name map then refuses it: its error, not our guess
    mistral = dataclasses.replace(table, metadata={**table.metadata, "general.name": "mistral"})
    assert OwnPlan.of(mistral) is None


@pytest.mark.parametrize("gguf_name, arch, expected", [
    ("blk.3.attn_q.weight", "llama", "model.layers.3.self_attn.q_proj.weight"),
    ("blk.0.ffn_down.weight", "qwen3", "model.layers.0.mlp.down_proj.weight"),
    ("blk.1.attn_k.bias", "qwen2", "model.layers.1.self_attn.k_proj.bias"),
    ("blk.1.attn_k.bias", "llama", None),  # llama's attention has no bias parameter
    ("blk.1.attn_output.bias", "qwen2", None),
    ("blk.2.attn_q_norm.weight", "qwen3", "model.layers.2.self_attn.q_norm.weight"),
    ("blk.2.attn_q_norm.weight", "llama", None),
    ("output.weight", "llama", "lm_head.weight"),
    ("token_embd.bias", "llama", None),
    ("blk.0.ffn_gate_exps.weight", "qwen3", None),  # experts: the transformers path
])
def test_parameter_names(gguf_name, arch, expected):
    assert parameter_name(gguf_name, arch) == expected
