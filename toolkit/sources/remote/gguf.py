"""GGUF files read in place over HTTP: the header by growing range reads, then each tensor's own bytes.

The header (metadata and tensor table) is read from byte 0 in chunks of
:data:`FIRST_READ` bytes, doubled until the table parses
(:func:`toolkit.sources.gguf.table.parse_gguf_table` on a
:class:`~toolkit.sources.gguf.table.Prefix`, every count checked against the
whole file's size), at most :data:`MAX_HEADER` bytes. Tensors are then read
by their byte ranges (:class:`~toolkit.sources.gguf.table.RangePath`). Only
the layouts the toolkit plans itself (:class:`~toolkit.sources.gguf.own_plan.OwnPlan`:
llama, qwen2, gemma3...) are read in place; the others need ``transformers``'
reader, which opens the file from disk (``download=True``).
"""

from __future__ import annotations

from toolkit.errors import CheckpointFileError, NotReadableInPlaceError
from toolkit.sources.gguf.own_plan import OwnPlan
from toolkit.sources.gguf.sizes import check_declared_sizes
from toolkit.sources.gguf.source import GGUFSource, _normalized
from toolkit.sources.gguf.table import GGUFTable, Prefix, RangePath, parse_gguf_table
from toolkit.sources.identity import remote_identity
from toolkit.sources.remote.checked import RemoteFiles
from toolkit.sources.remote.folders import RemoteFolder
from toolkit.sources.remote.http import RemoteFile

#: Bytes of the first header read (a small model's whole header; a 262k-token vocabulary needs a few more reads).
FIRST_READ = 1 << 20
#: The largest header read (a GGUF header of more is refused as corrupted).
MAX_HEADER = 512 << 20


def _read(file: RemoteFile, offset: int, nbytes: int) -> bytes:
    return file.read(offset, nbytes).tobytes()


def read_remote_gguf_table(file: RemoteFile) -> GGUFTable:
    """The header of a remote GGUF file, read by range requests from byte 0 until the tensor table ends.

    Raises
    ------
    CheckpointFileError
        As :func:`toolkit.sources.gguf.table.read_gguf_table`; a header of more than :data:`MAX_HEADER` bytes.
    RemoteReadError, RemoteAccessError, CheckpointChangedError, SourceNotFoundError
        As :meth:`~toolkit.sources.remote.http.RemoteFile.read_into`.
    """
    name = RangePath(file.shown, lambda offset, nbytes: _read(file, offset, nbytes))
    data = _read(file, 0, min(file.size, FIRST_READ))
    while True:
        try:
            return parse_gguf_table(name, Prefix(data, file.size), file.size)
        except EOFError as more:  # the parse reached byte more.args[0], past the bytes read
            reached = int(more.args[0])
            want = min(file.size, max(reached, 2 * len(data)))
            if want > MAX_HEADER:
                raise CheckpointFileError(
                    file.url, f"its GGUF header runs past {MAX_HEADER} bytes (to byte {reached} at least): a "
                    "corrupted header; re-download the file, or check the URL",
                ) from None
            data += _read(file, len(data), want - len(data))


class RemoteGGUFSource(RemoteFiles, GGUFSource):
    """A GGUF file of a hub repo or behind a plain URL, read by range requests.

    Raises
    ------
    NotReadableInPlaceError
        A layout only ``transformers`` plans (it reads the file from disk): download it.
    CheckpointFileError
        A corrupted or truncated header, or declared sizes that disagree with the tensors.
    """

    def __init__(self, folder: RemoteFolder, target: str):
        file = folder.file(target)
        table = read_remote_gguf_table(file)
        plan = OwnPlan.of(table)
        if plan is None:
            raise NotReadableInPlaceError(
                file.url, f"its architecture ({table.architecture or '?'}) is read through transformers, which needs "
                "the file on disk; download it (download=True / --download, or the file's path)",
            )
        check_declared_sizes(table, plan.raw_config)
        self._plan, self._remote, self._cache = plan, {file.shown: file}, None
        self.location, self.format, self.revision = folder.location, "gguf", folder.commit
        self._given = folder.given
        self.config = _normalized(plan.raw_config)
        self.fingerprint = remote_identity(folder.location, folder.commit, [file])
        self.dropped = list(plan.dropped)
