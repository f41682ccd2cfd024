"""A 28-layer Qwen2.5-7B-shaped checkpoint that costs the disk one layer: layer 0 random, the others sparse.

The explorer's live view is judged by its first cells: the plan (the index, every shard's header, the
config) and the first tensors measured. So every shard is laid out as a real one (the header of
``_scale_7b.layer_shapes``, bf16, the data where the header says), but only layer 0's bytes are
written; the other shards are extended with ``truncate`` and read back as zeros without taking disk
space.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import _scale_7b as S


def _header(spec: list) -> tuple[bytes, int]:
    meta, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in spec:
        n = 2
        for d in shape:
            n *= d
        meta[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(meta, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return raw, offset


def write(folder: Path, layers: int = 28) -> Path:
    """Write the checkpoint into ``folder`` (kept if already there); returns ``folder``."""
    import torch
    from safetensors.torch import save_file

    folder = Path(folder)
    if (folder / "model.safetensors.index.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    cfg = S.config(layers)
    n = layers + 1
    weight_map, total = {}, 0
    g = torch.Generator().manual_seed(0)
    for s in range(n):
        if s == 0:
            spec = [("model.embed_tokens.weight", (cfg["vocab_size"], cfg["hidden_size"])),
                    ("model.norm.weight", (cfg["hidden_size"],))]
        else:
            spec = S.layer_shapes(cfg, s - 1)
        fname = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
        if s <= 1:  # the embedding and layer 0: real bytes
            tensors = {name: (torch.ones(shape) if name.endswith("norm.weight") else
                              torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16) for name, shape in spec}
            save_file(tensors, str(folder / fname), metadata={"format": "pt"})
            size = sum(2 * t.numel() for t in tensors.values())
        else:
            raw, size = _header(spec)
            with open(folder / fname, "wb") as f:
                f.write(struct.pack("<Q", len(raw)) + raw)
                f.truncate(8 + len(raw) + size)  # zeros, not written: a sparse file
        total += size
        weight_map.update({name: fname for name, _ in spec})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return folder
