"""The unit of ``compare``: one stored tensor pair, its grid cells and its totals.

:class:`PairMeasurement` implements the three steps every unit goes through
in :func:`toolkit.collect.execute.run_pass`:

1. ``lookup`` reads the cache: which cells and totals still need work.
2. ``measure`` computes them from the two stored tensors (or, for a tensor
   that is only summed, such as an embedding, from row blocks read here).
   Every entry-wise quantity comes from one chunked float64 pass per cell
   (:func:`toolkit.metrics.pair_sums.pair_sums`); an unfused tensor's totals
   are its cell's sums, so it is touched once. Nothing is stored.
3. ``finish`` stores the fresh results and gives the cells and the tensor's
   totals (a row of the ``tensor`` dim).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from toolkit._version import __version__
from toolkit.collect.cache import ResultCache, cache_kind, digest, metric_key
from toolkit.collect.cells import cell_from
from toolkit.collect.execute.stream import READ_AHEAD_BYTES
from toolkit.collect.measure.work import CellWork, lookup_cells, with_spectrum_fit
from toolkit.collect.plan.cell_ids import cut_id, record_id
from toolkit.collect.plan.pairs import TensorPair
from toolkit.metrics import diff as _diff
from toolkit.metrics.pair_sums import PairSums, count_nonfinite, pair_sums
from toolkit.metrics.registry import resolve_metrics

KIND = cache_kind("compare", "statistics of compared tensor pairs, per pair of checkpoint identities")
#: Sums kept per stored tensor pair (the ``tensor`` dim and the whole-model totals).
TOTALS = ("sumsq_base", "sumsq_delta", "unchanged", "n")
#: Entries per row block when a tensor is only summed (embeddings).
BLOCK_ENTRIES = 1 << 24


@dataclass(frozen=True)
class PairWork:
    """One tensor pair after the cache lookups.

    Attributes
    ----------
    pair : TensorPair
        With its records, or with None for both in a copy travelling to a
        Dask worker (:meth:`detached`), which re-opens them by ``names``.
    names : (str, str)
        The base's and the target's stored parameter names.
    tid : str
        Cache id of the pair.
    totals : dict or None
        The cached totals ``{TOTALS name: value}``, None when they must be computed.
    cells : tuple of CellWork
    """

    pair: TensorPair
    names: tuple[str, str]
    tid: str
    totals: dict | None
    cells: tuple[CellWork, ...]

    @property
    def name(self) -> str:
        return self.pair.name

    @property
    def whole(self) -> bool:
        """Some cell has work left (a metric or its update's spectrum), so both tensors are read whole."""
        return any(c.work_left for c in self.cells) or (self.totals is None and bool(self.cells))

    @property
    def todo(self) -> bool:
        """Anything left to compute."""
        return self.totals is None or self.whole

    def detached(self) -> PairWork:
        return replace(self, pair=replace(self.pair, base=None, target=None))

    def attached(self, records: tuple) -> PairWork:
        return replace(self, pair=replace(self.pair, base=records[0], target=records[1]))


@dataclass(frozen=True)
class PairMeasurement:
    """What every tensor pair of one (base, target) comparison shares.

    ``chosen``: the diff metrics; ``keys``/``total_keys``: their cache keys;
    ``options``: each metric's options; ``spectra``: also keep each cell's
    update spectrum (eigenvalues of ΔWᵀΔW, ``keep_spectra``); ``k``: the
    subspace dimension of ``subspace_overlap``; ``bi``/``ti``:
    the checkpoints' indices (keys of the subspace memo of a series).
    """

    chosen: tuple
    keys: dict
    options: dict
    total_keys: dict
    tolerance: float
    device: str
    spectra: bool = False
    k: int = 16
    bi: int = 0
    ti: int = 1
    kind = KIND
    float32 = False
    read_ahead_bytes = READ_AHEAD_BYTES  # never two 7B mlp pairs at once (issue 38)

    @classmethod
    def make(cls, metrics, tolerance: float, k: int, device: str, spectra: bool = False) -> PairMeasurement:
        """Resolve ``metrics`` (raises ``UnknownMetricError``) and derive the options and cache keys."""
        chosen = with_spectrum_fit(resolve_metrics(metrics, kind="diff"), "diff", spectra)
        overrides = {"tolerance": float(tolerance), "k": int(k)}
        options = {m.name: _diff.metric_options(m, overrides) for m in chosen}
        # tolerance and k in every key (a metric may read ctx.sums, counted with the tolerance), and
        # the device where a metric factorises the matrices
        keys = {m.name: metric_key(m, **options[m.name], pair=(float(tolerance), int(k)),
                                   **({"device": str(device)} if m.needs_matrices else {})) for m in chosen}
        total_keys = {n: f"{n}:{digest(float(tolerance), __version__)[:16]}" for n in TOTALS}
        return cls(chosen, keys, options, total_keys, float(tolerance), device, bool(spectra), int(k))

    def at(self, bi: int, ti: int) -> PairMeasurement:
        """The same measurement for another pair of checkpoints."""
        return replace(self, bi=bi, ti=ti)

    def lookup(self, store: ResultCache, tp: TensorPair) -> PairWork:
        """Look up the pair's totals and cells in ``store``."""
        tid = f"{record_id(tp.base)}|{tp.target.name}|{tp.target.dtype}"
        cached, _ = store.get(tid + "|tensor")
        totals = ({n: cached[key][0] for n, key in self.total_keys.items()}
                  if all(key in cached for key in self.total_keys.values()) else None)
        if totals is not None and not _valid_totals(totals, tp.base.shape):
            totals = None  # not this tensor's sums: computed again
        cells = lookup_cells(store, tid, tp.pieces, self.chosen, self.keys, self.spectra)
        return PairWork(tp, (tp.base.name, tp.target.name), tid, totals, cells)

    def reader(self, work: PairWork):
        """Reads both stored tensors whole; None when only the totals are missing (:meth:`measure`
        then reads row blocks itself)."""
        return (lambda: read_pair(work.pair)) if work.whole else None

    def read_bytes(self, work: PairWork) -> int:
        """Bytes of both stored tensors as read (0 when :meth:`reader` reads nothing whole)."""
        return work.pair.base.read_nbytes + work.pair.target.read_nbytes if work.whole else 0

    def measure(self, work: PairWork, tensors: tuple | None, memo: dict) -> dict:
        """Compute what ``work`` lacks.

        Parameters
        ----------
        work : PairWork
        tensors : (base, target) stored tensors, or None
            None when ``work.whole`` is False (only the totals are missing:
            read here in row blocks).
        memo : dict
            ``(checkpoint index, cut id, k) -> top-k left singular vectors``
            (the cut id names layer, component and split), read and filled (a
            series reuses each checkpoint's).

        Returns
        -------
        dict
            ``totals``: ``{TOTALS name: value}`` or None when cached; ``cells``:
            per cell, ``(shape, {cache key: (value, reason)}, eigenvalues)`` or None
            when cached; ``eigenvalues`` (of ΔWᵀΔW, descending) when the cell's
            spectrum is asked for and computable, else None.
        """
        cells, sums = [], []
        for c in work.cells:
            if not c.work_left:
                cells.append(None)
                continue
            wb, wt = c.piece.extract(tensors[0]), c.piece.extract(tensors[1])
            shape, new, s, ev = self._measure_cell(wb, wt, c.todo, c.piece, memo, c.need_spectrum)
            cells.append((shape, new, ev))
            sums.append(s)
        totals = None
        if work.totals is None:
            if tensors is None:
                s = _blocks_sums(work.pair, self.tolerance)
            elif len(work.cells) == 1 and sums and sums[0].n == tensors[0].numel():
                s = sums[0]  # an unfused matrix: its cell's sums are the tensor's
            else:
                s = pair_sums(*tensors, self.tolerance)
            totals = {n: float(getattr(s, n)) for n in TOTALS}
        return {"totals": totals, "cells": cells}

    def _measure_cell(self, wb, wt, todo, piece, memo: dict, spectrum: bool = False):
        bases, cut = {}, cut_id(piece)  # the cut is in the key: a checkpoint's cells are cut by the pair's base
        for side, i in (("base", self.bi), ("target", self.ti)):
            for k in {o["k"] for o in self.options.values() if "k" in o}:
                if (i, cut, k) in memo:
                    bases[(side, k)] = memo[(i, cut, k)]
        ctx = _diff.DiffContext(wb, wt, device=self.device, bases=bases, tolerance=self.tolerance)
        shape = (int(wb.shape[0]), int(wb.shape[1]))
        if not ctx.sums.finite and (bad := count_nonfinite(wb, wt)):  # else float64 entries past ~1e150: the
            nan = (math.nan, f"{bad} NaN/Inf entries")                    # metrics scale them (ratio_sums, gram)
            return shape, {self.keys[m.name]: nan for m in todo}, ctx.sums, None
        new = {self.keys[m.name]: tuple(_diff.evaluate_diff(m, ctx, self.options[m.name])) for m in todo}
        for (side, k), u in ctx.bases.items():
            memo[(self.bi if side == "base" else self.ti, cut, k)] = u
        return shape, new, ctx.sums, update_spectrum(ctx) if spectrum else None

    def finish(self, store: ResultCache, work: PairWork, fresh: dict | None) -> tuple[dict, dict]:
        """Store ``fresh`` (from :meth:`measure`; None when all was cached) and assemble the pair.

        Returns
        -------
        totals : dict
            ``{TOTALS name: value}`` of the stored tensor pair.
        cells : dict
            ``{Piece.key: Cell}`` (``(layer, component, expert)`` for a routed expert).
        """
        totals = work.totals
        if fresh is not None and fresh["totals"] is not None:
            totals = fresh["totals"]
            shape = tuple(work.pair.base.shape)
            store.put(work.tid + "|tensor", {self.total_keys[n]: (v, "") for n, v in totals.items()},
                      shape[:2] if len(shape) >= 2 else (0, 0))
        cells = {}
        for e, c in enumerate(work.cells):
            cached, shape = c.cached, c.shape
            spectrum = c.spectrum
            if c.work_left:
                shape, new, ev = fresh["cells"][e]
                if ev is not None:
                    spectrum = tuple(float(v) for v in ev)
                store.put(c.cell_id, new, shape, spectrum if ev is not None else None)
                cached = {**cached, **new}
            cells[c.piece.key] = cell_from(c.piece, shape, cached, self.chosen, self.keys,
                                           spectrum if self.spectra else None)
        return totals, cells


def update_spectrum(ctx):
    """Eigenvalues of ΔWᵀΔW, ΔW = W_t − W_b (float64, descending, length min(m, n)): the squared
    singular values the spectral diff metrics share (zeros for an unchanged matrix, without a
    factorisation); None where they cannot be computed."""
    import numpy as np

    from toolkit.metrics.registry import DegenerateMatrix

    if ctx.identical:
        return np.zeros(min(ctx.stored[0].shape))
    try:
        s = ctx.delta_singular_values
    except DegenerateMatrix:
        return None
    return (s.detach().to("cpu").double() ** 2).numpy()


def _valid_totals(totals: dict, shape) -> bool:
    """Cached totals that can be this tensor pair's: n its entry count, 0 <= unchanged <= n, finite sums >= 0."""
    size = 1
    for d in shape:
        size *= int(d)
    n, unchanged = totals["n"], totals["unchanged"]
    sums_ok = all(0 <= totals[k] < math.inf for k in ("sumsq_base", "sumsq_delta"))
    return n == size and 0 <= unchanged <= n and float(unchanged).is_integer() and sums_ok


def _same_tensor(a, b) -> bool:
    """Two records of one stored tensor (neither with an update merged in)."""
    plain = a.base_record is None and b.base_record is None
    return plain and bool(a.file) and (a.name, a.file, a.stored_name) == (b.name, b.file, b.stored_name)


def read_pair(tp: TensorPair) -> tuple:
    """Both stored tensors of a pair, whole, in their storage dtypes.

    The base is read once when the target is the same stored tensor (an
    unadapted tensor of base + LoRA) or that tensor with an update merged
    in (``merged_with``, :class:`toolkit.sources.lora.MergedRecord`).
    """
    base = tp.base.read()
    over = tp.target.base_record
    if over is not None:
        return base, (tp.target.merged_with(base) if _same_tensor(tp.base, over) else tp.target.read())
    return base, (base if _same_tensor(tp.base, tp.target) else tp.target.read())


def _blocks_sums(tp: TensorPair, tolerance: float) -> PairSums:
    """The pair's sums from row blocks, so a large embedding is never held whole (safetensors on both
    sides; other formats are read whole)."""
    if not (tp.base.can_read_rows and tp.target.can_read_rows):
        return pair_sums(*read_pair(tp), tolerance)
    total = PairSums()
    if _same_tensor(tp.base, tp.target):  # one read: no change
        for b in tp.base.row_blocks(BLOCK_ENTRIES):
            total = total + pair_sums(b, b, tolerance)
        return total
    for b, t in zip(tp.base.row_blocks(BLOCK_ENTRIES), tp.target.row_blocks(BLOCK_ENTRIES), strict=True):
        total = total + pair_sums(b, t, tolerance)
    return total
