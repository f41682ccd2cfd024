"""Tiny fake checkpoints of every supported family, for tests and docs.

The checkpoints are written by ``transformers``' own config and model classes
with ``save_pretrained``, so parameter names, shapes, config keys and file
layout (shards, index file) are exactly those of a real checkpoint of the
family; only the widths are tiny (hidden 32, 4 heads of 8, intermediate 64)
and the weights random. Families with grouped-query attention get 2 key/value
heads, so k and v have half the rows of q.

Examples
--------
>>> from toolkit.testing import write_tiny_checkpoint
>>> path = write_tiny_checkpoint(tmp_path / "phi3", "phi3", num_layers=2)   # doctest: +SKIP
>>> sorted(p.name for p in path.iterdir())                                   # doctest: +SKIP
['config.json', 'generation_config.json', 'model.safetensors']
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from toolkit.testing.moe import (
    MOE_FAMILIES,
    tiny_moe_config,
    tiny_moe_model,
    write_tiny_moe_checkpoint,
    write_tiny_moe_gguf,
)

__all__ = ["MOE_FAMILIES", "TINY_FAMILIES", "tiny_config", "tiny_model", "tiny_moe_config", "tiny_moe_model",
           "write_tiny_adapter", "write_tiny_checkpoint", "write_tiny_moe_checkpoint", "write_tiny_moe_gguf"]

_TOKENS = dict(vocab_size=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_DECODER = dict(
    hidden_size=32, intermediate_size=64, num_attention_heads=4, max_position_embeddings=64, **_TOKENS
)
_GQA = dict(_DECODER, num_key_value_heads=2, head_dim=8)
_ENCODER = dict(
    hidden_size=32, intermediate_size=64, num_attention_heads=4, max_position_embeddings=64,
    type_vocab_size=2, **_TOKENS,
)

#: ``family -> (model_type, config keyword arguments, head class kind)``.
#: ``family`` is the config's ``model_type`` except ``gemma3``, which writes
#: the multimodal ``Gemma3ForConditionalGeneration`` (tiny SigLIP vision tower).
_SPECS: dict[str, tuple[str, dict, str]] = {
    "llama": ("llama", _GQA, "causal"),
    "mistral": ("mistral", _GQA, "causal"),
    "qwen2": ("qwen2", _GQA, "causal"),
    "qwen3": ("qwen3", _GQA, "causal"),
    "olmo": ("olmo", _GQA, "causal"),
    "olmo2": ("olmo2", _GQA, "causal"),
    "granite": ("granite", _GQA, "causal"),
    "smollm3": ("smollm3", _GQA, "causal"),
    "gemma": ("gemma", _GQA, "causal"),
    "gemma2": ("gemma2", _GQA, "causal"),
    "gemma3_text": ("gemma3_text", _GQA, "causal"),
    "gemma3": ("gemma3", _GQA, "image-text"),
    "phi3": ("phi3", dict(_DECODER, num_key_value_heads=2), "causal"),
    "phi": ("phi", dict(_DECODER, num_key_value_heads=2), "causal"),
    "gpt2": ("gpt2", dict(n_embd=32, n_head=4, n_positions=64, **_TOKENS), "causal"),
    "gpt_neox": ("gpt_neox", dict(_DECODER, rotary_pct=0.5), "causal"),
    "bert": ("bert", _ENCODER, "masked"),
    "roberta": ("roberta", dict(_ENCODER, max_position_embeddings=72, pad_token_id=1, bos_token_id=0), "masked"),
}

#: The families :func:`write_tiny_checkpoint` can write.
TINY_FAMILIES: tuple[str, ...] = tuple(_SPECS)


def tiny_config(family: str, *, num_layers: int = 28):
    """A ``transformers`` config of ``family`` with tiny widths.

    Parameters
    ----------
    family : str
        One of :data:`TINY_FAMILIES`.
    num_layers : int
        ``num_hidden_layers`` (``n_layer`` for gpt2), default 28.

    Returns
    -------
    transformers.PretrainedConfig

    Raises
    ------
    KeyError
        Unknown family; the message lists :data:`TINY_FAMILIES`.
    """
    import transformers

    if family not in _SPECS:
        raise KeyError(f"no tiny checkpoint for {family!r}; families: {', '.join(TINY_FAMILIES)}")
    model_type, kw, kind = _SPECS[family]
    layers_key = "n_layer" if family == "gpt2" else "num_hidden_layers"
    if kind != "image-text":
        return transformers.AutoConfig.for_model(model_type, **{layers_key: num_layers}, **kw)
    text = transformers.Gemma3TextConfig(num_hidden_layers=num_layers, **kw)
    vision = transformers.SiglipVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=4
    )
    return transformers.Gemma3Config(
        text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
        image_token_index=5, boi_token_index=6, eoi_token_index=7,
    )


def tiny_model(family: str, *, num_layers: int = 28, head: bool = True, seed: int = 0):
    """A freshly initialised tiny ``transformers`` model of ``family`` (eval mode).

    Parameters
    ----------
    family : str
        One of :data:`TINY_FAMILIES`.
    num_layers : int
        Number of blocks (default 28).
    head : bool
        True: the task model (``LlamaForCausalLM``, ``BertForMaskedLM``,
        ``Gemma3ForConditionalGeneration``), whose parameter names carry the
        prefix (``model.``, ``transformer.``, ``gpt_neox.``, ``bert.``);
        False: the bare ``AutoModel`` (no prefix).
    seed : int
        ``torch.manual_seed`` before the weights are drawn.

    Returns
    -------
    transformers.PreTrainedModel
        float32 weights.
    """
    import transformers

    config = tiny_config(family, num_layers=num_layers)
    kind = _SPECS[family][2]
    auto = {
        "causal": transformers.AutoModelForCausalLM,
        "masked": transformers.AutoModelForMaskedLM,
        "image-text": transformers.AutoModelForImageTextToText,
    }[kind] if head else transformers.AutoModel
    torch.manual_seed(seed)
    return auto.from_config(config).eval()


def write_tiny_checkpoint(
    path: str | os.PathLike,
    family: str,
    *,
    num_layers: int = 28,
    dtype: torch.dtype = torch.float32,
    max_shard_size: int | str | None = None,
    seed: int = 0,
    head: bool = True,
) -> Path:
    """Write a tiny random checkpoint of ``family`` with ``save_pretrained``.

    Parameters
    ----------
    path : str or path-like
        Directory to write (created if missing).
    family : str
        One of :data:`TINY_FAMILIES` (a ``model_type``; ``gemma3`` is the
        multimodal model with a vision tower, ``gemma3_text`` the text-only one).
    num_layers : int
        Number of blocks, default 28.
    dtype : torch.dtype
        Storage dtype of the weights (``torch.bfloat16``...), default float32.
    max_shard_size : int or str, optional
        Passed to ``save_pretrained`` (``"20KB"``) to write several
        ``model-0000i-of-0000n.safetensors`` shards and an index file.
    seed : int
        Seed of the random weights; the same seed writes the same weights.
    head : bool
        Save the task model (prefixed names, default) or the bare model.

    Returns
    -------
    pathlib.Path
        ``path``, holding ``config.json`` and the safetensors file(s).

    Raises
    ------
    KeyError
        Unknown family.
    """
    path = Path(path)
    model = tiny_model(family, num_layers=num_layers, head=head, seed=seed).to(dtype)
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, **kwargs)
    return path


from toolkit.testing.adapters import write_tiny_adapter  # noqa: E402  (needs peft only when called)
