"""Atomic writes: a file (or folder) appears under its final name complete, or not at all.

Every writer of the toolkit goes through here. The new content is written to
a temporary name in the target's own folder (so the final rename never
crosses a file system) and renamed over the final name with ``os.replace``
only when the writer finished without an exception; on any exception
(``KeyboardInterrupt`` included) the temporary file is removed and the old
file, if any, is left as it was.

A file written here gets the permissions a plain ``open(path, "w")`` would
give it: those of the file it replaces, else ``0o666`` less the process umask
(the kernel applies it; ``tempfile.mkstemp`` would give ``0o600``). A folder
gets ``0o777`` less the umask, as ``os.mkdir`` gives.

Temporary names start with a dot and end in ``.tmp``
(``.stats.nc.3f9a1c2e.tmp``), so globs for the final names (``step-*``,
``*.json``) never see them.

A writer killed outright (SIGKILL, a power cut) cannot remove its temporary
file. The next atomic write into the same folder removes temporaries of this
naming that nobody has written to for :data:`STALE_AFTER_S` (an hour):
:func:`remove_stale_temps`. Age, not the writer's pid, decides: a folder may
be shared by several hosts (NFS, the workers of a cluster) or containers,
where a pid says nothing (another host's live writer has a pid that is dead
here, and pids are reused), while a file that a live writer is filling keeps
a fresh modification time. An hour is far longer than any write of the
toolkit takes between two chunks, and than the clock skew of hosts sharing a
file system. A temporary *folder* is kept while its final name is missing:
it may hold the only copy (:func:`atomic_dir` moves the old folder aside
just before the final rename).

What is at the final name decides whether it may be written (:func:`output_target`, before anything is
written): nothing, or a regular file, is replaced; a character or block device (``/dev/null``), a FIFO, a
socket or a folder where a file is asked for is refused with :class:`~toolkit.errors.OutputPathError` naming
the path, its kind and the way out (renaming a file over ``/dev/null`` would replace the device itself). A
symbolic link at the final name is followed: the file it points to is replaced atomically (the temporary file
is made in the target's folder) and the link stays a link; a link to something that is not a regular file is
refused as that thing would be, and a dangling link gets its target created. A path holding a NUL character is
an ``OutputPathError`` too.

- :func:`output_target` -- the file a write to ``path`` replaces, or the typed refusal.
- :func:`atomic_write` -- a context manager yielding an open file object.
- :func:`atomic_path` -- yields a temporary path, for writers that take a
  path (``xarray.Dataset.to_netcdf``, ``torch.save``, ``safetensors``).
- :func:`atomic_dir` -- yields a temporary folder that replaces a folder.
- :func:`create_temp` -- the temporary file itself (also a write probe).
- :func:`remove_stale_temps` -- remove what killed writers left in a folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["STALE_AFTER_S", "atomic_dir", "atomic_path", "atomic_write", "create_temp", "file_kind", "output_target",
           "remove_stale_temps"]

#: Seconds without a write after which a temporary file or folder of ours is a killed writer's leftover.
STALE_AFTER_S = 3600.0
#: A folder is swept at most once in this many seconds per process (writes of the cache come in thousands).
_SWEEP_EVERY_S = 600.0
_TEMP_RE = re.compile(r"^\.(?P<final>.+)\.[0-9a-f]{8}\.tmp$")
_swept: dict[str, float] = {}


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def file_kind(mode: int) -> str:
    """What an ``st_mode`` names, in words (``"a regular file"``, ``"a character device"``, ``"a folder"``...)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((kind for test, kind in _KINDS if test(mode)), "a special file")


def output_target(path: str | os.PathLike, *, folder: bool = False) -> Path:
    """The file (or, with ``folder``, the folder) that a write to ``path`` replaces, checked before anything is
    written.

    A symbolic link is followed to what it points to (the link itself is never replaced; a dangling link's
    target is created). Nothing there, or a regular file (a folder, with ``folder``), may be replaced; anything
    else is refused.

    Parameters
    ----------
    path : str or path-like
    folder : bool, default False
        The write makes a folder (:func:`atomic_dir`), which replaces a folder or a regular file.

    Returns
    -------
    pathlib.Path
        The path to write (the link's target for a link).

    Raises
    ------
    toolkit.errors.OutputPathError
        A NUL in the path; a device, FIFO, socket (or a folder, for a file) at the path or at the end of its
        links; a link loop. The message names the path, what is there and the way out.
    """
    from toolkit.errors import OutputPathError

    text = os.fspath(path)
    if "\x00" in str(text):
        raise OutputPathError(str(text).replace("\x00", "\\x00"), "the path holds a NUL character, which no "
                              "file name can; check how it was made")
    target = Path(text)
    if os.path.islink(target):
        target = Path(os.path.realpath(target))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as e:  # a link loop, a name too long, no permission to look
        raise OutputPathError(text, f"cannot look at what is there ({e.strerror or e}); choose another path",
                              e.errno) from None
    if stat.S_ISREG(mode) or (folder and stat.S_ISDIR(mode)):
        return target
    via = f" (a symbolic link to {str(target)!r})" if str(target) != text else ""
    way = ("give a file name inside it" if stat.S_ISDIR(mode) else
           "it is never replaced by a file; choose a path of a regular file (to discard output, leave the option "
           "out; a command line's -o takes /dev/null and - for standard output)")
    raise OutputPathError(text, f"the path{via} is {file_kind(mode)}, not a regular file: {way}")


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def _newest_mtime(folder: str, mtime: float, recent: float) -> float:
    """The newest modification time in the tree under ``folder`` (stops at the first newer than ``recent``)."""
    newest = mtime
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue
            if newest > recent:
                return newest
    return newest


def remove_stale_temps(folder: str | os.PathLike, *, older_than: float = STALE_AFTER_S) -> list[Path]:
    """Remove the temporary files and folders of this module's naming (``.NAME.<8 hex>.tmp``)
    in ``folder`` that nobody has written to for ``older_than`` seconds.

    A temporary folder is kept while its final name is missing (it may hold
    the only copy, see the module docstring). Symbolic links and other names
    are never touched; errors (a file removed meanwhile, no permission) are
    ignored.

    Returns
    -------
    list of pathlib.Path
        What was removed.
    """
    removed: list[Path] = []
    cutoff = time.time() - older_than
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP_RE.match(entry.name)
        if match is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                if st.st_mtime > cutoff:
                    continue
                os.unlink(entry.path)
            elif stat.S_ISDIR(st.st_mode):
                if not os.path.lexists(os.path.join(os.fspath(folder), match["final"])) \
                        or _newest_mtime(entry.path, st.st_mtime, cutoff) > cutoff:
                    continue
                shutil.rmtree(entry.path)
            else:
                continue
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def _sweep(folder: Path) -> None:
    """:func:`remove_stale_temps` on ``folder``, at most once per :data:`_SWEEP_EVERY_S` per process."""
    key = os.path.abspath(folder)
    now = time.monotonic()
    last = _swept.get(key)
    if last is not None and now - last < _SWEEP_EVERY_S:
        return
    _swept[key] = now
    remove_stale_temps(folder)


def create_temp(path: str | os.PathLike) -> tuple[int, Path]:
    """Create a new empty file next to ``path`` (a fresh hidden name), mode ``0o666`` less the umask.

    Returns
    -------
    (int, pathlib.Path)
        An open write-only file descriptor (the caller closes it) and the
        temporary path (the caller removes or renames it).

    Raises
    ------
    OSError
        The folder does not exist or does not accept a new file.
    """
    path = Path(path)
    for _ in range(100):
        tmp = _temp_name(path)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name next to {str(path)!r}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s new content to; rename it over ``path`` on success.

    ``path`` is checked first (:func:`output_target`: a regular file or nothing; a symbolic link is followed,
    and its target replaced). The temporary file exists (empty) when the body starts, with the mode
    ``path`` will have; the writer may overwrite or truncate it. The folder
    of ``path`` must exist; stale temporaries of killed writers in it are
    removed first (:func:`remove_stale_temps`).

    Raises
    ------
    toolkit.errors.OutputPathError
        ``path`` is not a regular file (a device, a FIFO, a socket, a folder), or holds a NUL (before the body
        runs).
    OSError
        The temporary file cannot be created (before the body runs), or the
        rename fails; whatever the body raises propagates, after the
        temporary file is removed.

    Examples
    --------
    >>> with atomic_path("stats.nc") as tmp:          # doctest: +SKIP
    ...     ds.to_netcdf(tmp)
    """
    path = output_target(path)
    _sweep(path.parent)
    fd, tmp = create_temp(path)
    try:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):  # keep the mode of the file replaced, as open(path, "w")
            mode = os.stat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(tmp, stat.S_IMODE(mode))
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator[IO]:
    """Open ``path`` for writing, atomically: yield a file object whose content replaces ``path`` on success.

    Parameters
    ----------
    path : str or path-like
        The final file; its folder must exist.
    mode : {"w", "wb"}
        Text or binary.
    encoding : str, default "utf-8"
        Text mode only (ignored for ``"wb"``).
    newline : str, optional
        Text mode only, as for :func:`open`.

    Raises
    ------
    ValueError
        ``mode`` is not ``"w"`` or ``"wb"``.
    OSError
        As :func:`atomic_path`.

    Examples
    --------
    >>> with atomic_write("run.json") as f:           # doctest: +SKIP
    ...     json.dump(info, f)
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes a whole file: mode must be 'w' or 'wb', got {mode!r}")
    text = {"encoding": encoding, "newline": newline} if mode == "w" else {}
    with atomic_path(path) as tmp, open(tmp, mode, **text) as f:
        yield f


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty temporary folder next to ``path``; on success it replaces ``path``.

    Whatever was at ``path`` (a folder, a file) is moved aside first and
    removed only after the new folder is in place, so ``path`` is missing at
    most for the moment between two renames, and an old folder comes back if
    the second rename fails. On an exception in the body the temporary folder
    is removed and ``path`` is left as it was. The folder of ``path`` must exist.

    Examples
    --------
    >>> with atomic_dir("out/step-00010") as tmp:     # doctest: +SKIP
    ...     save_file(tensors, tmp / "model.safetensors")
    """
    path = output_target(path, folder=True)
    _sweep(path.parent)
    for _ in range(100):
        tmp = _temp_name(path)
        try:
            os.mkdir(tmp, 0o777)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary folder name next to {str(path)!r}")
    try:
        yield tmp
        old = None
        if os.path.lexists(path):
            old = _temp_name(path)
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old is not None:
                os.replace(old, path)
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
