"""The measurement of ``weight_stats``: one stored tensor and the grid cells cut from it.

:class:`WeightMeasurement` implements the three steps every unit goes
through in :func:`toolkit.collect.execute.run_pass`: ``lookup`` (which cells
still need which metrics, from the cache), ``measure`` (compute them from the
tensor; stores nothing, runs in a pipeline thread or on a Dask worker) and
``finish`` (store the fresh results, give the cells). With per-head
statistics asked for (:mod:`.heads`) an attention cell's head slices are
measured with it, from the same read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from toolkit.collect.cache import ResultCache, cache_kind, metric_key
from toolkit.collect.cells import Cell, cell_from, cell_results, served_key, served_label, served_results
from toolkit.collect.measure.heads import HeadSpec
from toolkit.collect.measure.work import CellWork, TensorWork, lookup_cells, with_spectrum_fit
from toolkit.collect.plan.cell_ids import record_id
from toolkit.metrics.evaluate import evaluate_matrix
from toolkit.metrics.per_head import HEAD_STATS
from toolkit.metrics.registry import resolve_metrics
from toolkit.metrics.spectral import CERTIFIED

KIND = cache_kind("weights", "statistics of weight matrices, per checkpoint identity and cell (heads included)")


def metric_keys(metrics, device: str, precision: str) -> dict:
    """Metric name -> cache key of ``metrics`` measured on ``device`` at ``precision`` (the spectral ones
    carry both; float64 is the default and left out of the key)."""
    spectral = {"device": str(device), **({"precision": precision} if precision != "float64" else {})}
    return {m.name: metric_key(m, **dict(m.options), **(spectral if m.needs_singular_values else {}))
            for m in metrics}


#: The weights pass's read-ahead budget (:attr:`WeightMeasurement.read_ahead_bytes`): the next matrix is read
#: and converted to float32 while the current one is measured as long as the two hold at most 1 GiB as
#: float32, so a 7B mlp matrix (272 MB) overlaps its read (a remote one's too) with the previous one's
#: Gram matrix; two 70B-shaped mlp matrices (940 MB each) are held one at a time.
WEIGHTS_READ_AHEAD_BYTES = 1 << 30


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
        Of the singular values, ``"float64"``, ``"float32"`` or
        ``"float32-certified"`` (part of the spectral metrics' cache keys when
        not float64; the certified mode also caches which precision served
        each metric, :func:`~toolkit.collect.cells.served_results`).
    fit : FitOptions or None
        The fit options the metrics were given (the per-head metrics get them too).
    heads : HeadSpec or None
        Per-head statistics of the attention cells (:meth:`with_heads`).
    """

    chosen: tuple
    keys: dict
    device: str = "cpu"
    spectra: bool = False
    precision: str = "float64"
    fit: object = None
    heads: HeadSpec | None = None
    kind = KIND
    read_ahead_bytes = WEIGHTS_READ_AHEAD_BYTES

    @classmethod
    def make(cls, metrics, device: str = "cpu", spectra: bool = False, fit=None,
             precision: str = "float64") -> WeightMeasurement:
        """Resolve ``metrics`` (raises ``UnknownMetricError``), set the options ``fit``
        (:class:`~toolkit.metrics.fit_options.FitOptions`) gives them, and derive their cache keys."""
        chosen = with_spectrum_fit(resolve_metrics(metrics, kind="weight"), "weight", spectra)
        if fit is not None:
            chosen = fit.apply(chosen)
        return cls(chosen, metric_keys(chosen, device, precision), device, bool(spectra), precision, fit)

    def with_heads(self, config: dict, location: str = "") -> WeightMeasurement:
        """The same measurement with the per-head statistics of ``config``'s attention heads.

        Raises
        ------
        ToolkitError
            The config does not give the head counts (before any work).
        """
        metrics = tuple(resolve_metrics(list(HEAD_STATS), kind="weight"))
        if self.fit is not None:
            metrics = self.fit.apply(metrics)
        keys = metric_keys(metrics, self.device, self.precision)
        return replace(self, heads=HeadSpec.of(config, metrics, keys, location))

    @property
    def float32(self) -> bool:
        """Convert each tensor to float32 as it is read (False when every metric reads the
        storage dtype: the entry-wise ones convert in their own chunked pass)."""
        return self.spectra or self.heads is not None or not all(m.any_dtype for m in self.chosen)

    def tensor_id(self, record) -> str:
        """Cache id of a stored tensor (float32 spectra have cells of their own: they never stand in
        for float64 ones)."""
        tensor_id = record_id(record)
        return tensor_id if self.precision == "float64" else f"{tensor_id}|{self.precision}"

    def lookup(self, store: ResultCache, planned) -> TensorWork:
        """The tensor's cells (a :class:`~toolkit.collect.plan.types.PlannedTensor`'s) and what the cache
        already holds for them."""
        cells = lookup_cells(store, self.tensor_id(planned.record), planned.pieces, self.chosen, self.keys,
                             self.spectra, self.heads)
        if self.precision == CERTIFIED:
            cells = tuple(self._one_precision(c) for c in cells)
        return TensorWork(planned.record.name, (planned.record,), (planned.record.name,), cells)

    def _one_precision(self, c: CellWork) -> CellWork:
        """``c`` with every spectral metric to compute when its cached ones would mix served precisions (some
        to compute, the spectrum to compute, or cached by runs that served different precisions): a cell's
        spectral metrics and spectrum all come from one spectrum, as in an uncached run, and its
        ``precision_served`` label is true of all of them."""
        spectral = [m for m in self.chosen if m.needs_singular_values]
        cached = [m for m in spectral if m not in c.todo]
        if not cached:
            return c
        labels = {c.cached.get(served_key(self.keys[m.name]), (0.0, ""))[1] for m in cached}
        if len(cached) == len(spectral) and len(labels) == 1 and not c.need_spectrum:
            return c
        return replace(c, todo=tuple(m for m in self.chosen if m in c.todo or m.needs_singular_values),
                       need_spectrum=self.spectra)  # the spectrum too: the one that served the metrics

    def reader(self, work: TensorWork):
        """What reads the tensor (``TensorRecord.read``)."""
        return work.records[0].read

    def read_bytes(self, work: TensorWork) -> int:
        """Bytes of the tensor as float32 (what the read-ahead converts it to)."""
        return math.prod(work.records[0].shape) * 4

    def measure(self, work: TensorWork, tensor, memo: dict) -> list[Cell | None]:
        """Fresh :class:`~toolkit.collect.cells.Cell` of each cell with work left (None for the others)."""
        return [self.measure_cell(c, c.piece.extract(tensor)) if c.work_left else None for c in work.cells]

    def measure_cell(self, c: CellWork, w, s=None) -> Cell:
        """What ``c`` lacks, from its matrix ``w`` (out, in) and, when known, its singular values ``s``."""
        if c.matrix_work:
            cell = Cell.measured(c.piece.parameter_name, evaluate_matrix(
                w, list(c.todo), s=s, device=self.device, keep_spectrum=c.need_spectrum, precision=self.precision))
        else:
            cell = Cell(c.piece.parameter_name, (int(w.shape[0]), int(w.shape[1])) if w.ndim == 2 else (0, 0))
        if c.need_heads:
            cell.heads, cell.head_errors = self.heads.measure(w, c.piece.component, device=self.device,
                                                              precision=self.precision)
        return cell

    def finish(self, store: ResultCache, work: TensorWork, fresh: list | None) -> dict:
        """Store ``fresh`` (None: all cached) and give ``{Piece.key: Cell}`` (``(layer, component)``, or
        ``(layer, component, expert)`` for a routed expert)."""
        out = {}
        for c, got in zip(work.cells, fresh or [None] * len(work.cells), strict=True):
            cached, shape, spectrum = c.cached, c.shape, c.spectrum
            if got is not None:
                new, keep = cell_results(got, c.todo, self.keys)
                served = served_results(got, c.todo, self.keys)
                new, keep = {**new, **served}, {**keep, **served}
                if got.heads is not None:
                    head_new, head_keep = self.heads.results(got.heads, got.head_errors)
                    new, keep = {**new, **head_new}, {**keep, **head_keep}
                if got.eigenvalues is not None:
                    spectrum = tuple(float(v) for v in got.eigenvalues)
                store.put(c.cell_id, keep, got.shape, spectrum if got.eigenvalues is not None else None)
                cached, shape = {**cached, **new}, got.shape
            cell = cell_from(c.piece, shape, cached, self.chosen, self.keys, spectrum if self.spectra else None)
            if self.precision == CERTIFIED:
                cell.precision_served = served_label(cached, self.chosen, self.keys)
            if c.heads:
                cell.heads = self.heads.cached(c.piece.component, cached)
            out[c.piece.key] = cell
        return out
