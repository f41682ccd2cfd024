"""Which matrices of a live ``torch.nn.Module`` are watched, and as which (layer, component[, expert]) cell.

The same architecture registry as checkpoints (:func:`toolkit.architectures.resolve_adapter`) maps a
``transformers`` model's parameter names (``model.config`` says the family); a fused tensor is split by
the family's declared sizes and a stack of routed experts gives one cell per expert, exactly as
``weight_stats`` reads the same model's checkpoint. A model the registry does not know (no
``config``, or a family without an adapter: a plain ``nn.Module``, the attention lab's ViT) is still
watched: every 2-D ``weight`` parameter under a numbered block (``blocks.3.attn.qkv.weight``) is a
cell of that layer, its component named by the module path below the block (``attn.qkv``), as
:mod:`toolkit.architectures.vocabulary` names extra components.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from toolkit.architectures import resolve_adapter
from toolkit.architectures.vocabulary import ALL_COMPONENTS, COMPONENTS
from toolkit.errors import SelectionError, UnmappedParametersError, UnsupportedArchitectureError

#: A numbered block in a module path: ``layers.3.``, ``h.3.``, ``blocks.3.`` (the first number in the path).
_BLOCK = re.compile(r"^(?P<prefix>(?:[^.]+\.)*?)(?P<layer>\d+)\.(?P<rest>.+)\.weight$")


@dataclass(frozen=True)
class Watched:
    """One watched matrix.

    Attributes
    ----------
    key : tuple
        ``(layer, component)``, or ``(layer, component, expert)`` for a routed expert.
    parameter_name : str
        The parameter it lives in (as ``model.named_parameters()`` names it).
    parameter : torch.nn.Parameter
        The live parameter (read, never written).
    extract : callable
        ``extract(tensor) -> tensor`` of shape (out_features, in_features): the component's matrix
        from the parameter (or from its gradient, which has the parameter's shape).
    """

    key: tuple
    parameter_name: str
    parameter: torch.Tensor
    extract: Callable[[torch.Tensor], torch.Tensor]

    def matrix(self, tensor: torch.Tensor | None = None) -> torch.Tensor:
        """The component's matrix of the parameter (or of ``tensor``, e.g. its gradient), detached."""
        source = self.parameter if tensor is None else tensor
        return self.extract(source.detach())


@dataclass(frozen=True)
class WatchPlan:
    """The matrices a monitor watches.

    Attributes
    ----------
    family : str
        The architecture family (``model_type``), or ``"module paths"`` for a model the registry does not know.
    num_layers : int
    components : list of str
        The ``component`` coordinate: a registered family's canonical seven (as ``weight_stats`` lays
        them, NaN where the family has none) then its extra components; else the module paths.
    matrices : list of Watched
    """

    family: str
    num_layers: int
    components: list
    matrices: list


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def plan_watch(model: torch.nn.Module, params: dict, selection, *, mapping=None,
               where: str = "toolkit.watch") -> WatchPlan:
    """The matrices of ``model`` that ``selection`` keeps.

    Parameters
    ----------
    model : torch.nn.Module
        A ``transformers`` model (``model.config.model_type`` picks the family), or any module.
    params : dict
        ``{name: tensor}`` as the model names its parameters
        (:func:`toolkit.monitor.distributed.named_weights`).
    selection : toolkit.collect.plan.selection.Selection
    mapping : toolkit.Mapping, optional
        A user mapping for a family the registry does not know (wins over the module-path fallback).
    where : str
        The front door, for messages.

    Returns
    -------
    WatchPlan

    Raises
    ------
    UnmappedParametersError
        No parameter of the model is a matrix in a numbered block (nothing to watch).
    SelectionError
        A selection the model does not have.
    """
    config = getattr(model, "config", None)
    adapter = None
    if (config is not None and hasattr(config, "to_dict")) or mapping is not None:
        try:
            adapter = resolve_adapter(config.to_dict() if config is not None else {}, list(params), mapping=mapping)
        except UnsupportedArchitectureError:
            adapter = None
    if adapter is not None:
        found = {p.key: Watched(p.key, name, param, p.extract)
                 for name, param in params.items() for p in adapter.pieces(name)}
        family, num_layers = adapter.family, int(adapter.num_layers or 0)
    else:
        found, family = _by_module_path(params), "module paths"
        num_layers = 1 + max((k[0] for k in found), default=-1)
    if not found:
        raise UnmappedParametersError(
            f"{where}: no parameter of {type(model).__name__} is a weight matrix in a numbered block "
            "(layers.N..., blocks.N...); pass mapping=toolkit.Mapping({...}) to name its matrices",
            list(params))
    present = {k[1] for k in found}
    chosen = selection.resolve(num_layers, present, 1 + max((k[2] for k in found if len(k) == 3), default=-1))
    kept = [w for k, w in sorted(found.items(), key=lambda kv: _order(kv[0])) if _keeps(chosen, k)]
    if not kept:
        raise SelectionError("selection", chosen.describe(), "no watched matrix of the model is in it")
    components = sorted({w.key[1] for w in kept}, key=lambda c: _order((0, c)))
    if adapter is not None and chosen.components is None:  # the canonical seven first, as weight_stats lays them
        components = [*COMPONENTS, *[c for c in components if c not in COMPONENTS]]
    return WatchPlan(family, num_layers, components, kept)


def _keeps(chosen, key: tuple) -> bool:
    if not chosen.keeps_cell(key[0], key[1]):
        return False
    return len(key) < 3 or chosen.experts is None or key[2] in chosen.experts


def _order(key: tuple) -> tuple:
    comp = key[1]
    rank = ALL_COMPONENTS.index(comp) if comp in ALL_COMPONENTS else len(ALL_COMPONENTS)
    return (rank, comp, key[0], *key[2:])


def _by_module_path(params: dict) -> dict:
    """``{(layer, module path): Watched}`` of every 2-D weight under a numbered block."""
    found = {}
    for name, param in params.items():
        m = _BLOCK.match(name)
        if m is None or param.dim() != 2:
            continue
        key = (int(m.group("layer")), m.group("rest"))
        found.setdefault(key, Watched(key, name, param, _identity))
    return found
