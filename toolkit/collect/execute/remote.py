"""What a Dask worker runs: one task per unit of work (a stored tensor, or a tensor pair).

A task gets no tensor from the driver, only where each checkpoint lives
(:class:`SourceSpec`), the unit's lookups with its records detached (they
are re-opened here by name) and the measurement. The worker re-opens the
checkpoint itself (from a shared file system, its own hub cache, or in place
over HTTP from the hub repo at the driver's commit or from the URL:
:mod:`toolkit.sources.remote`, so a cluster needs no shared file system and
each worker moves only the byte ranges of its own tensors, besides the
headers), reads the tensors exactly as the serial path does and runs the same
``measurement.measure``; the driver stores the result
(:func:`toolkit.collect.execute.run_pass`).

Every failure is raised as :class:`~toolkit.errors.WorkerTaskError`, naming
the checkpoint, the tensor and the worker, and picklable so it reaches the
driver intact.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field

from toolkit.collect.execute.stream import Workspace
from toolkit.errors import ToolkitError, WorkerTaskError
from toolkit.sources.identity import files_identity
from toolkit.sources.remote.folders import is_url

__all__ = ["SourceSpec", "WorkerTaskError", "measure_task", "reporting", "worker_address"]

_OPEN_SOURCES = 8  # opened checkpoints kept per worker process (a series task needs two)


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
    options : tuple of (str, str)
        What ``open_source`` needs besides the location
        (:meth:`~toolkit.sources.Source.reopen_kwargs`: the commit the driver
        resolved, the GGUF file), sorted.
    fingerprint : str
        The driver's portable identity of the files (device numbers left
        out, :func:`toolkit.sources.identity.files_identity`; for a URL the
        remote identity, :func:`toolkit.sources.identity.remote_identity`:
        sizes and ETags); a worker that sees other bytes fails instead of
        mixing numbers from two versions.
    hub : bool
        A hub id (checked by commit: each worker may hold its own download, or read it in place).
    url : bool
        An ``http(s)://`` URL read in place (checked by :attr:`fingerprint`).
    opener : str
        What the worker opens (:meth:`~toolkit.sources.Source.reopen_location`: a URL's secrets included);
        :attr:`location` is what messages show.
    """

    location: str
    options: tuple
    fingerprint: str
    hub: bool
    url: bool = False
    opener: str = field(default="", repr=False)

    @classmethod
    def of(cls, source) -> SourceSpec:
        """The spec of an opened :class:`~toolkit.sources.Source`."""
        url = is_url(source.location)
        hub = not url and not os.path.isabs(source.location)
        if not (hub or url) and files_identity(source.files()) != source.fingerprint:
            from toolkit.errors import CheckpointChangedError

            raise CheckpointChangedError(source.location, source.fingerprint, files_identity(source.files()))
        ident = source.fingerprint if url else "" if hub else files_identity(source.files(), portable=True)
        return cls(source.location, tuple(sorted(source.reopen_kwargs().items())), ident, hub, url,
                   source.reopen_location())

    @property
    def revision(self) -> str | None:
        """The hub commit the driver resolved (None for a local checkpoint)."""
        return dict(self.options).get("revision") or None

    def open(self):
        """``(source, {name: TensorRecord}, identity)`` as this process sees it, memoised per process.

        Raises
        ------
        ToolkitError
            The checkpoint cannot be opened here, or holds other bytes than the driver planned.
        """
        from toolkit.sources import open_source

        key = (self.opener or self.location, self.options)
        with _LOCK:
            hit = _SOURCES.get(key)
        # reuse a source opened earlier only if it was opened on these bytes and they are still there
        if hit is not None and (self.hub or self.url or (
                hit[2] == self.fingerprint and files_identity(hit[0].files(), portable=True) == self.fingerprint)):
            return hit
        src = open_source(self.opener or self.location, **dict(self.options))
        if self.url:
            seen = src.fingerprint
        else:
            seen = (src.revision or None) if self.hub else files_identity(src.files(), portable=True)
        if not (self.hub or self.url) and files_identity(src.files()) != src.fingerprint:
            seen = "changed while it was opened"
        wanted = self.revision if self.hub else self.fingerprint
        if seen != wanted:
            what = ("commit" if self.hub else "identity (sizes and ETags)" if self.url else
                    "identity (file names, inodes, sizes, modification times)")
            raise ToolkitError(
                f"the worker sees another version of {self.location!r} than the driver planned: {what} "
                f"{seen!r} here, {wanted!r} on the driver; was the checkpoint rewritten during the run?"
            )
        hit = (src, {r.name: r for r in src.tensors()}, seen)
        with _LOCK:
            _SOURCES[key] = hit
            _SOURCES.move_to_end(key)
            while len(_SOURCES) > _OPEN_SOURCES:
                _SOURCES.popitem(last=False)
        return hit

    def record(self, name: str):
        """The :class:`~toolkit.sources.TensorRecord` called ``name``."""
        from toolkit.sources.expert_slices import find_record

        record = find_record(self.open()[1], name)  # an expert slice's name too
        if record is None:
            raise ToolkitError(f"{self.location!r} has no tensor {name!r} on this worker")
        return record


_SOURCES: OrderedDict = OrderedDict()
_LOCK = threading.Lock()


def load(reader, float32: bool):
    """``reader()``, as float32 when asked (as :func:`~toolkit.collect.execute.stream.map_tensors` converts)."""
    if reader is None:
        return None
    return Workspace().float32(reader()) if float32 else reader()


def measure_task(measurement, work, specs: tuple) -> object:
    """Run ``measurement.measure`` on one unit (the worker side of ``client=``).

    Parameters
    ----------
    measurement : WeightMeasurement or PairMeasurement
    work : TensorWork or PairWork
        Detached: the records are re-opened here from ``specs`` by ``work.names``.
    specs : tuple of SourceSpec
        One per record (weights: the checkpoint; compare: base and target).

    Returns
    -------
    What ``measurement.measure`` returns.

    Raises
    ------
    WorkerTaskError
        Naming the checkpoint (the side that cannot be opened, for a pair), the tensor and the worker.
    """
    label = " vs ".join(s.location for s in reversed(specs))
    with reporting(label, work.names[0]):
        records = []
        for spec, stored in zip(specs, work.names, strict=True):
            with reporting(spec.location, stored):  # name the side that cannot be opened
                records.append(spec.record(stored))
        work = work.attached(tuple(records))
        result = measurement.measure(work, load(measurement.reader(work), measurement.float32), {})
        for spec in specs:  # the bytes read here are the planned ones
            spec.open()[0].check_unchanged()
        return result
