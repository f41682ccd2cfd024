"""LoRA adapters in ``compare``: the adapter's side becomes its base with ΔW merged in.

``compare(base, adapter)`` compares the base with base + ΔW: the target plan
is the base's plan whose adapted tensors read as merged (each base tensor is
read once per pair, :func:`toolkit.collect.measure.pairs.read_pair`), so its
``relative_change``, ``subspace_overlap``... are those of a full fine-tune.
``compare(adapter)`` opens the base the adapter records.
"""

from __future__ import annotations

import os

from toolkit.collect.plan.types import Plan, PlannedTensor
from toolkit.errors import AdapterBaseError, ToolkitError
from toolkit.sources.base import Source
from toolkit.sources.expert_slices import find_record


def _is_adapter(source) -> bool:
    if isinstance(source, Source):
        return source.measured_as_factors
    if isinstance(source, (str, os.PathLike)):
        from toolkit.sources.lora import is_adapter_folder

        path = os.path.expanduser(os.fspath(source))
        return os.path.isdir(path) and is_adapter_folder(path)
    return False


def adapter_base(adapter) -> str:
    """The base of a LoRA adapter (folder or opened source), for ``compare(adapter)``.

    Raises
    ------
    AdapterBaseError
        ``adapter`` is not a LoRA adapter, or its base is not on this machine
        (the message says how to pass it).
    """
    from toolkit.sources.lora import AdapterSource, open_adapter

    if not _is_adapter(adapter):
        raise AdapterBaseError(str(getattr(adapter, "location", adapter)), "", "compare() with one argument takes "
                               "a LoRA adapter folder; to compare two checkpoints pass both: compare(base, target)")
    try:
        src = adapter if isinstance(adapter, AdapterSource) else open_adapter(adapter)
    except AdapterBaseError as e:
        raise AdapterBaseError(e.adapter, e.base, "its base model is not on this machine (neither a local folder "
                               "nor in the Hugging Face cache); pass it: toolkit.compare(base, adapter)") from None
    from toolkit.sources.lora.source import base_location

    where, config = base_location(src.base)
    if config is None or not (os.path.isdir(where) or _weights_cached(where)):
        raise AdapterBaseError(src.location, src.base, "its base model's weights are not on this machine; pass "
                               "the base: toolkit.compare('path/to/base', adapter), or download it first")
    return where


def _weights_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import scan_cache_dir

        return any(r.repo_id == repo_id for r in scan_cache_dir().repos)
    except Exception:  # noqa: BLE001 - no cache at all
        return False


def merge_adapters(plans: list[Plan], pairs, client=None) -> list[Plan]:
    """``plans`` with each LoRA adapter's plan replaced by its pair's base plan with ΔW merged in.

    Raises
    ------
    ToolkitError
        An adapter as the base side, in a series of more than one pair, or with
        ``client`` (a Dask worker re-opens sources by path, and a merged one has none).
    CheckpointMismatchError, CheckpointFileError
        As the update's :meth:`~toolkit.sources.Source.merged_into`.
    """
    out = list(plans)
    for b, t in pairs:
        if plans[b].source.measured_as_factors and b != t:
            raise ToolkitError(f"{plans[b].source.location!r} is a LoRA adapter: compare its base with it "
                               "(compare(base, adapter)), not the adapter with another checkpoint")
        if not plans[t].source.measured_as_factors or b == t:
            continue
        if client is not None:
            raise ToolkitError("a LoRA adapter is compared with its base in this process: drop client=")
        if len(pairs) > 1:
            raise ToolkitError("LoRA adapters are compared one at a time: toolkit.compare(base, adapter)")
        base = plans[b]
        merged = plans[t].source.merged_into(base.source)
        records = {r.name: r for r in merged.tensors()}
        out[t] = Plan(merged, [PlannedTensor(find_record(records, p.record.name), p.pieces) for p in base.tensors],
                      base.num_layers, base.adapter)
    return out
