"""What a forward pass of ``activation_stats`` hooks: the plan, made from the model's modules without running it.

:func:`plan_hooks` maps the model's parameters to (layer, component) pieces through the
same component mapping as the weights pass, keeps the selected ones and finds their
modules: the component modules whose outputs are reduced, each layer's attention
module (attention maps), the routers (routing statistics), and what the next-token
loss and the gradients need. Nothing runs; a test checks the plan of a tiny model
built from its config.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from toolkit.activations.hooks import Target
from toolkit.architectures import resolve_adapter
from toolkit.errors import SelectionError, UnmappedParametersError

__all__ = ["HookPlan", "plan_hooks"]


@dataclass
class HookPlan:
    """The hooks of one ``activation_stats`` run.

    Attributes
    ----------
    adapter
        The family's component mapping (:mod:`toolkit.architectures`).
    chosen : toolkit.collect.plan.selection.Selected
        The selection, resolved against the model.
    pieces : dict
        ``{(layer, component): Piece}`` of the selected cells.
    targets : dict
        ``{module: [Target]}``: each component module and the cells its output feeds (a fused module several).
    weights : dict
        ``{(layer, component): torch.nn.Parameter}``: the weight each cell's gradient is read from.
    layer_modules : dict
        ``{layer: [module]}``: what the progress bar counts.
    attention_modules, routers : dict
        ``{layer: module}``: the attention modules whose maps are recorded, the routers whose choices are.
    causal : bool
        Every attention module is causal (a decoder).
    has_loss : bool
        A next-token loss can be formed (causal, with an output embedding).
    """

    adapter: object
    chosen: object
    pieces: dict
    targets: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    layer_modules: dict = field(default_factory=dict)
    attention_modules: dict = field(default_factory=dict)
    routers: dict = field(default_factory=dict)
    causal: bool = True
    has_loss: bool = False

    @property
    def num_layers(self) -> int:
        return int(self.adapter.num_layers)


def plan_hooks(model, selection, *, mapping=None) -> HookPlan:
    """The :class:`HookPlan` of ``model`` for ``selection``.

    Parameters
    ----------
    model : torch.nn.Module
        A ``transformers`` model (its ``config`` says the family).
    selection : toolkit.collect.plan.selection.Selection
        The cells asked for.
    mapping : toolkit.Mapping, optional
        A user mapping for an unregistered family.

    Raises
    ------
    UnsupportedArchitectureError, UnmappedParametersError
        No component mapping for the model, or two parameters mapping to one cell.
    SelectionError
        A selection the model does not have, or one that holds no component module.
    """
    params = dict(model.named_parameters())
    adapter = resolve_adapter(model.config.to_dict(), list(params), mapping=mapping)
    model_pieces = _map_pieces(adapter, params)
    chosen = selection.resolve(int(adapter.num_layers), {c for _, c in model_pieces},
                               int(getattr(adapter, "num_experts", 0) or 0))
    pieces = {k: p for k, p in model_pieces.items() if chosen.keeps_cell(*k)}
    if not pieces:
        raise SelectionError("selection", chosen.describe(), "no component module of the model is in it")
    plan = HookPlan(adapter, chosen, pieces)
    device = next(model.parameters()).device
    for key, piece in pieces.items():
        module = adapter.find_module(model, piece)
        idx = piece.out_index.to(device) if torch.is_tensor(piece.out_index) else piece.out_index
        plan.targets.setdefault(module, []).append(Target(key, idx))
        plan.weights[key] = module.weight
        plan.layer_modules.setdefault(key[0], []).append(module)
    plan.attention_modules = {layer: adapter.find_module(model, p.module_name.rsplit(".", 1)[0])
                              for (layer, comp), p in model_pieces.items()
                              if comp == "attn.q" and _records(chosen, layer, "attn.")}
    plan.routers = {layer: adapter.find_module(model, p) for (layer, comp), p in model_pieces.items()
                    if comp == "mlp.router" and _records(chosen, layer, "mlp.router")}
    plan.causal = all(getattr(m, "is_causal", True) for m in plan.attention_modules.values())
    plan.has_loss = plan.causal and callable(getattr(model, "get_output_embeddings", None)) \
        and model.get_output_embeddings() is not None
    return plan


def _records(chosen, layer: int, prefix: str) -> bool:
    """Whether a per-layer recorder (attention maps: ``"attn."``; router: ``"mlp.router"``) runs on ``layer``."""
    return (chosen.layers is None or layer in chosen.layers) and (
        chosen.components is None or any(c.startswith(prefix) for c in chosen.components))


def _map_pieces(adapter, params) -> dict:
    """``{(layer, component): Piece}`` of the model's parameters, checked like the weight plan (routed
    experts left out: see :mod:`toolkit.activations.routing` for what the routers do with them)."""
    pieces, seen = {}, {}
    for name in params:
        for p in adapter.pieces(name):
            if p.expert is not None:
                continue  # a routed expert has no module of its own (its 3-D stack is one module)
            key = (p.layer, p.component)
            if key in seen:
                raise UnmappedParametersError(
                    f"two parameters map to layer {p.layer} {p.component}: {seen[key]!r} and {name!r}; "
                    "fix the mapping so each component has one matrix per layer")
            seen[key], pieces[key] = name, p
    if not pieces:
        raise UnmappedParametersError(
            f"no parameter of the model maps to an attention or MLP component (model_type "
            f"{adapter.family!r}); pass mapping=toolkit.Mapping({{...}})", list(params))
    adapter.check_layers(layer for layer, _ in pieces)
    return pieces
