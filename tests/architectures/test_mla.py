"""Multi-head latent attention (DeepSeek-V2 / V3): the split of ``kv_b_proj`` by the module's own arithmetic.

``attn.k`` and ``attn.v`` are rows of ``kv_b_proj`` cut per head; the check
runs the loaded attention module's own ``expand_kv`` (latent -> per-head key
and value) on a random latent and compares with the toolkit's matrices
applied to the same latent, so a wrong head layout or a k/v swap fails.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import toolkit
from toolkit.testing import write_tiny_moe_checkpoint

METRICS = ["frobenius_norm"]


def _matrices(folder) -> dict:
    from toolkit.collect.plan import plan_pieces

    plan = plan_pieces(folder, cache=False)
    return {p.key: p.extract(t.record.read()) for t in plan.tensors for p in t.pieces}


def _check_split(folder, layer: int) -> None:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    attn = model.model.layers[layer].self_attn
    mats = _matrices(folder)
    t, heads = 5, attn.config.num_attention_heads
    latent = torch.randn(1, 1, t, attn.kv_lora_rank, generator=torch.Generator().manual_seed(0))
    k_rot = torch.zeros(1, 1, t, attn.qk_rope_head_dim)
    with torch.no_grad():
        keys, values = attn.expand_kv(latent, k_rot)  # (1, heads, t, nope + rope), (1, heads, t, v)
    ours_k = (latent[0, 0] @ mats[(layer, "attn.k")].T).view(t, heads, attn.qk_nope_head_dim).transpose(0, 1)
    ours_v = (latent[0, 0] @ mats[(layer, "attn.v")].T).view(t, heads, attn.v_head_dim).transpose(0, 1)
    torch.testing.assert_close(ours_k, keys[0, ..., : attn.qk_nope_head_dim], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ours_v, values[0], rtol=1e-5, atol=1e-7)
    assert mats[(layer, "attn.kv_a")].shape == (attn.kv_lora_rank + attn.qk_rope_head_dim, attn.hidden_size)
    torch.testing.assert_close(mats[(layer, "attn.o")], attn.o_proj.weight)
    q = attn.q_proj if attn.q_lora_rank is None else attn.q_b_proj
    torch.testing.assert_close(mats[(layer, "attn.q")], q.weight)
    if attn.q_lora_rank is not None:
        torch.testing.assert_close(mats[(layer, "attn.q_a")], attn.q_a_proj.weight)


def test_deepseek_v3_kv_b_split_matches_the_attention_module(tmp_path):
    folder = write_tiny_moe_checkpoint(tmp_path / "v3", "deepseek_v3")
    for layer in (0, 2):
        _check_split(folder, layer)
    ds = toolkit.weight_stats(folder, METRICS, progress=False, cache=False)
    assert list(ds.component.values) == [*toolkit.COMPONENTS, "attn.q_a", "attn.kv_a", "mlp.router",
                                         "mlp.shared.up", "mlp.shared.down", "mlp.shared.gate"]
    assert ds.n_rows.sel(layer=0, component="attn.k").item() == 4 * 8
    assert ds.n_rows.sel(layer=0, component="attn.v").item() == 4 * 6


def test_deepseek_v2_lite_style_without_query_compression(tmp_path):
    """``q_lora_rank: null``: the query is ``q_proj`` and there is no ``attn.q_a`` column."""
    import transformers

    cfg = transformers.AutoConfig.for_model(
        "deepseek_v2", vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=16, n_shared_experts=2, first_k_dense_replace=1, q_lora_rank=None,
        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_group=1, topk_group=1)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    _check_split(tmp_path, 1)
    ds = toolkit.weight_stats(tmp_path, METRICS, progress=False, cache=False)
    assert "attn.q_a" not in ds.component.values and "attn.kv_a" in ds.component.values
    assert list(ds.moe_layers) == [1]


def test_multi_token_prediction_layers_get_no_cells(tmp_path):
    """Hub DeepSeek-V3 checkpoints hold ``model.layers.{num_hidden_layers}`` (MTP), which transformers ignores."""
    from safetensors.torch import load_file, save_file

    folder = write_tiny_moe_checkpoint(tmp_path / "v3", "deepseek_v3")
    state = load_file(folder / "model.safetensors")
    state.update({k.replace("layers.2.", "layers.3."): v.clone() for k, v in state.items()
                  if k.startswith("model.layers.2.")})
    state["model.layers.3.eh_proj.weight"] = torch.zeros(32, 64)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["num_nextn_predict_layers"] == 1
    ds = toolkit.weight_stats(folder, METRICS, progress=False, cache=False)
    assert ds.sizes["layer"] == 3
    (folder / "config.json").write_text(json.dumps({**cfg, "num_nextn_predict_layers": 0}))
    with pytest.raises(toolkit.errors.UnmappedParametersError, match="layers beyond the config: 3"):
        toolkit.weight_stats(folder, METRICS, progress=False, cache=False)
    assert np.isfinite(ds.frobenius_norm.sel(component="attn.kv_a")).all()


def test_activation_stats_split_latent_keys_and_values_as_the_module_does(tmp_path):
    """``output_rms`` of ``attn.k`` / ``attn.v`` equals the RMS of the keys' no-rope part and of the values
    that the attention module's own ``expand_kv`` makes from the same latent (captured in a forward)."""
    import transformers

    folder = write_tiny_moe_checkpoint(tmp_path / "v3", "deepseek_v3")
    ids = [5, 6, 7, 8, 9, 10]
    ds = toolkit.activation_stats(folder, texts=[ids], progress=False, attention=False, gradients=False)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    attn = model.model.layers[1].self_attn
    seen = {}
    handle = attn.kv_b_proj.register_forward_pre_hook(lambda m, args: seen.setdefault("latent", args[0].detach()))
    with torch.no_grad():
        model(torch.tensor([ids]))
        handle.remove()
        latent = seen["latent"]  # (1, 1, tokens, kv_lora_rank)
        keys, values = attn.expand_kv(latent, torch.zeros(1, 1, latent.shape[2], attn.qk_rope_head_dim))
    k_nope = keys[..., : attn.qk_nope_head_dim]
    for comp, want in (("attn.k", k_nope), ("attn.v", values)):
        assert ds.output_rms.sel(layer=1, component=comp).item() == pytest.approx(
            want.double().pow(2).mean().sqrt().item(), rel=1e-5)
    assert np.isfinite(ds.router_entropy.sel(layer=1))
