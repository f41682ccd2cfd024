"""``weight_stats(..., per_head=True)``: the per-head spectra of the attention matrices.

A second pass of the one pipeline (:func:`toolkit.collect.pipeline.run_units`)
over the stored tensors that hold attention matrices, with its own
measurement (:class:`HeadMeasurement`) and cache namespace (``"heads"``): a
head's slice is another matrix than the cell's, with its own factorisation,
so the cell pass is left as it is and a re-run finds both in the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from toolkit.collect.cache import ResultCache, cache_run, code_identity, digest, open_cache
from toolkit.collect.cell_ids import cut_id, record_id
from toolkit.collect.executors import executor_for
from toolkit.collect.pipeline import run_units
from toolkit.collect.weight_cells import TensorWork
from toolkit.metrics.per_head import (
    HEAD_ATTRS,
    HEAD_STATS,
    KV_HEAD_COMPONENTS,
    Q_HEAD_COMPONENTS,
    head_count,
    head_stats,
)


@dataclass(frozen=True)
class HeadCellWork:
    """One attention cell after its lookup: ``cached`` is ``{(stat, head): (value, reason)}`` or None."""

    piece: object
    cell_id: str
    heads: int
    cached: dict | None

    @property
    def work_left(self) -> bool:
        return self.cached is None


@dataclass(frozen=True)
class HeadMeasurement:
    """The per-head statistics of one pass: head counts, fit options, device, cache key."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    fit_options: tuple
    device: str
    key: str
    kind = "heads"
    float32 = True

    @classmethod
    def make(cls, dims, fit_options: dict, device: str) -> HeadMeasurement:
        opts = tuple(sorted(fit_options.items()))
        sizes = (int(dims.num_attention_heads), int(dims.num_key_value_heads), int(dims.head_dim))
        key = f"heads:{digest(opts, sizes, str(device), code_identity('metrics'))[:16]}"
        return cls(*sizes, opts, str(device), key)

    def _names(self, heads: int) -> list[str]:
        return [f"{self.key}|{stat}|{h}" for h in range(heads) for stat in HEAD_STATS]

    def lookup(self, store: ResultCache, planned) -> TensorWork:
        cells = []
        for piece in planned.pieces:
            heads = head_count(piece.component, self.num_heads, self.num_kv_heads)
            cell_id = f"{record_id(planned.record)}|{cut_id(piece)}"
            got = store.read(cell_id).results
            names = self._names(heads)
            cached = {(n.split("|")[1], int(n.split("|")[2])): got[n] for n in names} if all(
                n in got for n in names) else None
            cells.append(HeadCellWork(piece, cell_id, heads, cached))
        return TensorWork(planned.record.name, (planned.record,), (planned.record.name,), tuple(cells))

    def reader(self, work: TensorWork):
        return work.records[0].read

    def measure(self, work: TensorWork, tensor, memo: dict) -> list:
        """Per cell with work left: ``(shape, {(stat, head): (value, reason)})``; None for the others."""
        from toolkit.metrics.registry import DegenerateMatrix

        out = []
        for c in work.cells:
            if not c.work_left:
                out.append(None)
                continue
            w = c.piece.extract(tensor)
            try:
                per = head_stats(w, c.piece.component, c.heads, self.head_dim, device=self.device,
                                 **dict(self.fit_options))
                values = {(stat, h): got[stat] for h, got in enumerate(per) for stat in HEAD_STATS}
            except DegenerateMatrix as e:
                values = {(stat, h): (float("nan"), e.reason) for h in range(c.heads) for stat in HEAD_STATS}
            out.append(((int(w.shape[0]), int(w.shape[1])), values))
        return out

    def finish(self, store: ResultCache, work: TensorWork, fresh: list | None) -> dict:
        """Store ``fresh`` and give ``{(layer, component): {(stat, head): (value, reason)}}``."""
        out = {}
        for c, got in zip(work.cells, fresh or [None] * len(work.cells), strict=True):
            values = c.cached
            if got is not None:
                shape, values = got
                store.put(c.cell_id, {f"{self.key}|{s}|{h}": v for (s, h), v in values.items()}, shape)
            out[(c.piece.layer, c.piece.component)] = values
        return out


def with_head_stats(ds: xr.Dataset, plan, *, fit, device: str = "cpu", cache: bool = True) -> xr.Dataset:
    """``ds`` with the per-head variables of every attention matrix of ``plan``.

    Parameters
    ----------
    ds : xarray.Dataset
        The (layer, component) Dataset of ``plan``.
    plan : toolkit.collect.plan.Plan
    fit : toolkit.FitOptions
        Its fit options go to the per-head ``alpha``.
    device : str
    cache : bool

    Returns
    -------
    xarray.Dataset
        Plus ``<stat>_per_head`` (layer, component, head) for ``attn.q`` / ``attn.o``
        and ``<stat>_per_kv_head`` (layer, component, kv_head) for ``attn.k`` / ``attn.v``
        (NaN in the other components), ``stat`` in ``alpha``, ``stable_rank``,
        ``spectral_norm``; coord ``kv_head_of_head`` (head): the key/value head each
        query head reads (GQA); attrs ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``.

    Raises
    ------
    ToolkitError
        The config does not give the head counts.
    """
    from toolkit.architectures.base import Dims
    from toolkit.errors import ToolkitError

    dims = Dims.from_config(plan.source.config)
    if not (dims.num_attention_heads and dims.num_key_value_heads and dims.head_dim):
        raise ToolkitError("per_head=True needs num_attention_heads (and head_dim or hidden_size) in the config; "
                           f"{plan.source.location!r} has {dims}")
    measurement = HeadMeasurement.make(dims, fit.fit_keywords(), device)
    units = [type(t)(t.record, tuple(p for p in t.pieces if p.component in Q_HEAD_COMPONENTS + KV_HEAD_COMPONENTS))
             for t in plan.tensors]
    units = [u for u in units if u.pieces]
    with cache_run(), executor_for(None, device) as executor:
        store = open_cache(plan.value_identity, measurement.kind, enabled=cache)
        results = run_units(measurement, units, store, executor, lambda name: None, [plan.source])
    cells = {key: values for got in results for key, values in got.items()}
    comps = list(ds.component.values)
    layers = ds.sizes["layer"]
    out = ds.copy()
    for dim, n, group in (("head", measurement.num_heads, Q_HEAD_COMPONENTS),
                          ("kv_head", measurement.num_kv_heads, KV_HEAD_COMPONENTS)):
        suffix = "_per_head" if dim == "head" else "_per_kv_head"
        for stat in HEAD_STATS:
            data = np.full((layers, len(comps), n), np.nan)
            for (layer, comp), values in cells.items():
                if comp in group and values is not None:
                    data[layer, comps.index(comp)] = [values[(stat, h)][0] for h in range(n)]
            attrs = {**HEAD_ATTRS[stat], "components": ", ".join(group)}
            out[stat + suffix] = (("layer", "component", dim), data, attrs)
        out = out.assign_coords({dim: (dim, np.arange(n))})
    group_size = max(1, measurement.num_heads // measurement.num_kv_heads)
    out = out.assign_coords(kv_head_of_head=("head", np.arange(measurement.num_heads) // group_size,
                                             {"long_name": "key/value head read by each query head (GQA)"}))
    out.attrs.update(num_attention_heads=measurement.num_heads, num_key_value_heads=measurement.num_kv_heads,
                     head_dim=measurement.head_dim)
    return out
