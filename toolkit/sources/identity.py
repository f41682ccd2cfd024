"""What identifies the bytes of a weight file, so no cached number is ever served for other bytes.

A local file is identified at least as strictly as git's index identifies a
work-tree file: device, inode, size, modification time and status-change
time, both in nanoseconds. ``cp -p`` or ``touch -r`` can give a file another
file's size and mtime, but not its ctime (the kernel sets it on every write,
chmod or rename of the file itself, and no system call sets it back); two
files in two folders never share (device, inode). A file inside a Hugging
Face cache snapshot is identified by its blob's sha256 (the hash of its
content the cache layout gives for free) together with the same stat fields:
the name alone would trust a blob rewritten in place (``cp`` onto the
snapshot link writes through it).

What moving a checkpoint does (``mv old new`` on one file system): the files
keep device, inode and ctime (renaming a parent folder does not touch its
files), so their cached results are found again under the new path. Copying
it (``cp -r``, ``cp -a``, unzipping) makes new inodes: a miss, computed again.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def hub_sha256(path: str | os.PathLike) -> str:
    """The sha256 a Hugging Face cache gives a file, else ``""``.

    Files of a hub snapshot are links into ``blobs/``; a blob stored with Git
    LFS is named by the sha256 of its content (small files by a git sha1,
    which is not returned: those are identified by their stat fields).
    """
    target = Path(os.path.realpath(path))
    if target.parent.name == "blobs" and _HEX64.match(target.name):
        return target.name
    return ""


def file_identity(path: str | os.PathLike, *, portable: bool = False) -> str:
    """One file's identity as a string.

    Parameters
    ----------
    path : path-like
        An existing file (links are followed).
    portable : bool, default False
        Leave out the device number, which differs between machines that
        mount one shared file system (the check a Dask worker makes that it
        sees the driver's file); inode, size and times come from the server.

    Returns
    -------
    str
        ``"stat:<dev>:<ino>:<size>:<mtime_ns>:<ctime_ns>"`` (without ``<dev>``
        when ``portable``), prefixed ``"blob:<sha256>:"`` for a Hugging Face
        cache blob.

    Raises
    ------
    OSError
        The file cannot be stat'ed.
    """
    st = os.stat(path)
    blob = hub_sha256(path)
    fields = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    if not portable:
        fields.insert(0, st.st_dev)
    return (f"blob:{blob}:" if blob else "") + "stat:" + ":".join(map(str, fields))


def files_identity(files: Iterable[str | os.PathLike], *, portable: bool = False) -> str:
    """A sha256 hex digest over the names and :func:`file_identity` of ``files`` (order-free).

    Equal for the same files seen through another path (a link, a moved
    folder on the same file system); different as soon as one file's bytes
    may differ.
    """
    digest = hashlib.sha256()
    for f in sorted(map(str, files)):
        digest.update(f"{Path(f).name}\0{file_identity(f, portable=portable)}\n".encode())
    return digest.hexdigest()


def remote_identity(location: str, commit: str, files: Iterable) -> str:
    """A sha256 hex digest identifying the bytes of remote weight files (order-free).

    Parameters
    ----------
    location : str
        The hub id or URL the files were opened from.
    commit : str
        The hub commit (``""`` for a plain URL).
    files : iterable of RemoteFile
        Each file's name, size and the version the server gave it
        (:attr:`~toolkit.sources.remote.http.RemoteFile.identity`: the LFS
        sha256 for a hub file, the ``ETag`` for a plain URL).

    Returns
    -------
    str
        The same in every process that opens the same version (a Dask worker's
        check that it reads what the driver planned); another as soon as the
        commit or one file's hash, ETag or size differs.
    """
    digest = hashlib.sha256(f"remote\0{location}\0{commit}\n".encode())
    for ident in sorted(f.identity for f in files):
        digest.update(f"{ident}\n".encode())
    return digest.hexdigest()
