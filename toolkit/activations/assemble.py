"""The Dataset of ``activation_stats`` from what a run recorded (:mod:`.runner`) under its hooks (:mod:`.hook_plan`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from toolkit.activations import definitions as D
from toolkit.activations.dataset import add_head_variables
from toolkit.activations.routing import router_variables
from toolkit.collect.assemble.grid import build_grid_dataset, with_unselected
from toolkit.collect.cells import Cell

__all__ = ["activation_dataset", "run_attrs"]


def run_attrs(plan, model, loaded_attrs: dict, recorded, *, texts_origin: str, ids: list, max_tokens: int,
              batch_size: int, attention: bool) -> dict:
    """The Dataset attrs of a run: the model's, the head counts, the texts and the mean next-token loss (nats)."""
    dims = plan.adapter.dims
    return {
        **loaded_attrs, "kind": "activations", "model_type": plan.adapter.family,
        "num_hidden_layers": plan.num_layers, "num_attention_heads": int(dims.num_attention_heads),
        "num_key_value_heads": int(dims.num_key_value_heads), "head_dim": int(dims.head_dim),
        "attention": "causal" if plan.causal else "bidirectional",
        "attn_implementation": "eager" if attention else str(getattr(model.config, "_attn_implementation", "")),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "texts": texts_origin, "num_texts": len(ids),
        "num_tokens": int(sum(map(len, ids))), "max_tokens": int(max_tokens), "batch_size": int(batch_size),
        "mean_next_token_loss": recorded.loss_sum / recorded.count if recorded.count else float("nan"),
    }


def activation_dataset(plan, recorded, attrs: dict, texts: list, ids: list, *, fill: bool) -> xr.Dataset:
    """The (layer, component) grid, the router and per-head variables, cut to the selection.

    Parameters
    ----------
    plan : toolkit.activations.hook_plan.HookPlan
    recorded : toolkit.activations.runner.Recorded
    attrs : dict
        :func:`run_attrs`.
    texts, ids : list
        The texts and their token ids (the ``text`` dim).
    fill : bool
        The whole grid, the cells left out marked "not selected"; else only the selected cells.
    """
    comp = recorded.components
    cells = {}
    for key, piece in plan.pieces.items():
        acc = comp.acc[key]
        cell = Cell(piece.parameter_name, tuple(piece.extract(plan.weights[key].detach()).shape))
        if comp.calls[key]:
            cell.values.update(output_rms=acc.output.rms, input_rms=comp.input_rms(key),
                               activation_kurtosis=acc.output.kurtosis, max_abs_activation=acc.output.max_abs)
        else:
            cell.reasons["activations"] = "the module never ran"
        cell.values["gradient_norm"] = recorded.gradients.get(key, float("nan"))
        if key not in recorded.gradients:
            cell.reasons["gradient_norm"] = "no next-token loss (encoder or headless model)" if not plan.has_loss \
                else "gradients=False"
        cells[key] = cell
    ds = build_grid_dataset(plan.num_layers, cells, list(D.GRID_STATS), attrs)
    if recorded.routing is not None:
        ds = ds.assign(router_variables(recorded.routing, plan.num_layers)).assign_coords(
            expert=("expert", np.arange(recorded.routing.num_experts), {"long_name": "routed expert"}))
    ds = add_head_variables(ds, comp, recorded.attention, plan.adapter.dims, texts, ids)
    return _selected(ds, plan.chosen, fill)


def _selected(ds: xr.Dataset, chosen, fill: bool) -> xr.Dataset:
    """``ds`` cut to the selection (``fill``: the whole grid, the cells left out marked)."""
    if chosen.everything:
        return ds
    ds.attrs["selection"] = chosen.describe()
    if chosen.experts is not None and "expert" in ds.dims:
        ds = ds.sel(expert=list(chosen.experts))
    if fill:
        return with_unselected(ds, chosen)
    if chosen.layers is not None:
        ds = ds.sel(layer=list(chosen.layers))
    if chosen.components is not None:
        ds = ds.sel(component=[c for c in ds.component.values if c in chosen.components])
    return ds
