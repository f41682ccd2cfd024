"""Distributed training: records on rank 0, matrices gathered from FSDP shards, wrappers seen through.

- ``torch.distributed`` not initialised (one process): that process records.
- DistributedDataParallel (and any wrapper holding the model as ``.module``): every rank holds the whole
  matrices; rank 0 records, the other ranks' monitors do nothing.
- FullyShardedDataParallel (``torch.distributed.fsdp``, the wrapper class): at a recorded step every rank
  enters ``FSDP.summon_full_params(model, writeback=False, rank0_only=True)`` (a collective: each rank
  must call ``Monitor.step`` at the same steps, as it calls the optimizer), and rank 0 copies the
  gathered matrices. Parameter names are read with the wrappers' prefixes (``module.``,
  ``_fsdp_wrapped_module.``, ``_checkpoint_wrapped_module.``) removed, as the model's own names.
- DeepSpeed ZeRO-3: not gathered here (its ``GatheredParameters`` context is DeepSpeed's own); watch a
  ZeRO-1/2 run (whole parameters on every rank), which is recorded as DDP is.
"""

from __future__ import annotations

import contextlib

import torch

#: Prefixes that wrappers put in front of the model's own parameter names.
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def is_recording_rank() -> bool:
    """Whether this process records: rank 0, or a process outside ``torch.distributed``."""
    dist = torch.distributed
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def _fsdp_class():
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # a torch built without distributed
        return None
    return FullyShardedDataParallel


def full_parameters(model) -> contextlib.AbstractContextManager:
    """A context in which rank 0 sees ``model``'s whole parameters (FSDP gathers them; else nothing to do)."""
    fsdp = _fsdp_class()
    if fsdp is not None and isinstance(model, fsdp):
        return fsdp.summon_full_params(model, writeback=False, rank0_only=True)
    return contextlib.nullcontext()


class _Unwrapped(torch.nn.Module):
    """A view of a wrapped model with the model's own parameter names (nothing is copied)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "config", getattr(inner, "config", None))

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        for name, p in self._inner.named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate):
            for wrap in WRAPPER_PREFIXES:
                name = name.replace(wrap, "")
            yield name, p


def plain_module(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP/FSDP/``torch.compile`` wrappers, named as the model names its parameters."""
    while isinstance(getattr(model, "module", None), torch.nn.Module) and not hasattr(model, "config"):
        model = model.module
    if getattr(model, "_orig_mod", None) is not None:
        model = model._orig_mod
    if any(w in name for name, _ in model.named_parameters() for w in WRAPPER_PREFIXES):
        return _Unwrapped(model)
    return model
