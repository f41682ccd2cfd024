"""The toolkit's own plan of the common GGUF layouts: names, config and tensor processing
without importing ``transformers`` (the transformers-free reader).

Opening a GGUF file the way ``transformers`` loads it (:mod:`toolkit.sources.gguf.transformers_plan`)
imports its GGUF module and builds the model on the ``meta`` device for the
parameter names: about 2.5 s of imports on 2 cores, more than the rest of a
small model's whole pass. For the llama-style layouts (GGUF architectures
``llama``, ``qwen2`` and ``qwen3``) the same three
things are written down here:

- the config: ``load_gguf_checkpoint``'s steps for these architectures (they
  have no defaults and no post-processing), with its key renamings copied
  from ``transformers.integrations.ggml.GGUF_CONFIG_MAPPING`` (:data:`CONFIG_KEYS`);
- the names: llama.cpp's tensor names (``blk.N.attn_q.weight``) and the
  parameter names ``get_gguf_hf_weights_map`` gives for these families
  (:data:`BLOCK_NAMES`, :data:`TOP_NAMES`);
- the processing: ``LlamaTensorProcessor``'s un-permutation of ``attn_q`` and
  ``attn_k`` (the GGUF ``llama`` architecture only); the others are unchanged.

A file with any tensor name or metadata this table does not know goes the
``transformers`` way, so nothing here guesses. The tests check, for the
bundled file and synthetic ones of each architecture, that the config, the
names and every tensor equal ``transformers``' own (``from_pretrained`` and
``load_gguf_checkpoint``).
"""

from __future__ import annotations

import re

import numpy as np
import torch

from toolkit.sources.gguf.decoding import dequantise
from toolkit.sources.gguf.table import GGUFTable, metadata_length, metadata_value

#: GGUF ``general.architecture`` values this table covers.
ARCHITECTURES = ("llama", "qwen2", "qwen3")

_LLAMA_KEYS = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "rope.dimension_count": "head_dim",
    "rope.freq_base": "rope_theta",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "vocab_size": "vocab_size",
}
#: Metadata key (after the architecture prefix) -> config key; None: read and dropped
#: (``transformers`` 5's ``GGUF_CONFIG_MAPPING``, with ``general`` and ``tokenizer``).
CONFIG_KEYS = {
    "llama": _LLAMA_KEYS,
    "qwen2": {**_LLAMA_KEYS, "rope.dimension_count": None},
    "qwen3": {**_LLAMA_KEYS, "rope.dimension_count": None},
    "general": {"architecture": "model_type", "name": "_model_name_or_path"},
    "tokenizer": {
        "ggml.bos_token_id": "bos_token_id",
        "ggml.eos_token_id": "eos_token_id",
        "ggml.unknown_token_id": "unk_token_id",
        "ggml.padding_token_id": "pad_token_id",
    },
}

#: ``blk.N.<gguf>`` -> ``model.layers.N.<parameter>`` (suffix ``.weight`` or ``.bias`` kept).
BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
#: Top-level tensors.
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
#: Stored tensors ``transformers`` does not load (no parameter maps to them).
DROPPED = {"rope_freqs.weight"}
#: Tensors only some of these architectures have (qwen3's q/k norms).
_ONLY = {"attn_q_norm": ("qwen3",), "attn_k_norm": ("qwen3",)}
#: The biases each architecture's model has (any other bias is not loaded by ``transformers``).
_BIASES = {"qwen2": ("attn_q", "attn_k", "attn_v")}

_NAME = re.compile(r"^(?:blk\.(\d+)\.)?([a-z_]+)\.(weight|bias)$")


def parameter_name(gguf_name: str, architecture: str) -> str | None:
    """The ``transformers`` parameter a stored tensor of these layouts feeds; None when not in the table."""
    m = _NAME.match(gguf_name)
    if m is None:
        return None
    block, part, kind = m.groups()
    if architecture not in _ONLY.get(part, (architecture,)):
        return None
    if block is None:
        top = TOP_NAMES.get(part)
        return None if top is None or kind != "weight" else f"{top}.{kind}"
    name = BLOCK_NAMES.get(part)
    if name is None or (kind == "bias" and part not in _BIASES.get(architecture, ())):
        return None
    return f"model.layers.{int(block)}.{name}.{kind}"


def own_config(table: GGUFTable) -> dict | None:
    """``load_gguf_checkpoint(path)["config"]`` for the architectures of this table; None for the others.

    Follows ``transformers`` 5's ``load_gguf_checkpoint`` step for step, as
    :func:`toolkit.sources.gguf.transformers_plan.gguf_config` does with
    ``transformers``' tables (the two are checked equal by the tests).
    """
    meta = table.metadata
    architecture = meta.get("general.architecture")
    if architecture not in ARCHITECTURES:
        return None
    if architecture == "llama" and meta.get("general.name") == "mistral":
        return None  # load_gguf_checkpoint renames it mistral, which gguf-py's name map refuses
    updated = architecture
    config: dict = {"tie_word_embeddings": all(t.name != "output.weight" for t in table.tensors)}
    tokens = None
    for gguf_key, raw in meta.items():
        prefix, _, rest = gguf_key.replace(architecture, updated).partition(".")
        if prefix == "tokenizer" and rest == "ggml.tokens":
            tokens = raw
        renamed = CONFIG_KEYS.get(prefix, {}).get(rest)
        if renamed is None:
            continue
        value = metadata_value(raw)
        if isinstance(value, str) and architecture in value:
            value = value.replace(architecture, updated)
        config[renamed] = value
    if "vocab_size" not in config and tokens is not None:
        config["vocab_size"] = metadata_length(tokens)
    return config


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]] | None:
    """The shape of each parameter (layer prefix dropped) of the model ``config`` describes; None when its
    sizes are missing or inconsistent (``transformers``' config class then says why, on its path)."""
    sizes = [config.get(k) for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                     "num_key_value_heads", "vocab_size")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
        return None
    h, inter, heads, kv, vocab = sizes
    d = config.get("head_dim")
    if d is None:
        if h % heads:
            return None
        d = h // heads
    if not (isinstance(d, int) and d > 0) or heads % kv or h % heads:
        return None
    shapes = {"model.embed_tokens.weight": (vocab, h), "lm_head.weight": (vocab, h), "model.norm.weight": (h,),
              "input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
              "self_attn.q_norm.weight": (d,), "self_attn.k_norm.weight": (d,),
              "mlp.gate_proj.weight": (inter, h), "mlp.up_proj.weight": (inter, h), "mlp.down_proj.weight": (h, inter),
              "self_attn.o_proj.weight": (h, heads * d)}
    for part, rows in (("q", heads * d), ("k", kv * d), ("v", kv * d)):
        shapes[f"self_attn.{part}_proj.weight"] = (rows, h)
        shapes[f"self_attn.{part}_proj.bias"] = (rows,)
    return shapes


def _reverse_permute(weights: np.ndarray, n_head: int, num_kv_heads: int | None = None) -> np.ndarray:
    """``LlamaTensorProcessor._reverse_permute_weights``: undo llama.cpp's rotary permutation of q/k rows."""
    if num_kv_heads is not None and n_head != num_kv_heads:
        n_head = num_kv_heads
    dim = weights.shape[0] // n_head // 2
    w = weights.reshape(n_head, dim, 2, *weights.shape[1:])
    return w.swapaxes(2, 1).reshape(weights.shape)


class OwnPlan:
    """What ``transformers`` does with each stored tensor of a file of these layouts, from this table.

    The interface of :class:`toolkit.sources.gguf.transformers_plan.TransformersPlan` (``table``, ``raw_config``,
    ``dropped``, ``outputs``, ``groups``, :meth:`materialise`): one stored tensor
    feeds one parameter.
    """

    def __init__(self, table: GGUFTable, config: dict, names: dict[int, str]):
        self.table, self.raw_config = table, config
        self.dropped = [t.name for t in table.tensors if t.name in DROPPED]
        self.outputs = {name: (i, table.tensors[i].shape) for i, name in names.items()}
        self.groups = {i: [i] for i in names}
        self._names = names
        heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
        self._permute = table.metadata.get("general.architecture") == "llama" and None not in (heads, kv)

    @classmethod
    def of(cls, table: GGUFTable) -> OwnPlan | None:
        """The plan of ``table``, or None when any of its tensors or its architecture is not in this table."""
        config = own_config(table)
        if config is None:
            return None
        arch = table.architecture
        shapes = expected_shapes(config)
        if shapes is None:
            return None
        names: dict[int, str] = {}
        for i, info in enumerate(table.tensors):
            if info.name in DROPPED:
                continue
            name = parameter_name(info.name, arch)
            if name is None or name in names.values():
                return None
            kind = re.sub(r"^model\.layers\.\d+\.", "", name)
            if shapes.get(kind) != tuple(info.shape):  # not the model the metadata describes: transformers says why
                return None
            names[i] = name
        return cls(table, config, names)

    def materialise(self, group: int) -> dict[str, torch.Tensor]:
        """Dequantise and process one stored tensor, as ``load_gguf_checkpoint`` does."""
        info = self.table.tensors[group]
        weights = dequantise(info, self.table.path)  # the reading and the errors of both plans
        if self._permute and (".attn_q." in info.name or ".attn_k." in info.name):
            heads = self.raw_config["num_attention_heads"]
            kv = heads if ".attn_q." in info.name else self.raw_config["num_key_value_heads"]
            weights = _reverse_permute(weights, heads, kv)
        if not (weights.flags.writeable and weights.flags.c_contiguous):
            weights = np.copy(weights)
        return {self._names[group]: torch.from_numpy(weights)}
