"""Byte ranges of one remote file over HTTP: the bytes asked for, of the version opened, or a typed error.

Every request goes through :func:`toolkit.sources.remote.transport.exchange` (the HTTP client
``huggingface_hub`` configures; redirects, time and size bounded there;
:func:`huggingface_hub.utils.build_hf_headers` adds the token for hub files).
A read of ``nbytes`` at ``offset`` asks ``Range: bytes=offset-(offset+nbytes-1)``
and accepts only what makes those bytes certain:

================================  =====================================================================
the server answers                what happens
================================  =====================================================================
206 with the ``Content-Range``    the bytes are taken; a shorter body (cut short, or a connection
asked for                         dropped mid-body) is resumed from the byte reached
200 (``Range`` ignored)           the first bytes are taken when the read starts at byte 0 (the
                                  connection is then closed); any other read is refused
                                  (:class:`~toolkit.errors.RemoteReadError`): it would move the file
                                  up to that byte on every read
206 with another range            refused (:class:`~toolkit.errors.RemoteReadError`), never used
429, 500, 502, 503, 504           retried after ``Retry-After`` (seconds or a date; at most
                                  :data:`MAX_WAIT`), else after :data:`BACKOFF` x 2^k seconds;
                                  :data:`RETRIES` retries without progress, then an error
dropped connection, timeout       retried the same way, from the byte reached
a body slower than the minimum    :class:`~toolkit.errors.RemoteReadError` at once (``TOOLKIT_HTTP_MIN_RATE``)
rate
a redirect loop, a redirect to    :class:`~toolkit.errors.RemoteReadError` at once, never retried
another scheme
401, 403                          :class:`~toolkit.errors.RemoteAccessError` (how to log in)
404                               :class:`~toolkit.errors.SourceNotFoundError`
412, 416, another size, ETag,     :class:`~toolkit.errors.CheckpointChangedError`: the file is not
``X-Repo-Commit`` or              the version opened
``X-Linked-Etag``
================================  =====================================================================

Each response is checked against the version the file was opened at: the
size (``Content-Range``'s total, or a 200's ``Content-Length``), the hub's
``X-Repo-Commit`` and ``X-Linked-Etag`` on every hop (a redirect to a CDN
included), and the final server's ``ETag``, which must stay the one it gave
first since the file was opened. Bytes are counted per process (:func:`transfer_stats`).
"""

from __future__ import annotations

import email.utils
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from toolkit.errors import CheckpointChangedError, RemoteAccessError, RemoteReadError, SourceNotFoundError
from toolkit.redaction import redact
from toolkit.sources.remote.transport import Transient, exchange, stream_body, whole_size
from toolkit.sources.remote.verify import check_whole

__all__ = ["BACKOFF", "MAX_WAIT", "RETRIES", "RemoteFile", "changed_since_opened", "transfer_stats"]

#: Retries of one read that made no progress (429, 5xx, dropped connections), after the first attempt.
RETRIES = 5
#: Seconds before the first retry without ``Retry-After``; doubled at each retry (0.5, 1, 2, 4, 8).
BACKOFF = 0.5
#: The longest ``Retry-After`` waited for, in seconds; a longer one is an error that names it.
MAX_WAIT = 60.0
#: Attempts for one read in all, with progress or not (a server that drops every connection after a byte).
MAX_ATTEMPTS = 64

_RETRIED = {429, 500, 502, 503, 504}
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class _Stats:
    """Requests, bytes received and retries of this process."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.bytes = self.retries = 0

    def add(self, *, requests: int = 0, nbytes: int = 0, retries: int = 0) -> None:
        with self.lock:
            self.requests += requests
            self.bytes += nbytes
            self.retries += retries


_STATS = _Stats()
_ETAG_LOCK = threading.Lock()


class _Seen:
    """What the responses for one opened file showed: the final server's first ``ETag``, and another
    version (``changed``, ``""`` while none was seen)."""

    def __init__(self):
        self.first_etag = ""
        self.changed = ""


def changed_since_opened(files) -> str:
    """What a response showed of another version of one of ``files`` (RemoteFile) since they were opened
    (``""``: nothing)."""
    with _ETAG_LOCK:
        return next((f"{f.url}: {f.seen.changed}" for f in files if f.seen.changed), "")


def transfer_stats(reset: bool = False) -> dict:
    """What this process has moved over HTTP for remote weight files.

    Parameters
    ----------
    reset : bool, default False
        Set the counters to zero after reading them.

    Returns
    -------
    dict
        ``{"requests": int, "bytes": int, "retries": int}``: requests sent
        (HEADs and ranges), body bytes received (bytes), retries made.
    """
    with _STATS.lock:
        out = {"requests": _STATS.requests, "bytes": _STATS.bytes, "retries": _STATS.retries}
        if reset:
            _STATS.requests = _STATS.bytes = _STATS.retries = 0
    return out


def _unquoted(etag: str | None) -> str:
    """``W/"abc"`` -> ``abc``: the ETag's opaque value."""
    value = (etag or "").strip()
    return value.removeprefix("W/").strip('"')


def login_advice(hub: bool) -> str:
    """What to do about a 401/403."""
    if hub:
        return ("the repo is gated or private: accept its licence on its hub page, then log in with "
                "`hf auth login` (or `huggingface-cli login`), or set HF_TOKEN to a token that may read it")
    return "the server refuses this client: check the URL, or that it needs no credentials"


@dataclass(frozen=True)
class RemoteFile:
    """One remote weight file, pinned to the version it was opened at.

    Attributes
    ----------
    url : str
        Where its bytes are read (a hub ``.../resolve/<commit>/<file>`` URL, or a plain URL).
    name : str
        The file's name in its repo or folder (``model-00001-of-00002.safetensors``).
    size : int
        Its size in bytes.
    etag : str
        For a hub file its LFS sha256 (its git blob id when not in LFS), which
        each response's ``X-Linked-Etag`` must match; for a plain URL the
        server's ``ETag`` (``""`` when it gives none).
    commit : str
        The hub commit each response's ``X-Repo-Commit`` must match (``""`` for a plain URL).
    hub : bool
        A hub file: requests carry the hub token.
    seen : _Seen
        What the responses showed since this file was opened (the final server's
        first ``ETag``, another version), for :func:`changed_since_opened`.
    """

    url: str
    name: str
    size: int
    etag: str = ""
    commit: str = ""
    hub: bool = False
    seen: _Seen = field(default_factory=_Seen, repr=False, compare=False)

    @property
    def shown(self) -> str:
        """:attr:`url` as shown and stored: its secrets masked (:func:`toolkit.redaction.redact`)."""
        return redact(self.url)

    @property
    def identity(self) -> str:
        """``"name:size:etag:commit"``: what the result cache identifies this file by."""
        return f"{self.name}:{self.size}:{self.etag}:{self.commit}"

    def read(self, offset: int, nbytes: int) -> np.ndarray:
        """Bytes ``offset`` to ``offset + nbytes`` of the file, as a new ``uint8`` array.

        Raises
        ------
        RemoteReadError, RemoteAccessError, SourceNotFoundError, CheckpointChangedError
            As :meth:`read_into`.
        """
        try:
            buf = np.empty(nbytes, dtype=np.uint8)
        except MemoryError as exc:
            raise RemoteReadError(self.url, 0, f"{nbytes} bytes asked for at byte {offset} do not fit in memory (the "
                                  f"file says it is {self.size} bytes); download the checkpoint instead") from exc
        self.read_into(offset, memoryview(buf))
        return buf

    def read_whole(self, what: str) -> bytes:
        """The whole file (a config, an index), its size checked against the cap before anything is allocated
        (:func:`~toolkit.sources.remote.transport.whole_size`), and, for a hub file, its bytes against the
        hub's hash (:func:`~toolkit.sources.remote.verify.check_whole`).

        Raises
        ------
        CheckpointFileError
            A file larger than the cap (``TOOLKIT_MAX_WHOLE_FILE``).
        RemoteReadError
            Bytes whose hash is not the hub's; as :meth:`read_into`.
        """
        if self.size < 0:
            raise RemoteReadError(self.url, 0, "the hub lists no size for this file; download the checkpoint "
                                  "instead (download=True / --download)")
        data = self.read(0, whole_size(self.url, self.size, what)).tobytes()
        if self.hub:
            check_whole(self.url, data, self.etag)
        return data

    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` (a writable byte buffer) with the bytes of the file from ``offset`` on.

        Parameters
        ----------
        offset : int
            First byte, 0-based.
        out : memoryview
            ``len(out)`` bytes are read; ``offset + len(out)`` must not pass :attr:`size`.

        Raises
        ------
        CheckpointChangedError
            The server holds another version of the file (another size, ETag or commit).
        RemoteAccessError
            HTTP 401 or 403 (the message says how to log in).
        SourceNotFoundError
            HTTP 404.
        RemoteReadError
            Retries spent (429, 5xx, dropped connections), a server that ignores
            ``Range`` for a read not starting at byte 0, a ``Content-Range`` other
            than the one asked for, or a compressed body.
        """
        nbytes = len(out)
        if offset < 0 or offset + nbytes > self.size:
            raise CheckpointChangedError(self.url, self.identity, f"a read of bytes {offset}-{offset + nbytes} "
                                         f"past its {self.size} bytes")
        got = stalled = attempts = 0
        while got < nbytes:
            attempts += 1
            n, failed = self._attempt(offset + got, out[got:])
            status, wait, why = failed if failed is not None else (0, None, "")
            got += n
            if got >= nbytes:
                break
            stalled = 0 if n else stalled + 1
            if not why:
                why = f"the body ended after {n} of the {nbytes - got + n} bytes asked for"
            if stalled > RETRIES or attempts >= MAX_ATTEMPTS:
                raise RemoteReadError(
                    self.url, status, f"{why}; gave up after {attempts} attempts ({got} of {nbytes} bytes read). "
                    "Try again later, or download the checkpoint (download=True / --download)",
                )
            _STATS.add(retries=1)
            time.sleep(wait if wait is not None else BACKOFF * 2 ** max(0, stalled - 1))

    # ------------------------------------------------------------------ one request

    def _headers(self, first: int, last: int) -> dict:
        headers = {"Range": f"bytes={first}-{last}", "Accept-Encoding": "identity"}
        if self.hub:
            from huggingface_hub.utils import build_hf_headers

            headers = {**build_hf_headers(), **headers}
        return headers

    def _attempt(self, start: int, out: memoryview) -> tuple[int, tuple | None]:
        """One ranged GET from ``start`` into ``out``: the bytes received (fewer when the body ends early),
        and ``(status, seconds to wait or None, reason)`` when it failed in a way a retry may cure.

        Raises a typed error for the rest.
        """
        want = len(out)
        n = 0
        try:
            with exchange("GET", self.url, self._headers(start, start + want - 1)) as (resp, history):
                _STATS.add(requests=1)
                take = self._accepted(resp, history, start, want)
                if isinstance(take, tuple):
                    return 0, take
                try:
                    for n in stream_body(resp, self.url, out[:take]):  # noqa: B007  (n: the bytes reached)
                        pass
                finally:
                    _STATS.add(nbytes=n)
                return n, None
        except Transient as exc:
            return n, (0, None, exc.reason)

    def _accepted(self, resp, history: list, start: int, want: int) -> int | tuple:
        """Check a response's status and validators: how many of its body bytes to take, or
        ``(status, seconds to wait or None, reason)`` for an answer to retry."""
        status = resp.status_code
        if status in _RETRIED:
            return status, retry_after(resp, self.url), f"the server answered HTTP {status}"
        if status in (401, 403):
            raise RemoteAccessError(self.url, status, login_advice(self.hub))
        if status == 404:
            raise SourceNotFoundError(self.url, "the server has no such file (HTTP 404); check the URL, repo, "
                                      "revision and file name")
        if status in (412, 416):
            raise CheckpointChangedError(self.url, self.identity, f"HTTP {status} for bytes {start}-{start + want - 1}")
        if status not in (200, 206):
            raise RemoteReadError(self.url, status, "an answer that is neither the bytes asked for (206) nor the "
                                  "whole file (200)")
        self.check_version(resp, history)
        encoding = resp.headers.get("Content-Encoding", "identity").lower()
        if encoding not in ("", "identity"):
            raise RemoteReadError(self.url, status, f"a body compressed with {encoding!r}, whose bytes are not the "
                                  "file's; the server must serve the file as it is")
        if status == 200:
            length = resp.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) != self.size:
                raise CheckpointChangedError(self.url, self.identity, f"size {length} (HTTP 200)")
            if start != 0:
                raise RemoteReadError(
                    self.url, 200, f"the server ignores Range requests: asked for bytes {start}-{start + want - 1}, "
                    f"it sends the whole file ({self.size} bytes) from byte 0. Reading in place needs a server "
                    "that answers ranges (206); download the checkpoint instead (download=True / --download)",
                )
            return want
        m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", "").strip())
        if m is None or int(m[1]) != start or int(m[2]) < start:
            raise RemoteReadError(self.url, 206, f"asked for bytes {start}-{start + want - 1}, the server sent "
                                  f"Content-Range {resp.headers.get('Content-Range')!r}; its bytes are not used")
        if m[3] != "*" and int(m[3]) != self.size:
            raise CheckpointChangedError(self.url, self.identity, f"size {m[3]} (Content-Range)")
        return min(want, int(m[2]) - start + 1)

    def check_version(self, resp, history: list) -> None:
        """Raise :class:`CheckpointChangedError` when a response (or a redirect before it, ``history``) shows
        another commit, LFS hash or ETag than the version opened (and remember it:
        :func:`changed_since_opened`)."""
        other = self._other_version(resp, history)
        if other:
            with _ETAG_LOCK:
                self.seen.changed = self.seen.changed or other
            raise CheckpointChangedError(self.url, self.identity, other)

    def _other_version(self, resp, history: list) -> str:
        for hop in [*history, resp]:
            commit = hop.headers.get("X-Repo-Commit")
            if self.commit and commit and commit != self.commit:
                return f"commit {commit}"
            linked = hop.headers.get("X-Linked-Etag")
            if self.hub and self.etag and linked and _unquoted(linked) != self.etag:
                return f"X-Linked-Etag {_unquoted(linked)}"
        etag = _unquoted(resp.headers.get("ETag"))
        if not etag:
            return ""
        if not self.hub and self.etag and etag != self.etag:
            return f"ETag {etag}"
        with _ETAG_LOCK:
            first = self.seen.first_etag = self.seen.first_etag or etag
        return f"ETag {etag} (first seen: {first})" if first != etag else ""


def retry_after(resp, url: str) -> float | None:
    """Seconds a 429/503 answer's ``Retry-After`` asks to wait (None when it gives none).

    Raises
    ------
    RemoteReadError
        It asks for more than :data:`MAX_WAIT` seconds.
    """
    value = (resp.headers.get("Retry-After") or "").strip()
    if not value:
        return None
    if value.isdigit():
        wait = float(value)
    else:
        try:
            wait = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    wait = max(0.0, wait)
    if wait > MAX_WAIT:
        raise RemoteReadError(url, resp.status_code, f"the server asks to wait {wait:.0f} s before asking again "
                              f"(Retry-After), more than the {MAX_WAIT:.0f} s waited here; try again later")
    return wait
