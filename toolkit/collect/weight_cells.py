"""The unit of ``weight_stats``: one stored tensor and the grid cells cut from it.

:class:`WeightMeasurement` implements the three steps every unit goes
through in :func:`toolkit.collect.pipeline.run_units`: ``lookup`` (which
cells still need which metrics, from the cache), ``measure`` (compute them
from the tensor; stores nothing, runs in a pipeline thread or on a Dask
worker) and ``finish`` (store the fresh results, give the cells).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from toolkit.architectures.base import Piece
from toolkit.collect.cache import ResultCache, metric_key
from toolkit.collect.cell_ids import cut_id, record_id
from toolkit.collect.grid import Cell, cell_from, cell_results
from toolkit.collect.plan import PlannedTensor
from toolkit.metrics.evaluate import evaluate_matrix
from toolkit.metrics.registry import resolve_metrics


@dataclass(frozen=True)
class CellWork:
    """One cell after its cache lookup.

    Attributes
    ----------
    piece : Piece
    cell_id : str
        Its cache id.
    cached : dict
        ``{metric key: (value, reason)}`` found in the cache.
    shape : (int, int) or None
        The cached matrix shape (None when nothing is cached).
    todo : tuple of Metric
        The metrics still to compute.
    """

    piece: Piece
    cell_id: str
    cached: dict
    shape: tuple[int, int] | None
    todo: tuple


def lookup_cells(store: ResultCache, tensor_id: str, pieces, chosen, keys: dict) -> tuple[CellWork, ...]:
    """Each piece's :class:`CellWork`: its cache id (``tensor_id`` and how it is cut), what the cache
    holds and which of ``chosen`` are still missing."""
    cells = []
    for piece in pieces:
        cell_id = f"{tensor_id}|{cut_id(piece)}"
        cached, shape = store.get(cell_id)
        cells.append(CellWork(piece, cell_id, cached, shape, tuple(m for m in chosen if keys[m.name] not in cached)))
    return tuple(cells)


@dataclass(frozen=True)
class TensorWork:
    """One stored tensor after its cells' lookups.

    ``records`` holds the :class:`~toolkit.sources.TensorRecord` to read (one
    here), or None in a copy travelling to a Dask worker, which re-opens it by
    ``names`` (:meth:`detached`, :meth:`attached`).
    """

    name: str
    records: tuple | None
    names: tuple[str, ...]
    cells: tuple[CellWork, ...]

    @property
    def todo(self) -> bool:
        """Some cell has a metric left to compute."""
        return any(c.todo for c in self.cells)

    def detached(self) -> TensorWork:
        return replace(self, records=None)

    def attached(self, records: tuple) -> TensorWork:
        return replace(self, records=tuple(records))


@dataclass(frozen=True)
class WeightMeasurement:
    """The weight metrics of ``weight_stats``: what every stored tensor of one pass shares.

    Attributes
    ----------
    chosen : tuple of Metric
    keys : dict
        Metric name -> cache key.
    device : str
        Where the singular values are computed.
    """

    chosen: tuple
    keys: dict
    device: str = "cpu"
    kind = "weights"

    @classmethod
    def make(cls, metrics, device: str = "cpu") -> WeightMeasurement:
        """Resolve ``metrics`` (raises ``UnknownMetricError``) and derive their cache keys."""
        chosen = tuple(resolve_metrics(metrics, kind="weight"))
        return cls(chosen, {m.name: metric_key(m, **dict(m.options)) for m in chosen}, device)

    @property
    def float32(self) -> bool:
        """Convert each tensor to float32 as it is read (False when every metric reads the
        storage dtype: the entry-wise ones convert in their own chunked pass)."""
        return not all(m.any_dtype for m in self.chosen)

    def lookup(self, store: ResultCache, planned: PlannedTensor) -> TensorWork:
        """The tensor's cells and what the cache already holds for them."""
        cells = lookup_cells(store, record_id(planned.record), planned.pieces, self.chosen, self.keys)
        return TensorWork(planned.record.name, (planned.record,), (planned.record.name,), cells)

    def reader(self, work: TensorWork):
        """What reads the tensor (``TensorRecord.read``)."""
        return work.records[0].read

    def measure(self, work: TensorWork, tensor, memo: dict) -> list[Cell | None]:
        """Fresh :class:`~toolkit.collect.grid.Cell` of each cell with work left (None for the others)."""
        return [Cell.measured(c.piece.parameter_name,
                              evaluate_matrix(c.piece.extract(tensor), list(c.todo), device=self.device))
                if c.todo else None for c in work.cells]

    def finish(self, store: ResultCache, work: TensorWork, fresh: list | None) -> dict:
        """Store ``fresh`` (None: all cached) and give ``{(layer, component): Cell}``."""
        out = {}
        for c, got in zip(work.cells, fresh or [None] * len(work.cells), strict=True):
            cached, shape = c.cached, c.shape
            if got is not None:
                new, keep = cell_results(got, c.todo, self.keys)
                store.put(c.cell_id, keep, got.shape)
                cached, shape = {**cached, **new}, got.shape
            out[(c.piece.layer, c.piece.component)] = cell_from(c.piece, shape, cached, self.chosen, self.keys)
        return out
