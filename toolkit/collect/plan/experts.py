"""Routed experts in a plan: one unit per expert slice, and the checks of the experts a config declares.

A 3-D expert stack whose format reads one expert at a time (safetensors)
becomes one unit per expert (:func:`toolkit.sources.expert_slices.expert_slice`),
so the pipeline holds one expert matrix, not the stack, and a Dask run has
one task per expert. A stack the format reads only whole (GGUF, whose expert
tensors ``transformers`` merges while dequantising) stays one unit with a
piece per expert. Their ``expert`` dimension in the Dataset is
:mod:`toolkit.collect.assemble.experts`'s.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

from toolkit.architectures.base import Extract
from toolkit.collect.plan.types import PlannedTensor
from toolkit.errors import MappingError, UnmappedParametersError
from toolkit.sources.expert_slices import SEPARATOR, expert_slice, sliceable

__all__ = ["check_dropped_experts", "check_experts", "planned_units", "with_expert_slices"]

#: GGUF tensor names of llama.cpp's MoE layers (routed experts, router, shared experts).
_GGUF_MOE = re.compile(r"\.ffn_(gate|up|down)_(exps|shexp)\.|\.ffn_gate_inp(_shexp)?\.")


def planned_units(record, pieces) -> list:
    """The :class:`~toolkit.collect.plan.types.PlannedTensor` units of one stored tensor.

    Parameters
    ----------
    record : TensorRecord
    pieces : sequence of Piece
        What the adapter cuts from it.

    Returns
    -------
    list of PlannedTensor
        One per expert (its slice record, its pieces reading the 2-D slice)
        when ``record`` is a stack of experts its format can slice; else the
        one unit ``PlannedTensor(record, pieces)``.
    """
    stacked = [p for p in pieces if isinstance(p.extract, Extract) and p.extract.expert is not None]
    count = len({p.expert for p in stacked})
    if stacked and (len(record.shape) != 3 or record.shape[0] != count):
        raise MappingError(record.name, f"the config declares {count} routed experts, but the stored stack has "
                           f"shape {tuple(record.shape)} (experts first); does the config belong to this checkpoint?")
    if not stacked or len(stacked) != len(pieces) or not sliceable(record):
        return [PlannedTensor(record, tuple(pieces))]
    units = []
    for e in sorted({p.expert for p in stacked}):
        sliced = expert_slice(record, e)
        units.append(PlannedTensor(sliced, tuple(
            replace(p, parameter_name=sliced.name, extract=replace(p.extract, parameter_name=sliced.name, expert=None))
            for p in stacked if p.expert == e)))
    return units


def with_expert_slices(plan) -> dict:
    """``{name: record}`` of every stored tensor of ``plan``'s source, in file order, each expert stack
    the plan reads per expert replaced by its expert slices (so ``compare`` pairs expert by expert)."""
    sliced: dict = {}
    for t in plan.tensors:
        stack, sep, _ = t.record.name.rpartition(SEPARATOR)
        if sep:
            sliced.setdefault(stack, []).append(t.record)
    out = {}
    for r in plan.source.tensors():
        for rec in sliced.get(r.name, [r]):
            out[rec.name] = rec
    return out


def check_dropped_experts(source) -> None:
    """Refuse a GGUF file whose expert tensors ``transformers``' GGUF loader leaves out.

    A Mixtral GGUF is written as architecture ``llama`` with ``expert_count``;
    ``transformers`` maps no parameter to its ``ffn_*_exps`` tensors (they are
    in ``GGUFSource.dropped``), so its grid would silently lack the MLP.

    Raises
    ------
    CheckpointFileError
        Naming the dropped expert tensors and the way out.
    """
    dropped = [n for n in source.dropped if _GGUF_MOE.search(n)]
    if dropped:
        from toolkit.errors import CheckpointFileError

        arch = source.config.get("model_type")
        raise CheckpointFileError(
            source.files()[0] if source.files() else source.location,
            f"it holds mixture-of-experts tensors ({', '.join(dropped[:4])}{' ...' if len(dropped) > 4 else ''}) "
            f"that transformers' GGUF loader does not read for model_type {arch!r} (a Mixtral GGUF is written as "
            "llama); its grid would lack every expert. Open the model's safetensors checkpoint instead "
            "(GGUF MoE is read for qwen2moe and qwen3moe)")


def check_experts(adapter, keys) -> None:
    """Check that every (layer, component) with routed experts has each of the config's experts once.

    Parameters
    ----------
    adapter : Adapter
        Its ``num_experts`` (an MoE adapter's) is the count the config declares.
    keys : iterable of tuple
        ``Piece.key`` of every piece of the plan.

    Raises
    ------
    UnmappedParametersError
        Some experts are missing (a shard missing, or a config from another
        checkpoint); the message names the first such cell.
    """
    groups: dict = {}
    for key in keys:
        if len(key) == 3:
            groups.setdefault(key[:2], set()).add(key[2])
    if not groups:
        return
    count = adapter.num_experts
    for (layer, comp), found in sorted(groups.items()):
        if len(found) != count:  # the first few missing, never a set of a declared 10^9 experts
            missing = list(itertools.islice((e for e in range(count) if e not in found), 11))
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise UnmappedParametersError(
                f"{adapter.family}: layer {layer} {comp} holds {len(found)} of the {count} routed experts the "
                f"config declares; missing experts: {shown}. Is a shard missing, or the config from another "
                "checkpoint?")
