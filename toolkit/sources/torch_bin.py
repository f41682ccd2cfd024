"""PyTorch ``.bin`` checkpoints: ``pytorch_model.bin`` or shards with an index.

Each file is opened with ``torch.load(weights_only=True, mmap=True)``: the
pickle is read, the tensor storages stay memory-mapped, so listing reads no
tensor data and a read touches only that tensor's pages. One shard is kept
open at a time. Files in the legacy (pre-zip) format cannot be mapped and are
loaded whole, one shard at a time; so are files whose zip records are compressed (deflated by a tool
that rewrote the archive; ``torch.load`` inflates them), after their zip layout is checked
(:mod:`toolkit.sources.zip_records`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import torch

from toolkit.errors import CheckpointFileError
from toolkit.sources._common import (
    FileSource,
    dtype_name,
    missing_from_shard,
    open_failure,
    read_index,
    shards_of,
)
from toolkit.sources.base import TensorRecord
from toolkit.sources.renaming import transformers_renamer
from toolkit.sources.saved_layout import SavedFormat
from toolkit.sources.zip_records import zip_records

#: The first bytes of a zip archive (a ``torch.save`` file of torch >= 1.6).
ZIP_MAGIC = b"PK\x03\x04"

#: Held while a ``.bin`` source swaps or reads its open shard (module-level: a source stays picklable).
_SHARD_LOCK = threading.Lock()


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one ``.bin`` file, memory-mapped where the format allows.

    Raises
    ------
    CheckpointFileError
        Truncated, corrupted, or holding pickled objects other than tensors
        (``weights_only`` refuses those).
    """
    try:
        mappable = not compressed_records(path)
    except OSError as exc:
        raise open_failure(path, exc) from exc
    try:
        try:
            # a deflated record cannot be mapped (its bytes in the file are not the tensor's): loaded, inflated
            data = torch.load(path, map_location="cpu", weights_only=True, mmap=mappable)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            data = torch.load(path, map_location="cpu", weights_only=True)  # legacy format: no mmap
    except Exception as exc:  # zip, pickle and weights_only errors have many types
        raise CheckpointFileError(
            path, f"cannot load it with torch.load(weights_only=True) ({type(exc).__name__}: {exc}); "
            "re-download or re-save it (safetensors preferred)"
        ) from exc
    return state_dict_tensors(data, path)


def compressed_records(path: Path) -> bool:
    """Whether the zip records of a ``torch.save`` file are compressed, its zip layout checked
    (:func:`~toolkit.sources.zip_records.zip_records`); False for a legacy (pre-zip) file.

    Raises
    ------
    CheckpointFileError
        A zip layout that is refused (encrypted, another compression method, inconsistent headers).
    OSError
        The file cannot be read.
    """
    with open(path, "rb") as f:
        if f.read(4) != ZIP_MAGIC:
            return False

        def read(offset: int, n: int) -> bytes:
            f.seek(offset)
            return f.read(n)

        return any(r.compressed for r, _ in zip_records(path, f, read).values())


def state_dict_tensors(data, path) -> dict[str, torch.Tensor]:
    """The tensors of what ``torch.load`` gave for ``path``: a state dict (or ``{"state_dict": ...}``).

    Raises
    ------
    CheckpointFileError
        Not a dict, or keys that are not parameter names.
    """
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]
    if not isinstance(data, dict):
        raise CheckpointFileError(path, f"holds a {type(data).__name__}, not a state dict of tensors")
    tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
    odd = [k for k in tensors if not isinstance(k, str)]
    if odd:
        raise CheckpointFileError(
            path, f"its state dict has keys that are not parameter names ({odd[0]!r}, a {type(odd[0]).__name__}); "
            "re-save it with model.state_dict() (safetensors preferred)",
        )
    return tensors


class TorchBinSource(FileSource):
    """Tensors of one ``.bin`` file or of a sharded ``.bin`` checkpoint.

    Build with :meth:`from_file` or :meth:`from_index`. Names get
    ``transformers``' load-time renamings, as for safetensors.
    """

    def __init__(self, entries: list[tuple[str, str, tuple[int, ...], str]], **kwargs):
        super().__init__(format="pytorch", **kwargs)
        self._entries = entries  # (stored name, dtype, shape, file)
        self._rename = transformers_renamer(self.config)
        self._open: tuple[str, dict[str, torch.Tensor]] | None = None

    @classmethod
    def _list(cls, path: Path) -> list[tuple[str, str, tuple[int, ...], str]]:
        sd = load_state_dict(path)
        return [(k, dtype_name(v.dtype), tuple(v.shape), str(path)) for k, v in sd.items()]

    @classmethod
    def from_file(cls, path: Path, *, config: dict, location: str, revision: str = "") -> TorchBinSource:
        """Open a single ``.bin`` file (raises :class:`CheckpointFileError` when unreadable)."""
        return cls(cls._list(path), config=config, location=location, files=[path], revision=revision)

    @classmethod
    def from_index(cls, index_path: Path, *, config: dict, location: str, revision: str = "") -> TorchBinSource:
        """Open a sharded checkpoint from its ``pytorch_model.bin.index.json``.

        Raises
        ------
        CheckpointFileError
            A shard named by the index is missing or unreadable, or does not
            hold a tensor the index puts in it.
        """
        weight_map = read_index(index_path)
        shards = shards_of(index_path, weight_map)
        entries = []
        for shard_name, shard in zip(sorted(set(weight_map.values())), shards, strict=True):
            listed = cls._list(shard)
            missing_from_shard(index_path, shard_name, [k for k, v in weight_map.items() if v == shard_name],
                               {e[0] for e in listed})
            entries += listed
        return cls(entries, config=config, location=location, files=shards, revision=revision)

    def _read(self, file: str, name: str) -> torch.Tensor:
        # a pass reads ahead on threads: the shard held open is shared state, changed under one lock (without
        # it, one thread dropping the previous shard's mapping left another reading None)
        with _SHARD_LOCK:
            opened = self._open
            if opened is None or opened[0] != file:
                self._open = None  # drop the previous shard's mapping first
                opened = self._open = (file, load_state_dict(Path(file)))
            return opened[1][name].clone()

    def tensors(self) -> Iterator[TensorRecord]:
        """Yield one record per stored tensor, shard by shard.

        Yields
        ------
        TensorRecord
            ``read()`` returns a copy of the tensor in its stored dtype.
        """
        for stored, dt, shape, file in self._entries:
            name = self._rename(stored)
            yield TensorRecord(
                name, shape, dt, lambda f=file, s=stored: self._read(f, s),
                file=file, stored_name=stored if name != stored else "",
            )


class TorchBinFormat(SavedFormat):
    """The registry entry of PyTorch pickle checkpoints (:mod:`toolkit.sources.formats`)."""

    name = "pytorch"
    description = "pytorch_model.bin (.pt, .pth), or pytorch_model.bin.index.json and its shards"
    single = "pytorch_model.bin"
    index = "pytorch_model.bin.index.json"
    index_suffix = ".bin.index.json"
    suffixes = (".bin", ".pt", ".pth")
    source_class = TorchBinSource
