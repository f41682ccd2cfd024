"""Wanda pruning: weights scored by their magnitude times the norm of their input feature.

Wanda (Sun, Liu, Bair & Kolter, "A Simple and Effective Pruning Approach for Large Language Models", ICLR 2024,
arXiv:2306.11695) scores entry :math:`W_{ij}` of a linear layer by :math:`|W_{ij}| \\, \\|X_j\\|_2`, with
:math:`\\|X_j\\|_2` the norm of input feature :math:`j` over the tokens of a calibration text, and zeroes, in each
output row, the ``int(s * in_features)`` entries of lowest score (the authors' ``lib/prune.py``, ``prune_wanda``:
``W_metric = |W| * sqrt(scaler_row)``, sorted along the row, the first ``int(W.shape[1] * sparsity_ratio)``
indices zeroed). It is the main pruner of AlphaPruning (Lu et al. 2024, ``prune_wanda_ww``), which hands it a
sparsity per layer. The feature norms are measured here with forward pre-hooks on each component module, on the
calibration text in windows, as :func:`toolkit.analysis.held_out.perplexity` reads text.
"""

from __future__ import annotations

import torch

from toolkit.activations.hook_plan import plan_hooks
from toolkit.collect.plan.selection import Selection

__all__ = ["input_feature_norms", "wanda_prune_"]


@torch.no_grad()
def input_feature_norms(loaded, text: str, *, max_tokens: int | None = 512, window: int = 256,
                        mapping=None) -> dict[tuple[int, str], torch.Tensor]:
    r"""The norm :math:`\|X_j\|_2` of every input feature of every component ``nn.Linear`` of ``loaded.model``.

    Parameters
    ----------
    loaded : toolkit.activations.Loaded
        A model and its tokenizer.
    text : str
        The calibration text (tokenised without special tokens, cut to ``max_tokens``, run in windows of
        ``window`` tokens, each from no context).
    max_tokens : int or None, default 512
    window : int, default 256
    mapping : toolkit.Mapping, optional

    Returns
    -------
    dict
        ``{(layer, component): tensor (in_features,), float64}``, on the CPU.
    """
    model = loaded.model
    plan = plan_hooks(model, Selection(), mapping=mapping)
    sums: dict[tuple[int, str], torch.Tensor] = {}
    handles = []
    for key, piece in plan.pieces.items():
        module = plan.adapter.find_module(model, piece)
        if not isinstance(module, torch.nn.Linear):
            continue

        def hook(_module, args, key=key):
            x = args[0].detach().reshape(-1, args[0].shape[-1]).to(torch.float64)
            sums[key] = sums.get(key, 0) + x.square().sum(0).cpu()

        handles.append(module.register_forward_pre_hook(hook))
    ids = loaded.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"][0]
    ids = ids if max_tokens is None else ids[:max_tokens]
    device = next(model.parameters()).device
    try:
        for start in range(0, len(ids), window):
            model(input_ids=ids[start:start + window].unsqueeze(0).to(device))
    finally:
        for h in handles:
            h.remove()
    return {key: s.sqrt() for key, s in sums.items()}


def wanda_prune_(weight: torch.Tensor, sparsity: float, norms: torch.Tensor) -> int:
    """Zero, in each row of ``weight``, its ``int(sparsity * in_features)`` entries of lowest ``|W_ij| * norms[j]``.

    Parameters
    ----------
    weight : torch.Tensor, shape (out_features, in_features)
        Written in place (call under ``torch.no_grad()`` for a parameter).
    sparsity : float, in [0, 1]
    norms : torch.Tensor, shape (in_features,)
        :func:`input_feature_norms` of the matrix.

    Returns
    -------
    int
        Entries set to zero.

    Raises
    ------
    ValueError
        ``norms`` of another length than the rows.
    """
    if weight.ndim != 2 or norms.shape != (weight.shape[1],):
        raise ValueError(f"Wanda needs a 2-D weight and one norm per column: {tuple(weight.shape)}, "
                         f"{tuple(norms.shape)}")
    k = int(weight.shape[1] * float(sparsity))
    if k <= 0:
        return 0
    score = weight.abs().to(torch.float64) * norms.to(weight.device, torch.float64)[None, :]
    idx = torch.sort(score, dim=-1, stable=True).indices[:, :k]
    weight.scatter_(1, idx, 0)
    return k * weight.shape[0]
