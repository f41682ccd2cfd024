"""A pass of :func:`toolkit.weight_stats` watched while it runs: the thread, Stop and Resume, the cells
so far and the progress of the whole run. No widget here: the panel of
:func:`toolkit.widgets.explore_model` listens to it (``on_event``), and a test drives it in plain pytest.

A run is one source and selection, measured in one or more segments: a large model's first look (its
smallest matrices, every layer), then the pass over the rest (which finds the first look in the result
cache); a Stop ends a segment after the tensor being measured, a Resume starts the next one (the
finished cells come from the cache). The cells offered to the view only ever grow: a segment's first
Datasets, with fewer cells than the view shows, are never offered.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable

from toolkit.errors import PassStopped
from toolkit.widgets.live_pace import Pace
from toolkit.widgets.live_plan import (
    PLAN_OPTIONS,
    SELECTION_KEYS,
    covers,
    first_look,
    is_large,
    look_fixed,
    needs_spectra,
    same_source,
    tensor_sizes,
)
from toolkit.widgets.live_probe import probe_rates
from toolkit.widgets.live_status import LiveStatus, PassState, StatusSnapshot

#: What ``on_event(kind, live)`` hears: a segment starts, the first look starts, a tensor is stored, cells to
#: show, Stop asked (at once, while the tensor being measured finishes), the segment ended (``live.state``).
EVENTS = ("started", "first_look", "progress", "cells", "stopping", "ended")


class LivePass:
    """One source and selection measured in the background, stoppable and resumable.

    Parameters
    ----------
    source, metrics
        As :func:`toolkit.weight_stats` takes them.
    stats_kws : dict, optional
        Its other options (``layers``, ``components``, ``experts``, ``cache`` ...).
    refresh : float, default 0.5
        Least seconds between two ``"cells"`` events (the first cells at once).
    on_event : callable, optional
        ``on_event(kind, live)`` for each of :data:`EVENTS`, in the pass's thread (``"stopping"`` in the
        caller's).
    now : callable, default time.monotonic
        The clock (of the progress, the time left and ``refresh``).

    Attributes
    ----------
    status : LiveStatus
        The one locked status the pass's thread writes; the view reads :meth:`snapshot`. ``state``, ``pace``,
        ``look``, ``error``, ``first_cells_s`` and ``name`` read its fields.
    state : PassState
        ``"idle"``, ``"running"``, ``"done"``, ``"stopped"`` or ``"failed"`` (a str enum: equal to these).
    pace : Pace
        The run's count, time spent and time left.
    plan
        The checkpoint's plan (None before the first segment or when it cannot be made).
    look : tuple of str or None
        The components of the first look, while it runs.
    error : Exception or None
    first_cells_s : float or None
        Seconds from the segment's start to its first cells offered.
    name : str
        The last tensor stored.
    """

    def __init__(self, source=None, metrics=None, *, stats_kws=None, refresh=0.5,
                 on_event: Callable | None = None, now: Callable[[], float] = time.monotonic):
        self.source, self.metrics, self.refresh, self.now = source, metrics, refresh, now
        self.stats_kws = {k: v for k, v in (stats_kws or {}).items() if not (k in SELECTION_KEYS and v is None)}
        self.on_event = on_event
        self.plan = None
        self.status = LiveStatus(Pace(now=now))
        self._new_run = True
        self._result = self._best = self._latest = None
        self._best_units = self._units = 0  # tensors stored when _best was taken, and so far in this call
        self._last_offer = self._started = 0.0
        self._thread: threading.Thread | None = None
        self._stop, self._done = threading.Event(), threading.Event()
        self._done.set()
        self._lock = threading.Lock()
        self._offering = threading.Lock()  # the pass's thread and the trailing offer's timer
        self._trailing: threading.Timer | None = None
        self._callbacks: list = []
        self._known: frozenset = frozenset()  # tensors measured by earlier runs of this source

    # -- the status -------------------------------------------------------------
    def snapshot(self) -> StatusSnapshot:
        """The pass's state, count and clock taken at one moment (:meth:`LiveStatus.snapshot`)."""
        return self.status.snapshot()

    state = property(lambda self: self.status.read("state"), doc="The :class:`PassState` (LiveStatus).")
    error = property(lambda self: self.status.read("error"), doc="What the segment failed with, or None.")
    look = property(lambda self: self.status.read("look"), doc="The first look's components, while it runs.")
    first_cells_s = property(lambda self: self.status.read("first_cells_s"), doc="Seconds to the first cells.")
    name = property(lambda self: self.status.read("name"), doc="The last tensor stored.")
    pace = property(lambda self: self.status.pace, doc="The run's :class:`Pace`.")

    # -- control --------------------------------------------------------------
    def start(self, *, source=..., layers=..., components=..., experts=..., background: bool = False) -> LivePass:
        """(Re)start: another ``source`` or selection starts a new run; the same one after a Stop or a
        failure resumes the run (its finished cells come from the cache). In a thread with ``background``."""
        self._join()
        previous = self.source
        changed = source is not ... and not same_source(source, self.source)
        if source is not ...:
            self.source = source
        for key, value in (("layers", layers), ("components", components), ("experts", experts)):
            if value is not ... and value != self.stats_kws.get(key):
                changed = True
                self.stats_kws.pop(key, None)
                if value is not None:
                    self.stats_kws[key] = value
        if changed or self.state in (PassState.IDLE, PassState.DONE):
            same = self.state != PassState.IDLE and same_source(self.source, previous)
            self._known = self._known | self.pace.finished if same else frozenset()  # in the cache
            self._new_run, self._best, self._best_units, self.plan = True, None, 0, None
        self._stop.clear()
        self._done.clear()
        self._result = None
        self.status.update(state=PassState.RUNNING, error=None, first_cells_s=None, stopping=False)
        if background:
            self._thread = threading.Thread(target=self._run, name="toolkit-live-pass", daemon=True)
            self._thread.start()
        else:
            self._run()
        return self

    def stop(self) -> None:
        """Stop after the tensor being measured (the finished cells stay, and are cached); says so at once."""
        if self.state == PassState.RUNNING and not self._stop.is_set():
            self._stop.set()
            self.status.update(stopping=True)
            self._emit("stopping")

    def fail(self, err: BaseException) -> None:
        """End the run with ``err`` (the form's text is no selection): a running segment stops first, and
        ``.ds`` / :meth:`wait` raise ``err``."""
        self._join()
        self._done.clear()
        self._result = None
        self.status.update(state=PassState.FAILED, error=err)
        self._end()

    @property
    def stopping(self) -> bool:
        """Stop was asked and the tensor being measured is not finished yet."""
        return self.state == PassState.RUNNING and self._stop.is_set()

    def _join(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            self._thread.join()

    # -- results ---------------------------------------------------------------
    def wait(self, timeout: float | None = None):
        """Wait for the segment; return the run's Dataset (the finished cells after a Stop).

        Raises
        ------
        TimeoutError
            Still running after ``timeout`` seconds.
        Whatever :func:`toolkit.weight_stats` raised.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the pass over {self.what} is still running")
        if self.error is not None:
            raise self.error
        return self._result

    def outcome(self):
        """The Dataset of the segment that ended, without waiting (for :meth:`when_done` callbacks, which
        run before :meth:`wait` returns); None while one runs.

        Raises
        ------
        Whatever :func:`toolkit.weight_stats` raised.
        """
        if self.error is not None:
            raise self.error
        return None if self.state == PassState.RUNNING else self._result

    @property
    def ds(self):
        """The statistics: waits for the pass (a stopped pass gives the cells it finished)."""
        return self.wait()

    @property
    def partial(self):
        """The Dataset of the cells finished so far (None before the first): it never loses a cell."""
        return self._result if self._result is not None else self._best

    @property
    def done(self) -> bool:
        """No segment is running."""
        return self._done.is_set()

    def when_done(self, callback: Callable) -> None:
        """``callback(live)`` once the segment running ends (at once when none runs), in the pass's thread."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    @property
    def what(self) -> str:
        return str(self.source) if self.source is not None else "the embedded default model"

    # -- the segment -------------------------------------------------------------
    def _emit(self, kind: str) -> None:
        if self.on_event is not None:
            self.on_event(kind, self)

    def _run(self) -> None:
        import toolkit

        self._started = self._last_offer = self.now()
        try:
            if self._new_run:
                self.plan = self._open_plan()
                spectra = needs_spectra(self.metrics, self.stats_kws)
                sizes = tensor_sizes(self.plan, self.stats_kws, spectra=spectra)
                # a pass of large matrices starts with tensors of one smaller side: the probe tells its clock
                # what the singular values cost here (a pass of small ones is over in seconds and skips it)
                large = spectra and is_large(sizes)
                probe = _probe(self.stats_kws.get("precision") or "float64") if large else None
                self.status.use(Pace(sizes, now=self.now, known=self._known, probe=probe))
                self._new_run = False
            self.pace.begin()
            self._emit("started")
            self._first_look()
            self._units = 0
            ds = toolkit.weight_stats(self.source, self.metrics, progress=self._progress,
                                      on_cells=lambda p: self._cells(p), **self.stats_kws)
        except PassStopped:
            self._stopped()
        except Exception as err:  # noqa: BLE001 - shown by the panel, raised again by .ds / wait()
            self.status.update(state=PassState.FAILED, error=err)
        else:
            self._cancel_trailing()  # the whole result, not a timer's partial, is what the view keeps
            self._best = self._result = ds
            self.status.update(state=PassState.DONE)
        finally:
            self._cancel_trailing()
            self.status.update(look=None)
            self.pace.end()
            self._end()

    def _end(self) -> None:
        """Say the segment ended, run the :meth:`when_done` callbacks, then let :meth:`wait` return."""
        self._emit("ended")
        while True:
            with self._lock:
                callbacks, self._callbacks = self._callbacks, []
                if not callbacks:
                    self._done.set()
                    return
            for callback in callbacks:
                try:
                    callback(self)
                except Exception as err:  # noqa: BLE001 - one callback's failure must not hold wait()
                    warnings.warn(f"a when_done callback of the pass over {self.what} failed: {err!r}",
                                  RuntimeWarning, stacklevel=1)

    def _stopped(self) -> None:
        if self._latest is not None:
            with self._offering:
                self._offer(self._latest())
        ds = self._best
        if ds is not None:
            ds = ds.copy()
            ds.attrs["stopped"] = f"after {self.pace.done} of {self.pace.total} tensors"
        self._result = ds
        self.status.update(state=PassState.STOPPED)

    def _open_plan(self):
        """The checkpoint's plan (cached: the pass reads it again for free): which matrices the model
        has and their shapes. None when it cannot be made here (the pass then says why)."""
        from toolkit.collect.plan import plan_pieces
        from toolkit.errors import ToolkitError
        from toolkit.sources import SourceRequest

        try:
            return plan_pieces(SourceRequest.from_options(self.source, self.stats_kws),
                               **{k: self.stats_kws[k] for k in PLAN_OPTIONS if k in self.stats_kws})
        except (ToolkitError, OSError):
            return None

    def _first_look(self) -> None:
        """Measure a large model's smallest components first, every layer (:func:`first_look`); not on a
        Resume, whose view already holds cells."""
        import toolkit

        look = first_look(self.plan, self.stats_kws) if self._best is None else None
        if look is None:
            return
        self._units = 0
        self.status.update(look=look)
        self._emit("first_look")
        toolkit.weight_stats(self.source, self.metrics, progress=self._progress, fill=True, components=look,
                             on_cells=lambda p: self._cells(lambda: look_fixed(p())), **self.stats_kws)
        self.status.update(look=None)

    def _progress(self, done: int, total: int, name: str = "") -> None:
        self.status.report(done, total, name)
        self._emit("progress")

    def _cells(self, partial) -> None:
        """``on_cells`` of a pass: stop if asked; offer the cells at most every ``refresh`` s (the first at once),
        and the cells held back by that limit ``refresh`` s after the last offer, whether or not another tensor
        has come by then (a large tensor measured next held them back for its whole time: a first look's
        progress line ran 11 s ahead of its picture)."""
        self._units += 1
        self._latest = partial  # stored: shown after a Stop too
        if self._stop.is_set():
            raise PassStopped
        if self._units < self._best_units:  # still the cached burst of cells already on view: nothing new
            return
        wait = self.refresh - (self.now() - self._last_offer) if self._best is not None else 0.0
        if wait > 0:
            self._offer_later(wait)
            return
        with self._offering:
            self._offer(partial())

    def _offer_later(self, wait: float) -> None:
        """Offer the latest cells in ``wait`` s from a timer thread (one at a time: a later call finds it set)."""
        with self._offering:
            if self._trailing is None:
                self._trailing = threading.Timer(wait, self._offer_trailing)
                self._trailing.daemon = True
                self._trailing.start()

    def _offer_trailing(self) -> None:
        with self._offering:
            self._trailing = None
            latest = self._latest
            if latest is not None and self.state == PassState.RUNNING and self._units > self._best_units:
                self._offer(latest())  # the pass's cells so far: a copy of its finished dict, taken at once

    def _cancel_trailing(self) -> None:
        with self._offering:
            if self._trailing is not None:
                self._trailing.cancel()
                self._trailing = None

    def _offer(self, ds) -> None:
        """Make ``ds`` the cells so far if it loses none of them, and say so (under ``_offering``)."""
        if not covers(ds, self._best):
            return
        self._best, self._best_units, self._last_offer = ds, max(self._units, 1), self.now()
        if self.first_cells_s is None:
            self.status.update(first_cells_s=self._last_offer - self._started)
        self._emit("cells")


def _probe(precision: str):
    """:func:`~toolkit.widgets.live_probe.probe_rates`, or None where it fails (the clock then fits the pass's
    own times; a probe never stops a pass)."""
    try:
        return probe_rates(precision)
    except Exception as err:  # noqa: BLE001 - the clock's guess, not the measurement
        warnings.warn(f"the live pass's clock could not probe this machine ({err!r}); it estimates from the "
                      "pass's own times", RuntimeWarning, stacklevel=2)
        return None
