"""compressed-tensors (``quant_method: compressed-tensors``, llm-compressor's exports).

Formats read: ``float-quantized`` (``weight`` in float8 e4m3 + ``weight_scale``),
``int-quantized`` / ``naive-quantized`` (``weight`` in int8 + ``weight_scale``)
and ``pack-quantized`` (``weight_packed`` int32 + ``weight_scale`` +
``weight_shape`` [+ ``weight_zero_point``]), for the strategies ``tensor``,
``channel``, ``group`` and ``block``. Value, as ``compressed_tensors``'
``dequantize`` computes it: W = (q − zp) · scale, the scale (and zero point)
of each entry's tensor / output row / (row, input group) / (row block,
column block). ``pack-quantized`` packs b-bit values densely along the input
dim, each stored as q + 2^(b−1) (``pack_to_int32``), and an asymmetric zero
point the same way along the output dim. The scheme of a module is its
``config_groups`` entry: a ``re:`` target matching the module's name, else
the group targeting ``Linear``.
"""

from __future__ import annotations

import re

import torch

from toolkit.errors import UnsupportedQuantizationError
from toolkit.sources.quantized.base import Format
from toolkit.sources.quantized.packing import unpack_dense

FORMATS = ("float-quantized", "int-quantized", "naive-quantized", "pack-quantized")
STRATEGIES = ("tensor", "channel", "group", "block")
_PATTERN = re.compile(
    r"^(?P<prefix>.+)\.(?P<part>weight|weight_packed|weight_scale|weight_zero_point|weight_shape|weight_g_idx|"
    r"input_scale|input_zero_point|output_scale|output_zero_point)$"
)


def _schemes(qc: dict, path: str) -> list[tuple[list[str], dict, str]]:
    """``[(targets, weight args, format)]`` of the config groups, each checked."""
    supported = [f"compressed-tensors {f}" for f in FORMATS]
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise UnsupportedQuantizationError(path, "compressed-tensors", supported, "no config_groups")
    sparsity = qc.get("sparsity_config") or {}
    if isinstance(sparsity, dict) and sparsity.get("format") not in (None, "dense"):
        raise UnsupportedQuantizationError(path, f"compressed-tensors sparsity {sparsity.get('format')!r}", supported,
                                           "sparse compressed weights are not read")
    out = []
    for name, group in groups.items():
        args = group.get("weights") if isinstance(group, dict) else None
        if not args:
            continue
        fmt = str(group.get("format") or qc.get("format") or "")
        strategy = str(args.get("strategy") or "tensor")
        bits, kind = args.get("num_bits"), str(args.get("type") or "int")
        problem = ""
        if fmt not in FORMATS:
            problem = f"format {fmt!r}"
        elif strategy not in STRATEGIES:
            problem = f"strategy {strategy!r}"
        elif fmt == "pack-quantized" and (kind != "int" or not isinstance(bits, int) or not 1 <= bits <= 8):
            problem = f"pack-quantized {kind}{bits}"
        elif fmt == "float-quantized" and (kind != "float" or bits != 8):
            problem = f"float-quantized {kind}{bits}"
        elif strategy == "group" and not (isinstance(args.get("group_size"), int) and args["group_size"] > 0):
            problem = f"group_size {args.get('group_size')!r}"
        if problem:
            raise UnsupportedQuantizationError(path, f"compressed-tensors {problem} (group {name!r})", supported,
                                               "that scheme is not read")
        out.append((list(group.get("targets") or []), dict(args), fmt))
    return out


def _scheme_for(schemes, module: str, path: str):
    for targets, args, fmt in schemes:
        if any(t.startswith("re:") and re.match(t[3:], module) for t in targets):
            return args, fmt
    for targets, args, fmt in schemes:
        if any(not t.startswith("re:") for t in targets):
            return args, fmt
    raise UnsupportedQuantizationError(path, "compressed-tensors", FORMATS, f"no config group targets {module!r}")


def _expand(t: torch.Tensor, strategy: str, args: dict, rows: int, cols: int) -> torch.Tensor:
    """A scale or zero point broadcast to (rows, cols) by ``strategy``."""
    if strategy == "tensor":
        return t.reshape(-1)[:1].reshape(1, 1)
    if strategy == "channel":
        return t.reshape(rows, 1)
    if strategy == "group":
        return t.reshape(rows, -1).repeat_interleave(int(args["group_size"]), dim=1)[:, :cols]
    b0, b1 = args["block_structure"]
    return t.repeat_interleave(int(b0), dim=0)[:rows].repeat_interleave(int(b1), dim=1)[:, :cols]


def dequantize_compressed(parts: dict, args: dict, fmt: str) -> torch.Tensor:
    """W (out, in), float32, of one module in compressed-tensors format ``fmt`` with weight ``args``.

    Raises
    ------
    UnsupportedQuantizationError
        A packed zero point of a strategy that does not pack it, or a
        ``weight_g_idx`` that reorders the groups.
    """
    strategy, bits = str(args.get("strategy") or "tensor"), int(args.get("num_bits") or 8)
    if fmt == "pack-quantized":
        rows, cols = (int(v) for v in parts["weight_shape"].reshape(-1).tolist())
        offset = 1 << (bits - 1)
        q = unpack_dense(parts["weight_packed"], bits, cols) - offset
    else:
        q = parts["weight"]
        rows, cols = q.shape
    w = q.to(torch.float32)
    zp = parts.get("weight_zero_point")
    if zp is not None:
        if fmt == "pack-quantized" and strategy in ("group", "channel"):
            zp = (unpack_dense(zp.t().contiguous(), bits, rows) - offset).t()
        w = w - _expand(zp.to(torch.float32), strategy, args, rows, cols)
    g_idx = parts.get("weight_g_idx")
    if g_idx is not None and strategy == "group" and not torch.equal(
            g_idx.to(torch.int64), torch.arange(cols) // int(args["group_size"])):
        raise UnsupportedQuantizationError("", "compressed-tensors group with activation order", FORMATS,
                                           "a weight_g_idx that reorders the groups is not read")
    return w * _expand(parts["weight_scale"].to(torch.float32), strategy, args, rows, cols)


def _shape(parts: dict) -> tuple[int, ...]:
    if "weight_shape" in parts:
        return tuple(int(v) for v in parts["weight_shape"].read().reshape(-1).tolist())
    return tuple(parts["weight"].shape)


def compressed_format(qc: dict, path: str) -> tuple[Format, str]:
    """The :class:`Format` and description of a ``quant_method: compressed-tensors`` config."""
    schemes = _schemes(qc, path)
    described = sorted({f"{fmt} {a.get('type', 'int')}{a.get('num_bits')} {a.get('strategy', 'tensor')}"
                        + (f" {a['group_size']}" if a.get("strategy") == "group" else "")
                        + ("" if a.get("symmetric", True) else " asymmetric") for _, a, fmt in schemes})
    return Format(
        method="compressed-tensors", pattern=_PATTERN, primary="weight_scale", required=("weight_scale",),
        output=lambda prefix: f"{prefix}.weight", shape=lambda parts, _: _shape(parts),
        dequantize=lambda p, prefix: dequantize_compressed(p, *_scheme_for(schemes, prefix, path)),
        dtype="compressed-tensors",
    ), "compressed-tensors " + "; ".join(described)
