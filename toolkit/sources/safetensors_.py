"""Safetensors checkpoints: one ``model.safetensors`` or shards with an index.

The header of each file is parsed here (8-byte length + JSON), which lists
every tensor's dtype, shape and byte range without reading data and lets a
truncated file be named at open time. Tensor bytes are read one tensor at a
time with ``safetensors.safe_open(...).get_tensor(name)``.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import torch

from toolkit.errors import CheckpointFileError
from toolkit.sources._common import FileSource, read_index, shards_of, transformers_renamer
from toolkit.sources.base import TensorRecord

#: safetensors dtype codes -> torch dtype names.
DTYPES = {
    "BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
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


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """Tensors of one safetensors file, in storage order.

    Parameters
    ----------
    path : Path
        A ``.safetensors`` file.

    Returns
    -------
    dict
        ``name -> (dtype name, shape, data start offset)``, ordered by offset.

    Raises
    ------
    CheckpointFileError
        Not a safetensors file (its first 8 bytes are no plausible header
        length: random bytes, a Git LFS pointer, an HTML page...), the header
        is unreadable, or the file is shorter than its header says
        (truncated download or copy).
    """
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise CheckpointFileError(path, f"only {size} bytes, not a safetensors file; re-download it")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            first = fh.read(1)
            if n <= MAX_HEADER_SIZE and first == b"{":  # a real header, cut short
                raise CheckpointFileError(
                    path, f"truncated: the header alone needs {n + 8} bytes, the file has {size}; re-download it"
                )
            raise CheckpointFileError(path, _not_safetensors(head + first + fh.read(64), n, size))
        try:
            header = json.loads(fh.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointFileError(path, f"corrupted safetensors header ({exc}); re-download it") from exc
    header.pop("__metadata__", None)
    tensors = {}
    end = 0
    try:
        for name, info in header.items():
            start, stop = info["data_offsets"]
            end = max(end, stop)
            tensors[name] = (DTYPES.get(info["dtype"], info["dtype"].lower()), tuple(info["shape"]), start)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointFileError(path, f"corrupted safetensors header ({exc!r}); re-download it") from exc
    if 8 + n + end > size:
        raise CheckpointFileError(
            path,
            f"truncated: its header says the tensor data runs to byte {8 + n + end}, "
            f"the file has {size} bytes; re-download or re-save it",
        )
    return dict(sorted(tensors.items(), key=lambda kv: kv[1][2]))


def _read_tensor(path: str, name: str, start: int | None = None, stop: int | None = None) -> torch.Tensor:
    """A stored tensor in its stored dtype; only rows ``start:stop`` (``get_slice``) when given."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as fh:
            return fh.get_tensor(name) if start is None else fh.get_slice(name)[start:stop]
    except (SafetensorError, OSError) as exc:
        raise CheckpointFileError(path, f"cannot read tensor {name!r} ({exc}); re-download the file") from exc


class SafetensorsSource(FileSource):
    """Tensors of one safetensors file or of a sharded safetensors checkpoint.

    Build with :meth:`from_file` or :meth:`from_index`. Names are the stored
    names with ``transformers``' load-time renamings applied (see
    :func:`toolkit.sources._common.transformers_renamer`).
    """

    def __init__(self, entries: list[tuple[str, str, tuple[int, ...], str]], **kwargs):
        super().__init__(format="safetensors", **kwargs)
        self._entries = entries  # (stored name, dtype, shape, file)
        self._rename = transformers_renamer(self.config)

    @classmethod
    def from_file(cls, path: Path, *, config: dict, location: str, revision: str = "") -> SafetensorsSource:
        """Open a single ``.safetensors`` file.

        Raises
        ------
        CheckpointFileError
            Truncated or corrupted file.
        """
        entries = [(name, dt, shape, str(path)) for name, (dt, shape, _) in read_header(path).items()]
        return cls(entries, config=config, location=location, files=[path], revision=revision)

    @classmethod
    def from_index(cls, index_path: Path, *, config: dict, location: str, revision: str = "") -> SafetensorsSource:
        """Open a sharded checkpoint from its ``model.safetensors.index.json``.

        Raises
        ------
        CheckpointFileError
            The index names a shard that is missing, or a tensor its shard does
            not hold; a shard is truncated or corrupted.
        """
        weight_map = read_index(index_path)
        shards = shards_of(index_path, weight_map)
        entries = []
        for shard in shards:
            header = read_header(shard)
            absent = [k for k, v in weight_map.items() if v == shard.name and k not in header]
            if absent:
                raise CheckpointFileError(
                    index_path,
                    f"the index puts {len(absent)} tensor(s) in {shard.name} that it does not hold "
                    f"(first: {absent[0]!r}); the shard and the index come from different saves. "
                    "Download both again, or re-save the checkpoint.",
                )
            entries += [(name, dt, shape, str(shard)) for name, (dt, shape, _) in header.items()]
        return cls(entries, config=config, location=location, files=shards, revision=revision)

    def tensors(self) -> Iterator[TensorRecord]:
        """Yield one record per stored tensor, shard by shard in storage order.

        Yields
        ------
        TensorRecord
            ``read()`` returns the tensor in its stored dtype and shape.
        """
        for stored, dt, shape, file in self._entries:
            name = self._rename(stored)
            yield TensorRecord(
                name, shape, dt, partial(_read_tensor, file, stored),
                file=file, stored_name=stored if name != stored else "",
                _row_reader=partial(_read_tensor, file, stored),
            )
