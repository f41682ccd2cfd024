"""The monitor's background worker: measures snapshots off the training thread, with a bounded queue.

Sharing the cores: the worker measures with one intra-op thread of torch (set in the worker thread only: torch's
thread count is per thread) and NumPy's BLAS held to one thread while it measures (threadpoolctl; OpenBLAS's
pool is the process's), and, on Linux, at a lower scheduling priority (``nice`` +5 for that thread alone). A
worker using as many threads as the training next to it makes both wait at every parallel barrier for a
descheduled thread (``benchmarks/bench_watch.py`` measures what watching costs the training).

Policy when it falls behind: the training thread never waits. :meth:`Worker.submit` puts a snapshot on a
queue of at most ``capacity`` snapshots and returns at once; when the queue is full the snapshot is
dropped, its step is listed in :attr:`Worker.skipped` and a warning says so (once per run, and the
monitor's status line counts them). A failure while measuring one record does not stop the run: the
record is lost, its step and the error are listed in :attr:`Worker.failed`, and the next records go on.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from collections.abc import Callable

from toolkit.errors import WatchFellBehind

_STOP = object()


class Worker:
    """One daemon thread running ``handle(snapshot)`` for each submitted snapshot, in order.

    Parameters
    ----------
    handle : callable
        ``handle(snapshot) -> None``; runs on the worker thread.
    capacity : int
        Snapshots waiting at most (each holds a copy of the watched matrices).
    """

    def __init__(self, handle: Callable, capacity: int):
        self._handle = handle
        self.capacity = max(1, int(capacity))
        self._queue: queue.Queue = queue.Queue()  # bounded by submit: see capacity and reserved
        self._waiting = 0  # snapshots in the queue that count against capacity
        self._reserved = 0  # reserved snapshots queued or being measured
        self._lock = threading.Lock()
        self.skipped: list[int] = []
        self.failed: list[tuple[int, str]] = []
        self.done = 0
        self.cpu_s = 0.0  # CPU seconds of the worker thread in ``handle`` (time.thread_time)
        self._warned = False
        import torch

        torch.get_num_threads()  # the caller's thread keeps its own count whatever the worker sets
        self._thread = threading.Thread(target=self._run, name="toolkit-watch", daemon=True)
        self._thread.start()

    def submit(self, snapshot, reserved: bool = False) -> bool:
        """Queue ``snapshot`` (it has a ``step``); False, with the step listed as skipped, when ``capacity``
        snapshots wait already.

        A ``reserved`` snapshot (the monitor's first record, the baseline of every later one) is always
        queued, and until it is measured the others have one place more: the one it holds.
        """
        with self._lock:
            if reserved or self._waiting < self.capacity + self._reserved:
                if reserved:
                    self._reserved += 1
                else:
                    self._waiting += 1
                self._queue.put_nowait((snapshot, reserved))
                return True
            self.skipped.append(int(snapshot.step))
            warn = not self._warned
            self._warned = True
        if warn:
            warnings.warn(f"toolkit.watch: the worker is behind; the record of step {snapshot.step} was "
                          "skipped (training did not wait). Record less often (every=), measure spectral "
                          "metrics less often (spectral_every=) or allow more waiting snapshots (queue=); "
                          "Monitor.skipped lists every skipped step", WatchFellBehind, stacklevel=3)
        return False

    def _run(self) -> None:
        import torch
        from threadpoolctl import threadpool_limits

        budget = torch.get_num_threads()  # a new thread starts from the process's count
        lower_priority()
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                item, reserved = item
                if not reserved:
                    with self._lock:
                        self._waiting -= 1
                start = time.thread_time()
                try:
                    # one intra-op thread while measuring; torch.set_num_threads also sets the count threads
                    # started later begin with, so it is handed back after each record
                    torch.set_num_threads(1)
                    with threadpool_limits(limits=1, user_api="blas"):
                        self._handle(item)
                except Exception as exc:  # noqa: BLE001 - one lost record, never a stopped run
                    with self._lock:
                        self.failed.append((int(item.step), f"{type(exc).__name__}: {exc}"))
                finally:
                    torch.set_num_threads(budget)
                    with self._lock:
                        self.cpu_s += time.thread_time() - start
                with self._lock:
                    self.done += 1
                    self._reserved -= reserved
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        """Block until every queued snapshot is measured."""
        self._queue.join()

    def close(self) -> None:
        """Measure what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    @property
    def pending(self) -> int:
        """Snapshots queued and not yet measured."""
        return self._queue.unfinished_tasks


#: How much lower the worker thread's scheduling priority is than the training's (Linux ``nice``; the kernel
#: then gives it about a third of a core the training wants, the rest when the training leaves one idle).
NICE = 5


def lower_priority() -> None:
    """Lower the calling thread's priority by :data:`NICE` (Linux, where a thread is a task; elsewhere nothing)."""
    import os

    tid = getattr(threading.current_thread(), "native_id", None)
    if tid is None or not hasattr(os, "setpriority"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + NICE)
    except OSError:  # not allowed here: the worker runs at the training's priority
        pass
