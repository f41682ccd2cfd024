"""Quantised safetensors sources, each checked against an independent dequantisation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import toolkit
from _quant_writers import tiny_original, write_compressed, write_fp8, write_int
from toolkit.errors import UnsupportedQuantizationError
from toolkit.sources import open_source


def _records(path) -> dict:
    return {r.name: r for r in open_source(path).tensors()}


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return tiny_original(tmp_path_factory.mktemp("orig") / "llama")[0]


def test_fp8_blocks_match_transformers(original, tmp_path):
    """W = fp8 * scale_inv per 16x24 block (partial edge blocks), as transformers' own FP8 dequantisation."""
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

    path, parts = write_fp8(tmp_path / "fp8", original)
    records = _records(path)
    assert not any(n.endswith("weight_scale_inv") for n in records)
    for name, (q, scale) in parts.items():
        want = _dequantize_fp8_weight(q, scale, [16, 24], torch.float32)
        got = records[name].read()
        assert got.dtype == torch.float32 and tuple(records[name].shape) == tuple(q.shape)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    ds = toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False, cache=False)
    assert ds.attrs["quantization"] == "fp8 e4m3, 16x24 blocks"
    q, scale = parts["model.layers.1.mlp.down_proj.weight"]
    np.testing.assert_allclose(float(ds.frobenius_norm.sel(layer=1, component="mlp.down")),
                               float(torch.linalg.norm(_dequantize_fp8_weight(q, scale, [16, 24], torch.float32))),
                               rtol=1e-6)


def test_quantization_error_heatmap(original, tmp_path):
    """compare(quantized, original): the per-cell quantisation error ||W - deq||_F / ||deq||_F, as a heatmap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path, parts = write_fp8(tmp_path / "fp8", original)
    ds = toolkit.compare(path, original, metrics=["relative_change"], progress=False, cache=False)
    from safetensors.torch import load_file
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

    w = load_file(str(original / "model.safetensors"))
    for name, (q, scale) in parts.items():
        layer, comp = int(name.split(".")[2]), name.split(".")[-2]
        component = {"q_proj": "attn.q", "k_proj": "attn.k", "v_proj": "attn.v", "o_proj": "attn.o",
                     "up_proj": "mlp.up", "down_proj": "mlp.down", "gate_proj": "mlp.gate"}[comp]
        deq = _dequantize_fp8_weight(q, scale, [16, 24], torch.float32).double()
        want = float(torch.linalg.norm(w[name].double() - deq) / torch.linalg.norm(deq))
        got = float(ds.relative_change.sel(layer=layer, component=component))
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert 0 < got < 0.1  # e4m3 keeps 3 mantissa bits: a few percent
    assert ds.attrs["base_quantization"] == "fp8 e4m3, 16x24 blocks" and "target_quantization" not in ds.attrs
    ax = toolkit.plot.heatmap(ds, "relative_change")
    drawn = np.asarray(ax.collections[0].get_array()).reshape(ds.sizes["layer"], ds.sizes["component"])
    np.testing.assert_array_equal(drawn, ds.relative_change.values)  # the cells drawn are the errors computed
    plt.close(ax.figure)


@pytest.mark.parametrize("method, kw", [
    ("gptq", dict(bits=4)), ("gptq", dict(bits=4, act_order=True)), ("gptq", dict(bits=8, v2=True)),
    ("gptq", dict(bits=2, group=32)), ("awq", dict(bits=4)),
])
def test_int_formats_match_codes(original, tmp_path, method, kw):
    """GPTQ (v1 zeros - 1, v2, act-order g_idx, 2/4/8 bits) and AWQ GEMM: scale * (q - z) of the codes written."""
    path, expected = write_int(tmp_path / method, original, method, **kw)
    records = _records(path)
    assert not any(n.endswith(("qweight", "qzeros", "scales", "g_idx")) for n in records)
    for name, want in expected.items():
        got = records[name].read()
        assert tuple(got.shape) == tuple(want.shape) == tuple(records[name].shape)
        torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)
    ds = toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False, cache=False)
    assert ds.attrs["quantization"].startswith(f"{method} int{kw['bits']}")


ORACLE = Path(__file__).resolve().parents[1] / "data" / "quant_oracle"


@pytest.mark.parametrize("case", sorted(p.name for p in ORACLE.iterdir()))
def test_int_formats_match_their_own_libraries(case):
    """GPTQ and AWQ folders packed by AutoGPTQ's and AutoAWQ's own code, with those libraries' own unpacking as
    the expected weights (``benchmarks/quant_golden.py``, committed in ``tests/data/quant_oracle``)."""
    from safetensors.torch import load_file

    folder = ORACLE / case
    provenance = json.loads((folder / "provenance.json").read_text())
    expected = load_file(str(folder / "expected.safetensors"))
    records = _records(folder)
    assert len(expected) == 7 and not any(n.endswith(("qweight", "qzeros", "scales", "g_idx")) for n in records)
    for name, want in expected.items():
        got = records[name].read()
        assert got.dtype == torch.float32 and tuple(got.shape) == tuple(want.shape) == tuple(records[name].shape)
        torch.testing.assert_close(got, want, rtol=0, atol=0)  # s (q - z) with float16 s: exact in float32
    ds = toolkit.weight_stats(folder, metrics=["frobenius_norm"], progress=False, cache=False)
    assert ds.attrs["quantization"].startswith(f"{provenance['method']} int{provenance['bits']}")
    want = float(torch.linalg.norm(expected["model.layers.0.mlp.down_proj.weight"].double()))
    assert float(ds.frobenius_norm.sel(layer=0, component="mlp.down")) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("fmt, weights", [
    ("float-quantized", dict(num_bits=8, type="float", strategy="channel", symmetric=True)),
    ("float-quantized", dict(num_bits=8, type="float", strategy="tensor", symmetric=True)),
    ("float-quantized", dict(num_bits=8, type="float", strategy="block", block_structure=[16, 24], symmetric=True)),
    ("pack-quantized", dict(num_bits=4, type="int", strategy="group", group_size=16, symmetric=True)),
    ("pack-quantized", dict(num_bits=4, type="int", strategy="group", group_size=16, symmetric=False)),
    ("pack-quantized", dict(num_bits=8, type="int", strategy="channel", symmetric=True)),
])
def test_compressed_tensors_match_library(original, tmp_path, fmt, weights):
    """compressed-tensors: the values its own decompress() gives for what its compress() wrote."""
    path, expected = write_compressed(tmp_path / "ct", original, weights, fmt)
    records = _records(path)
    assert not any(n.endswith(("weight_packed", "weight_scale", "weight_shape")) for n in records)
    for name, want in expected.items():
        torch.testing.assert_close(records[name].read(), want.to(torch.float32), rtol=1e-6, atol=1e-7)
    assert fmt in toolkit.weight_stats(path, metrics=["rms"], progress=False, cache=False).attrs["quantization"]


def test_mxfp4_experts_match_transformers(tmp_path):
    """gpt-oss MXFP4 experts: the (E, in, out) float tensor transformers' convert_moe_packed_tensors gives."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    gen = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (3, 8, 2, 16), generator=gen, dtype=torch.int64).to(torch.uint8)
    scales = torch.randint(118, 136, (3, 8, 2), generator=gen, dtype=torch.int64).to(torch.uint8)
    name = "model.layers.0.mlp.experts.gate_up_proj"
    save_file({f"{name}_blocks": blocks, f"{name}_scales": scales,
               "model.layers.0.mlp.experts.gate_up_proj_bias": torch.zeros(3, 8)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_oss", "quantization_config": {
        "quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}}))
    records = _records(tmp_path)
    want = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    assert tuple(records[name].shape) == tuple(want.shape) == (3, 64, 8)
    torch.testing.assert_close(records[name].read(), want, rtol=0, atol=0)
    assert f"{name}_bias" in records


@pytest.mark.parametrize("qc, match", [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "'bitsandbytes'.*Supported: awq, compressed-tensors"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 16}, "gptq bits=3"),
    ({"quant_method": "awq", "bits": 4, "group_size": 16, "version": "gemv"}, "gemv"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size"),
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {
        "g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                "group_size": 16}}}}, "nvfp4"),
])
def test_unknown_quantization_is_refused(original, tmp_path, qc, match):
    """An unknown quant_method or bit width: a typed error naming it and listing what is read."""
    cfg = json.loads((original / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "quantization_config": qc}))
    (tmp_path / "model.safetensors").write_bytes((original / "model.safetensors").read_bytes())
    with pytest.raises(UnsupportedQuantizationError, match=match) as e:
        open_source(tmp_path)
    assert "gptq" in e.value.supported or e.value.supported


def test_packed_tensor_without_its_parts_is_refused(original, tmp_path):
    """A qweight whose scales are missing is never read as weights."""
    path, _ = write_int(tmp_path / "gptq", original, "gptq")
    from safetensors.torch import load_file

    tensors = load_file(str(path / "model.safetensors"))
    del tensors["model.layers.0.self_attn.q_proj.scales"]
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(UnsupportedQuantizationError, match="lacks scales"):
        open_source(path)


def test_cached_plan_reads_the_same_values(original, tmp_path, monkeypatch):
    """A second run (plan and cells from the cache, then a fresh cell through the cached plan's source)
    gives the same dequantised numbers."""
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    path, _ = write_int(tmp_path / "gptq", original, "gptq")
    first = toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False)
    again = toolkit.weight_stats(path, metrics=["frobenius_norm", "spectral_norm"], progress=False)
    np.testing.assert_array_equal(first.frobenius_norm.values, again.frobenius_norm.values)
    fresh = toolkit.weight_stats(path, metrics=["spectral_norm"], progress=False, cache=False)
    np.testing.assert_array_equal(again.spectral_norm.values, fresh.spectral_norm.values)
    assert again.attrs["quantization"] == first.attrs["quantization"] == "gptq int4, group 16"
