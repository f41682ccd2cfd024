"""The per-head variables of ``weight_stats(per_head=True)``: (layer, component, head) and (…, kv_head)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from toolkit.collect.assemble.layout import Grid
from toolkit.metrics.per_head import HEAD_ATTRS, HEAD_STATS, KV_HEAD_COMPONENTS, Q_HEAD_COMPONENTS


def with_heads(ds: xr.Dataset, cells: dict, spec) -> xr.Dataset:
    """``ds`` with the per-head variables of its attention cells.

    Parameters
    ----------
    ds : xarray.Dataset
        The (layer, component) Dataset of the pass.
    cells : dict
        ``{(layer, component): Cell}`` (routed experts keyed by three are skipped);
        a cell's ``heads`` is ``{stat: [(value, reason) per head]}`` or None.
    spec : toolkit.collect.measure.heads.HeadSpec

    Returns
    -------
    xarray.Dataset
        Plus ``<stat>_per_head`` (layer, component, head) float64 for ``attn.q`` / ``attn.o``
        and ``<stat>_per_kv_head`` (layer, component, kv_head) for ``attn.k`` / ``attn.v``
        (NaN in the other components), ``stat`` in ``alpha``, ``stable_rank``,
        ``spectral_norm``; coord ``kv_head_of_head`` (head): the key/value head each
        query head reads (GQA); attrs ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``.
    """
    grid = Grid([int(x) for x in ds.layer.values], list(ds.component.values))
    out = ds.copy()
    for dim, n, group in (("head", spec.num_heads, Q_HEAD_COMPONENTS),
                          ("kv_head", spec.num_kv_heads, KV_HEAD_COMPONENTS)):
        suffix = "_per_head" if dim == "head" else "_per_kv_head"
        for stat in HEAD_STATS:
            data = np.full((len(grid.layers), len(grid.components), n), np.nan)
            for key, cell in cells.items():
                if len(key) == 2 and key[1] in group and cell.heads is not None:
                    data[grid.at(*key)] = [v for v, _ in cell.heads[stat]]
            attrs = {**HEAD_ATTRS[stat], "components": ", ".join(group)}
            out[stat + suffix] = (("layer", "component", dim), data, attrs)
        out = out.assign_coords({dim: (dim, np.arange(n))})
    group_size = max(1, spec.num_heads // spec.num_kv_heads)
    out = out.assign_coords(kv_head_of_head=("head", np.arange(spec.num_heads) // group_size,
                                             {"long_name": "key/value head read by each query head (GQA)"}))
    out.attrs.update(num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
                     head_dim=spec.head_dim)
    return out
