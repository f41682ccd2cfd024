"""What the toolkit keeps in its cache folder, and clearing it: every folder its stores declared.

Each store declares its folder where it is defined
(:func:`toolkit.collect.cache.cache_kind`): the result cache of each
measurement (:mod:`toolkit.collect.measure`), the plan cache
(:mod:`toolkit.collect.plan.cache`). Importing them here gathers the
declarations, so :func:`cache_info` and :func:`clear_cache` cover every
folder the toolkit writes, and nothing else in ``$TOOLKIT_CACHE_DIR`` (which
may name a folder holding other files).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import toolkit.collect.measure  # noqa: F401  (declares the result folders)
import toolkit.collect.plan.cache  # noqa: F401  (declares the plan folder)
from toolkit.collect.cache import cache_dir, cache_kind, cache_kinds

__all__ = ["cache_info", "clear_cache"]

#: Folders of earlier versions, never written now: cleared with the rest.
RETIRED = cache_kind("heads", "per-head results of toolkit versions that measured heads in a second pass (retired)")
_DELETING = ".deleting-"


def _folders(root: Path) -> list[Path]:
    """The declared folders under ``root`` that exist (not through a symlink), and the leftovers of a clear
    that was interrupted."""
    found = [root / kind for kind in cache_kinds() if (root / kind).is_dir() and not (root / kind).is_symlink()]
    found += [p for p in root.iterdir() if p.name.startswith(".") and _DELETING in p.name and p.is_dir()
              and p.name.split(_DELETING)[0].lstrip(".") in cache_kinds()]
    return found


def _files(folder: Path) -> list[Path]:
    out = []
    for dirpath, _, names in os.walk(folder):
        out.extend(Path(dirpath) / n for n in names)
    return out


def cache_info() -> dict:
    """``{"path": str, "files": int, "bytes": int}`` of the cache in force: every file in the folders the
    toolkit declared (zeros when it cannot be read or caching is off)."""
    root = cache_dir()
    try:
        if root is None or not root.is_dir():
            return {"path": str(root or ""), "files": 0, "bytes": 0}
        files, size = 0, 0
        for folder in _folders(root):
            for f in _files(folder):
                try:
                    size += f.lstat().st_size
                    files += 1
                except FileNotFoundError:  # removed by a concurrent writer or clear
                    continue
        return {"path": str(root), "files": files, "bytes": size}
    except OSError:
        return {"path": str(root), "files": 0, "bytes": 0}


def _ignore_vanished(func, path, exc_info) -> None:
    if not issubclass(exc_info[0], FileNotFoundError):
        raise exc_info[1]


def clear_cache() -> int:
    """Delete what the toolkit stored in the cache folder in force (every declared folder, nothing
    else); returns the number of bytes freed.

    Safe beside processes writing to the same cache: each folder is first
    renamed aside (atomically) and then deleted, so a writer either finished
    its entry before (it is deleted) or creates a fresh folder after (its
    entry stays); files that vanish meanwhile are skipped.

    Raises
    ------
    OSError
        A folder cannot be deleted (the error names it).
    """
    info = cache_info()
    root = cache_dir()
    if root is None or not root.is_dir():
        return info["bytes"]
    for folder in _folders(root):
        aside = folder
        if _DELETING not in folder.name:
            aside = root / f".{folder.name}{_DELETING}{uuid.uuid4().hex[:8]}"
            try:
                folder.rename(aside)
            except FileNotFoundError:
                continue  # cleared by another process
        shutil.rmtree(aside, onerror=_ignore_vanished)
    return info["bytes"]
