"""The count, time spent and time left of a live pass (:class:`toolkit.widgets.live_pass.LivePass`).

No widget here: :class:`Pace` is fed the pass's ``progress(done, total, name)`` reports and a clock
(``time.monotonic`` or a fake one in tests), and says how far the whole run is, one or several
segments long (a first look, then the pass; a Stop, then a Resume).

The time left comes only from tensors this run **computed**: a tensor measured by an earlier segment of
the run comes back from the result cache in a burst when the next segment starts, and counting it as
pace made the estimate 2x too low after a Resume and "about 0 s left" at 2 of 28. The time left is
:func:`toolkit.widgets.live_clock.seconds_left` of a :class:`~toolkit.widgets.live_clock.PassStatus`
snapshot: each tensor's cost from the plan's shapes (entries, and entries times the smaller side), its two
rates fitted to the tensors computed so far, so two small matrices measured first do not promise the large
ones at their speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from toolkit.widgets.live_clock import Cost, PassStatus, ProbeRates, seconds_left


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
    sizes : dict of str to Cost or int, optional
        The cost of each tensor the run measures (its plan, selection applied:
        :func:`toolkit.widgets.live_clock.cost_of`; a number is one unit of work of either kind); the count
        and the time left are then the run's, whatever segment reports. Without it: the reported
        ``done / total`` and a pace per tensor.
    now : callable, default time.monotonic
        The clock.
    known : iterable of str, optional
        Tensors an earlier run of the same source measured (a wider selection finds them in the cache).
        A tensor cached by another session cannot be told from a computed one here: it counts as a very
        fast one.
    probe : ProbeRates, optional
        This machine's rates for the singular values (:func:`toolkit.widgets.live_probe.probe_rates`): the
        time left is then the scheduled clock of :func:`toolkit.widgets.live_clock.scheduled_left`.

    Attributes
    ----------
    finished : set of str
        Tensors measured by the run (computed or from the cache).
    computed : int
        How many of them this run computed (the others came from the cache).
    segments : list of float
        Seconds of each segment that ended (a first look and the pass, a Stop and a Resume ...).
    """

    def __init__(self, sizes: dict[str, int] | None = None, *, now: Callable[[], float] = time.monotonic,
                 known=(), probe: ProbeRates | None = None):
        self.probe = probe
        self.sizes = {k: v if isinstance(v, Cost) else Cost(v, v) for k, v in (sizes or {}).items()}
        self.now = now
        self.finished: set[str] = set()
        self._known = frozenset(known)
        self._before: set[str] = set(self._known)  # what earlier segments measured: from the cache in this one
        self.computed = 0
        self._measured: list[tuple[Cost, float]] = []  # each computed tensor's cost and seconds
        self.segments: list[float] = []  # seconds of each segment that ended
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
            self._measured.append((self.sizes.get(name, Cost(1, 1)), t - self._last))
        self.finished.add(name)
        self._last = t

    def end(self) -> None:
        """The running segment ends (done, stopped or failed): its time counts, no time is left."""
        if self._segment is not None:
            self.segments.append(self.now() - self._segment)
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
        return sum(self.segments) + (self.now() - self._segment if self._segment is not None else 0.0)

    def status(self) -> PassStatus:
        """The snapshot the clock reads: the computed tensors with their seconds, the tensors left, running."""
        if self.sizes:
            left = tuple(c for name, c in self.sizes.items() if name not in self.finished)
        else:
            left = (Cost(1, 1),) * max(self.total - self.done, 0)
        return PassStatus(tuple(self._measured), left, self.running, self.probe)

    def eta(self) -> float | None:
        """Seconds left at the rates fitted to the computed tensors (:func:`~toolkit.widgets.live_clock.
        seconds_left`); None before the first one is computed, when nothing runs (after a Stop) or when all
        is done."""
        return seconds_left(self.status())

    def line(self, name: str = "") -> str:
        """The progress line: ``12 / 28 tensors · 0:41 · about 1:05 left · <tensor>``; once the run has
        stopped or ended, how many came from the cache instead of the time left."""
        eta = self.eta()
        left = f" · {time_left(eta)}" if eta is not None else ""
        if not self.running and self.from_cache:
            left = f" · {self.from_cache} from the cache"
        tail = f" · {name[-60:]}" if name else ""
        return f"{self.done} / {self.total} tensors · {clock(self.elapsed())}{left}{tail}"

    def summary(self) -> str:
        """The whole run in words: ``28 tensors (8 from the cache) in 1:23``, and with several segments
        ``in 1:23 over 2 segments (0:12 + 1:11)``."""
        cached = f" ({self.from_cache} from the cache)" if self.from_cache else ""
        parts = [clock(t) for t in self.segments] + ([clock(self.now() - self._segment)] if self.running else [])
        over = f" over {len(parts)} segments ({' + '.join(parts)})" if len(parts) > 1 else ""
        return f"{self.done} tensors{cached} in {clock(self.elapsed())}{over}"
