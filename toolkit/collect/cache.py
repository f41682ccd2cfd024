"""On-disk cache of per-matrix results, so re-runs are near-instant and an
interrupted run resumes where it stopped.

One small JSON file per (source identity, stored tensor, component piece);
inside it one entry per metric key (name + a hash of the metric function's
code and options + toolkit version). The source identity covers the bytes
of every weight file (:mod:`toolkit.sources.identity`: device, inode, size,
mtime and ctime, or a hub blob's sha256) and how they are turned into
numbers (format, dequantising libraries), so no entry is ever served for
other bytes. Each file is written to a temporary name and renamed
(:func:`toolkit.atomic.atomic_write`), so a killed process or two processes
writing one entry at once always leave a valid file.

A cache that cannot be used (read-only, a file where the folder should be,
``/proc``, entries truncated, garbled or of the wrong shape) never stops the
work: an unreadable entry is a miss and is computed again, and the first
failed write turns the cache off for the rest of the run with one
:class:`CacheWarning` naming the folder and ``$TOOLKIT_CACHE_DIR``.

Location: ``$TOOLKIT_CACHE_DIR`` if set, else the platform's user cache folder
(``~/.cache/toolkit`` on Linux). ``TOOLKIT_CACHE_DIR=off`` (or ``0``/``none``)
disables caching, as does ``cache=False`` on the public functions.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from toolkit._version import __version__
from toolkit.atomic import atomic_write
from toolkit.errors import CacheWarning

ENV_VAR = "TOOLKIT_CACHE_DIR"
_OFF = {"off", "0", "none", "false", "disabled"}


def cache_dir() -> Path | None:
    """The cache folder in force, or None when caching is disabled by ``$TOOLKIT_CACHE_DIR``."""
    env = os.environ.get(ENV_VAR)
    if env is not None and env.strip().lower() in _OFF:
        return None
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("toolkit"))


def digest(*parts: object) -> str:
    """A 32-hex-digit sha256 of ``parts`` (JSON, keys sorted; other objects by ``str``)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def metric_key(metric, **options) -> str:
    """Key of one metric's result: its name, the bytecode and constants of its
    function (a re-registered metric with new code misses), its options and
    the toolkit version."""
    func = metric.func
    code = getattr(func, "__code__", None)
    body = (code.co_code.hex(), repr(code.co_consts)) if code is not None else (repr(func),)
    return f"{metric.name}:{digest(body, sorted(options.items()), __version__)[:16]}"


_RUN: ContextVar[set | None] = ContextVar("toolkit_cache_run", default=None)


@contextmanager
def cache_run():
    """The extent of one run (a public call): :func:`warn_unusable` warns once per folder within it."""
    token = _RUN.set(set()) if _RUN.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _RUN.reset(token)


def warn_unusable(folder, exc: BaseException, doing: str) -> None:
    """The one warning of a run whose cache cannot be used (once per folder within :func:`cache_run`)."""
    seen = _RUN.get()
    if seen is not None:
        if str(folder) in seen:
            return
        seen.add(str(folder))
    warnings.warn(
        f"the toolkit cache at {str(folder)!r} cannot be {doing} ({type(exc).__name__}: {exc}); this run goes on "
        f"without it (results are computed, not stored). Set ${ENV_VAR} to a writable folder, or to 'off'.",
        CacheWarning, stacklevel=3,
    )


def _results(raw) -> dict:
    """``{key: (float, str)}`` from the JSON form; raises on anything else."""
    if not isinstance(raw, dict):
        raise TypeError("results is not an object")
    out = {}
    for key, entry in raw.items():
        value, reason = entry
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TypeError(f"value of {key!r} is not a number")
        if not isinstance(reason, str):
            raise TypeError(f"reason of {key!r} is not a string")
        out[str(key)] = (math.nan if value is None else float(value), reason)
    return out


def _shape(raw) -> tuple[int, int]:
    if (not isinstance(raw, list) or len(raw) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in raw)):
        raise TypeError("shape is not two non-negative integers")
    return int(raw[0]), int(raw[1])


@dataclass
class ResultCache:
    """One source's (or pair's) view of the cache: ``get`` and ``put`` results of one cell.

    Parameters
    ----------
    root : Path or None
        Cache folder; None makes every call a no-op (cache disabled).
    identity : str
        What was measured: the source identity (or both sides' for a pair)
        and everything that turns its bytes into numbers.
    kind : str
        Namespace, e.g. ``"weights"`` or ``"compare"``.
    """

    root: Path | None
    identity: str
    kind: str = "weights"
    _broken: bool = field(default=False, repr=False)

    @property
    def folder(self) -> Path | None:
        if self.root is None or self._broken:
            return None
        return self.root / self.kind / digest(self.identity)

    def _path(self, cell_id: str) -> Path | None:
        folder = self.folder
        return None if folder is None else folder / f"{digest(cell_id)}.json"

    def get(self, cell_id: str) -> tuple[dict, tuple[int, int] | None]:
        """Cached ``({metric_key: (value, reason)}, shape)`` of one cell; ``({}, None)``
        when there is none or it cannot be read (a miss, never a wrong number)."""
        path = self._path(cell_id)
        try:
            if path is None or not path.is_file():
                return {}, None
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or data.get("cell") != cell_id:
                return {}, None
            return _results(data["results"]), _shape(data["shape"])
        except (OSError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError):
            return {}, None

    def put(self, cell_id: str, results: dict, shape: tuple[int, int]) -> None:
        """Merge ``{metric_key: (value, reason)}`` into the cell's file, atomically.

        Never raises for the cache's sake: a write that fails turns this cache
        off (one :class:`~toolkit.errors.CacheWarning`)."""
        path = self._path(cell_id)
        if path is None:
            return
        merged = {**self.get(cell_id)[0], **results}
        payload = {
            "cell": cell_id,
            "shape": [int(n) for n in shape],
            "results": {k: [None if math.isnan(v) else v, r] for k, (v, r) in merged.items()},
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(path, "w") as f:
                json.dump(payload, f)
        except (OSError, ValueError) as exc:
            self._broken = True
            warn_unusable(self.root, exc, "written")


def open_cache(identity: str, kind: str = "weights", enabled: bool = True) -> ResultCache:
    """A :class:`ResultCache` for one identity; disabled when ``enabled`` is False
    or ``$TOOLKIT_CACHE_DIR`` says off."""
    return ResultCache(cache_dir() if enabled else None, identity, kind)


def cache_info() -> dict:
    """``{"path": str, "files": int, "bytes": int}`` of the cache in force (zeros when it cannot be read)."""
    root = cache_dir()
    try:
        if root is None or not root.is_dir():
            return {"path": str(root or ""), "files": 0, "bytes": 0}
        files = [p for p in root.rglob("*.json") if p.is_file()]
        return {"path": str(root), "files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    except OSError:
        return {"path": str(root), "files": 0, "bytes": 0}


def clear_cache() -> int:
    """Delete the cache folder in force; returns the number of bytes freed.

    Raises
    ------
    OSError
        The folder cannot be deleted (the error names it).
    """
    info = cache_info()
    root = cache_dir()
    if root is not None and root.exists():
        shutil.rmtree(root)
    return info["bytes"]
