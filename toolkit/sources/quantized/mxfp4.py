"""MXFP4 (``quant_method: mxfp4``: gpt-oss's routed experts), as transformers' MXFP4 integration reads it.

Stored: ``<param>_blocks`` uint8 (E, R, G, 16), two e2m1 values a byte (low
nibble first), 32 values per block; ``<param>_scales`` uint8 (E, R, G), one
e8m0 exponent per block (OCP Microscaling Formats v1.0, §5.3-5.4: value 2^(e − 127),
e = 255 is NaN). Value: v = e2m1(nibble) · 2^(e − 127). The dequantised
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

from toolkit.errors import UnsupportedQuantizationError
from toolkit.sources.quantized.base import Format

_PATTERN = re.compile(r"^(?P<prefix>.+)_(?P<part>blocks|scales)$")
#: e2m1 values of the 16 nibbles (OCP MX v1.0, Table 5): sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0.
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """MXFP4 experts (E, R, G, 16) + (E, R, G) -> float32 (E, G·32, R).

    Raises
    ------
    UnsupportedQuantizationError
        Not 4-D blocks of 16 bytes with one scale per block.
    """
    if blocks.ndim != 4 or blocks.shape[-1] != 16 or tuple(scales.shape) != tuple(blocks.shape[:-1]):
        raise UnsupportedQuantizationError(
            "", "mxfp4", ["mxfp4 (E, rows, blocks, 16) expert tensors"],
            f"blocks of shape {tuple(blocks.shape)} with scales {tuple(scales.shape)} are not gpt-oss expert tensors",
        )
    b = blocks.to(torch.uint8).to(torch.int64)
    lut = torch.tensor(E2M1, dtype=torch.float32)
    values = torch.stack((lut[b & 0x0F], lut[b >> 4]), dim=-1).reshape(*blocks.shape[:-1], 32)
    e = scales.to(torch.uint8).to(torch.int64)
    factor = torch.where(e == 255, torch.full(e.shape, float("nan")), torch.exp2((e - 127).to(torch.float32)))
    out = (values * factor.unsqueeze(-1)).reshape(blocks.shape[0], blocks.shape[1], -1)
    return out.transpose(1, 2).contiguous()


def mxfp4_format(qc: dict, path: str) -> tuple[Format, str]:
    """The :class:`Format` and description of a ``quant_method: mxfp4`` config."""
    return Format(
        method="mxfp4", pattern=_PATTERN, primary="blocks", required=("blocks", "scales"),
        output=lambda prefix: prefix,
        shape=lambda parts, _: (parts["blocks"].shape[0], parts["blocks"].shape[2] * 32, parts["blocks"].shape[1]),
        dequantize=lambda p, _: dequantize_mxfp4(p["blocks"], p["scales"]),
        dtype="mxfp4", stacked=("blocks", "scales"),
    ), "mxfp4 (e2m1 values, e8m0 scales per 32)"
