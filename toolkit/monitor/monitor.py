"""``toolkit.watch``: statistics of a model while it trains, recorded every few steps at little cost.

The training thread pays for a copy of the watched matrices at a recorded step (and a Frobenius norm per
gradient when gradients are watched); everything else is measured from that copy on a background
worker (:mod:`toolkit.monitor.worker`: a bounded queue, a skipped record said so, training never waits).
A store that cannot be written is a typed error at :func:`watch` (its ``watch.json`` is written then); the first
record, the one every later record's update is measured against, is measured on the worker too (with alpha it is
the whole spectral pass, seconds the training would wait), and if it fails (a disk full by then), the next
:meth:`Monitor.step` or :meth:`Monitor.wait` raises its error: the run stops at once rather than going on
with no baseline.

The copies go into buffers the worker no longer reads where there are some (the matrices of a record that is
neither the first nor the previous one any more, or of a skipped one): writing into memory already mapped
costs the training thread about a quarter of a fresh copy, whose new pages fault in one by one (the watched
matrices of the embedded SmolLM2-135M, 106 M float32 entries: 0.04 s against 0.14-0.4 s).
"""

from __future__ import annotations

import threading
import time

import torch
import xarray as xr

from toolkit.collect.pass_options import PASS, SELECTION, metrics_of
from toolkit.collect.plan.selection import Selection
from toolkit.constraint_types import Exempt
from toolkit.constraints import Optional, PathName, Whole, checks_options
from toolkit.io import load
from toolkit.metrics.norms import sum_of_squares
from toolkit.metrics.registry import resolve_metrics
from toolkit.monitor.distributed import full_parameters, is_recording_rank, named_weights, plain_module
from toolkit.monitor.matrices import plan_watch
from toolkit.monitor.record import Snapshot, measure_snapshot, record_dataset
from toolkit.monitor.store import BackgroundWrite, RecordStore
from toolkit.monitor.worker import Worker

#: The metrics a monitor records by default: entry-wise, no factorisation (the update metrics come with every
#: record). Spectral metrics (``stable_rank``, ``alpha``...) are asked for by name, with ``spectral_every``.
DEFAULT_METRICS = ("frobenius_norm", "rms")
WHERE = "toolkit.watch"


class Monitor:
    """A watched model: call :meth:`step` after each optimizer step (or use the Trainer callback).

    Build it with :func:`watch`. Attributes: ``plan`` (the watched matrices), ``skipped`` (steps whose
    record was dropped because the worker was behind), ``failed`` (``(step, error)`` of records lost to
    an error), ``store`` (the :class:`~toolkit.monitor.store.RecordStore` or None), ``training_thread_s``
    (wall seconds :meth:`step` spent recording on the training thread: the copies) and
    ``worker_cpu_s`` (CPU seconds of the background worker).
    """

    def __init__(self, model, metrics, every, spectral_every, store, selection, mapping, gradients, queue):
        self.model, self.every, self.gradients = model, every, gradients
        self.spectral_every = spectral_every or every
        self.metrics = resolve_metrics(None if metrics is None else list(metrics), kind="weight")
        self.recording = is_recording_rank()
        self._lock = threading.Lock()
        self._records: list[xr.Dataset] = []
        self._start = self._previous = None
        self._grads: dict = {}
        self._spare: list[dict] = []  # matrix sets the worker no longer reads: the next snapshots' buffers
        self.training_thread_s = 0.0  # wall seconds step() spent recording (the copies)
        self._first_taken = False  # this session's first record was queued (reserved: never skipped)
        self._first_failure: BaseException | None = None  # the first record's error, raised on the training thread
        self._count = 0
        with full_parameters(model):
            self.plan = plan_watch(plain_module(model), named_weights(model), selection, mapping=mapping,
                                   where=WHERE) if self.recording else None
        info = {"metrics": [m.name for m in self.metrics], "every": every, "spectral_every": self.spectral_every,
                "model": _model_name(model), "family": self.plan.family if self.plan else ""}
        if self.plan is not None:
            info.update(layers=self.plan.num_layers, components=list(self.plan.components))
        self.store = RecordStore(store, info) if store is not None and self.recording else None
        self._done = set(self.store.steps()) if self.store is not None else set()
        # a resumed run: its first and last record were taken by an earlier session; the first one's matrices are
        # in the store (RecordStore.save_start) unless it was written before they were kept
        self._resumed = (min(self._done), max(self._done)) if self._done else None
        self._start_reason = ""
        # the first record's matrices are written to the store by a thread of their own once that record is measured
        # (the write releases the GIL; the worker goes on with the next records): a run killed after that resumes
        # with them, one killed before resumes without them, saying so. wait() and close() join the writer.
        self._start_writer: BackgroundWrite | None = None
        self._start_lock = threading.Lock()
        if self._resumed is not None:
            kept = self.store.load_start()
            if kept is not None and kept[0] == self._resumed[0]:
                self._start = Snapshot(kept[0], kept[1], spectral=False,
                                       sumsq={k: sum_of_squares(t) for k, t in kept[1].items()})
            else:
                self._start_reason = (f"the run's first record (step {self._resumed[0]}) was taken before the run "
                                      "was resumed, and the store does not hold its matrices")
        self._last: int | None = max(self._done) if self._done else None
        self._closed = False
        self._worker = Worker(self._measure, queue) if self.recording else None

    # -- the training thread ---------------------------------------------------------------------------
    def due(self, global_step: int) -> bool:
        """Whether ``global_step`` is recorded (a multiple of ``every`` not in the store yet)."""
        return global_step % self.every == 0 and global_step not in self._done

    def capture_gradients(self) -> None:
        """Keep the Frobenius norm of each watched matrix's gradient, for the next record.

        Call after ``loss.backward()`` and before the optimizer zeroes the gradients (the Trainer callback
        does it in ``on_pre_optimizer_step``). Costs one norm per watched matrix.
        """
        if not self.recording:
            return
        params = named_weights(self.model)
        self._grads = {w.key: float(torch.linalg.vector_norm(w.matrix(params[w.parameter_name].grad).float()))
                       for w in self.plan.matrices
                       if params.get(w.parameter_name) is not None and params[w.parameter_name].grad is not None}

    def step(self, global_step: int | None = None) -> bool:
        """Record the watched matrices if ``global_step`` is due.

        Parameters
        ----------
        global_step : int, optional
            The optimizer step just taken; default: count the calls (0, 1, 2, ...).

        Returns
        -------
        bool
            Whether a record was taken (queued for the worker).

        Raises
        ------
        OutputPathError
            The first record could not be written to the store (raised at the first call after the worker
            found it; any other error of the first record likewise).
        InvalidOptionError
            ``global_step`` is not a whole number from 0 to 2**63 - 1 (a float, a bool, a string), or a due
            step before the last one recorded (records are kept in step order).
        MonitorClosedError
            The monitor was closed (its worker has stopped: a record now would never be measured).
        """
        if self._closed:
            from toolkit.errors import MonitorClosedError

            raise MonitorClosedError()
        if global_step is None:
            global_step, self._count = self._count, self._count + 1
        global_step = _step_number(global_step)
        if not self.due(global_step):
            return False
        if self._last is not None and global_step < self._last:
            from toolkit.errors import InvalidOptionError

            raise InvalidOptionError("global_step", global_step, f"after the last step recorded ({self._last}): "
                                     "records are kept in step order (a new run wants a new store or monitor)",
                                     "Monitor.step")
        self._last = global_step
        start = time.perf_counter()
        try:
            return self._record(global_step)
        finally:
            self.training_thread_s += time.perf_counter() - start

    def _record(self, global_step: int) -> bool:
        self._raise_first_failure()
        with full_parameters(self.model):  # every rank of a sharded model takes part in the gather
            if not self.recording:
                return False
            snap = Snapshot(global_step, self._copy(named_weights(self.model)),
                            spectral=global_step % self.spectral_every == 0, gradient_norms=self._grads)
        self._grads = {}
        first, self._first_taken = not self._first_taken, True
        self._done.add(global_step)
        if self._worker.submit(snap, reserved=first):
            return True
        self._release(snap.matrices)  # skipped: its buffers serve the next snapshot
        return False

    def _copy(self, params: dict) -> dict:
        """``{key: CPU copy}`` of the watched matrices, written into a spare set of buffers where one is free."""
        with self._lock:
            spare = self._spare.pop() if self._spare else {}
        copies = {}
        for w in self.plan.matrices:
            m = w.matrix(params[w.parameter_name])
            buf = spare.get(w.key)
            if buf is not None and buf.shape == m.shape and buf.dtype == m.dtype:
                copies[w.key] = buf.copy_(m)
            else:
                copies[w.key] = m.to("cpu", copy=True)
        return copies

    def _release(self, matrices: dict) -> None:
        with self._lock:
            self._spare.append(matrices)

    # -- the worker thread -----------------------------------------------------------------------------
    def _raise_first_failure(self) -> None:
        if self._first_failure is not None:
            raise self._first_failure

    def _measure(self, snap: Snapshot) -> None:
        """Measure and store one record (the worker thread); the first record's error is kept for the training
        thread (:meth:`_raise_first_failure`), every record's is the worker's ``failed``."""
        try:
            self._measure_record(snap)
        except Exception as exc:
            if not self._records and self._first_failure is None:  # this session's first record
                self._first_failure = exc
            raise

    def _measure_record(self, snap: Snapshot) -> None:
        start, previous = self._start_reason or self._start, self._previous
        if self._resumed is not None and previous is None:  # the last record of an earlier session: values only
            previous = f"the previous record (step {self._resumed[1]}) was taken before the run was resumed"
        cells = measure_snapshot(snap, self.metrics, start=start, previous=previous,
                                 spectral_every=self.spectral_every)
        first = self._start is None and self._resumed is None
        attrs = {"source": f"toolkit.watch of {_model_name(self.model)}",
                 "model_type": self.plan.family, "num_hidden_layers": self.plan.num_layers,
                 "watch_every": self.every, "watch_spectral_every": self.spectral_every}
        ds = record_dataset(snap, cells, self.plan, self.metrics, attrs)
        if self.store is not None:
            self.store.append(ds)
        with self._lock:
            self._records.append(ds)
        old = self._previous
        if first:
            self._start = snap
            if self.store is not None:
                self._start_writer = BackgroundWrite(self.store.save_start, snap.step, snap.matrices)
        self._previous = snap
        if old is not None and old is not self._start:
            self._release(old.matrices)

    def _join_start(self) -> None:
        """Wait for the first record's matrices to be written; raise the write's error, once."""
        with self._start_lock:
            writer, self._start_writer = self._start_writer, None
        if writer is not None:
            writer.join()

    # -- reading -------------------------------------------------------------------------------------------
    @property
    def skipped(self) -> list[int]:
        return list(self._worker.skipped) if self._worker else []

    @property
    def failed(self) -> list[tuple[int, str]]:
        return list(self._worker.failed) if self._worker else []

    def wait(self) -> Monitor:
        """Block until every queued record is measured (and written); returns the monitor.

        Raises
        ------
        OutputPathError
            The first record, or its matrices (``start.safetensors``), could not be written to the store (any
            other error of the first record likewise); said once.
        """
        if self._worker is not None:
            self._worker.wait()
            self._join_start()
        self._raise_first_failure()
        return self

    def close(self) -> None:
        """Measure what is queued and stop the worker (the records stay readable; a later :meth:`step` raises)."""
        self._closed = True
        if self._worker is not None:
            self._worker.close()
            self._join_start()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def dataset(self) -> xr.Dataset:
        """Every record so far, dims ``(step, layer, component)``: the store's when there is one (the
        records of earlier sessions of a resumed run included), else this session's, in memory.

        Raises
        ------
        ResultsNotFoundError
            No record yet.
        """
        if self.store is not None:
            return load(self.store.path)
        with self._lock:
            records = list(self._records)
        if not records:
            from toolkit.errors import ResultsNotFoundError

            queued = self._worker is not None and self._worker.pending
            raise ResultsNotFoundError("toolkit.watch", "no record yet: " + (
                "the first is being measured on the background worker (monitor.wait() waits for it)" if queued
                else "the first is taken at the first due step"))
        return xr.concat(records, dim="step", combine_attrs="override", join="outer").sortby("step")

    def status(self) -> str:
        """One line: records measured, queued, skipped and failed."""
        if self._worker is None:
            return "not recording on this rank (records are taken on rank 0)"
        with self._lock:
            n = len(self._records)
        return (f"{n} records, {self._worker.pending} queued, {len(self.skipped)} skipped (worker behind), "
                f"{len(self.failed)} failed; cost: training thread {self.training_thread_s:.2f} s, "
                f"worker {self.worker_cpu_s:.2f} s CPU")

    @property
    def worker_cpu_s(self) -> float:
        """CPU seconds the background worker has spent measuring records (on a machine whose cores the
        training keeps busy, about what watching costs the training beyond :attr:`training_thread_s`)."""
        return self._worker.cpu_s if self._worker is not None else 0.0

    def __repr__(self) -> str:
        return f"<toolkit.monitor.Monitor every={self.every}: {self.status()}>"


def _model_name(model) -> str:
    return type(plain_module(model)).__name__


def _step_number(value) -> int:
    """``value`` as a global step: a whole number (``int``, a NumPy integer) from 0 to 2**63 - 1, else
    :class:`~toolkit.errors.InvalidOptionError` (a float such as 2.9 is not truncated, a bool is no step, and
    the store's file names and int64 coordinate hold no other)."""
    import numbers

    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= int(value) < 2 ** 63:
        return int(value)
    from toolkit.errors import InvalidOptionError

    raise InvalidOptionError("global_step", value, "a whole number from 0 to 2**63 - 1 (the optimizer step)",
                             "Monitor.step")


@checks_options(model=Exempt("the model to watch: a torch.nn.Module (InvalidOptionError otherwise, checked in the "
                            "body: its parameters are what is watched)"), **metrics_of("weight"),
                every=Whole(minimum=1, meaning="the steps between two records"),
                spectral_every=Optional(Whole(minimum=1, meaning="the steps between two spectral measurements")),
                store=Optional(PathName()), **{k: SELECTION[k] for k in ("layers", "components", "experts")},
                mapping=PASS["mapping"], gradients=PASS["cache"],
                queue=Whole(minimum=1, meaning="the snapshots waiting at most"))
def watch(model, metrics=DEFAULT_METRICS, *, every: int = 10, spectral_every: int | None = None, store=None,
          layers=None, components=None, experts=None, mapping=None, gradients: bool = False,
          queue: int = 2) -> Monitor:
    """Watch a model as it trains: per (layer, component) statistics every ``every`` steps.

    Each record holds the chosen weight metrics (the registry of ``weight_stats``), the update since the
    first record and since the previous one (``relative_change_since_start``,
    ``update_density_since_start``, ``..._since_previous``: ``compare``'s metrics) and, with
    ``gradients=True``, ``gradient_norm``, per (layer, component[, expert]) as the architecture registry
    maps the model (a model it does not know: every 2-D weight in a numbered block, named by module path).

    Parameters
    ----------
    model : torch.nn.Module
        A ``transformers`` model, any module, or one wrapped by DDP / FSDP.
    metrics : str or list of str, default ("frobenius_norm", "rms")
        Weight metric names (``toolkit.list_metrics(opt_in=True)``).
    every : int, default 10
        Record at the steps that are multiples of ``every``.
    spectral_every : int, optional
        Measure the metrics that need singular values (``alpha``, ``stable_rank``...) only at multiples
        of this (default: every record); other records hold NaN with the reason.
    store : str or path-like, optional
        A folder for the records (:mod:`toolkit.monitor.store`): one NetCDF file per record, readable with
        ``toolkit.load(store)`` while the run goes on; re-opening it resumes after its last record (the first
        record's matrices are kept in it, ``start.safetensors``, written beside the training once that record is
        measured, for the updates since the first record; a run killed before resumes with those updates NaN,
        saying so).
    layers, components, experts :
        The selection, as ``weight_stats`` takes it.
    mapping : toolkit.Mapping, optional
        A user mapping for a family the registry does not know.
    gradients : bool, default False
        Also record ``gradient_norm`` (call :meth:`Monitor.capture_gradients` after ``backward()``; the
        Trainer callback does).
    queue : int, default 2
        Snapshots waiting for the worker at most; beyond, a record is skipped (said so), never waited for.

    Returns
    -------
    Monitor

    Raises
    ------
    InvalidOptionError
        An option it cannot take.
    UnmappedParametersError, SelectionError
        Nothing to watch, or a selection the model does not have.
    OutputPathError
        ``store`` cannot be written (checked now).

    Examples
    --------
    >>> monitor = toolkit.watch(model, every=10, store="run.watch")       # doctest: +SKIP
    >>> for step, batch in enumerate(loader):                             # doctest: +SKIP
    ...     loss = model(**batch).loss; loss.backward(); opt.step(); opt.zero_grad()
    ...     monitor.step(step)
    >>> monitor.wait().dataset.relative_change_since_start               # doctest: +SKIP
    """
    if not isinstance(model, torch.nn.Module):
        from toolkit.errors import InvalidOptionError

        raise InvalidOptionError("model", model, "a torch.nn.Module", WHERE)
    selection = Selection.of(layers, components, experts, where=WHERE)
    return Monitor(model, (metrics,) if isinstance(metrics, str) else metrics, every, spectral_every, store,
                   selection, mapping, gradients, queue)
