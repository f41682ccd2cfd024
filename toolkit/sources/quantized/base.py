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
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from toolkit.errors import UnsupportedQuantizationError
from toolkit.sources.base import Source, TensorRecord


@dataclass(frozen=True)
class Format:
    """One quantisation format, as :class:`QuantizedSource` uses it.

    Attributes
    ----------
    method : str
        The ``quant_method`` (and layout) it reads, for messages.
    pattern : re.Pattern
        Matches a stored name as ``(?P<prefix>...)`` + separator + ``(?P<part>...)``.
    primary : str
        The part whose presence makes a group quantised (``weight_scale_inv``, ``qweight``...).
    required : tuple of str
        Parts a quantised group must have.
    output : callable
        ``output(prefix) -> str``: the name of the dequantised parameter.
    shape : callable
        ``shape(parts, prefix) -> tuple``: its shape from the parts' records (may read tiny tensors).
    dequantize : callable
        ``dequantize(parts, prefix) -> torch.Tensor`` from the parts' read tensors: float32, that shape.
    dtype : str
        The record's ``dtype`` label (``"fp8_e4m3 128x128"``, ``"gptq int4"``...).
    """

    method: str
    pattern: re.Pattern
    primary: str
    required: tuple[str, ...]
    output: Callable[[str], str]
    shape: Callable[[dict], tuple]
    dequantize: Callable[[dict], torch.Tensor]
    dtype: str


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
            setattr(self, key, getattr(inner, key, ""))
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
            out.append(TensorRecord(name, tuple(fmt.shape(group, m["prefix"])), fmt.dtype,
                                    partial(_read_group, fmt, dict(group), m["prefix"], name), file=first.file,
                                    stored_name=first.stored_name or first.name))
        return out

    def tensors(self):
        """The unquantised view: one record per parameter, quantised ones dequantised on read."""
        yield from self._records

    def files(self) -> list[str]:
        return self.inner.files()
