"""Tiny checkpoints with known differences, for the compare tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from toolkit.testing import write_tiny_checkpoint

UP1 = "model.layers.1.mlp.up_proj.weight"


def tiny(path: Path, *, num_layers: int = 3, dtype=torch.bfloat16, seed: int = 0, family: str = "llama") -> Path:
    """A tiny bf16 llama (hidden 32, untied lm_head) written by transformers."""
    return write_tiny_checkpoint(path, family, num_layers=num_layers, dtype=dtype, seed=seed)


def variant(src: Path, dst: Path, change=None, *, drop=(), config=None) -> Path:
    """Copy checkpoint ``src`` to ``dst`` with ``change(name, tensor) -> tensor`` applied,
    tensors in ``drop`` left out and ``config`` keys updated."""
    shutil.copytree(src, dst)
    state = load_file(src / "model.safetensors")
    state = {k: (change(k, v) if change else v).contiguous() for k, v in state.items() if k not in drop}
    (dst / "model.safetensors").unlink()
    save_file(state, dst / "model.safetensors", metadata={"format": "pt"})
    if config:
        cfg = json.loads((src / "config.json").read_text())
        cfg.update(config)
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def bump_ulps(t: torch.Tensor, count: int, *, step: int = 1) -> torch.Tensor:
    """``t`` (bf16) with its first ``count`` entries moved by ``step`` units in the last place."""
    flat = t.clone().contiguous().view(-1)
    bits = flat[:count].view(torch.int16)
    flat[:count] = (bits + step).view(torch.bfloat16)
    return flat.view(t.shape)
