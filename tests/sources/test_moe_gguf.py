"""A GGUF MoE file (written with ``gguf``'s writer, llama.cpp's layout) gives the numbers of its safetensors twin."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import toolkit
from toolkit.testing import write_tiny_moe_checkpoint, write_tiny_moe_gguf

METRICS = ["frobenius_norm", "stable_rank", "spectral_norm"]
#: transformers' GGUF tables do not map ``expert_feed_forward_length``: its config (and the model it builds)
#: has the config class's default expert size (Qwen2MoeConfig 1408, Qwen3MoeConfig 768), so the twins use it.
DEFAULT_EXPERT_SIZE = {"qwen2_moe": 1408, "qwen3_moe": 768}


def _twin(root, family):
    folder = write_tiny_moe_checkpoint(root / family, family, num_layers=2, mlp_only_layers=[],
                                       moe_intermediate_size=DEFAULT_EXPERT_SIZE[family])
    return folder, write_tiny_moe_gguf(root / f"tiny-{family}-F32.gguf", folder)


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    return _twin(tmp_path_factory.mktemp("moe_gguf"), "qwen2_moe")


@pytest.mark.parametrize("family", ["qwen2_moe", "qwen3_moe"])
def test_gguf_moe_equals_its_safetensors_twin(family, twin, tmp_path):
    folder, gguf_path = twin if family == "qwen2_moe" else _twin(tmp_path, family)
    st = toolkit.weight_stats(folder, METRICS, progress=False, cache=False)
    gg = toolkit.weight_stats(gguf_path, METRICS, progress=False, cache=False)
    assert gg.attrs["format"] == "gguf" and list(gg.component.values) == list(st.component.values)
    assert list(gg.moe_layers) == [0, 1] and gg.sizes["expert"] == 4
    for m in METRICS:
        np.testing.assert_allclose(gg[m].values, st[m].values, rtol=1e-6, equal_nan=True)
        np.testing.assert_allclose(gg[f"{m}_per_expert"].values, st[f"{m}_per_expert"].values, rtol=1e-6,
                                   equal_nan=True)
    extras = ["mlp.router", "mlp.shared.up", "mlp.shared.gate"] if family == "qwen2_moe" else ["mlp.router"]
    assert list(gg.component.values)[7:] == extras[:1] + (["mlp.shared.up", "mlp.shared.down", "mlp.shared.gate"]
                                                          if family == "qwen2_moe" else [])
    assert np.isfinite(gg.frobenius_norm.sel(component=extras)).all()


def test_gguf_experts_equal_transformers_gguf_loader(twin):
    """Each expert as transformers' own GGUF loader builds the merged ``gate_up_proj`` (gate rows first)."""
    _, gguf_path = twin
    tensors = _loaded_gguf_tensors(gguf_path)
    gg = toolkit.weight_stats(gguf_path, ["frobenius_norm"], progress=False, cache=False)
    for layer in (0, 1):
        gate, up = tensors[f"model.layers.{layer}.mlp.experts.gate_up_proj"].chunk(2, dim=1)
        down = tensors[f"model.layers.{layer}.mlp.experts.down_proj"]
        for comp, stack in (("mlp.gate", gate), ("mlp.up", up), ("mlp.down", down)):
            np.testing.assert_allclose(gg.frobenius_norm_per_expert.sel(layer=layer, component=comp).values,
                                       torch.linalg.matrix_norm(stack.double()).numpy(), rtol=1e-6)


def _loaded_gguf_tensors(path) -> dict:
    """The parameters ``from_pretrained(gguf_file=...)`` fills, as its GGUF loader builds them."""
    import transformers
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = transformers.AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]


def test_gguf_expert_size_other_than_the_default_is_refused(tmp_path):
    """The config transformers derives has the default expert size; a file with another one is refused, not cut."""
    from toolkit.errors import MappingError

    folder = write_tiny_moe_checkpoint(tmp_path / "st", "qwen2_moe", num_layers=1, mlp_only_layers=[])
    path = write_tiny_moe_gguf(tmp_path / "small.gguf", folder)
    with pytest.raises(MappingError, match=r"2816 fused output rows.*\(32, 32\)|\(32, 1408\) from moe_intermedia"):
        toolkit.weight_stats(path, ["frobenius_norm"], progress=False, cache=False)


def test_mixtral_gguf_whose_experts_transformers_drops_is_refused(tmp_path):
    """A Mixtral GGUF (architecture llama with expert_count): transformers loads no expert; refused, not half-read."""
    import gguf

    from toolkit.errors import CheckpointFileError

    rng = np.random.default_rng(0)
    hidden, ffn, experts, vocab = 32, 16, 4, 64
    w = gguf.GGUFWriter(str(tmp_path / "mixtral.gguf"), "llama")
    for add, value in ((w.add_block_count, 1), (w.add_context_length, 64), (w.add_embedding_length, hidden),
                       (w.add_feed_forward_length, ffn), (w.add_head_count, 4), (w.add_head_count_kv, 4),
                       (w.add_layer_norm_rms_eps, 1e-5), (w.add_expert_count, experts), (w.add_expert_used_count, 2)):
        add(value)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    w.add_tensor("token_embd.weight", f32(vocab, hidden))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.0.{name}.weight", f32(hidden, hidden))
    w.add_tensor("blk.0.attn_norm.weight", f32(hidden))
    w.add_tensor("blk.0.ffn_norm.weight", f32(hidden))
    w.add_tensor("blk.0.ffn_gate_inp.weight", f32(experts, hidden))
    for name, shape in (("gate", (experts, ffn, hidden)), ("up", (experts, ffn, hidden)),
                        ("down", (experts, hidden, ffn))):
        w.add_tensor(f"blk.0.ffn_{name}_exps.weight", f32(*shape))
    w.add_tensor("output_norm.weight", f32(hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(CheckpointFileError, match=r"blk\.0\.ffn_gate_inp\.weight.*safetensors"):
        toolkit.weight_stats(tmp_path / "mixtral.gguf", ["frobenius_norm"], progress=False, cache=False)
