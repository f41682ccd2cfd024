"""Quantised mixture-of-experts checkpoints: gpt-oss with MXFP4 expert stacks, DeepSeek-V3 in FP8 blocks.

The experts are quantised here (:func:`_quant_writers.pack_mxfp4`, written
from the OCP MX spec; :func:`_quant_writers.write_fp8`) and every expert's
Frobenius norm is checked against transformers' own dequantisation
(``convert_moe_packed_tensors``, ``from_pretrained`` of the MXFP4 folder,
``_dequantize_fp8_weight``), cut as its experts module cuts it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import toolkit
from _quant_writers import write_fp8, write_mxfp4_experts
from toolkit.testing import write_tiny_moe_checkpoint

E = 4
METRICS = ["frobenius_norm", "stable_rank"]
STACKS = ("gate_up_proj", "down_proj")


@pytest.fixture(scope="module")
def gpt_oss_mxfp4(tmp_path_factory):
    root = tmp_path_factory.mktemp("oss")  # intermediate 32: MXFP4 blocks of 32 along each expert's input
    original = write_tiny_moe_checkpoint(root / "bf16", "gpt_oss", num_layers=2, intermediate_size=32)
    return write_mxfp4_experts(root / "mxfp4", original)


def _cut(layer: int, w: dict) -> dict:
    """``{(layer, component): (E, out, in)}`` of a layer's ``{stack: (E, in, out)}``, cut as ``GptOssExperts``
    cuts them (x @ W[e]; gate_up[..., ::2] is the gate, [..., 1::2] the up)."""
    return {(layer, "mlp.gate"): w["gate_up_proj"][..., ::2].transpose(1, 2),
            (layer, "mlp.up"): w["gate_up_proj"][..., 1::2].transpose(1, 2),
            (layer, "mlp.down"): w["down_proj"].transpose(1, 2)}


def _dequantised(folder) -> dict:
    """:func:`_cut` of each layer's stacks as transformers' ``convert_moe_packed_tensors`` dequantises them."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    stored = load_file(str(folder / "model.safetensors"))
    out = {}
    for layer in range(2):
        out.update(_cut(layer, {s: convert_moe_packed_tensors(stored[f"model.layers.{layer}.mlp.experts.{s}_blocks"],
                                                              stored[f"model.layers.{layer}.mlp.experts.{s}_scales"],
                                                              dtype=torch.float32) for s in STACKS}))
    return out


def test_mxfp4_experts_give_the_expert_grid_transformers_dequantises(gpt_oss_mxfp4):
    import transformers

    ds = toolkit.weight_stats(gpt_oss_mxfp4, METRICS, progress=False, cache=False)
    assert ds.sizes["expert"] == E and list(ds.moe_layers) == [0, 1]
    assert ds.attrs["quantization"].startswith("mxfp4")
    assert not np.isnan(ds.frobenius_norm.sel(component=[*toolkit.COMPONENTS, "mlp.router"])).any()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(gpt_oss_mxfp4).model.layers  # dequantised on CPU
    for (layer, comp), stack in _dequantised(gpt_oss_mxfp4).items():
        got = ds.frobenius_norm_per_expert.sel(layer=layer, component=comp).values
        np.testing.assert_allclose(got, torch.linalg.matrix_norm(stack.double()).numpy(), rtol=1e-6)
        assert ds.frobenius_norm.sel(layer=layer, component=comp).item() == pytest.approx(got.mean(), rel=1e-12)
        assert (got > 0).all()
    experts = loaded[1].mlp.experts
    np.testing.assert_allclose(ds.frobenius_norm_per_expert.sel(layer=1, component="mlp.down").values,
                               torch.linalg.matrix_norm(experts.down_proj.detach().double()).numpy(), rtol=1e-6)
    np.testing.assert_allclose(ds.frobenius_norm_per_expert.sel(layer=1, component="mlp.up").values,
                               torch.linalg.matrix_norm(experts.gate_up_proj.detach()[..., 1::2].double()).numpy(),
                               rtol=1e-6)


def test_mxfp4_stacks_are_read_one_expert_at_a_time(gpt_oss_mxfp4, monkeypatch):
    """One unit per expert, reading only that expert's blocks and scales, equal to the whole-stack dequantisation."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    from toolkit.collect.plan import plan_pieces
    from toolkit.sources import safetensors_

    rows = []
    read = safetensors_._read_tensor

    def spy(path, name, entry, start=None, stop=None):
        rows.append((name, start, stop))
        return read(path, name, entry, start, stop)

    monkeypatch.setattr(safetensors_, "_read_tensor", spy)
    plan = plan_pieces(gpt_oss_mxfp4, cache=False)
    units = {t.record.name: t for t in plan.tensors if "mlp.experts." in t.record.name}
    assert len(units) == 2 * len(STACKS) * E and all(len(t.record.shape) == 2 for t in units.values())
    stored = load_file(str(gpt_oss_mxfp4 / "model.safetensors"))
    name = "model.layers.1.mlp.experts.gate_up_proj"
    whole = convert_moe_packed_tensors(stored[f"{name}_blocks"], stored[f"{name}_scales"], dtype=torch.float32)
    for e in range(E):
        unit = units[f"{name}#expert={e}"]
        got = unit.record.read()
        assert unit.record.shape == (32, 64) and torch.equal(got, whole[e])
        assert [p.component for p in unit.pieces] == ["mlp.up", "mlp.gate"]
        assert torch.equal(unit.pieces[1].extract(got), whole[e][:, ::2].T)
    parts = [r for r in rows if r[0].endswith(("_blocks", "_scales"))]
    assert sorted(parts) == sorted((f"{name}_{p}", e, e + 1) for p in ("blocks", "scales") for e in range(E))


def test_mxfp4_cached_plan_and_cells_give_the_same_grid(gpt_oss_mxfp4, cache):
    fresh = toolkit.weight_stats(gpt_oss_mxfp4, ["frobenius_norm"], progress=False, cache=False)
    toolkit.weight_stats(gpt_oss_mxfp4, ["frobenius_norm"], progress=False)
    again = toolkit.weight_stats(gpt_oss_mxfp4, ["frobenius_norm"], progress=False)  # plan and cells cached
    np.testing.assert_array_equal(again.frobenius_norm_per_expert.values, fresh.frobenius_norm_per_expert.values)


def test_compare_with_the_original_gives_the_quantisation_error_per_expert(gpt_oss_mxfp4):
    """compare(original, MXFP4 release): ||deq - W|| / ||W|| per expert; attention, stored unquantised, unchanged."""
    original = gpt_oss_mxfp4.parent / "bf16"
    ds = toolkit.compare(original, gpt_oss_mxfp4, ["relative_change"], progress=False, cache=False)
    w = load_file(str(original / "model.safetensors"))
    stored = {}
    for layer in range(2):
        stored.update(_cut(layer, {s: w[f"model.layers.{layer}.mlp.experts.{s}"] for s in STACKS}))
    for key, deq in _dequantised(gpt_oss_mxfp4).items():
        layer, comp = key
        want = (torch.linalg.matrix_norm((deq - stored[key]).double()) / torch.linalg.matrix_norm(
            stored[key].double())).numpy()
        np.testing.assert_allclose(ds.relative_change_per_expert.sel(layer=layer, component=comp).values, want,
                                   rtol=1e-6)
        assert 0.05 < want.min() and want.max() < 0.2  # a 4-bit error, not zero, not noise
    assert (ds.relative_change.sel(component=["attn.q", "attn.k", "attn.v", "attn.o", "mlp.router"]) == 0).all()


def _deepseek_quantized(name: str) -> bool:
    """The 2-D projection weights DeepSeek-V3's FP8 release stores in float8 (not the router, norms, embeddings)."""
    return name.endswith("_proj.weight") or name.endswith("_proj_with_mqa.weight")


def test_deepseek_v3_fp8_experts_match_transformers_dequantisation(tmp_path):
    """DeepSeek-V3 FP8: 2-D experts with 8x16 weight_scale_inv blocks (partial edges), MLA and shared experts."""
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

    original = write_tiny_moe_checkpoint(tmp_path / "bf16", "deepseek_v3", num_layers=2)
    path, parts = write_fp8(tmp_path / "fp8", original, block=(8, 16), quantized=_deepseek_quantized)
    assert "model.layers.1.mlp.experts.3.down_proj.weight" in parts and "model.layers.0.self_attn.kv_b_proj.weight" \
        in parts and json.loads((path / "config.json").read_text())["quantization_config"]["quant_method"] == "fp8"
    ds = toolkit.weight_stats(path, METRICS, progress=False, cache=False)
    assert ds.sizes["expert"] == E and list(ds.moe_layers) == [1]
    assert ds.attrs["quantization"] == "fp8 e4m3, 8x16 blocks"

    def norm(name):
        q, scale = parts[name]
        return torch.linalg.matrix_norm(_dequantize_fp8_weight(q, scale, [8, 16], torch.float32).double()).item()

    for comp, proj in (("mlp.gate", "gate_proj"), ("mlp.up", "up_proj"), ("mlp.down", "down_proj")):
        want = [norm(f"model.layers.1.mlp.experts.{e}.{proj}.weight") for e in range(E)]
        np.testing.assert_allclose(ds.frobenius_norm_per_expert.sel(layer=1, component=comp).values, want, rtol=1e-6)
        assert ds.frobenius_norm.sel(layer=0, component=comp).item() == pytest.approx(
            norm(f"model.layers.0.mlp.{proj}.weight"), rel=1e-6)  # the dense first layer
        assert ds.frobenius_norm.sel(layer=1, component=f"mlp.shared.{comp[4:]}").item() == pytest.approx(
            norm(f"model.layers.1.mlp.shared_experts.{proj}.weight"), rel=1e-6)
    for comp, proj in (("attn.q_a", "q_a_proj"), ("attn.kv_a", "kv_a_proj_with_mqa"), ("attn.o", "o_proj")):
        assert ds.frobenius_norm.sel(layer=1, component=comp).item() == pytest.approx(
            norm(f"model.layers.1.self_attn.{proj}.weight"), rel=1e-6)
    assert not np.isnan(ds.frobenius_norm.sel(layer=1)).any()


def test_fp8_expert_stack_reads_one_expert_at_a_time(tmp_path):
    """A 3-D FP8 stack (E, R, C) with its (E, ⌈R/b⌉, ⌈C/b⌉) scale grid: each expert slice reads its own rows."""
    from safetensors.torch import save_file
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

    from toolkit.sources import open_source
    from toolkit.sources.expert_slices import expert_slice, sliceable

    gen = torch.Generator().manual_seed(0)
    q = (torch.randn(3, 20, 24, generator=gen) * 50).to(torch.float8_e4m3fn)
    scale = torch.rand(3, 3, 2, generator=gen) + 0.01
    name = "model.layers.0.mlp.experts.down_proj"
    save_file({f"{name}.weight": q, f"{name}.weight_scale_inv": scale}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [8, 16]}}))
    record = {r.name: r for r in open_source(tmp_path).tensors()}[f"{name}.weight"]
    assert sliceable(record)
    for e in range(3):
        want = _dequantize_fp8_weight(q[e], scale[e], [8, 16], torch.float32)
        torch.testing.assert_close(expert_slice(record, e).read(), want, rtol=0, atol=0)
    torch.testing.assert_close(record._row_reader(1, 3), record.read()[1:3], rtol=0, atol=0)
