"""Routed experts in a pass: one unit per expert slice, and the ``expert`` dimension of the Dataset.

Planning (:func:`planned_units`): a 3-D expert stack whose format reads one
expert at a time (safetensors) becomes one unit per expert
(:func:`toolkit.sources.expert_slices.expert_slice`), so the pipeline holds
one expert matrix, not the stack, and a Dask run has one task per expert.
A stack the format reads only whole (GGUF, whose expert tensors
``transformers`` merges while dequantising) stays one unit with a piece per
expert.

Assembling (:func:`expert_grid`): the cells of routed experts, keyed
``(layer, component, expert)``, give each metric a variable
``<metric>_per_expert`` (layer, component, expert), and their mean over the
experts becomes the ``(layer, component)`` cell, so the heatmap of an MoE
model lines up with a dense one.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import xarray as xr

from toolkit.architectures.base import Extract
from toolkit.collect.grid import Cell
from toolkit.errors import MappingError, UnmappedParametersError
from toolkit.sources.expert_slices import SEPARATOR, expert_slice, sliceable

__all__ = ["check_dropped_experts", "check_experts", "expert_grid", "planned_units", "split_cells",
           "with_expert_slices"]

#: GGUF tensor names of llama.cpp's MoE layers (routed experts, router, shared experts).
_GGUF_MOE = re.compile(r"\.ffn_(gate|up|down)_(exps|shexp)\.|\.ffn_gate_inp(_shexp)?\.")


def planned_units(record, pieces) -> list:
    """The :class:`~toolkit.collect.plan.PlannedTensor` units of one stored tensor.

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
    from toolkit.collect.plan import PlannedTensor

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
    dropped = [n for n in getattr(source, "dropped", []) if _GGUF_MOE.search(n)]
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
        missing = sorted(set(range(count)) - found)
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise UnmappedParametersError(
                f"{adapter.family}: layer {layer} {comp} holds {len(found)} of the {count} routed experts the "
                f"config declares; missing experts: {shown}. Is a shard missing, or the config from another "
                "checkpoint?")


def split_cells(cells: dict) -> tuple[dict, dict]:
    """``(cells keyed (layer, component), cells keyed (layer, component, expert))``."""
    dense = {k: c for k, c in cells.items() if len(k) == 2}
    routed = {k: c for k, c in cells.items() if len(k) == 3}
    return dense, routed


def _pattern(names: list[str], experts: list[int]) -> str:
    """One name for the experts' matrices: the first expert's name with its index as ``*``."""
    if len(set(names)) == 1:
        return names[0]
    first, e = names[0], experts[0]
    found = list(re.finditer(rf"(?<=[.=]){e}(?=\.|$)", first))  # ".3." or "=3" at the end, never "w3"
    return first if not found else first[: found[-1].start()] + "*" + first[found[-1].end():]


def _mean_cell(group: dict[int, Cell], metrics) -> Cell:
    """The mean over experts (a NaN where any expert's value is NaN, with their reasons)."""
    experts = sorted(group)
    cells = [group[e] for e in experts]
    shapes = {c.shape for c in cells}
    cell = Cell(_pattern([c.parameter_name for c in cells], experts), cells[0].shape if len(shapes) == 1 else (0, 0))
    for m in metrics:
        values = np.array([c.values.get(m.name, np.nan) for c in cells], dtype=np.float64)
        cell.values[m.name] = float(values.mean())
        why = [f"expert {e}: {c.reasons[m.name]}" for e, c in zip(experts, cells, strict=True) if m.name in c.reasons]
        if np.isnan(values).any():
            missing = [e for e, v in zip(experts, values, strict=True) if np.isnan(v)]
            cell.reasons[m.name] = "; ".join(why[:3]) + (" ..." if len(why) > 3 else "") if why else \
                f"no value for expert(s) {', '.join(map(str, missing[:8]))}"
    return cell


def expert_grid(routed: dict, metrics, num_layers: int, components: list[str]) -> tuple[dict, dict, dict]:
    """The mean cells, the ``_per_expert`` variables and the attrs of the routed experts.

    Parameters
    ----------
    routed : dict
        ``{(layer, component, expert): Cell}``.
    metrics : list of Metric
    num_layers : int
    components : list of str
        The Dataset's component coordinate.

    Returns
    -------
    means : dict
        ``{(layer, component): Cell}``: each metric the mean over the layer's
        experts (NaN when any expert's value is NaN).
    variables : dict
        ``{"<metric>_per_expert": DataArray}`` (layer, component, expert)
        float64, NaN where a (layer, component) has no routed expert; and the
        string coordinate ``parameter_name_per_expert``.
    attrs : dict
        ``num_experts`` (int) and ``moe_layers`` (int64 array of the layers
        with routed experts) for the Dataset.
    """
    groups: dict[tuple[int, str], dict[int, Cell]] = {}
    for (layer, comp, e), cell in routed.items():
        groups.setdefault((layer, comp), {})[e] = cell
    means = {key: _mean_cell(group, metrics) for key, group in groups.items()}
    num_experts = 1 + max(e for _, _, e in routed)
    shape = (num_layers, len(components), num_experts)
    col = {c: j for j, c in enumerate(components)}
    data = {m.name: np.full(shape, np.nan) for m in metrics}
    names = np.full(shape, "", dtype=object)
    for (layer, comp, e), cell in routed.items():
        names[layer, col[comp], e] = cell.parameter_name
        for m in metrics:
            data[m.name][layer, col[comp], e] = cell.values.get(m.name, np.nan)
    dims = ("layer", "component", "expert")
    layers = sorted({layer for layer, _ in groups})
    variables = {}
    for m in metrics:
        attrs = dict(m.attrs())
        attrs["description"] = f"{attrs.get('description', '')}; per routed expert of the MoE layers " \
                               "(NaN for components without routed experts)".lstrip("; ")
        variables[f"{m.name}_per_expert"] = xr.DataArray(data[m.name], dims=dims, attrs=attrs)
    coords = {"expert": ("expert", np.arange(num_experts), {"long_name": "routed expert"}),
              "parameter_name_per_expert": (dims, names.astype(str))}
    return means, {"variables": variables, "coords": coords}, {
        "num_experts": int(num_experts), "moe_layers": np.asarray(layers, dtype=np.int64)}


#: The attr every (layer, component) metric variable of an MoE Dataset carries.
MEAN_NOTE = ("for the routed-expert components of the MoE layers (<layers>; Dataset attr moe_layers): the "
             "mean over the routed experts of <metric>_per_expert (NaN when any expert's value is NaN)")


def mean_note(metric: str, layers) -> str:
    """The ``expert_reduction`` attr of ``metric``'s (layer, component) variable, naming the MoE layers."""
    shown = "layers " + ", ".join(str(int(x)) for x in sorted(layers))
    return MEAN_NOTE.replace("<metric>", metric).replace("<layers>", shown)
