"""What is verified of the bytes a server sends, beyond their range and version headers.

A hub lists each file's hash: the sha256 of its content for a file in Git
LFS (the same value the responses' ``X-Linked-Etag`` carry), the git blob id
(sha1 of ``"blob <size>\\0"`` and the content) for a small file kept in git.
A hash covers the whole file, so it can be checked only where the whole file
is read: :func:`check_whole` checks every file read whole (``config.json``,
a sharded index). The range reads of tensors cannot be checked this way; they
are checked by their ``Content-Range``, the size, the commit, the hash and
``ETag`` headers (:mod:`toolkit.sources.remote.http`), and a ``.bin`` record
read whole by its CRC-32 (:func:`toolkit.sources.zip_records.inflate`).
"""

from __future__ import annotations

import hashlib
import re

from toolkit.errors import RemoteReadError

__all__ = ["check_whole", "content_hash"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")


def content_hash(data: bytes, listed: str) -> str:
    """The hash of ``data`` of the kind ``listed`` is (a sha256, or a git blob sha1), ``""`` for another kind."""
    if _SHA256.match(listed):
        return hashlib.sha256(data).hexdigest()
    if _GIT_SHA1.match(listed):
        return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    return ""


def check_whole(url: str, data: bytes, listed: str) -> None:
    """Raise when the whole file ``data`` does not hash to the hub's ``listed`` hash (nothing to check when the
    hub lists no hash of a known kind).

    Raises
    ------
    RemoteReadError
        Other bytes than the hub's file: they are not used.
    """
    got = content_hash(data, listed)
    if got and got != listed:
        kind = "sha256" if len(listed) == 64 else "git blob sha1"
        raise RemoteReadError(url, 0, f"the {len(data)} bytes received hash to {kind} {got}, the hub lists "
                              f"{listed}: the server sent other bytes than the file's, which are not used. Try "
                              "again later, or download the checkpoint (download=True / --download)")
