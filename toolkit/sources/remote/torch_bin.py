"""PyTorch ``.bin`` checkpoints read in place over HTTP: the zip directory and the pickle, then each tensor's bytes.

A ``.bin`` written by ``torch.save`` (the zip format, torch >= 1.6) is a zip
archive: ``<name>/data.pkl`` (the state dict's pickle, small), one
uncompressed record per storage (``<name>/data/<key>``) and the central
directory at the end. Opening reads the central directory and the pickle
through a seekable view of the remote file (:class:`RangeFile`, a few range
requests), with ``torch.load(map_location="meta", weights_only=True)``: the
tensors come back on the meta device, each storage carrying the byte offset
of its record in the file (torch's own bookkeeping, ``_checkpoint_offset``).
A record's ``read()`` then asks for its tensor's bytes alone and builds the
tensor from its shape, strides and storage offset (views and tied tensors
included). A file in the legacy (pre-zip) format cannot be read in place.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import torch

from toolkit.errors import CheckpointFileError, NotReadableInPlaceError, ToolkitError
from toolkit.sources._common import dtype_name, missing_from_shard, transformers_renamer
from toolkit.sources.identity import remote_identity
from toolkit.sources.remote.checked import RemoteFiles
from toolkit.sources.remote.folders import RemoteFolder
from toolkit.sources.remote.http import RemoteFile
from toolkit.sources.remote.safetensors import index_shards, sized
from toolkit.sources.torch_bin import TorchBinSource, state_dict_tensors

#: Bytes fetched at least per request while reading the zip directory and the pickle (many small reads).
READ_AHEAD = 1 << 16
_ZIP_MAGIC = b"PK\x03\x04"


class RangeFile(io.RawIOBase):
    """A read-only, seekable file object over a :class:`RemoteFile`, fetching at least :data:`READ_AHEAD`
    bytes per range request and keeping the last block (``torch.load``'s zip reader makes many small reads)."""

    def __init__(self, file: RemoteFile):
        super().__init__()
        self._file, self._size, self._pos = file, sized(file), 0
        self._block: tuple[int, bytes] = (0, b"")

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
        start, data = self._block
        if not (start <= self._pos and self._pos + n <= start + len(data)):
            want = min(self._size - self._pos, max(n, READ_AHEAD))
            self._block = start, data = self._pos, self._file.read(self._pos, want).tobytes()
        out[:n] = data[self._pos - start:self._pos - start + n]
        self._pos += n
        return n


@dataclass(frozen=True)
class Layout:
    """Where a tensor of a ``.bin`` lies: its storage record's byte offset in the file, and how the tensor
    views the storage (dtype, shape, strides and offset in elements)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    record_offset: int
    storage_bytes: int

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
        A legacy (pre-zip) ``.bin``, which only a download can read.
    CheckpointFileError
        Not a checkpoint ``torch.load(weights_only=True)`` accepts, not a state dict of tensors, or a tensor
        whose bytes lie outside its storage or the file.
    RemoteReadError, RemoteAccessError, CheckpointChangedError
        As :meth:`~toolkit.sources.remote.http.RemoteFile.read_into`.
    """
    size = sized(file)
    if file.read(0, min(size, 4)).tobytes() != _ZIP_MAGIC:
        raise NotReadableInPlaceError(file.url, "a legacy (pre-zip) torch file, which cannot be read in place: "
                                      "download it (download=True / --download)")
    try:
        data = torch.load(RangeFile(file), map_location="meta", weights_only=True)
    except ToolkitError:  # a failed range request
        raise
    except Exception as exc:  # zip, pickle and weights_only errors have many types
        raise CheckpointFileError(file.url, f"cannot load it with torch.load(weights_only=True) "
                                  f"({type(exc).__name__}: {exc}); re-save it (safetensors preferred)") from exc
    out = {}
    for name, t in state_dict_tensors(data, file.url).items():
        storage = t.untyped_storage()
        layout = Layout(t.dtype, tuple(t.shape), tuple(t.stride()), int(t.storage_offset()),
                        int(getattr(storage, "_checkpoint_offset", -1)), int(storage.nbytes()))
        first, count = layout.span()
        itemsize = t.element_size()
        if (layout.record_offset < 0 or (first + count) * itemsize > layout.storage_bytes
                or layout.record_offset + layout.storage_bytes > size):
            raise CheckpointFileError(file.url, f"tensor {name!r}: its bytes lie outside its storage record or the "
                                      "file (a corrupted or truncated checkpoint)")
        out[name] = layout
    return out


def read_tensor(file: RemoteFile, layout: Layout) -> torch.Tensor:
    """The tensor ``layout`` describes, read by one range request of the storage span it touches.

    Returns
    -------
    torch.Tensor
        Contiguous, in its stored dtype, shape ``layout.shape``.
    """
    first, count = layout.span()
    itemsize = torch.empty((), dtype=layout.dtype).element_size()
    raw = file.read(layout.record_offset + first * itemsize, count * itemsize) if count else np.empty(0, np.uint8)
    flat = torch.frombuffer(bytearray(raw.tobytes()), dtype=torch.uint8).view(layout.dtype) if count else \
        torch.empty(0, dtype=layout.dtype)
    return flat.as_strided(layout.shape, layout.stride, 0).clone(memory_format=torch.contiguous_format)


class RemoteTorchBinSource(RemoteFiles, TorchBinSource):
    """A ``.bin`` checkpoint (one file, or an index and its shards) on a hub repo or behind plain URLs.

    Build with :meth:`open`. ``files()`` are the URLs; ``fingerprint`` is
    :func:`~toolkit.sources.identity.remote_identity`; ``revision`` the commit.
    """

    def __init__(self, layouts: dict[str, dict[str, Layout]], files: list[RemoteFile], *, location: str,
                 config: dict, commit: str):
        self.location, self.format, self.config, self.revision = location, "pytorch", config, commit
        self._remote = {f.url: f for f in files}
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
                layouts[f.url] = read_remote_bin(f)
                missing_from_shard(main.url, name, [k for k, v in weight_map.items() if v == name], layouts[f.url])
        else:
            files = [main]
            layouts = {main.url: read_remote_bin(main)}
        return cls(layouts, files, location=folder.location, config=config, commit=folder.commit)

    def _read(self, file: str, name: str) -> torch.Tensor:
        return read_tensor(self._remote[file], self._layouts[file][name])
