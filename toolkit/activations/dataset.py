"""The (layer, head), (layer, kv_head) and (text,) variables of the activation Dataset."""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from toolkit.activations import definitions as D

PREVIEW = 40


def _preview(text) -> str:
    s = text if isinstance(text, str) else "ids " + " ".join(map(str, list(text)[:8]))
    s = " ".join(s.split())
    return s if len(s) <= PREVIEW else s[: PREVIEW - 1] + "…"


def add_head_variables(ds: xr.Dataset, comp, att, dims, texts: list, ids: list) -> xr.Dataset:
    """Add per-head and per-text variables to the (layer, component) Dataset.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`toolkit.collect.assemble.grid.build_grid_dataset`.
    comp : hooks.ComponentRecorder
        Per-head sums of squares of q, k, v.
    att : attention.AttentionRecorder or None
        ``values`` (3, layer, head, text): Frobenius norm, entropy, sink mass.
    dims : toolkit.architectures.Dims
    texts, ids : list
        The texts as given and their token ids.

    Returns
    -------
    xarray.Dataset
        ``ds`` with dims ``head``, ``kv_head``, ``text`` and their variables
        (see :func:`toolkit.activations.activation_stats`).
    """
    n_layers = ds.sizes["layer"]
    n_heads, n_kv = int(dims.num_attention_heads), int(dims.num_key_value_heads)
    group = max(n_heads // max(n_kv, 1), 1)
    coords = {
        "head": ("head", np.arange(n_heads), {"long_name": "query head"}),
        "kv_head": ("kv_head", np.arange(n_kv), {"long_name": "key/value head"}),
        "kv_group": ("head", np.arange(n_heads) // group,
                     {"long_name": "key/value head read by this query head (grouped-query attention)"}),
        "text": ("text", np.arange(len(ids)), {"long_name": "text (position in the input list)"}),
        "n_tokens": ("text", np.array([len(x) for x in ids], dtype=np.int64), {"long_name": "tokens of the text"}),
        "text_preview": ("text", np.array([_preview(t) for t in texts], dtype=object).astype(str)),
    }
    ds = ds.assign_coords(coords)
    new = {}
    if att is not None:
        values = att.values.numpy()
        if values.shape[1] < n_layers:  # layers without an attention module stay NaN
            pad = np.full((3, n_layers - values.shape[1], *values.shape[2:]), np.nan)
            values = np.concatenate([values, pad], axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows of missing layers
            mean, std = np.nanmean(values, axis=-1), np.nanstd(values, axis=-1)
        for i, stat in enumerate(D.ATTENTION_STATS):
            new[stat.name] = (("layer", "head"), mean[i], stat.attrs())
            new[f"{stat.name}_std"] = (("layer", "head"), std[i], D.spread_attrs(stat))
            new[f"{stat.name}_per_text"] = (("layer", "head", "text"), values[i], D.per_text_attrs(stat))
    head_vars = {"attn.q": ("query_head_rms", "head", n_heads), "attn.k": ("key_head_rms", "kv_head", n_kv),
                 "attn.v": ("value_head_rms", "kv_head", n_kv)}
    for component, (name, dim, size) in head_vars.items():
        grid = np.full((n_layers, size), np.nan)
        for layer in range(n_layers):
            key = (layer, component)
            if key in comp.acc:
                rms = comp.head_rms(key, int(dims.head_dim))
                if rms is not None and rms.numel() == size:
                    grid[layer] = rms.numpy()
        new[name] = (("layer", dim), grid, D.STATS[name].attrs())
    new["prompt"] = (("text",), np.array([t if isinstance(t, str) else " ".join(map(str, t)) for t in texts],
                                         dtype=object).astype(str), {"long_name": "input text (or token ids)"})
    return ds.assign(new)
