"""The one loop every unit of work goes through: plan -> cache lookup -> executor -> store -> assemble.

A *unit* is a stored tensor of one checkpoint (``weight_stats``) or a stored
tensor pair of two (``compare``, ``compare_series``). A *measurement*
(:class:`~toolkit.collect.weight_cells.WeightMeasurement`,
:class:`~toolkit.collect.pair_cells.PairMeasurement`) says how a unit is
looked up, read, measured and stored; an *executor*
(:mod:`toolkit.collect.executors`: in-process pipelines, or a Dask cluster)
only runs ``measure``. Lookups and stores happen here, in the calling thread,
as each unit finishes, so an interrupted run keeps exactly the results it
reported, whichever executor ran them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def run_units(measurement, units: Sequence, store, executor, report: Callable[[str], None],
              sources: Sequence) -> list:
    """``measurement.finish(...)`` of every unit, in the order of ``units``.

    Parameters
    ----------
    measurement : WeightMeasurement or PairMeasurement
        ``lookup(store, unit)``, ``reader(work)``, ``measure(work, tensors, memo)``,
        ``finish(store, work, fresh)``, ``float32``.
    units : sequence
        :class:`~toolkit.collect.plan.PlannedTensor` or
        :class:`~toolkit.collect.tensor_pairs.TensorPair`.
    store : ResultCache
    executor : SerialExecutor or DaskExecutor
        ``executor.map(measurement, works, sources)`` yields ``(index, fresh)``
        for the works it is given, in any order.
    report : callable
        ``report(unit name)`` after each unit, cached or computed.
    sources : sequence of Source
        The checkpoints the units' records come from (one, or base and target).

    Returns
    -------
    list
        What ``finish`` gives for each unit.

    Raises
    ------
    Whatever reading or measuring raises (cells already finished are stored).
    """
    works = [measurement.lookup(store, u) for u in units]
    results: list = [None] * len(works)
    todo = [i for i, w in enumerate(works) if w.todo]

    def take(i: int, fresh) -> None:
        results[i] = measurement.finish(store, works[i], fresh)
        report(works[i].name)

    for i, work in enumerate(works):
        if not work.todo:
            take(i, None)
    for n, fresh in executor.map(measurement, [works[i] for i in todo], sources):
        take(todo[n], fresh)
    return results
