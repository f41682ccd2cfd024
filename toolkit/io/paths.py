"""Paths of the files the toolkit writes and reads: checked before any work.

:func:`check_output_path` says, before a long computation, whether a file can
be written where the user asked (``toolkit.save``, the command lines' ``-o``
and ``--plot``); :func:`path_text` turns what was passed as a path into a
str, or a typed error.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.atomic import create_temp, output_target
from toolkit.errors import OutputPathError, PathTypeError


def check_output_path(path: str | os.PathLike, what: str = "the output file", example: str = "stats.nc") -> Path:
    """Check, before any work, that a file can be written at ``path``.

    The path must not name a folder (an existing one, or a text ending in
    ``/``) or anything else that is not a regular file (a device, a FIFO, a
    socket: :func:`toolkit.atomic.output_target`), no part of its folder may be a file, and the nearest existing
    folder above it must accept a new file (tried by creating and deleting
    one, which also catches read-only and virtual file systems). Missing
    folders are not created here; :func:`save` creates them.

    Parameters
    ----------
    path : str or path-like
    what : str
        How to name the path in the message (``"-o/--output"``).
    example : str
        A file name to suggest when ``path`` is a folder.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    OutputPathError
        Names the path, the problem and the fix.
    """
    text = os.fspath(path)
    path = Path(os.path.expanduser(text))
    problem = path_problem(text, path, what, example) if "\x00" not in text else ""
    if problem:
        raise OutputPathError(text, problem)
    output_target(path)  # a NUL, a device, a FIFO, a socket: never replaced by a file
    folder = _nearest_existing(path.parent)
    try:
        fd, probe = create_temp(folder / "toolkit-write-test")
    except OSError as e:
        raise OutputPathError(
            text, f"cannot create a file in {str(folder)!r} ({e.strerror or e}); choose a folder you can write to "
            f"for {what}", e.errno,
        ) from e
    os.close(fd)
    probe.unlink(missing_ok=True)
    return path


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def path_problem(text: str, path: Path, what: str, example: str) -> str:
    """Why no file can be written at ``path`` on the face of it (a folder, a
    file where a folder should be), else ``""``."""
    if text.endswith(("/", os.sep)) or path.is_dir():
        return f"{what} is a folder; give a file name inside it, e.g. {str(path / example)!r}"
    folder = _nearest_existing(path.parent)
    if folder.exists() and not folder.is_dir():
        return f"{str(folder)!r} is a file, not a folder; choose another path"
    return ""


def path_text(path, where: str) -> str:
    """``path`` as a str, or a :class:`PathTypeError` (a ``TypeError``) for what is no path."""
    if isinstance(path, (str, os.PathLike)):
        text = os.fspath(path)
        if isinstance(text, str):
            return text
        raise PathTypeError(path, f"{where}: the path-like gives bytes ({text[:60]!r}); pass a str path")
    if isinstance(path, (bytes, bytearray)):
        raise PathTypeError(path, f"{where}: the path is bytes ({bytes(path)[:60]!r}); pass a str: os.fsdecode(path)")
    raise PathTypeError(path, f"{where}: the path is of type {type(path).__name__} ({str(path)[:60]!r}); pass a "
                        "str or a pathlib.Path, e.g. 'stats.nc'")
