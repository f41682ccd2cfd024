"""The histogram of one matrix's entries (a cell's drill-down): prepared numbers, no drawing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EntriesData:
    """Bars of the entries of a matrix (or of an update ΔW).

    Attributes
    ----------
    edges : numpy.ndarray, shape (bins + 1,)
        From the smallest to the largest finite entry, exactly.
    counts : numpy.ndarray of int, shape (bins,)
        Every finite entry in exactly one bar.
    size : int
        Finite entries.
    rms : float
        Root mean square of the finite entries.
    """

    edges: np.ndarray
    counts: np.ndarray
    size: int
    rms: float


def prepare_entries(w, bins: int = 120) -> EntriesData:
    """The bars of ``w``'s finite entries (``numpy.histogram`` with edges from min to max)."""
    w = np.asarray(w, dtype=np.float64).ravel()
    w = w[np.isfinite(w)]
    if w.size == 0:
        return EntriesData(np.array([0.0, 1.0]), np.array([0]), 0, float("nan"))
    lo, hi = float(w.min()), float(w.max())
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(w, bins=bins, range=(lo, hi))
    return EntriesData(edges, counts, int(w.size), float(np.sqrt(np.mean(w * w))))
