"""The lab's record: per-activation histories -> one ``xarray.Dataset``, on disk.

Dimensions ``(activation, epoch, layer, head)``; epoch 0 is the model before
any update. Rows an unfinished run has not reached yet are NaN, and
``completed_epochs`` says how far each activation got.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import xarray as xr

from toolkit._version import __version__
from toolkit.atomic import atomic_path
from toolkit.lab.attention import REFERENCE, SCORE_STATISTICS, parse_activation

#: NetCDF engine, the toolkit's (see toolkit.io); labels like "x³/16" round-trip as UTF-8.
ENGINE = "h5netcdf"
#: Per-epoch scalars of one activation, in the order they are recorded.
SCALARS = ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "skipped_steps", "epoch_time")
#: Per-epoch (layer, head) arrays of one activation.
HEAD_ARRAYS = ("attention_norm_head", "attention_norm_max")
#: Per-epoch (layer,) arrays of one activation: the scale of the scores S = Q Kᵀ/√d_head.
LAYER_ARRAYS = SCORE_STATISTICS

_NORM_DESC = "‖φ(Q Kᵀ/√d_head)‖_F = (Σ_ij A_ij²)^½ on a fixed batch of held-out images"
_SCORE_DESC = ("scores S = Q Kᵀ/√d_head before the activation, every entry of every head and image "
               "of the fixed held-out batch pooled; ")
_SCORE_REF = "toolkit.lab: what sets a polynomial attention's norm relative to softmax"
VARIABLE_ATTRS = {
    "attention_norm": dict(
        long_name="attention norm", units="1",
        description=_NORM_DESC + "; mean over the batch and the heads of the layer",
        reference=REFERENCE),
    "attention_norm_head": dict(
        long_name="attention norm per head", units="1",
        description=_NORM_DESC + "; mean over the batch", reference=REFERENCE),
    "attention_norm_max": dict(
        long_name="largest attention norm per head", units="1",
        description=_NORM_DESC + "; max over the batch (softmax keeps it <= √N)",
        reference=REFERENCE),
    "score_mean_abs": dict(
        long_name="mean |score|", units="1",
        description=_SCORE_DESC + "mean of |S_ij|", reference=_SCORE_REF),
    "score_p99_abs": dict(
        long_name="99th percentile of |score|", units="1",
        description=_SCORE_DESC + "99th percentile of |S_ij| (linear interpolation, numpy.quantile)",
        reference=_SCORE_REF),
    "score_fraction_above_1": dict(
        long_name="share of |score| above 1", units="1",
        description=_SCORE_DESC + "share of entries with |S_ij| > 1 (where x³ exceeds x)",
        reference=_SCORE_REF),
    "train_loss": dict(
        long_name="train loss", units="nat",
        description="mean cross-entropy −log p(y|x) over the epoch's minibatches "
                    "(epoch 0: over the training set before any update)",
        reference="cross-entropy of the class logits"),
    "train_accuracy": dict(
        long_name="train accuracy", units="1",
        description="share of training images classified right during the epoch",
        reference="argmax of the class logits"),
    "test_loss": dict(
        long_name="test loss", units="nat",
        description="mean cross-entropy on the held-out images after the epoch",
        reference="cross-entropy of the class logits"),
    "test_accuracy": dict(
        long_name="test accuracy", units="1",
        description="share of held-out images classified right after the epoch",
        reference="argmax of the class logits"),
    "skipped_steps": dict(
        long_name="skipped steps", units="1",
        description="minibatches whose loss or gradient was not finite (no update made)",
        reference="divergence guard of the lab's training loop"),
    "epoch_time": dict(
        long_name="epoch time", units="s",
        description="wall-clock seconds of the epoch's training steps (epoch 0: NaN)",
        reference="time.perf_counter"),
    "completed_epochs": dict(
        long_name="completed epochs", units="1",
        description="epochs trained and recorded so far (-1: not started); later rows are NaN",
        reference="toolkit.lab"),
}


def new_history() -> dict[str, list]:
    """Empty per-activation history: one list per recorded quantity."""
    return {k: [] for k in SCALARS + HEAD_ARRAYS + LAYER_ARRAYS}


def complete_history(hist: dict[str, list], depth: int) -> dict[str, list]:
    """Give a history recorded before the score statistics NaN rows for them, one per epoch,
    so that epochs recorded from now on line up with the others; returns ``hist``."""
    n = len(hist["train_loss"])
    for k in LAYER_ARRAYS:
        if k not in hist:
            hist[k] = [np.full(depth, np.nan) for _ in range(n)]
    return hist


def build_dataset(histories: dict[str, dict[str, list]], *, epochs: int, depth: int,
                  heads: int, attrs: dict) -> xr.Dataset:
    """Assemble histories into the lab Dataset.

    Parameters
    ----------
    histories : dict
        Activation label -> history (see :func:`new_history`); each list
        holds one entry per recorded epoch, starting at epoch 0. Head arrays
        have shape (layer, head), layer arrays (layer,). A history without
        the layer arrays (a run older than them) leaves them NaN.
    epochs : int
        Last epoch of the run; the ``epoch`` dim is 0..epochs.
    depth, heads : int
        Sizes of the ``layer`` and ``head`` dims.
    attrs : dict
        Dataset attrs (str/int/float only).

    Returns
    -------
    xarray.Dataset
        dims (activation, epoch, layer, head); variables ``attention_norm``
        (activation, epoch, layer), ``attention_norm_head`` and
        ``attention_norm_max`` (activation, epoch, layer, head), the score
        statistics of :data:`LAYER_ARRAYS` (activation, epoch, layer), the
        scalars of :data:`SCALARS` (activation, epoch) and
        ``completed_epochs`` (activation).
    """
    labels = list(histories)
    n_act, n_ep = len(labels), epochs + 1
    data = {k: np.full((n_act, n_ep), np.nan) for k in SCALARS}
    data.update({k: np.full((n_act, n_ep, depth, heads), np.nan) for k in HEAD_ARRAYS})
    data.update({k: np.full((n_act, n_ep, depth), np.nan) for k in LAYER_ARRAYS})
    done = np.zeros(n_act, dtype=np.int64)
    for i, label in enumerate(labels):
        hist = histories[label]
        n = min(len(hist["train_loss"]), n_ep)
        done[i] = n - 1
        for k in SCALARS:
            data[k][i, :n] = np.asarray(hist[k][:n], dtype=float)
        for k in HEAD_ARRAYS:
            if n:
                data[k][i, :n] = np.asarray(hist[k][:n], dtype=float).reshape(n, depth, heads)
        for k in LAYER_ARRAYS:
            rows = hist.get(k, [])[:n]
            if rows:
                data[k][i, :len(rows)] = np.asarray(rows, dtype=float).reshape(len(rows), depth)
    for k in data:
        data[k][~np.isfinite(data[k])] = np.nan
    head_dims = ("activation", "epoch", "layer", "head")
    variables = {k: (("activation", "epoch"), v) for k, v in data.items() if k in SCALARS}
    variables.update({k: (head_dims, data[k]) for k in HEAD_ARRAYS})
    variables.update({k: (head_dims[:3], data[k]) for k in LAYER_ARRAYS})
    variables["attention_norm"] = (head_dims[:3], data["attention_norm_head"].mean(axis=-1))
    variables["completed_epochs"] = (("activation",), done)
    coords = {
        "activation": np.array(labels, dtype=object),  # object: variable-length UTF-8 in HDF5
        "activation_name": ("activation", np.array([parse_activation(a).name for a in labels], dtype=object)),
        "epoch": np.arange(n_ep),
        "layer": np.arange(depth),
        "head": np.arange(heads),
    }
    order = ["attention_norm", *HEAD_ARRAYS, *LAYER_ARRAYS, *SCALARS, "completed_epochs"]
    ds = xr.Dataset({k: variables[k] for k in order}, coords=coords)
    for k in order:
        ds[k].attrs.update(VARIABLE_ATTRS[k])
    ds["epoch"].attrs.update(long_name="epoch", units="1")
    ds["layer"].attrs.update(long_name="layer", units="1", description="0 = closest to the patch embedding")
    ds["head"].attrs.update(long_name="head", units="1")
    ds["activation"].attrs.update(long_name="attention activation", units="1",
                                  description="softmax, or φ(x) = x^p / c elementwise on Q Kᵀ/√d_head")
    ds.attrs.update(attrs)
    ds.attrs.update(toolkit_version=__version__,
                    created=datetime.now(UTC).isoformat(timespec="seconds"))
    return ds


def histories_from_dataset(ds: xr.Dataset) -> dict[str, dict[str, list]]:
    """Invert :func:`build_dataset` for the completed epochs of each activation."""
    out = {}
    for label in ds["activation"].values.tolist():
        row = ds.sel(activation=label)
        n = int(row["completed_epochs"]) + 1
        hist = {k: row[k].values[:n].tolist() for k in SCALARS}
        hist.update({k: list(row[k].values[:n]) for k in HEAD_ARRAYS})
        hist.update({k: list(row[k].values[:n]) for k in LAYER_ARRAYS if k in row})
        out[label] = complete_history(hist, ds.sizes["layer"])
    return out


def write_netcdf(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write ``ds`` to ``path`` atomically (:func:`toolkit.atomic.atomic_path`).

    Float variables are compressed with zlib; a crash mid-write leaves the
    previous file intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    enc = {k: {"zlib": True, "complevel": 4} for k, v in ds.data_vars.items() if v.dtype.kind == "f"}
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine=ENGINE, encoding=enc)
    return path


def read_netcdf(path: str | os.PathLike) -> xr.Dataset:
    """Load a lab NetCDF fully into memory (the file is closed on return)."""
    return xr.load_dataset(path, engine=ENGINE)

