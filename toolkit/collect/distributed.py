"""Running ``weight_stats``, ``compare`` and ``compare_series`` on a Dask cluster.

Pass ``client=`` (a ``distributed.Client``, or a scheduler address such as
``"tcp://host:8786"``) to any of the three and the work is split into one
Dask task per (checkpoint, stored tensor): the driver plans from the
checkpoints' headers (no tensor data), looks every cell up in the on-disk
cache, submits a task for each tensor with work left, and assembles the
same Dataset the serial path gives from the few numbers each task returns.
Workers re-open the checkpoints themselves (:mod:`toolkit.collect._dtasks`),
so every worker must see them: a shared file system mounted at the same path,
or the hub repo in each worker's own Hugging Face cache. No tensor passes
through the driver.

The cache (``$TOOLKIT_CACHE_DIR``) is shared when it lies on the shared file
system: workers read and write the driver's cache folder, so a re-run after a
failure, from any machine, only computes what is missing. A worker that cannot
write there hands its entries back and the driver writes them.

A worker that dies mid-run (killed, out of memory) loses nothing: the
scheduler re-runs its tasks elsewhere; a task that raises is retried
:data:`RETRIES` times before the run fails with a
:class:`~toolkit.collect._dtasks.WorkerTaskError` naming the checkpoint, the
tensor and the worker.

Dask is an optional extra: ``pip install "toolkit[distributed]"``.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager

import xarray as xr

from toolkit.collect import _dtasks
from toolkit.collect._compare_dataset import pair_dataset
from toolkit.collect._compare_measure import CompareJob, finish, lookup
from toolkit.collect._compare_pairs import pair_tensors
from toolkit.collect._dtasks import SourceSpec, WorkerTaskError
from toolkit.collect.cache import _digest, metric_key, open_cache
from toolkit.collect.grid import build_grid_dataset, cell_from
from toolkit.collect.plan import plan_pieces
from toolkit.collect.progress import make_progress
from toolkit.errors import MissingPackageError, ToolkitError
from toolkit.metrics.registry import resolve_metrics

__all__ = ["RETRIES", "WorkerTaskError", "connect", "run_compare", "run_tasks", "weight_stats"]

#: Times a task that raised is re-run (on any worker) before the run fails.
RETRIES = 2


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


def run_tasks(client, func, calls: list[tuple], labels: list[tuple[str, str]], on_result, report, *,
              prefix: str, **shared) -> None:
    """Run ``func(*call, **shared)`` for every call on the cluster, as they finish.

    Parameters
    ----------
    client : distributed.Client
    func : callable
        A module-level function of :mod:`toolkit.collect._dtasks`.
    calls : list of tuple
        Positional arguments of each task.
    labels : list of (checkpoint, tensor)
        Named in the error when a task fails without a worker-side message.
    on_result : callable
        ``on_result(i, result)`` on the driver, as each task finishes.
    report : callable with a ``done`` count
        ``report(done, tensor name)`` after each finished task.
    prefix : str
        Task-name prefix shown on the Dask dashboard.
    **shared
        Keyword arguments passed to every task.

    Raises
    ------
    WorkerTaskError
        The first task that failed for good; the others are cancelled.
    """
    from distributed import as_completed

    if not calls:
        return
    run = uuid.uuid4().hex[:8]
    futures = client.map(func, *zip(*calls), key=[f"{prefix}-{run}-{i}" for i in range(len(calls))],
                         retries=RETRIES, pure=False, **shared)
    where = {f.key: i for i, f in enumerate(futures)}
    try:
        for future in as_completed(futures):
            i = where[future.key]
            if future.status != "finished":
                exc = future.exception() if future.status == "error" else None
                if isinstance(exc, WorkerTaskError):
                    raise exc
                last = getattr(exc, "last_worker", None)  # KilledWorker: the task kept killing its workers
                raise WorkerTaskError(*labels[i], str(getattr(last, "address", None) or last or "?"),
                                      f"{type(exc).__name__}: {exc}" if exc else f"task {future.status}")
            on_result(i, future.result())
            future.release()
            report(report.done + 1, labels[i][1])
    finally:
        client.cancel([f for f in futures if not f.done()])


class _Report:
    """A progress reporter that counts what is done (tasks finish out of order)."""

    def __init__(self, progress, total: int, desc: str):
        self._inner = make_progress(progress, total=total, desc=desc)
        self.done = 0

    def __call__(self, done: int, name: str = "") -> None:
        self.done = done
        self._inner(done, name)

    def close(self) -> None:
        self._inner.close()


def weight_stats(source=None, metrics=None, *, gguf_file=None, revision=None, mapping=None, device="cpu",
                 progress=True, cache=True, client) -> xr.Dataset:
    """:func:`toolkit.weight_stats` on a Dask cluster: one task per stored tensor with work left.

    Parameters and result are those of :func:`toolkit.weight_stats`; ``client``
    as in :func:`connect`. The Dataset equals the serial one.
    """
    chosen = resolve_metrics(metrics, kind="weight")
    plan = plan_pieces(source, gguf_file=gguf_file, revision=revision, mapping=mapping)
    spec = SourceSpec.of(plan.source)
    store = open_cache(plan.source.fingerprint, "weights", enabled=cache)
    keys = {m.name: metric_key(m, **dict(m.options)) for m in chosen}
    cells, known, calls = {}, {}, []
    for record, pieces in plan.records:
        entries = []
        for piece in pieces:
            cell_id = f"{record.name}|{record.dtype}|{record.shape}|{piece.layer}|{piece.component}"
            cached, shape = store.get(cell_id)
            todo = [m for m in chosen if keys[m.name] not in cached]
            if todo:
                entries.append((piece, cell_id, todo))
                known[cell_id] = (piece, cached)
            else:
                cells[(piece.layer, piece.component)] = cell_from(piece, shape, cached, chosen, keys)
        if entries:
            calls.append((spec, record.name, entries))

    def on_result(_, result):
        for cell_id, shape, new in result["cells"]:
            piece, cached = known[cell_id]
            cells[(piece.layer, piece.component)] = cell_from(piece, shape, {**cached, **new}, chosen, keys)
        for entry in result["unsaved"]:
            store.put(*entry)

    report = _Report(progress, len(plan.records), "weights")
    try:
        todo_names = {c[1] for c in calls}
        for record, _ in plan.records:
            if record.name not in todo_names:
                report(report.done + 1, record.name)
        with connect(client) as c:
            run_tasks(c, _dtasks.weights_task, calls, [(spec.location, name) for _, name, _ in calls], on_result,
                      report, prefix="toolkit-weights", keys=keys, device=device, root=_root(store))
    finally:
        report.close()
    return build_grid_dataset(plan.num_layers, cells, chosen, plan.attrs())


def _root(store) -> str | None:
    """The cache folder as an absolute path, as workers (another cwd) must see it."""
    return None if store.root is None else os.path.abspath(store.root)


def run_compare(plans, pairs, metrics, tolerance, k, device, progress, cache, client) -> list[xr.Dataset]:
    """:func:`toolkit.collect.compare._run` on a Dask cluster: one task per (pair, stored tensor pair).

    Returns one Dataset per ``(base index, target index)`` pair of ``plans``,
    equal to the serial ones.
    """
    base_job = CompareJob.make(metrics, tolerance, k, device)
    matched = [pair_tensors(plans[b], plans[t]) for b, t in pairs]  # every mismatch before any work
    specs = [SourceSpec.of(p.source) for p in plans]
    stores, cells, rows, calls, labels, slots = [], [], [], [], [], []
    report = _Report(progress, sum(len(p) for p, _ in matched), "compare")
    try:
        for j, ((bi, ti), (tensor_pairs, _)) in enumerate(zip(pairs, matched)):
            store_fp = _digest(plans[bi].source.fingerprint, plans[ti].source.fingerprint)
            store = open_cache(store_fp, "compare", enabled=cache)
            job = base_job.at(bi, ti)
            stores.append(store)
            cells.append({})
            rows.append([None] * len(tensor_pairs))
            for r, tp in enumerate(tensor_pairs):
                work = lookup(store, tp, job)
                if not work.todo:
                    totals, got = finish(store, work, None, job)
                    rows[j][r] = (tp.name, totals)
                    cells[j].update(got)
                    report(report.done + 1, tp.name)
                    continue
                calls.append(((specs[bi], specs[ti]), tp.name, (tp.base.name, tp.target.name), tp.pieces, job,
                              _root(store), store_fp))
                labels.append((specs[ti].location, tp.name))
                slots.append((j, r, tp.name))

        def on_result(i, result):
            j, r, name = slots[i]
            rows[j][r] = (name, result["totals"])
            cells[j].update(result["cells"])
            for entry in result["unsaved"]:
                stores[j].put(*entry)

        with connect(client) as c:
            run_tasks(c, _dtasks.compare_task, calls, labels, on_result, report, prefix="toolkit-compare")
    finally:
        report.close()
    return [pair_dataset(plans[bi], plans[ti], cells[j], rows[j], list(base_job.chosen), skipped, tolerance, k)
            for j, ((bi, ti), (_, skipped)) in enumerate(zip(pairs, matched))]
