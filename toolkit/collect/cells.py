"""The record of one measured (layer, component) cell, shared by measuring and assembling.

A leaf: :mod:`toolkit.collect.measure` fills :class:`Cell` objects (fresh or
from the cache), :mod:`toolkit.collect.assemble` turns them into Datasets,
and :mod:`toolkit.activations` builds its own the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Cell:
    """Results for one (layer, component) matrix.

    Attributes
    ----------
    parameter_name : str
        The stored parameter the matrix comes from.
    shape : (int, int)
        (out_features, in_features); (0, 0) when unknown.
    values : dict
        Metric name -> float (NaN where undefined).
    reasons : dict
        Metric name -> why its value is NaN.
    errors : set
        The metrics whose NaN came from an exception (a failure of the
        computation, not of the matrix), never cached.
    eigenvalues : sequence of float or None
        The stored spectrum (descending eigenvalues of WᵀW) when one was asked for.
    heads : dict or None
        Per-head statistics of an attention matrix (``weight_stats(per_head=True)``):
        statistic name -> one ``(value, reason)`` per head, in head order.
    head_errors : set
        ``(statistic, head)`` of the per-head values that came from an exception (never cached).
    precision_served : str
        ``precision="float32-certified"``: ``"float32"`` or ``"float64"``, the
        precision whose spectrum gave the cell's spectral metrics (``""``:
        none read a spectrum, or another precision).
    """

    parameter_name: str
    shape: tuple[int, int]
    values: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    errors: set = field(default_factory=set)
    eigenvalues: object = None
    heads: dict | None = None
    head_errors: set = field(default_factory=set)
    precision_served: str = ""

    @classmethod
    def measured(cls, parameter_name: str, result) -> Cell:
        """The Cell of a fresh :class:`~toolkit.metrics.evaluate.MatrixResult`."""
        return cls(parameter_name, result.shape, dict(result.values), dict(result.reasons), set(result.errors),
                   result.eigenvalues, precision_served=result.precision_served)


def cell_from(piece, shape, results: dict, metrics, keys: dict, eigenvalues=None) -> Cell:
    """The Cell of ``piece`` from cached results.

    Parameters
    ----------
    piece : toolkit.architectures.base.Piece
    shape : (int, int) or None
        The matrix shape (None: unknown, stored as (0, 0)).
    results : dict
        ``{cache key: (value, reason)}`` holding every metric's key.
    metrics : list of Metric
    keys : dict
        Metric name -> cache key.
    eigenvalues : sequence of float, optional
        The cell's spectrum.
    """
    cell = Cell(piece.parameter_name, tuple(shape) if shape else (0, 0), eigenvalues=eigenvalues)
    for m in metrics:
        value, reason = results[keys[m.name]]
        cell.values[m.name] = value
        if reason:
            cell.reasons[m.name] = reason
    return cell


def join_reasons(reasons: dict) -> str:
    """``"a, b: why; c: other"``: the metrics that share a reason named once with it, in order."""
    grouped: dict[str, list[str]] = {}
    for name, why in reasons.items():
        grouped.setdefault(why, []).append(name)
    return "; ".join(f"{', '.join(names)}: {why}" for why, names in grouped.items())


def cell_results(cell: Cell, metrics, keys: dict) -> tuple[dict, dict]:
    """``(results, cacheable)``: ``{cache key: (value, reason)}`` of ``metrics`` in a fresh
    ``cell``, and the same without the metrics that raised (``cell.errors``), which are
    shown but never cached (a failed computation is not a property of the matrix)."""
    results = {keys[m.name]: (cell.values[m.name], cell.reasons.get(m.name, "")) for m in metrics}
    return results, {keys[m.name]: results[keys[m.name]] for m in metrics if m.name not in cell.errors}


def served_key(key: str) -> str:
    """The cache key under which the served precision of the metric cached under ``key`` is kept."""
    return f"served|{key}"


def served_results(cell: Cell, metrics, keys: dict) -> dict:
    """``{served_key: (1.0 or 0.0, "float32" or "float64")}`` of the spectral ``metrics`` of a fresh
    ``cell`` (empty unless it has a served precision), cached along with their values."""
    if not cell.precision_served:
        return {}
    flag = 1.0 if cell.precision_served == "float32" else 0.0
    return {served_key(keys[m.name]): (flag, cell.precision_served) for m in metrics
            if m.needs_singular_values and m.name not in cell.errors}


def served_label(results: dict, metrics, keys: dict) -> str:
    """The precision that served a cell's spectral ``metrics`` from its cached ``results``: ``"float64"``
    if any of them came from float64, ``"float32"`` if all from float32, ``""`` if unknown or none."""
    labels = {results.get(served_key(keys[m.name]), (0.0, ""))[1] for m in metrics if m.needs_singular_values}
    if "float64" in labels:
        return "float64"
    return "float32" if labels == {"float32"} else ""
