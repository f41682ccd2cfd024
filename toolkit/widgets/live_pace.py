"""The count, time spent and time left of a live pass (:class:`toolkit.widgets.live_pass.LivePass`).

No widget here: :class:`Pace` is fed the pass's ``progress(done, total, name)`` reports and a clock
(``time.monotonic`` or a fake one in tests), and says how far the whole run is, one or several
segments long (a first look, then the pass; a Stop, then a Resume).

The time left comes only from tensors this run **computed**: a tensor measured by an earlier segment of
the run comes back from the result cache in a burst when the next segment starts, and counting it as
pace made the estimate 2x too low after a Resume and "about 0 s left" at 2 of 28. The pace is seconds
per unit of work (each tensor's from the plan's shapes: :func:`toolkit.widgets.live_pass.work_of`), so
two small matrices measured first do not promise the large ones at their speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def clock(seconds: float) -> str:
    """``seconds`` as ``m:ss`` past a minute, else ``N s``."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds} s"


def time_left(seconds: float) -> str:
    """An estimate of the time left as words (``about 1:05 left``; never ``about 0 s`` while work is left)."""
    return "less than 1 s left" if seconds < 0.5 else f"about {clock(seconds)} left"


class Pace:
    """Counts and times of one run of a live pass, over its segments.

    Parameters
    ----------
    sizes : dict of str to int, optional
        The work of each tensor the run measures (its plan, selection applied: entries, or entries times
        the smaller side); the count and the time left are then the run's, whatever segment reports.
        Without it: the reported ``done / total`` and a pace per tensor.
    now : callable, default time.monotonic
        The clock.
    known : iterable of str, optional
        Tensors an earlier run of the same source measured (a wider selection finds them in the cache).
        A tensor cached by another session cannot be told from a computed one here: it counts as a very
        fast one.

    Attributes
    ----------
    finished : set of str
        Tensors measured by the run (computed or from the cache).
    computed : int
        How many of them this run computed (the others came from the cache).
    """

    def __init__(self, sizes: dict[str, int] | None = None, *, now: Callable[[], float] = time.monotonic,
                 known=()):
        self.sizes = dict(sizes or {})
        self.now = now
        self.finished: set[str] = set()
        self._known = frozenset(known)
        self._before: set[str] = set(self._known)  # what earlier segments measured: from the cache in this one
        self.computed = 0
        self._seconds = 0.0  # spent computing the tensors whose work is in _work
        self._work = 0
        self._active = 0.0  # seconds of the segments that ended
        self._segment: float | None = None  # start of the running segment
        self._last = 0.0  # the last report (or the segment's start)
        self._reported = (0, 0)  # the last (done, total) a pass reported

    # -- feeding --------------------------------------------------------------
    def begin(self) -> None:
        """A segment starts (the first look, the pass, a Resume)."""
        self._segment = self._last = self.now()
        self._before = self._known | self.finished

    def report(self, done: int, total: int, name: str = "") -> None:
        """A pass's ``progress(done, total, name)``: one more tensor stored, computed or from the cache."""
        t = self.now()
        self._reported = (int(done), int(total))
        if self._segment is None:
            self.begin()
        if name not in self._before and name not in self.finished:
            self.computed += 1
            self._seconds += t - self._last
            self._work += self.sizes.get(name, 1) if self.sizes else 1
        self.finished.add(name)
        self._last = t

    def end(self) -> None:
        """The running segment ends (done, stopped or failed): its time counts, no time is left."""
        if self._segment is not None:
            self._active += self.now() - self._segment
            self._segment = None

    # -- reading --------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._segment is not None

    @property
    def total(self) -> int:
        return len(self.sizes) if self.sizes else self._reported[1]

    @property
    def done(self) -> int:
        return len(self.finished & self.sizes.keys()) if self.sizes else self._reported[0]

    @property
    def from_cache(self) -> int:
        """Tensors of the run that a segment found in the cache rather than computed."""
        return max(self.done - self.computed, 0)

    def elapsed(self) -> float:
        """Seconds the run has been measuring, every segment (not the time between a Stop and a Resume)."""
        return self._active + (self.now() - self._segment if self._segment is not None else 0.0)

    def eta(self) -> float | None:
        """Seconds left at the pace of the computed tensors; None before the first one is computed, when
        nothing runs (after a Stop) or when all is done."""
        if not self.running or not self._work or self.done >= self.total:
            return None
        if self.sizes:
            left = sum(n for name, n in self.sizes.items() if name not in self.finished)
        else:
            left = self.total - self.done
        return self._seconds / self._work * left

    def line(self, name: str = "") -> str:
        """The progress line: ``12 / 28 tensors · 0:41 · about 1:05 left · <tensor>``."""
        eta = self.eta()
        left = f" · {time_left(eta)}" if eta is not None else ""
        tail = f" · {name[-60:]}" if name else ""
        return f"{self.done} / {self.total} tensors · {clock(self.elapsed())}{left}{tail}"

    def summary(self) -> str:
        """The whole run in words: ``28 tensors (8 from the cache) in 1:23``."""
        cached = f" ({self.from_cache} from the cache)" if self.from_cache else ""
        return f"{self.done} tensors{cached} in {clock(self.elapsed())}"
