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

- :func:`atomic_write` -- a context manager yielding an open file object.
- :func:`atomic_path` -- yields a temporary path, for writers that take a
  path (``xarray.Dataset.to_netcdf``, ``torch.save``, ``safetensors``).
- :func:`atomic_dir` -- yields a temporary folder that replaces a folder.
- :func:`create_temp` -- the temporary file itself (also a write probe).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_dir", "atomic_path", "atomic_write", "create_temp"]


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


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

    The temporary file exists (empty) when the body starts, with the mode
    ``path`` will have; the writer may overwrite or truncate it. The folder
    of ``path`` must exist.

    Raises
    ------
    OSError
        The temporary file cannot be created (before the body runs), or the
        rename fails; whatever the body raises propagates, after the
        temporary file is removed.

    Examples
    --------
    >>> with atomic_path("stats.nc") as tmp:          # doctest: +SKIP
    ...     ds.to_netcdf(tmp)
    """
    path = Path(path)
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
    path = Path(path)
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
