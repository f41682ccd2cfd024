"""FP8 with block scales (``quant_method: fp8``: DeepSeek-V3/R1, Qwen3-FP8, transformers' ``FineGrainedFP8``).

Stored: ``<module>.weight`` in float8 (e4m3fn) of shape (..., R, C) and
``<module>.weight_scale_inv`` (float32 or e8m0) of shape
(..., ⌈R / b₀⌉, ⌈C / b₁⌉) for ``weight_block_size = [b₀, b₁]`` (one scale for
the whole tensor without a block size). Value: W[i, j] = fp8[i, j] ·
scale_inv[i // b₀, j // b₁]; the last block row and column may be partial
(edges included), as transformers' ``_dequantize_fp8_weight`` reads them.
Optional ``input_scale`` / ``activation_scale`` (static activation
quantisation) are consumed and not measured.
"""

from __future__ import annotations

import math
import re

import torch

from toolkit.errors import UnsupportedQuantizationError
from toolkit.sources.quantized.base import Format

_PATTERN = re.compile(r"^(?P<prefix>.+)\.(?P<part>weight|weight_scale_inv|input_scale|activation_scale)$")


def block_size(qc: dict, path: str) -> tuple[int, int] | None:
    """``weight_block_size`` as ``(b0, b1)``, None for one scale per tensor.

    Raises
    ------
    UnsupportedQuantizationError
        Not two positive integers.
    """
    b = qc.get("weight_block_size")
    if b is None:
        return None
    if not (isinstance(b, (list, tuple)) and len(b) == 2 and all(isinstance(x, int) and x > 0 for x in b)):
        raise UnsupportedQuantizationError(path, f"fp8 weight_block_size={b!r}", ["fp8 with [rows, cols] blocks"],
                                           "weight_block_size must be two positive integers")
    return int(b[0]), int(b[1])


def dequantize_fp8(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] | None) -> torch.Tensor:
    """W = fp8 · scale_inv per block (per tensor when ``block`` is None), float32.

    Parameters
    ----------
    weight : torch.Tensor, shape (..., R, C)
        float8 (any float dtype).
    scale_inv : torch.Tensor, shape (..., ⌈R/b₀⌉, ⌈C/b₁⌉), or one element
    block : (int, int) or None

    Raises
    ------
    UnsupportedQuantizationError
        The scale grid does not match the weight and block size.
    """
    if weight.dtype != torch.float8_e4m3fn:
        raise UnsupportedQuantizationError(
            "", f"fp8 with a {str(weight.dtype).removeprefix('torch.')} weight", ["fp8 (float8_e4m3fn weights)"],
            "the weight beside weight_scale_inv is not float8_e4m3fn (packed FP4 experts are not read)",
        )
    w = weight.to(torch.float32)
    s = scale_inv.to(torch.float32)
    if block is None or s.numel() == 1:
        if s.numel() != 1:
            raise UnsupportedQuantizationError("", "fp8", ["fp8"], f"a per-tensor scale of shape {tuple(s.shape)}")
        return w * s.reshape(())
    rows, cols = w.shape[-2:]
    grid = (*w.shape[:-2], math.ceil(rows / block[0]), math.ceil(cols / block[1]))
    if tuple(s.shape) != grid:
        raise UnsupportedQuantizationError(
            "", f"fp8 {block[0]}x{block[1]} blocks", ["fp8"],
            f"weight of shape {tuple(w.shape)} needs a scale grid {grid}, the file has {tuple(s.shape)}",
        )
    s = s.repeat_interleave(block[0], dim=-2)[..., :rows, :].repeat_interleave(block[1], dim=-1)[..., :cols]
    return w * s


def fp8_format(qc: dict, path: str) -> tuple[Format, str]:
    """The :class:`Format` and description of a ``quant_method: fp8`` config."""
    block = block_size(qc, path)
    fmt = str(qc.get("fmt", "e4m3"))
    if fmt != "e4m3":
        raise UnsupportedQuantizationError(path, f"fp8 fmt={fmt!r}", ["fp8 e4m3"], "only the e4m3 encoding is read")
    what = f"{block[0]}x{block[1]} blocks" if block else "per-tensor scale"
    return Format(
        method="fp8", pattern=_PATTERN, primary="weight_scale_inv", required=("weight", "weight_scale_inv"),
        output=lambda prefix: f"{prefix}.weight", shape=lambda parts, _: tuple(parts["weight"].shape),
        dequantize=lambda parts, _: dequantize_fp8(parts["weight"], parts["weight_scale_inv"], block),
        dtype=f"float8_e4m3fn {what}", stacked=("weight", "weight_scale_inv") if block else (),
    ), f"fp8 e4m3, {what}"
