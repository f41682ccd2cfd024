"""The order in which a pass's pipelines claim its tensors: each layer's largest first.

:func:`~toolkit.collect.execute.stream.map_tensors` deals tensors to its pipelines in the order it is given,
a free pipeline claiming the next one. Where a layer's largest matrices come last (a Qwen2.5-7B layer's three
18944 x 3584 MLP matrices after its attention), one pipeline measures the last of them while the other has
nothing left: on one such layer the pass took 24.6 s in some runs and 20.4 s in others for the same 39.5 s of
CPU (two cores). Claiming each layer's tensors longest first (Graham's LPT rule: a makespan within 4/3 of the
best over the layer, against 2 for an arbitrary order; Graham 1969, SIAM J. Appl. Math. 17(2), 416-429) leaves
at most a layer's smallest tensors for the end. Layers keep the plan's order, so cells still arrive layer by
layer; the cost of a tensor is estimated from its shape, as a Gram matrix and its eigenvalues cost.

With it, :func:`~toolkit.collect.execute.stream.map_tensors` stops reading ahead once fewer than two tensors
a pipeline are left (a tensor read ahead waits for its pipeline's current one: traced on that layer, q waited
9.7 s behind an MLP matrix while the other pipeline was idle, 24.3 s; with both, 20.4 s).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

__all__ = ["claim_order", "unit_cost"]


def _cost(shape) -> float:
    """:math:`mnk + k^3` of a matrix of ``shape`` (leading dims folded into the rows; a vector: its length)."""
    shape = tuple(shape or ())
    if len(shape) < 2:
        return float(math.prod(shape)) if shape else 0.0
    m, n = math.prod(shape[:-1]), shape[-1]
    k = min(m, n)
    return float(m) * n * k + float(k) ** 3


def _stored_shape(unit):
    """The shape of the stored tensor a unit reads (a TensorWork's record, a PairWork's target), or None."""
    records = getattr(unit, "records", None)
    record = records[0] if records else getattr(getattr(unit, "pair", None), "target", None)
    return getattr(record, "shape", None)


def unit_cost(unit) -> float:
    r"""An estimate of the work of measuring ``unit``: :math:`mnk + k^3`, :math:`k = \min(m, n)` (a Gram matrix
    and its eigenvalues), over its cells' matrices where they are known, else over the stored tensor; 0 when no
    cell has work left (every metric cached).

    Parameters
    ----------
    unit : TensorWork or PairWork
        Anything with ``cells`` (each with ``shape``, (m, n) or None, and ``work_left``) and ``records`` or
        ``pair.target`` (with ``shape``).

    Returns
    -------
    float
        In multiply-adds, for comparison only.
    """
    cells = [c for c in getattr(unit, "cells", ()) or () if getattr(c, "work_left", True)]
    if not cells:
        return 0.0
    shapes = [getattr(c, "shape", None) for c in cells]
    if all(shapes):
        return sum(_cost(shape) for shape in shapes)
    return _cost(_stored_shape(unit))


def _layer(unit):
    """The layer of the unit's first cell (None without cells)."""
    cells = getattr(unit, "cells", None) or ()
    return getattr(getattr(cells[0], "piece", None), "layer", None) if cells else None


def claim_order(units: Sequence) -> list[int]:
    """Indices of ``units`` in the order to claim them: runs of consecutive units of one layer, each run's
    costliest first (:func:`unit_cost`; ties keep the plan's order), the runs in the plan's order.

    Parameters
    ----------
    units : sequence
        A pass's units, in the plan's order.

    Returns
    -------
    list of int
        A permutation of ``range(len(units))``.
    """
    order: list[int] = []
    for _, run in itertools.groupby(range(len(units)), key=lambda i: _layer(units[i])):
        order.extend(sorted(run, key=lambda i: -unit_cost(units[i])))
    return order
