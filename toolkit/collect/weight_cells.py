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
    spectrum : tuple of float or None
        The cached eigenvalues of WᵀW (descending), when stored.
    need_spectrum : bool
        The spectrum is asked for and not cached.
    """

    piece: Piece
    cell_id: str
    cached: dict
    shape: tuple[int, int] | None
    todo: tuple
    spectrum: tuple | None = None
    need_spectrum: bool = False

    @property
    def work_left(self) -> bool:
        return bool(self.todo) or self.need_spectrum


def lookup_cells(store: ResultCache, tensor_id: str, pieces, chosen, keys: dict,
                 spectra: bool = False) -> tuple[CellWork, ...]:
    """Each piece's :class:`CellWork`: its cache id (``tensor_id`` and how it is cut), what the cache
    holds and which of ``chosen`` (and, with ``spectra``, whether its spectrum) are still missing."""
    cells = []
    for piece in pieces:
        cell_id = f"{tensor_id}|{cut_id(piece)}"
        entry = store.read(cell_id)
        cells.append(CellWork(piece, cell_id, entry.results, entry.shape,
                              tuple(m for m in chosen if keys[m.name] not in entry.results),
                              entry.spectrum, spectra and entry.spectrum is None))
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
        """Some cell has a metric (or a spectrum) left to compute."""
        return any(c.work_left for c in self.cells)

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
    spectra : bool
        Also keep each cell's eigenvalues (``keep_spectra``).
    precision : str
        Of the singular values, ``"float64"`` or ``"float32"`` (part of the
        spectral metrics' cache keys when not float64).
    """

    chosen: tuple
    keys: dict
    device: str = "cpu"
    spectra: bool = False
    precision: str = "float64"
    kind = "weights"

    @classmethod
    def make(cls, metrics, device: str = "cpu", spectra: bool = False, fit=None,
             precision: str = "float64") -> WeightMeasurement:
        """Resolve ``metrics`` (raises ``UnknownMetricError``), set the options ``fit``
        (:class:`~toolkit.metrics.fit_options.FitOptions`) gives them, and derive their cache keys."""
        chosen = tuple(resolve_metrics(metrics, kind="weight"))
        if fit is not None:
            chosen = fit.apply(chosen)
        spectral = {"device": str(device), **({"precision": precision} if precision != "float64" else {})}
        keys = {m.name: metric_key(m, **dict(m.options), **(spectral if m.needs_singular_values else {}))
                for m in chosen}
        return cls(chosen, keys, device, bool(spectra), precision)

    @property
    def float32(self) -> bool:
        """Convert each tensor to float32 as it is read (False when every metric reads the
        storage dtype: the entry-wise ones convert in their own chunked pass)."""
        return self.spectra or not all(m.any_dtype for m in self.chosen)

    def lookup(self, store: ResultCache, planned: PlannedTensor) -> TensorWork:
        """The tensor's cells and what the cache already holds for them."""
        tensor_id = record_id(planned.record)
        if self.precision != "float64":  # its own cells: a float32 spectrum never stands in for a float64 one
            tensor_id += f"|{self.precision}"
        cells = lookup_cells(store, tensor_id, planned.pieces, self.chosen, self.keys, self.spectra)
        return TensorWork(planned.record.name, (planned.record,), (planned.record.name,), cells)

    def reader(self, work: TensorWork):
        """What reads the tensor (``TensorRecord.read``)."""
        return work.records[0].read

    def measure(self, work: TensorWork, tensor, memo: dict) -> list[Cell | None]:
        """Fresh :class:`~toolkit.collect.grid.Cell` of each cell with work left (None for the others)."""
        return [Cell.measured(c.piece.parameter_name,
                              evaluate_matrix(c.piece.extract(tensor), list(c.todo), device=self.device,
                                              keep_spectrum=c.need_spectrum, precision=self.precision))
                if c.work_left else None for c in work.cells]

    def finish(self, store: ResultCache, work: TensorWork, fresh: list | None) -> dict:
        """Store ``fresh`` (None: all cached) and give ``{Piece.key: Cell}`` (``(layer, component)``, or
        ``(layer, component, expert)`` for a routed expert)."""
        out = {}
        for c, got in zip(work.cells, fresh or [None] * len(work.cells), strict=True):
            cached, shape, spectrum = c.cached, c.shape, c.spectrum
            if got is not None:
                new, keep = cell_results(got, c.todo, self.keys)
                if got.eigenvalues is not None:
                    spectrum = tuple(float(v) for v in got.eigenvalues)
                store.put(c.cell_id, keep, got.shape, spectrum if got.eigenvalues is not None else None)
                cached, shape = {**cached, **new}, got.shape
            out[c.piece.key] = cell_from(
                c.piece, shape, cached, self.chosen, self.keys, spectrum if self.spectra else None)
        return out
