"""Reading one cell's weight matrix back from the checkpoint a Dataset was computed from.

For the drill-down's entry histogram only: the Dataset's attrs record the
source (``source``, ``revision``; a comparison records ``target_source``),
and only a local file or folder that still exists is read (a hub id would
mean a download behind a click). The tensor is found and split through the
same plan as :func:`toolkit.weight_stats` (:func:`toolkit.collect.plan.plan_pieces`).
"""

from __future__ import annotations

import os

import numpy as np

from toolkit.errors import ToolkitError


def recorded_source(ds, selection=None) -> str:
    """The local checkpoint the cell's numbers came from, per the attrs; raises ToolkitError saying why none."""
    attrs = ds.attrs
    source = str(attrs.get("target_source") or attrs.get("source") or "")
    sources = attrs.get("checkpoint_sources")
    if sources is not None and selection and "checkpoint" in selection and "checkpoint" in ds.dims:
        labels = ds["checkpoint"].values.tolist()
        if selection["checkpoint"] in labels:
            source = str(np.atleast_1d(sources)[labels.index(selection["checkpoint"])])
    if not source:
        raise ToolkitError("the Dataset records no source (attrs 'source' / 'target_source')")
    return source


def read_cell_matrix(ds, layer: int, component: str, selection=None) -> np.ndarray:
    """The (out, in) float32 matrix of one cell, read from the source in ``ds.attrs``.

    Raises
    ------
    toolkit.errors.ToolkitError
        No local source recorded, or the checkpoint has no such matrix.
    """
    return _read(recorded_source(ds, selection), layer, component)


def update_sources(ds, selection=None) -> tuple[str, str] | None:
    """``(base, target)`` locations of a comparison's cell, per the attrs; None for a plain Dataset.

    :func:`toolkit.compare` records ``base_source`` and ``target_source``;
    :func:`toolkit.compare_series` records ``checkpoint_sources`` and, per
    checkpoint, the ``reference_step`` it is diffed against.
    """
    attrs, selection = ds.attrs, selection or {}
    sources = attrs.get("checkpoint_sources")
    if sources is not None and "checkpoint" in selection and "checkpoint" in ds.dims and "reference_step" in ds.coords:
        sources = [str(s) for s in np.atleast_1d(sources)]
        labels = ds["checkpoint"].values.tolist()
        k = labels.index(selection["checkpoint"])
        steps = ds["step"].values.tolist()
        return sources[steps.index(int(ds["reference_step"].values[k]))], sources[k]
    if attrs.get("base_source") and attrs.get("target_source"):
        return str(attrs["base_source"]), str(attrs["target_source"])
    return None


def _read(source: str, layer: int, component: str) -> np.ndarray:
    from toolkit.collect.plan import plan_pieces

    if not os.path.exists(source):
        raise ToolkitError(f"the source {source!r} is not a local file or folder here; the entries are read "
                           "only from local checkpoints (toolkit.cell_spectrum(source, ...) measures one matrix)")
    plan = plan_pieces(source)
    for t in plan.tensors:
        for piece in t.pieces:
            if (piece.layer, piece.component) == (layer, component):
                return piece.extract(t.record.read()).float().numpy()
    raise ToolkitError(f"{source!r} has no matrix at layer {layer} {component!r}")


def read_cell_update(ds, layer: int, component: str, selection=None) -> tuple[np.ndarray, np.ndarray]:
    """``(W_base, W_target)`` of one cell of a comparison, read from the two recorded sources.

    Raises
    ------
    toolkit.errors.ToolkitError
        ``ds`` records no comparison, a side is not a local checkpoint, or lacks the matrix.
    """
    sides = update_sources(ds, selection)
    if sides is None:
        raise ToolkitError("the Dataset records no compared checkpoints (attrs base_source / target_source)")
    return _read(sides[0], layer, component), _read(sides[1], layer, component)
