"""MXFP4 (``quant_method: mxfp4``: gpt-oss's routed experts), as transformers' MXFP4 integration reads it.

Stored: ``<param>_blocks`` uint8 (E, R, G, 16), two e2m1 values a byte (low
nibble first), 32 values per block; ``<param>_scales`` uint8 (E, R, G), one
e8m0 exponent per block (OCP Microscaling Formats v1.0, §5.3-5.4: value 2^(e − 127),
e = 255 is NaN). Value: v = e2m1(nibble) · 2^(e − 127) (float64 for a stack with scales
below 2^−126, where float32 values would be subnormal). The dequantised
parameter is named ``<param>`` (``model.layers.0.mlp.experts.gate_up_proj``)
and has the layout the bf16 gpt-oss checkpoint stores it in, (E, G·32, R):
transformers' ``convert_moe_packed_tensors`` transposes the last two axes
the same way. A 3-D (expert, in, out) tensor: the MoE side cuts it per expert, and each
expert reads and dequantises only its own blocks and scales
(:attr:`~toolkit.sources.quantized.base.Format.stacked`).
"""

from __future__ import annotations

import re

import torch

from toolkit.errors import QuantizedLayoutError
from toolkit.sources.quantized.base import Format, shape_of

_PATTERN = re.compile(r"^(?P<prefix>.+)_(?P<part>blocks|scales)$")
#: Scale exponents (e8m0 bytes) below which a value v · 2^(e − 127) can be a float32 subnormal
#: (0.5 · 2^(e − 127) < 2^−126 for e < 2): such stacks are dequantised in float64.
SUBNORMAL_BELOW = 2
#: e2m1 values of the 16 nibbles (OCP MX v1.0, Table 5): sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0.
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def check_mxfp4(parts: dict) -> str:
    """What is wrong with an MXFP4 group's records (``""`` when nothing): uint8 blocks (E, R, G, 16) and one
    uint8 scale per block (E, R, G)."""
    blocks, scales = shape_of(parts["blocks"]), shape_of(parts["scales"])
    if len(blocks) != 4 or blocks[-1] != 16 or 0 in blocks or scales != blocks[:-1]:
        return (f"blocks of shape {blocks} with scales {scales} are not gpt-oss expert tensors ((E, rows, blocks, 16) "
                "bytes and one scale per block)")
    kinds = {parts["blocks"].dtype, parts["scales"].dtype}
    return "" if kinds == {"uint8"} else f"blocks and scales are stored as {sorted(kinds)}, not uint8"


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """MXFP4 experts (E, R, G, 16) + (E, R, G) -> float32 (E, G·32, R); float64 where a scale is so small
    (e8m0 byte below :data:`SUBNORMAL_BELOW`, 2^−126) that a float32 value would be subnormal.

    Every e2m1 · e8m0 value is a float32 (the smallest, 0.5 · 2^−127, is a
    subnormal), but a subnormal float32 keeps fewer bits, and is flushed to 0
    where the CPU runs with flush-to-zero (``torch.set_flush_denormal(True)``:
    a stack of 2^−127 scales measured a Frobenius norm of 0); in float64 all
    of them are normal numbers, exact in any mode.

    Raises
    ------
    QuantizedLayoutError
        Not 4-D blocks of 16 bytes with one scale per block (path and tensor left empty: the reader names them).
    """
    if blocks.ndim != 4 or blocks.shape[-1] != 16 or tuple(scales.shape) != tuple(blocks.shape[:-1]):
        raise QuantizedLayoutError(
            "", "", "mxfp4", f"blocks of shape {tuple(blocks.shape)} with scales {tuple(scales.shape)} are not gpt-oss "
            "expert tensors",
        )
    b = blocks.to(torch.uint8).to(torch.int64)
    e = scales.to(torch.uint8).to(torch.int64)
    dtype = torch.float64 if bool((e < SUBNORMAL_BELOW).any()) else torch.float32
    lut = torch.tensor(E2M1, dtype=dtype)
    values = torch.stack((lut[b & 0x0F], lut[b >> 4]), dim=-1).reshape(*blocks.shape[:-1], 32)
    factor = torch.where(e == 255, torch.full(e.shape, float("nan"), dtype=dtype), torch.exp2((e - 127).to(dtype)))
    out = (values * factor.unsqueeze(-1)).reshape(blocks.shape[0], blocks.shape[1], -1)
    return out.transpose(1, 2).contiguous()


def mxfp4_format(qc: dict, path: str) -> tuple[Format, str]:
    """The :class:`Format` and description of a ``quant_method: mxfp4`` config."""
    return Format(
        method="mxfp4", pattern=_PATTERN, primary="blocks", required=("blocks", "scales"),
        output=lambda prefix: prefix,
        shape=lambda parts, _: (parts["blocks"].shape[0], parts["blocks"].shape[2] * 32, parts["blocks"].shape[1]),
        dequantize=lambda p, _: dequantize_mxfp4(p["blocks"], p["scales"]),
        dtype="mxfp4", stacked=("blocks", "scales"), check=lambda parts, _: check_mxfp4(parts),
    ), "mxfp4 (e2m1 values, e8m0 scales per 32)"
