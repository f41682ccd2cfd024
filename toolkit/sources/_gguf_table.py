"""The tensor table of a GGUF file, read without its tensor data.

``gguf.GGUFReader`` parses every metadata array into numpy views, which takes
seconds on a 262k-token vocabulary; listing tensors needs only the table, so
it is walked here with ``struct`` over a memory map (format:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md). Tensor bytes are
handed out as numpy views of the map, shaped the way ``gguf.GGUFReader``
shapes them, so ``gguf.dequantize`` treats them identically.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from toolkit.errors import CheckpointFileError

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One tensor of the table.

    Attributes
    ----------
    name : str
        GGUF name (``blk.0.attn_q.weight``).
    shape : tuple of int
        Logical shape in torch order (GGUF lists dims fastest first; reversed here).
    ggml_type : int
        ``gguf.GGMLQuantizationType`` value.
    start, nbytes : int
        Absolute byte offset in the file and byte length.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    start: int
    nbytes: int

    @property
    def type_name(self) -> str:
        """``"Q4_K"``, ``"F16"``... as gguf names the type."""
        from gguf import GGMLQuantizationType

        return GGMLQuantizationType(self.ggml_type).name


@dataclass(frozen=True)
class GGUFTable:
    """Metadata scalars and the tensor table of a GGUF file."""

    path: str
    metadata: dict
    tensors: tuple[GGUFTensorInfo, ...]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))


def _string(buf, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, pos)
    pos += 8
    return bytes(buf[pos : pos + n]).decode("utf-8", errors="replace"), pos + n


def _value(buf, pos: int, vtype: int):
    """One metadata value (arrays skipped, returned as None) and the offset after it."""
    if vtype in _SCALAR:
        fmt = _SCALAR[vtype]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if vtype == _STRING:
        return _string(buf, pos)
    if vtype == _ARRAY:
        etype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if etype in _SCALAR:
            return None, pos + count * struct.calcsize(_SCALAR[etype])
        for _ in range(count):
            _, pos = _value(buf, pos, etype)
        return None, pos
    raise ValueError(f"unknown metadata value type {vtype}")


def read_gguf_table(path: str | os.PathLike) -> GGUFTable:
    """Parse the header and tensor table of a GGUF file and check its size.

    Raises
    ------
    CheckpointFileError
        Not a GGUF file, an unsupported version, a header cut short, or tensor
        data that runs past the end of the file (truncated download or copy).
    """
    from gguf import GGML_QUANT_SIZES

    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size < 24 or fh.read(4) != b"GGUF":
            raise CheckpointFileError(path, "not a GGUF file (no 'GGUF' magic bytes at the start); re-download it")
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise CheckpointFileError(path, f"GGUF version {version} is not supported (2 and 3 are)")
        pos, metadata = 24, {}
        for _ in range(n_kv):
            key, pos = _string(buf, pos)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            metadata[key], pos = _value(buf, pos + 4, vtype)
        entries = []
        for _ in range(n_tensors):
            name, pos = _string(buf, pos)
            (ndim,) = struct.unpack_from("<I", buf, pos)
            dims = struct.unpack_from(f"<{ndim}Q", buf, pos + 4)
            gtype, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * ndim)
            pos += 4 + 8 * ndim + 12
            entries.append((name, tuple(int(d) for d in reversed(dims)), gtype, offset))
    except (struct.error, ValueError) as exc:
        raise CheckpointFileError(path, f"truncated or corrupted GGUF header ({exc}); re-download it") from exc
    finally:
        buf.close()
    align = int(metadata.get("general.alignment") or 32)
    data_start = (pos + align - 1) // align * align
    tensors = []
    for name, shape, gtype, offset in entries:
        if gtype not in GGML_QUANT_SIZES:
            raise CheckpointFileError(path, f"tensor {name!r} has ggml type {gtype}, unknown to gguf-py; upgrade gguf")
        block, type_size = GGML_QUANT_SIZES[gtype]
        nbytes = int(np.prod(shape, dtype=np.int64)) // block * type_size
        tensors.append(GGUFTensorInfo(name, shape, gtype, data_start + offset, nbytes))
    end = max((t.start + t.nbytes for t in tensors), default=data_start)
    if end > size:
        short = [t.name for t in tensors if t.start + t.nbytes > size]
        raise CheckpointFileError(
            path,
            f"truncated: tensor data runs to byte {end} but the file has {size} bytes "
            f"({len(short)} tensors cut off, first {short[0]!r}); re-download or re-copy the file",
        )
    return GGUFTable(str(path), metadata, tuple(tensors))


def tensor_data(info: GGUFTensorInfo, path: str) -> np.ndarray:
    """The raw stored array of one tensor, shaped as ``gguf.GGUFReader`` shapes it.

    Float and integer types come typed with the logical shape; quantised types
    (and BF16) as ``uint8`` rows of blocks. Reads the bytes from disk now.
    """
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quant_shape_to_byte_shape

    typed = {T.F32: np.float32, T.F16: np.float16, T.F64: np.float64, T.I8: np.int8,
             T.I16: np.int16, T.I32: np.int32, T.I64: np.int64}
    with open(path, "rb") as fh:
        fh.seek(info.start)
        raw = fh.read(info.nbytes)
    if len(raw) != info.nbytes:
        raise CheckpointFileError(path, f"tensor {info.name!r} is cut short; the file changed or is truncated")
    gtype = T(info.ggml_type)
    if gtype in typed:
        return np.frombuffer(raw, dtype=typed[gtype]).reshape(info.shape)
    return np.frombuffer(raw, dtype=np.uint8).reshape(quant_shape_to_byte_shape(info.shape, gtype))


# ---------------------------------------------------------------- metadata as gguf.GGUFReader fields

_NP = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
       7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}


class MetadataReader:
    """The part of ``gguf.GGUFReader`` that ``transformers``' config derivation reads.

    ``load_gguf_checkpoint(path, return_tensors=False)`` reads ``fields``
    (``ReaderField`` objects: ``parts`` indexed by ``data``, ``types``) and
    the names of ``tensors``. ``GGUFReader`` builds a NumPy view per element
    of every metadata array, which for a tokenizer of 50k-260k strings takes
    seconds; here the fields are built the same way, part for part, from
    one read of the header, and the tokenizer's arrays (which feed only the
    tokenizer, never the config) are left empty, except the token list when
    the config takes its vocabulary size from it (no ``<arch>.vocab_size``).

    Parameters
    ----------
    path : str or path-like
        A GGUF file already checked by :func:`read_gguf_table`.
    """

    def __init__(self, path):
        from gguf.gguf_reader import ReaderField

        with open(path, "rb") as fh:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            _, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
            pos, raw = 24, []
            for _ in range(n_kv):
                start = pos
                (klen,) = struct.unpack_from("<Q", buf, pos)
                key = bytes(buf[pos + 8 : pos + 8 + klen]).decode("utf-8", errors="replace")
                (vtype,) = struct.unpack_from("<I", buf, pos + 8 + klen)
                head = [np.array([klen], np.uint64), np.frombuffer(key.encode(), np.uint8), np.array([vtype], np.uint32)]
                raw.append((start, key, vtype, head, pos + 12 + klen))
                _, pos = _value(buf, pos + 12 + klen, vtype)
            arch = next((str(_value(buf, p, t)[0]) for _, k, t, _, p in raw if k == "general.architecture"), "")
            keep_tokens = f"{arch}.vocab_size" not in {k for _, k, *_ in raw}
            self.fields = {  # GGUFReader's first three fields, from the fixed header
                "GGUF.version": ReaderField(4, "GGUF.version", [np.frombuffer(buf, np.uint32, 1, 4).copy()], [0], [4]),
                "GGUF.tensor_count": ReaderField(8, "GGUF.tensor_count", [np.array([n_tensors], np.uint64)], [0], [10]),
                "GGUF.kv_count": ReaderField(16, "GGUF.kv_count", [np.array([n_kv], np.uint64)], [0], [10]),
            }
            for start, key, vtype, head, vpos in raw:
                skip = key.startswith("tokenizer.") and not (keep_tokens and key == "tokenizer.ggml.tokens")
                parts, data, types = _parts(buf, vpos, vtype, skip)
                self.fields[key] = ReaderField(start, key, head + parts, [i + len(head) for i in data], types)
            names = []
            for _ in range(n_tensors):
                name, pos = _string(buf, pos)
                (ndim,) = struct.unpack_from("<I", buf, pos)
                pos += 4 + 8 * ndim + 12
                names.append(name)
        finally:
            buf.close()
        self.tensors = [_Named(n) for n in names]


class _Named:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def _parts(buf, pos: int, vtype: int, skip_arrays: bool = False):
    """``(parts, data indices, types)`` of one value, as ``GGUFReader._get_field_parts`` makes them."""
    if vtype in _NP:
        return [np.frombuffer(buf, dtype=_NP[vtype], count=1, offset=pos).copy()], [0], [vtype]
    if vtype == _STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return [np.array([n], np.uint64), np.frombuffer(bytes(buf[pos + 8 : pos + 8 + n]), np.uint8)], [1], [vtype]
    if vtype == _ARRAY:
        etype, count = struct.unpack_from("<IQ", buf, pos)
        parts, data, types = [np.array([etype], np.uint32), np.array([count], np.uint64)], [], [vtype]
        if skip_arrays:
            return parts, data, types + [etype]
        p = pos + 12
        for i in range(count):
            sub, sub_data, sub_types = _parts(buf, p, etype)
            if i == 0:
                types += sub_types
            data += [len(parts) + j for j in sub_data]
            parts += sub
            _, p = _value(buf, p, etype)
        if count == 0:
            types.append(etype)
        return parts, data, types
    raise ValueError(f"unknown metadata value type {vtype}")
