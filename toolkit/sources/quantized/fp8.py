"""FP8 with block scales (``quant_method: fp8``: DeepSeek-V3/R1, Qwen3-FP8, transformers' ``FineGrainedFP8``).

Stored: ``<module>.weight`` in float8 (e4m3fn) of shape (..., R, C) and
``<module>.weight_scale_inv`` (float32 or e8m0) of shape
(..., ⌈R / b₀⌉, ⌈C / b₁⌉) for ``weight_block_size = [b₀, b₁]`` (one scale for
the whole tensor without a block size). Value: W[i, j] = fp8[i, j] ·
scale_inv[i // b₀, j // b₁]; the last block row and column may be partial
(edges included), as transformers' ``_dequantize_fp8_weight`` reads them. A
block larger than the matrix is one block; the grid is checked against the
weight's stored shape when the checkpoint is opened.
Optional ``input_scale`` / ``activation_scale`` (static activation
quantisation) are consumed and not measured.
"""

from __future__ import annotations

import math
import re
from reprlib import repr as shown

import torch

from toolkit.errors import QuantizedLayoutError, UnsupportedQuantizationError
from toolkit.sources.quantized.base import Format, shape_of
from toolkit.sources.quantized.grid import grid_shape, spread

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
    if not (isinstance(b, (list, tuple)) and len(b) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in b)):
        raise UnsupportedQuantizationError(path, f"fp8 weight_block_size={shown(b)}", ["fp8 with [rows, cols] blocks"],
                                           "weight_block_size must be two positive integers")
    return int(b[0]), int(b[1])


def check_fp8(parts: dict, block: tuple[int, int] | None) -> str:
    """What is wrong with an FP8 group's records (``""`` when nothing): a float8 e4m3 weight of 2 or 3
    dimensions and a scale grid of the shape the block size gives it (or one scale)."""
    w, s = parts["weight"], parts["weight_scale_inv"]
    ws, ss = shape_of(w), shape_of(s)
    if not w.dtype.startswith("float8_e4m3"):
        return (f"the weight beside weight_scale_inv is stored as {w.dtype}, not float8_e4m3fn (packed FP4 "
                "experts are not read)")
    if len(ws) not in (2, 3) or 0 in ws:
        return f"the weight has shape {ws}, not a (rows, cols) matrix or an (experts, rows, cols) stack"
    if math.prod(ss) == 1:
        return ""
    if block is None:
        return f"weight_scale_inv has shape {ss}: without weight_block_size the config declares one scale"
    grid = (*ws[:-2], *grid_shape(ws[-2], ws[-1], block))
    if ss != grid:
        return (f"a weight of shape {ws} in {block[0]}x{block[1]} blocks (weight_block_size) needs a scale grid "
                f"{grid}, the file has {ss}; the config's block size is not the one these scales were made with")
    return ""


def dequantize_fp8(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] | None) -> torch.Tensor:
    """W = fp8 · scale_inv per block (per tensor when ``block`` is None), float32.

    Memory: one float32 copy of the weight and one of the spread scales, whatever the block size
    (:func:`~toolkit.sources.quantized.grid.spread`).

    Parameters
    ----------
    weight : torch.Tensor, shape (..., R, C)
        float8 (any float dtype).
    scale_inv : torch.Tensor, shape (..., ⌈R/b₀⌉, ⌈C/b₁⌉), or one element
    block : (int, int) or None

    Raises
    ------
    QuantizedLayoutError
        The weight is not float8 e4m3, or the scale grid does not match the weight and block size
        (path and tensor left empty: the reader names them).
    """
    if weight.dtype != torch.float8_e4m3fn:
        raise QuantizedLayoutError("", "", "fp8", f"the weight beside weight_scale_inv is stored as "
                                   f"{str(weight.dtype).removeprefix('torch.')}, not float8_e4m3fn")
    w = weight.to(torch.float32)
    s = scale_inv.to(torch.float32)
    if block is None or s.numel() == 1:
        if s.numel() != 1:
            raise QuantizedLayoutError("", "", "fp8", f"a per-tensor scale of shape {tuple(s.shape)}")
        return w * s.reshape(())
    rows, cols = w.shape[-2:]
    grid = (*w.shape[:-2], *grid_shape(rows, cols, block))
    if tuple(s.shape) != grid:
        raise QuantizedLayoutError("", "", f"fp8 {block[0]}x{block[1]} blocks",
                                   f"weight of shape {tuple(w.shape)} needs a scale grid {grid}, the file has "
                                   f"{tuple(s.shape)}")
    return w * spread(s, rows, cols, block)


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
        check=lambda parts, _: check_fp8(parts, block),
    ), f"fp8 e4m3, {what}"
