"""The zip layout of a ``torch.save`` file, checked as a format before any record's bytes are trusted.

A ``.bin`` written by ``torch.save`` (torch >= 1.6) is a zip archive whose
records torch writes uncompressed, so a reader that memory-maps the file (or
asks a server for a byte range) takes a record's bytes where its local header
ends. Any tool that rewrites the archive may store a record *deflated*: the
bytes there are then compressed data, and reading them as a tensor gives a
wrong number without any error. :func:`zip_records` reads the central
directory (``zipfile``) and each record's local header and checks every
assumption made about them:

- no encryption (flag bit 0 or 6): such a record cannot be read at all;
- the compression method is stored (0) or deflated (8), the two that
  ``torch.load`` reads; a stored record's compressed and uncompressed sizes agree;
- the local header is a local header (``PK\\x03\\x04``) and repeats the central
  directory's name and method (and sizes, unless the sizes follow in a data descriptor);
- each record's data lies inside the file, before the central directory, and
  no two records overlap.

Its answer says which records are compressed (:attr:`ZipRecord.compressed`):
a local file is then loaded without memory-mapping (``torch.load`` inflates
such records itself: exactly its values); a remote one is not read by range
(torch's own record offsets are not where a deflated record's data lies): a hub
repo's is downloaded, a URL's is refused with the way out. A record read whole
over HTTP is checked by its CRC-32 (:func:`inflate`).
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from toolkit.errors import CheckpointFileError

__all__ = ["RESAVE", "ZipRecord", "central_records", "inflate", "record_at", "zip_records"]

#: How to re-save a checkpoint whose zip layout is refused.
RESAVE = ("torch.save(torch.load(path, weights_only=True), path) writes uncompressed records (better: save it as "
          "safetensors, safetensors.torch.save_file)")
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # signature, version, flags, method, time, date, crc, csize, usize, n, m
_LOCAL_MAGIC = b"PK\x03\x04"
_ENCRYPTED = 0x1 | 0x40  # traditional and strong encryption
_DESCRIPTOR = 0x8  # sizes and CRC follow the data
_UTF8 = 0x800  # the name is UTF-8 (else cp437)
_ZIP64 = 0xFFFFFFFF
_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


@dataclass(frozen=True)
class ZipRecord:
    """One record of a zip archive, as its central directory gives it (checked).

    Attributes
    ----------
    name : str
        Its name in the archive (``archive/data/0``).
    header_offset : int
        Where its local header starts in the file.
    compressed_size, size : int
        Its bytes in the file, and once inflated.
    method : int
        ``zipfile.ZIP_STORED`` or ``zipfile.ZIP_DEFLATED``.
    crc : int
        The CRC-32 of its inflated bytes.
    header_size : int
        Bytes of its local header up to its extra field (30 and the name).
    """

    name: str
    header_offset: int
    compressed_size: int
    size: int
    method: int
    crc: int
    header_size: int

    @property
    def compressed(self) -> bool:
        """Whether its bytes in the file are deflated (not the tensor's bytes as they are)."""
        return self.method != zipfile.ZIP_STORED

    def data_offset(self, path, header: bytes, limit: int) -> int:
        """Where its data starts, from its local header ``header`` (at least :attr:`header_size` bytes from
        :attr:`header_offset`), checked against the central directory; its data must end by byte ``limit``.

        Raises
        ------
        CheckpointFileError
            No local header there, or one that says another name, method or sizes, or data past ``limit``.
        """
        if len(header) < _LOCAL.size:
            raise _refuse(path, f"record {self.name!r}: its local header lies past the end of the file")
        magic, _, flags, method, _, _, crc, csize, usize, n, m = _LOCAL.unpack_from(header)
        name = header[_LOCAL.size:_LOCAL.size + n].decode("utf-8" if flags & _UTF8 else "cp437", "replace")
        if magic != _LOCAL_MAGIC:
            raise _refuse(path, f"record {self.name!r}: no local header at byte {self.header_offset}")
        if name != self.name or method != self.method or flags & _ENCRYPTED:
            raise _refuse(path, f"record {self.name!r}: its local header says {name[:60]!r} (method {method}, flags "
                          f"{flags:#x}), the central directory {self.name!r} (method {self.method})")
        if not flags & _DESCRIPTOR and not (csize == _ZIP64 or usize == _ZIP64) and (
                csize != self.compressed_size or usize != self.size or crc != self.crc):
            raise _refuse(path, f"record {self.name!r}: its local header gives sizes {csize}/{usize}, the central "
                          f"directory {self.compressed_size}/{self.size}")
        start = self.header_offset + _LOCAL.size + n + m
        if start + self.compressed_size > limit:
            raise _refuse(path, f"record {self.name!r}: its {self.compressed_size} bytes from byte {start} pass "
                          f"the end of the zip's records (byte {limit})")
        return start


def _refuse(path, what: str) -> CheckpointFileError:
    return CheckpointFileError(path, f"{what}; its tensors' bytes cannot be located safely. Re-save it: {RESAVE}")


def central_records(path, fileobj) -> tuple[list[ZipRecord], int]:
    """The records of a zip archive's central directory, sorted by position, each checked on its own, and
    where the directory starts.

    Checked: no encryption, stored or deflated, a stored record's two sizes
    equal, no name twice, each record (its local header's fixed part, name and
    data) ending before the next one's local header or the directory.

    Raises
    ------
    CheckpointFileError
        As :func:`zip_records`.
    """
    try:
        with zipfile.ZipFile(fileobj) as archive:
            infos = archive.infolist()
            directory = archive.start_dir
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, struct.error) as exc:
        raise CheckpointFileError(path, f"its zip directory is unreadable ({type(exc).__name__}: {exc}): the file is "
                                  f"truncated or corrupted; re-download it (or re-save it: {RESAVE})") from exc
    records, names = [], set()
    for info in infos:
        if info.flag_bits & _ENCRYPTED:
            raise _refuse(path, f"record {info.filename!r} is encrypted")
        if info.compress_type not in _METHODS:
            raise _refuse(path, f"record {info.filename!r} is compressed with zip method {info.compress_type} "
                          "(torch.load reads stored or deflated records only)")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise _refuse(path, f"record {info.filename!r} is stored uncompressed but its sizes differ "
                          f"({info.compress_size} in the file, {info.file_size} inflated)")
        if info.orig_filename in names:
            raise _refuse(path, f"record {info.orig_filename!r} appears twice")
        names.add(info.orig_filename)
        records.append(ZipRecord(info.orig_filename, info.header_offset, info.compress_size, info.file_size,
                                 info.compress_type, info.CRC, _LOCAL.size + len(info.orig_filename.encode())))
    records.sort(key=lambda r: r.header_offset)
    for a, b in zip(records, [*records[1:], None], strict=True):
        end = directory if b is None else b.header_offset
        if a.header_offset + a.header_size + a.compressed_size > end:
            raise _refuse(path, f"record {a.name!r} ({a.compressed_size} bytes from byte {a.header_offset}) "
                          f"overlaps {'the zip directory' if b is None else repr(b.name)}")
    return records, directory


def record_at(records: list[ZipRecord], data_offset: int) -> ZipRecord | None:
    """The record (of :func:`central_records`, sorted) whose data may start at ``data_offset``: the last one
    whose local header's fixed part and name end by then (None when there is none)."""
    found = None
    for r in records:
        if r.header_offset + r.header_size > data_offset:
            break
        found = r
    return found


def zip_records(path, fileobj, read: Callable[[int, int], bytes]) -> dict[str, tuple[ZipRecord, int]]:
    """Every record of a zip archive by name, with where its data starts, its layout checked (see the module
    docstring).

    Parameters
    ----------
    path : str
        The file's path or URL, for messages.
    fileobj : file object
        Seekable, readable: the archive (``zipfile`` reads its central directory through it).
    read : callable
        ``read(offset, n)`` -> up to ``n`` bytes of the file from ``offset`` (the local headers).

    Returns
    -------
    dict of str -> (ZipRecord, int)

    Raises
    ------
    CheckpointFileError
        Not a zip archive, an encrypted record, a compression method other than
        stored or deflated, a local header that disagrees with the central
        directory, a record that overlaps another or the directory.
    """
    records, directory = central_records(path, fileobj)
    out = {}
    for a, b in zip(records, [*records[1:], None], strict=True):
        limit = directory if b is None else b.header_offset
        out[a.name] = a, a.data_offset(path, read(a.header_offset, a.header_size), limit)
    return out


def inflate(path, record: ZipRecord, data: bytes) -> bytes:
    """The inflated bytes of ``record`` from its ``data`` as stored in the file, checked by size and CRC-32.

    Raises
    ------
    CheckpointFileError
        The data does not inflate, or not to the record's size and CRC-32 (a corrupted file).
    """
    try:
        out = zlib.decompress(data, -15) if record.compressed else data
    except zlib.error as exc:
        raise CheckpointFileError(path, f"record {record.name!r} does not inflate ({exc}); the file is corrupted: "
                                  "download it again or re-save it") from exc
    if len(out) != record.size or zlib.crc32(out) != record.crc:
        raise CheckpointFileError(path, f"record {record.name!r}: {len(out)} bytes with CRC-32 {zlib.crc32(out):08x}, "
                                  f"the zip directory says {record.size} bytes with {record.crc:08x}; the file is "
                                  "corrupted: download it again")
    return out
