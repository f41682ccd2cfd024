"""The header of a GGUF file (metadata and tensor table), read without its tensor data.

The toolkit's one walker of a GGUF header: :func:`read_gguf_table` gives both
the tensor table and the metadata the config is derived from
(:func:`toolkit.sources.gguf_.gguf_config`). ``gguf.GGUFReader`` parses every
metadata array into numpy views, which takes seconds on a 262k-token
vocabulary; here the header is walked once with ``struct`` over a memory map
(format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), scalars
and strings parsed, arrays only located (:class:`GGUFArray`, read on demand).
Tensor bytes are handed out as numpy arrays shaped the way ``gguf.GGUFReader``
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
_NP = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
       7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array of a GGUF file, located but not parsed.

    Attributes
    ----------
    path : str
        The file.
    element_type : int
        GGUF value type of the elements (``8`` string, ``9`` array, else a number type).
    count : int
        Number of elements.
    offset : int
        Absolute byte offset of the first element.
    """

    path: str
    element_type: int
    count: int
    offset: int

    def values(self) -> list:
        """The elements as Python values (int, float, bool, str; a list for nested arrays), read from the file."""
        with open(self.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _elements(buf, self.offset, self.element_type, self.count)[0]


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
    """The metadata and the tensor table of a GGUF file.

    ``metadata`` maps each key, in file order, to its value: int, float,
    bool or str, and a :class:`GGUFArray` for an array (read on demand).
    """

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


def _value(buf, pos: int, vtype: int, path: str):
    """One metadata value (an array as a :class:`GGUFArray`) and the offset after it."""
    if vtype in _SCALAR:
        fmt = _SCALAR[vtype]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if vtype == _STRING:
        return _string(buf, pos)
    if vtype == _ARRAY:
        etype, count = struct.unpack_from("<IQ", buf, pos)
        return GGUFArray(path, etype, count, pos + 12), _skip(buf, pos + 12, etype, count)
    raise ValueError(f"unknown metadata value type {vtype}")


def _skip(buf, pos: int, etype: int, count: int) -> int:
    """The offset after ``count`` elements of type ``etype`` starting at ``pos``."""
    if etype in _SCALAR:
        return pos + count * struct.calcsize(_SCALAR[etype])
    if etype == _STRING:
        for _ in range(count):
            (n,) = struct.unpack_from("<Q", buf, pos)
            pos += 8 + n
        if pos > len(buf):
            raise ValueError("a string array runs past the end of the file")
        return pos
    if etype == _ARRAY:
        for _ in range(count):
            inner, n = struct.unpack_from("<IQ", buf, pos)
            pos = _skip(buf, pos + 12, inner, n)
        return pos
    raise ValueError(f"unknown metadata array element type {etype}")


def _elements(buf, pos: int, etype: int, count: int) -> tuple[list, int]:
    """``count`` elements of type ``etype`` at ``pos`` as Python values, and the offset after them."""
    if etype in _NP:
        end = pos + count * np.dtype(_NP[etype]).itemsize
        if end > len(buf):
            raise ValueError("an array runs past the end of the file")
        return np.frombuffer(buf[pos:end], dtype=_NP[etype]).tolist(), end
    out = []
    for _ in range(count):
        if etype == _STRING:
            value, pos = _string(buf, pos)
        elif etype == _ARRAY:
            inner, n = struct.unpack_from("<IQ", buf, pos)
            value, pos = _elements(buf, pos + 12, inner, n)
        else:
            raise ValueError(f"unknown metadata array element type {etype}")
        out.append(value)
    return out, pos


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
    file = str(path)
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
            if key in metadata:  # gguf.GGUFReader refuses such a file too
                raise ValueError(f"metadata key {key!r} appears twice")
            (vtype,) = struct.unpack_from("<I", buf, pos)
            metadata[key], pos = _value(buf, pos + 4, vtype, file)
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
    return GGUFTable(file, metadata, tuple(tensors))


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

