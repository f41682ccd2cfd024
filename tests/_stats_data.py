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


def with_kv_heads(ds: xr.Dataset, n_heads: int = 9, n_kv: int = 3, seed: int = 2) -> xr.Dataset:
    """Add per-head variables as ``activation_stats`` lays them out for grouped-query attention.

    ``query_head_rms`` (layer, head) over ``n_heads`` query heads, ``key_head_rms``
    and ``value_head_rms`` (layer, kv_head) over ``n_kv`` key/value heads, and the
    ``kv_group`` (head) coordinate; as SmolLM2-135M: 9 query heads, 3 kv heads.
    """
    rng = np.random.default_rng(seed)
    n_layers = ds.sizes["layer"]
    ds = ds.assign_coords(head=("head", np.arange(n_heads), {"long_name": "query head"}),
                          kv_head=("kv_head", np.arange(n_kv), {"long_name": "key/value head"}),
                          kv_group=("head", np.arange(n_heads) // (n_heads // n_kv)))
    ds["query_head_rms"] = (("layer", "head"), rng.uniform(0.5, 2, (n_layers, n_heads)),
                            {"long_name": "query RMS per head", "units": "1"})
    ds["key_head_rms"] = (("layer", "kv_head"), rng.uniform(0.5, 2, (n_layers, n_kv)),
                          {"long_name": "key RMS per key/value head", "units": "1"})
    ds["value_head_rms"] = (("layer", "kv_head"), rng.uniform(0.1, 1, (n_layers, n_kv)),
                            {"long_name": "value RMS per key/value head", "units": "1"})
    return ds


def with_massive_activation(ds: xr.Dataset, value: float = 28_000.0, seed: int = 3) -> xr.Dataset:
    """Add ``max_abs_activation`` (layer, component): about 1 everywhere, one cell of ``value``.

    The cell is layer 2, ``mlp.down`` -- a *massive activation* (Sun et al., 2024).
    """
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.5, 2.0, (ds.sizes["layer"], ds.sizes["component"]))
    values[2, list(ds["component"].values).index("mlp.down")] = value
    ds["max_abs_activation"] = (("layer", "component"), values,
                                {"long_name": "largest |activation|", "units": "1"})
    return ds


def with_spectra(ds: xr.Dataset, seed: int = 5, n: int = 48) -> xr.Dataset:
    """Add ``eigenvalues`` (layer, component, index): ``n`` heavy-tailed (Pareto) values per cell, descending."""
    rng = np.random.default_rng(seed)
    lam = np.sort(rng.pareto(2.5, (ds.sizes["layer"], ds.sizes["component"], n)) + 0.1, axis=-1)[..., ::-1]
    return ds.assign(eigenvalues=(("layer", "component", "index"), lam))
