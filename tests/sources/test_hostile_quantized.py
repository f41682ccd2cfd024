"""Hostile quantised checkpoints: configs and parts that do not fit, each a typed error naming the file and
the tensor, or the value the format's own reader gives; never a raw traceback, a wrong number, or an
allocation beyond the matrix.

References: transformers' FP8 and MXFP4 dequantisation, the codes the writers of :mod:`_quant_writers`
packed, compressed-tensors' own (de)compressors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import toolkit
from _bounded import run_bounded
from _edited import edited
from _quant_writers import E2M1_VALUES, tiny_original, write_compressed, write_fp8, write_int, write_mxfp4_experts
from toolkit.errors import QuantizedLayoutError, UnsupportedQuantizationError
from toolkit.sources import open_source

Q = "model.layers.0.self_attn.q_proj"


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return tiny_original(tmp_path_factory.mktemp("orig") / "llama")[0]


@pytest.fixture(scope="module")
def fp8(original, tmp_path_factory):
    return write_fp8(tmp_path_factory.mktemp("fp8") / "fp8", original)


@pytest.fixture(scope="module")
def gptq(original, tmp_path_factory):
    return write_int(tmp_path_factory.mktemp("gptq") / "gptq", original, "gptq")[0]


@pytest.fixture(scope="module")
def packed(original, tmp_path_factory):
    return write_compressed(tmp_path_factory.mktemp("ct") / "ct", original,
                            dict(num_bits=4, type="int", strategy="group", group_size=16, symmetric=True),
                            "pack-quantized")[0]


def variant(src, folder, *, qc=..., tensors=None):
    """A copy of checkpoint ``src`` with ``quantization_config`` replaced by ``qc`` (``None``: removed; a
    callable: applied to the old one) and its tensors edited in place by ``tensors(t)``."""
    def config(cfg):
        if qc is None:
            cfg.pop("quantization_config")
        elif qc is not ...:
            cfg["quantization_config"] = qc(cfg["quantization_config"]) if callable(qc) else qc
        return cfg

    return edited(src, folder, config, tensors)


def q_norm(path) -> float:
    ds = toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False, cache=False)
    return float(ds.frobenius_norm.sel(layer=0, component="attn.q"))


def refused(path, match):
    """The typed refusal of ``path`` by weight_stats, naming its weight file and the tensor."""
    with pytest.raises(QuantizedLayoutError, match=match) as e:
        toolkit.weight_stats(path, progress=False, cache=False)
    assert e.value.path.endswith("model.safetensors") and str(path) in e.value.path
    return e.value


# -- FP8 without a usable quantization_config (a silent 5502 for 0.64) -----------------------------------------------


@pytest.mark.parametrize("qc", [None, "null", "fp8", []], ids=["missing", "null", "str", "list"])
def test_fp8_weights_without_a_usable_quantization_config_are_refused(fp8, tmp_path, qc):
    """float8 weights beside their weight_scale_inv and no quantization_config mapping: refused, naming the
    tensor and its scale (they were read raw: attn.q Frobenius norm 5502.29 for transformers' 0.642451)."""
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

    path, parts = fp8
    q, scale = parts[f"{Q}.weight"]
    want = float(torch.linalg.norm(_dequantize_fp8_weight(q, scale, [16, 24], torch.float32).double()))
    np.testing.assert_allclose(q_norm(path), want, rtol=1e-6)  # with its config: transformers' value
    hostile = variant(path, tmp_path / "v", qc=None if qc is None else (lambda _, v=qc: None if v == "null" else v))
    err = refused(hostile, r"stored as float8_e4m3fn beside '.*weight_scale_inv', a quantised weight and its scale")
    assert ("no quantization_config" if qc in (None, "null") else "not a mapping") in str(err)
    assert err.tensor.endswith(".weight")


def test_compressed_float8_without_its_config_is_refused(original, tmp_path):
    path, _ = write_compressed(tmp_path / "ct8", original, dict(num_bits=8, type="float", strategy="channel",
                                                                  symmetric=True), "float-quantized")
    refused(variant(path, tmp_path / "v", qc=None), r"beside '.*\.weight_scale'")


# -- memory bounded by the matrix ------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [[2**30, 1], [2**24, 1], [1, 2**30]])
def test_fp8_block_larger_than_the_matrix_allocates_no_padded_grid(fp8, tmp_path, block):
    """A weight_block_size of 2^30 rows with its matching one-row scale grid is one block: the value is
    fp8 x scale per column (numpy), read within 512 MB (it allocated the padded 2^30-row grid: 128 GB)."""
    path, _ = fp8

    def scales(t):
        for name in [n for n in t if n.endswith("weight_scale_inv")]:
            rows, cols = t[name.removesuffix("_scale_inv")].shape
            grid = (math.ceil(rows / block[0]), math.ceil(cols / block[1]))
            t[name] = torch.linspace(0.5, 2.0, grid[0] * grid[1]).reshape(grid)

    hostile = variant(path, tmp_path / "v", qc=lambda qc: {**qc, "weight_block_size": block}, tensors=scales)
    t = load_file(str(hostile / "model.safetensors"))
    fp, s = t[f"{Q}.weight"].float().numpy().astype(np.float64), t[f"{Q}.weight_scale_inv"].numpy()
    want = float(np.linalg.norm(fp * (s[0][None, :] if block[0] > 1 else s[:, :1])))
    got = run_bounded(f"""
        rec = {{r.name: r for r in toolkit.open_source({str(hostile)!r}).tensors()}}[{Q + '.weight'!r}]
        result(float(torch.linalg.norm(rec.read().double())))
    """)
    assert "value" in got, got
    np.testing.assert_allclose(got["value"], want, rtol=1e-6)


def test_fp8_scale_grid_of_another_block_size_is_refused(fp8, tmp_path):
    path, _ = fp8
    hostile = variant(path, tmp_path / "v", qc=lambda qc: {**qc, "weight_block_size": [8, 24]})
    refused(hostile, r"in 8x24 blocks \(weight_block_size\) needs a scale grid \(4, \d\), the file has \(2, \d\)")


# -- GPTQ / AWQ ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("edit, match", [
    (lambda t: t.__setitem__(f"{Q}.scales", t[f"{Q}.scales"][0]), r"scales has shape \(32,\), not 2-D"),
    (lambda t: t.__setitem__(f"{Q}.g_idx", t[f"{Q}.g_idx"].reshape(2, -1)), r"g_idx has shape \(2, 16\), not \(32,\)"),
    (lambda t: t.__setitem__(f"{Q}.qzeros", t[f"{Q}.qzeros"][:, :1]), r"qzeros has shape \(2, 1\), not \(2, 4\)"),
    (lambda t: t.__setitem__(f"{Q}.qzeros", t[f"{Q}.qzeros"][:1]), r"qzeros has shape \(1, 4\), not \(2, 4\)"),
    (lambda t: t.__setitem__(f"{Q}.scales", t[f"{Q}.scales"][:1]), r"qzeros has shape \(2, 4\), not \(1, 4\)"),
    (lambda t: t.__setitem__(f"{Q}.qweight", t[f"{Q}.qweight"].float()), r"qweight is stored as float32, not int32"),
], ids=["1-D scales", "2-D g_idx", "qzeros columns", "qzeros rows", "scales rows", "float qweight"])
def test_gptq_parts_that_do_not_fit_are_refused(gptq, tmp_path, edit, match):
    """GPTQ parts checked against qweight and the config before any read (1-D scales were accepted: a wrong
    4.26 for 4.18; the others ended in RuntimeError / IndexError)."""
    hostile = variant(gptq, tmp_path / "v", tensors=edit)
    err = refused(hostile, match)
    assert err.tensor == f"{Q}.weight" and err.method == "gptq int4"


def test_gptq_g_idx_outside_the_groups_names_file_and_tensor(gptq, tmp_path):
    """A g_idx pointing past the scales is found on read: the error names the file and the tensor (it read
    "bad checkpoint file ''")."""
    hostile = variant(gptq, tmp_path / "v", tensors=lambda t: t[f"{Q}.g_idx"].__setitem__(0, 7))
    refused(hostile, rf"tensor '{Q}.weight' \(gptq\): g_idx / group_size give groups outside the 2 groups")


def test_gptq_and_awq_tensors_under_each_other_s_config(original, gptq, tmp_path):
    """GPTQ-packed tensors under an awq config (a RuntimeError) and the reverse: refused, naming the layout."""
    awq_qc = {"quant_method": "awq", "bits": 4, "group_size": 16, "zero_point": True, "version": "gemm"}
    refused(variant(gptq, tmp_path / "a", qc=awq_qc), r"GPTQ-packed tensors \(qweight \(in/8, out\)\) under an awq")
    awq = write_int(tmp_path / "awq", original, "awq")[0]
    gptq_qc = {"quant_method": "gptq", "bits": 4, "group_size": 16, "checkpoint_format": "gptq"}
    refused(variant(awq, tmp_path / "g", qc=gptq_qc), r"scales has 4 rows, but 512 input rows")


# -- compressed-tensors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights, match", [
    ("int8", r"weights 'int8' \(not a mapping of quantization args"),
    ({"num_bits": 4, "type": "int", "strategy": "block", "block_structure": [16]}, r"block_structure \[16\]"),
    ({"num_bits": [4], "type": "int", "strategy": "group", "group_size": 16}, r"num_bits \[4\]"),
    ({"num_bits": 4, "type": "int", "strategy": "group", "group_size": True}, "group_size True"),
])
def test_compressed_config_groups_that_are_not_args(packed, tmp_path, weights, match):
    """A config group whose weights are no quantization args: a typed error (an AttributeError before)."""
    qc = lambda old: {**old, "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}  # noqa: E731
    with pytest.raises(UnsupportedQuantizationError, match=match):
        open_source(variant(packed, tmp_path / "v", qc=qc))


@pytest.mark.parametrize("shape, match", [
    ([32, 40], r"weight_packed has shape \(32, 4\), but weight_shape \[32, 40\] .* needs \(32, 5\)"),
    ([32, 2**34], r"weight_packed has shape \(32, 4\), but weight_shape \[32, 17179869184\]"),
    ([64, 32], r"weight_packed has shape \(32, 4\), but weight_shape \[64, 32\]"),
    ([16, 32], r"weight_packed has shape \(32, 4\), but weight_shape \[16, 32\]"),
    ([32, 0], r"weight_shape is \[32, 0\], not two positive integers"),
    ([32, 32, 1], r"weight_shape has shape \(3,\)"),
])
def test_compressed_weight_shape_that_lies(packed, tmp_path, shape, match):
    """A weight_shape its packed words cannot hold: refused before unpacking (IndexError, a 128 GB
    allocation, RuntimeError / ValueError before)."""
    hostile = variant(packed, tmp_path / "v", tensors=lambda t: t.__setitem__(f"{Q}.weight_shape",
                                                                              torch.tensor(shape)))
    refused(hostile, match)


def test_compressed_scales_of_the_wrong_shape_for_the_strategy(packed, original, tmp_path):
    hostile = variant(packed, tmp_path / "v", tensors=lambda t: t.__setitem__(
        f"{Q}.weight_scale", t[f"{Q}.weight_scale"][:, :1]))
    refused(hostile, r"weight_scale has shape \(32, 1\), but weight_shape \[32, 32\] with strategy group needs "
                     r"\(32, 2\)")
    channel, _ = write_compressed(tmp_path / "ch", original, dict(num_bits=8, type="float", strategy="channel",
                                                                   symmetric=True), "float-quantized")
    hostile = variant(channel, tmp_path / "c", tensors=lambda t: t.__setitem__(
        f"{Q}.weight_scale", t[f"{Q}.weight_scale"][:5]))
    refused(hostile, r"weight_scale has shape \(5, 1\), but a weight of shape \(32, 32\) with strategy channel")


def test_compressed_group_size_larger_than_the_matrix(original, tmp_path):
    """A group of 2^30 columns over 32 or 64 is one group per row (the scales of a per-channel export):
    the library's own decompression of that export, read within 512 MB (a 256 GB allocation before)."""
    path, expected = write_compressed(tmp_path / "ct", original, dict(num_bits=8, type="int", strategy="channel",
                                                                       symmetric=True), "int-quantized")
    hostile = variant(path, tmp_path / "v", qc=lambda qc: {**qc, "config_groups": {"group_0": {
        **qc["config_groups"]["group_0"], "weights": {**qc["config_groups"]["group_0"]["weights"],
                                                      "strategy": "group", "group_size": 2**30}}}})
    got = run_bounded(f"""
        rec = {{r.name: r for r in toolkit.open_source({str(hostile)!r}).tensors()}}[{Q + '.weight'!r}]
        result(rec.read().double().flatten().tolist())
    """)
    assert "value" in got, got
    np.testing.assert_allclose(got["value"], expected[f"{Q}.weight"].double().flatten().numpy(), rtol=1e-6)


# -- MXFP4 scales below float32's normal range -----------------------------------------------------------------------


def test_mxfp4_scales_of_2_to_the_minus_127_keep_every_value(tmp_path):
    """Experts with e8m0 scales 2^-127 (values float32 holds only as subnormals) read exactly as float64
    e2m1 x 2^-127, also where the CPU flushes subnormals to zero (they read as 0: a Frobenius norm of 0)."""
    from toolkit.testing import write_tiny_moe_checkpoint

    original = write_tiny_moe_checkpoint(tmp_path / "bf16", "gpt_oss", num_layers=1, intermediate_size=32)
    path = write_mxfp4_experts(tmp_path / "mxfp4", original)
    name = "model.layers.0.mlp.experts.down_proj"
    t = load_file(str(path / "model.safetensors"))
    t[f"{name}_scales"] = torch.zeros_like(t[f"{name}_scales"])
    save_file(t, str(path / "model.safetensors"))
    b = t[f"{name}_blocks"].to(torch.int64)
    lut = E2M1_VALUES.double()
    want = (torch.stack((lut[b & 15], lut[b >> 4]), -1).reshape(*b.shape[:-1], 32) * 2.0 ** -127).reshape(
        b.shape[0], b.shape[1], -1).transpose(1, 2)  # (E, in, out), as gpt-oss stores the bf16 stack
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    try:
        got = {r.name: r for r in open_source(path).tensors()}[name].read()
        ds = toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False, cache=False)
    finally:
        torch.set_flush_denormal(False)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    np.testing.assert_allclose(ds.frobenius_norm_per_expert.sel(layer=0, component="mlp.down").values,
                               [float(torch.linalg.norm(want[e])) for e in range(want.shape[0])], rtol=1e-12)
