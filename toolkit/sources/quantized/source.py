"""A source whose quantised tensors read as float32 (float64 where float32 would hold only subnormals),
one tensor at a time.

A format (:class:`Format`) says which stored tensors make up one quantised
parameter (``q_proj.weight`` + ``q_proj.weight_scale_inv``; ``qweight`` +
``qzeros`` + ``scales`` + ``g_idx``...) and how to turn them into the
parameter's values. :class:`QuantizedSource` groups the stored records of
a checkpoint by those names and yields one record per parameter, named and
shaped as in the unquantised checkpoint (``model.layers.0.self_attn.q_proj.weight``,
(out, in)), whose ``read()`` reads its parts and dequantises; every other
tensor passes through unchanged. A stored tensor that looks like a
quantisation part but belongs to no complete group is refused, never read
as weights; so are the parts of a group that do not fit together or the
config (each method's :attr:`Format.check`, before anything is read), and
quantised parts in a checkpoint without a usable ``quantization_config``.

A format that declares its ``stacked`` parts (MXFP4's blocks and scales,
FP8's weight and scale grid) reads a 3-D parameter, a stack of routed
experts, one expert at a time: the record's ``_row_reader(start, stop)``
reads rows ``start:stop`` of those parts alone and dequantises them, so
:mod:`toolkit.sources.expert_slices` cuts it per expert as it cuts a bf16
stack, and peak memory stays near one expert's matrix.
"""

from __future__ import annotations

from functools import partial
from reprlib import repr as shown

import torch

from toolkit.errors import QuantizedLayoutError, UnsupportedQuantizationError
from toolkit.sources.base import Source, TensorRecord
from toolkit.sources.quantized.base import Format
from toolkit.sources.quantized.methods import quantization_config, raw_quantization_config, reader_of


def _dequantised(fmt: Format, parts: dict, prefix: str, file: str, name: str) -> torch.Tensor:
    """``fmt.dequantize(parts, prefix)``; an error of it names ``file`` and the parameter ``name``."""
    try:
        return fmt.dequantize(parts, prefix)
    except QuantizedLayoutError as exc:
        if exc.path:
            raise
        raise QuantizedLayoutError(file, name, exc.method, exc.reason.split(": ", 1)[-1]) from None


def _float(out: torch.Tensor) -> torch.Tensor:
    """A dequantised tensor as float32, or float64 where the format made it so (values float32 holds only
    as subnormals: :func:`~toolkit.sources.quantized.mxfp4.dequantize_mxfp4`)."""
    return out if out.dtype == torch.float64 else out.to(torch.float32)


def _read_group(fmt: Format, records: dict[str, TensorRecord], prefix: str, name: str) -> torch.Tensor:
    parts = {part: rec.read() for part, rec in records.items()}
    file = records[fmt.primary].file
    out = _dequantised(fmt, parts, prefix, file, name)
    shape = fmt.shape(records, prefix)
    if tuple(out.shape) != tuple(shape):
        raise QuantizedLayoutError(file, name, fmt.method, f"dequantises to shape {tuple(out.shape)}, not the "
                                   f"{tuple(shape)} its parts declare")
    return _float(out)


def _read_group_rows(fmt: Format, records: dict[str, TensorRecord], prefix: str, name: str, shape: tuple,
                     start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of a stacked parameter from the same rows of its :attr:`Format.stacked` parts."""
    start, stop = max(0, min(start, shape[0])), max(0, min(stop, shape[0]))
    stop = max(start, stop)
    parts = {part: records[part]._row_reader(start, stop) for part in fmt.stacked}
    out = _dequantised(fmt, parts, prefix, records[fmt.primary].file, name)
    if tuple(out.shape) != (stop - start, *shape[1:]):
        raise QuantizedLayoutError(records[fmt.primary].file, name, fmt.method, f"rows {start}:{stop} dequantise to "
                                   f"shape {tuple(out.shape)}, not {(stop - start, *shape[1:])}")
    return _float(out)


def _row_reader(fmt: Format, group: dict[str, TensorRecord], prefix: str, name: str, shape: tuple):
    """The ``_row_reader`` of a stacked 3-D parameter whose stacked parts read rows, else None."""
    parts = [group.get(p) for p in fmt.stacked]
    if len(shape) != 3 or not parts or any(
            r is None or not r.can_read_rows or not r.shape or r.shape[0] != shape[0] for r in parts):
        return None
    return partial(_read_group_rows, fmt, dict(group), prefix, name, shape)


class QuantizedSource(Source):
    """``inner`` (a safetensors or .bin source of a quantised checkpoint) with its quantised
    parameters dequantised on read by ``fmt``.

    Attributes
    ----------
    quantization : str
        The stored format in words (``"fp8 e4m3, 128x128 blocks"``), also in the Dataset attrs.

    Raises
    ------
    UnsupportedQuantizationError
        A group lacking a part it needs, or a stored tensor named like a
        quantisation part (or an integer/float8 ``weight``) that belongs to no group.
    QuantizedLayoutError
        A group whose parts do not fit together or the config (:attr:`Format.check`),
        before anything is read; on read, a part that dequantises otherwise than declared.
    """

    def __init__(self, inner: Source, fmt: Format, description: str):
        self.inner, self.fmt, self.quantization = inner, fmt, description
        for key in ("location", "format", "config", "fingerprint", "revision", "missing_config"):
            setattr(self, key, getattr(inner, key))
        self._records = self._group(list(inner.tensors()))

    def _group(self, stored: list[TensorRecord]) -> list[TensorRecord]:
        fmt = self.fmt
        groups: dict[str, dict[str, TensorRecord]] = {}
        for rec in stored:
            m = fmt.pattern.match(rec.name)
            if m is not None:
                groups.setdefault(m["prefix"], {})[m["part"]] = rec
        out, consumed = [], set()
        for rec in stored:
            m = fmt.pattern.match(rec.name)
            group = groups.get(m["prefix"], {}) if m is not None else {}
            if fmt.primary not in group:
                if rec.dtype.startswith(("float8", "int32", "uint8", "int8")) and rec.name.endswith(
                        ("weight", "qweight", "qzeros", "_blocks", "_scales", "weight_packed")):
                    raise UnsupportedQuantizationError(
                        rec.file, fmt.method, [fmt.method], f"tensor {rec.name!r} is stored as {rec.dtype} but has "
                        f"no {fmt.primary!r} beside it, so it cannot be dequantised (a shard missing, or a layout "
                        "this reader does not know)",
                    )
                out.append(rec)
                continue
            if m["prefix"] in consumed:
                continue
            consumed.add(m["prefix"])
            missing = [p for p in fmt.required if p not in group]
            if missing:
                raise UnsupportedQuantizationError(
                    rec.file, fmt.method, [fmt.method],
                    f"{m['prefix']!r} lacks {', '.join(missing)} (has {', '.join(sorted(group))})",
                )
            name = fmt.output(m["prefix"])
            first = group[fmt.primary]
            problem = fmt.check(group, m["prefix"])
            if problem:
                raise QuantizedLayoutError(first.file, name, fmt.method, problem)
            shape = tuple(fmt.shape(group, m["prefix"]))
            out.append(TensorRecord(name, shape, fmt.dtype,
                                    partial(_read_group, fmt, dict(group), m["prefix"], name), file=first.file,
                                    stored_name=first.stored_name or first.name,
                                    _row_reader=_row_reader(fmt, group, m["prefix"], name, shape)))
        return out

    def tensors(self):
        """The unquantised view: one record per parameter, quantised ones dequantised on read."""
        yield from self._records

    def files(self) -> list[str]:
        return self.inner.files()

    def reopen_location(self) -> str:
        """The inner source's (a signed URL's query kept for a Dask worker)."""
        return self.inner.reopen_location()

    def check_unchanged(self) -> None:
        """The inner source's check (a remote one's files are URLs, checked by the versions its responses show)."""
        self.inner.check_unchanged()


#: Dtypes quantised parts are stored in (never weights to read as they are beside a scale).
_PACKED = ("float8", "int8", "int32", "uint8", "int4", "uint4")
#: Companions that make a stored tensor ``<name>`` a quantised part: ``<name><suffix>`` exists.
_COMPANIONS = ("_scale_inv", "_scale")
#: ... or ``<prefix>.<part>`` beside ``<prefix>.<stored>`` (GPTQ/AWQ ``qweight`` + ``scales``, packed weights).
_SIBLINGS = {"qweight": "scales", "weight_packed": "weight_scale"}


def stray_quantized_part(records) -> tuple[TensorRecord, str] | None:
    """A stored tensor that is a quantised part (float8/int weights beside their scales, ``qweight``,
    ``*_blocks`` beside ``*_scales``...) and its companion, or None.

    For a checkpoint without a usable ``quantization_config``: such a tensor
    read as it is would be the packed integers or the unscaled float8
    values, not the weights (an FP8 ``q_proj`` of Frobenius norm 5502 for 0.64).
    """
    names = {r.name: r for r in records}
    for rec in names.values():
        if not rec.dtype.startswith(_PACKED):
            continue
        prefix, _, part = rec.name.rpartition(".")
        companions = [rec.name + c for c in _COMPANIONS] + [f"{prefix}.{_SIBLINGS.get(part, '')}"]
        if rec.name.endswith("_blocks"):
            companions.append(rec.name.removesuffix("_blocks") + "_scales")
        found = next((c for c in companions if c in names and c != rec.name), None)
        if found is not None:
            return rec, found
    return None


def _refuse_stray_parts(src: Source, raw) -> None:
    """Refuse a checkpoint holding quantised parts whose config has no usable ``quantization_config``.

    Raises
    ------
    QuantizedLayoutError
        Naming the file, the tensor and its companion, and what the config holds.
    """
    found = stray_quantized_part(src.tensors())
    if found is None:
        return
    rec, companion = found
    what = "no quantization_config" if raw is None else f"a quantization_config of {shown(raw)} (not a mapping)"
    raise QuantizedLayoutError(
        rec.file or src.location, rec.name, "unknown quantisation",
        f"it is stored as {rec.dtype} beside {companion!r}, a quantised weight and its scale, but the config has "
        f"{what}, so the quantisation method is unknown and the stored values are not the weights. Use the "
        "config.json published with these weights (its quantization_config says how to dequantise them)",
    )


def quantized_source(src: Source) -> Source:
    """``src`` with its quantised tensors dequantised on read, or ``src`` itself when its config
    has no ``quantization_config`` (and holds no quantised tensor).

    Raises
    ------
    UnsupportedQuantizationError
        An unknown ``quant_method`` or bit width (naming it and listing :data:`SUPPORTED`),
        or stored tensors that do not fit the method's layout.
    QuantizedLayoutError
        Quantised tensors (float8 or integer weights beside their scales) in a checkpoint whose
        ``quantization_config`` is missing, null or not a mapping (``"fp8"``, ``[]``).
    """
    if src.format not in ("safetensors", "pytorch"):
        return src
    qc = quantization_config(src.config)
    if qc is None:
        _refuse_stray_parts(src, raw_quantization_config(src.config))
        return src
    path = src.files()[0] if src.files() else src.location
    fmt, description = reader_of(qc, path)
    return QuantizedSource(src, fmt, description)
