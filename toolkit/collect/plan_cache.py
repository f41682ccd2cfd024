"""The plan cache: a checkpoint's plan (its tensors, their cells and splits) kept on disk.

A fresh process asking again for a checkpoint it has measured finds the plan
here and opens nothing (no ``transformers`` model code, no GGUF probe); a
tensor is read, through the real source opened then, only for a cell the
result cache lacks.

A plan is stored for a local file or folder under the path the user gave
and the options, with the identity (:mod:`toolkit.sources.identity`) of
every file it was made from: the given path, and for a folder the folder
itself (an added or removed file changes it) and each of its weight and JSON
files. A hit needs all of them unchanged, the same toolkit code for
sources and architectures, the same ``transformers`` and ``gguf``, and the
same adapter class registered for the ``model_type``. Hub ids are resolved
by the hub client first and not cached here. An unreadable entry is a miss.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from toolkit._version import __version__
from toolkit.architectures.base import Extract, Piece
from toolkit.collect.cache import cache_dir, digest, warn_unusable
from toolkit.collect.cell_ids import decode_index, encode_index
from toolkit.collect.plan import Plan, PlannedTensor, dequantizer_versions
from toolkit.errors import CheckpointChangedError
from toolkit.sources.base import Source, TensorRecord
from toolkit.sources.identity import file_identity

KIND = "plans"
#: Files of a checkpoint folder whose identity a cached plan depends on.
_WATCHED = (".json", ".safetensors", ".bin", ".pt", ".pth", ".gguf")
_CODE = Path(__file__).resolve().parents[1]


def _code_identity() -> str:
    """Names, sizes and mtimes of the toolkit modules that make plans (a source checkout that
    changes them misses, even at the same version)."""
    parts = []
    for sub in ("sources", "architectures"):
        for p in sorted((_CODE / sub).glob("*.py")):
            st = p.stat()
            parts.append((sub, p.name, st.st_size, st.st_mtime_ns))
    return digest(parts, __version__, dequantizer_versions("gguf"))


@dataclass(frozen=True)
class PlanRequest:
    """What a plan was asked for: the local path and the options."""

    path: str
    gguf_file: str | None
    revision: str | None

    @classmethod
    def of(cls, source, gguf_file, revision) -> PlanRequest | None:
        """The request for a local path (None: the bundled model), else None (not cacheable)."""
        if isinstance(source, Source):
            return None
        if source is None:
            try:
                from toolkit.bundled import default_model_path

                source = default_model_path()
            except Exception:  # noqa: BLE001 - open_source gives the real error
                return None
        text = os.path.expanduser(os.fspath(source))
        if not os.path.exists(text):
            return None
        return cls(os.path.abspath(text), gguf_file, revision)

    def key(self) -> str:
        return digest(self.path, self.gguf_file, self.revision, _code_identity())

    def watched(self, plan: Plan) -> list[str]:
        """Every file (and folder) the plan depends on."""
        found = {self.path, *plan.source.files()}
        folder = self.path if os.path.isdir(self.path) else None
        if folder is None and not self.path.endswith(".gguf"):
            folder = os.path.dirname(self.path)  # a weight file's config.json lies beside it
        if folder is not None:
            found.add(folder)
            found.update(str(p) for p in Path(folder).iterdir() if p.suffix in _WATCHED and p.is_file())
        return sorted(found)


def _path(request: PlanRequest) -> Path | None:
    root = cache_dir()
    return None if root is None else root / KIND / f"{request.key()}.json"


def _encode_piece(p: Piece) -> dict:
    e = p.extract
    if not isinstance(e, Extract):
        raise TypeError("a piece whose extract is not an Extract cannot be cached")
    return {"layer": p.layer, "component": p.component, "parameter_name": p.parameter_name,
            "module_name": p.module_name, "out_index": encode_index(p.out_index),
            "extract": {"parameter_name": e.parameter_name, "transpose": e.transpose,
                        "index": encode_index(e.index), "rows": e.rows}}


def _decode_piece(raw: dict) -> Piece:
    e = raw["extract"]
    extract = Extract(e["parameter_name"], bool(e["transpose"]), decode_index(e["index"]), e["rows"])
    return Piece(int(raw["layer"]), str(raw["component"]), str(raw["parameter_name"]), extract,
                 module_name=str(raw["module_name"]), out_index=decode_index(raw["out_index"]))


def _adapter_name(model_type) -> str:
    from toolkit.architectures import registered_architectures

    cls = registered_architectures().get(model_type)
    return "" if cls is None else f"{cls.__module__}.{cls.__qualname__}"


def store(request: PlanRequest, plan: Plan) -> None:
    """Write ``plan`` for ``request`` (only plans of built-in adapters; never raises for the cache's sake)."""
    path = _path(request)
    model_type = plan.source.config.get("model_type")
    adapter = _adapter_name(model_type)
    if path is None or plan.adapter is None or type(plan.adapter).__module__ + "." + \
            type(plan.adapter).__qualname__ != adapter or not adapter.startswith("toolkit."):
        return
    try:
        src = plan.source
        pieces = {t.record.name: [_encode_piece(p) for p in t.pieces] for t in plan.tensors}
        payload = {
            "request": [request.path, request.gguf_file, request.revision],
            "inputs": {f: file_identity(f) for f in request.watched(plan)},
            "adapter": adapter,
            "source": {"location": src.location, "format": src.format, "config": src.config,
                       "fingerprint": src.fingerprint, "revision": src.revision or "",
                       "missing_config": getattr(src, "missing_config", ""), "files": src.files()},
            "records": [{"name": r.name, "shape": list(r.shape), "dtype": r.dtype, "file": r.file,
                         "stored_name": r.stored_name, "rows": r._row_reader is not None}
                        for r in src.tensors()],
            "pieces": pieces,
            "num_layers": plan.num_layers,
        }
        text = json.dumps(payload)
    except (TypeError, ValueError, OSError):
        return  # a config that is not JSON: plan again next time
    from toolkit.atomic import atomic_write

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "w") as f:
            f.write(text)
    except (OSError, ValueError) as exc:
        warn_unusable(path.parent.parent, exc, "written")


def load(request: PlanRequest) -> Plan | None:
    """The cached plan for ``request``, or None (no entry, a changed file, other code, unreadable)."""
    path = _path(request)
    try:
        if path is None or not path.is_file():
            return None
        data = json.loads(path.read_text())
        if data["request"] != [request.path, request.gguf_file, request.revision]:
            return None
        for f, identity in data["inputs"].items():
            if file_identity(f) != identity:
                return None
        meta = data["source"]
        if _adapter_name(meta["config"].get("model_type")) != data["adapter"]:
            return None
        source = PlannedSource(request, meta, data["records"])
        records = {r.name: r for r in source.tensors()}
        tensors = [PlannedTensor(records[name], tuple(_decode_piece(p) for p in ps))
                   for name, ps in data["pieces"].items()]
        return Plan(source, tensors, int(data["num_layers"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


class PlannedSource(Source):
    """A source known from a cached plan: its metadata without opening it.

    The real source (``open_source`` on the planned path) is opened on the
    first tensor read, once, and must have the planned fingerprint.

    Raises
    ------
    CheckpointChangedError
        On a read, when the files no longer have the planned identity.
    """

    def __init__(self, request: PlanRequest, meta: dict, records: list[dict]):
        self._request = request
        self.location = str(meta["location"])
        self.format = str(meta["format"])
        self.config = dict(meta["config"])
        self.fingerprint = str(meta["fingerprint"])
        self.revision = str(meta["revision"])
        self.missing_config = str(meta["missing_config"])
        self._files = [str(f) for f in meta["files"]]
        self._records = [
            TensorRecord(str(r["name"]), tuple(int(n) for n in r["shape"]), str(r["dtype"]),
                         partial(self._read, str(r["name"])), file=str(r["file"]), stored_name=str(r["stored_name"]),
                         _row_reader=partial(self._rows, str(r["name"])) if r["rows"] else None)
            for r in records
        ]
        self._real: dict | None = None
        self._lock = threading.Lock()

    def tensors(self):
        yield from self._records

    def files(self) -> list[str]:
        return list(self._files)

    def opened(self) -> dict[str, TensorRecord]:
        """``{name: record}`` of the real source, opened on first use."""
        with self._lock:
            if self._real is None:
                from toolkit.sources import open_source

                r = self._request
                real = open_source(r.path, gguf_file=r.gguf_file, revision=r.revision)
                if real.fingerprint != self.fingerprint:
                    raise CheckpointChangedError(self.location, self.fingerprint, real.fingerprint)
                self._real = {rec.name: rec for rec in real.tensors()}
            return self._real

    def _read(self, name: str) -> torch.Tensor:
        return self.opened()[name]._reader()  # the real record's reader: one read, counted once

    def _rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        return self.opened()[name]._row_reader(start, stop)
