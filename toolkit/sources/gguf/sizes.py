"""The sizes a GGUF file's metadata declares, checked against its tensor table before anything is built."""

from __future__ import annotations

import re

from toolkit.errors import CheckpointFileError
from toolkit.sources._common import shown, size_problems
from toolkit.sources.gguf.own_plan import ARCHITECTURES, CONFIG_KEYS
from toolkit.sources.gguf.table import GGUFTable

_BLOCK = re.compile(r"^blk\.(\d+)\.")
#: llama.cpp's stacks of routed experts, (experts, rows, cols) once read.
_EXPERT_STACK = re.compile(r"^blk\.\d+\.ffn_(gate|up|down|gate_up)_exps\.weight$")
#: Config keys of the routed expert count, and of the experts used per token.
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_USED_KEYS = ("num_experts_per_tok",)
#: Sizes no tensor dimension can be smaller than (the embedding has the hidden size, heads fit in it...).
_DIM_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim")


def _gguf_key(table: GGUFTable, key: str) -> str:
    """The metadata key a config key comes from (``llama.block_count`` for ``num_hidden_layers``), else ``key``."""
    arch = table.architecture
    if arch in ARCHITECTURES:  # the own table: no transformers import for an error message
        tables = [CONFIG_KEYS[arch]]
    else:
        try:
            from transformers.modeling_gguf_pytorch_utils import GGUF_TO_TRANSFORMERS_MAPPING

            tables = GGUF_TO_TRANSFORMERS_MAPPING["config"].values()
        except (ImportError, KeyError):
            return key
    for gguf_key in table.metadata:
        prefix, _, rest = gguf_key.partition(".")
        if prefix == arch and any(names.get(rest) == key for names in tables):
            return f"{gguf_key} ({key})"
    return key


def check_declared_sizes(table: GGUFTable, config: dict) -> None:
    """Check the sizes a GGUF file's metadata declares against its tensor table, before anything is built.

    A model is built (on the meta device) from these sizes, and name maps for
    each declared layer: a ``block_count`` of 100000 over a table of 30
    blocks would cost minutes and gigabytes. So the sizes must be positive
    integers, the layer count must be the number of ``blk.N`` blocks the
    table holds (or at most the number of tensors when it has no such
    names), and no width or head count may exceed the largest tensor
    dimension. The cost of the check is proportional to the table.

    Raises
    ------
    CheckpointFileError
        Naming the metadata key, its value and what the table holds.
    """
    path = table.path
    problems = size_problems(config)
    if problems:
        named = [_gguf_key(table, p.split("=", 1)[0]) + "=" + p.split("=", 1)[1] for p in problems]
        raise CheckpointFileError(
            path, f"the GGUF metadata declares {', '.join(named)}: sizes, layer and head counts must be positive "
            "integers; the header is corrupted, re-download or re-convert the file",
        )
    layers = config.get("num_hidden_layers")
    if isinstance(layers, int):
        blocks = sorted({int(m[1]) for t in table.tensors if (m := _BLOCK.match(t.name))})
        if blocks and (len(blocks) != layers or blocks[-1] != layers - 1):
            raise CheckpointFileError(
                path, f"the GGUF metadata declares {_gguf_key(table, 'num_hidden_layers')}={layers} layers, but "
                f"the tensor table holds {len(blocks)} blocks (blk.{blocks[0]} to blk.{blocks[-1]}); the header is "
                "corrupted or the file is incomplete: re-download or re-convert it",
            )
        if not blocks and layers > len(table.tensors):
            raise CheckpointFileError(
                path, f"the GGUF metadata declares {_gguf_key(table, 'num_hidden_layers')}={layers} layers, more "
                f"than the {len(table.tensors)} tensors the file holds; the header is corrupted, re-download it",
            )
    largest = max((d for t in table.tensors for d in t.shape), default=0)
    _check_experts(table, config, largest)
    for key in _DIM_KEYS:
        value = config.get(key)
        top = max(value) if isinstance(value, list) and value else value
        if isinstance(top, int) and top > largest:
            raise CheckpointFileError(
                path, f"the GGUF metadata declares {_gguf_key(table, key)}={shown(value)}, larger than every tensor "
                f"dimension of the file (the largest is {largest}); the header is corrupted, re-download it",
            )


def _check_experts(table: GGUFTable, config: dict, largest: int) -> None:
    """The declared expert count against the stacks of experts the table holds (their first dimension), and
    the experts used per token against it: a model with 10^7 experts is never built for a table of 4.

    Raises
    ------
    CheckpointFileError
        Naming the metadata key, its value and the stored stack.
    """
    path = table.path
    stacks = [t for t in table.tensors if _EXPERT_STACK.match(t.name)]
    for key in _EXPERT_KEYS:
        count = config.get(key)
        if not isinstance(count, int) or isinstance(count, bool):
            continue
        wrong = next((t for t in stacks if not t.shape or t.shape[0] != count), None)
        if wrong is not None or (not stacks and count > largest):
            held = (f"the stack {wrong.name!r} holds {wrong.shape[0] if wrong.shape else 0} experts (shape "
                    f"{tuple(wrong.shape)})" if wrong is not None else
                    f"no tensor of the file has a dimension that large (the largest is {largest})")
            raise CheckpointFileError(
                path, f"the GGUF metadata declares {_gguf_key(table, key)}={count} routed experts, but {held}; the "
                "header is corrupted or from another model: re-download or re-convert the file",
            )
        for used_key in _USED_KEYS:
            used = config.get(used_key)
            if isinstance(used, int) and not isinstance(used, bool) and not 0 < used <= count:
                raise CheckpointFileError(
                    path, f"the GGUF metadata declares {_gguf_key(table, used_key)}={used} experts per token, not "
                    f"between 1 and the {count} experts it declares; re-download or re-convert the file",
                )
