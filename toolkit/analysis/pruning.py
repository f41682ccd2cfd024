"""Magnitude pruning of a loaded model by a per-(layer, component) sparsity, undone on exit.

Each matrix of the allocation loses its ``round(s * n_rows * n_cols)`` entries of smallest magnitude (ties
broken by position, so the count is exact): unstructured magnitude pruning per matrix (Han et al. 2015), the
simplest pruner AlphaPruning's allocation is applied to (Lu et al. 2024, §4, "Magnitude"). The weights are
written in place under ``torch.no_grad()`` and the originals are put back when the block ends.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from toolkit.activations.hook_plan import plan_hooks
from toolkit.analysis.wanda import wanda_prune_
from toolkit.collect.plan.selection import Selection
from toolkit.errors import SelectionError

__all__ = ["magnitude_prune_", "pruned"]


def magnitude_prune_(weight: torch.Tensor, sparsity: float) -> int:
    """Zero the ``round(sparsity * weight.numel())`` entries of smallest ``|w|`` of ``weight``, in place.

    Parameters
    ----------
    weight : torch.Tensor
        Any shape; written in place (call under ``torch.no_grad()`` for a parameter).
    sparsity : float, in [0, 1]

    Returns
    -------
    int
        The number of entries set to zero (entries already zero count if they are among the smallest).
    """
    k = int(round(float(sparsity) * weight.numel()))
    if k <= 0:
        return 0
    flat = weight.view(-1)  # a parameter's weight is contiguous; view() refuses a tensor that is not
    magnitude = flat.abs()
    threshold = magnitude.kthvalue(k).values  # O(n), where a full sort of each matrix costs 10x more
    below = magnitude < threshold
    flat[below] = 0
    ties = (magnitude == threshold).nonzero().squeeze(1)[:k - int(below.sum())]  # quantized weights tie often
    flat[ties] = 0
    return k


@contextmanager
def pruned(model: torch.nn.Module, allocation, *, mapping=None, norms: dict | None = None):
    """Within the block, ``model``'s component matrices are pruned to ``allocation`` (magnitude, or Wanda).

    Parameters
    ----------
    model : torch.nn.Module
        A loaded ``transformers`` model (:func:`toolkit.activations.load_model`'s ``.model``) whose component
        modules are ``nn.Linear`` (Llama, Qwen, Gemma, Phi-3 without fused splits, BERT...).
    allocation : xarray.DataArray (layer, component)
        The sparsity of each matrix, e.g. :func:`toolkit.analysis.alpha_allocation`; NaN cells are left alone.
    mapping : toolkit.Mapping, optional
        A component mapping for an unregistered family.
    norms : dict, optional
        ``{(layer, component): input-feature norms}`` (:func:`toolkit.analysis.wanda.input_feature_norms`):
        Wanda pruning (:func:`toolkit.analysis.wanda.wanda_prune_`) instead of magnitude pruning.

    Yields
    ------
    dict
        ``{(layer, component): zeroed entries}``.

    Raises
    ------
    SelectionError
        A cell of the allocation the model has no matrix for, or whose matrix is a slice of a fused module
        (``c_attn`` of GPT-2): pruning here takes whole ``nn.Linear`` weights.
    """
    plan = plan_hooks(model, Selection(), mapping=mapping)
    cells = {}
    for layer in allocation.layer.values:
        for comp in allocation.component.values:
            s = float(allocation.sel(layer=layer, component=comp))
            if not math.isfinite(s):
                continue
            piece = plan.pieces.get((int(layer), str(comp)))
            if piece is None:
                raise SelectionError("allocation", f"layer {layer} {comp}", "the model has no such matrix")
            module = plan.adapter.find_module(model, piece)
            if piece.out_index is not None or not isinstance(module, torch.nn.Linear):
                raise SelectionError("allocation", f"layer {layer} {comp}", "its matrix is not a whole nn.Linear "
                                     "weight (a fused or transposed module); magnitude pruning here takes those only")
            cells[int(layer), str(comp)] = (module.weight, s)
    saved = {key: weight.detach().clone() for key, (weight, _) in cells.items()}
    try:
        with torch.no_grad():
            zeroed = {key: (magnitude_prune_(weight.data, s) if norms is None else
                            wanda_prune_(weight.data, s, norms[key])) for key, (weight, s) in cells.items()}
        yield zeroed
    finally:
        with torch.no_grad():
            for key, (weight, _) in cells.items():
                weight.data.copy_(saved[key])
