"""Tiny PEFT LoRA adapters (and their base checkpoints) for tests and docs.

The adapter is made by ``peft`` itself (``get_peft_model`` + ``save_pretrained``)
on a tiny model of :mod:`toolkit.testing`, so its file layout and config are
exactly a real adapter's; its ``lora_B`` (zero at ``peft``'s initialisation)
and DoRA magnitudes are drawn at random so that ΔW is not zero. Needs
``peft`` (the ``test`` extra).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

#: Default target modules per family (fused ones for phi3 and gpt2).
TARGETS = {"phi3": ["qkv_proj", "gate_up_proj", "o_proj"], "gpt2": ["c_attn", "c_proj"]}


def write_tiny_adapter(folder: str | os.PathLike, family: str = "llama", *, num_layers: int = 2, seed: int = 0,
                       **lora) -> tuple[Path, Path]:
    """Write a tiny base checkpoint and a LoRA adapter of it with random non-zero factors.

    Parameters
    ----------
    folder : path-like
        Gets ``base/`` (``save_pretrained`` of the tiny model) and ``adapter/``.
    family : str
        A family of :data:`toolkit.testing.TINY_FAMILIES`.
    num_layers : int, default 2
    seed : int, default 0
        Seeds the base weights and the factors.
    **lora
        ``peft.LoraConfig`` arguments (``r``, ``lora_alpha``, ``use_rslora``,
        ``use_dora``, ``rank_pattern``...). Default ``r=4, lora_alpha=8`` and
        ``target_modules`` q/k/v/o/up/down/gate (fused names for phi3, gpt2).

    Returns
    -------
    (base, adapter) : pathlib.Path
        The adapter's ``base_model_name_or_path`` is ``base``.
    """
    import transformers
    from peft import LoraConfig, get_peft_model

    from toolkit.testing import write_tiny_checkpoint

    folder = Path(folder)
    base = write_tiny_checkpoint(folder / "base", family, num_layers=num_layers, seed=seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    targets = TARGETS.get(family, ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"])
    options = dict(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False,
                   fan_in_fan_out=family == "gpt2")
    options.update(lora)
    peft_model = get_peft_model(model, LoraConfig(**options))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "lora_magnitude_vector" in name:
                p.mul_(1 + 0.1 * torch.randn(p.shape, generator=gen))
    adapter = folder / "adapter"
    peft_model.save_pretrained(adapter)
    return base, adapter
