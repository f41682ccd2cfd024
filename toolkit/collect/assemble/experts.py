"""The ``expert`` dimension of an MoE Dataset: per-expert variables and their mean per cell.

The cells of routed experts, keyed ``(layer, component, expert)``, give each
metric a variable ``<metric>_per_expert`` (layer, component, expert), and
their mean over the experts becomes the ``(layer, component)`` cell, so the
heatmap of an MoE model lines up with a dense one.
"""

from __future__ import annotations

import re

import numpy as np
import xarray as xr

from toolkit.collect.cells import Cell

__all__ = ["MEAN_NOTE", "expert_grid", "mean_note", "split_cells"]


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


def expert_grid(routed: dict, metrics, grid, experts=None) -> tuple[dict, dict, dict]:
    """The mean cells, the ``_per_expert`` variables and the attrs of the routed experts.

    Parameters
    ----------
    routed : dict
        ``{(layer, component, expert): Cell}``.
    metrics : list of Metric
    grid : toolkit.collect.assemble.layout.Grid
        The Dataset's layers and components.
    experts : sequence of int, optional
        The ``expert`` coordinate (a selection); default ``0 ..`` the largest in ``routed``.

    Returns
    -------
    means : dict
        ``{(layer, component): Cell}``: each metric the mean over the layer's
        experts in ``routed`` (NaN when any expert's value is NaN).
    variables : dict
        ``{"<metric>_per_expert": DataArray}`` (layer, component, expert)
        float64, NaN where a (layer, component) has no routed expert; and the
        string coordinate ``parameter_name_per_expert``.
    attrs : dict
        ``num_experts`` (int: the largest expert index + 1) and ``moe_layers`` (int64
        array of the layers with routed experts) for the Dataset.
    """
    groups: dict[tuple[int, str], dict[int, Cell]] = {}
    for (layer, comp, e), cell in routed.items():
        groups.setdefault((layer, comp), {})[e] = cell
    means = {key: _mean_cell(group, metrics) for key, group in groups.items()}
    num_experts = 1 + max(e for _, _, e in routed)
    experts = list(range(num_experts)) if experts is None else [int(e) for e in experts]
    at = {e: k for k, e in enumerate(experts)}
    shape = (len(grid.layers), len(grid.components), len(experts))
    data = {m.name: np.full(shape, np.nan) for m in metrics}
    names = np.full(shape, "", dtype=object)
    for (layer, comp, e), cell in routed.items():
        i, j = grid.at(layer, comp)
        names[i, j, at[e]] = cell.parameter_name
        for m in metrics:
            data[m.name][i, j, at[e]] = cell.values.get(m.name, np.nan)
    dims = ("layer", "component", "expert")
    layers = sorted({layer for layer, _ in groups})
    variables = {}
    for m in metrics:
        attrs = dict(m.attrs())
        attrs["description"] = f"{attrs.get('description', '')}; per routed expert of the MoE layers " \
                               "(NaN for components without routed experts)".lstrip("; ")
        variables[f"{m.name}_per_expert"] = xr.DataArray(data[m.name], dims=dims, attrs=attrs)
    coords = {"expert": ("expert", np.asarray(experts, dtype=np.int64), {"long_name": "routed expert"}),
              "parameter_name_per_expert": (dims, names.astype(str))}
    return means, {"variables": variables, "coords": coords}, {
        "num_experts": int(num_experts), "moe_layers": np.asarray(layers, dtype=np.int64)}


#: The attr every (layer, component) metric variable of an MoE Dataset carries.
MEAN_NOTE = ("for the routed-expert components of the MoE layers (<layers>; Dataset attr moe_layers): the "
             "mean over the routed experts of <metric>_per_expert (NaN when any expert's value is NaN)")


def mean_note(metric: str, layers, experts=None) -> str:
    """The ``expert_reduction`` attr of ``metric``'s (layer, component) variable, naming the MoE layers
    (and, for a selection of ``experts``, that the mean is over those only)."""
    shown = "layers " + ", ".join(str(int(x)) for x in sorted(layers))
    note = MEAN_NOTE.replace("<metric>", metric).replace("<layers>", shown)
    if experts is None:
        return note
    return note.replace("the mean over the routed experts", "the mean over the selected routed experts "
                        f"({', '.join(str(int(e)) for e in experts)})")
