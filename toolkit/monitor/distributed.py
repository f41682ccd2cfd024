"""What a monitor reads from a model as it trains: wrappers seen through, FSDP shards gathered, LoRA merged.

- ``torch.distributed`` not initialised (one process): that process records.
- DistributedDataParallel (and any wrapper holding the model as ``.module``): every rank holds the whole
  matrices; rank 0 records, the other ranks' monitors do nothing.
- FullyShardedDataParallel (``torch.distributed.fsdp``, the wrapper class): at a recorded step every rank
  enters ``FSDP.summon_full_params(model, writeback=False, rank0_only=True)`` (a collective: each rank
  must call ``Monitor.step`` at the same steps, as it calls the optimizer), and rank 0 copies the
  gathered matrices.
- DeepSpeed ZeRO-3: not gathered here (its ``GatheredParameters`` context is DeepSpeed's own); watch a
  ZeRO stage 1 or 2 run (whole parameters on every rank), which is recorded as DDP is.
- A ``peft`` LoRA model: each adapted layer is watched as the matrix the forward pass uses,
  :math:`W + \\Delta W` with peft's own ``get_delta_weight`` for the active adapters (scaling and
  ``fan_in_fan_out`` included), under the base model's parameter name; the update since the first record
  is then the adapter's update. Its gradient is not recorded (the base weight is frozen).

Names are the model's own: the wrappers' prefixes (``module.``, ``_fsdp_wrapped_module.``,
``_checkpoint_wrapped_module.``, ``_orig_mod.``, peft's ``base_model.model.`` and ``.base_layer``) removed.
"""

from __future__ import annotations

import contextlib
import re

import torch

#: Parts of a parameter name that wrappers add around the model's own names.
_WRAPPER = re.compile(r"(?:_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)\.")


def is_recording_rank() -> bool:
    """Whether this process records: rank 0, or a process outside ``torch.distributed``."""
    dist = torch.distributed
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def full_parameters(model) -> contextlib.AbstractContextManager:
    """A context in which rank 0 sees ``model``'s whole parameters (FSDP gathers them; else nothing to do)."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:  # a torch built without distributed
        return contextlib.nullcontext()
    if isinstance(model, FSDP):
        return FSDP.summon_full_params(model, writeback=False, rank0_only=True)
    return contextlib.nullcontext()


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config") and isinstance(getattr(model, "base_model", None), torch.nn.Module)


def plain_module(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP / FSDP / ``torch.compile`` / peft wrappers (the module that has the config)."""
    while True:
        if _is_peft(model):
            model = getattr(model.base_model, "model", model.base_model)
        elif isinstance(getattr(model, "module", None), torch.nn.Module) and not hasattr(model, "config"):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        else:
            return model


def _clean(name: str) -> str:
    return _WRAPPER.sub("", name).replace(".base_layer.", ".")


def named_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{name: tensor}`` of the model's parameters as the model names them, a tied parameter under each of its
    names (as a checkpoint saves it: each cell it fills is measured, not left NaN without a reason); a LoRA
    layer's weight is the merged matrix (a new tensor, no gradient), its ``lora_*`` parameters left out."""
    inner = plain_module(model)
    out = {_clean(n): p for n, p in inner.named_parameters(remove_duplicate=False) if ".lora_" not in n}
    for name, module in inner.named_modules():
        if not (callable(getattr(module, "get_delta_weight", None)) and hasattr(module, "base_layer")):
            continue
        adapters = [a for a in getattr(module, "active_adapters", ()) if a in getattr(module, "lora_A", {})]
        if getattr(module, "merged", False) or not adapters:
            continue  # merged into the base weight already, or no adapter active: the base weight is the matrix
        with torch.no_grad():
            weight = module.base_layer.weight.detach()
            out[_clean(name) + ".weight"] = weight + sum(module.get_delta_weight(a).to(weight.dtype) for a in adapters)
    return out
