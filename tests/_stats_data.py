"""Synthetic statistics Datasets with the shape of ``toolkit.weight_stats`` output.

Used by the plot and widget tests; no model, no download.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from toolkit.architectures.vocabulary import COMPONENTS

METRICS = {
    "stable_rank": ("Stable rank", "||W||_F^2 / sigma_1^2"),
    "spectral_norm": ("Spectral norm", "sigma_1, the largest singular value"),
    "frobenius_norm": ("Frobenius norm", "sqrt(sum_ij w_ij^2)"),
}


def make_stats(n_layers: int = 12, *, checkpoints: int = 0, gate: bool = True, seed: int = 0,
               source: str = "test-org/tiny-model") -> xr.Dataset:
    """A Dataset like ``weight_stats``: dims (layer, component) [+ checkpoint with a ``step`` coord].

    Values lie in a narrow band (0.075 .. 0.105) like the published figures;
    ``gate=False`` makes ``mlp.gate`` all NaN (as for BERT).
    """
    rng = np.random.default_rng(seed)
    shape = (n_layers, len(COMPONENTS)) if not checkpoints else (checkpoints, n_layers, len(COMPONENTS))
    dims = ("layer", "component") if not checkpoints else ("checkpoint", "layer", "component")
    coords = {"layer": np.arange(n_layers), "component": list(COMPONENTS)}
    names = np.array([[f"model.layers.{i}.{c}.weight" for c in COMPONENTS] for i in range(n_layers)])
    coords["parameter_name"] = (("layer", "component"), names)
    coords["n_rows"] = (("layer", "component"), np.full((n_layers, len(COMPONENTS)), 64))
    coords["n_cols"] = (("layer", "component"), np.full((n_layers, len(COMPONENTS)), 32))
    reason = np.full((n_layers, len(COMPONENTS)), "", dtype=object)
    if checkpoints:
        coords["checkpoint"] = [f"ckpt-{k}" for k in range(checkpoints)]
        coords["step"] = ("checkpoint", np.arange(checkpoints) * 1000)
    ds = xr.Dataset(coords=coords)
    for k, (name, (long_name, formula)) in enumerate(METRICS.items()):
        values = rng.uniform(0.075, 0.105, shape) * (10.0 ** k)
        if not gate:
            values[..., COMPONENTS.index("mlp.gate")] = np.nan
        ds[name] = (dims, values.astype(np.float64),
                    {"long_name": long_name, "units": "1", "description": formula, "reference": "test"})
    if not gate:
        reason[:, COMPONENTS.index("mlp.gate")] = "architecture has no mlp.gate"
    ds = ds.assign_coords(nan_reason=(("layer", "component"), reason.astype(str)))
    ds.attrs.update(source=source, format="safetensors", model_type="llama", num_hidden_layers=n_layers,
                    storage_dtype="float32", fingerprint="0" * 16, toolkit_version="0", created="2026-01-01")
    return ds


def with_heads(ds: xr.Dataset, n_heads: int = 4, seed: int = 1) -> xr.Dataset:
    """Add ``attn_entropy`` (layer, head) and ``head_norm`` (layer, component, head) variables."""
    rng = np.random.default_rng(seed)
    n_layers = ds.sizes["layer"]
    ds = ds.assign_coords(head=np.arange(n_heads))
    ds["attn_entropy"] = (("layer", "head"), rng.uniform(1, 3, (n_layers, n_heads)),
                          {"long_name": "Attention entropy", "units": "nat"})
    ds["head_norm"] = (("layer", "component", "head"), rng.uniform(0, 1, (n_layers, ds.sizes["component"], n_heads)),
                       {"long_name": "Per-head norm", "units": "1"})
    return ds
