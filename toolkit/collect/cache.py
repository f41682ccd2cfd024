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

import json
import math
import os
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from toolkit._version import __version__
from toolkit.atomic import atomic_write
from toolkit.errors import CacheWarning
from toolkit.hashing import digest
from toolkit.hashing import stable_value as _stable

ENV_VAR = "TOOLKIT_CACHE_DIR"
#: Version of the stored eigenvalues (the toolkit's: they come from its singular values).
SPECTRUM_KEY = f"eigenvalues:{__version__}"
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


def cache_kind(name: str, holds: str) -> str:
    """Declare the cache folder ``name`` (what stores there calls this once, at import) and return it.

    :func:`toolkit.collect.cache_folders.clear_cache` and ``cache_info`` cover
    exactly the declared folders, and :class:`ResultCache` refuses an
    undeclared one, so no kind of result can be stored where clearing does
    not look.

    Raises
    ------
    ValueError
        ``name`` is not a plain folder name, or is declared twice with other contents.
    """
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"a cache folder name is letters, digits and '_', not {name!r}")
    if _KINDS.get(name, holds) != holds:
        raise ValueError(f"cache folder {name!r} is declared twice ({_KINDS[name]!r}, {holds!r})")
    _KINDS[name] = holds
    return name


def cache_kinds() -> dict[str, str]:
    """``{folder: what it holds}`` of every declared cache folder."""
    return dict(_KINDS)


#: Every folder of the cache, declared by what stores there (:func:`cache_kind`): name -> what it holds.
_KINDS: dict[str, str] = {}
_PACKAGE = Path(__file__).resolve().parents[1]


def code_identity(*subpackages: str) -> str:
    """Names, sizes and mtimes of the toolkit's modules in ``subpackages`` (a source checkout whose
    code changes misses, even at the same version), with the toolkit version."""
    parts = []
    for sub in subpackages:
        for p in sorted((_PACKAGE / sub).rglob("*.py")):  # subpackages too (sources/lora, sources/quantized)
            st = p.stat()
            parts.append((sub, str(p.relative_to(_PACKAGE / sub)), st.st_size, st.st_mtime_ns))
    return digest(parts, __version__)


def _code_parts(code, depth: int = 0) -> list:
    """Bytecode, names and constants of a code object, nested code objects by their own parts
    (not their repr, which holds an address)."""
    consts = [_code_parts(c, depth + 1) if hasattr(c, "co_code") else _stable(c) for c in code.co_consts]
    return [code.co_code.hex(), list(code.co_names), consts]


def _function_parts(func, depth: int = 0) -> list:
    """What a function computes with: its code, closure values, defaults and, one level down, the
    code of the module-level functions it calls (a changed helper misses)."""
    inner = getattr(func, "__wrapped__", None)
    code = getattr(func, "__code__", None)
    if code is None:
        return [repr(func)] if inner is None else _function_parts(inner, depth)
    cells = [_stable(c.cell_contents) if not callable(c.cell_contents) or depth > 1
             else _function_parts(c.cell_contents, depth + 1) for c in (func.__closure__ or ())
             if _has_contents(c)]
    parts = [_code_parts(code), cells, _stable(func.__defaults__), _stable(func.__kwdefaults__)]
    if depth < 1:
        helpers = getattr(func, "__globals__", {})
        parts.append([_function_parts(helpers[n], depth + 1) for n in code.co_names
                      if callable(helpers.get(n)) and hasattr(helpers[n], "__code__")])
    return parts


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
        return True
    except ValueError:
        return False


def metric_key(metric, **options) -> str:
    """Key of one metric's result: its name; the code of its function (bytecode, names,
    constants, closure values, defaults and the code of the functions it calls); its flags;
    its options (arrays by their bytes); and the toolkit's metrics code and version.

    Values of other module globals it reads are not covered: re-register the metric
    (or clear the cache) after changing those.
    """
    flags = (metric.kind, metric.needs_singular_values, metric.any_dtype, getattr(metric, "needs_matrices", True))
    body = _function_parts(metric.func)
    return f"{metric.name}:{digest(body, flags, sorted(options.items()), code_identity('metrics'))[:16]}"


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
        if value is None and not reason:
            raise ValueError(f"NaN without a reason for {key!r}")  # the toolkit never stores one
        out[str(key)] = (math.nan if value is None else float(value), reason)
    return out


def _spectrum(raw) -> tuple[float, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
        raise TypeError("spectrum is not a list of numbers")
    return tuple(float(v) for v in raw)


@dataclass(frozen=True)
class CacheEntry:
    """What the cache holds for one cell.

    ``results``: ``{metric key: (value, reason)}``; ``shape``: the matrix shape or
    None; ``spectrum``: the eigenvalues of WᵀW, descending, or None (not stored).
    """

    results: dict
    shape: tuple[int, int] | None = None
    spectrum: tuple[float, ...] | None = None


_MISS = CacheEntry({})


def _shape(raw) -> tuple[int, int]:
    if (not isinstance(raw, list) or len(raw) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 40 for n in raw)):
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

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"cache folder {self.kind!r} is not declared (toolkit.collect.cache.cache_kind)")

    @property
    def folder(self) -> Path | None:
        if self.root is None or self._broken:
            return None
        return self.root / self.kind / digest(self.identity)

    def _path(self, cell_id: str) -> Path | None:
        folder = self.folder
        return None if folder is None else folder / f"{digest(cell_id)}.json"

    def read(self, cell_id: str) -> CacheEntry:
        """The :class:`CacheEntry` of one cell; an empty one when there is none or it cannot
        be read (a miss, never a wrong number)."""
        path = self._path(cell_id)
        try:
            if path is None or not path.is_file():
                return _MISS
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or data.get("cell") != cell_id:
                return _MISS
            spectrum = data.get("spectrum")
            if spectrum is not None and (not isinstance(spectrum, dict) or spectrum.get("key") != SPECTRUM_KEY):
                spectrum = None
            shape = _shape(data["shape"])
            values = None if spectrum is None else _spectrum(spectrum["values"])
            if values is not None and (len(values) != min(shape) or any(not 0 <= v < math.inf for v in values)
                                       or any(a < b for a, b in zip(values, values[1:], strict=False))):
                values = None  # not the descending spectrum of this matrix: computed again
            return CacheEntry(_results(data["results"]), shape, values)
        except Exception:  # noqa: BLE001 - any unreadable entry (RecursionError, OverflowError...) is a miss
            return _MISS

    def get(self, cell_id: str) -> tuple[dict, tuple[int, int] | None]:
        """Cached ``({metric_key: (value, reason)}, shape)`` of one cell; ``({}, None)`` on a miss."""
        entry = self.read(cell_id)
        return entry.results, entry.shape

    def put(self, cell_id: str, results: dict, shape: tuple[int, int], spectrum=None) -> None:
        """Merge ``{metric_key: (value, reason)}`` (and the cell's eigenvalues, when given) into
        the cell's file, atomically.

        Never raises for the cache's sake: a write that fails turns this cache
        off (one :class:`~toolkit.errors.CacheWarning`)."""
        path = self._path(cell_id)
        if path is None:
            return
        old = self.read(cell_id)
        merged = {**old.results, **results}
        spectrum = old.spectrum if spectrum is None else spectrum
        payload = {
            "cell": cell_id,
            "shape": [int(n) for n in shape],
            "results": {k: [None if math.isnan(v) else v, r] for k, (v, r) in merged.items()},
        }
        if spectrum is not None:
            payload["spectrum"] = {"key": SPECTRUM_KEY, "values": [float(v) for v in spectrum]}
        for attempt in range(2):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_write(path, "w") as f:
                    json.dump(payload, f)
                return
            except FileNotFoundError as exc:  # the folder was cleared while this entry was written
                if attempt:
                    self._broken = True
                    warn_unusable(self.root, exc, "written")
            except (OSError, ValueError) as exc:
                self._broken = True
                warn_unusable(self.root, exc, "written")
                return


def open_cache(identity: str, kind: str = "weights", enabled: bool = True) -> ResultCache:
    """A :class:`ResultCache` for one identity; disabled when ``enabled`` is False
    or ``$TOOLKIT_CACHE_DIR`` says off."""
    return ResultCache(cache_dir() if enabled else None, identity, kind)
