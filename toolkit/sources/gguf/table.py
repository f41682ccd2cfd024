"""The header of a GGUF file (metadata and tensor table), read without its tensor data.

The toolkit's one walker of a GGUF header: :func:`read_gguf_table` gives both
the tensor table and the metadata the config is derived from
(:func:`toolkit.sources.gguf.transformers_plan.gguf_config`). ``gguf.GGUFReader`` parses every
metadata array into numpy views, which takes seconds on a 262k-token
vocabulary; here the header is walked once with ``struct`` over a memory map
(format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), scalars
and strings parsed, arrays only located (:class:`GGUFArray`, read on demand).
Tensor bytes are handed out as numpy arrays shaped the way ``gguf.GGUFReader``
shapes them, so ``gguf.dequantize`` treats them identically.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from toolkit.errors import CheckpointFileError

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NP = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
       7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")


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
    header: Prefix | None = field(default=None, repr=False, compare=False)

    def values(self) -> list:
        """The elements as Python values (int, float, bool, str; a list for nested arrays), read from the file
        (from the header bytes already read, for a remote file)."""
        if self.header is not None:
            return _elements(self.header, self.offset, self.element_type, self.count)[0]
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


#: How deep arrays of arrays may nest (gguf-py and llama.cpp write none; a corrupted file may claim millions).
MAX_NESTING = 8
#: The most dimensions a GGUF tensor has (``GGML_MAX_DIMS``).
MAX_DIMS = 4
#: The longest tensor name taken (llama.cpp refuses names of ``GGML_MAX_NAME`` = 64 bytes or more).
MAX_TENSOR_NAME = 1024
#: The longest metadata key taken (the spec's keys are short ASCII paths).
MAX_KEY = 65536


def need_more(end: int) -> EOFError:
    """The signal that the parse of a :class:`Prefix` reached byte ``end`` (``args[0]``), past the bytes read
    so far: read more and parse again (an ``EOFError``, which no check of the file raises)."""
    return EOFError(end)


class Prefix:
    """The first bytes of a file of ``size`` bytes (a remote file's header, read by ranges).

    ``len()`` is the file's size, so every count is checked against the whole
    file as for a local one; slicing past the bytes held raises :func:`need_more`'s ``EOFError``.
    """

    def __init__(self, data: bytes, size: int):
        self.data, self.size = data, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice) -> bytes:
        if key.stop > len(self.data):
            raise need_more(key.stop)
        return self.data[key]


def _unpack(fmt: str, buf, pos: int) -> tuple:
    """``struct.unpack_from`` that names the offset when the file ends first."""
    end = pos + struct.calcsize(fmt)
    if end > len(buf):
        raise ValueError(f"the header runs past the end of the file (at byte {pos} of {len(buf)})")
    if isinstance(buf, Prefix):
        if end > len(buf.data):
            raise need_more(end)
        buf = buf.data
    return struct.unpack_from(fmt, buf, pos)


def _string(buf, pos: int, limit: int | None = None, what: str = "a string") -> tuple[str, int]:
    (n,) = _unpack("<Q", buf, pos)
    pos += 8
    if n > len(buf) - pos:
        raise ValueError(
            f"{what} at byte {pos - 8} declares {n} bytes, more than the {len(buf) - pos} left in the file"
        )
    if limit is not None and n > limit:
        raise ValueError(f"{what} at byte {pos - 8} declares {n} bytes, more than the {limit} a GGUF file uses")
    return bytes(buf[pos : pos + n]).decode("utf-8", errors="replace"), pos + n


def _count(buf, pos: int, count: int, per: int) -> None:
    """Refuse an array of ``count`` elements of at least ``per`` bytes each that cannot fit in the file."""
    if count * per > len(buf) - pos:
        raise ValueError(
            f"an array at byte {pos} declares {count} elements, more than the {len(buf) - pos} bytes left in the "
            "file can hold"
        )


def _value(buf, pos: int, vtype: int, path: str):
    """One metadata value (an array as a :class:`GGUFArray`) and the offset after it."""
    if vtype in _SCALAR:
        fmt = _SCALAR[vtype]
        return _unpack(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if vtype == _STRING:
        return _string(buf, pos)
    if vtype == _ARRAY:
        etype, count = _unpack("<IQ", buf, pos)
        held = buf if isinstance(buf, Prefix) else None
        return GGUFArray(path, etype, count, pos + 12, held), _skip(buf, pos + 12, etype, count)
    raise ValueError(f"unknown metadata value type {vtype}")


def _skip(buf, pos: int, etype: int, count: int, depth: int = 0) -> int:
    """The offset after ``count`` elements of type ``etype`` starting at ``pos``."""
    if depth > MAX_NESTING:
        raise ValueError(f"metadata arrays nested more than {MAX_NESTING} deep")
    if etype in _SCALAR:
        size = struct.calcsize(_SCALAR[etype])
        _count(buf, pos, count, size)
        return pos + count * size
    if etype == _STRING:
        _count(buf, pos, count, 8)
        return _skip_strings(buf, pos, count)
    if etype == _ARRAY:
        _count(buf, pos, count, 12)
        for _ in range(count):
            inner, n = _unpack("<IQ", buf, pos)
            pos = _skip(buf, pos + 12, inner, n, depth + 1)
        return pos
    raise ValueError(f"unknown metadata array element type {etype}")


def _skip_strings(buf, pos: int, count: int) -> int:
    """The offset after ``count`` length-prefixed strings at ``pos`` (a tokenizer's vocabulary: tens of thousands),
    each length read once, unpacked by a bound ``struct.Struct`` method in one loop (what :func:`_unpack` checks,
    without its call per string: about 5x faster)."""
    size = len(buf)
    data = buf.data if isinstance(buf, Prefix) else buf
    held = min(size, len(data))
    unpack = _U64.unpack_from
    for _ in range(count):
        if pos + 8 > held:
            if pos + 8 > size:
                raise ValueError(f"the header runs past the end of the file (at byte {pos} of {size})")
            raise need_more(pos + 8)
        pos += 8 + unpack(data, pos)[0]
        if pos > size:
            raise ValueError("a string array runs past the end of the file")
    return pos


def _elements(buf, pos: int, etype: int, count: int, depth: int = 0) -> tuple[list, int]:
    """``count`` elements of type ``etype`` at ``pos`` as Python values, and the offset after them."""
    if depth > MAX_NESTING:
        raise ValueError(f"metadata arrays nested more than {MAX_NESTING} deep")
    if etype in _NP:
        _count(buf, pos, count, np.dtype(_NP[etype]).itemsize)
        end = pos + count * np.dtype(_NP[etype]).itemsize
        return np.frombuffer(buf[pos:end], dtype=_NP[etype]).tolist(), end
    out = []
    _count(buf, pos, count, 8 if etype == _STRING else 12)
    for _ in range(count):
        if etype == _STRING:
            value, pos = _string(buf, pos)
        elif etype == _ARRAY:
            inner, n = _unpack("<IQ", buf, pos)
            value, pos = _elements(buf, pos + 12, inner, n, depth + 1)
        else:
            raise ValueError(f"unknown metadata array element type {etype}")
        out.append(value)
    return out, pos


#: Fewest bytes a metadata entry takes (key length, an empty key, value type, a one-byte value).
_MIN_KV = 8 + 4 + 1
#: Fewest bytes a tensor-table entry takes (name length, an empty name, ndim, type, offset).
_MIN_TENSOR = 8 + 4 + 4 + 8


def _version_problem(version: int) -> str:
    """The message for a GGUF version this reader does not take."""
    if version and not version & 0xFFFF:  # gguf-py's test: a big-endian file's version reads byte-swapped
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        return (
            f"a big-endian GGUF file (its version reads as {version}, {swapped} byte-swapped); convert it to "
            "little-endian with gguf-py's gguf_convert_endian.py"
        )
    if version == 1:
        return ("unsupported GGUF version 1 (this toolkit reads versions 2 and 3); convert the model again with a "
                "current llama.cpp (convert_hf_to_gguf.py)")
    return (f"unsupported GGUF version {version} (this toolkit reads versions 2 and 3); upgrade the toolkit and "
            "gguf, or convert the model again with llama.cpp's convert_hf_to_gguf.py")


def read_gguf_table(path: str | os.PathLike) -> GGUFTable:
    """Parse the header and tensor table of a GGUF file and check it against the file.

    Work and memory stay proportional to the file: every count the header
    declares (metadata entries, tensors, array elements, string lengths) is
    checked against the bytes that are left before it is used.

    Raises
    ------
    CheckpointFileError
        Not a GGUF file, the file cannot be read, an unsupported version, a
        header cut short or declaring more than the file holds, tensor dims
        or types that are invalid, tensor byte ranges that lie outside the
        data section, overlap or leave more than alignment padding between
        them (a tensor whose type or shape was changed), or tensor data that
        runs past the end of the file (truncated download or copy).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        fh = open(path, "rb")
    except OSError as exc:
        from toolkit.sources._common import open_failure

        raise open_failure(path, exc) from exc
    with fh:
        if size < 24 or fh.read(4) != b"GGUF":
            raise CheckpointFileError(path, "not a GGUF file (no 'GGUF' magic bytes at the start); re-download it")
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return parse_gguf_table(str(path), buf, size)
    finally:
        buf.close()


def parse_gguf_table(file: str, buf, size: int) -> GGUFTable:
    """Parse a GGUF header from ``buf``: the whole file (a memory map), or the :class:`Prefix` read so far.

    Parameters
    ----------
    file : str
        The file's path or URL (a :class:`RangePath` for a remote file), named in errors.
    buf : buffer or Prefix
        The file's bytes from byte 0.
    size : int
        The file's size in bytes.

    Raises
    ------
    EOFError
        ``buf`` is a :class:`Prefix` that ends before the tensor table does (:func:`need_more`: ``args[0]``
        is the byte the parse reached).
    CheckpointFileError
        As :func:`read_gguf_table`.
    """
    from gguf import GGML_QUANT_SIZES

    path = Path(file) if not isinstance(file, RangePath) else file
    if size < 24 or bytes(buf[0:4]) != b"GGUF":
        raise CheckpointFileError(path, "not a GGUF file (no 'GGUF' magic bytes at the start); re-download it")
    try:
        version, n_tensors, n_kv = _unpack("<IQQ", buf, 4)
        if version not in (2, 3):
            raise CheckpointFileError(path, _version_problem(version))
        if n_kv * _MIN_KV + n_tensors * _MIN_TENSOR > size - 24:
            raise CheckpointFileError(
                path, f"truncated or corrupted GGUF header: it declares {n_kv} metadata entries and {n_tensors} "
                f"tensors, more than a file of {size} bytes can hold; re-download it",
            )
        pos, metadata = 24, {}
        for _ in range(n_kv):
            key, pos = _string(buf, pos, MAX_KEY, "a metadata key")
            if key in metadata:  # gguf.GGUFReader refuses such a file too
                raise ValueError(f"metadata key {key!r} appears twice")
            (vtype,) = _unpack("<I", buf, pos)
            metadata[key], pos = _value(buf, pos + 4, vtype, file)
        entries, names = [], set()
        for _ in range(n_tensors):
            name, pos = _string(buf, pos, MAX_TENSOR_NAME, "a tensor name")
            if name in names:  # gguf.GGUFReader refuses it too
                raise ValueError(f"tensor {name!r} appears twice in the tensor table")
            names.add(name)
            (ndim,) = _unpack("<I", buf, pos)
            if ndim > MAX_DIMS:
                raise ValueError(f"tensor {name!r} has {ndim} dimensions, more than GGUF's {MAX_DIMS}")
            dims = _unpack(f"<{ndim}Q", buf, pos + 4)
            gtype, offset = _unpack("<IQ", buf, pos + 4 + 8 * ndim)
            pos += 4 + 8 * ndim + 12
            entries.append((name, tuple(int(d) for d in reversed(dims)), gtype, offset))
    except (struct.error, ValueError) as exc:
        if isinstance(exc, CheckpointFileError):
            raise
        raise CheckpointFileError(path, f"truncated or corrupted GGUF header ({exc}); re-download it") from exc
    align = _alignment(path, metadata.get("general.alignment", 32))
    data_start = (pos + align - 1) // align * align
    tensors = [_tensor_info(path, name, shape, gtype, data_start + offset, GGML_QUANT_SIZES, size)
               for name, shape, gtype, offset in entries]
    _check_ranges(path, tensors, data_start, size, align)
    return GGUFTable(file, metadata, tuple(tensors))


class RangePath(str):
    """The name of a GGUF file whose bytes are read by ``read(offset, nbytes)`` (a remote file), not from disk.

    A :class:`GGUFTable`'s ``path`` of that kind makes :func:`tensor_data` ask
    ``read`` for each tensor's bytes; it prints as the file's URL.
    """

    read: object

    def __new__(cls, name: str, read):
        obj = super().__new__(cls, name)
        obj.read = read
        return obj

    def __reduce__(self):
        return RangePath, (str(self), self.read)


def _alignment(path: Path, value) -> int:
    """``general.alignment``: a power of two (as llama.cpp requires), 32 when absent."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1) or value > 1 << 30:
        raise CheckpointFileError(
            path, f"general.alignment is {value!r}, not a power of two; the header is corrupted, re-download it"
        )
    return value


def _tensor_info(path: Path, name: str, shape: tuple[int, ...], gtype: int, start: int, sizes, size: int,
                 ) -> GGUFTensorInfo:
    """One entry of the tensor table, its type and byte length checked (exact integers: no product wraps)."""
    if gtype not in sizes:
        raise CheckpointFileError(path, f"tensor {name!r} has ggml type {gtype}, unknown to gguf-py; upgrade gguf")
    block, type_size = sizes[gtype]
    if not shape and block > 1:
        raise CheckpointFileError(
            path, f"tensor {name!r} has no dimensions but a quantised type (blocks of {block} values); the tensor "
            "table is corrupted, re-download the file",
        )
    if shape and shape[-1] % block:
        raise CheckpointFileError(
            path, f"tensor {name!r} has rows of {shape[-1]} values, not a multiple of its type's block of {block}; "
            "the tensor table is corrupted, re-download the file",
        )
    nbytes = math.prod(shape) // block * type_size
    if nbytes > size:
        raise CheckpointFileError(
            path, f"tensor {name!r} (shape {shape}, ggml type {gtype}) needs {nbytes} bytes, more than the whole file "
            f"({size} bytes): the file is truncated or its tensor table is corrupted; re-download it",
        )
    return GGUFTensorInfo(name, shape, gtype, start, nbytes)


def _check_ranges(path: Path, tensors: list[GGUFTensorInfo], data_start: int, size: int, align: int) -> None:
    """Each tensor's bytes lie inside the data section, no two overlap, and only alignment padding lies between."""
    end = max((t.start + t.nbytes for t in tensors), default=0)
    if end > size:
        short = [t.name for t in tensors if t.start + t.nbytes > size]
        raise CheckpointFileError(
            path,
            f"truncated: tensor data runs to byte {end} but the file has {size} bytes "
            f"({len(short)} tensors cut off, first {short[0]!r}); re-download or re-copy the file",
        )
    previous = None
    for t in sorted(tensors, key=lambda t: (t.start, t.nbytes)):
        reach = data_start if previous is None else previous.start + previous.nbytes
        if t.start < reach:
            raise CheckpointFileError(
                path, f"the tensor table is corrupted: tensor {t.name!r} (bytes {t.start}-{t.start + t.nbytes}) "
                f"overlaps tensor {previous.name!r} (bytes {previous.start}-{reach}); a tensor's type or shape was "
                "changed. Re-download or re-convert the file",
            )
        if t.start - reach >= align and t.nbytes:
            after = f"tensor {previous.name!r}" if previous is not None else "the start of the data section"
            raise CheckpointFileError(
                path, f"the tensor table is corrupted: {t.start - reach} bytes between {after} and tensor "
                f"{t.name!r} belong to no tensor (more than the {align}-byte alignment padding); a tensor's type or "
                "shape was changed. Re-download or re-convert the file",
            )
        if t.nbytes:
            previous = t


def metadata_value(raw):
    """A metadata value as ``transformers``' ``load_gguf_checkpoint`` parses it: an array as a list,
    one of one element as that element; anything else as it is."""
    if not isinstance(raw, GGUFArray):
        return raw
    values = raw.values()
    return values[0] if len(values) == 1 else values


def metadata_length(raw) -> int:
    """``len()`` of a value as :func:`metadata_value` gives it, without reading a long array."""
    if isinstance(raw, GGUFArray) and raw.count != 1:
        return raw.count
    return len(metadata_value(raw))


def tensor_data(info: GGUFTensorInfo, path: str) -> np.ndarray:
    """The raw stored array of one tensor, shaped as ``gguf.GGUFReader`` shapes it.

    Float and integer types come typed with the logical shape; quantised types
    (and BF16) as ``uint8`` rows of blocks. Reads the bytes now: from disk, or by a
    range request when ``path`` is a :class:`RangePath`.
    """
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quant_shape_to_byte_shape

    typed = {T.F32: np.float32, T.F16: np.float16, T.F64: np.float64, T.I8: np.int8,
             T.I16: np.int16, T.I32: np.int32, T.I64: np.int64}
    if isinstance(path, RangePath):
        raw = path.read(info.start, info.nbytes)
    else:
        try:
            with open(path, "rb") as fh:
                fh.seek(info.start)
                raw = fh.read(info.nbytes)
        except OSError as exc:
            from toolkit.sources._common import open_failure

            raise open_failure(path, exc) from exc
    if len(raw) != info.nbytes:
        raise CheckpointFileError(path, f"tensor {info.name!r} is cut short; the file changed or is truncated")
    gtype = T(info.ggml_type)
    if gtype in typed:
        return np.frombuffer(raw, dtype=typed[gtype]).reshape(info.shape)
    return np.frombuffer(raw, dtype=np.uint8).reshape(quant_shape_to_byte_shape(info.shape, gtype))

