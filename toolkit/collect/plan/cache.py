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

from toolkit.architectures.base import Extract, Piece
from toolkit.collect.cache import cache_dir, cache_kind, code_identity, digest, warn_unusable
from toolkit.collect.plan.cell_ids import decode_index, encode_index
from toolkit.collect.plan.types import Plan, PlannedTensor
from toolkit.errors import CheckpointChangedError
from toolkit.sources.base import Source, TensorRecord
from toolkit.sources.expert_slices import find_record
from toolkit.sources.formats import decoder_versions
from toolkit.sources.identity import file_identity, files_identity

KIND = cache_kind("plans", "plans of local checkpoints: their tensors, cells and splits")
#: Files of a checkpoint folder whose identity a cached plan depends on.
_WATCHED = (".json", ".safetensors", ".bin", ".pt", ".pth", ".gguf")


def _code_identity() -> str:
    """The code that makes plans (a source checkout that changes it misses, even at the same
    version) and the libraries it calls."""
    return digest(code_identity("sources", "architectures"), decoder_versions())


@dataclass(frozen=True)
class PlanRequest:
    """What a plan was asked for: the local path and the options."""

    path: str
    gguf_file: str | None
    revision: str | None

    @classmethod
    def of(cls, request) -> PlanRequest | None:
        """The plan-cache request for a :class:`~toolkit.sources.SourceRequest` of a local path (None: the
        bundled model), else None (not cacheable)."""
        source, gguf_file, revision = request.source, request.gguf_file, request.revision
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
        from toolkit.sources.lora import is_adapter_folder

        if is_adapter_folder(text):
            return None  # its plan depends on the base's config.json elsewhere: planned afresh (it is cheap)
        return cls(os.path.abspath(text), gguf_file, revision)

    def key(self) -> str:
        return digest(self.path, self.gguf_file, self.revision, _code_identity())

    def watched(self, plan: Plan | None = None) -> list[str]:
        """Every file (and folder) the plan depends on (``plan``'s weight files included)."""
        found = {self.path, *(plan.source.files() if plan is not None else ())}
        folder = self.path if os.path.isdir(self.path) else None
        if folder is None and not self.path.endswith(".gguf"):
            folder = os.path.dirname(self.path)  # a weight file's config.json lies beside it
        if folder is not None:
            found.add(folder)
            found.update(str(p) for p in Path(folder).iterdir() if p.suffix in _WATCHED and p.is_file())
        return sorted(found)

    def snapshot(self, plan: Plan | None = None) -> dict[str, str]:
        """``{path: identity}`` of :meth:`watched`, taken before opening and compared after planning,
        so a file replaced while the plan was made is never paired with the old bytes' plan."""
        out = {}
        for f in self.watched(plan):
            try:
                out[f] = file_identity(f)
            except OSError:
                out[f] = "missing"
        return out


def _path(request: PlanRequest) -> Path | None:
    root = cache_dir()
    return None if root is None else root / KIND / f"{request.key()}.json"


def _encode_piece(p: Piece) -> dict:
    e = p.extract
    if not isinstance(e, Extract):
        raise TypeError("a piece whose extract is not an Extract cannot be cached")
    return {"layer": p.layer, "component": p.component, "parameter_name": p.parameter_name,
            "module_name": p.module_name, "out_index": encode_index(p.out_index), "expert": p.expert,
            "extract": {"parameter_name": e.parameter_name, "transpose": e.transpose,
                        "index": encode_index(e.index), "rows": e.rows, "expert": e.expert}}


def _int(x, low: int = 0, high: int | None = None) -> int:
    """``x`` if it is an int (not a bool) in ``[low, high)``; raises ValueError otherwise."""
    if not isinstance(x, int) or isinstance(x, bool) or x < low or (high is not None and x >= high):
        raise ValueError(f"not an integer in range: {x!r}")
    return x


def _index(raw, rows: int):
    """A decoded slice / row index, checked against ``rows`` (the matrix's rows)."""
    if raw is None:
        return None
    if "slice" in raw:
        start, stop, step = raw["slice"]
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (start, stop, step)):
            raise ValueError("slice bounds are not integers")
    elif not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < rows for v in raw["rows"]):
        raise ValueError("row index out of range")
    return decode_index(raw)


def _decode_piece(raw: dict, num_layers: int, shapes: dict) -> Piece:
    from toolkit.architectures.vocabulary import ALL_COMPONENTS

    e = raw["extract"]
    if not isinstance(e["transpose"], bool) or raw["component"] not in ALL_COMPONENTS:
        raise ValueError("bad piece")
    shape = shapes[e["parameter_name"]]
    stack = e.get("expert")
    if stack is not None:  # a piece of a whole stack of experts: (E, ...), its expert first
        _int(stack, 0, shape[0])
        shape = shape[1:]
    if len(shape) != 2:
        raise ValueError("not a matrix")
    rows = shape[1] if e["transpose"] else shape[0]
    if e["rows"] is not None and _int(e["rows"], 1) != rows:
        raise ValueError("fused size does not match the tensor")
    extract = Extract(str(e["parameter_name"]), e["transpose"], _index(e["index"], rows), e["rows"], stack)
    expert = raw.get("expert")
    return Piece(_int(raw["layer"], 0, num_layers), raw["component"], str(raw["parameter_name"]), extract,
                 module_name=str(raw["module_name"]), out_index=_index(raw["out_index"], rows),
                 expert=None if expert is None else _int(expert))


def _adapter_name(model_type) -> str:
    from toolkit.architectures import registered_architectures

    cls = registered_architectures().get(model_type)
    return "" if cls is None else f"{cls.__module__}.{cls.__qualname__}"


def store(request: PlanRequest, plan: Plan, before: dict[str, str]) -> None:
    """Write ``plan`` for ``request`` (only plans of built-in adapters; never raises for the cache's sake).

    ``before`` is :meth:`PlanRequest.snapshot` taken before the checkpoint was opened: the plan is
    stored only when no file changed while it was made and its fingerprint is the files' identity now.
    """
    path = _path(request)
    model_type = plan.source.config.get("model_type")
    adapter = _adapter_name(model_type)
    if path is None or plan.adapter is None or type(plan.adapter).__module__ + "." + \
            type(plan.adapter).__qualname__ != adapter or not adapter.startswith("toolkit."):
        return
    try:
        src = plan.source
        inputs = request.snapshot(plan)
        if any(before.get(f, ident) != ident for f, ident in inputs.items()) or "missing" in inputs.values() \
                or files_identity(src.files()) != src.fingerprint:
            return  # changed while it was planned: plan again next time
        pieces = {t.record.name: [_encode_piece(p) for p in t.pieces] for t in plan.tensors}
        payload = {
            "request": [request.path, request.gguf_file, request.revision],
            "inputs": inputs,
            "adapter": adapter,
            "source": {"location": src.location, "format": src.format, "config": src.config,
                       "fingerprint": src.fingerprint, "revision": src.revision or "",
                       "missing_config": src.missing_config, "files": src.files()},
            "records": [{"name": r.name, "shape": list(r.shape), "dtype": r.dtype, "file": r.file,
                         "stored_name": r.stored_name, "rows": r.can_read_rows}
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
    """The cached plan for ``request``, or None (no entry, a changed file, other code, an entry
    that is unreadable or does not describe a valid plan)."""
    path = _path(request)
    try:
        if path is None or not path.is_file():
            return None
        data = json.loads(path.read_text())
        if data["request"] != [request.path, request.gguf_file, request.revision]:
            return None
        inputs = data["inputs"]
        if not isinstance(inputs, dict) or request.path not in inputs:
            return None
        for f, identity in inputs.items():
            if file_identity(f) != identity:
                return None
        meta = data["source"]
        if _adapter_name(meta["config"].get("model_type")) != data["adapter"]:
            return None
        if not meta["files"] or files_identity(meta["files"]) != meta["fingerprint"]:
            return None  # the weight files are not the bytes this plan was made from
        num_layers = _int(data["num_layers"], 1)
        for r in data["records"]:
            if not isinstance(r["name"], str) or not isinstance(r["rows"], bool):
                return None
            [_int(n) for n in r["shape"]]
        source = PlannedSource(request, meta, data["records"])
        records = {r.name: r for r in source.tensors()}
        found = {name: find_record(records, name) for name in data["pieces"]}
        shapes = {name: tuple(rec.shape) for name, rec in found.items()}
        tensors = [PlannedTensor(found[name], tuple(_decode_piece(p, num_layers, shapes) for p in ps))
                   for name, ps in data["pieces"].items()]
        cells = [p.key for t in tensors for p in t.pieces]
        if not tensors or len(set(cells)) != len(cells) or {key[0] for key in cells} != set(range(num_layers)):
            return None
        return Plan(source, tensors, num_layers)
    except Exception:  # noqa: BLE001 - any unreadable entry (RecursionError, OverflowError...) is a miss
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

    checks_identity_on_read = True

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
