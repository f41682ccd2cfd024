"""The units of a pass after their cache lookups: what each cell still needs.

Shared by every measurement (:mod:`.weights`, :mod:`.lowrank`, :mod:`.pairs`):
a :class:`CellWork` per cell, a :class:`TensorWork` per stored tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from toolkit.architectures.base import Piece
from toolkit.collect.cache import ResultCache
from toolkit.collect.plan.cell_ids import cut_id


@dataclass(frozen=True)
class CellWork:
    """One cell after its cache lookup.

    Attributes
    ----------
    piece : Piece
    cell_id : str
        Its cache id.
    cached : dict
        ``{cache key: (value, reason)}`` found in the cache.
    shape : (int, int) or None
        The cached matrix shape (None when nothing is cached).
    todo : tuple of Metric
        The metrics still to compute.
    spectrum : tuple of float or None
        The cached eigenvalues of WᵀW (descending), when stored.
    need_spectrum : bool
        The spectrum is asked for and not cached.
    heads : int
        Attention heads whose slices are measured with the cell (0: none).
    need_heads : bool
        Those per-head statistics are not all cached.
    """

    piece: Piece
    cell_id: str
    cached: dict
    shape: tuple[int, int] | None
    todo: tuple
    spectrum: tuple | None = None
    need_spectrum: bool = False
    heads: int = 0
    need_heads: bool = False

    @property
    def work_left(self) -> bool:
        return bool(self.todo) or self.need_spectrum or self.need_heads

    @property
    def matrix_work(self) -> bool:
        """Whole-matrix metrics or the spectrum are left (not only the heads)."""
        return bool(self.todo) or self.need_spectrum


def lookup_cells(store: ResultCache, tensor_id: str, pieces, chosen, keys: dict, spectra: bool = False,
                 heads=None) -> tuple[CellWork, ...]:
    """Each piece's :class:`CellWork`.

    Parameters
    ----------
    store : ResultCache
    tensor_id : str
        The stored tensor's cache id; a cell's is it and how the cell is cut.
    pieces : sequence of Piece
    chosen : sequence of Metric
    keys : dict
        Metric name -> cache key.
    spectra : bool
        The cells' spectra are asked for.
    heads : toolkit.collect.measure.heads.HeadSpec, optional
        Per-head statistics asked for (attention cells only).
    """
    cells = []
    for piece in pieces:
        cell_id = f"{tensor_id}|{cut_id(piece)}"
        entry = store.read(cell_id)
        n = heads.count(piece.component) if heads is not None else 0
        cells.append(CellWork(piece, cell_id, entry.results, entry.shape,
                              tuple(m for m in chosen if keys[m.name] not in entry.results),
                              entry.spectrum, spectra and entry.spectrum is None,
                              n, bool(n) and heads.cached(piece.component, entry.results) is None))
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
        """Some cell has a metric (or a spectrum, or heads) left to compute."""
        return any(c.work_left for c in self.cells)

    def detached(self) -> TensorWork:
        return replace(self, records=None)

    def attached(self, records: tuple) -> TensorWork:
        return replace(self, records=tuple(records))


#: The metrics a kept spectrum carries (its power-law fit, which ``toolkit.plot.esd`` draws), by kind of pass:
#: ``keep_spectra=True`` measures them with the spectrum, from the same eigenvalues.
SPECTRUM_FIT = {"weight": ("alpha", "alpha_xmin"), "diff": ("delta_alpha", "delta_alpha_xmin")}


def with_spectrum_fit(chosen, kind: str, spectra: bool) -> tuple:
    """The resolved metrics ``chosen``, and with a kept spectrum (``spectra``) the fit it carries
    (:data:`SPECTRUM_FIT`), appended where missing."""
    chosen = tuple(chosen)
    if not spectra:
        return chosen
    from toolkit.metrics.registry import resolve_metrics

    have = {m.name for m in chosen}
    missing = [n for n in SPECTRUM_FIT[kind] if n not in have]
    return chosen + tuple(resolve_metrics(missing, kind=kind)) if missing else chosen
