"""GGUF sources: names, shapes and values equal what ``transformers`` loads.

The real-model tests load each bundled GGUF once with
``AutoModelForCausalLM.from_pretrained(..., gguf_file=..., dtype=float32)``
(15-60 s each on a 2-core machine) and compare every record tensor by tensor,
bit for bit. Findings they pin down:

* Both bundled models tie ``lm_head.weight`` to the embedding: the file has no
  ``output.weight`` and the source yields no ``lm_head.weight`` record; every
  other parameter of the state dict has exactly one record.
* llama's q/k rows come back un-permuted and Gemma's norms come back as
  ``w - 1`` (the ``TensorProcessor`` of ``transformers``), so the values are
  the ``transformers`` ones, not the raw file ones.
"""

from __future__ import annotations

import pytest
import torch

import toolkit.sources.gguf.decoding as gguf_decoding
import toolkit.sources.gguf.transformers_plan as gguf_mod
from toolkit.sources import open_source

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _reference_state_dict(path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return type(model).__name__, {k: v.detach() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return open_source(smollm2_path), _reference_state_dict(smollm2_path)


@pytest.fixture(scope="module")
def gemma3(gemma3_path):
    return open_source(gemma3_path), _reference_state_dict(gemma3_path)


def _assert_equal_to_transformers(source, state_dict):
    records = list(source.tensors())
    names = [r.name for r in records]
    assert len(names) == len(set(names))
    assert set(state_dict) - set(names) == {"lm_head.weight"}  # tied to the embedding, not stored
    assert set(names) <= set(state_dict)
    for rec in records:
        tensor = rec.read()
        assert tuple(tensor.shape) == rec.shape == tuple(state_dict[rec.name].shape), rec.name
        assert torch.equal(tensor.float(), state_dict[rec.name]), rec.name
    return {r.name: r for r in records}


@pytest.mark.slow
def test_smollm2_every_tensor_equals_transformers(smollm2):
    source, (cls, state_dict) = smollm2
    assert cls == "LlamaForCausalLM"
    records = _assert_equal_to_transformers(source, state_dict)
    q = records["model.layers.0.self_attn.q_proj.weight"]
    assert (q.shape, q.dtype, q.stored_name) == ((576, 576), "Q4_1", "blk.0.attn_q.weight")
    assert records["model.layers.0.self_attn.k_proj.weight"].shape == (192, 576)  # 3 kv heads x 64
    assert records["model.embed_tokens.weight"].dtype == "Q8_0"
    assert records["model.norm.weight"].dtype == "float32"
    assert len(records) == 272 and source.dropped == []


@pytest.mark.slow
def test_gemma3_every_tensor_equals_transformers(gemma3):
    source, (cls, state_dict) = gemma3
    assert cls == "Gemma3ForCausalLM"
    records = _assert_equal_to_transformers(source, state_dict)
    assert {r.dtype for r in records.values()} == {"float32", "Q5_0", "Q4_K", "Q6_K", "Q8_0"}
    assert records["model.layers.0.self_attn.q_norm.weight"].stored_name == "blk.0.attn_q_norm.weight"
    assert records["model.layers.0.self_attn.q_proj.weight"].shape == (1024, 640)  # 4 heads x 256


def test_gguf_config_has_the_standard_keys(smollm2_path, gemma3_path):
    smol = open_source(smollm2_path).config
    assert {k: smol[k] for k in ("model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                 "hidden_size", "intermediate_size", "head_dim")} == {
        "model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "hidden_size": 576, "intermediate_size": 1536, "head_dim": 64}
    gem = open_source(gemma3_path).config
    assert (gem["model_type"], gem["num_hidden_layers"], gem["num_attention_heads"], gem["num_key_value_heads"],
            gem["hidden_size"], gem["intermediate_size"], gem["head_dim"]) == ("gemma3_text", 18, 4, 1, 640, 2048, 256)


def test_default_source_is_bundled_smollm2(smollm2_path):
    src = open_source()
    assert src.format == "gguf" and src.location == str(smollm2_path)
    assert src.files() == [str(smollm2_path)] and len(src.fingerprint) == 64 and src.revision == ""
    assert open_source(src) is src


def test_listing_reads_no_tensor_data(smollm2_path, monkeypatch):
    calls = []
    real = gguf_decoding.tensor_data
    monkeypatch.setattr(gguf_decoding, "tensor_data", lambda *a: calls.append(a[0].name) or real(*a))
    records = list(open_source(smollm2_path).tensors())
    assert calls == []
    records[1].read()
    assert calls == [records[1].stored_name]


@pytest.mark.parametrize("kind, dtype", [("F16", torch.float16), ("BF16", torch.bfloat16), ("Q8_0", torch.float32)])
def test_tiny_gguf_dtypes_and_values_equal_transformers(tiny_gguf_dir, kind, dtype):
    from transformers import AutoModelForCausalLM

    path = tiny_gguf_dir / f"{kind.lower()}.gguf"
    source = open_source(tiny_gguf_dir, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_gguf_dir), gguf_file=path.name, dtype=torch.float32)
    state_dict = model.state_dict()
    records = _assert_equal_to_transformers(source, state_dict)
    q = records["model.layers.1.self_attn.q_proj.weight"]
    storage = {"F16": "float16", "BF16": "bfloat16", "Q8_0": "Q8_0"}[kind]
    assert q.dtype == storage and q.read().dtype == dtype
    norm = records["model.layers.1.input_layernorm.weight"]
    assert norm.dtype == "float32" and norm.read().dtype == torch.float32


def test_llama_qk_permutation_is_undone(tmp_path, write_tiny_llama_gguf):
    reference = write_tiny_llama_gguf(tmp_path / "m.gguf", "F32", tied=False, extra=True)
    source = open_source(tmp_path / "m.gguf")
    records = {r.name: r for r in source.tensors()}
    assert set(records) == set(reference)
    for name, expected in reference.items():
        assert torch.equal(records[name].read(), expected), name
    assert source.dropped == ["rope_freqs.weight"]  # transformers does not load it


def test_gemma_norms_are_stored_plus_one(gemma3_path):
    from toolkit.sources.gguf.table import read_gguf_table, tensor_data

    info = next(t for t in read_gguf_table(gemma3_path).tensors if t.name == "blk.0.attn_norm.weight")
    rec = next(r for r in open_source(gemma3_path).tensors() if r.stored_name == "blk.0.attn_norm.weight")
    assert rec.name == "model.layers.0.input_layernorm.weight" and info.type_name == "F32"
    assert torch.equal(rec.read(), torch.from_numpy(tensor_data(info, str(gemma3_path)).copy()) - 1)


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text", "qwen2", "bloom"])
def test_shallow_name_map_equals_full_recursion(model_type):
    """``get_gguf_hf_weights_map`` on the two-level view gives the full map."""
    from transformers import AutoConfig
    from transformers.modeling_gguf_pytorch_utils import TensorProcessor, get_gguf_hf_weights_map

    cfg = AutoConfig.for_model(model_type, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                               num_key_value_heads=2, num_hidden_layers=2, n_layer=2, n_head=4, vocab_size=64,
                               head_dim=8).to_dict()
    model = gguf_mod.meta_model(cfg)
    processor = TensorProcessor(config=cfg)
    full = get_gguf_hf_weights_map(model, processor)
    assert full and get_gguf_hf_weights_map(gguf_mod._Shallow(model), processor) == full


def _write_tiny_qwen2moe_gguf(path):
    """One-layer qwen2moe GGUF: 4 experts stored stacked, gate and up apart.

    ``transformers``' GGUF config mapping has no key for the expert widths,
    so they stay at ``Qwen2MoeConfig``'s defaults (1408 / 5632).
    """
    import gguf
    import numpy as np
    from gguf import GGMLQuantizationType as T

    hidden, kv, experts, ff, shared_ff, vocab = 64, 2, 4, 1408, 5632, 64
    rng = np.random.default_rng(1)
    writer = gguf.GGUFWriter(str(path), "qwen2moe")
    for add, value in [(writer.add_block_count, 1), (writer.add_context_length, 128),
                       (writer.add_embedding_length, hidden), (writer.add_feed_forward_length, ff),
                       (writer.add_head_count, 4), (writer.add_head_count_kv, kv),
                       (writer.add_layer_norm_rms_eps, 1e-6), (writer.add_expert_count, experts),
                       (writer.add_expert_used_count, 2), (writer.add_tokenizer_model, "gpt2"),
                       (writer.add_token_list, [f"t{i}" for i in range(vocab)])]:
        add(value)
    shapes = {
        "token_embd.weight": (vocab, hidden), "blk.0.attn_norm.weight": (hidden,),
        "blk.0.attn_q.weight": (hidden, hidden), "blk.0.attn_k.weight": (kv * 16, hidden),
        "blk.0.attn_v.weight": (kv * 16, hidden), "blk.0.attn_output.weight": (hidden, hidden),
        "blk.0.attn_q.bias": (hidden,), "blk.0.attn_k.bias": (kv * 16,), "blk.0.attn_v.bias": (kv * 16,),
        "blk.0.ffn_norm.weight": (hidden,), "blk.0.ffn_gate_inp.weight": (experts, hidden),
        "blk.0.ffn_gate_exps.weight": (experts, ff, hidden), "blk.0.ffn_up_exps.weight": (experts, ff, hidden),
        "blk.0.ffn_down_exps.weight": (experts, hidden, ff), "blk.0.ffn_gate_inp_shexp.weight": (hidden,),
        "blk.0.ffn_gate_shexp.weight": (shared_ff, hidden), "blk.0.ffn_up_shexp.weight": (shared_ff, hidden),
        "blk.0.ffn_down_shexp.weight": (hidden, shared_ff), "output_norm.weight": (hidden,),
        "output.weight": (vocab, hidden),
    }
    for name, shape in shapes.items():
        array = rng.standard_normal(shape).astype(np.float32)
        if (len(shape) > 1 and "attn" in name) or "exps" in name:
            writer.add_tensor(name, gguf.quants.quantize(array, T.Q8_0), raw_dtype=T.Q8_0)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_moe_experts_merged_as_transformers_merges_them(tmp_path):
    """Two stored tensors (gate, up experts) feed one parameter; one record reads both."""
    from transformers import AutoModelForCausalLM

    _write_tiny_qwen2moe_gguf(tmp_path / "moe.gguf")
    source = open_source(tmp_path, gguf_file="moe.gguf")
    state_dict = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="moe.gguf",
                                                      dtype=torch.float32).state_dict()
    records = {r.name: r for r in source.tensors()}
    assert set(records) == set(state_dict) and source.dropped == []
    for name, rec in records.items():
        assert torch.equal(rec.read(), state_dict[name]), name
    merged = records["model.layers.0.mlp.experts.gate_up_proj"]
    assert merged.shape == (4, 2 * 1408, 64) and merged.dtype == "Q8_0"
    assert merged.stored_name == "blk.0.ffn_gate_exps.weight,blk.0.ffn_up_exps.weight"
    assert records["model.layers.0.mlp.shared_expert_gate.weight"].shape == (1, 64)  # processor adds the axis


# ---------------------------------------------------------------- the config, from the toolkit's header reader


def _write_header_gguf(path, arch, *, name="tiny", kv_heads=2, tokens=8, vocab_key=False, output=False, extra=()):
    """A GGUF with a config's worth of metadata, a token list and two tiny tensors."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_block_count(2)
    writer.add_context_length(64)
    writer.add_embedding_length(16)
    writer.add_feed_forward_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv(kv_heads)  # an int, or a list (one per layer): an array in the file
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_bos_token_id(1)
    if vocab_key:
        writer.add_vocab_size(tokens)
    for add, value in extra:
        getattr(writer, add)(value)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["abc"] if tokens == 1 else [f"t{i}" for i in range(tokens)])
    writer.add_tensor("token_embd.weight", np.ones((max(tokens, 2), 16), np.float32))
    if output:
        writer.add_tensor("output.weight", np.ones((max(tokens, 2), 16), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


#: (architecture, writer options): each exercises one step of load_gguf_checkpoint's config derivation.
HEADER_CASES = {
    "llama": ("llama", {}),
    "llama-named-mistral": ("llama", {"name": "mistral"}),  # renamed to mistral
    "qwen2-per-layer-kv-heads": ("qwen2", {"kv_heads": [2, 2]}),  # an array value stays a list
    "qwen2-one-element-array": ("qwen2", {"kv_heads": [2]}),  # ... a one-element array is its element
    "qwen2moe": ("qwen2moe", {"extra": [("add_expert_count", 4), ("add_expert_used_count", 2)]}),
    "qwen3moe-defaults": ("qwen3moe", {"extra": [("add_expert_count", 4)]}),  # norm_topk_prob default
    "gemma2": ("gemma2", {"extra": [("add_key_length", 8)]}),
    "gemma3-text": ("gemma3", {"extra": [("add_key_length", 8), ("add_sliding_window", 16)]}),
    "gpt2-untied": ("gpt2", {"output": True}),
    "falcon-always-tied": ("falcon", {"output": True}),
    "phi3-vocab-key": ("phi3", {"vocab_key": True, "tokens": 5}),
    "starcoder2-one-token": ("starcoder2", {"tokens": 1}),  # transformers takes len() of the one token
}
#: Architectures whose config load_gguf_checkpoint post-processes: it is asked itself.
REPLAYED_CASES = {
    "stablelm": ("stablelm", {}),
    "lfm2": ("lfm2", {"kv_heads": [0, 2]}),
}


def _reference_config(path):
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    return load_gguf_checkpoint(str(path), return_tensors=False)["config"]


def _forbid_transformers_reader(monkeypatch):
    """Make ``gguf.GGUFReader`` and ``load_gguf_checkpoint`` fail for the rest of the test."""
    import gguf
    import transformers.modeling_gguf_pytorch_utils as hf_gguf

    def refuse(*args, **kwargs):
        raise AssertionError("the slow reader was used")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    monkeypatch.setattr(hf_gguf, "load_gguf_checkpoint", refuse)


def test_bundled_gguf_configs_equal_transformers_without_its_reader(smollm2_path, gemma3_path, tiny_gguf_dir,
                                                                    monkeypatch):
    import gguf

    paths = [smollm2_path, gemma3_path, tiny_gguf_dir / "f16.gguf", tiny_gguf_dir / "untied.gguf"]
    expected = [_reference_config(p) for p in paths]
    real_reader = gguf.GGUFReader
    _forbid_transformers_reader(monkeypatch)
    for path, want in zip(paths, expected, strict=True):  # without GGUFReader (4-16 s a file)
        got = gguf_mod.gguf_config(str(path), want["model_type"])
        assert got == want and list(got) == list(want), path.name  # same keys, values and order
    monkeypatch.undo()
    assert gguf.GGUFReader is real_reader  # nothing was swapped for the process
    assert expected[1]["model_type"] == "gemma3_text" and expected[0]["tie_word_embeddings"] is True
    assert expected[3]["tie_word_embeddings"] is False


@pytest.mark.parametrize("case", sorted(HEADER_CASES))
def test_header_config_equals_transformers_for_each_rule(tmp_path, case, monkeypatch):
    arch, options = HEADER_CASES[case]
    path = _write_header_gguf(tmp_path / "m.gguf", arch, **options)
    want = _reference_config(path)
    _forbid_transformers_reader(monkeypatch)
    got = gguf_mod.gguf_config(str(path), arch)
    assert got == want and list(got) == list(want)


def test_header_config_rules_pinned():
    """What the cases above check, spelled out (so a rule transformers drops shows up here)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        def config(case):
            arch, options = HEADER_CASES[case]
            return gguf_mod.gguf_config(str(_write_header_gguf(Path(folder) / f"{case}.gguf", arch, **options)), arch)

        assert config("llama-named-mistral")["model_type"] == "mistral"
        assert config("qwen2-per-layer-kv-heads")["num_key_value_heads"] == [2, 2]
        assert config("qwen2-one-element-array")["num_key_value_heads"] == 2
        assert config("qwen2moe")["model_type"] == "qwen2_moe"
        assert config("qwen3moe-defaults")["norm_topk_prob"] is True
        assert config("gemma3-text")["model_type"] == "gemma3_text"
        assert config("gpt2-untied")["tie_word_embeddings"] is False
        assert config("falcon-always-tied")["tie_word_embeddings"] is True
        assert config("phi3-vocab-key")["vocab_size"] == 5 and config("llama")["vocab_size"] == 8
        assert config("starcoder2-one-token")["vocab_size"] == 3


@pytest.mark.parametrize("case", sorted(REPLAYED_CASES))
def test_post_processed_architectures_ask_transformers_itself(tmp_path, case, monkeypatch):
    import gguf

    arch, options = REPLAYED_CASES[case]
    path = _write_header_gguf(tmp_path / "m.gguf", arch, **options)
    want = _reference_config(path)
    real, opened = gguf.GGUFReader, []
    monkeypatch.setattr(gguf, "GGUFReader", lambda *a, **k: opened.append(a) or real(*a, **k))
    assert gguf_mod.gguf_config(str(path), arch) == want
    assert opened == [(str(path),)]


def test_unsupported_gguf_architecture_is_a_checkpoint_error(tmp_path):
    from toolkit.errors import CheckpointFileError

    path = _write_header_gguf(tmp_path / "m.gguf", "nosuchfamily")
    with pytest.raises(CheckpointFileError, match="cannot read GGUF architecture 'nosuchfamily'.*not supported"):
        gguf_mod.gguf_config(str(path), "nosuchfamily")


def test_header_arrays_are_located_then_read_on_demand(tmp_path):
    from toolkit.sources.gguf.table import GGUFArray, read_gguf_table

    path = _write_header_gguf(tmp_path / "m.gguf", "llama", kv_heads=[2, 1], tokens=5)
    table = read_gguf_table(path)
    tokens, kv = table.metadata["tokenizer.ggml.tokens"], table.metadata["llama.attention.head_count_kv"]
    assert isinstance(tokens, GGUFArray) and (tokens.count, tokens.element_type) == (5, 8)
    assert tokens.values() == ["t0", "t1", "t2", "t3", "t4"] and kv.values() == [2, 1]
    assert table.metadata["general.name"] == "tiny" and table.metadata["llama.block_count"] == 2
    assert [t.name for t in table.tensors] == ["token_embd.weight"] and table.path == str(path)
