"""Router statistics of ``activation_stats`` on tiny MoE models, against transformers' own router logits.

The reference runs each text alone (no padding) with ``output_router_logits=True``
and derives, from the logits transformers returns, which experts each token
selects (the top-k of the softmax, as ``Qwen2MoeTopKRouter`` / ``OlmoeTopKRouter``
select) and the entropy of the softmax.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import toolkit
from toolkit.testing import write_tiny_moe_checkpoint

TEXTS = [[5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15], [20, 21, 22, 23, 24]]


def _reference(folder, moe_layers):
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    k, n_exp = model.config.num_experts_per_tok, model.config.num_experts
    counts = {layer: np.zeros(n_exp) for layer in moe_layers}
    entropy = dict.fromkeys(moe_layers, 0.0)
    tokens = 0
    for ids in TEXTS:
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_router_logits=True)
        tokens += len(ids)
        for layer, logits in zip(moe_layers, out.router_logits, strict=True):
            p = torch.softmax(logits.double(), dim=-1)
            chosen = torch.topk(p, k, dim=-1).indices
            counts[layer] += np.bincount(chosen.reshape(-1).numpy(), minlength=n_exp)
            entropy[layer] += float(-(p * p.log()).sum())
    return {layer: c / tokens for layer, c in counts.items()}, {layer: h / tokens for layer, h in entropy.items()}


@pytest.mark.parametrize("family, moe_layers", [("qwen2_moe", [1, 2]), ("olmoe", [0, 1, 2])])
def test_router_statistics_match_transformers_router_logits(family, moe_layers, tmp_path):
    folder = write_tiny_moe_checkpoint(tmp_path / family, family)
    ds = toolkit.activation_stats(folder, texts=TEXTS, batch_size=2, progress=False, attention=False,
                                  gradients=False)
    fractions, entropies = _reference(folder, moe_layers)
    assert ds.router_token_fraction.dims == ("layer", "expert") and ds.sizes["expert"] == 4
    for layer in range(3):
        got = ds.router_token_fraction.sel(layer=layer).values
        if layer not in moe_layers:
            assert np.isnan(got).all() and np.isnan(ds.router_entropy.sel(layer=layer))
            continue
        np.testing.assert_allclose(got, fractions[layer], atol=1e-12)
        assert got.sum() == pytest.approx(2.0)  # num_experts_per_tok
        assert ds.router_entropy.sel(layer=layer).item() == pytest.approx(entropies[layer], rel=1e-5)
    assert ds.router_entropy.attrs["units"] == "nat"
    assert np.isfinite(ds.output_rms.sel(layer=moe_layers[0], component="mlp.router"))
    part = toolkit.activation_stats(folder, texts=TEXTS, batch_size=2, progress=False, attention=False,
                                    gradients=False, components="mlp.router", experts=[1, 3], layers=[-1])
    assert part.expert.values.tolist() == [1, 3] and part.layer.values.tolist() == [2]
    np.testing.assert_allclose(part.router_token_fraction.sel(layer=2).values, fractions[2][[1, 3]], atol=1e-12)
