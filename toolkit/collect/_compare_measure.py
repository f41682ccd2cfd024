"""One stored tensor pair of ``compare``: cache lookups, one measuring pass, storing.

Three steps, so that the serial path (:mod:`toolkit.collect.compare`: lookups
and stores in the calling thread, measuring on parallel pipelines) and the
Dask workers (:mod:`toolkit.collect._dtasks`) run the same code:

1. :func:`lookup` reads the cache: which cells and totals still need work.
2. :func:`measure` computes them from the two stored tensors (or, for a
   tensor that is only summed, such as an embedding, from row blocks read
   here). Every entry-wise quantity comes from one chunked float64 pass per
   cell (:func:`toolkit.metrics.pair_sums.pair_sums`); an unfused tensor's
   totals are its cell's sums, so it is touched once. Nothing is stored.
3. :func:`finish` stores the fresh results and assembles the cells and the
   tensor's totals (row of the ``tensor`` dim).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from toolkit._version import __version__
from toolkit.collect.cache import _digest, metric_key
from toolkit.collect.grid import cell_from
from toolkit.metrics import diff as _diff
from toolkit.metrics.pair_sums import PairSums, count_nonfinite, pair_sums
from toolkit.metrics.registry import resolve_metrics

#: Sums kept per stored tensor pair (the ``tensor`` dim and the whole-model totals).
TOTALS = ("sumsq_base", "sumsq_delta", "unchanged", "n")
#: Entries per row block when a tensor is only summed (embeddings).
BLOCK_ENTRIES = 1 << 24


@dataclass(frozen=True)
class CompareJob:
    """What every tensor pair of one (base, target) comparison shares.

    ``chosen``: the diff metrics; ``keys``/``total_keys``: their cache keys;
    ``options``: each metric's options; ``bi``/``ti``: the checkpoints'
    indices (keys of the subspace memo of a series).
    """

    chosen: tuple
    keys: dict
    options: dict
    total_keys: dict
    tolerance: float
    device: str
    bi: int = 0
    ti: int = 1

    @classmethod
    def make(cls, metrics, tolerance: float, k: int, device: str, bi: int = 0, ti: int = 1) -> CompareJob:
        """Resolve ``metrics`` (raises ``UnknownMetricError``) and derive the options and cache keys."""
        chosen = tuple(resolve_metrics(metrics, kind="diff"))
        overrides = {"tolerance": float(tolerance), "k": int(k)}
        options = {m.name: _diff.metric_options(m, overrides) for m in chosen}
        keys = {m.name: metric_key(m, **options[m.name]) for m in chosen}
        total_keys = {n: f"{n}:{_digest(float(tolerance), __version__)[:16]}" for n in TOTALS}
        return cls(chosen, keys, options, total_keys, float(tolerance), device, bi, ti)

    def at(self, bi: int, ti: int) -> CompareJob:
        """The same job for another pair of checkpoints."""
        return CompareJob(self.chosen, self.keys, self.options, self.total_keys, self.tolerance, self.device, bi, ti)


@dataclass
class PairWork:
    """One tensor pair after the cache lookups.

    ``totals``: the cached totals ``{TOTALS name: value}``, or None when they
    must be computed; ``entries``: per cell ``(piece, cell id, cached results,
    cached shape, metrics to compute)``.
    """

    tp: object
    tid: str
    totals: dict | None
    entries: list

    @property
    def whole(self) -> bool:
        """Some cell has work left, so both tensors are read whole."""
        return any(todo for *_, todo in self.entries) or (self.totals is None and bool(self.entries))

    @property
    def todo(self) -> bool:
        """Anything left to compute."""
        return self.totals is None or self.whole


def tensor_id(tp) -> str:
    """Cache id of a tensor pair (names, stored dtypes and shape of both sides)."""
    return f"{tp.base.name}|{tp.base.dtype}|{tp.base.shape}|{tp.target.name}|{tp.target.dtype}"


def lookup(store, tp, job: CompareJob) -> PairWork:
    """Look up the pair's totals and cells in ``store`` (a ``ResultCache``)."""
    tid = tensor_id(tp)
    cached, _ = store.get(tid + "|tensor")
    totals = ({n: cached[key][0] for n, key in job.total_keys.items()}
              if all(key in cached for key in job.total_keys.values()) else None)
    entries = []
    for piece in tp.pieces:
        cell_id = f"{tid}|{piece.layer}|{piece.component}"
        got, shape = store.get(cell_id)
        entries.append((piece, cell_id, got, shape, [m for m in job.chosen if job.keys[m.name] not in got]))
    return PairWork(tp, tid, totals, entries)


def read_pair(tp) -> tuple:
    """Both stored tensors of a pair, whole, in their storage dtypes."""
    return tp.base.read(), tp.target.read()


def _blocks_sums(tp, tolerance: float) -> PairSums:
    """The pair's sums from row blocks, so a large embedding is never held whole (safetensors on both
    sides; other formats are read whole)."""
    if tp.base._row_reader is None or tp.target._row_reader is None:
        return pair_sums(*read_pair(tp), tolerance)
    total = PairSums()
    for b, t in zip(tp.base.row_blocks(BLOCK_ENTRIES), tp.target.row_blocks(BLOCK_ENTRIES)):
        total = total + pair_sums(b, t, tolerance)
    return total


def measure(work: PairWork, tensors: tuple | None, job: CompareJob, memo: dict) -> dict:
    """Compute what ``work`` lacks.

    Parameters
    ----------
    work : PairWork
    tensors : (base, target) stored tensors, or None
        None when ``work.whole`` is False (only the totals are missing: read
        here in row blocks).
    job : CompareJob
    memo : dict
        ``(checkpoint index, layer, component, k) -> top-k left singular
        vectors``, read and filled (a series reuses each checkpoint's).

    Returns
    -------
    dict
        ``totals``: ``{TOTALS name: value}`` or None when cached; ``cells``:
        per entry, ``(shape, {cache key: (value, reason)})`` or None when cached.
    """
    cells, sums = [], []
    for piece, _, _, _, todo in work.entries:
        if not todo:
            cells.append(None)
            continue
        wb, wt = piece.extract(tensors[0]), piece.extract(tensors[1])
        shape, new, s = _measure_cell(wb, wt, todo, piece, job, memo)
        cells.append((shape, new))
        sums.append(s)
    totals = None
    if work.totals is None:
        if tensors is None:
            s = _blocks_sums(work.tp, job.tolerance)
        elif len(work.entries) == 1 and sums and sums[0].n == tensors[0].numel():
            s = sums[0]  # an unfused matrix: its cell's sums are the tensor's
        else:
            s = pair_sums(*tensors, job.tolerance)
        totals = {n: float(getattr(s, n)) for n in TOTALS}
    return {"totals": totals, "cells": cells}


def _measure_cell(wb, wt, todo, piece, job: CompareJob, memo: dict):
    bases = {}
    for side, i in (("base", job.bi), ("target", job.ti)):
        for k in {o["k"] for o in job.options.values() if "k" in o}:
            if (i, piece.layer, piece.component, k) in memo:
                bases[(side, k)] = memo[(i, piece.layer, piece.component, k)]
    ctx = _diff.DiffContext(wb, wt, device=job.device, bases=bases, tolerance=job.tolerance)
    shape = (int(wb.shape[0]), int(wb.shape[1]))
    if not ctx.sums.finite:
        bad = count_nonfinite(wb, wt)
        return shape, {job.keys[m.name]: (math.nan, f"{bad} NaN/Inf entries") for m in todo}, ctx.sums
    new = {job.keys[m.name]: tuple(_diff.evaluate_diff(m, ctx, job.options[m.name])) for m in todo}
    for (side, k), u in ctx.bases.items():
        memo[(job.bi if side == "base" else job.ti, piece.layer, piece.component, k)] = u
    return shape, new, ctx.sums


def finish(store, work: PairWork, fresh: dict | None, job: CompareJob) -> tuple[dict, dict]:
    """Store ``fresh`` (from :func:`measure`; None when all was cached) and assemble the pair.

    Returns
    -------
    totals : dict
        ``{TOTALS name: value}`` of the stored tensor pair.
    cells : dict
        ``{(layer, component): Cell}``.
    """
    totals = work.totals
    if fresh is not None and fresh["totals"] is not None:
        totals = fresh["totals"]
        shape = tuple(work.tp.base.shape)
        store.put(work.tid + "|tensor", {job.total_keys[n]: (v, "") for n, v in totals.items()},
                  shape[:2] if len(shape) >= 2 else (0, 0))
    cells = {}
    for e, (piece, cell_id, cached, shape, todo) in enumerate(work.entries):
        if todo:
            shape, new = fresh["cells"][e]
            store.put(cell_id, new, shape)
            cached = {**cached, **new}
        cells[(piece.layer, piece.component)] = cell_from(piece, shape, cached, job.chosen, job.keys)
    return totals, cells

