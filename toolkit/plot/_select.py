"""Selecting one 2-D panel out of a statistics Dataset (no matplotlib here)."""

from __future__ import annotations

import os
import re

import numpy as np

ROW_DIM = "layer"
#: Column dimensions, in preference order: the first one a variable has is its x axis
#: (``kv_head``: the key/value heads of grouped-query attention, fewer than the query heads).
COL_DIMS = ("component", "head", "kv_head")


def column_dim(dims) -> str | None:
    """The column (x axis) dimension among ``dims``: the first of :data:`COL_DIMS` present, or None."""
    return next((d for d in COL_DIMS if d in dims), None)


def metric_names(ds) -> list[str]:
    """Names of the variables of ``ds`` that can be drawn as a heatmap.

    A metric is a numeric data variable with a ``layer`` dimension and a
    ``component``, ``head`` or ``kv_head`` dimension, in the Dataset's order.
    """
    return [str(k) for k, v in ds.data_vars.items()
            if ROW_DIM in v.dims and column_dim(v.dims) is not None and v.dtype.kind in "fiub"]


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


def select(da, selection: dict):
    """Apply ``dim=label`` selections; a non-index coordinate (``step``) selects along its dim."""
    for key, value in selection.items():
        if key in da.dims:
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


def tick_rows(rows: tuple) -> tuple[tuple, tuple]:
    """Label every 4th layer, the first and the last shown; drop a label next to an end."""
    n = len(rows)
    keep = {0, n - 1}
    for i, layer in enumerate(rows):
        if layer % 4 == 0 and (i == 0 or i == n - 1 or 1 < i < n - 2):
            keep.add(i)
    pos = tuple(sorted(keep))
    return pos, tuple(str(rows[i]) for i in pos)


def describe(selection: dict) -> str:
    """``checkpoint=a, head=3`` for titles."""
    return ", ".join(f"{k}={v}" for k, v in selection.items())
