"""Safetensors checkpoints read in place over HTTP: headers by small ranges, then each tensor's own bytes.

Opening reads the index (when sharded) and, for each shard, its first
:data:`~toolkit.sources.safetensors_.HEADER_PROBE` bytes and then the rest of
its header: two range requests per shard, the shards in parallel. The
header is checked as a local one is (:func:`~toolkit.sources.safetensors_.header_entries`:
byte ranges that agree with the shapes, cover the file exactly, and a header
no longer than the file). A record's ``read()`` then asks for its tensor's
byte range alone (``row_blocks`` and an expert of a stack: only those rows),
so a selection moves only the selected tensors' bytes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from toolkit.errors import CheckpointFileError, RemoteReadError
from toolkit.sources._common import json_object, weight_map_of
from toolkit.sources.identity import remote_identity
from toolkit.sources.remote.checked import RemoteFiles
from toolkit.sources.remote.folders import RemoteFolder
from toolkit.sources.remote.http import RemoteFile
from toolkit.sources.renaming import transformers_renamer
from toolkit.sources.safetensors_ import (
    HEADER_PROBE,
    Entry,
    SafetensorsSource,
    header_entries,
    header_length,
    sharded_entries,
)

#: Shard headers read at once when opening.
PARALLEL = 8


def read_remote_json(file: RemoteFile, what: str) -> dict:
    """A remote JSON file (config, index) as a dict.

    Raises
    ------
    CheckpointFileError
        Not a JSON object, or larger than ``TOOLKIT_MAX_WHOLE_FILE`` as the server states it.
    RemoteReadError, RemoteAccessError, CheckpointChangedError
        As :meth:`~toolkit.sources.remote.http.RemoteFile.read_whole`.
    """
    return json_object(file.read_whole(what), file.url, what)


def index_shards(folder: RemoteFolder, main: RemoteFile) -> tuple[dict[str, str], list[str], list[RemoteFile]]:
    """A sharded checkpoint's index ``main``: its ``weight_map``, the shard names (sorted) and their files.

    Raises
    ------
    CheckpointFileError
        Not an index, or it names a shard the repo (server) lacks.
    RemoteReadError, RemoteAccessError, CheckpointChangedError
        As the read of the index raises them.
    """
    weight_map = weight_map_of(read_remote_json(main, "sharded checkpoint index"), main.url)
    names = sorted(set(weight_map.values()))
    files = [folder.file(name) for name in names]
    missing = [n for n, f in zip(names, files, strict=True) if f is None]
    if missing:
        raise CheckpointFileError(
            main.url, f"the index names shard(s) {', '.join(missing[:3])} that the "
            f"{'repo' if folder.hub else 'server'} does not have; the index and the shards come from "
            "different saves, or the upload is incomplete",
        )
    return weight_map, names, files


def sized(file: RemoteFile) -> int:
    """The file's size, known from the listing or a HEAD request.

    Raises
    ------
    RemoteReadError
        The server gave no size.
    """
    if file.size < 0:
        raise RemoteReadError(file.url, 0, "the hub lists no size for this file; download the checkpoint instead "
                              "(download=True / --download)")
    return file.size


def read_remote_header(file: RemoteFile) -> dict[str, Entry]:
    """The checked entries of a remote safetensors file's header, read by two range requests.

    Raises
    ------
    CheckpointFileError
        As :func:`toolkit.sources.safetensors_.read_header` (a header longer than the file says, a
        corrupted header, byte ranges that do not cover the file...).
    RemoteReadError, RemoteAccessError, CheckpointChangedError
        As :meth:`~toolkit.sources.remote.http.RemoteFile.read_into`.
    """
    size = sized(file)
    start = file.read(0, min(size, HEADER_PROBE)).tobytes()
    n = header_length(file.url, start, size)
    rest = file.read(len(start), 8 + n - len(start)).tobytes() if 8 + n > len(start) else b""
    return header_entries(file.url, (start + rest)[8:8 + n], size)


class RemoteSafetensorsSource(RemoteFiles, SafetensorsSource):
    """A safetensors checkpoint on a hub repo or behind plain URLs, read by range requests.

    Build with :meth:`open`. ``files()`` are the URLs; ``fingerprint`` is
    :func:`~toolkit.sources.identity.remote_identity` (repo or URL, commit,
    each file's size and LFS sha256 or ETag); ``revision`` the commit.
    """

    def __init__(self, entries: list[tuple[str, Entry, str]], files: list[RemoteFile], *, location: str,
                 config: dict, commit: str, given: str = ""):
        self.location, self.format, self.config, self.revision = location, "safetensors", config, commit
        self._given = given or location
        self._remote = {f.shown: f for f in files}
        self.fingerprint = remote_identity(location, commit, files)
        self._entries = entries
        self._rename = transformers_renamer(config)
        self._names = None

    @classmethod
    def open(cls, folder: RemoteFolder, target: str, config: dict) -> RemoteSafetensorsSource:
        """Open ``target`` of ``folder``: ``model.safetensors`` or an index and its shards.

        Raises
        ------
        CheckpointFileError
            The index names a shard the folder lacks, or a tensor its shard does not hold; a header is
            corrupted or longer than its file.
        RemoteReadError, RemoteAccessError, CheckpointChangedError, SourceNotFoundError
            As the reads raise them.
        """
        main = folder.file(target)
        if target.endswith(".index.json"):
            weight_map, _, files = index_shards(folder, main)
            with ThreadPoolExecutor(min(PARALLEL, len(files))) as pool:
                headers = list(pool.map(read_remote_header, files))
            entries = sharded_entries(main.shown, weight_map, headers, [f.shown for f in files])
        else:
            files = [main]
            entries = [(name, entry, main.shown) for name, entry in read_remote_header(main).items()]
        return cls(entries, files, location=folder.location, config=config, commit=folder.commit,
                   given=folder.given)

    def _filler(self, file: str):
        return self._remote[file].read_into
