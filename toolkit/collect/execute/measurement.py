"""What :func:`~toolkit.collect.execute.run.run_pass` asks of a measurement: the ``Measurement`` protocol.

A measurement (:mod:`toolkit.collect.measure`: weights, low-rank factors, tensor pairs) says how one unit of a
pass is looked up in the cache, read, measured and stored; the executors (in-process pipelines or a Dask
cluster) only call :meth:`~Measurement.reader` and :meth:`~Measurement.measure`, the loop the rest.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Measurement"]


@runtime_checkable
class Measurement(Protocol):
    """One kind of unit's four steps.

    Attributes
    ----------
    kind : str
        The cache folder its results are stored in (:mod:`toolkit.collect.cache_folders`).
    float32 : bool
        Convert each tensor read to float32 as it is read (False when every metric reads the stored dtype).
    read_ahead_bytes : int
        Bytes the unit in use and the next one may hold together (``read_bytes``) for the next one to be
        read while this one is measured (:func:`~toolkit.collect.execute.stream.read_ahead`'s ``budget``).
    """

    kind: str
    float32: bool
    read_ahead_bytes: int

    def lookup(self, store, unit):
        """The unit's work record: what the cache ``store`` holds of it and what is left to do (``.todo``)."""

    def reader(self, work):
        """What to read for ``work``: a callable giving the tensor(s) (run in a reader thread or a Dask worker)."""

    def read_bytes(self, work) -> int:
        """Bytes what ``reader`` reads holds in memory (bounds the in-process read-ahead,
        :func:`~toolkit.collect.execute.stream.read_ahead`)."""

    def measure(self, work, tensors, memo: dict):
        """The fresh results of ``work`` from what ``reader`` read (stores nothing; runs anywhere)."""

    def finish(self, store, work, fresh):
        """Store ``fresh`` (None: all was cached) in ``store`` and give the unit's result."""
