"""Safetensors checkpoints: one ``model.safetensors`` or shards with an index.

The header of each file is parsed once, when the source is opened (8-byte
length + JSON), and checked by the ``safetensors`` library itself (its Rust
parser, the format's reference); a header it refuses is explained here
(a JSON list or string, a dtype that is no dtype name, byte ranges that
disagree with the shapes, a truncated file...). That lists every tensor's
dtype, shape and byte range without reading data. A tensor's bytes are then
read straight from its checked byte range, so a pass over a shard never
parses its header again (a header of a million entries is parsed once, not
once per tensor); the values are those ``safe_open(...).get_tensor(name)``
returns.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from toolkit.errors import CheckpointFileError, UnsupportedDtypeError
from toolkit.sources._common import (
    FileSource,
    missing_from_shard,
    open_failure,
    read_index,
    shards_of,
    shown,
)
from toolkit.sources.base import TensorRecord
from toolkit.sources.renaming import transformers_renamer
from toolkit.sources.saved_layout import SavedFormat

#: safetensors dtype codes -> torch dtype names.
DTYPES = {
    "BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
    "C64": "complex64", "F4": "float4_e2m1fn_x2", "F6_E2M3": "float6_e2m3", "F6_E3M2": "float6_e3m2",
}

#: Bits per element of each dtype code (the ``safetensors`` format's ``Dtype::bitsize``).
BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
    "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


#: The largest header the ``safetensors`` library accepts (its ``MAX_HEADER_SIZE``).
MAX_HEADER_SIZE = 100_000_000


def _not_safetensors(start: bytes, n: int, size: int) -> str:
    """The message for a file whose first 8 bytes are no plausible header length."""
    what = ""
    if start.startswith(b"version https://git-lfs"):
        what = (" It is a Git LFS pointer, not the weights: fetch them with `git lfs pull` in the clone "
                "(or download the file again).")
    elif start.lstrip()[:1] == b"<":
        what = " It looks like an HTML or XML page (a failed download?)."
    elif start.startswith(b"PK\x03\x04"):
        what = " It is a zip archive, as torch.save writes: if it is a PyTorch checkpoint, name it .bin."
    elif start.startswith(b"GGUF"):
        what = " It is a GGUF file: name it .gguf."
    return (
        f"not a safetensors file, or a corrupted one: its first 8 bytes give a header length of {n} bytes, "
        f"{'more than the whole file' if n > size else 'more than the rest of the file'} ({size} bytes), "
        f"and a safetensors header is a JSON object of at most {MAX_HEADER_SIZE} bytes.{what} "
        "Re-download the file, or check that it really is a safetensors file"
    )


class Entry(NamedTuple):
    """One tensor of a safetensors header, checked: where its bytes lie and what they hold."""

    dtype: str  #: torch dtype name (``"bfloat16"``)
    shape: tuple[int, ...]
    offset: int  #: absolute byte offset in the file
    nbytes: int
    code: str  #: the format's dtype code (``"BF16"``)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_header(path: Path) -> dict[str, Entry]:
    """The tensors of one safetensors file, in storage order, with their checked byte ranges.

    Parameters
    ----------
    path : Path
        A ``.safetensors`` file.

    Returns
    -------
    dict
        ``name -> Entry(dtype, shape, offset, nbytes, code)``, ordered by offset.

    Raises
    ------
    CheckpointFileError
        Not a safetensors file (its first 8 bytes are no plausible header
        length: random bytes, a Git LFS pointer, an HTML page...), the file
        cannot be read, the header is not a JSON object of tensor entries
        as the format defines them (a list or a string, a dtype that is not
        a dtype name of the format, a shape that is not a list of counts,
        byte ranges that disagree with the shape, overlap or leave gaps), or
        the file is shorter (truncated download or copy) or longer than its
        header says. A header is accepted exactly when the ``safetensors``
        library accepts it.
    """
    try:
        size = os.path.getsize(path)
        fh = open(path, "rb")
    except OSError as exc:
        raise open_failure(path, exc) from exc
    with fh:
        start = fh.read(HEADER_PROBE)
        n = header_length(path, start, size)
        raw = start[8:8 + n] + (fh.read(8 + n - len(start)) if 8 + n > len(start) else b"")
    refused = _refused_by_safetensors(path)
    header = _parsed(path, raw)
    del raw
    if not refused:
        return _trusted_entries(header, 8 + n)
    _entries(path, header, 8 + n, size)  # raises, naming what is wrong
    raise CheckpointFileError(path, f"the safetensors library refuses it ({refused}); re-download or re-save it")


#: Bytes read first from a file: the header length and the start of the header (enough to say what a file that
#: is no safetensors file is).
HEADER_PROBE = 8 + 65


def header_length(path, start: bytes, size: int) -> int:
    """The header length the first bytes of a file declare, checked against the file's size.

    Parameters
    ----------
    path : path-like or str
        The file (local or remote), named in errors.
    start : bytes
        The file's first ``min(size, HEADER_PROBE)`` bytes.
    size : int
        The file's size in bytes.

    Raises
    ------
    CheckpointFileError
        Fewer than 8 bytes; a length longer than the file (a truncated header
        when the header starts like one, else no safetensors file: the message
        says what the file looks like) or than the format allows.
    """
    if len(start) < 8:
        raise CheckpointFileError(path, f"only {size} bytes, not a safetensors file; re-download it")
    (n,) = struct.unpack("<Q", start[:8])
    if n > size - 8:
        if n <= MAX_HEADER_SIZE and start[8:9] == b"{":  # a real header, cut short
            raise CheckpointFileError(
                path, f"truncated: the header alone needs {n + 8} bytes, the file has {size}; re-download it"
            )
        raise CheckpointFileError(path, _not_safetensors(start[:HEADER_PROBE], n, size))
    if n > MAX_HEADER_SIZE:
        raise CheckpointFileError(
            path, f"its header declares {n} bytes, more than the {MAX_HEADER_SIZE} bytes the safetensors "
            "format allows (the safetensors library refuses it too); re-download or re-save the file",
        )
    return n


def _parsed(path, raw: bytes):
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointFileError(path, f"corrupted safetensors header ({exc}); re-download it") from exc


def header_entries(path, raw: bytes, size: int) -> dict[str, Entry]:
    """The checked entries of a header read from elsewhere than a local file (a remote file's ranges).

    Parameters
    ----------
    path : str
        The file (a URL), named in errors.
    raw : bytes
        The header's JSON (the ``n`` bytes after the first 8).
    size : int
        The file's size in bytes.

    Returns
    -------
    dict
        As :func:`read_header`; checked by :func:`_entries` as the ``safetensors`` library checks a header.

    Raises
    ------
    CheckpointFileError
        As :func:`read_header`.
    """
    return _entries(path, _parsed(path, raw), 8 + len(raw), size)


def _refused_by_safetensors(path: Path) -> str:
    """Why the ``safetensors`` library refuses the file's header (``""`` when it accepts it).

    Its (Rust) parser is the format's reference and parses a large header
    many times faster than Python; a header it accepts is read with
    :func:`_trusted_entries`, one it refuses is explained by :func:`_entries`.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt"):
            return ""
    except (SafetensorError, OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__


def _trusted_entries(header: dict, data_start: int) -> dict[str, Entry]:
    """The entries of a header the ``safetensors`` library has checked, in storage order."""
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        code = info["dtype"]
        start, stop = info["data_offsets"]
        tensors[name] = Entry(DTYPES.get(code) or code.lower(), tuple(info["shape"]), data_start + start,
                              stop - start, code)
    return dict(sorted(tensors.items(), key=lambda kv: (kv[1].offset, kv[1].nbytes)))


def _corrupted(path, what: str) -> CheckpointFileError:
    return CheckpointFileError(path, f"corrupted safetensors header: {what}; re-download or re-save the file")


def _bits(shape: list[int], bits: int, limit: int) -> int:
    """``prod(shape) * bits``, or ``limit + 1`` as soon as it exceeds ``limit`` (a hostile shape of a million huge
    dims never makes a huge integer)."""
    if 0 in shape:
        return 0
    total = bits
    for d in shape:
        total *= d
        if total > limit:
            return limit + 1
    return total


def _entries(path: Path, header, data_start: int, size: int) -> dict[str, Entry]:
    """The checked entries of a parsed header, as the ``safetensors`` library checks them."""
    if not isinstance(header, dict):
        raise _corrupted(path, f"the header is a JSON {type(header).__name__}, not an object of tensor entries")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _corrupted(path, "'__metadata__' is not an object of strings")
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise _corrupted(path, f"the entry of tensor {shown(name)} is a JSON {type(info).__name__}, not an object")
        code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(code, str) or code not in BITS:
            raise _corrupted(
                path, f"tensor {shown(name)} has dtype {shown(code)}, not a dtype of the format ({', '.join(BITS)})"
            )
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise _corrupted(
                path, f"tensor {shown(name)} has shape {shown(shape)}, not a list of non-negative integers"
            )
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)
                and offsets[0] <= offsets[1]):
            raise _corrupted(
                path, f"tensor {shown(name)} has data_offsets {shown(offsets)}, not [begin, end] with begin <= end"
            )
        bits = _bits(shape, BITS[code], 8 * size)
        if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
            needs = f"{bits / 8:g} bytes" if bits <= 8 * size else "more bytes than the file has"
            raise _corrupted(
                path, f"tensor {shown(name)} ({code}, shape {shown(shape)}) needs {needs}, its data_offsets "
                f"{shown(offsets)} hold {offsets[1] - offsets[0]}",
            )
        tensors[name] = Entry(DTYPES[code], tuple(shape), data_start + offsets[0], offsets[1] - offsets[0], code)
    ordered = dict(sorted(tensors.items(), key=lambda kv: (kv[1].offset, kv[1].nbytes)))
    end, previous = data_start, None
    for name, entry in ordered.items():
        if entry.offset != end:
            if previous is None:
                what = f"the first tensor, {shown(name)}, starts at byte {entry.offset - data_start} of the data, not 0"
            elif entry.offset < end:
                what = f"the byte ranges of tensors {shown(previous)} and {shown(name)} overlap"
            else:
                what = (f"{entry.offset - end} bytes between tensors {shown(previous)} and {shown(name)} belong to "
                        "no tensor")
            raise _corrupted(path, what)
        end, previous = entry.offset + entry.nbytes, name
    if end > size:
        raise CheckpointFileError(
            path, f"truncated: its header says the tensor data runs to byte {end}, the file has {size} bytes; "
            "re-download or re-save it",
        )
    if end < size:
        raise CheckpointFileError(
            path, f"{size - end} bytes follow the last tensor's data, which no safetensors writer leaves "
            "(two files joined, or a corrupted header); re-download or re-save it",
        )
    return ordered


def _read_tensor(path: str, name: str, entry: Entry, start: int | None = None, stop: int | None = None, *,
                 fill=None) -> torch.Tensor:
    """A stored tensor in its stored dtype, read from its checked byte range; only rows ``start:stop`` when given.

    ``fill(offset, view)`` fills ``view`` with the file's bytes from ``offset`` (a remote file's
    :meth:`~toolkit.sources.remote.http.RemoteFile.read_into`); None reads the local file ``path``."""
    dtype = getattr(torch, entry.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise UnsupportedDtypeError(
            path, name, entry.code, f"torch {torch.__version__} has no dtype for it; upgrade torch, or convert "
            "the tensor to another dtype and save the checkpoint again",
        )
    if BITS.get(entry.code, 8) < 8:
        raise UnsupportedDtypeError(
            path, name, entry.code, "a packed dtype of fewer than 8 bits per value, which this toolkit does not "
            "unpack yet; convert the tensor to float16 or bfloat16 and save the checkpoint again",
        )
    offset, nbytes, shape = entry.offset, entry.nbytes, entry.shape
    if start is not None:
        rows = shape[0]
        start = max(0, min(start, rows))
        stop = max(start, min(rows if stop is None else stop, rows))
        row_bytes = nbytes // rows if rows else 0
        offset, nbytes, shape = offset + start * row_bytes, (stop - start) * row_bytes, (stop - start, *shape[1:])
    # Uninitialised (numpy.empty): a zero-filled bytearray cost a memset of every tensor before
    # the read overwrote it, 20 % of a compare pass's samples (benchmarks/bench_scale.py).
    buf = np.empty(nbytes, dtype=np.uint8)
    if fill is not None:
        fill(offset, memoryview(buf))
        got = nbytes
    else:
        got = _fill_local(path, name, offset, buf)
    if got != nbytes:
        raise CheckpointFileError(
            path, f"tensor {name!r} is cut short ({got} of {nbytes} bytes): the file changed or was truncated "
            "after it was opened; open it again, or re-download it",
        )
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(buf).view(dtype).reshape(shape)


def _fill_local(path: str, name: str, offset: int, buf: np.ndarray) -> int:
    """Read ``len(buf)`` bytes of the local file ``path`` from ``offset`` into ``buf``; the count read."""
    nbytes, got = len(buf), 0
    try:
        with open(path, "rb", buffering=0) as fh:
            fh.seek(offset)
            view = memoryview(buf)
            while got < nbytes:
                n = fh.readinto(view[got:])
                if not n:
                    break
                got += n
    except OSError as exc:
        raise CheckpointFileError(
            path, f"cannot read tensor {name!r} ({type(exc).__name__}: {exc}); check the file, or re-download it"
        ) from exc
    return got


def sharded_entries(index_path, weight_map: dict[str, str], headers: list[dict[str, Entry]], files: list[str],
                    ) -> list[tuple[str, Entry, str]]:
    """``(stored name, entry, file)`` of every tensor of a sharded checkpoint, shard by shard.

    Parameters
    ----------
    index_path : path-like or str
        The index (local or remote), named in errors.
    weight_map : dict
        The index's tensor name -> shard file name.
    headers : list of dict
        Each shard's entries (:func:`read_header`), in the order of ``sorted(set(weight_map.values()))``.
    files : list of str
        Each shard's path or URL, in the same order.

    Raises
    ------
    CheckpointFileError
        The index puts a tensor in a shard that does not hold it.
    """
    wanted: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        wanted.setdefault(shard, []).append(name)
    entries = []
    for shard_name, header, file in zip(sorted(wanted), headers, files, strict=True):
        missing_from_shard(index_path, shard_name, wanted[shard_name], header)
        entries += [(name, entry, file) for name, entry in header.items()]
    return entries


class SafetensorsSource(FileSource):
    """Tensors of one safetensors file or of a sharded safetensors checkpoint.

    Build with :meth:`from_file` or :meth:`from_index`. Names are the stored
    names with ``transformers``' load-time renamings applied (see
    :func:`toolkit.sources.renaming.transformers_renamer`). Each file's header
    is parsed once, here; reading a tensor reads only its bytes.
    """

    def __init__(self, entries: list[tuple[str, Entry, str]], **kwargs):
        super().__init__(format="safetensors", **kwargs)
        self._entries = entries  # (stored name, entry, file)
        self._rename = transformers_renamer(self.config)
        self._names: list[str] | None = None  # the renamed names, found on the first pass

    @classmethod
    def from_file(cls, path: Path, *, config: dict, location: str, revision: str = "") -> SafetensorsSource:
        """Open a single ``.safetensors`` file.

        Raises
        ------
        CheckpointFileError
            Unreadable, truncated or corrupted file.
        """
        entries = [(name, entry, str(path)) for name, entry in read_header(path).items()]
        return cls(entries, config=config, location=location, files=[path], revision=revision)

    @classmethod
    def from_index(cls, index_path: Path, *, config: dict, location: str, revision: str = "") -> SafetensorsSource:
        """Open a sharded checkpoint from its ``model.safetensors.index.json``.

        Raises
        ------
        CheckpointFileError
            The index names a shard that is missing or outside the index's
            folder, or a tensor its shard does not hold; a shard is
            unreadable, truncated or corrupted.
        """
        weight_map = read_index(index_path)
        shards = shards_of(index_path, weight_map)
        headers = [read_header(shard) for shard in shards]
        entries = sharded_entries(index_path, weight_map, headers, [str(s) for s in shards])
        return cls(entries, config=config, location=location, files=shards, revision=revision)

    def _filler(self, file: str):
        """How the bytes of ``file`` are read: None, from local disk (a remote source gives its files' readers)."""
        return None

    def tensors(self) -> Iterator[TensorRecord]:
        """Yield one record per stored tensor, shard by shard in storage order.

        Yields
        ------
        TensorRecord
            ``read()`` returns the tensor in its stored dtype and shape.
        """
        if self._names is None:
            self._names = [self._rename(stored) for stored, _, _ in self._entries]
        for name, (stored, entry, file) in zip(self._names, self._entries, strict=True):
            fill = self._filler(file)
            reader = partial(_read_tensor, file, stored, entry, **({} if fill is None else {"fill": fill}))
            yield TensorRecord(
                name, entry.shape, entry.dtype, reader,
                file=file, stored_name=stored if name != stored else "", _row_reader=reader,
            )


class SafetensorsFormat(SavedFormat):
    """The registry entry of safetensors checkpoints (:mod:`toolkit.sources.formats`)."""

    name = "safetensors"
    description = "model.safetensors, or model.safetensors.index.json and its shards"
    single = "model.safetensors"
    index = "model.safetensors.index.json"
    index_suffix = ".safetensors.index.json"
    suffixes = (".safetensors",)
    source_class = SafetensorsSource
