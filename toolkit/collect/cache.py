"""On-disk cache of per-matrix results, so re-runs are near-instant and an
interrupted run resumes where it stopped.

One small JSON file per (source fingerprint, stored tensor, component piece);
inside it one entry per metric key (name + a hash of the metric function's
code and options + toolkit version). A changed weight file changes the source
fingerprint and so misses every old entry. Each file is written to a temporary
name and renamed (``os.replace``), so a killed process or two processes writing
the same entry at once always leave a valid file.

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
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolkit._version import __version__

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


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def metric_key(metric, **options) -> str:
    """Key of one metric's result: its name, the bytecode and constants of its
    function (a re-registered metric with new code misses), its options and
    the toolkit version."""
    func = metric.func
    code = getattr(func, "__code__", None)
    body = (code.co_code.hex(), repr(code.co_consts)) if code is not None else (repr(func),)
    return f"{metric.name}:{_digest(body, sorted(options.items()), __version__)[:16]}"


@dataclass
class ResultCache:
    """Per-source view of the cache: ``get`` and ``put`` results of one matrix.

    Parameters
    ----------
    root : Path or None
        Cache folder; None makes every call a no-op (cache disabled).
    fingerprint : str
        The source's fingerprint (changes when a weight file changes).
    kind : str
        Namespace, e.g. ``"weights"`` or ``"compare"``.
    """

    root: Path | None
    fingerprint: str
    kind: str = "weights"

    @property
    def folder(self) -> Path | None:
        if self.root is None:
            return None
        return self.root / self.kind / _digest(self.fingerprint)

    def _path(self, cell_id: str) -> Path | None:
        folder = self.folder
        return None if folder is None else folder / f"{_digest(cell_id)}.json"

    def get(self, cell_id: str) -> tuple[dict, tuple[int, int] | None]:
        """Cached ``({metric_key: (value, reason)}, shape)`` of one cell;
        ``({}, None)`` if none or unreadable."""
        path = self._path(cell_id)
        if path is None or not path.is_file():
            return {}, None
        try:
            data = json.loads(path.read_text())
            if data.get("cell") != cell_id:
                return {}, None
            results = {k: (math.nan if v[0] is None else float(v[0]), v[1]) for k, v in data["results"].items()}
            return results, tuple(data["shape"])
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return {}, None  # a torn or foreign file is a miss, never a wrong number

    def put(self, cell_id: str, results: dict, shape: tuple[int, int]) -> None:
        """Merge ``{metric_key: (value, reason)}`` into the cell's file, atomically."""
        path = self._path(cell_id)
        if path is None:
            return
        merged = {**self.get(cell_id)[0], **results}
        payload = {
            "cell": cell_id,
            "shape": list(shape),
            "results": {k: [None if math.isnan(v) else v, r] for k, (v, r) in merged.items()},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(payload, f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def open_cache(fingerprint: str, kind: str = "weights", enabled: bool = True) -> ResultCache:
    """A :class:`ResultCache` for one source; disabled when ``enabled`` is False
    or ``$TOOLKIT_CACHE_DIR`` says off."""
    return ResultCache(cache_dir() if enabled else None, fingerprint, kind)


def cache_info() -> dict:
    """``{"path": str, "files": int, "bytes": int}`` of the cache in force."""
    root = cache_dir()
    if root is None or not root.exists():
        return {"path": str(root or ""), "files": 0, "bytes": 0}
    files = [p for p in root.rglob("*.json") if p.is_file()]
    return {"path": str(root), "files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def clear_cache() -> int:
    """Delete the cache folder in force; returns the number of bytes freed."""
    info = cache_info()
    root = cache_dir()
    if root is not None and root.exists():
        shutil.rmtree(root)
    return info["bytes"]
