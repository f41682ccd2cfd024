"""Tiny mixture-of-experts checkpoints: mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v3, gpt_oss.

Written by ``transformers``' own config and model classes with
``save_pretrained`` (so the stored names and layouts are those of real
checkpoints: per-expert 2-D tensors for all but gpt-oss, whose experts are
3-D stacks), with 4 routed experts (2 per token), hidden 32, 4 heads of 8
(2 key/value heads), expert intermediate 16, dense intermediate 48. The
structure each family is known for is kept: Qwen2-MoE's shared expert and a
dense first layer (``mlp_only_layers``), Qwen3-MoE's dense first layer,
DeepSeek-V3's latent attention (``q_lora_rank`` 24, ``kv_lora_rank`` 16,
heads of 8 no-rope + 4 rope key dims and 6 value dims, as many key/value
heads as query heads, as its eager attention needs), shared expert and
dense first layer (``first_k_dense_replace``). :func:`write_tiny_moe_gguf`
writes the GGUF twin of a tiny Qwen2-MoE or Qwen3-MoE checkpoint as
llama.cpp's converter lays it out.

Examples
--------
>>> from toolkit.testing import write_tiny_moe_checkpoint
>>> path = write_tiny_moe_checkpoint(tmp_path / "olmoe", "olmoe")      # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

__all__ = ["MOE_FAMILIES", "tiny_moe_config", "tiny_moe_model", "write_tiny_moe_checkpoint", "write_tiny_moe_gguf"]

_BASE = dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
             num_experts_per_tok=2, tie_word_embeddings=False)

#: ``family -> config keyword arguments`` (besides :data:`_BASE` and the layer count).
_SPECS: dict[str, dict] = {
    "mixtral": dict(num_local_experts=4),
    "qwen2_moe": dict(num_experts=4, moe_intermediate_size=16, shared_expert_intermediate_size=24,
                      decoder_sparse_step=1, mlp_only_layers=[0]),
    "qwen3_moe": dict(num_experts=4, moe_intermediate_size=16, decoder_sparse_step=1, mlp_only_layers=[0]),
    "olmoe": dict(num_experts=4, intermediate_size=16),
    "deepseek_v3": dict(n_routed_experts=4, moe_intermediate_size=16, n_shared_experts=1, first_k_dense_replace=1,
                        q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
                        n_group=1, topk_group=1, head_dim=4, num_key_value_heads=4),
    "gpt_oss": dict(num_local_experts=4, intermediate_size=16),
}

#: The families :func:`write_tiny_moe_checkpoint` writes.
MOE_FAMILIES: tuple[str, ...] = tuple(_SPECS)


def tiny_moe_config(family: str, *, num_layers: int = 3, **overrides):
    """A tiny ``transformers`` config of an MoE ``family``.

    Parameters
    ----------
    family : str
        One of :data:`MOE_FAMILIES`.
    num_layers : int
        ``num_hidden_layers``, default 3 (each MoE layer holds 12 expert matrices).
    **overrides
        Config keys to set instead (``mlp_only_layers=[]``, ``moe_intermediate_size=...``).

    Returns
    -------
    transformers.PretrainedConfig

    Raises
    ------
    KeyError
        Unknown family; the message lists :data:`MOE_FAMILIES`.
    """
    import transformers

    if family not in _SPECS:
        raise KeyError(f"no tiny MoE checkpoint for {family!r}; families: {', '.join(MOE_FAMILIES)}")
    kw = {**_BASE, **_SPECS[family], "num_hidden_layers": num_layers, **overrides}
    if family == "gpt_oss":
        kw.setdefault("layer_types", ["sliding_attention", "full_attention"] * num_layers)
        kw["layer_types"] = kw["layer_types"][:num_layers]
    return transformers.AutoConfig.for_model(family, **kw)


def tiny_moe_model(family: str, *, num_layers: int = 3, seed: int = 0, **overrides):
    """A freshly initialised tiny causal-LM of an MoE ``family`` (eval mode, float32).

    Parameters
    ----------
    family, num_layers, **overrides
        As :func:`tiny_moe_config`.
    seed : int
        ``torch.manual_seed`` before the weights are drawn.

    Returns
    -------
    transformers.PreTrainedModel
    """
    import transformers

    config = tiny_moe_config(family, num_layers=num_layers, **overrides)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # some families initialise routers or biases to zero: draw them, so every matrix differs
        for p in model.parameters():
            if not p.abs().sum():
                p.normal_(0.0, 0.02)
    return model


def write_tiny_moe_checkpoint(path: str | os.PathLike, family: str, *, num_layers: int = 3,
                              dtype: torch.dtype = torch.float32, seed: int = 0, **overrides) -> Path:
    """Write a tiny random MoE checkpoint with ``save_pretrained``.

    Parameters
    ----------
    path : str or path-like
        Directory to write (created if missing).
    family, num_layers, seed, **overrides
        As :func:`tiny_moe_model`.
    dtype : torch.dtype
        Storage dtype, default float32 (gpt-oss in its bf16 / float form, not MXFP4).

    Returns
    -------
    pathlib.Path
        ``path``, holding ``config.json`` and ``model.safetensors``.

    Raises
    ------
    KeyError
        Unknown family.
    """
    path = Path(path)
    model = tiny_moe_model(family, num_layers=num_layers, seed=seed, **overrides).to(dtype)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    return path


def write_tiny_moe_gguf(path: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Write the float32 GGUF twin of a tiny Qwen2-MoE / Qwen3-MoE checkpoint folder.

    Laid out as llama.cpp's ``convert_hf_to_gguf.py`` writes these
    architectures: the routed experts stacked into ``blk.N.ffn_{gate,up,down}_exps``
    (E, out, in), the router ``ffn_gate_inp``, the shared expert
    ``ffn_{gate,up,down}_shexp`` and its gate ``ffn_gate_inp_shexp`` (a
    vector), attention ``attn_{q,k,v,output}`` (q/k/v biases for Qwen2, q/k
    norms for Qwen3). Every layer must be MoE (llama.cpp has no dense layers
    in these architectures: write the folder with ``mlp_only_layers=[]``).

    Parameters
    ----------
    path : str or path-like
        The ``.gguf`` file to write.
    folder : str or path-like
        A folder :func:`write_tiny_moe_checkpoint` wrote for ``qwen2_moe`` or ``qwen3_moe``.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ValueError
        Another family, or a layer without routed experts.
    """
    import json

    import gguf
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    arch = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe"}.get(cfg.get("model_type"))
    if arch is None:
        raise ValueError(f"write_tiny_moe_gguf writes qwen2_moe and qwen3_moe folders, not {cfg.get('model_type')!r}")
    state = {k: v.float().numpy() for k, v in load_file(str(folder / "model.safetensors")).items()}
    layers, experts = cfg["num_hidden_layers"], cfg.get("num_experts") or cfg["num_local_experts"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny {arch}")
    w.add_block_count(layers)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    if arch == "qwen3moe":
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(experts)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    w.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate": "ffn_gate_inp",
             "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
             "mlp.shared_expert.down_proj": "ffn_down_shexp"}
    for b in range(layers):
        p = f"model.layers.{b}."
        if f"{p}mlp.experts.0.gate_proj.weight" not in state:
            raise ValueError(f"layer {b} has no routed experts; write the folder with mlp_only_layers=[]")
        for hf, name in names.items():
            for kind in ("weight", "bias"):
                if f"{p}{hf}.{kind}" in state:
                    w.add_tensor(f"blk.{b}.{name}.{kind}", state[f"{p}{hf}.{kind}"])
        if f"{p}mlp.shared_expert_gate.weight" in state:
            w.add_tensor(f"blk.{b}.ffn_gate_inp_shexp.weight", state[f"{p}mlp.shared_expert_gate.weight"][0])
        for proj in ("gate", "up", "down"):
            stack = np.stack([state[f"{p}mlp.experts.{e}.{proj}_proj.weight"] for e in range(experts)])
            w.add_tensor(f"blk.{b}.ffn_{proj}_exps.weight", stack)
    w.add_tensor("output_norm.weight", state["model.norm.weight"])
    w.add_tensor("output.weight", state["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
