"""One record of a watched run: the snapshot of one step measured into a (layer, component) Dataset.

Pure computation on CPU tensors (the snapshot), run on the monitor's background worker: the weight
metrics by the one evaluator ``weight_stats`` uses (:func:`toolkit.metrics.evaluate.evaluate_matrix`),
the update since the first record and since the previous one by the diff metrics ``compare`` uses
(:func:`toolkit.metrics.diff.compute_diff_metrics`), assembled by ``weight_stats``' own grid builder
(:func:`toolkit.collect.assemble.grid.build_grid_dataset`), so a watched step and the same weights saved
and measured by ``weight_stats`` / ``compare`` give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import xarray as xr

from toolkit.collect.assemble.grid import build_grid_dataset
from toolkit.collect.cells import Cell
from toolkit.metrics.diff import DiffContext, compute_diff_metrics
from toolkit.metrics.evaluate import evaluate_matrix
from toolkit.metrics.norms import sum_of_squares
from toolkit.metrics.pair_sums import PairSums, delta_sums_against, pair_sums_against
from toolkit.metrics.registry import DegenerateMatrix, get_metric

#: The update metrics of every record (``compare``'s): vs the first record and vs the previous one.
UPDATE_METRICS = ("relative_change", "update_density")
#: Suffixes of the update variables: the first record (the seed figure as it forms) and the previous record.
SINCE = {"since_start": "the first record of the run", "since_previous": "the previous record"}
GRADIENT = "gradient_norm"


@dataclass
class Snapshot:
    """What the training thread hands the worker: copies of the watched matrices at one step.

    Attributes
    ----------
    step : int
        The global step.
    matrices : dict
        ``{key: tensor}``, CPU copies in the parameters' own dtype (bit comparisons stay exact).
    spectral : bool
        Whether the metrics that read singular values are measured at this step.
    gradient_norms : dict
        ``{key: float}``: Frobenius norm of the component's gradient, where one was captured.
    sumsq : dict
        ``{key: float}``: :math:`\\sum w^2` of each matrix (float64, from the moment pass of its weight
        metrics), filled by :func:`measure_snapshot`; the later records' update metrics read it as their base's.
    """

    step: int
    matrices: dict
    spectral: bool = True
    gradient_norms: dict = field(default_factory=dict)
    sumsq: dict = field(default_factory=dict)


def update_metrics(kind: str) -> list:
    """The update variables' metric records for one suffix of :data:`SINCE`, named ``<metric>_<kind>``."""
    return [replace(m, name=f"{m.name}_{kind}", long_name=f"{m.long_name} since {SINCE[kind]}",
                    description=f"{m.description}, W_b = the matrix at {SINCE[kind]}")
            for m in map(get_metric, UPDATE_METRICS)]


def gradient_metric():
    """The record of ``gradient_norm``: ||dL/dW||_F of the step (the Frobenius norm's attrs)."""
    m = get_metric("frobenius_norm")
    return replace(m, name=GRADIENT, long_name="gradient Frobenius norm",
                   description="||dL/dW||_F of the component's matrix at the recorded step, before the "
                               "optimizer's update (as the training loop left the gradient)")


def measure_snapshot(snap: Snapshot, metrics: list, *, start: Snapshot | None, previous: Snapshot | None,
                     spectral_every: int) -> dict:
    """``{key: Cell}`` of one snapshot (and its :attr:`Snapshot.sumsq`, for the records after).

    Parameters
    ----------
    snap : Snapshot
    metrics : list of toolkit.metrics.Metric
        Weight metrics.
    start, previous : Snapshot, str or None
        The first and the previous record (measured); None for the first record; a str where the base
        exists but its matrices are not at hand (a resumed run), the reason the update metrics give.
    spectral_every : int
        For the reason of a spectral metric skipped at this step.

    Returns
    -------
    dict of key -> Cell
        Values of every weight metric, the update metrics (NaN with a reason at the first record) and
        ``gradient_norm`` (NaN where no gradient was captured).
    """
    measured = [m for m in metrics if snap.spectral or not m.needs_singular_values]
    skipped = [m for m in metrics if m not in measured]
    cells = {}
    for key, w in snap.matrices.items():
        result = evaluate_matrix(w, measured)
        snap.sumsq[key] = _sum_of_squares(w)
        cell = Cell.measured("", result)
        for m in skipped:
            cell.values[m.name] = math.nan
            cell.reasons[m.name] = f"not measured at this step (spectral metrics every {spectral_every} steps)"
        _updates(cell, key, snap, {"since_start": start, "since_previous": previous})
        norm = snap.gradient_norms.get(key)
        cell.values[GRADIENT] = math.nan if norm is None else float(norm)
        if norm is None:
            cell.reasons[GRADIENT] = "no gradient captured at this step"
        cells[key] = cell
    return cells


def _sum_of_squares(w) -> float:
    """:math:`\\sum w^2` as ``evaluate_matrix`` has just measured it (memoised on ``w``); NaN for a matrix it
    cannot read (or a complex one, whose real cast would drop the imaginary part)."""
    if w.is_complex():
        return math.nan
    try:
        return sum_of_squares(w)
    except DegenerateMatrix:
        return math.nan


def _updates(cell: Cell, key: tuple, snap: Snapshot, bases: dict) -> None:
    """The update metrics of ``snap``'s matrix ``key`` against each base record of ``bases`` (``{kind:
    Snapshot, reason or None}``, kinds of :data:`SINCE`), the metrics by ``compare``'s own functions from the
    pair's sums (:func:`pair_sums_for`). A base without this matrix, with another shape, or a pair these
    metrics cannot take (a matrix of integers) gives NaN with the reason for this matrix only: the record goes on.
    """
    w = snap.matrices[key]
    why = {kind: _no_update(key, w, base, kind) for kind, base in bases.items()}
    present = {kind: base for kind, base in bases.items() if not why[kind]}
    sums = {}
    if present:
        try:
            sums = dict(zip(present, pair_sums_for(key, snap, list(present.values())), strict=True))
        except (TypeError, ValueError, RuntimeError):  # compute_diff_metrics below says why, per base
            sums = {}
    for kind, base in bases.items():
        names = [f"{m}_{kind}" for m in UPDATE_METRICS]
        if why[kind]:
            for n in names:
                cell.values[n], cell.reasons[n] = math.nan, why[kind]
            continue
        b = base.matrices[key]
        try:
            found = compute_diff_metrics(b, w, list(UPDATE_METRICS),
                                         ctx=DiffContext(b, w, sums=sums[kind]) if kind in sums else None)
        except (TypeError, ValueError, RuntimeError) as exc:
            for n in names:
                cell.values[n], cell.reasons[n] = math.nan, f"not measured: {type(exc).__name__}: {exc}"
            continue
        for metric, n in zip(UPDATE_METRICS, names, strict=True):
            cell.values[n] = found[metric].value
            if found[metric].reason:
                cell.reasons[n] = found[metric].reason


def _no_update(key: tuple, w, base, kind: str) -> str:
    """Why ``w`` has no update against ``base`` (a Snapshot, a reason or None), or ``""``."""
    if base is None:
        return f"no earlier record ({SINCE[kind]} is this one)"
    if isinstance(base, str):
        return base
    b = base.matrices.get(key)
    if b is None:
        return f"not watched at {SINCE[kind]} (step {base.step})"
    if b.shape != w.shape:
        return f"the matrix changed shape since {SINCE[kind]} (step {base.step}): {tuple(b.shape)} -> {tuple(w.shape)}"
    if not (b.is_floating_point() and w.is_floating_point()):
        return f"not a floating-point matrix ({b.dtype} -> {w.dtype}): no update measured"
    return ""


def pair_sums_for(key: tuple, snap: Snapshot, bases: list) -> list[PairSums]:
    r""":class:`~toolkit.metrics.pair_sums.PairSums` of matrix ``key`` of each base record against ``snap``'s.

    The records' own :math:`\sum t^2` and :math:`\sum b^2` (:attr:`Snapshot.sumsq`, measured once per record)
    with one pass over the three tensors for the difference's sums
    (:func:`~toolkit.metrics.pair_sums.delta_sums_against`); :math:`\sum b t` by the polarisation identity
    :math:`(\sum t^2 + \sum b^2 - \sum (t - b)^2) / 2` (an absolute error of a few units of float64 rounding
    in a cosine, which no record metric reads). Where that route does not apply (bfloat16, mixed dtypes, a sum
    of squares not measured), :func:`~toolkit.metrics.pair_sums.pair_sums_against` measures every sum.
    Both routes give each sum to float64 summation order (tested against :func:`~toolkit.metrics.pair_sums.pair_sums`).
    """
    w = snap.matrices[key]
    st = snap.sumsq.get(key, math.nan)
    sb = [b.sumsq.get(key, math.nan) for b in bases]
    deltas = delta_sums_against(w, [b.matrices[key] for b in bases]) if math.isfinite(st + sum(sb)) else None
    if deltas is None:
        return pair_sums_against(w, [b.matrices[key] for b in bases])
    return [PairSums(s, st, (st + s - dd) / 2, dd, unchanged, w.numel())
            for s, (dd, unchanged) in zip(sb, deltas, strict=True)]


def record_dataset(snap: Snapshot, cells: dict, plan, metrics: list, attrs: dict) -> xr.Dataset:
    """The record of one step: the grid Dataset with a ``step`` dimension of length 1.

    Returns
    -------
    xarray.Dataset
        Dims ``(step, layer, component)`` (``expert`` too for routed experts); the weight metrics,
        ``<update>_since_start``, ``<update>_since_previous`` and ``gradient_norm``; coords as
        ``weight_stats``' (``parameter_name``, ``nan_reason``, ``n_rows``, ``n_cols``).
    """
    records = [*metrics, *update_metrics("since_start"), *update_metrics("since_previous"), gradient_metric()]
    names = {w.key: w.parameter_name for w in plan.matrices}
    for key, cell in cells.items():
        cell.parameter_name = names[key]
    ds = build_grid_dataset(plan.num_layers, cells, records, dict(attrs), components=plan.components)
    ds = ds.expand_dims(step=np.asarray([snap.step], dtype=np.int64))
    ds["step"].attrs["long_name"] = "training step (global step)"
    for name in ("parameter_name", "nan_reason", "n_rows", "n_cols"):
        if "step" not in ds[name].dims:
            ds = ds.assign_coords({name: ds[name].expand_dims(step=ds["step"].values)})
    return ds
