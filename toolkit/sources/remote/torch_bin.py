"""PyTorch ``.bin`` checkpoints read in place over HTTP: the zip directory and the pickle, then each tensor's bytes.

A ``.bin`` written by ``torch.save`` (the zip format, torch >= 1.6) is a zip
archive: ``<name>/data.pkl`` (the state dict's pickle, small), one
record per storage (``<name>/data/<key>``; torch writes them uncompressed, a tool
that rewrote the archive may have deflated them) and the central directory at
the end. Opening checks the zip layout (:mod:`toolkit.sources.zip_records`; a file with compressed records
is not read in place: a hub repo's is downloaded, and read as ``torch.load`` reads it), reads the central
directory and the pickle
through a seekable view of the remote file (:class:`RangeFile`, a few range
requests), with ``torch.load(map_location="meta", weights_only=True)``: the
tensors come back on the meta device, each storage carrying the byte offset
of its record in the file (torch's own bookkeeping, ``_checkpoint_offset``).
A record's ``read()`` then asks for its tensor's bytes alone (with its record's local header, checked;
a record read whole is checked by its CRC-32) and builds the
tensor from its shape, strides and storage offset (views and tied tensors
included). A file in the legacy (pre-zip) format cannot be read in place.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import torch

from toolkit.errors import CheckpointFileError, NotReadableInPlaceError, ToolkitError
from toolkit.sources._common import dtype_name, missing_from_shard
from toolkit.sources.identity import remote_identity
from toolkit.sources.remote.checked import RemoteFiles
from toolkit.sources.remote.folders import RemoteFolder
from toolkit.sources.remote.http import RemoteFile
from toolkit.sources.remote.safetensors import index_shards, sized
from toolkit.sources.renaming import transformers_renamer
from toolkit.sources.torch_bin import ZIP_MAGIC, TorchBinSource, state_dict_tensors
from toolkit.sources.zip_records import RESAVE, ZipRecord, central_records, inflate, record_at

#: Bytes fetched at least per request while reading the zip directory and the pickle (many small reads).
READ_AHEAD = 1 << 16
#: Blocks of :data:`READ_AHEAD` bytes a :class:`RangeFile` keeps.
BLOCKS = 4


class RangeFile(io.RawIOBase):
    """A read-only, seekable file object over a :class:`RemoteFile`, fetching at least :data:`READ_AHEAD`
    bytes per range request and keeping the last :data:`BLOCKS` blocks (the zip directory is read by
    ``zipfile`` and again by ``torch.load``'s zip reader, which makes many small reads)."""

    def __init__(self, file: RemoteFile):
        super().__init__()
        self._file, self._size, self._pos = file, sized(file), 0
        self._blocks: list[tuple[int, bytes]] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        out = memoryview(buffer).cast("B")
        n = max(0, min(len(out), self._size - self._pos))
        hit = next((b for b in self._blocks if b[0] <= self._pos and self._pos + n <= b[0] + len(b[1])), None)
        if hit is None:
            want = min(self._size - self._pos, max(n, READ_AHEAD))
            hit = self._pos, self._file.read(self._pos, want).tobytes()
            self._blocks = [hit, *self._blocks[:BLOCKS - 1]]
        start, data = hit
        out[:n] = data[self._pos - start:self._pos - start + n]
        self._pos += n
        return n


@dataclass(frozen=True)
class Layout:
    """Where a tensor of a ``.bin`` lies: its storage's zip record (checked, :mod:`toolkit.sources.zip_records`),
    and how the tensor views the storage (dtype, shape, strides and offset in elements)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    record: ZipRecord
    data_offset: int
    limit: int

    def data_start(self, url: str, header: bytes) -> int:
        """Where the record's data starts, as its local header ``header`` says, which must be where torch's
        directory put it (:meth:`~toolkit.sources.zip_records.ZipRecord.data_offset` checks the rest).

        Raises
        ------
        CheckpointFileError
            A local header that disagrees with the central directory or torch's offset.
        """
        start = self.record.data_offset(url, header, self.limit)
        if start != self.data_offset:
            raise CheckpointFileError(url, f"record {self.record.name!r}: its local header puts its data at byte "
                                      f"{start}, torch's directory at {self.data_offset}. Re-save it: {RESAVE}")
        return start

    def span(self) -> tuple[int, int]:
        """``(first element, element count)`` of the storage the tensor touches."""
        if not self.shape or 0 in self.shape:
            return self.storage_offset, 0 if 0 in self.shape else 1
        last = sum((n - 1) * s for n, s in zip(self.shape, self.stride, strict=True))
        return self.storage_offset, last + 1


def read_remote_bin(file: RemoteFile) -> dict[str, Layout]:
    """The tensors of a remote ``.bin`` file, as :class:`Layout` (no tensor data read).

    Raises
    ------
    NotReadableInPlaceError
        A legacy (pre-zip) ``.bin``, or one whose zip records are compressed, which only a download can read.
    CheckpointFileError
        A zip layout that is refused (:func:`~toolkit.sources.zip_records.zip_records`), not a checkpoint
        ``torch.load(weights_only=True)`` accepts, not a state dict of tensors, or a tensor whose bytes lie
        outside its storage record.
    RemoteReadError, RemoteAccessError, CheckpointChangedError
        As :meth:`~toolkit.sources.remote.http.RemoteFile.read_into`.
    """
    size = sized(file)
    if file.read(0, min(size, 4)).tobytes() != ZIP_MAGIC:
        raise NotReadableInPlaceError(file.url, "a legacy (pre-zip) torch file, which cannot be read in place: "
                                      "download it (download=True / --download)")
    view = RangeFile(file)
    records, directory = central_records(file.url, view)
    if any(r.compressed for r in records):
        # torch's offsets of deflated records are not where their data lies, and their bytes are not the
        # tensor's: loaded from disk (torch.load inflates them), never read by range
        raise NotReadableInPlaceError(file.url, "its zip records are compressed (deflated by a tool that rewrote "
                                      "the archive), so its tensors cannot be read by range: download it "
                                      "(download=True / --download; a hub repo is downloaded) to read exactly what "
                                      f"torch.load reads, or re-save it: {RESAVE}")
    limits = {a.name: directory if b is None else b.header_offset
              for a, b in zip(records, [*records[1:], None], strict=True)}
    try:
        view.seek(0)
        data = torch.load(view, map_location="meta", weights_only=True)
    except ToolkitError:  # a failed range request
        raise
    except Exception as exc:  # zip, pickle and weights_only errors have many types
        raise CheckpointFileError(file.url, f"cannot load it with torch.load(weights_only=True) "
                                  f"({type(exc).__name__}: {exc}); re-save it (safetensors preferred)") from exc
    out = {}
    for name, t in state_dict_tensors(data, file.url).items():
        storage = t.untyped_storage()
        offset = int(getattr(storage, "_checkpoint_offset", -1))
        record = record_at(records, offset)
        first, count = (0, 0) if record is None else Layout(t.dtype, tuple(t.shape), tuple(t.stride()),
                                                          int(t.storage_offset()), record, offset, 0).span()
        if (record is None or record.size != storage.nbytes() or (first + count) * t.element_size() > record.size
                or offset + record.compressed_size > limits[record.name]):
            raise CheckpointFileError(file.url, f"tensor {name!r}: its bytes lie outside its storage record or the "
                                      "file (a corrupted or truncated checkpoint)")
        out[name] = Layout(t.dtype, tuple(t.shape), tuple(t.stride()), int(t.storage_offset()), record, offset,
                           limits[record.name])
    return out


def read_tensor(file: RemoteFile, layout: Layout) -> torch.Tensor:
    """The tensor ``layout`` describes, read by one range request: the storage span it touches, or its whole
    record (and its local header) when the tensor covers it (then its CRC-32 is checked).

    Returns
    -------
    torch.Tensor
        Contiguous, in its stored dtype, shape ``layout.shape``.

    Raises
    ------
    CheckpointFileError
        A whole record whose bytes do not inflate, or not to its size and CRC-32.
    RemoteReadError, RemoteAccessError, CheckpointChangedError
        As :meth:`~toolkit.sources.remote.http.RemoteFile.read_into`.
    """
    first, count = layout.span()
    if not count:
        return torch.empty(layout.shape, dtype=layout.dtype)
    itemsize = torch.empty((), dtype=layout.dtype).element_size()
    record = layout.record
    if record.compressed or (first == 0 and count * itemsize == record.size):  # the record whole, its header too
        whole = file.read(record.header_offset, layout.data_offset + record.compressed_size - record.header_offset)
        start = layout.data_start(file.url, whole[:record.header_size].tobytes()) - record.header_offset
        raw = inflate(file.url, record, whole[start:].tobytes())[first * itemsize:(first + count) * itemsize]
    else:
        layout.data_start(file.url, file.read(record.header_offset, record.header_size).tobytes())
        raw = file.read(layout.data_offset + first * itemsize, count * itemsize).tobytes()
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(layout.dtype)
    return flat.as_strided(layout.shape, layout.stride, 0).clone(memory_format=torch.contiguous_format)


class RemoteTorchBinSource(RemoteFiles, TorchBinSource):
    """A ``.bin`` checkpoint (one file, or an index and its shards) on a hub repo or behind plain URLs.

    Build with :meth:`open`. ``files()`` are the URLs; ``fingerprint`` is
    :func:`~toolkit.sources.identity.remote_identity`; ``revision`` the commit.
    """

    def __init__(self, layouts: dict[str, dict[str, Layout]], files: list[RemoteFile], *, location: str,
                 config: dict, commit: str, given: str = ""):
        self.location, self.format, self.config, self.revision = location, "pytorch", config, commit
        self._given = given or location
        self._remote = {f.shown: f for f in files}
        self.fingerprint = remote_identity(location, commit, files)
        self._layouts = layouts
        self._entries = [(name, dtype_name(lay.dtype), lay.shape, url)
                         for url, tensors in layouts.items() for name, lay in tensors.items()]
        self._rename = transformers_renamer(config)
        self._open = None

    @classmethod
    def open(cls, folder: RemoteFolder, target: str, config: dict) -> RemoteTorchBinSource:
        """Open ``target`` of ``folder``: ``pytorch_model.bin`` or ``pytorch_model.bin.index.json`` and its shards.

        Raises
        ------
        CheckpointFileError
            The index names a shard the folder lacks, or a tensor its shard does not hold; a corrupted file.
        NotReadableInPlaceError
            A legacy (pre-zip) shard.
        RemoteReadError, RemoteAccessError, CheckpointChangedError
            As the reads raise them.
        """
        main = folder.file(target)
        if target.endswith(".index.json"):
            weight_map, names, files = index_shards(folder, main)
            layouts = {}
            for name, f in zip(names, files, strict=True):
                layouts[f.shown] = read_remote_bin(f)
                missing_from_shard(main.url, name, [k for k, v in weight_map.items() if v == name], layouts[f.shown])
        else:
            files = [main]
            layouts = {main.shown: read_remote_bin(main)}
        return cls(layouts, files, location=folder.location, config=config, commit=folder.commit,
                   given=folder.given)

    def _read(self, file: str, name: str) -> torch.Tensor:
        return read_tensor(self._remote[file], self._layouts[file][name])
