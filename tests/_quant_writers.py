"""Tiny quantised checkpoints for the tests: each format written from integer codes chosen here,
packed as the format's reference packer writes them (AutoGPTQ's ``QuantLinear.pack`` loop,
AutoAWQ's ``WQLinear_GEMM.from_linear`` loop, compressed-tensors' own compressors), so the
expected values come from the codes, independently of the toolkit's unpacking."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from toolkit.testing import write_tiny_checkpoint

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj")


def _write(folder: Path, tensors: dict, config: dict, quantization_config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": quantization_config}))
    return folder


def tiny_original(folder: Path, num_layers: int = 2) -> tuple[Path, dict, dict]:
    """A tiny llama checkpoint: (path, its tensors, its config)."""
    path = write_tiny_checkpoint(folder, "llama", num_layers=num_layers)
    return path, load_file(str(path / "model.safetensors")), json.loads((path / "config.json").read_text())


def _linear(name: str) -> bool:
    return name.endswith(".weight") and name.split(".")[-2] in LINEAR


def write_fp8(folder: Path, original: Path, block=(16, 24), quantized=_linear) -> tuple[Path, dict]:
    """FP8 e4m3 with ``weight_block_size = block`` (partial edge blocks for the tiny widths) from ``original``,
    for the 2-D weights whose name ``quantized(name)`` accepts; returns (path, {name: (fp8 weight, scale_inv)})."""
    tensors = load_file(str(original / "model.safetensors"))
    config = json.loads((original / "config.json").read_text())
    out, parts = {}, {}
    for name, w in tensors.items():
        if not quantized(name):
            out[name] = w
            continue
        rows, cols = w.shape
        pr, pc = math.ceil(rows / block[0]) * block[0], math.ceil(cols / block[1]) * block[1]
        padded = torch.zeros(pr, pc)
        padded[:rows, :cols] = w
        blocks = padded.reshape(pr // block[0], block[0], pc // block[1], block[1])
        scale = blocks.abs().amax(dim=(1, 3)) / 448.0
        full = scale.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
        q = (w / full).to(torch.float8_e4m3fn)
        out[name], out[name.replace(".weight", ".weight_scale_inv")] = q, scale
        parts[name] = (q, scale)
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(block)}
    return _write(folder, out, config, qc), parts


#: e2m1 values of the 16 nibbles, OCP Microscaling Formats v1.0 Table 5 (sign bit 3, exponent bits 2-1, mantissa
#: bit 0), written out here rather than taken from the toolkit.
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def pack_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A gpt-oss expert stack (E, in, out) as MXFP4 ``(blocks (E, out, in/32, 16) uint8, scales (E, out, in/32))``.

    OCP MX v1.0 §6.3: per block of 32 values along ``in``, the shared exponent is
    ⌈log2(amax / 6)⌉ (6 = e2m1's largest value), stored as e8m0 (+127); each value is the
    nearest e2m1 code of v / 2^exponent, two a byte, the even index in the low nibble
    (gpt-oss's layout, which transformers' ``convert_moe_packed_tensors`` reads).
    """
    e, n_in, n_out = w.shape
    x = w.double().transpose(1, 2).reshape(e, n_out, n_in // 32, 32)
    exponent = torch.ceil(torch.log2(x.abs().amax(-1).clamp(min=2.0 ** -120) / 6.0))
    scaled = x / torch.exp2(exponent).unsqueeze(-1)
    codes = (scaled.unsqueeze(-1) - E2M1_VALUES.double()).abs().argmin(-1)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    return blocks, (exponent + 127).to(torch.uint8)


def write_mxfp4_experts(folder: Path, original: Path) -> Path:
    """``original`` (a gpt-oss folder, expert widths multiples of 32) with its expert stacks
    ``mlp.experts.{gate_up,down}_proj`` stored as MXFP4, config as the hub's gpt-oss releases have it."""
    tensors = load_file(str(original / "model.safetensors"))
    config = json.loads((original / "config.json").read_text())
    out = {}
    for name, w in tensors.items():
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            out[f"{name}_blocks"], out[f"{name}_scales"] = pack_mxfp4(w)
        else:
            out[name] = w
    qc = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    return _write(folder, out, config, qc)


def _codes(shape, bits, gen):
    return torch.randint(0, 1 << bits, shape, generator=gen, dtype=torch.int64)


def gptq_pack_rows(intweight: torch.Tensor, bits: int) -> torch.Tensor:
    """AutoGPTQ ``QuantLinear.pack``: rows ``i .. i + 32/bits`` of (in, out) codes into one int32 row."""
    per = 32 // bits
    qweight = torch.zeros(intweight.shape[0] // per, intweight.shape[1], dtype=torch.int64)
    i, row = 0, 0
    while row < qweight.shape[0]:
        for j in range(i, i + per):
            qweight[row] |= intweight[j] << (bits * (j - i))
        i += per
        row += 1
    return (qweight & 0xFFFFFFFF).to(torch.uint32).view(torch.int32)


def gptq_pack_cols(intzeros: torch.Tensor, bits: int) -> torch.Tensor:
    """AutoGPTQ ``QuantLinear.pack`` for ``qzeros``: columns ``i .. i + 32/bits`` into one int32 column."""
    per = 32 // bits
    qzeros = torch.zeros(intzeros.shape[0], intzeros.shape[1] // per, dtype=torch.int64)
    i, col = 0, 0
    while col < qzeros.shape[1]:
        for j in range(i, i + per):
            qzeros[:, col] |= intzeros[:, j] << (bits * (j - i))
        i += per
        col += 1
    return (qzeros & 0xFFFFFFFF).to(torch.uint32).view(torch.int32)


def awq_pack_cols(intweight: torch.Tensor) -> torch.Tensor:
    """AutoAWQ ``WQLinear_GEMM.from_linear``: 8 columns of 4-bit codes per int32, order [0, 2, 4, 6, 1, 3, 5, 7]."""
    order_map = [0, 2, 4, 6, 1, 3, 5, 7]
    packed = torch.zeros(intweight.shape[0], intweight.shape[1] // 8, dtype=torch.int64)
    for col in range(intweight.shape[1] // 8):
        for i in range(8):
            packed[:, col] |= intweight[:, col * 8 + order_map[i]] << (i * 4)
    return (packed & 0xFFFFFFFF).to(torch.uint32).view(torch.int32)


def write_int(folder: Path, original: Path, method: str, *, bits: int = 4, group: int = 16, act_order: bool = False,
              v2: bool = False, seed: int = 0) -> tuple[Path, dict]:
    """GPTQ or AWQ codes for every linear of ``original``; returns (path, {name: expected W (out, in)}),
    W = scale[g, o] * (q[i, o] - z[g, o]) from the codes."""
    tensors = load_file(str(original / "model.safetensors"))
    config = json.loads((original / "config.json").read_text())
    gen = torch.Generator().manual_seed(seed)
    out, expected = {}, {}
    for name, w in tensors.items():
        if not _linear(name):
            out[name] = w
            continue
        n_out, n_in = w.shape
        groups = n_in // group
        q = _codes((n_in, n_out), bits, gen)
        z = torch.randint(1, 1 << bits, (groups, n_out), generator=gen, dtype=torch.int64)  # 1..2^b-1 (v1 stores z-1)
        s = (0.01 + 0.02 * torch.rand(groups, n_out, generator=gen)).to(torch.float16)
        g = torch.arange(n_in) // group
        if act_order:
            g = g[torch.randperm(n_in, generator=gen)]
        expected[name] = ((q - z[g]).double() * s.double()[g]).t()
        prefix = name.removesuffix(".weight")
        if method == "gptq":
            out[f"{prefix}.qweight"] = gptq_pack_rows(q, bits)
            out[f"{prefix}.qzeros"] = gptq_pack_cols(z if v2 else z - 1, bits)
            out[f"{prefix}.g_idx"] = g.to(torch.int32)
        else:
            out[f"{prefix}.qweight"] = awq_pack_cols(q)
            out[f"{prefix}.qzeros"] = awq_pack_cols(z)
        out[f"{prefix}.scales"] = s
    qc = ({"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order, "sym": False,
           "checkpoint_format": "gptq_v2" if v2 else "gptq"} if method == "gptq" else
          {"quant_method": "awq", "bits": bits, "group_size": group, "zero_point": True, "version": "gemm"})
    return _write(folder, out, config, qc), expected


def write_compressed(folder: Path, original: Path, weights: dict, fmt: str) -> tuple[Path, dict]:
    """compressed-tensors ``fmt`` with weight args ``weights``, compressed by the library itself; returns
    (path, {name: the library's own decompression})."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    args = QuantizationArgs(**weights)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    compressor = BaseCompressor.load_from_registry(fmt)
    tensors = load_file(str(original / "model.safetensors"))
    config = json.loads((original / "config.json").read_text())
    out, expected = {}, {}
    for name, w in tensors.items():
        if not _linear(name):
            out[name] = w
            continue
        state = {"weight": w, **_qparams(w, args)}
        compressed = compressor.compress(state, scheme)
        prefix = name.removesuffix(".weight")
        out.update({f"{prefix}.{k}": v for k, v in compressed.items()})
        expected[name] = compressor.decompress(compressed, scheme)["weight"]
    qc = {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.model_dump(mode="json")}},
          "ignore": ["lm_head"]}
    return _write(folder, out, config, qc), expected


def _qparams(w: torch.Tensor, args) -> dict:
    """Scale (and zero point) of ``w`` for ``args``, by the library's ``calculate_qparams``."""
    from compressed_tensors.quantization.utils import calculate_qparams

    strategy = str(args.strategy.value if hasattr(args.strategy, "value") else args.strategy)
    if strategy == "tensor":
        lo, hi = w.amin().reshape(1), w.amax().reshape(1)
    elif strategy == "channel":
        lo, hi = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    elif strategy == "block":
        b0, b1 = args.block_structure
        pr, pc = math.ceil(w.shape[0] / b0) * b0, math.ceil(w.shape[1] / b1) * b1
        padded = torch.zeros(pr, pc)
        padded[: w.shape[0], : w.shape[1]] = w
        blocks = padded.reshape(pr // b0, b0, pc // b1, b1)
        lo, hi = blocks.amin(dim=(1, 3)), blocks.amax(dim=(1, 3))
    else:
        g = w.reshape(w.shape[0], -1, args.group_size)
        lo, hi = g.amin(dim=2), g.amax(dim=2)
    scale, zp = calculate_qparams(lo, hi, args)
    return {"weight_scale": scale.to(torch.float32), **({} if args.symmetric else {"weight_zero_point": zp})}
