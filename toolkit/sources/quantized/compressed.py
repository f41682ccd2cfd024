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

import math
import re
from reprlib import repr as shown

import torch

from toolkit.errors import QuantizedLayoutError, UnsupportedQuantizationError
from toolkit.sources.quantized.base import Format, shape_of
from toolkit.sources.quantized.grid import grid_shape, spread
from toolkit.sources.quantized.packing import unpack_dense

FORMATS = ("float-quantized", "int-quantized", "naive-quantized", "pack-quantized")
STRATEGIES = ("tensor", "channel", "group", "block")
_PATTERN = re.compile(
    r"^(?P<prefix>.+)\.(?P<part>weight|weight_packed|weight_scale|weight_zero_point|weight_shape|weight_g_idx|"
    r"input_scale|input_zero_point|output_scale|output_zero_point)$"
)


def _positive(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _args_problem(args: dict, fmt: str) -> str:
    """What of a config group's weight args is not read (``""`` when all is)."""
    strategy, bits, kind = args.get("strategy") or "tensor", args.get("num_bits"), args.get("type") or "int"
    if fmt not in FORMATS:
        return f"format {shown(fmt)}"
    if strategy not in STRATEGIES:
        return f"strategy {shown(strategy)}"
    if kind not in ("int", "float") or not (bits is None or _positive(bits)):
        return f"type {shown(kind)} with num_bits {shown(bits)}"
    if fmt == "float-quantized" and (kind != "float" or bits != 8):
        return f"float-quantized {kind}{bits}"
    if fmt != "float-quantized" and (kind != "int" or not (bits is None or 1 <= bits <= 8)):
        return f"{fmt} {kind}{bits}"
    if fmt == "pack-quantized" and bits is None:
        return "pack-quantized without num_bits"
    if strategy == "group" and not _positive(args.get("group_size")):
        return f"group_size {shown(args.get('group_size'))}"
    block = args.get("block_structure")
    if strategy == "block" and not (isinstance(block, list) and len(block) == 2 and all(map(_positive, block))):
        return f"block_structure {shown(block)} (two positive integers)"
    return ""


def _schemes(qc: dict, path: str) -> list[tuple[list[str], dict, str]]:
    """``[(targets, weight args, format)]`` of the config groups, each checked.

    Raises
    ------
    UnsupportedQuantizationError
        No config groups; a group that is no mapping, whose ``weights`` is no mapping of quantisation
        args (``"int8"``), whose targets are no list of names (or hold a ``re:`` target that is no regular
        expression); a format, strategy, type, bit width, group size or block structure that is not read.
    """
    supported = [f"compressed-tensors {f}" for f in FORMATS]
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise UnsupportedQuantizationError(path, "compressed-tensors", supported, "no config_groups")
    sparsity = qc.get("sparsity_config") or {}
    if isinstance(sparsity, dict) and sparsity.get("format") not in (None, "dense"):
        raise UnsupportedQuantizationError(path, f"compressed-tensors sparsity {shown(sparsity.get('format'))}",
                                           supported, "sparse compressed weights are not read")
    out = []
    for name, group in groups.items():
        args = group.get("weights") if isinstance(group, dict) else group
        targets = group.get("targets") if isinstance(group, dict) else None
        if isinstance(group, dict) and not args:
            continue  # no weight quantisation in this group (activations only)
        if not isinstance(args, dict):
            problem = f"weights {shown(args)} (not a mapping of quantization args: num_bits, type, strategy...)"
        elif not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
            problem = f"targets {shown(targets)} (not a list of module names)"
        else:
            problem = _args_problem(args, str(group.get("format") or qc.get("format") or ""))
            for t in targets:
                try:
                    re.compile(t[3:]) if t.startswith("re:") else None
                except (re.error, RecursionError, OverflowError) as exc:
                    problem = f"target {shown(t)} (not a regular expression: {exc})"
        if problem:
            raise UnsupportedQuantizationError(path, f"compressed-tensors {problem} (group {shown(name)})", supported,
                                               "that scheme is not read")
        out.append((list(targets), dict(args), str(group.get("format") or qc.get("format"))))
    return out


def _scheme_for(schemes, module: str, path: str):
    for targets, args, fmt in schemes:
        if any(t.startswith("re:") and re.match(t[3:], module) for t in targets):
            return args, fmt
    for targets, args, fmt in schemes:
        if any(not t.startswith("re:") for t in targets):
            return args, fmt
    raise UnsupportedQuantizationError(path, "compressed-tensors", FORMATS, f"no config group targets {module!r}")


def _grid(strategy: str, args: dict, rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(scale grid shape, block)`` of a strategy: one scale per tensor, per row, per (row, input group),
    per (row block, column block)."""
    if strategy == "tensor":
        return (1, 1), (rows, cols)
    if strategy == "channel":
        return (rows, 1), (1, cols)
    block = (1, int(args["group_size"])) if strategy == "group" else tuple(int(b) for b in args["block_structure"])
    return grid_shape(rows, cols, block), block


def _expand(t: torch.Tensor, strategy: str, args: dict, rows: int, cols: int) -> torch.Tensor:
    """A scale or zero point broadcast to (rows, cols) by ``strategy`` (no larger allocation than that)."""
    shape, block = _grid(strategy, args, rows, cols)
    return spread(t.reshape(shape), rows, cols, block)


def _expected(args: dict, fmt: str, rows: int, cols: int) -> dict[str, tuple[int, ...]]:
    """The shape each stored part must have, for a (rows, cols) weight in format ``fmt`` with ``args``."""
    strategy, bits = args.get("strategy") or "tensor", int(args.get("num_bits") or 8)
    grid = _grid(strategy, args, rows, cols)[0]
    if fmt == "pack-quantized":
        want = {"weight_packed": (rows, -(-cols * bits // 32))}
        if strategy in ("group", "channel"):
            want["weight_zero_point"] = (-(-rows * bits // 32), grid[1])
    else:
        want = {"weight": (rows, cols)}
    want.update(weight_scale=grid, weight_g_idx=(cols,))
    if "weight_zero_point" not in want:
        want["weight_zero_point"] = grid
    return want


def _same(stored: tuple, want: tuple) -> bool:
    """Stored scale shapes the library writes either way: (rows,) for (rows, 1), (1,) or () for (1, 1)."""
    return stored == want or (want[-1:] == (1,) and stored == want[:-1]) or (want == (1, 1) and stored in ((), (1,)))


def _packed_dims(parts: dict) -> tuple[int, int] | str:
    """A pack-quantized module's ``(rows, cols)`` from its ``weight_shape``, or what is wrong with it."""
    if "weight_packed" not in parts or "weight_shape" not in parts:
        return f"a pack-quantized module needs weight_packed and weight_shape (has {', '.join(sorted(parts))})"
    shape, packed = parts["weight_shape"], parts["weight_packed"]
    if math.prod(shape_of(shape)) != 2 or not shape.dtype.startswith(("int", "uint")):
        return f"weight_shape has shape {shape_of(shape)} ({shape.dtype}), not 2 integers"
    if len(shape_of(packed)) != 2 or packed.dtype != "int32":
        return f"weight_packed has shape {shape_of(packed)} ({packed.dtype}), not 2-D int32"
    dims = tuple(int(v) for v in shape.read().reshape(-1).tolist())
    return dims if all(d > 0 for d in dims) else f"weight_shape is {list(dims)}, not two positive integers"


def check_compressed(parts: dict, args: dict, fmt: str) -> str:
    """What is wrong with a compressed-tensors module's records (``""`` when nothing).

    The packed module's ``weight_shape`` must be two positive integers its
    ``weight_packed`` words hold exactly; every scale, zero point and
    ``g_idx`` must have the shape the strategy gives the weight.
    """
    if fmt == "pack-quantized":
        dims = _packed_dims(parts)
        if isinstance(dims, str):
            return dims
        what = f"weight_shape {list(dims)}"
    elif "weight" not in parts or len(shape_of(parts["weight"])) != 2:
        return f"{fmt} needs a 2-D weight beside weight_scale (has {', '.join(sorted(parts))})"
    else:
        dims = shape_of(parts["weight"])
        what = f"a weight of shape {dims}"
    for part, want in _expected(args, fmt, *dims).items():
        if part in parts and not _same(shape_of(parts[part]), want):
            return (f"{part} has shape {shape_of(parts[part])}, but {what} with strategy "
                    f"{args.get('strategy') or 'tensor'} needs {want}; the file and its quantization_config disagree")
    return ""


def dequantize_compressed(parts: dict, args: dict, fmt: str) -> torch.Tensor:
    """W (out, in), float32, of one module in compressed-tensors format ``fmt`` with weight ``args``.

    Raises
    ------
    QuantizedLayoutError
        A ``weight_g_idx`` that reorders the groups (path and tensor left empty: the reader names them).
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
        raise QuantizedLayoutError("", "", "compressed-tensors group with activation order",
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
        dtype="compressed-tensors", check=lambda p, prefix: check_compressed(p, *_scheme_for(schemes, prefix, path)),
    ), "compressed-tensors " + "; ".join(described)
