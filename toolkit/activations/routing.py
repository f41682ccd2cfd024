"""Router statistics of a mixture-of-experts model: which experts the tokens go to, and how sure the router is.

The router of every MoE family ``transformers`` 5 implements (Mixtral,
Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2/V3, gpt-oss) is a module called on
the flattened hidden states that returns ``(router_logits, routing_weights,
selected_experts)`` with logits (tokens, E) and the selected experts
(tokens, k) (``MixtralSparseMoeBlock.forward``: ``_, top_k_weights,
top_k_index = self.gate(hidden_states)``; Llama 4's ``Llama4Router``
returns ``(router_scores, router_logits)`` and selects ``topk(router_logits,
top_k)``). A forward hook on it gives, over
the non-padding tokens of every text:

- ``router_token_fraction`` (layer, expert): the fraction of tokens whose
  ``k`` selected experts include the expert (summed over experts it is k);
- ``router_entropy`` (layer): the mean over tokens of the Shannon entropy
  H = −Σ_e p_e ln p_e (nats) of p = softmax(router logits), the router's
  distribution over all E experts (DeepSeek-V3 and Llama 4 select by
  sigmoid scores; this is the entropy of the softmax of the same logits).
"""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from toolkit.activations.hooks import LayerHooks, token_rows
from toolkit.errors import ToolkitError

__all__ = ["RouterRecorder", "router_variables"]


class RouterRecorder(LayerHooks):
    """Forward hooks on the router module of each MoE layer; a context manager.

    Parameters
    ----------
    routers : dict of int -> nn.Module
        Layer -> its router module.
    batch : callable
        ``batch() -> Batch``, the batch running now.
    num_experts : int

    Attributes
    ----------
    counts : dict of int -> LongTensor (num_experts,)
        Tokens that selected each expert, per layer.
    tokens : dict of int -> int
        Non-padding tokens routed, per layer.
    entropy_sum : dict of int -> float
        Sum over tokens of the router entropy (nats), per layer.
    """

    def __init__(self, routers: dict, batch, num_experts: int):
        self._routers = routers
        self._batch = batch
        self.num_experts = int(num_experts)
        self.counts = {layer: torch.zeros(self.num_experts, dtype=torch.long) for layer in routers}
        self.tokens = dict.fromkeys(routers, 0)
        self.entropy_sum = dict.fromkeys(routers, 0.0)
        self._handles = []

    def _hook(self, layer: int):
        def hook(module, args, output):
            where = f"layer {layer} mlp.router"
            batch = self._batch()
            with torch.no_grad():
                logits, chosen = _routing(module, output, where)
                logits = token_rows(logits.detach(), batch, where).float()
                chosen = token_rows(chosen.detach(), batch, where)
                p = torch.softmax(logits, dim=-1)
                self.entropy_sum[layer] += float(torch.special.entr(p).sum(-1).double().sum())
                self.counts[layer] += torch.bincount(chosen.reshape(-1).long().cpu(), minlength=self.num_experts)
                self.tokens[layer] += int(logits.shape[0])
            return None

        return hook

    def _hooked_modules(self) -> dict:
        return self._routers


def _routing(module, output, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(router logits (tokens, E), selected experts (tokens, k))`` from a router module's output."""
    if isinstance(output, (tuple, list)) and len(output) == 3:
        return output[0], output[2]
    if isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(getattr(module, "top_k", None), int):
        # Llama4Router.forward: (router_scores, router_logits), experts torch.topk(router_logits, top_k, dim=1)
        return output[1], torch.topk(output[1], module.top_k, dim=1).indices
    raise ToolkitError(f"{where}: {type(module).__name__} returned {type(output).__name__}, not "
                       "(router_logits, routing_weights, selected_experts) as transformers' MoE routers do")


def router_variables(recorder: RouterRecorder, num_layers: int) -> dict:
    """``{name: DataArray}`` of the router statistics, NaN for layers without a router.

    Returns
    -------
    dict
        ``router_token_fraction`` (layer, expert) float64 and
        ``router_entropy`` (layer) float64 (nats), with attrs.
    """
    frac = np.full((num_layers, recorder.num_experts), np.nan)
    entropy = np.full(num_layers, np.nan)
    for layer, n in recorder.tokens.items():
        if n:
            frac[layer] = recorder.counts[layer].double().numpy() / n
            entropy[layer] = recorder.entropy_sum[layer] / n
    return {
        "router_token_fraction": xr.DataArray(frac, dims=("layer", "expert"), attrs={
            "long_name": "fraction of tokens routed to the expert", "units": "1",
            "description": "#{tokens whose top-k selected experts include e} / #tokens (non-padding tokens of "
                           "every text); summed over experts it is num_experts_per_tok",
            "reference": "Fedus et al. 2022 (Switch Transformers), expert load"}),
        "router_entropy": xr.DataArray(entropy, dims=("layer",), attrs={
            "long_name": "router entropy", "units": "nat",
            "description": "mean over tokens of -sum_e p_e ln p_e, p = softmax(router logits) over all experts",
            "reference": "Shannon 1948; convention"}),
    }
