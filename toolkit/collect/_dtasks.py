"""What a Dask worker runs: one task per (checkpoint, stored tensor).

A task gets no tensor from the driver, only where the checkpoint lives
(:class:`SourceSpec`), the tensor's name, the cells (:class:`~toolkit.architectures.base.Piece`)
it holds and the metrics to compute. The worker re-opens the checkpoint itself
(from a shared file system or its own hub cache), reads the tensor, measures
it and returns a few numbers per cell. It checks and fills the same on-disk
cache as the serial path (:mod:`toolkit.collect.cache`), so a retried or
re-run task whose cells are cached does not read the tensor again.

Every failure is raised as :class:`WorkerTaskError`, naming the checkpoint,
the tensor and the worker, and picklable so it reaches the driver intact.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from toolkit.collect.cache import ResultCache
from toolkit.collect.evaluate import evaluate_matrix
from toolkit.collect.grid import cell_results
from toolkit.errors import ToolkitError

_OPEN_SOURCES = 8  # opened checkpoints kept per worker process (a series task needs two)


class WorkerTaskError(ToolkitError, RuntimeError):
    """A task of a distributed run that failed on a worker.

    Fields: ``checkpoint`` (location), ``tensor`` (parameter name), ``worker``
    (address, or ``"?"`` when unknown), ``reason`` (the worker-side error, as
    ``"Type: message"``).
    """

    def __init__(self, checkpoint: str, tensor: str, worker: str, reason: str):
        self.checkpoint, self.tensor, self.worker, self.reason = checkpoint, tensor, worker, reason
        super().__init__(
            f"checkpoint {checkpoint!r} (tensor {tensor!r}) failed on Dask worker {worker}: {reason.rstrip('.')}. "
            "Every worker must see the checkpoint at the same path (a shared file system) or have the hub "
            "repo in its own cache."
        )

    def __reduce__(self):
        return type(self), (self.checkpoint, self.tensor, self.worker, self.reason)


def worker_address() -> str:
    """Address of the Dask worker running this code, ``"?"`` outside a worker."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "?"


@contextmanager
def reporting(checkpoint: str, tensor: str):
    """Re-raise any error inside as a :class:`WorkerTaskError` naming checkpoint, tensor and worker."""
    try:
        yield
    except WorkerTaskError:
        raise
    except Exception as exc:  # noqa: BLE001 - wrapped with the facts the driver needs
        raise WorkerTaskError(checkpoint, tensor, worker_address(), f"{type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class SourceSpec:
    """How a worker re-opens a checkpoint the driver planned.

    Attributes
    ----------
    location : str
        Absolute path of a local checkpoint, or a hub id.
    gguf_file, revision : str or None
        For hub ids: the GGUF file name and the commit the driver resolved.
    fingerprint : str
        The driver's fingerprint; a worker that sees other bytes fails
        instead of mixing numbers from two versions.
    hub : bool
        A hub id (checked by commit: each worker may hold its own download).
    """

    location: str
    gguf_file: str | None
    revision: str | None
    fingerprint: str
    hub: bool

    @classmethod
    def of(cls, source) -> SourceSpec:
        """The spec of an opened :class:`~toolkit.sources.Source`."""
        hub = not os.path.isabs(source.location)
        gguf = Path(source.files()[0]).name if hub and source.format == "gguf" else None
        return cls(source.location, gguf, (source.revision or None) if hub else None, source.fingerprint, hub)

    def open(self):
        """``(source, {name: TensorRecord})`` as this process sees it, memoised per process.

        Raises
        ------
        ToolkitError
            The checkpoint cannot be opened here, or holds other bytes than the driver planned.
        """
        from toolkit.sources import open_source
        from toolkit.sources._common import fingerprint

        key = (self.location, self.gguf_file, self.revision)
        with _LOCK:
            hit = _SOURCES.get(key)
        if hit is not None and (self.hub or fingerprint(hit[0].files()) == self.fingerprint):
            return hit
        src = open_source(self.location, gguf_file=self.gguf_file, revision=self.revision)
        seen = (src.revision or None) if self.hub else src.fingerprint
        wanted = self.revision if self.hub else self.fingerprint
        if seen != wanted:
            what = "commit" if self.hub else "fingerprint (file names, sizes, modification times)"
            raise ToolkitError(
                f"the worker sees another version of {self.location!r} than the driver planned: {what} "
                f"{seen!r} here, {wanted!r} on the driver; was the checkpoint rewritten during the run?"
            )
        hit = (src, {r.name: r for r in src.tensors()})
        with _LOCK:
            _SOURCES[key] = hit
            _SOURCES.move_to_end(key)
            while len(_SOURCES) > _OPEN_SOURCES:
                _SOURCES.popitem(last=False)
        return hit

    def record(self, name: str):
        """The :class:`~toolkit.sources.TensorRecord` called ``name``."""
        records = self.open()[1]
        if name not in records:
            raise ToolkitError(f"{self.location!r} has no tensor {name!r} on this worker")
        return records[name]


_SOURCES: OrderedDict = OrderedDict()
_LOCK = threading.Lock()


@dataclass
class SafeStore:
    """A :class:`ResultCache` whose writes never fail the task: an entry the
    worker cannot write (no such folder here, read-only) is kept in ``unsaved``
    for the driver to write into its own cache."""

    inner: ResultCache
    unsaved: list = field(default_factory=list)

    def get(self, cell_id: str):
        return self.inner.get(cell_id)

    def put(self, cell_id: str, results: dict, shape) -> None:
        try:
            self.inner.put(cell_id, results, shape)
        except OSError:
            self.unsaved.append((cell_id, results, tuple(shape)))


def _store(root: str | None, fingerprint: str, kind: str) -> SafeStore:
    return SafeStore(ResultCache(None if root is None else Path(root), fingerprint, kind))


def weights_task(spec: SourceSpec, name: str, entries: list, keys: dict, device: str, root: str | None) -> dict:
    """Measure the cells of one stored tensor (the worker side of ``weight_stats(client=...)``).

    Parameters
    ----------
    spec : SourceSpec
    name : str
        The tensor's parameter name.
    entries : list of (Piece, str, list of Metric)
        Each cell of the tensor with work left: piece, cache cell id, metrics to compute.
    keys : dict
        Metric name -> cache key (computed on the driver).
    device : str
    root : str or None
        Cache folder (None: no cache).

    Returns
    -------
    dict
        ``cells``: ``[(cell_id, shape, {key: (value, reason)})]`` for the requested
        metrics; ``unsaved``: cache entries this worker could not write.
    """
    with reporting(spec.location, name):
        store = _store(root, spec.fingerprint, "weights")
        tensor, out = None, []
        for piece, cell_id, todo in entries:
            cached, shape = store.get(cell_id)
            missing = [m for m in todo if keys[m.name] not in cached]
            if missing:
                if tensor is None:
                    tensor = spec.record(name).read().to(torch.float32)
                fresh = evaluate_matrix(piece.extract(tensor), missing, device=device,
                                        parameter_name=piece.parameter_name)
                shape = fresh.shape
                new, keep = cell_results(fresh, missing, keys)
                store.put(cell_id, keep, fresh.shape)
                cached = {**cached, **new}
            out.append((cell_id, shape, {keys[m.name]: cached[keys[m.name]] for m in todo}))
        return {"cells": out, "unsaved": store.unsaved}


def compare_task(specs: tuple, name: str, names: tuple, pieces: list, job, root: str | None,
                 store_fp: str) -> dict:
    """Diff one stored tensor pair (the worker side of ``compare``/``compare_series(client=...)``).

    Parameters
    ----------
    specs, names : (base, target) SourceSpec and stored parameter names
    name : str
        The pair's name (the ``tensor`` coordinate).
    pieces : list of Piece
    job : toolkit.collect._compare_measure.CompareJob
    root : str or None
        Cache folder.
    store_fp : str
        Fingerprint of the pair's cache namespace.

    Returns
    -------
    dict
        ``totals`` ``{total: value}``; ``cells`` ``{(layer, component): Cell}``; ``unsaved``.
    """
    from toolkit.collect._compare_measure import finish, lookup, measure, read_pair
    from toolkit.collect._compare_pairs import TensorPair

    with reporting(f"{specs[1].location} vs {specs[0].location}", names[0]):
        store = _store(root, store_fp, "compare")
        records = []
        for spec, stored in zip(specs, names):
            with reporting(spec.location, stored):  # name the side that cannot be opened
                records.append(spec.record(stored))
        work = lookup(store, TensorPair(name, *records, list(pieces)), job)
        fresh = measure(work, read_pair(work.tp) if work.whole else None, job, {}) if work.todo else None
        totals, cells = finish(store, work, fresh, job)
        return {"totals": totals, "cells": cells, "unsaved": store.unsaved}
