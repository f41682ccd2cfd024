"""Where units are measured: in this process, or on a Dask cluster. Chosen in one place, :func:`executor_for`.

Both executors have one method, ``map(measurement, works, sources)``, which
yields ``(index, fresh)`` as each work is measured; the lookups before and
the stores after are :func:`toolkit.collect.execute.run_pass`'s, the same
for both, so the Datasets are identical.

- :class:`SerialExecutor`: the read-ahead pipelines of
  :func:`toolkit.collect.execute.stream.map_tensors` (each tensor read one ahead in
  a background thread, up to two pipelines sharing torch's threads, Gram
  buffers reused within the pass).
- :class:`DaskExecutor`: pass ``client=`` (a ``distributed.Client``, a
  scheduler address such as ``"tcp://host:8786"``, or a cluster object) to
  ``weight_stats``, ``compare`` or ``compare_series`` and each unit with work
  left becomes one Dask task (one per checkpoint x stored tensor). No tensor
  passes through the driver: workers re-open the checkpoints themselves
  (:mod:`toolkit.collect.execute.remote`), so every worker must see them (a shared
  file system mounted at the same path, or the hub repo in each worker's own
  Hugging Face cache). The driver looks every cell up in its cache before
  submitting and stores each result as its task finishes, so a re-run after
  a failure submits only what is missing. A worker that dies mid-run
  (killed, out of memory) loses nothing: the scheduler re-runs its tasks
  elsewhere, and a result lost with its worker before the driver fetched it is
  submitted again (at most :data:`RETRIES` times); a task that raises is retried :data:`RETRIES` times before the
  run fails with a :class:`~toolkit.errors.WorkerTaskError` naming the
  checkpoint, the tensor and the worker. Dask is an optional extra:
  ``pip install "toolkit[distributed]"``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from toolkit.collect.execute import remote
from toolkit.collect.execute.schedule import claim_order
from toolkit.collect.execute.stream import map_tensors
from toolkit.devices import check_device
from toolkit.errors import MissingPackageError, ToolkitError, WorkerTaskError
from toolkit.metrics.spectral import reuse_buffers

__all__ = ["RETRIES", "DaskExecutor", "SerialExecutor", "connect", "executor_for"]

#: Times a task that raised is re-run (on any worker) before the run fails.
RETRIES = 2


class SerialExecutor:
    """Measure in this process, on the read-ahead pipelines of :func:`~toolkit.collect.execute.stream.map_tensors`.

    ``memo`` is handed to every ``measure`` call and kept across calls (a
    series reuses each checkpoint's singular vectors); :meth:`forget` trims it.
    """

    def __init__(self):
        self.memo: dict = {}

    def map(self, measurement, works: Sequence, sources: Sequence) -> Iterator[tuple[int, object]]:
        order = claim_order(works)  # each layer's costliest tensors first (toolkit.collect.execute.schedule)
        readers = [measurement.reader(works[i]) for i in order]
        mapped = map_tensors(readers, lambda j, tensors: measurement.measure(works[order[j]], tensors, self.memo),
                             float32=measurement.float32, sizes=[measurement.read_bytes(works[i]) for i in order],
                             read_ahead_bytes=measurement.read_ahead_bytes, thread_context=reuse_buffers)
        try:
            for j, result in mapped:
                yield order[j], result
        finally:
            mapped.close()  # a caller that stops early stops the pipelines now

    def forget(self, keep: set) -> None:
        """Drop the memo entries of checkpoints not in ``keep``."""
        for key in [k for k in self.memo if k[0] not in keep]:
            del self.memo[key]


class DaskExecutor:
    """Measure on a Dask cluster: one task per unit, run by :func:`toolkit.collect.execute.remote.measure_task`."""

    def __init__(self, client):
        self.client = client

    def map(self, measurement, works: Sequence, sources: Sequence) -> Iterator[tuple[int, object]]:
        from distributed import as_completed

        if not works:
            return
        specs = tuple(remote.SourceSpec.of(s) for s in sources)
        run = uuid.uuid4().hex[:8]
        futures = self.client.map(remote.measure_task, [measurement] * len(works), [w.detached() for w in works],
                                  [specs] * len(works), key=[f"toolkit-{measurement.kind}-{run}-{i}"
                                                             for i in range(len(works))],
                                  retries=RETRIES, pure=False)
        where = {f.key: i for i, f in enumerate(futures)}
        resubmitted = [0] * len(works)
        try:
            pending = as_completed(futures)
            for future in pending:
                i = where[future.key]
                if future.status == "lost" and resubmitted[i] < RETRIES:
                    # finished on a worker that died before its result was fetched: measure it again
                    resubmitted[i] += 1
                    again = self.client.submit(remote.measure_task, measurement, works[i].detached(), specs,
                                               key=f"toolkit-{measurement.kind}-{run}-{i}-again{resubmitted[i]}",
                                               retries=RETRIES, pure=False)
                    where[again.key] = i
                    futures.append(again)
                    pending.add(again)
                    continue
                if future.status != "finished":
                    exc = future.exception() if future.status == "error" else None
                    if isinstance(exc, WorkerTaskError):
                        raise exc
                    last = getattr(exc, "last_worker", None)  # KilledWorker: the task kept killing its workers
                    raise WorkerTaskError(specs[-1].location, works[i].name,
                                          str(getattr(last, "address", None) or last or "?"),
                                          f"{type(exc).__name__}: {exc}" if exc else f"task {future.status}")
                result = future.result()
                future.release()
                yield i, result
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def forget(self, keep: set) -> None:
        """Nothing is memoised across tasks."""


@contextmanager
def connect(client):
    """Yield a ``distributed.Client`` for ``client``; one opened here is closed on exit.

    Parameters
    ----------
    client : distributed.Client, str or distributed cluster object
        A client, a scheduler address (``"tcp://host:8786"``), or a cluster
        (``LocalCluster``, ``SLURMCluster`` ...).

    Raises
    ------
    MissingPackageError
        ``dask.distributed`` is not installed.
    ToolkitError
        The scheduler cannot be reached, or ``client`` is none of the above.
    """
    try:
        import distributed
    except ImportError:
        raise MissingPackageError("distributed", 'pip install "toolkit[distributed]"',
                                  "Dask distributed, needed for client=") from None
    if isinstance(client, distributed.Client):
        yield client
        return
    if not isinstance(client, str) and not hasattr(client, "scheduler_address"):
        raise ToolkitError(f"client= must be a distributed.Client, a scheduler address or a Dask cluster, "
                           f"got {type(client).__name__}")
    try:
        own = distributed.Client(client, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ToolkitError(f"cannot reach the Dask scheduler at {client!r}: {exc}") from exc
    try:
        yield own
    finally:
        own.close()


@contextmanager
def executor_for(client, device: str, where: str = ""):
    """The executor of a run: serial when ``client`` is None, else Dask on ``client``.

    Checks ``device`` first (on a cluster only its name: the workers may have
    GPUs this process lacks).

    Raises
    ------
    ToolkitError
        A device this process lacks (serial), a bad ``client`` or an unreachable scheduler.
    MissingPackageError
        ``client`` given without ``dask.distributed`` installed.
    """
    if client is None:
        check_device(device, where=where)
        yield SerialExecutor()
        return
    check_device(device, available=False, where=where)
    with connect(client) as c:
        yield DaskExecutor(c)
