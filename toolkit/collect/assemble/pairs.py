"""Assembling the Dataset of one compared pair: grid cells, per-tensor and whole-model totals."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import xarray as xr

from toolkit.collect.assemble.grid import build_grid_dataset, with_unselected
from toolkit.collect.measure.pairs import TOTALS
from toolkit.metrics import diff as _diff
from toolkit.metrics.registry import resolve_metrics

_MODEL_VARS = {
    "model_relative_change": dict(
        long_name="whole-model relative weight change", units="1",
        description="sqrt(sum ||W_t - W_b||_F^2 / sum ||W_b||_F^2) over every compared tensor "
                    "(embeddings, norms and biases included; tied embeddings counted once)",
        reference=_diff.REFERENCE_MUKHERJEE),
    "model_update_sparsity": dict(
        long_name="whole-model update sparsity", units="1",
        description="unchanged entries / all entries over every compared tensor (tied embeddings counted once); "
                    + _diff.UNCHANGED_RULE, reference=_diff.REFERENCE_MUKHERJEE),
}


#: Attrs of a comparison's ``eigenvalues``: the spectrum of the update, not of a weight matrix.
UPDATE_SPECTRUM_ATTRS = {
    "long_name": "eigenvalues of dWᵀdW, the update's ESD",
    "matrix": "update W_target - W_base",
    "description": "lambda_i = sigma_i(dW)^2, dW = W_target - W_base (float32 difference of the stored values), "
                   "descending; 0 for an unchanged matrix; NaN past a matrix's min(out, in) eigenvalues and where "
                   "no spectrum could be computed",
    "reference": "Martin & Mahoney 2021, JMLR 22(165); Mukherjee et al. 2025, arXiv:2505.11711",
}


def short_name(location: str) -> str:
    """The last part of a local path; a hub id as it is."""
    text = str(location).rstrip("/\\")
    return os.path.basename(text) if os.path.exists(text) else text


def side_attrs(plan, side: str) -> dict:
    """A plan's source attrs prefixed ``base_`` or ``target_``."""
    return {f"{side}_{k}": v for k, v in plan.attrs().items() if k not in ("model_type", "num_hidden_layers")}


def series_name(locations: list[str]) -> str:
    """``"<run folder>"`` when every checkpoint lies in one folder, else the last checkpoint's name."""
    parents = {str(Path(loc).parent) for loc in locations}
    if len(parents) == 1 and all(os.path.exists(loc) for loc in locations):
        return Path(parents.pop()).name
    return f"{short_name(locations[-1])} ({len(locations)} checkpoints)"


def pair_dataset(bplan, tplan, cells, rows, chosen, skipped, tolerance, k, *, spectra: bool = False,
                 fill: bool = False) -> xr.Dataset:
    """The Dataset of one pair (see :func:`toolkit.collect.compare.compare` for its layout).

    ``cells``: ``{(layer, component): Cell}``; ``rows``: ``[(tensor name, {total: value})]``
    with the :data:`TOTALS` of each stored tensor pair; ``spectra``: add the cells' update
    spectra as ``eigenvalues`` (:data:`UPDATE_SPECTRUM_ATTRS`); the grid is ``bplan``'s selection
    (``fill``: the whole model's, the cells left out marked). With a selection the whole-model
    totals are left out: only part of the model was read.
    """
    cfg = bplan.source.config
    attrs = {
        "comparison": "target vs base",
        "model_name": f"{short_name(tplan.source.location)} vs {short_name(bplan.source.location)}",
        **side_attrs(bplan, "base"), **side_attrs(tplan, "target"),
        "model_type": str(cfg.get("model_type", "")), "num_hidden_layers": int(bplan.num_layers),
        "tolerance": float(tolerance), "subspace_k": int(k), "skipped_tensors": ", ".join(skipped),
        **({"num_experts": int(bplan.experts_in_model)} if bplan.experts_in_model else {}),
    }
    ds = build_grid_dataset(bplan.num_layers, cells, chosen, attrs, spectra=spectra, **bplan.grid(fill))
    ds = with_unselected(ds, bplan.selected)
    if spectra:
        ds["eigenvalues"].attrs.update(UPDATE_SPECTRUM_ATTRS)
    tot = {n: np.array([r[n] for _, r in rows], dtype=np.float64) for n in TOTALS}
    base_sq = tot["sumsq_base"].sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(tot["sumsq_base"] > 0, np.sqrt(tot["sumsq_delta"] / tot["sumsq_base"]), np.nan)
    model_rel = math.sqrt(tot["sumsq_delta"].sum() / base_sq) if base_sq > 0 else math.nan
    rc, us = (m.attrs() for m in resolve_metrics(["relative_change", "update_sparsity"], kind="diff"))
    ds = ds.assign_coords(tensor=("tensor", [name for name, _ in rows]),
                          tensor_size=("tensor", tot["n"].astype(np.int64), {"long_name": "number of entries"}))
    ds["tensor_relative_change"] = ("tensor", rel, {**rc, "long_name": "relative weight change per stored tensor"})
    ds["tensor_update_sparsity"] = ("tensor", tot["unchanged"] / np.maximum(tot["n"], 1),
                                    {**us, "long_name": "update sparsity per stored tensor"})
    if not bplan.selected.everything:
        return ds  # the whole-model totals need every tensor
    ds["model_relative_change"] = ((), model_rel, _MODEL_VARS["model_relative_change"])
    ds["model_update_sparsity"] = ((), tot["unchanged"].sum() / max(tot["n"].sum(), 1.0),
                                   _MODEL_VARS["model_update_sparsity"])
    return ds
