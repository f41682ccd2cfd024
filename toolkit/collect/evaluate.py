"""Evaluating a list of weight metrics on one matrix, sharing one spectrum."""

from __future__ import annotations

import math

import torch

from toolkit.collect.grid import Cell


def evaluate_matrix(w: torch.Tensor, metrics: list, *, device: str = "cpu", parameter_name: str = "") -> Cell:
    """Compute ``metrics`` on one matrix, never raising for a bad matrix.

    Parameters
    ----------
    w : torch.Tensor, shape (out_features, in_features)
        Any float dtype; converted to float32 here (one tensor at a time)
        unless every metric declares ``any_dtype``.
    metrics : list of toolkit.metrics.Metric
        Weight metrics. Singular values are computed once, only if one of
        them declares ``needs_singular_values``, and shared by all.
    device : str
        Where the singular values are computed (``"cpu"``, ``"cuda"``).

    Returns
    -------
    Cell
        Values per metric; NaN with a recorded reason where a metric is
        undefined for this matrix (all zeros, NaN/Inf entries, too short a
        spectrum...) or raised.
    """
    from toolkit.metrics.norms import count_nonfinite
    from toolkit.metrics.registry import DegenerateMatrix
    from toolkit.metrics.spectral import singular_values

    cell = Cell(parameter_name=parameter_name, shape=(int(w.shape[0]), int(w.shape[1])) if w.ndim == 2 else (0, 0))
    if w.ndim != 2 or w.numel() == 0:
        for m in metrics:
            cell.values[m.name] = math.nan
            cell.reasons[m.name] = f"not a non-empty matrix (shape {tuple(w.shape)})"
        return cell
    if not all(m.any_dtype for m in metrics):
        w = w.to(torch.float32)
    bad = count_nonfinite(w)  # the moment pass, shared with the entry-wise metrics
    if bad:
        for m in metrics:
            cell.values[m.name] = math.nan
            cell.reasons[m.name] = f"matrix contains {bad} NaN/Inf entries"
        return cell
    s = None
    s_error = None
    if any(m.needs_singular_values for m in metrics):
        try:
            s = singular_values(w, device=device)
        except DegenerateMatrix as e:
            s_error = e.reason
        except Exception as e:  # noqa: BLE001 - reported per cell, never cached
            s_error = f"singular values failed: {type(e).__name__}: {e}"
            cell.errors.update(m.name for m in metrics if m.needs_singular_values)
    for m in metrics:
        if m.needs_singular_values and s is None:
            cell.values[m.name], cell.reasons[m.name] = math.nan, s_error or "no singular values"
            continue
        try:
            value, reason = m.evaluate(w, s)
        except Exception as e:  # noqa: BLE001 - a failing (user) metric is one NaN cell, not a crash
            value, reason = math.nan, f"{type(e).__name__}: {e}"
            cell.errors.add(m.name)
        cell.values[m.name] = value
        if math.isnan(value):
            cell.reasons[m.name] = reason or "undefined for this matrix"
    return cell
