"""GPTQ (``quant_method: gptq``) and AWQ (``quant_method: awq``, GEMM layout) integer weights.

GPTQ (AutoGPTQ / GPTQModel, ``checkpoint_format`` ``gptq`` or ``gptq_v2``):
``qweight`` int32 (in / p, out) packs p = 32 / bits consecutive input rows
per word; ``qzeros`` int32 (G, out / p) packs consecutive output columns;
``scales`` (G, out); ``g_idx`` (in,) the group of each input row (act-order),
else row i is in group i // group_size. W[o, i] = scales[g, o] · (q[i, o] − z[g, o])
with g = g_idx[i]; the ``gptq`` (v1) format stores z − 1, as AutoGPTQ's
``QuantLinear.pack`` writes it, so z = stored + 1 there.

AWQ (AutoAWQ, ``version: gemm``): ``qweight`` int32 (in, out / 8) and
``qzeros`` int32 (in / group, out / 8) pack 8 output columns per word in the
order [0, 2, 4, 6, 1, 3, 5, 7] (AutoAWQ's ``WQLinear_GEMM.from_linear``);
``scales`` (in / group, out); W[o, i] = scales[g, o] · (q[i, o] − z[g, o]), g = i // group_size.

Both return W in the ``nn.Linear`` orientation (out, in), float32.
"""

from __future__ import annotations

import re
from reprlib import repr as shown

import torch

from toolkit.errors import QuantizedLayoutError, UnsupportedQuantizationError
from toolkit.sources.quantized.base import Format, shape_of
from toolkit.sources.quantized.packing import unpack

_PATTERN = re.compile(r"^(?P<prefix>.+)\.(?P<part>qweight|qzeros|scales|g_idx)$")
#: The order AutoAWQ packs 8 output columns of 4 bits into a word.
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
GPTQ_BITS = (2, 4, 8)
GPTQ_FORMATS = ("gptq", "gptq_v2")


def _groups(n_in: int, group_size: int) -> int:
    """Groups of ``n_in`` input rows of ``group_size`` (one group for a per-channel ``group_size`` of -1 or 0)."""
    return -(-n_in // group_size) if group_size > 0 else 1


def check_int(parts: dict, *, awq: bool, bits: int, group_size: int) -> str:
    """What is wrong with a GPTQ (or AWQ, ``awq``) group's records (``""`` when nothing).

    Every part's shape follows from ``qweight``'s and the config: GPTQ
    ``qweight`` (in / p, out), ``qzeros`` (G, ⌈out / p⌉), ``scales`` (G, out),
    ``g_idx`` (in,); AWQ ``qweight`` (in, out / 8), ``qzeros`` (G, out / 8),
    ``scales`` (G, out); G = ⌈in / group_size⌉ (1 per channel), or any count
    ``g_idx`` indexes.
    """
    qw, qz, sc, gi = (parts.get(k) for k in ("qweight", "qzeros", "scales", "g_idx"))
    shapes = {k: shape_of(r) for k, r in (("qweight", qw), ("qzeros", qz), ("scales", sc)) if r is not None}
    flat = [k for k, v in shapes.items() if len(v) != 2]
    if flat:
        return (f"{flat[0]} has shape {shapes[flat[0]]}, not 2-D (qweight, qzeros and scales are matrices); "
                "a damaged file, or tensors of another quantisation")
    for k in ("qweight", "qzeros"):
        if parts[k].dtype not in ("int32", "uint32"):
            return f"{k} is stored as {parts[k].dtype}, not int32 words of packed {bits}-bit values"
    per = 32 // bits
    n_in, n_out = (shapes["qweight"][0], shapes["qweight"][1] * 8) if awq else (shapes["qweight"][0] * per,
                                                                                   shapes["qweight"][1])
    groups = shapes["scales"][0]
    if gi is None or awq:
        want = _groups(n_in, group_size)
        if groups != want:
            return (f"scales has {groups} rows, but {n_in} input rows in groups of {group_size} (group_size) make "
                    f"{want}; " + ("GPTQ-packed tensors (qweight (in/8, out)) under an awq config?" if awq else
                                   "a config of another group size?"))
    elif shape_of(gi) != (n_in,):
        return f"g_idx has shape {shape_of(gi)}, not ({n_in},): one group index per input row"
    want = {"scales": (groups, n_out), "qzeros": (groups, n_out // 8 if awq else -(-n_out // per))}
    for k, shape in want.items():
        if shapes[k] != shape:
            return (f"{k} has shape {shapes[k]}, not {shape}: {n_in} inputs and {n_out} outputs (from qweight "
                    f"{shapes['qweight']}) in {groups} groups")
    return ""


def dequantize_gptq(qweight, qzeros, scales, g_idx, *, bits: int, group_size: int, v1: bool) -> torch.Tensor:
    """GPTQ W (out, in), float32, from its packed parts (see the module docstring)."""
    q = unpack(qweight, bits, dim=0)  # (in, out)
    n_in, n_out = q.shape
    z = unpack(qzeros, bits, dim=1)[:, :n_out]
    if v1:
        z = z + 1
    if g_idx is None:
        g = torch.arange(n_in) // (group_size if group_size > 0 else n_in)
    else:
        g = g_idx.to(torch.int64)
    if g.ndim != 1 or g.numel() != n_in or int(g.max()) >= scales.shape[0] or int(g.min()) < 0:
        raise QuantizedLayoutError("", "", "gptq", f"g_idx / group_size give groups outside the {scales.shape[0]} "
                                   f"groups of scales (g_idx {tuple(g.shape)}, values {int(g.min())}.."
                                   f"{int(g.max())}); a config of another group size, or a damaged g_idx")
    w = (q - z[g]).to(torch.float32) * scales.to(torch.float32)[g]
    return w.t().contiguous()


def dequantize_awq(qweight, qzeros, scales, *, group_size: int) -> torch.Tensor:
    """AWQ (GEMM) W (out, in), float32, from its packed parts (see the module docstring)."""
    q = unpack(qweight, 4, dim=1, order=AWQ_ORDER)  # (in, out)
    z = unpack(qzeros, 4, dim=1, order=AWQ_ORDER)
    g = torch.arange(q.shape[0]) // (group_size if group_size > 0 else q.shape[0])
    w = (q - z[g]).to(torch.float32) * scales.to(torch.float32)[g]
    return w.t().contiguous()


def _int_setting(qc: dict, key: str, path: str, method: str, allowed=None) -> int:
    value = qc.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or (allowed is not None and value not in allowed):
        raise UnsupportedQuantizationError(path, f"{method} {key}={shown(value)}", [f"{method} bits {allowed}"]
                                           if allowed else [method], f"{key} must be " +
                                           (f"one of {allowed}" if allowed else "an integer"))
    return value


def gptq_format(qc: dict, path: str) -> tuple[Format, str]:
    """The :class:`Format` and description of a ``quant_method: gptq`` config.

    Raises
    ------
    UnsupportedQuantizationError
        bits other than 2, 4, 8 (3-bit words straddle), a ``checkpoint_format``
        other than gptq / gptq_v2 (marlin, ...).
    """
    bits = _int_setting(qc, "bits", path, "gptq", GPTQ_BITS)
    group = _int_setting(qc, "group_size", path, "gptq")
    layout = str(qc.get("checkpoint_format") or "gptq")
    if layout not in GPTQ_FORMATS:
        raise UnsupportedQuantizationError(path, f"gptq checkpoint_format={layout!r}", GPTQ_FORMATS,
                                           "that layout is not read; save the checkpoint in gptq format")
    v1 = layout == "gptq"
    return Format(
        method=f"gptq int{bits}", pattern=_PATTERN, primary="qweight", required=("qweight", "qzeros", "scales"),
        output=lambda prefix: f"{prefix}.weight",
        shape=lambda parts, _: (parts["qweight"].shape[1], parts["qweight"].shape[0] * (32 // bits)),
        dequantize=lambda p, _: dequantize_gptq(p["qweight"], p["qzeros"], p["scales"], p.get("g_idx"), bits=bits,
                                             group_size=group, v1=v1),
        dtype=f"gptq int{bits}", check=lambda parts, _: check_int(parts, awq=False, bits=bits, group_size=group),
    ), f"gptq int{bits}, group {group if group > 0 else 'per-channel'}{', act-order' if qc.get('desc_act') else ''}"


def awq_format(qc: dict, path: str) -> tuple[Format, str]:
    """The :class:`Format` and description of a ``quant_method: awq`` config.

    Raises
    ------
    UnsupportedQuantizationError
        bits other than 4, a ``version`` other than gemm (gemv, marlin, exllama...),
        or ``zero_point: false``.
    """
    bits = _int_setting(qc, "bits", path, "awq", (4,))
    group = _int_setting(qc, "group_size", path, "awq")
    version = str(qc.get("version") or "gemm").lower()
    if version != "gemm" or qc.get("zero_point") is False:
        raise UnsupportedQuantizationError(path, f"awq version={version!r} zero_point={qc.get('zero_point')!r}",
                                           ["awq gemm int4 with zero points"], "that layout is not read")
    return Format(
        method=f"awq int{bits}", pattern=_PATTERN, primary="qweight", required=("qweight", "qzeros", "scales"),
        output=lambda prefix: f"{prefix}.weight",
        shape=lambda parts, _: (parts["qweight"].shape[1] * 8, parts["qweight"].shape[0]),
        dequantize=lambda p, _: dequantize_awq(p["qweight"], p["qzeros"], p["scales"], group_size=group),
        dtype=f"awq int{bits}", check=lambda parts, _: check_int(parts, awq=True, bits=bits, group_size=group),
    ), f"awq int{bits} gemm, group {group}"
