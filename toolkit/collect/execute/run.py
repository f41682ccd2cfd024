"""The one loop every unit of work goes through: cache lookup -> executor -> store, with progress.

A *unit* is a stored tensor of one checkpoint (``weight_stats``,
``cell_spectrum``) or a stored tensor pair of two (``compare``,
``compare_series``). A *measurement* (:mod:`toolkit.collect.measure`) says
how a unit is looked up, read, measured and stored; an *executor*
(:mod:`.executors`: in-process pipelines, or a Dask cluster) only runs
``measure``. Lookups and stores happen here, in the calling thread, as each
unit finishes, so an interrupted run keeps exactly the results it reported,
whichever executor ran them.

Every entry point sets a pass up the same way, :func:`open_pass` (the run's
cache warnings, the executor, the progress bar shown while the checkpoints
are opened), and runs each measurement with :meth:`Pass.run`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from toolkit.collect.cache import ResultCache, cache_run, open_cache
from toolkit.collect.execute.executors import executor_for
from toolkit.collect.execute.measurement import Measurement
from toolkit.collect.progress import Progress, opening_progress


def run_pass(measurement: Measurement, units: Sequence, *, executor, cache: ResultCache,
             progress: Callable[[str], None], sources: Sequence,
             on_cells: Callable[[object], None] | None = None) -> list:
    """``measurement.finish(...)`` of every unit, in the order of ``units``.

    Parameters
    ----------
    measurement : Measurement
        :class:`~toolkit.collect.execute.measurement.Measurement`: ``lookup(store, unit)``,
        ``reader(work)``, ``measure(work, tensors, memo)``, ``finish(store, work, fresh)``,
        ``float32``, ``kind`` (``WeightMeasurement``, ``LowRankMeasurement``, ``PairMeasurement``).
    units : sequence
        :class:`~toolkit.collect.plan.types.PlannedTensor` or
        :class:`~toolkit.collect.plan.pairs.TensorPair`.
    executor : SerialExecutor or DaskExecutor
        ``executor.map(measurement, works, sources)`` yields ``(index, fresh)``
        for the works it is given, in any order.
    cache : ResultCache
        Of the measurement's kind and the checkpoints' identity.
    progress : callable
        ``progress(unit name)`` after each unit, cached or computed.
    sources : sequence of Source
        The checkpoints the units' records come from (one, or base and target).
    on_cells : callable, optional
        ``on_cells(result)`` with what ``finish`` gave for each unit as soon as
        it is stored (cached units first), in this thread. An exception it
        raises stops the pass; the units finished before are stored.

    Returns
    -------
    list
        What ``finish`` gives for each unit.

    Raises
    ------
    CheckpointChangedError
        A file of ``sources`` changed while it was read (checked after each
        unit is measured, before its results are stored).
    Whatever reading or measuring raises (units already finished are stored).
    """
    works = [measurement.lookup(cache, u) for u in units]
    results: list = [None] * len(works)
    todo = [i for i, w in enumerate(works) if w.todo]

    def take(i: int, fresh) -> None:
        if fresh is not None:  # the bytes measured are the planned ones: else never stored, never mixed
            for source in sources:
                source.check_unchanged()
        results[i] = measurement.finish(cache, works[i], fresh)
        progress(works[i].name)
        if on_cells is not None:
            on_cells(results[i])

    for i, work in enumerate(works):
        if not work.todo:
            take(i, None)
    for n, fresh in executor.map(measurement, [works[i] for i in todo], sources):
        take(todo[n], fresh)
    return results


@dataclass
class Pass:
    """One public call's pass: its executor and progress; :meth:`run` runs a measurement over units."""

    executor: object
    progress: Progress
    cache: bool = True

    def run(self, measurement: Measurement, units: Sequence, *, identity: str, sources: Sequence,
            on_cells: Callable[[object], None] | None = None) -> list:
        """:func:`run_pass` of ``measurement`` over ``units`` with the cache of ``identity``
        (what was measured: the checkpoints' identities); ``on_cells`` hears each unit's result."""
        store = open_cache(identity, measurement.kind, enabled=self.cache)
        return run_pass(measurement, units, executor=self.executor, cache=store, progress=self.progress.step,
                        sources=sources, on_cells=on_cells)


@contextmanager
def open_pass(*, progress, desc: str, what: str = "the checkpoint", client=None, device: str = "cpu",
              cache: bool = True, where: str = "") -> Iterator[Pass]:
    """Set up a pass: the extent of its cache warnings, its executor (:func:`executor_for`: serial, or
    Dask on ``client``) and its progress bar, which says ``opening <what> …`` until
    ``Pass.progress.begin(total)``.

    Raises
    ------
    ToolkitError, MissingPackageError
        As :func:`executor_for` (a device this process lacks, a bad client; ``where`` names the front door).
    """
    with cache_run(), executor_for(client, device, where) as executor, opening_progress(progress, desc, what) as report:
        yield Pass(executor, report, cache)
