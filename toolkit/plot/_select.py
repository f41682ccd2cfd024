"""Selecting one 2-D panel out of a statistics Dataset (no matplotlib here)."""

from __future__ import annotations

import os
import re

import numpy as np

from toolkit.constraint_types import DataOf
from toolkit.constraints import checks_options

ROW_DIM = "layer"
#: Column dimensions, in preference order: the first one a variable has is its x axis
#: (``kv_head``: the key/value heads of grouped-query attention, fewer than the query heads).
COL_DIMS = ("component", "head", "kv_head", "expert")
#: The position in a stored spectrum (``eigenvalues`` (layer, component, index)).
SPECTRUM_DIM = "index"
#: Dimensions a heatmap may collapse instead of selecting one label: ``expert="mean"``.
REDUCIBLE_DIMS = ("expert", "head", "kv_head")
#: Reductions over such a dimension (NaN-skipping), by the name a selection passes.
REDUCTIONS = ("mean", "max", "min")
#: 1-D coordinates that name a position better than its index (``step 4``, not ``checkpoint=2``).
STEP_COORDS = ("step", "epoch")


def column_dim(dims) -> str | None:
    """The column (x axis) dimension among ``dims``: the first of :data:`COL_DIMS` present, or None."""
    return next((d for d in COL_DIMS if d in dims), None)


@checks_options(ds=DataOf(array=True))
def metric_names(ds) -> list[str]:
    """Names of the variables of ``ds`` that can be drawn as a heatmap.

    A metric is a numeric data variable with a ``layer`` dimension and a
    ``component``, ``head``, ``kv_head`` or ``expert`` dimension, in the
    Dataset's order. Stored spectra (a variable along ``index``, such as
    ``eigenvalues``) are not metrics: :func:`toolkit.plot.esd` draws them.
    """
    return [str(k) for k, v in ds.data_vars.items()
            if ROW_DIM in v.dims and column_dim(v.dims) is not None and v.dtype.kind in "fiub"
            and SPECTRUM_DIM not in v.dims]


#: Folder names that say nothing about the model: the title then shows their parent too.
_GENERIC = {"model", "models", "checkpoint", "checkpoints", "weights", "hf", "final", "latest", "output"}
_HUB_CACHE = re.compile(r"models--([^/]+)--([^/]+)/snapshots/")


def model_name(attrs) -> str:
    """Short model name from Dataset attrs (``model_name``, ``model`` or ``source``).

    A hub id (``Qwen/Qwen2.5-7B``) is kept. A path is shortened to its last
    part; a snapshot in the Hugging Face cache (``.../models--Qwen--Qwen2.5-7B/snapshots/<commit>``)
    gives its repo id, and a generic last part (``model``, ``checkpoint``...)
    keeps its parent (``all-MiniLM-L6-v2/model``).
    """
    for key in ("model_name", "model", "source"):
        name = str(attrs.get(key, "") or "").rstrip("/\\")
        if name:
            if os.path.isabs(name) or name.startswith(".") or name.count("/") > 1 or "\\" in name:
                path = name.replace("\\", "/")
                hub = _HUB_CACHE.search(path + "/")
                if hub:
                    return f"{hub.group(1)}/{hub.group(2)}"
                parts = [p for p in path.split("/") if p]
                if len(parts) > 1 and parts[-1].lower() in _GENERIC:
                    return "/".join(parts[-2:])
                return parts[-1] if parts else name
            return name
    return ""


def is_reduction(da, key, value) -> bool:
    """Whether ``key=value`` asks to collapse ``key`` (``expert="mean"``) rather than select a label."""
    if not (isinstance(value, str) and value in REDUCTIONS and key in da.dims):
        return False
    return key not in da.coords or value not in [str(v) for v in da[key].values]


def select(da, selection: dict):
    """Apply ``dim=label`` selections; a non-index coordinate (``step``) selects along its dim.

    ``dim="mean"`` (or ``"max"``, ``"min"``) collapses that dimension, skipping NaN, when it has
    no label of that name (``alpha_per_expert`` with ``expert="mean"``).
    """
    for key, value in selection.items():
        if is_reduction(da, key, value):
            with np.errstate(all="ignore"):
                da = getattr(da, value)(key, skipna=True, keep_attrs=True)
        elif key in da.dims:
            try:
                da = da.sel({key: value}) if key in da.indexes else da.isel({key: value})
            except (KeyError, IndexError, ValueError) as err:
                known = da[key].values.tolist() if key in da.coords else list(range(da.sizes[key]))
                raise ValueError(f"{key}={value!r} not found; {key} has {known}") from err
        elif key in da.coords and da[key].ndim == 1:
            dim = da[key].dims[0]
            hits = np.flatnonzero(da[key].values == value)
            if hits.size != 1:
                raise ValueError(f"{key}={value!r} matches {hits.size} entries; {key} has {da[key].values.tolist()}")
            da = da.isel({dim: int(hits[0])})
        else:
            raise ValueError(f"cannot select {key}={value!r}: {da.name!r} has dims {tuple(da.dims)} "
                             f"and coords {tuple(da.coords)}")
    return da


def tick_step(n_rows: int) -> int:
    """Layers between two labelled rows: every layer up to 8 rows, every 2nd up to 16, else every 4th."""
    return 1 if n_rows <= 8 else 2 if n_rows <= 16 else 4


def tick_rows(rows: tuple, step: int | None = None) -> tuple[tuple, tuple]:
    """Label the first and last row shown and every layer divisible by ``step``
    (:func:`tick_step` of the row count: all six layers of BERT, every 4th of a 30-layer model);
    a label next to an end is dropped, so two labels never touch."""
    n = len(rows)
    step = tick_step(n) if step is None else max(1, int(step))
    if step == 1:
        pos = tuple(range(n))
        return pos, tuple(str(r) for r in rows)
    keep = {0, n - 1}
    for i, layer in enumerate(rows):
        if layer % step == 0 and (i == 0 or i == n - 1 or 1 < i < n - 2):
            keep.add(i)
    pos = tuple(sorted(keep))
    return pos, tuple(str(rows[i]) for i in pos)


def describe(selection: dict, da=None) -> str:
    """``ckpt-1 (step 1000), head=3`` for titles.

    With the variable ``da`` the selection was made on, a position along a
    dimension that carries a ``step`` (or ``epoch``) coordinate is named by it
    (``step 4``, not ``checkpoint=2``; a label that says more is kept:
    ``ckpt-1 (step 1000)``), ``step=4`` reads ``step 4`` and a reduction reads
    ``mean over expert``.
    """
    parts = []
    for key, value in selection.items():
        if da is not None and is_reduction(da, key, value):
            parts.append(f"{value} over {key}")
        elif key in STEP_COORDS:
            parts.append(f"{key} {value}")
        elif da is not None and key in da.dims and (named := _step_name(da, key, value)):
            parts.append(named)
        else:
            parts.append(f"{key}={value}")
    return ", ".join(parts)


def _step_name(da, dim, value) -> str:
    """``step 4`` for position ``value`` along ``dim`` when a step coordinate runs along it, else ""."""
    coord = next((c for c in STEP_COORDS if c in da.coords and da[c].dims == (dim,)), None)
    if coord is None:
        return ""
    labels = da[dim].values.tolist() if dim in da.coords else list(range(da.sizes[dim]))
    if value not in labels:
        return ""
    named = f"{coord} {da[coord].values[labels.index(value)]}"
    is_position = labels == list(range(len(labels)))  # labels that are only positions say nothing
    return named if is_position else f"{value} ({named})"


def reason_for(text: str, metric: str) -> str:
    """The part of a cell's ``nan_reason`` that concerns ``metric``.

    ``nan_reason`` joins the reasons of several metrics as
    ``"delta_alpha, delta_matrix_rank: zero update; alpha: too few eigenvalues"``
    (:func:`toolkit.collect.cells.join_reasons`); this returns ``"zero update"``
    for ``delta_alpha``, and the whole text when no part names ``metric``.
    """
    text = str(text or "")
    for part in text.split("; "):
        names, sep, why = part.partition(": ")
        if sep and metric in [n.strip() for n in names.split(",")]:
            return why
    return text
