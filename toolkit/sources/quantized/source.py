"""A source whose quantised tensors read as float32, one tensor at a time.

A format (:class:`Format`) says which stored tensors make up one quantised
parameter (``q_proj.weight`` + ``q_proj.weight_scale_inv``; ``qweight`` +
``qzeros`` + ``scales`` + ``g_idx``...) and how to turn them into the
parameter's values. :class:`QuantizedSource` groups the stored records of
a checkpoint by those names and yields one record per parameter, named and
shaped as in the unquantised checkpoint (``model.layers.0.self_attn.q_proj.weight``,
(out, in)), whose ``read()`` reads its parts and dequantises; every other
tensor passes through unchanged. A stored tensor that looks like a
quantisation part but belongs to no complete group is refused, never read
as weights.

A format that declares its ``stacked`` parts (MXFP4's blocks and scales,
FP8's weight and scale grid) reads a 3-D parameter, a stack of routed
experts, one expert at a time: the record's ``_row_reader(start, stop)``
reads rows ``start:stop`` of those parts alone and dequantises them, so
:mod:`toolkit.sources.expert_slices` cuts it per expert as it cuts a bf16
stack, and peak memory stays near one expert's matrix.
"""

from __future__ import annotations

from functools import partial

import torch

from toolkit.errors import UnsupportedQuantizationError
from toolkit.sources.base import Source, TensorRecord
from toolkit.sources.quantized.base import Format
from toolkit.sources.quantized.methods import quantization_config, reader_of


def _read_group(fmt: Format, records: dict[str, TensorRecord], prefix: str, name: str) -> torch.Tensor:
    parts = {part: rec.read() for part, rec in records.items()}
    out = fmt.dequantize(parts, prefix)
    shape = fmt.shape(records, prefix)
    if tuple(out.shape) != tuple(shape):
        raise UnsupportedQuantizationError(
            next(iter(records.values())).file, fmt.method, [fmt.method],
            f"{name} dequantises to shape {tuple(out.shape)}, not the {tuple(shape)} its parts declare",
        )
    return out.to(torch.float32)


def _read_group_rows(fmt: Format, records: dict[str, TensorRecord], prefix: str, name: str, shape: tuple,
                     start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of a stacked parameter from the same rows of its :attr:`Format.stacked` parts."""
    start, stop = max(0, min(start, shape[0])), max(0, min(stop, shape[0]))
    stop = max(start, stop)
    parts = {part: records[part]._row_reader(start, stop) for part in fmt.stacked}
    out = fmt.dequantize(parts, prefix)
    if tuple(out.shape) != (stop - start, *shape[1:]):
        raise UnsupportedQuantizationError(
            records[fmt.primary].file, fmt.method, [fmt.method],
            f"rows {start}:{stop} of {name} dequantise to shape {tuple(out.shape)}, not "
            f"{(stop - start, *shape[1:])}",
        )
    return out.to(torch.float32)


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

    def check_unchanged(self) -> None:
        """The inner source's check (a remote one's files are URLs, checked by the versions its responses show)."""
        self.inner.check_unchanged()


def quantized_source(src: Source) -> Source:
    """``src`` with its quantised tensors dequantised on read, or ``src`` itself when its config
    has no ``quantization_config``.

    Raises
    ------
    UnsupportedQuantizationError
        An unknown ``quant_method`` or bit width (naming it and listing :data:`SUPPORTED`),
        or stored tensors that do not fit the method's layout.
    """
    qc = quantization_config(src.config)
    if qc is None or src.format not in ("safetensors", "pytorch"):
        return src
    path = src.files()[0] if src.files() else src.location
    fmt, description = reader_of(qc, path)
    return QuantizedSource(src, fmt, description)
