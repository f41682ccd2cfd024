"""Where the files of a remote checkpoint lie: a hub repo at a commit, or a folder of plain URLs.

A :class:`RemoteFolder` answers :meth:`~RemoteFolder.file` (a
:class:`~toolkit.sources.remote.http.RemoteFile` pinned to the version seen
now, or None when there is no such file) and :meth:`~RemoteFolder.names`
(every file, when the server can list them).

- :func:`hub_folder`: ``HfApi.model_info(repo, revision, files_metadata=True)``'s request
  (sent through :mod:`toolkit.sources.remote.transport`) resolves the revision to a commit
  and lists every file with its size and LFS sha256 in one request (``HF_ENDPOINT`` and the token are the hub
  client's); each file is then read from ``hf_hub_url(repo, file, revision=commit)``.
- :func:`url_folder`: a plain URL of a weight file, an index, or a folder;
  each file is found by a HEAD request (its size and ``ETag``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from toolkit.errors import CheckpointFileError
from toolkit.redaction import redact
from toolkit.sources.remote.http import RemoteFile
from toolkit.sources.remote.probe import head, hub_listing

#: Suffixes of URLs that name one file (the rest are folders).
FILE_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".json")


def is_url(text: str) -> bool:
    """``http://`` or ``https://``, in any case (RFC 3986: a scheme is case-insensitive, ``HTTPS://`` too)."""
    return text[:8].lower().startswith(("http://", "https://"))


def endpoint() -> str:
    """The hub's address: ``HF_ENDPOINT`` read now, else ``huggingface_hub``'s default."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


@dataclass
class RemoteFolder:
    """The files of one remote checkpoint.

    Attributes
    ----------
    location : str
        The hub id or URL (of the folder) the user gave, as shown: its secrets masked
        (:func:`toolkit.redaction.redact`).
    commit : str
        The hub commit the revision resolved to (``""`` for plain URLs).
    listed : dict of str -> RemoteFile, or None
        Every file by name (a hub repo); None when the server cannot list them (plain URLs).
    base : str
        The folder's URL, for plain URLs (without query).
    given : str
        The hub id or URL as given, secrets included (:meth:`~toolkit.sources.Source.reopen_location`).
    query : str
        A plain URL's query (a signed URL's signature...), sent with the request of every file of the folder.
    """

    location: str
    commit: str = ""
    listed: dict[str, RemoteFile] | None = None
    base: str = ""
    given: str = ""
    query: str = ""
    _probed: dict[str, RemoteFile | None] = field(default_factory=dict, repr=False)

    @property
    def hub(self) -> bool:
        return self.listed is not None

    def names(self) -> list[str] | None:
        """Every file's name (a hub repo), None when they cannot be listed."""
        return None if self.listed is None else sorted(self.listed)

    def file(self, name: str) -> RemoteFile | None:
        """The file ``name`` (relative to the repo or folder), None when there is none.

        Raises
        ------
        RemoteAccessError, RemoteReadError
            The server refuses or fails the HEAD request of a plain URL.
        """
        if self.listed is not None:
            return self.listed.get(name)
        if name not in self._probed:
            url = f"{self.base}/{name}" + (f"?{self.query}" if self.query else "")
            size, etag, status = head(url)
            self._probed[name] = None if status == 404 else RemoteFile(url, name, size, etag)
        return self._probed[name]


def hub_folder(repo_id: str, revision: str | None) -> RemoteFolder:
    """The files of a hub repo at ``revision`` (default ``main``), resolved to its commit.

    The listing is ``HfApi.model_info(repo, revision, files_metadata=True)``'s
    request, sent through the one transport (:func:`~toolkit.sources.remote.probe.hub_listing`)
    and read by ``huggingface_hub``'s ``ModelInfo``.

    Raises
    ------
    SourceNotFoundError
        No such repo or revision, or a gated repo.
    RemoteReadError, CheckpointFileError
        The hub keeps failing, loops, or answers with no JSON object (or one over the cap).
    """
    from huggingface_hub import hf_hub_url
    from huggingface_hub.hf_api import ModelInfo

    where = endpoint()
    data = hub_listing(where, repo_id, revision or "main")
    try:
        info = ModelInfo(**data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointFileError(f"{where}/api/models/{repo_id}", f"the hub's listing is not one huggingface_hub "
                                  f"reads ({type(exc).__name__}: {exc})") from exc
    commit = info.sha or ""
    files = {}
    for s in info.siblings or []:
        lfs = s.lfs
        size = lfs.size if lfs is not None else s.size
        etag = lfs.sha256 if lfs is not None else (s.blob_id or "")
        url = hf_hub_url(repo_id, s.rfilename, revision=commit, endpoint=where)
        files[s.rfilename] = RemoteFile(url, s.rfilename, -1 if size is None else int(size), etag, commit, hub=True)
    return RemoteFolder(repo_id, commit, files, given=repo_id)


def url_folder(url: str) -> tuple[RemoteFolder, str]:
    """The folder of a plain URL, and the file it names (``""`` for a folder URL).

    ``https://host/m/model.safetensors`` -> (folder ``https://host/m``, ``"model.safetensors"``);
    ``https://host/m/`` -> (folder ``https://host/m``, ``""``). The query (a signed URL's) goes with every
    file's requests; the folder's ``location`` is the URL with its secrets masked.
    """
    text, _, query = url.split("#", 1)[0].partition("?")
    shown = redact(url)
    if text.endswith(FILE_SUFFIXES):
        base, _, name = text.rpartition("/")
        return RemoteFolder(shown, base=base, given=url, query=query), name
    return RemoteFolder(shown, base=text.rstrip("/"), given=url, query=query), ""
